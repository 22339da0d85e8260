//! The metric families `vgpu metrics` serves: ONE table, [`FAMILIES`], that every name set
//! renders from ([`render`]).
//!
//! A row is one family: its name under each name set that serves it ([`Names3`]: `None`, not
//! served under that set), its help, its [`Kind`], and how its samples are read ([`Read`]: a
//! function of the exporter's view, of a region, of a region's device or of a process on a
//! device). The labels are not in the row: each name set labels a sample by the scope the
//! reader is for, in its own words ([`Convention`]: vgpu's `namespace`/`pod`/`device`/`UUID`,
//! HAMi's `vdevice_index`/`device_uuid`, the legacy `podnamespace`/`podname`/`vdeviceid`).
//!
//! Adding a family: add a row to [`FAMILIES`] (a reader for its scope, `None` for the name sets
//! that do not serve it). A family with a vgpu name must also be listed in
//! `deploy/exporter-metrics.txt` (the test `exporter_metrics_txt_lists_every_vgpu_family` says
//! so) and shown by the Grafana dashboard (scripts/validate_deploy.py says so). A reader that
//! needs something the views lack (a new region field) gets it added to [`RegionView`] /
//! [`DeviceView`], which [`Scrape::new`] fills once per scrape.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::ValueEnum;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family as PromFamily;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use vgpu_region::{DeviceStatus, RefusalStatus};

use crate::shared::regions::{Identity, Watched};
use crate::shared::report::measured;

/// A naming scheme (`--names`, repeatable: several are served side by side).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ValueEnum)]
pub enum Names {
    /// `vgpu_*` and `vgpu_process_*`.
    Vgpu,
    /// HAMi's monitor's `hami_vgpu_*` and `hami_container_*`.
    Hami,
    /// The names of Volcano's vGPU monitor and of HAMi's with --legacy-metrics
    /// (`vGPU_device_memory_usage_in_bytes`, `Device_memory_desc_of_container`, ...).
    #[value(alias = "volcano")]
    Legacy,
}

/// A family's name under each name set (`None`: that set does not serve it).
#[derive(Clone, Copy, Debug)]
pub struct Names3 {
    pub vgpu: Option<&'static str>,
    pub hami: Option<&'static str>,
    pub legacy: Option<&'static str>,
}

impl Names3 {
    /// The name under `set`.
    pub fn get(&self, set: Names) -> Option<&'static str> {
        match set {
            Names::Vgpu => self.vgpu,
            Names::Hami => self.hami,
            Names::Legacy => self.legacy,
        }
    }
}

/// The type of a family's samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A gauge of whole numbers.
    Gauge,
    /// A gauge of real numbers.
    GaugeF,
    /// A counter of whole numbers (exposed with `_total`).
    Counter,
    /// A counter of real numbers (exposed with `_total`).
    CounterF,
}

/// Label pairs, in order.
pub type Labels = Vec<(String, String)>;

