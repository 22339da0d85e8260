use proptest::prelude::*;
use vgpu_policy::size::{SizeErrorKind, format_size, parse_size};

const SUFFIXES: &[(&str, u32)] = &[
    ("", 0),
    ("b", 0),
    ("B", 0),
    ("k", 10),
    ("K", 10),
    ("Ki", 10),
    ("KiB", 10),
    ("kb", 10),
    ("m", 20),
    ("M", 20),
    ("Mi", 20),
    ("MiB", 20),
    ("mB", 20),
    ("g", 30),
    ("G", 30),
    ("Gi", 30),
    ("GiB", 30),
    ("gb", 30),
    ("GIB", 30),
    ("t", 40),
    ("T", 40),
    ("Ti", 40),
    ("TiB", 40),
    ("tb", 40),
    ("p", 50),
    ("P", 50),
    ("Pi", 50),
    ("PiB", 50),
    ("pb", 50),
];

/// Numbers weighted towards the interesting edges (small, near overflow thresholds, huge).
fn number() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..4096,
        any::<u64>(),
        (0u32..64).prop_flat_map(|bits| {
            let base = 1u64 << bits;
            (base.saturating_sub(2)..=base.saturating_add(2)).boxed()
        }),
    ]
}

proptest! {
    #[test]
    fn plain_number_round_trips(n in any::<u64>()) {
        prop_assert_eq!(parse_size(&format!("{n}")), Ok(n));
    }

    #[test]
    fn suffix_scales_or_overflows(n in number(), i in 0..SUFFIXES.len(), pad in "[ \t]{0,2}") {
        let (suffix, shift) = SUFFIXES[i];
        let input = format!("{pad}{n}{suffix}{pad}");
        let got = parse_size(&input);
        if shift == 0 || n <= u64::MAX >> shift {
            prop_assert_eq!(got, Ok(n << shift), "input {:?}", input);
        } else {
            prop_assert_eq!(got.map_err(|e| e.kind()), Err(SizeErrorKind::Overflow), "input {:?}", input);
        }
    }

    #[test]
    fn never_panics(s in "\\PC{0,24}") {
        let _ = parse_size(&s);
    }

    #[test]
    fn accepted_strings_are_canonical(s in "[0-9]{1,22}[kKmMgGtTpPiIbB]{0,3}") {
        // Whatever parses must equal the plain-number reading of its digits scaled by the unit.
        if let Ok(v) = parse_size(&s) {
            let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
            let n: u128 = digits.parse().unwrap();
            let unit = s[digits.len()..].chars().next().map(|c| c.to_ascii_lowercase());
            let shift = match unit { Some('k') => 10, Some('m') => 20, Some('g') => 30, Some('t') => 40, Some('p') => 50, _ => 0 };
            prop_assert_eq!(u128::from(v), n << shift);
        }
    }

    #[test]
    fn format_is_close(n in any::<u64>()) {
        let text = format_size(n);
        let (num, unit) = text.split_once(' ').unwrap();
        let shift = match unit { "B" => 0, "KiB" => 10, "MiB" => 20, "GiB" => 30, "TiB" => 40, "PiB" => 50, "EiB" => 60, other => panic!("{other}") };
        let value: f64 = num.parse().unwrap();
        let back = value * (1u128 << shift) as f64;
        prop_assert!((back - n as f64).abs() <= (1u128 << shift) as f64 / 100.0 + 1.0, "{} -> {}", n, text);
        if !num.contains('.') {
            prop_assert_eq!(parse_size(&text.replace(' ', "")), Ok(n));
        }
    }
}
