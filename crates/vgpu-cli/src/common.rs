//! Shared by the monitor and limit commands: finding and opening region files, device lookup,
//! the JSON form of a snapshot, and number formatting.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use vgpu_policy::config::{Config, vars};
use vgpu_policy::size::format_size;
use vgpu_region::{DeviceStatus, Location, ProcessStatus, Region, Snapshot, layout};

use crate::error::{Error, Result};

/// The region at `path`, or the default one ([`default_location`]), opened without taking a
/// process slot (read-only use of the workload's locks: none).
pub fn open_region(path: Option<&Path>) -> Result<Region> {
    Region::open_existing(&location(path)).map_err(|source| Error::NoRegion { source })
}

/// The region a workload started from this environment uses: `CUDA_DEVICE_MEMORY_SHARED_CACHE`
/// (read through the one configuration reader) when set, else the per-user default.
pub fn default_location() -> Location {
    let shared = std::env::vars_os().filter_map(|(k, v)| {
        (k == vars::SHARED_CACHE).then(|| (vars::SHARED_CACHE, v.to_string_lossy().into_owned()))
    });
    let path = Config::from_vars(shared)
        .ok()
        .and_then(|c| c.shared_region_path);
    match path {
        Some(p) => Location::shared(p),
        None => Location::private(Region::default_path()),
    }
}

/// Where `path` (or the default) is: the per-user default path is private, any other shared.
pub fn location(path: Option<&Path>) -> Location {
    match path {
        None => default_location(),
        Some(p) if p == Region::default_path() => Location::private(p),
        Some(p) => Location::shared(p),
    }
}

/// A device given as a region index (`0`, `1`, ...) or a UUID.
pub fn device_index(region: &Region, spec: &str) -> Result<usize> {
    let spec = spec.trim();
    if let Ok(index) = spec.parse::<usize>() {
        let count = region.device_count();
        return if index < count {
            Ok(index)
        } else {
            Err(Error::DeviceIndex { index, count })
        };
    }
    region
        .device_index(spec)
        .ok_or_else(|| Error::DeviceUuid(spec.to_owned()))
}

/// `status --json`: the stable schema (bytes, nanoseconds, Unix seconds). Devices and processes
/// are the region's own status types, serialised through [`DeviceDef`] and [`ProcessDef`];
/// only the per-process, per-device view is built here (the region keeps it as columns).
#[derive(Debug, Serialize)]
pub struct StatusJson<'a> {
    /// The region file.
    pub region: String,
    /// Devices in region order (`index` is what `vgpu limit --memory-device I=...` takes).
    pub devices: Vec<DeviceJson<'a>>,
    /// Live processes.
    pub processes: Vec<ProcessJson<'a>>,
}

/// A device: its region index, then the region's [`DeviceStatus`] fields.
#[derive(Debug, Serialize)]
pub struct DeviceJson<'a> {
    pub index: usize,
    #[serde(flatten, serialize_with = "device_def")]
    pub status: &'a DeviceStatus,
}

/// The serialised form of [`DeviceStatus`] (serde's remote derive: the compiler checks each
/// field against the region's type).
#[derive(Serialize)]
#[serde(remote = "DeviceStatus")]
pub struct DeviceDef {
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

/// A process: the region's [`ProcessStatus`] identity fields, then its use per device.
#[derive(Debug, Serialize)]
pub struct ProcessJson<'a> {
    #[serde(flatten, serialize_with = "process_def")]
    pub status: &'a ProcessStatus,
    pub devices: Vec<ProcessDeviceJson<'a>>,
}

/// The serialised identity of [`ProcessStatus`]; its per-device columns are serialised as
/// [`ProcessDeviceJson`] rows instead.
#[derive(Serialize)]
#[serde(remote = "ProcessStatus")]
pub struct ProcessDef {
    pub pid: u32,
    pub slot: usize,
    pub command: String,
    pub start_time: u64,
    #[serde(skip)]
    pub used: Vec<u64>,
    #[serde(skip)]
    pub peak: Vec<u64>,
    #[serde(skip)]
    pub gpu_ns: Vec<u64>,
    #[serde(skip)]
    pub throttled_ns: Vec<u64>,
    #[serde(skip)]
    pub denied: Vec<u64>,
    #[serde(skip)]
    pub launches: Vec<u64>,
}

fn device_def<S: serde::Serializer>(
    d: &&DeviceStatus,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    DeviceDef::serialize(d, s)
}

fn process_def<S: serde::Serializer>(
    p: &&ProcessStatus,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    ProcessDef::serialize(p, s)
}

/// One process's use of one device: row `index` of [`ProcessStatus`]'s columns.
#[derive(Debug)]
pub struct ProcessDeviceJson<'a> {
    index: usize,
    uuid: &'a str,
    p: &'a ProcessStatus,
}

impl Serialize for ProcessDeviceJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let i = self.index;
        let at = |v: &[u64]| v.get(i).copied().unwrap_or(0);
        let p = self.p;
        let mut st = s.serialize_struct("ProcessDevice", 8)?;
        st.serialize_field("index", &i)?;
        st.serialize_field("uuid", self.uuid)?;
        for (name, col) in [
            ("used", &p.used),
            ("peak", &p.peak),
            ("gpu_ns", &p.gpu_ns),
            ("throttled_ns", &p.throttled_ns),
            ("denied", &p.denied),
            ("launches", &p.launches),
        ] {
            st.serialize_field(name, &at(col))?;
        }
        st.end()
    }
}

impl<'a> StatusJson<'a> {
    pub fn new(path: &Path, s: &'a Snapshot) -> Self {
        StatusJson {
            region: path.display().to_string(),
            devices: s
                .devices
                .iter()
                .enumerate()
                .map(|(index, status)| DeviceJson { index, status })
                .collect(),
            processes: s
                .processes
                .iter()
                .map(|p| ProcessJson {
                    status: p,
                    devices: s
                        .devices
                        .iter()
                        .enumerate()
                        .map(|(index, d)| ProcessDeviceJson {
                            index,
                            uuid: &d.uuid,
                            p,
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
