//! Shared by the monitor and limit commands: finding and opening region files, device lookup,
//! the JSON form of a snapshot, and number formatting.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use vgpu_policy::size::format_size;
use vgpu_region::{Location, Region, Snapshot, layout};

/// The region at `path`, or the default one ([`location`]), opened without taking a
/// process slot (read-only use of the workload's locks: none).
pub fn open_region(path: Option<&Path>) -> Result<Region, String> {
    let loc = location(path);
    Region::open_existing(&loc).map_err(|e| {
        format!(
            "{e}\n  hint: no vgpu process has created this region yet, or this is not the \
             container's region; pass --region PATH (the CUDA_DEVICE_MEMORY_SHARED_CACHE of the \
             workload)"
        )
    })
}

/// Where `path` (or the default) is: the per-user default path is private, any other shared.
pub fn location(path: Option<&Path>) -> Location {
    match path {
        None => Location::new(
            vgpu_policy::config::Config::from_env()
                .ok()
                .and_then(|c| c.shared_region_path),
        ),
        Some(p) if p == Region::default_path() => Location::private(p),
        Some(p) => Location::shared(p),
    }
}

/// A device given as a region index (`0`, `1`, ...) or a UUID.
pub fn device_index(region: &Region, spec: &str) -> Result<usize, String> {
    let spec = spec.trim();
    if let Ok(i) = spec.parse::<usize>() {
        if i < region.device_count() {
            return Ok(i);
        }
        return Err(format!(
            "device {i}: the region has {} device(s) (indices 0..{}); see `vgpu status`",
            region.device_count(),
            region.device_count()
        ));
    }
    region
        .device_index(spec)
        .ok_or_else(|| format!("device {spec}: no such UUID in the region; see `vgpu status`"))
}

/// `status --json`: the stable schema (bytes, nanoseconds, Unix seconds).
#[derive(Debug, Serialize)]
pub struct StatusJson {
    /// The region file.
    pub region: String,
    /// Devices in region order (`index` is what `vgpu limit --memory-device I=...` takes).
    pub devices: Vec<DeviceJson>,
    /// Live processes.
    pub processes: Vec<ProcessJson>,
}

#[derive(Debug, Serialize)]
pub struct DeviceJson {
    pub index: usize,
    pub uuid: String,
    /// Memory limit, bytes (`null`: none).
    pub limit: Option<u64>,
    /// SM limit, percent (`null`: none).
    pub sm_limit: Option<u8>,
    pub used: u64,
    /// `limit - used`, bytes (`null` without a limit).
    pub free: Option<u64>,
    pub peak: u64,
    pub gpu_ns: u64,
    pub throttled_ns: u64,
    pub denied: u64,
    pub launches: u64,
}

#[derive(Debug, Serialize)]
pub struct ProcessJson {
    pub pid: u32,
    pub slot: usize,
    pub command: String,
    pub start_time: u64,
    pub devices: Vec<ProcessDeviceJson>,
}

#[derive(Debug, Serialize)]
pub struct ProcessDeviceJson {
    pub index: usize,
    pub uuid: String,
    pub used: u64,
    pub peak: u64,
    pub gpu_ns: u64,
    pub throttled_ns: u64,
    pub denied: u64,
    pub launches: u64,
}

impl StatusJson {
    pub fn new(path: &Path, s: &Snapshot) -> Self {
        let at = |v: &[u64], i: usize| v.get(i).copied().unwrap_or(0);
        StatusJson {
            region: path.display().to_string(),
            devices: s
                .devices
                .iter()
                .enumerate()
                .map(|(index, d)| DeviceJson {
                    index,
                    uuid: d.uuid.clone(),
                    limit: d.limit,
                    sm_limit: d.sm_limit,
                    used: d.used,
                    free: d.free,
                    peak: d.peak,
                    gpu_ns: d.gpu_ns,
                    throttled_ns: d.throttled_ns,
                    denied: d.denied,
                    launches: d.launches,
                })
                .collect(),
            processes: s
                .processes
                .iter()
                .map(|p| ProcessJson {
                    pid: p.pid,
                    slot: p.slot,
                    command: p.command.clone(),
                    start_time: p.start_time,
                    devices: s
                        .devices
                        .iter()
                        .enumerate()
                        .map(|(i, d)| ProcessDeviceJson {
                            index: i,
                            uuid: d.uuid.clone(),
                            used: at(&p.used, i),
                            peak: at(&p.peak, i),
                            gpu_ns: at(&p.gpu_ns, i),
                            throttled_ns: at(&p.throttled_ns, i),
                            denied: at(&p.denied, i),
                            launches: at(&p.launches, i),
                        })
                        .collect(),
                })
                .collect(),
        }
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
    let days = (t / 86_400) as i64;
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

/// The region files to watch: the given files, plus every file of the given directories (and
/// their subdirectories, one level down) that has a region's size. Files are opened once and
/// kept while they stay the same file; files that vanish or are replaced are dropped.
#[derive(Default)]
pub struct RegionSet {
    files: Vec<PathBuf>,
    dirs: Vec<PathBuf>,
    open: BTreeMap<PathBuf, ((u64, u64), Region)>,
    /// Errors of the last refresh, per path (explicit files only; directory entries that are
    /// not regions are skipped silently).
    pub errors: Vec<String>,
}

impl RegionSet {
    pub fn new(files: Vec<PathBuf>, dirs: Vec<PathBuf>) -> Self {
        RegionSet {
            files,
            dirs,
            ..Default::default()
        }
    }

    fn candidates(&self) -> Vec<(PathBuf, bool)> {
        let mut out: Vec<(PathBuf, bool)> = self.files.iter().map(|f| (f.clone(), true)).collect();
        for d in &self.dirs {
            scan_dir(d, 1, &mut out);
        }
        out.sort();
        out.dedup_by(|a, b| a.0 == b.0);
        out
    }

    /// Re-scans the directories, opens new files and drops vanished ones.
    pub fn refresh(&mut self) {
        self.errors.clear();
        let mut keep = BTreeMap::new();
        for (path, explicit) in self.candidates() {
            let id = match std::fs::metadata(&path) {
                Ok(md) if md.is_file() => (md.dev(), md.ino()),
                Ok(_) => continue,
                Err(e) => {
                    if explicit {
                        self.errors.push(format!("{}: {e}", path.display()));
                    }
                    continue;
                }
            };
            if let Some((old_id, r)) = self.open.remove(&path)
                && old_id == id
            {
                keep.insert(path, (id, r));
                continue;
            }
            match Region::open_existing(&location(Some(&path))) {
                Ok(r) => {
                    keep.insert(path, (id, r));
                }
                Err(e) if explicit => self.errors.push(e.to_string()),
                Err(_) => {}
            }
        }
        self.open = keep;
    }

    /// The open regions, by path.
    pub fn regions(&self) -> impl Iterator<Item = (&Path, &Region)> {
        self.open.iter().map(|(p, (_, r))| (p.as_path(), r))
    }
}

fn scan_dir(dir: &Path, depth: u32, out: &mut Vec<(PathBuf, bool)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let Ok(ft) = e.file_type() else { continue };
        let p = e.path();
        if ft.is_dir() && depth > 0 {
            scan_dir(&p, depth - 1, out);
        } else if ft.is_file()
            && e.metadata()
                .is_ok_and(|m| m.len() == layout::FILE_SIZE as u64)
        {
            out.push((p, false));
        }
    }
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
