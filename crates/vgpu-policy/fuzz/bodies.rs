// The fuzz targets' bodies, shared (by `include!`) between the cargo-fuzz targets
// (`fuzz_targets/*.rs`, nightly) and the stable test `tests/fuzz_bodies.rs`, which runs them
// over a corpus and generated inputs on every `cargo test`: CI has no nightly toolchain.

/// `parse_size` never panics, and whatever it accepts is consistent.
pub fn fuzz_parse_size(data: &[u8]) {
    use vgpu_policy::size::{format_size, parse_size};
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(n) = parse_size(s) {
        // The plain byte count of the result parses back to the same value.
        assert_eq!(parse_size(&n.to_string()), Ok(n));
        // Accepted input is digits + an optional suffix of at most 3 ASCII letters.
        let t = s.trim_ascii();
        let digits = t.bytes().take_while(u8::is_ascii_digit).count();
        assert!(digits > 0 && t.len() - digits <= 3, "{s:?}");
        // An exact format_size parses back once its space is removed.
        let text = format_size(n);
        if !text.contains('.') {
            assert_eq!(parse_size(&text.replace(' ', "")), Ok(n), "{text}");
        }
    }
}

/// Newline-separated NAME=VALUE lines, like an environment, through `Config::from_vars`: no
/// panic, the invariants hold, an error stays one line.
pub fn fuzz_config(data: &[u8]) {
    use vgpu_policy::config::Config;
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let vars = s.lines().filter_map(|l| l.split_once('='));
    match Config::from_vars(vars) {
        Ok(c) => {
            assert!(c.log_level <= vgpu_policy::config::MAX_LOG_LEVEL);
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
}
