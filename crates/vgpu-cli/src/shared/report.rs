//! A region's snapshot for people and programs: the text tables of `status` and `top`, the
//! `--json` form of `status` and `top --once --json`, and the GPU shares between two snapshots.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use serde::Serialize;
use vgpu_policy::size::format_size;
use vgpu_region::{DeviceStatus, ProcessStatus, RefusalStatus, Snapshot};

use super::output::{secs, size_or_none, table, utc, utc_ms};
use super::regions::Identity;

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
    /// The last refused allocations (the region keeps 16), newest first.
    pub refusals: Vec<RefusalJson<'a>>,
}

/// A refused allocation: the device (region index and UUID), then the region's
/// [`RefusalStatus`] fields.
#[derive(Debug, Serialize)]
pub struct RefusalJson<'a> {
    pub index: usize,
    pub uuid: &'a str,
    #[serde(flatten, serialize_with = "refusal_def")]
    pub refusal: &'a RefusalStatus,
}

/// The serialised form of [`RefusalStatus`].
#[derive(Serialize)]
#[serde(remote = "RefusalStatus")]
pub struct RefusalDef {
    /// Its number in the container's log (1 for the first ever).
    pub seq: u64,
    #[serde(skip)]
    pub device: usize,
    /// When, Unix milliseconds.
    pub time_ms: u64,
    /// The refused process.
    pub pid: u32,
    /// Bytes asked for.
    pub requested: u64,
    /// The container's use of the device then, bytes.
    pub used: u64,
    /// The limit in force, bytes.
    pub limit: u64,
    /// What the refused process held, bytes.
    pub own: u64,
    /// The live process holding the most of the device (`null`: none).
    pub holder_pid: Option<u32>,
    /// What it held, bytes.
    pub holder_used: u64,
}

