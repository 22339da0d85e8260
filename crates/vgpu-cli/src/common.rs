//! Shared by the commands: the default region, opening one region, device lookup, the limit
//! values every command accepts, the JSON form of a snapshot, output that survives a closed
//! pipe, and number formatting.

use std::io::Write;
use std::path::Path;

use serde::Serialize;
use vgpu_policy::config::{ACCEPTED_SIZE_FORMS, Config};
use vgpu_policy::size::{format_size, parse_size};
use vgpu_region::{DeviceStatus, Location, ProcessStatus, Region, Snapshot};

use crate::error::{Error, Result};

/// The region at `path`, opened without taking a process slot (read-only use of the
/// workload's locks: none). Without a path: the workload's region
/// (`CUDA_DEVICE_MEMORY_SHARED_CACHE`), else the default one if it exists, else the user's only
/// `vgpu run` region; several are an error that lists them.
pub fn open_region(path: Option<&Path>) -> Result<Region> {
    let loc = match path {
        Some(_) => location(path),
        None => {
            let loc = default_location();
            if loc.path == Region::default_path() && !loc.path.exists() {
                match user_run_regions().as_slice() {
                    [one] => location(Some(one)),
                    [] => loc,
                    many => {
                        let list: Vec<String> =
                            many.iter().map(|p| p.display().to_string()).collect();
                        return Err(Error::Usage(format!(
                            "several regions ({}): pass --region PATH",
                            list.join(", ")
                        )));
                    }
                }
            } else {
                loc
            }
        }
    };
    Region::open_existing(&loc).map_err(|source| Error::NoRegion { source })
}

/// The user's `vgpu run` regions (`run-<pid>.cache` in the user's directory), sorted.
pub fn user_run_regions() -> Vec<std::path::PathBuf> {
    let Some(dir) = crate::regions::user_dir() else {
        return Vec::new();
    };
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| crate::regions::run_pid(p).is_some())
        .collect();
    out.sort();
    out
}

/// The SM range, stated once for every command.
pub const SM_FORMS: &str = "a percentage 1 to 99; 0, 100 or none: no limit";

/// A memory limit as a flag gives it (`None`: no limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemLimit(pub Option<u64>);

/// An SM limit as a flag gives it, percent 1..=99 (`None`: no limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmLimit(pub Option<u8>);

/// A size, `0` or `none` (no limit): the form every memory-limit flag accepts.
pub fn parse_mem_limit(s: &str) -> std::result::Result<MemLimit, String> {
    if s.trim().eq_ignore_ascii_case("none") {
        return Ok(MemLimit(None));
    }
    match parse_size(s) {
        Ok(0) => Ok(MemLimit(None)),
        Ok(v) => Ok(MemLimit(Some(v))),
        Err(e) => Err(format!("{e}; use {ACCEPTED_SIZE_FORMS} or none")),
    }
}

/// [`SM_FORMS`]: the form every SM-limit flag accepts.
pub fn parse_sm_limit(s: &str) -> std::result::Result<SmLimit, String> {
    if s.trim().eq_ignore_ascii_case("none") {
        return Ok(SmLimit(None));
    }
    match s.trim().parse::<u8>() {
        Ok(0 | 100) => Ok(SmLimit(None)),
        Ok(v) if v < 100 => Ok(SmLimit(Some(v))),
        _ => Err(format!("{s:?} is not {SM_FORMS}")),
    }
}

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

/// The region a workload started from this environment uses: `CUDA_DEVICE_MEMORY_SHARED_CACHE`
/// (read through the one configuration reader) when set, else the per-user default.
pub fn default_location() -> Location {
    Location::new(Config::shared_cache_from_env().ok().flatten())
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
    /// The container's namespace, pod, container name and pod UID where known (`null`: not):
    /// as the region's creator recorded them (downward API), else from HAMi's path naming.
    pub namespace: Option<String>,
    pub pod: Option<String>,
    pub container: Option<String>,
    pub pod_uid: Option<String>,
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
    /// The part of `used` that is CUDA context memory, bytes.
    pub context: u64,
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
        let id = crate::regions::Identity::from_path(path).with_recorded(&s.identity);
        StatusJson {
            region: path.display().to_string(),
            namespace: id.namespace,
            pod: id.pod,
            container: id.container,
            pod_uid: id.pod_uid,
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

/// Whether a device's GPU time is measured (a compute limit, or the compute gate has counted):
/// unmeasured containers show GPU time, throttled time, launches and shares as absent, not 0.
pub fn measured(d: &DeviceStatus) -> bool {
    d.sm_limit.is_some() || d.launches > 0 || d.gpu_ns > 0
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