/// How a family's samples are read, by what they are per.
#[derive(Clone, Copy)]
pub enum Read {
    /// The exporter itself: any number of samples, each with labels of its own.
    Exporter(fn(&Scrape<'_>) -> Vec<(Labels, f64)>),
    /// One sample per shown region (`None`: none for this region).
    Region(fn(&RegionView<'_>) -> Option<f64>),
    /// One sample per device of a shown region.
    Device(fn(&DeviceView<'_>) -> Option<f64>),
    /// Any number of samples per device of a shown region, each with labels of its own after
    /// the device's.
    DeviceLabelled(fn(&DeviceView<'_>) -> Vec<(Labels, f64)>),
    /// One sample per process (PID) and device of a shown region.
    Process(fn(&ProcessView) -> Option<f64>),
}

/// One row of the table.
pub struct Family {
    pub names: Names3,
    pub help: &'static str,
    pub kind: Kind,
    pub read: Read,
}

/// What the exporter knows at one scrape.
pub struct Scrape<'a> {
    /// The shown regions, each with its devices and processes.
    pub regions: Vec<RegionView<'a>>,
    /// Files of a region's size under --dir that could not be read, with the reason.
    pub unreadable: &'a [(PathBuf, String)],
    /// Container directories past their caps, with the entries left unread.
    pub skipped: &'a [(PathBuf, usize)],
    /// NVML's GPU index by UUID (dcgm-exporter's `gpu` label).
    pub gpus: &'a HashMap<String, u32>,
}

/// A shown region.
pub struct RegionView<'a> {
    pub w: &'a Watched,
    pub now: SystemTime,
    pub devices: Vec<DeviceView<'a>>,
}

/// A device of a shown region, with what two scrapes tell about it.
pub struct DeviceView<'a> {
    /// Its index in the region.
    pub index: usize,
    pub d: &'a DeviceStatus,
    /// Share of the device's time its kernels ran since the previous scrape, 0..=1 (`None`:
    /// not measured, or the first scrape).
    pub util: Option<f64>,
    /// Seconds since the exporter last saw the launch count grow (`None`: not seen).
    pub last_launch_ago: Option<f64>,
    /// Per PID (two slots of one PID, a PID reused in another PID namespace, are summed).
    pub processes: Vec<ProcessView>,
    /// The newest refusal the region's log holds for the device.
    pub last_refusal: Option<&'a RefusalStatus>,
}

/// One process's use of one device.
#[derive(Clone, Debug, Default)]
pub struct ProcessView {
    pub pid: u32,
    pub used: u64,
    pub peak: u64,
    pub gpu_ns: u64,
    pub throttled_ns: u64,
    pub denied: u64,
    pub launches: u64,
    /// Whether the device's GPU time is measured ([`measured`]).
    pub measured: bool,
}

/// Between scrapes, per (region, device): what the last scrape saw, for rates.
#[derive(Clone, Copy, Debug)]
pub struct Seen {
    at: SystemTime,
    gpu_ns: u64,
    launches: u64,
    /// When the launch count was last seen to grow.
    last_launch: Option<SystemTime>,
}

/// The key of [`Seen`].
pub type SeenKey = (PathBuf, String);

impl<'a> Scrape<'a> {
    /// The view of `shown` at `now`; `before` is the previous scrape's [`Seen`], and the
    /// returned map this one's.
    pub fn new(
        shown: &[&'a Watched],
        unreadable: &'a [(PathBuf, String)],
        skipped: &'a [(PathBuf, usize)],
        gpus: &'a HashMap<String, u32>,
        before: &HashMap<SeenKey, Seen>,
        now: SystemTime,
    ) -> (Scrape<'a>, HashMap<SeenKey, Seen>) {
        let mut after = HashMap::new();
        let regions = shown
            .iter()
            .map(|w| {
                let devices = w
                    .snap
                    .devices
                    .iter()
                    .enumerate()
                    .map(|(index, d)| {
                        let key = (w.path.clone(), d.uuid.clone());
                        let b = before.get(&key).copied();
                        let last_launch = match b {
                            Some(b) if d.launches > b.launches => Some(now),
                            Some(b) => b.last_launch,
                            None => None,
                        };
                        // GPU time arrives a window at a time (reported when the window
                        // drains), so a window that straddles the previous scrape can put more
                        // GPU time than wall time between two scrapes: at most 1.
                        let util = b.filter(|_| measured(d)).and_then(|b| {
                            let wall = now.duration_since(b.at).ok().filter(|w| !w.is_zero())?;
                            let busy = d.gpu_ns.saturating_sub(b.gpu_ns) as f64;
                            Some((busy / wall.as_nanos() as f64).min(1.0))
                        });
                        let seen = Seen {
                            at: now,
                            gpu_ns: d.gpu_ns,
                            launches: d.launches,
                            last_launch,
                        };
                        after.insert(key, seen);
                        DeviceView {
                            index,
                            d,
                            util,
                            last_launch_ago: last_launch
                                .map(|t| now.duration_since(t).unwrap_or_default().as_secs_f64()),
                            processes: processes_of(w, index, measured(d)),
                            // The log is newest first.
                            last_refusal: w.snap.refusals.iter().find(|r| r.device == index),
                        }
                    })
                    .collect();
                RegionView { w, now, devices }
            })
            .collect();
        let scrape = Scrape {
            regions,
            unreadable,
            skipped,
            gpus,
        };
        (scrape, after)
    }
}

/// The processes of region `w` on device `i`, by PID.
fn processes_of(w: &Watched, i: usize, measured: bool) -> Vec<ProcessView> {
    let mut per: BTreeMap<u32, ProcessView> = BTreeMap::new();
    for p in &w.snap.processes {
        let at = |v: &[u64]| v.get(i).copied().unwrap_or(0);
        let e = per.entry(p.pid).or_insert_with(|| ProcessView {
            pid: p.pid,
            measured,
            ..ProcessView::default()
        });
        e.used += at(&p.used);
        e.peak = e.peak.max(at(&p.peak));
        e.gpu_ns += at(&p.gpu_ns);
        e.throttled_ns += at(&p.throttled_ns);
        e.denied += at(&p.denied);
        e.launches += at(&p.launches);
    }
    per.into_values().collect()
}

/// How a name set labels a sample.
struct Convention {
    namespace: &'static str,
    pod: &'static str,
    container: &'static str,
    pod_uid: &'static str,
    device: &'static str,
    uuid: &'static str,
    /// The `region` label (the file) on every region's samples, or only where the container
    /// is unknown (to keep two regions' series apart).
    region_always: bool,
    /// dcgm-exporter's `gpu` label, where NVML answers.
    gpu: bool,
    /// HAMi's monitor registers its collector with `zone="vGPU"` on every sample.
    zone: Option<&'static str>,
    /// HAMi's monitors take the first 40 bytes of the UUID field.
    uuid_len: Option<usize>,
}

impl Convention {
    fn of(set: Names) -> Convention {
        match set {
            Names::Vgpu => Convention {
                namespace: "namespace",
                pod: "pod",
                container: "container",
                pod_uid: "pod_uid",
                device: "device",
                uuid: "UUID",
                region_always: true,
                gpu: true,
                zone: None,
                uuid_len: None,
            },
            Names::Hami => Convention {
                namespace: "namespace",
                pod: "pod",
                container: "container",
                pod_uid: "pod_uid",
                device: "vdevice_index",
                uuid: "device_uuid",
                region_always: false,
                gpu: false,
                zone: Some("vGPU"),
                uuid_len: Some(40),
            },
            Names::Legacy => Convention {
                namespace: "podnamespace",
                pod: "podname",
                container: "ctrname",
                pod_uid: "pod_uid",
                device: "vdeviceid",
                uuid: "deviceuuid",
                region_always: false,
                gpu: false,
                zone: Some("vGPU"),
                uuid_len: Some(40),
            },
        }
    }

    fn region(&self, r: &RegionView<'_>) -> Labels {
        let id: &Identity = &r.w.identity;
        let mut l = Labels::new();
        if self.region_always || id.container.is_none() {
            l.push(("region".to_owned(), r.w.path.display().to_string()));
        }
        for (k, v) in [
            (self.namespace, &id.namespace),
            (self.pod, &id.pod),
            (self.container, &id.container),
            (self.pod_uid, &id.pod_uid),
        ] {
            if let Some(v) = v {
                l.push((k.to_owned(), v.clone()));
            }
        }
        l
    }

    fn device(
        &self,
        r: &RegionView<'_>,
        d: &DeviceView<'_>,
        gpus: &HashMap<String, u32>,
    ) -> Labels {
        let mut l = self.region(r);
        l.push((self.device.to_owned(), d.index.to_string()));
        let uuid = &d.d.uuid;
        let cut = self
            .uuid_len
            .and_then(|n| uuid.get(..n))
            .unwrap_or(uuid.as_str());
        l.push((self.uuid.to_owned(), cut.to_owned()));
        if self.gpu
            && let Some(g) = gpus.get(uuid)
        {
            l.push(("gpu".to_owned(), g.to_string()));
        }
        if let Some(z) = self.zone {
            l.push(("zone".to_owned(), z.to_owned()));
        }
        l
    }
}

type GaugeI = PromFamily<Labels, Gauge>;
type GaugeF = PromFamily<Labels, Gauge<f64, AtomicU64>>;
type CountU = PromFamily<Labels, Counter>;
type CountF = PromFamily<Labels, Counter<f64, AtomicU64>>;

/// A prometheus-client family of a [`Kind`].
enum Prom {
    GaugeI(GaugeI),
    GaugeF(GaugeF),
    CountU(CountU),
    CountF(CountF),
}

impl Prom {
    fn new(kind: Kind) -> Prom {
        match kind {
            Kind::Gauge => Prom::GaugeI(GaugeI::default()),
            Kind::GaugeF => Prom::GaugeF(GaugeF::default()),
            Kind::Counter => Prom::CountU(CountU::default()),
            Kind::CounterF => Prom::CountF(CountF::default()),
        }
    }

    /// Sets the sample of `labels` to `v` (whole-number kinds: rounded, clamped to their range).
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    fn set(&self, labels: &Labels, v: f64) {
        match self {
            // `as` saturates at the integer type's bounds (and maps NaN to 0).
            Prom::GaugeI(f) => {
                f.get_or_create(labels).set(v.round() as i64);
            }
            Prom::GaugeF(f) => {
                f.get_or_create(labels).set(v);
            }
            Prom::CountU(f) => {
                f.get_or_create(labels).inc_by(v.round() as u64);
            }
            Prom::CountF(f) => {
                f.get_or_create(labels).inc_by(v);
            }
        }
    }

    fn register(self, reg: &mut Registry, name: &str, help: &str) {
        match self {
            Prom::GaugeI(f) => reg.register(name, help, f),
            Prom::GaugeF(f) => reg.register(name, help, f),
            Prom::CountU(f) => reg.register(name, help, f),
            Prom::CountF(f) => reg.register(name, help, f),
        }
    }
}

/// Registers, for each name set in `sets` in turn, every family of [`FAMILIES`] it names, with
/// the samples of `scrape`. A name two sets share is registered once.
pub fn render(sets: &[Names], scrape: &Scrape<'_>, reg: &mut Registry) {
    let mut done = HashSet::new();
    for &set in sets {
        let conv = Convention::of(set);
        for f in FAMILIES {
            let Some(name) = f.names.get(set) else {
                continue;
            };
            if !done.insert(name) {
                continue;
            }
            let prom = Prom::new(f.kind);
            fill(&prom, f.read, &conv, scrape);
            prom.register(reg, name, f.help);
        }
    }
}

fn fill(prom: &Prom, read: Read, conv: &Convention, s: &Scrape<'_>) {
    match read {
        Read::Exporter(f) => {
            for (l, v) in f(s) {
                prom.set(&l, v);
            }
        }
        Read::Region(f) => {
            for r in &s.regions {
                if let Some(v) = f(r) {
                    prom.set(&conv.region(r), v);
                }
            }
        }
        Read::Device(f) => {
            for r in &s.regions {
                for d in &r.devices {
                    if let Some(v) = f(d) {
                        prom.set(&conv.device(r, d, s.gpus), v);
                    }
                }
            }
        }
        Read::DeviceLabelled(f) => {
            for r in &s.regions {
                for d in &r.devices {
                    let base = conv.device(r, d, s.gpus);
                    for (extra, v) in f(d) {
                        let mut l = base.clone();
                        l.extend(extra);
                        prom.set(&l, v);
                    }
                }
            }
        }
        Read::Process(f) => {
            for r in &s.regions {
                for d in &r.devices {
                    let base = conv.device(r, d, s.gpus);
                    for p in &d.processes {
                        if let Some(v) = f(p) {
                            let mut l = base.clone();
                            l.push(("pid".to_owned(), p.pid.to_string()));
                            prom.set(&l, v);
                        }
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The readers.

#[allow(clippy::cast_precision_loss)]
fn num(v: u64) -> f64 {
    v as f64
}

fn secs(ns: u64) -> f64 {
    num(ns) / 1e9
}

/// The exporter's version and commit (`component="exporter"`), and each container's libraries
/// as its processes stamped them (`component="library"`, with the container's labels; one
/// series per distinct version and commit).
fn build_info(s: &Scrape<'_>) -> Vec<(Labels, f64)> {
    let info = |component: &str, version: &str, commit: &str| {
        vec![
            ("component".to_owned(), component.to_owned()),
            ("version".to_owned(), version.to_owned()),
            ("commit".to_owned(), commit.to_owned()),
        ]
    };
    let mut out = vec![(
        info("exporter", env!("CARGO_PKG_VERSION"), env!("VGPU_COMMIT")),
        1.0,
    )];
    let conv = Convention::of(Names::Vgpu);
    for r in &s.regions {
        let mut libs: Vec<&str> =
            r.w.snap
                .processes
                .iter()
                .filter_map(|p| p.library.as_deref())
                .collect();
        libs.sort_unstable();
        libs.dedup();
        for lib in libs {
            let (version, commit) = lib.split_once(' ').unwrap_or((lib, "unknown"));
            let mut l = conv.region(r);
            l.extend(info("library", version, commit));
            out.push((l, 1.0));
        }
    }
    out
}

/// The newest refusal of a device, with the refused process's PID and the PID of the one that
/// held the most of the device as labels (`holder_pid` absent: none), `f` of it the value.
fn last_refusal(d: &DeviceView<'_>, f: fn(&RefusalStatus) -> f64) -> Vec<(Labels, f64)> {
    d.last_refusal
        .map(|r| {
            let mut l = vec![("pid".to_owned(), r.pid.to_string())];
            if let Some(h) = r.holder_pid {
                l.push(("holder_pid".to_owned(), h.to_string()));
            }
            (l, f(r))
        })
        .into_iter()
        .collect()
}

fn unreadable(s: &Scrape<'_>) -> Vec<(Labels, f64)> {
    s.unreadable
        .iter()
        .map(|(p, _)| (vec![("region".to_owned(), p.display().to_string())], 1.0))
        .collect()
}

fn skipped(s: &Scrape<'_>) -> Vec<(Labels, f64)> {
    s.skipped
        .iter()
        .map(|(d, n)| {
            (
                vec![("directory".to_owned(), d.display().to_string())],
                num(*n as u64),
            )
        })
        .collect()
}

/// A region whose recorded identity was not taken (see [`Identity`]): its path's pod UID and
/// container, and what it claimed.
fn identity_mismatch(s: &Scrape<'_>) -> Vec<(Labels, f64)> {
    s.regions
        .iter()
        .filter_map(|r| {
            let id = &r.w.identity;
            let (claim, why) = id.claimed.as_ref()?;
            let mut l: Labels = vec![("region".to_owned(), r.w.path.display().to_string())];
            for (k, v) in [
                ("pod_uid", &id.pod_uid),
                ("container", &id.container),
                ("claimed_namespace", &claim.namespace),
                ("claimed_pod", &claim.pod),
                ("claimed_container", &claim.container),
            ] {
                if let Some(v) = v {
                    l.push((k.to_owned(), v.clone()));
                }
            }
            l.push(("reason".to_owned(), (*why).to_owned()));
            Some((l, 1.0))
        })
        .collect()
}

fn last_update(r: &RegionView<'_>) -> Option<f64> {
    let t = r.w.last_active.min(r.now);
    Some(num(t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())))
}

/// A whole-number reader of a device's measured figure (absent when GPU time is not measured).
fn if_measured(d: &DeviceView<'_>, v: f64) -> Option<f64> {
    measured(d.d).then_some(v)
}

const USED_HELP: &str = "Container: device memory in use by its live processes";

fn used(d: &DeviceView<'_>) -> Option<f64> {
    Some(num(d.d.used))
}

const fn vgpu(name: &'static str) -> Names3 {
    Names3 {
        vgpu: Some(name),
        hami: None,
        legacy: None,
    }
}

/// The legacy `Device_memory_desc_of_container`: memory in use, with HAMi-core's split of it
/// as labels: `context`, `module` (0: vgpu does not see module memory apart), `data` (in use
/// less contexts) and `offset` (HAMi's --legacy-metrics: in use less the other three, 0).
fn memory_desc(d: &DeviceView<'_>) -> Vec<(Labels, f64)> {
    let (used, context) = (d.d.used, d.d.context.min(d.d.used));
    let labels = vec![
        ("context".to_owned(), context.to_string()),
        ("module".to_owned(), "0".to_owned()),
        ("data".to_owned(), (used - context).to_string()),
        ("offset".to_owned(), "0".to_owned()),
    ];
    vec![(labels, num(used))]
}

/// Every family, in the order of the exposition.
pub const FAMILIES: &[Family] = &[
    // The exporter.
    Family {
        names: vgpu("vgpu_build_info"),
        help: "Version and git commit (value 1) of the exporter (component=\"exporter\") and of the libvgpu.so each container's processes run (component=\"library\", the container's labels)",
        kind: Kind::Gauge,
        read: Read::Exporter(build_info),
    },
    Family {
        names: Names3 {
            vgpu: Some("vgpu_region_unreadable"),
            hami: Some("vgpu_region_unreadable"),
            legacy: Some("vgpu_region_unreadable"),
        },
        help: "A file of a region's size under --dir that cannot be read (permission, contents, truncated); the reason is on the exporter's stderr",
        kind: Kind::Gauge,
        read: Read::Exporter(unreadable),
    },
    Family {
        names: Names3 {
            vgpu: Some("vgpu_region_skipped"),
            hami: Some("vgpu_region_skipped"),
            legacy: Some("vgpu_region_skipped"),
        },
        help: "Entries of a container directory under --dir not read: past the regions one container may add, or past the entries looked at",
        kind: Kind::Gauge,
        read: Read::Exporter(skipped),
    },
    Family {
        names: Names3 {
            vgpu: Some("vgpu_region_identity_mismatch"),
            hami: Some("vgpu_region_identity_mismatch"),
            legacy: Some("vgpu_region_identity_mismatch"),
        },
        help: "A region whose recorded namespace/pod/container (claimed_*) contradicts its platform path or another pod UID's claim: its series carry the path's pod_uid and container only",
        kind: Kind::Gauge,
        read: Read::Exporter(identity_mismatch),
    },
    // Per container (region).
    Family {
        names: vgpu("vgpu_region_last_update_timestamp_seconds"),
        help: "Container: when its region was last seen with a live process or changing, Unix seconds",
        kind: Kind::Gauge,
        read: Read::Region(last_update),
    },
    Family {
        names: vgpu("vgpu_region_stale"),
        help: "Container: 1 when no live process is attached to its region (finished or idle; totals are final)",
        kind: Kind::Gauge,
        read: Read::Region(|r| Some(f64::from(u8::from(r.w.stale)))),
    },
    // Per container and device.
    Family {
        names: Names3 {
            vgpu: Some("vgpu_memory_limit_bytes"),
            hami: Some("hami_vgpu_memory_limit_bytes"),
            legacy: Some("vGPU_device_memory_limit_in_bytes"),
        },
        help: "Container: device memory limit (absent: no limit)",
        kind: Kind::Gauge,
        read: Read::Device(|d| d.d.limit.map(num)),
    },
    Family {
        names: vgpu("vgpu_sm_limit_percent"),
        help: "Container: compute (SM) limit, percent (absent: no limit)",
        kind: Kind::Gauge,
        read: Read::Device(|d| d.d.sm_limit.map(f64::from)),
    },
    Family {
        names: Names3 {
            vgpu: Some("vgpu_memory_used_bytes"),
            hami: Some("hami_vgpu_memory_used_bytes"),
            legacy: Some("vGPU_device_memory_usage_in_bytes"),
        },
        help: USED_HELP,
        kind: Kind::Gauge,
        read: Read::Device(used),
    },
    Family {
        names: Names3 {
            vgpu: None,
            hami: Some("hami_container_device_memory_bytes"),
            legacy: None,
        },
        help: USED_HELP,
        kind: Kind::Gauge,
        read: Read::Device(used),
    },
    Family {
        names: Names3 {
            vgpu: None,
            hami: None,
            legacy: Some("Device_memory_desc_of_container"),
        },
        help: "Container: device memory in use, with its context, module, data and offset bytes as labels",
        kind: Kind::Gauge,
        read: Read::DeviceLabelled(memory_desc),
    },
    Family {
        names: Names3 {
            vgpu: None,
            hami: Some("hami_vgpu_memory_context_bytes"),
            legacy: None,
        },
        help: "Container: device memory of CUDA contexts, as vgpu charged them",
        kind: Kind::Gauge,
        read: Read::Device(|d| Some(num(d.d.context))),
    },
    Family {
        names: Names3 {
            vgpu: None,
            hami: Some("hami_vgpu_memory_module_bytes"),
            legacy: None,
        },
        help: "Container: device memory of loaded modules (vgpu does not split it out of the context: 0)",
        kind: Kind::Gauge,
        read: Read::Device(|_| Some(0.0)),
    },
    Family {
        names: Names3 {
            vgpu: None,
            hami: Some("hami_vgpu_memory_buffer_bytes"),
            legacy: None,
        },
        help: "Container: device memory of allocations: in use less contexts",
        kind: Kind::Gauge,
        read: Read::Device(|d| Some(num(d.d.used.saturating_sub(d.d.context)))),
    },
    Family {
        names: vgpu("vgpu_memory_peak_bytes"),
        help: "Container: high-water mark of device memory in use",
        kind: Kind::Gauge,
        read: Read::Device(|d| Some(num(d.d.peak))),
    },
    Family {
        names: vgpu("vgpu_gpu_time_seconds"),
        help: "Container: GPU time of its kernels, exited processes included (absent: not measured)",
        kind: Kind::CounterF,
        read: Read::Device(|d| if_measured(d, secs(d.d.gpu_ns))),
    },
    Family {
        names: vgpu("vgpu_throttled_seconds"),
        help: "Container: time kernel launches were held back by the compute limit (absent: not measured)",
        kind: Kind::CounterF,
        read: Read::Device(|d| if_measured(d, secs(d.d.throttled_ns))),
    },
    Family {
        names: vgpu("vgpu_alloc_denied"),
        help: "Container: allocations refused by the memory limit, exited processes included",
        kind: Kind::Counter,
        read: Read::Device(|d| Some(num(d.d.denied))),
    },
    Family {
        names: vgpu("vgpu_last_refusal_timestamp_seconds"),
        help: "Container: when the newest refused allocation the region records happened, Unix seconds; labels: the refused pid and the holder_pid holding the most of the device (absent: none recorded)",
        kind: Kind::GaugeF,
        read: Read::DeviceLabelled(|d| last_refusal(d, |r| num(r.time_ms) / 1e3)),
    },
    Family {
        names: vgpu("vgpu_last_refusal_requested_bytes"),
        help: "Container: bytes the newest refused allocation asked for; labels as vgpu_last_refusal_timestamp_seconds",
        kind: Kind::Gauge,
        read: Read::DeviceLabelled(|d| last_refusal(d, |r| num(r.requested))),
    },
    Family {
        names: vgpu("vgpu_kernel_launches"),
        help: "Container: kernels launched, exited processes included (absent: not measured)",
        kind: Kind::Counter,
        read: Read::Device(|d| if_measured(d, num(d.d.launches))),
    },
    Family {
        names: Names3 {
            vgpu: None,
            hami: Some("hami_container_device_utilization_ratio"),
            legacy: Some("Device_utilization_desc_of_container"),
        },
        help: "Container: percent (0-100, as HAMi's monitor sends it) of the device's time its kernels ran since the previous scrape (absent: not measured or first scrape)",
        kind: Kind::GaugeF,
        read: Read::Device(|d| d.util.map(|u| 100.0 * u)),
    },
    Family {
        names: Names3 {
            vgpu: None,
            hami: Some("hami_container_last_kernel_elapsed_seconds"),
            legacy: Some("Device_last_kernel_of_container"),
        },
        help: "Container: seconds since the exporter last saw its launch count grow (absent: not seen)",
        kind: Kind::GaugeF,
        read: Read::Device(|d| d.last_launch_ago),
    },
    // Per process and device.
    Family {
        names: vgpu("vgpu_process_memory_used_bytes"),
        help: "Process: device memory in use",
        kind: Kind::Gauge,
        read: Read::Process(|p| Some(num(p.used))),
    },
    Family {
        names: vgpu("vgpu_process_memory_peak_bytes"),
        help: "Process: high-water mark of device memory in use",
        kind: Kind::Gauge,
        read: Read::Process(|p| Some(num(p.peak))),
    },
    Family {
        names: vgpu("vgpu_process_gpu_time_seconds"),
        help: "Process: GPU time of its kernels (absent: not measured)",
        kind: Kind::CounterF,
        read: Read::Process(|p| p.measured.then(|| secs(p.gpu_ns))),
    },
    Family {
        names: vgpu("vgpu_process_throttled_seconds"),
        help: "Process: time its kernel launches were held back by the compute limit (absent: not measured)",
        kind: Kind::CounterF,
        read: Read::Process(|p| p.measured.then(|| secs(p.throttled_ns))),
    },
    Family {
        names: vgpu("vgpu_process_alloc_denied"),
        help: "Process: allocations refused by the memory limit",
        kind: Kind::Counter,
        read: Read::Process(|p| Some(num(p.denied))),
    },
    Family {
        names: vgpu("vgpu_process_kernel_launches"),
        help: "Process: kernels launched (absent: not measured)",
        kind: Kind::Counter,
        read: Read::Process(|p| p.measured.then(|| num(p.launches))),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The contract with deploy/: every family served under vgpu's names is listed in
    /// deploy/exporter-metrics.txt with its exposition name, type and scope, and nothing else is.
    #[test]
    fn exporter_metrics_txt_lists_every_vgpu_family() {
        let file = include_str!("../../../../deploy/exporter-metrics.txt");
        let mut listed: Vec<(String, String, String)> = file
            .lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
            .filter(|l| !l.is_empty())
            .map(|l| {
                let v: Vec<&str> = l.split_whitespace().collect();
                (v[0].to_owned(), v[1].to_owned(), v[2].to_owned())
            })
            .collect();
        let mut table: Vec<(String, String, String)> = FAMILIES
            .iter()
            .filter_map(|f| {
                let name = f.names.vgpu?;
                let (name, kind) = match f.kind {
                    Kind::Gauge | Kind::GaugeF => (name.to_owned(), "gauge"),
                    Kind::Counter | Kind::CounterF => (format!("{name}_total"), "counter"),
                };
                let scope = match f.read {
                    Read::Exporter(_) => "exporter",
                    Read::Region(_) | Read::Device(_) | Read::DeviceLabelled(_) => "container",
                    Read::Process(_) => "process",
                };
                Some((name, kind.to_owned(), scope.to_owned()))
            })
            .collect();
        listed.sort();
        table.sort();
        assert_eq!(listed, table);
    }

    /// No name set serves one name twice, and every name is a valid metric name.
    #[test]
    fn names_are_unique_per_set_and_valid() {
        for set in [Names::Vgpu, Names::Hami, Names::Legacy] {
            let mut seen = HashSet::new();
            for f in FAMILIES {
                if let Some(n) = f.names.get(set) {
                    assert!(seen.insert(n), "{set:?}: {n} twice");
                    assert!(
                        n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                            && !n.starts_with(|c: char| c.is_ascii_digit()),
                        "{n}"
                    );
                }
            }
        }
    }
}
