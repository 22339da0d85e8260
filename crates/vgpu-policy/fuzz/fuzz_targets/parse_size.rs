#![no_main]

use libfuzzer_sys::fuzz_target;
use vgpu_policy::size::{format_size, parse_size};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    // Must never panic; whatever it accepts must be consistent.
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
});
