#![no_main]

use libfuzzer_sys::fuzz_target;

include!("../bodies.rs");

fuzz_target!(|data: &[u8]| fuzz_parse_size(data));
