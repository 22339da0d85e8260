//! HAMi-compatible memory sizes.
//!
//! Accepted: a plain byte count (`1073741824`) or a decimal number followed by a binary
//! suffix, case-insensitive: `k`, `m`, `g`, `t`, `p`, optionally followed by `i` and/or `b`
//! (`1g`, `1024m`, `1048576k`, `1G`, `1Gi`, `1GiB`, `1gb`, `1ib`... all mean 1 GiB for `g`).
//! A bare `b` suffix (`512b`) means bytes. Surrounding ASCII whitespace is ignored; there must be
//! no whitespace between the number and the suffix.

use std::fmt;

/// What was wrong with a size string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SizeErrorKind {
    /// The string is empty (or only whitespace).
    Empty,
    /// The number has a sign (`-5g`, `+5g`); sizes are unsigned and written without one.
    Sign,
    /// The number has a fractional part (`1.5g`); only whole numbers are accepted.
    Decimal,
    /// There is no number before the suffix (`g`, `abc`).
    MissingNumber,
    /// The text after the number is not a known suffix (`12zz`).
    BadSuffix,
    /// The value does not fit in 64 bits.
    Overflow,
}

/// Error returned by [`parse_size`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeError {
    kind: SizeErrorKind,
}

impl SizeError {
    /// What was wrong.
    pub fn kind(&self) -> SizeErrorKind {
        self.kind
    }
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.kind {
            SizeErrorKind::Empty => "empty size",
            SizeErrorKind::Sign => "a size takes no sign",
            SizeErrorKind::Decimal => "a size must be a whole number",
            SizeErrorKind::MissingNumber => "a size must start with a number",
            SizeErrorKind::BadSuffix => {
                "unknown suffix (use k, m, g, t or p, optionally with i and/or b)"
            }
            SizeErrorKind::Overflow => "size too large (over 16 EiB)",
        })
    }
}

impl std::error::Error for SizeError {}

fn err(kind: SizeErrorKind) -> SizeError {
    SizeError { kind }
}

/// Parses a size in bytes. See the [module docs](self) for the accepted forms.
///
/// Does not allocate.
pub fn parse_size(s: &str) -> Result<u64, SizeError> {
    let s = s.trim_ascii();
    let bytes = s.as_bytes();
    match bytes.first() {
        None => return Err(err(SizeErrorKind::Empty)),
        Some(b'+' | b'-') => return Err(err(SizeErrorKind::Sign)),
        Some(b'.') => return Err(err(SizeErrorKind::Decimal)),
        Some(c) if !c.is_ascii_digit() => return Err(err(SizeErrorKind::MissingNumber)),
        Some(_) => {}
    }
    let digits = bytes.iter().take_while(|c| c.is_ascii_digit()).count();
    let (number, suffix) = bytes.split_at(digits);
    if suffix.first() == Some(&b'.') {
        return Err(err(SizeErrorKind::Decimal));
    }
    let shift = suffix_shift(suffix).ok_or(err(SizeErrorKind::BadSuffix))?;
    let mut value: u64 = 0;
    for &d in number {
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(d - b'0')))
            .ok_or(err(SizeErrorKind::Overflow))?;
    }
    if shift > 0 && value > (u64::MAX >> shift) {
        return Err(err(SizeErrorKind::Overflow));
    }
    Ok(value << shift)
}

/// Shift for a suffix: "" or "b" → 0; k/m/g/t/p, then optional `i`, then optional `b`.
fn suffix_shift(suffix: &[u8]) -> Option<u32> {
    let Some((&unit, rest)) = suffix.split_first() else {
        return Some(0);
    };
    let shift = match unit.to_ascii_lowercase() {
        b'b' if rest.is_empty() => return Some(0),
        b'k' => 10,
        b'm' => 20,
        b'g' => 30,
        b't' => 40,
        b'p' => 50,
        _ => return None,
    };
    let rest = match rest.split_first() {
        Some((c, r)) if c.eq_ignore_ascii_case(&b'i') => r,
        _ => rest,
    };
    match rest {
        [] => Some(shift),
        [c] if c.eq_ignore_ascii_case(&b'b') => Some(shift),
        _ => None,
    }
}

const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];

