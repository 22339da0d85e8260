#![no_main]

use libfuzzer_sys::fuzz_target;
use vgpu_policy::config::Config;

// Newline-separated NAME=VALUE lines, like an environment.
fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let vars = s.lines().filter_map(|l| l.split_once('='));
    match Config::from_vars(vars) {
        Ok(c) => {
            assert!(c.log_level <= 4);
            assert!(c.memory_limit_by_index.windows(2).all(|w| w[0].0 < w[1].0));
            assert!(
                c.sm_limit_by_index
                    .iter()
                    .all(|&(i, p)| i <= 63 && p.is_none_or(|p| (1..=100).contains(&p)))
            );
            assert!(c.memory_limit_all != Some(0));
        }
        Err(e) => assert!(!e.to_string().contains('\n')),
    }
});
