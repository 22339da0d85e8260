//! Output that survives a closed pipe, and the formats of numbers, times and tables.

use std::io::Write;

use vgpu_policy::size::format_size;

use crate::error::{Error, Result};

/// Writes `bytes` to stdout. A reader that went away (`vgpu status | head`) is
/// [`Error::Closed`], which ends the command quietly and successfully.
pub fn write_stdout(bytes: &[u8]) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(Error::Closed),
        Err(e) => Err(Error::io("writing to stdout", e)),
    }
}

/// A size, or `none`.
pub fn size_or_none(v: Option<u64>) -> String {
    v.map_or_else(|| "none".to_owned(), format_size)
}

/// Nanoseconds as seconds with millisecond precision.
pub fn secs(ns: u64) -> String {
    format!("{:.3}s", ns as f64 / 1e9)
}

/// Unix seconds as UTC `YYYY-MM-DD HH:MM:SS`.
pub fn utc(t: u64) -> String {
    if t == 0 {
        return "-".to_owned();
    }
    let days = (t / 86_400).cast_signed();
    let rem = t % 86_400;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Unix milliseconds as UTC `YYYY-MM-DD HH:MM:SS.mmm`.
pub fn utc_ms(ms: u64) -> String {
    if ms < 1000 {
        return "-".to_owned();
    }
    format!("{}.{:03}", utc(ms / 1000), ms % 1000)
}

/// Left-aligned text table: each row's cells padded to the column's widest.
pub fn table(rows: &[Vec<String>]) -> String {
    let mut widths = Vec::new();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if widths.len() <= i {
                widths.push(0);
            }
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(c);
            } else {
                line.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "-");
        assert_eq!(utc(1), "1970-01-01 00:00:01");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00");
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13:20");
    }

    #[test]
    fn tables_align() {
        let t = table(&[
            vec!["A".into(), "BB".into(), "C".into()],
            vec!["long".into(), "x".into(), "y".into()],
        ]);
        assert_eq!(t, "A     BB  C\nlong  x   y\n");
    }
}