fn refusal_def<S: serde::Serializer>(
    r: &&RefusalStatus,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    RefusalDef::serialize(r, s)
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
    /// The library it runs, `"<version> <commit>"` (`null`: unknown, an earlier vgpu).
    pub library: Option<String>,
    /// It accounts without limiting (`VGPU_OBSERVE`).
    pub observing: bool,
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
    /// The JSON of snapshot `s` of the region at `path`, whose container is `id`.
    pub fn new(path: &Path, s: &'a Snapshot, id: &Identity) -> Self {
        StatusJson {
            region: path.display().to_string(),
            namespace: id.namespace.clone(),
            pod: id.pod.clone(),
            container: id.container.clone(),
            pod_uid: id.pod_uid.clone(),
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
            refusals: s
                .refusals
                .iter()
                .filter_map(|r| {
                    Some(RefusalJson {
                        index: r.device,
                        uuid: &s.devices.get(r.device)?.uuid,
                        refusal: r,
                    })
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

/// Shares of GPU time over the last refresh interval, percent (`vgpu top`).
#[derive(Debug, Default)]
pub struct Shares {
    /// Per device.
    pub devices: Vec<Option<f64>>,
    /// Per (process slot, device).
    pub processes: HashMap<(usize, usize), f64>,
}

/// GPU-time shares between two samples: Δgpu_ns / Δwall, percent.
pub fn shares(last: Option<&(Instant, Snapshot)>, now: Instant, snap: &Snapshot) -> Shares {
    let Some((then, prev)) = last else {
        return Shares {
            devices: vec![None; snap.devices.len()],
            processes: HashMap::new(),
        };
    };
    let wall = now.duration_since(*then).as_nanos().max(1) as f64;
    let pct = |a: u64, b: u64| 100.0 * a.saturating_sub(b) as f64 / wall;
    let devices: Vec<Option<f64>> = snap
        .devices
        .iter()
        .map(|d| {
            let before = prev.devices.iter().find(|p| p.uuid == d.uuid)?;
            measured(d).then(|| pct(d.gpu_ns, before.gpu_ns))
        })
        .collect();
    let mut processes = HashMap::new();
    for p in &snap.processes {
        let Some(q) = prev
            .processes
            .iter()
            .find(|q| q.slot == p.slot && q.pid == p.pid && q.start_time == p.start_time)
        else {
            continue;
        };
        for (i, g) in p.gpu_ns.iter().enumerate() {
            if devices.get(i).copied().flatten().is_none() {
                continue;
            }
            let before = q.gpu_ns.get(i).copied().unwrap_or(0);
            processes.insert((p.slot, i), pct(*g, before));
        }
    }
    Shares { devices, processes }
}

/// The text form: a device table and a process table (processes in the snapshot's order).
/// With `shares` (`top`), a GPU% column: the share of GPU time used over the last interval.
pub fn render(path: &Path, s: &Snapshot, id: &Identity, shares: Option<&Shares>) -> String {
    let known: Vec<String> = [
        ("namespace", &id.namespace),
        ("pod", &id.pod),
        ("container", &id.container),
    ]
    .iter()
    .filter_map(|(k, v)| Some(format!("{k} {}", v.as_deref()?)))
    .collect();
    let mut out = if known.is_empty() {
        format!("region {}\n", path.display())
    } else {
        format!("region {} ({})\n", path.display(), known.join(", "))
    };
    let mut rows = vec![
        [
            "DEV",
            "UUID",
            "LIMIT",
            "USED",
            "FREE",
            "PEAK",
            "SM",
            "GPU%",
            "GPU-TIME",
            "THROTTLED",
            "DENIED",
            "LAUNCHES",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for (i, d) in s.devices.iter().enumerate() {
        let share = shares
            .and_then(|sh| sh.devices.get(i).copied().flatten())
            .map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"));
        rows.push(vec![
            i.to_string(),
            d.uuid.clone(),
            size_or_none(d.limit),
            format_size(d.used),
            size_or_none(d.free),
            format_size(d.peak),
            d.sm_limit
                .map_or_else(|| "none".to_owned(), |v| format!("{v}%")),
            share,
            secs(d.gpu_ns),
            secs(d.throttled_ns),
            d.denied.to_string(),
            d.launches.to_string(),
        ]);
    }
    out.push_str(&table(&rows));
    out.push('\n');
    let mut rows = vec![
        [
            "PID",
            "DEV",
            "USED",
            "PEAK",
            "GPU%",
            "GPU-TIME",
            "THROTTLED",
            "DENIED",
            "LAUNCHES",
            "STARTED (UTC)",
            "COMMAND",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for p in &s.processes {
        for i in 0..s.devices.len() {
            let at = |v: &[u64]| v.get(i).copied().unwrap_or(0);
            let share = shares
                .and_then(|sh| sh.processes.get(&(p.slot, i)))
                .map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"));
            rows.push(vec![
                p.pid.to_string(),
                i.to_string(),
                format_size(at(&p.used)),
                format_size(at(&p.peak)),
                share,
                secs(at(&p.gpu_ns)),
                secs(at(&p.throttled_ns)),
                at(&p.denied).to_string(),
                at(&p.launches).to_string(),
                utc(p.start_time),
                p.command.clone(),
            ]);
        }
    }
    if s.processes.is_empty() {
        rows.push(vec!["(no live processes)".into()]);
    }
    out.push_str(&table(&rows));
    out.push_str(&libraries(s));
    if !s.refusals.is_empty() {
        out.push('\n');
        out.push_str(&refusals_table(s, REFUSALS_SHOWN));
    }
    out
}

/// Refusals `status` and `top` show in text (the JSON has all the region keeps).
pub const REFUSALS_SHOWN: usize = 5;

/// The library lines: which vgpu versions the processes run (the PIDs of each when they
/// differ), and which processes only observe (no limit of theirs is enforced).
fn libraries(s: &Snapshot) -> String {
    let mut versions: Vec<(&str, Vec<u32>)> = Vec::new();
    for p in &s.processes {
        let v = p.library.as_deref().unwrap_or("unknown (before 0.1.0)");
        match versions.iter_mut().find(|(k, _)| *k == v) {
            Some((_, pids)) => pids.push(p.pid),
            None => versions.push((v, vec![p.pid])),
        }
    }
    let mut out = String::new();
    let show = |v: &str| match v.split_once(' ') {
        Some((version, commit)) => format!("{version} (commit {commit})"),
        None => v.to_owned(),
    };
    match versions.as_slice() {
        [] => {}
        [(v, _)] => out.push_str(&format!("library {}\n", show(v))),
        many => {
            for (v, pids) in many {
                let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
                out.push_str(&format!("library {} (pid {})\n", show(v), pids.join(", ")));
            }
        }
    }
    let observing: Vec<String> = s
        .processes
        .iter()
        .filter(|p| p.observing)
        .map(|p| p.pid.to_string())
        .collect();
    if !observing.is_empty() {
        out.push_str(&format!(
            "observing (VGPU_OBSERVE): pid {}: accounted, no limit of theirs enforced\n",
            observing.join(", ")
        ));
    }
    out
}

/// The last `n` refusals as a table, newest first.
pub fn refusals_table(s: &Snapshot, n: usize) -> String {
    let mut rows = vec![
        [
            "REFUSED (UTC)",
            "DEV",
            "PID",
            "REQUESTED",
            "IN USE",
            "LIMIT",
            "ITS OWN",
            "MOST HELD BY",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for r in s.refusals.iter().take(n) {
        rows.push(vec![
            utc_ms(r.time_ms),
            r.device.to_string(),
            r.pid.to_string(),
            format_size(r.requested),
            format_size(r.used),
            format_size(r.limit),
            format_size(r.own),
            r.holder_pid.map_or_else(
                || "-".to_owned(),
                |p| format!("pid {p} ({})", format_size(r.holder_used)),
            ),
        ]);
    }
    let more = s.refusals.len().saturating_sub(n);
    let mut out = format!(
        "last refusals (newest first{})\n",
        if more > 0 {
            format!(", {more} more in --json")
        } else {
            String::new()
        }
    );
    out.push_str(&table(&rows));
    out
}