/// Formats a byte count for people: the largest binary unit not above the value, as a whole
/// number when exact (`"4 GiB"`, `"303 MiB"`, `"512 B"`), else with two decimals (`"1.50 GiB"`).
pub fn format_size(bytes: u64) -> String {
    let mut unit = 0;
    while unit + 1 < UNITS.len() && bytes >> (10 * (unit + 1)) != 0 {
        unit += 1;
    }
    let shift = 10 * unit; // at most 60
    let name = UNITS[unit];
    if bytes & ((1u64 << shift) - 1) == 0 {
        return format!("{} {}", bytes >> shift, name);
    }
    // Hundredths, rounded half up, computed exactly in 128 bits.
    let divisor = 1u128 << shift;
    let hundredths = (u128::from(bytes) * 100 + divisor / 2) / divisor;
    format!("{}.{:02} {}", hundredths / 100, hundredths % 100, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn accepted_forms() {
        let table: &[(&str, u64)] = &[
            ("0", 0),
            ("1", 1),
            ("1073741824", GIB),
            ("1g", GIB),
            ("1024m", GIB),
            ("1048576k", GIB),
            ("1G", GIB),
            ("1Gi", GIB),
            ("1GiB", GIB),
            ("1gib", GIB),
            ("1GIB", GIB),
            ("1gb", GIB),
            ("1GB", GIB),
            ("1gI", GIB),
            ("  1g  ", GIB),
            ("\t1g\n", GIB),
            ("007g", 7 * GIB),
            ("512b", 512),
            ("512B", 512),
            ("1k", 1 << 10),
            ("1K", 1 << 10),
            ("1KiB", 1 << 10),
            ("1kb", 1 << 10),
            ("1m", 1 << 20),
            ("1MB", 1 << 20),
            ("1t", 1 << 40),
            ("1Ti", 1 << 40),
            ("1p", 1 << 50),
            ("1PiB", 1 << 50),
            ("0g", 0),
            ("18446744073709551615", u64::MAX),
            ("16383p", 16383 << 50),
            ("16777215t", 16_777_215 << 40),
            ("17179869183g", 17_179_869_183 << 30),
        ];
        for &(input, want) in table {
            assert_eq!(parse_size(input), Ok(want), "input {input:?}");
        }
    }

    #[test]
    fn rejected_forms() {
        use SizeErrorKind::*;
        let table: &[(&str, SizeErrorKind)] = &[
            ("", Empty),
            ("   ", Empty),
            ("-5g", Sign),
            ("+5g", Sign),
            ("-0", Sign),
            ("1.5g", Decimal),
            ("1.5", Decimal),
            (".5g", Decimal),
            ("1.5.g", Decimal),
            ("12zz", BadSuffix),
            ("abc", MissingNumber),
            ("g", MissingNumber),
            ("Gi", MissingNumber),
            ("1 g", BadSuffix),
            ("1gg", BadSuffix),
            ("1gibb", BadSuffix),
            ("1bi", BadSuffix),
            ("1bb", BadSuffix),
            ("1i", BadSuffix),
            ("1ib", BadSuffix),
            ("1e", BadSuffix),
            ("1x", BadSuffix),
            ("0x10", BadSuffix),
            ("1_000", BadSuffix),
            ("1,000", BadSuffix),
            ("16777216t", Overflow),
            ("16384p", Overflow),
            ("17179869184g", Overflow),
            ("18446744073709551616", Overflow),
            ("99999999999999999999", Overflow),
            ("99999999999999999999g", Overflow),
            ("1１", BadSuffix),
        ];
        for &(input, kind) in table {
            let got = parse_size(input);
            assert_eq!(got.map_err(|e| e.kind()), Err(kind), "input {input:?}");
            assert!(!got.unwrap_err().to_string().is_empty());
        }
    }

    #[test]
    fn format_table() {
        let table: &[(u64, &str)] = &[
            (0, "0 B"),
            (1, "1 B"),
            (512, "512 B"),
            (1023, "1023 B"),
            (1024, "1 KiB"),
            (1536, "1.50 KiB"),
            (303 << 20, "303 MiB"),
            (4 * GIB, "4 GiB"),
            (3 * GIB / 2, "1.50 GiB"),
            (GIB + 1, "1.00 GiB"),
            (GIB - 1, "1024.00 MiB"),
            (1 << 40, "1 TiB"),
            (1 << 50, "1 PiB"),
            (1 << 60, "1 EiB"),
            (u64::MAX, "16.00 EiB"),
        ];
        for &(bytes, want) in table {
            assert_eq!(format_size(bytes), want, "bytes {bytes}");
        }
    }

    #[test]
    fn exact_formats_parse_back() {
        for bytes in [0, 7, 1 << 10, 5 << 20, 303 << 20, 4 * GIB, 9 << 40, 3 << 50] {
            let text = format_size(bytes).replace(' ', "");
            assert_eq!(parse_size(&text), Ok(bytes), "{text}");
        }
    }
}
