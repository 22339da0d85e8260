//! `vgpu metrics`: the regions' accounting for Prometheus, over HTTP (`/metrics`, default
//! `127.0.0.1:9431`) or once on stdout.
//!
//! Formats: the classic text format 0.0.4 (`text/plain; version=0.0.4`), or OpenMetrics 1.0
//! when the scraper's `Accept` header prefers it (Prometheus does); `--once` prints the text
//! format unless `--format openmetrics`. The exposition is built once with `prometheus-client`
//! (OpenMetrics) and [`to_text`] rewrites it for 0.0.4 (counter families named with `_total`,
//! no `# EOF`).
//!
//! Names (`--names vgpu`, the default): container series (the region's totals, processes that
//! have exited included) and per-process series (`vgpu_process_*`, label `pid`) have separate
//! names, so `sum by (device)` over either never counts twice. See docs/CLI.md for the table.
//! `--names hami` serves HAMi's exporter names instead (`hami_vgpu_memory_used_bytes`, ...).
//!
//! Labels: `region` (the file), `device` (the region's device index), `UUID` and `gpu` (the
//! physical GPU as dcgm-exporter labels it; `gpu` only where NVML answers), and `namespace`,
//! `pod`, `container`, `pod_uid` where known ([`crate::shared::regions::Identity`]).
//!
//! A scrape reads the mapped files' atomics: it takes no slot and no lock a workload takes.

use std::collections::{BTreeMap, HashMap};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Args, ValueEnum};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::error::{Error, Result};
use crate::http::{self, Request, Response};
use crate::nvml::Nvml;
use crate::shared::regions::{Identity, RegionArgs, RegionSet, Watched};
use crate::shared::report::measured;

/// Content type of the OpenMetrics exposition.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of the classic text exposition.
pub const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
/// The default listen address: loopback, and not 9400 (dcgm-exporter's).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9431";

#[derive(Debug, Args)]
#[command(
    after_help = "The default address is loopback only; serve a node's Prometheus with --listen 0.0.0.0:9431 \
                  (or the pod IP) behind a NetworkPolicy.\nMetric names and labels: docs/CLI.md."
)]
pub struct MetricsArgs {
    /// Address to serve /metrics on, e.g. 0.0.0.0:9431, or 127.0.0.1:0 for any free port.
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN)]
    listen: String,
    #[command(flatten)]
    regions: RegionArgs,
    /// Print one exposition to stdout and exit (non-zero if a named region is missing).
    #[arg(long)]
    once: bool,
    /// Exposition format of --once.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Metric names: vgpu's, or HAMi's exporter names for existing HAMi dashboards.
    #[arg(long, value_enum, default_value_t = Names::Vgpu)]
    names: Names,
    /// Stop exporting a region this long after its last process ended (e.g. 90s, 5m, 1h;
    /// `never` keeps it). It comes back when a process attaches again.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_grace)]
    drop_after: Grace,
}

/// An exposition format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Prometheus text format 0.0.4.
    Text,
    /// OpenMetrics 1.0.
    Openmetrics,
}

/// A naming scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Names {
    /// `vgpu_*` and `vgpu_process_*`.
    Vgpu,
    /// HAMi's `hami_vgpu_*` and `hami_container_*`.
    Hami,
}

/// The grace period before a finished container's region is dropped (`None`: never).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grace(Option<Duration>);

fn parse_grace(s: &str) -> std::result::Result<Grace, String> {
    if s.trim().eq_ignore_ascii_case("never") {
        return Ok(Grace(None));
    }
    humantime::parse_duration(s.trim())
        .map(|d| Grace(Some(d)))
        .map_err(|e| format!("{e}; use a duration such as 90s, 5m, 1h, or never"))
}

/// Which format the `Accept` header prefers: OpenMetrics only if it ranks it at least as high
/// as the text format (q-values; no header: text).
pub fn negotiate(accept: Option<&str>) -> Format {
    let Some(accept) = accept else {
        return Format::Text;
    };
    let (mut om, mut text) = (0.0f64, 0.0f64);
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.strip_prefix("q="))
            .find_map(|q| q.parse::<f64>().ok())
            .unwrap_or(1.0);
        match media.as_str() {
            "application/openmetrics-text" => om = om.max(q),
            "text/plain" | "*/*" | "text/*" => text = text.max(q),
            _ => {}
        }
    }
    if om > 0.0 && om >= text {
        Format::Openmetrics
    } else {
        Format::Text
    }
}

/// Between scrapes, per (region, device): what the last scrape saw, for rates.
#[derive(Clone, Copy, Debug)]
struct Seen {
    at: SystemTime,
    gpu_ns: u64,
    launches: u64,
    /// When the launch count was last seen to grow.
    last_launch: Option<SystemTime>,
}

/// The exporter: the watched regions, NVML (for the `gpu` label) and the last scrape's view.
pub struct Exporter {
    set: RegionSet,
    nvml: Option<Nvml>,
    names: Names,
    seen: HashMap<(PathBuf, String), Seen>,
}

impl Exporter {
    /// Watches `set` under `names`; loads NVML if present.
    pub fn new(set: RegionSet, names: Names) -> Exporter {
        Exporter {
            set,
            nvml: Nvml::load(),
            names,
            seen: HashMap::new(),
        }
    }

    /// Refreshes and renders one exposition at `now`.
    pub fn scrape(&mut self, format: Format, now: SystemTime) -> String {
        self.set.refresh_at(now);
        let gpus: HashMap<String, u32> = self
            .nvml
            .as_ref()
            .map(|n| n.gpus().into_iter().map(|g| (g.uuid, g.index)).collect())
            .unwrap_or_default();
        let mut reg = Registry::default();
        let mut seen = HashMap::new();
        let shown: Vec<&Watched> = self.set.shown_at(now).collect();
        for w in &shown {
            for d in &w.snap.devices {
                let key = (w.path.clone(), d.uuid.clone());
                let before = self.seen.get(&key).copied();
                let last_launch = match before {
                    Some(b) if d.launches > b.launches => Some(now),
                    Some(b) => b.last_launch,
                    None => None,
                };
                seen.insert(
                    key,
                    Seen {
                        at: now,
                        gpu_ns: d.gpu_ns,
                        launches: d.launches,
                        last_launch,
                    },
                );
            }
        }
        let unreadable = GaugeI::default();
        for (p, _) in &self.set.unreadable {
            unreadable
                .get_or_create(&vec![("region".to_owned(), p.display().to_string())])
                .set(1);
        }
        reg.register(
            "vgpu_region_unreadable",
            "A file of a region's size under --dir that cannot be read (permission, contents, truncated); the reason is on the exporter's stderr",
            unreadable,
        );
        match self.names {
            Names::Vgpu => vgpu_families(&mut reg, &shown, &gpus, now),
            Names::Hami => hami_families(&mut reg, &shown, &self.seen, &seen, now),
        }
        self.seen = seen;
        let mut out = String::new();
        if encode(&mut out, &reg).is_err() {
            out = "# EOF\n".to_owned();
        }
        match format {
            Format::Openmetrics => out,
            Format::Text => to_text(&out),
        }
    }
}

/// Rewrites an OpenMetrics exposition as text format 0.0.4: a counter family is named with
/// its `_total` sample name in `# HELP`/`# TYPE`; `# UNIT` and `# EOF` go.
pub fn to_text(om: &str) -> String {
    let counters: Vec<&str> = om
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(om.len());
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let mut l = line.to_owned();
        for kw in ["# HELP ", "# TYPE "] {
            if let Some(rest) = line.strip_prefix(kw) {
                let name = rest.split(' ').next().unwrap_or("");
                if counters.contains(&name) {
                    l = format!("{kw}{name}_total{}", &rest[name.len()..]);
                }
            }
        }
        out.push_str(&l);
        out.push('\n');
    }
    out
}

type Labels = Vec<(String, String)>;
type GaugeI = Family<Labels, Gauge>;
type GaugeF = Family<Labels, Gauge<f64, AtomicU64>>;
type CountU = Family<Labels, Counter>;
type CountF = Family<Labels, Counter<f64, AtomicU64>>;

fn gauge(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

fn identity_labels(id: &Identity, l: &mut Labels) {
    for (k, v) in [
        ("namespace", &id.namespace),
        ("pod", &id.pod),
        ("container", &id.container),
        ("pod_uid", &id.pod_uid),
    ] {
        if let Some(v) = v {
            l.push((k.to_owned(), v.clone()));
        }
    }
}

fn vgpu_families(
    reg: &mut Registry,
    shown: &[&Watched],
    gpus: &HashMap<String, u32>,
    now: SystemTime,
) {
    let limit = GaugeI::default();
    let sm = GaugeI::default();
    let used = GaugeI::default();
    let peak = GaugeI::default();
    let gpu = CountF::default();
    let thr = CountF::default();
    let denied = CountU::default();
    let launches = CountU::default();
    let p_used = GaugeI::default();
    let p_peak = GaugeI::default();
    let p_gpu = CountF::default();
    let p_thr = CountF::default();
    let p_denied = CountU::default();
    let p_launches = CountU::default();
    let last_update = GaugeI::default();
    let stale = GaugeI::default();
    let build = GaugeI::default();
    build
        .get_or_create(&vec![
            ("version".to_owned(), env!("CARGO_PKG_VERSION").to_owned()),
            ("commit".to_owned(), env!("VGPU_COMMIT").to_owned()),
        ])
        .set(1);
    for w in shown {
        let mut base: Labels = vec![("region".to_owned(), w.path.display().to_string())];
        identity_labels(&w.identity, &mut base);
        let unix = |t: SystemTime| t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        last_update
            .get_or_create(&base)
            .set(gauge(unix(w.last_active.min(now))));
        stale.get_or_create(&base).set(i64::from(w.stale));
        let dev_labels = |i: usize, uuid: &str| {
            let mut l = base.clone();
            l.push(("device".to_owned(), i.to_string()));
            l.push(("UUID".to_owned(), uuid.to_owned()));
            if let Some(g) = gpus.get(uuid) {
                l.push(("gpu".to_owned(), g.to_string()));
            }
            l
        };
        for (i, d) in w.snap.devices.iter().enumerate() {
            let l = dev_labels(i, &d.uuid);
            if let Some(v) = d.limit {
                limit.get_or_create(&l).set(gauge(v));
            }
            if let Some(v) = d.sm_limit {
                sm.get_or_create(&l).set(i64::from(v));
            }
            used.get_or_create(&l).set(gauge(d.used));
            peak.get_or_create(&l).set(gauge(d.peak));
            denied.get_or_create(&l).inc_by(d.denied);
            if measured(d) {
                gpu.get_or_create(&l).inc_by(secs(d.gpu_ns));
                thr.get_or_create(&l).inc_by(secs(d.throttled_ns));
                launches.get_or_create(&l).inc_by(d.launches);
            }
        }
        // Per process: two slots of one PID (a PID reused in another PID namespace) are
        // summed (their peak is the larger).
        #[derive(Default)]
        struct P {
            used: u64,
            peak: u64,
            gpu_ns: u64,
            thr_ns: u64,
            denied: u64,
            launches: u64,
        }
        let mut per: BTreeMap<(usize, u32), P> = BTreeMap::new();
        for p in &w.snap.processes {
            for i in 0..w.snap.devices.len() {
                let at = |v: &[u64]| v.get(i).copied().unwrap_or(0);
                let e = per.entry((i, p.pid)).or_default();
                e.used += at(&p.used);
                e.peak = e.peak.max(at(&p.peak));
                e.gpu_ns += at(&p.gpu_ns);
                e.thr_ns += at(&p.throttled_ns);
                e.denied += at(&p.denied);
                e.launches += at(&p.launches);
            }
        }
        for ((i, pid), p) in per {
            let d = &w.snap.devices[i];
            let mut l = dev_labels(i, &d.uuid);
            l.push(("pid".to_owned(), pid.to_string()));
            p_used.get_or_create(&l).set(gauge(p.used));
            p_peak.get_or_create(&l).set(gauge(p.peak));
            p_denied.get_or_create(&l).inc_by(p.denied);
            if measured(d) {
                p_gpu.get_or_create(&l).inc_by(secs(p.gpu_ns));
                p_thr.get_or_create(&l).inc_by(secs(p.thr_ns));
                p_launches.get_or_create(&l).inc_by(p.launches);
            }
        }
    }
    let c = "Container: ";
    let p = "Process: ";
    reg.register(
        "vgpu_build_info",
        "The vgpu exporter's version and git commit (value 1)",
        build,
    );
    reg.register(
        "vgpu_region_last_update_timestamp_seconds",
        "Container: when its region was last seen with a live process or changing, Unix seconds",
        last_update,
    );
    reg.register(
        "vgpu_region_stale",
        "Container: 1 when no live process is attached to its region (finished or idle; totals are final)",
        stale,
    );
    reg.register(
        "vgpu_memory_limit_bytes",
        format!("{c}device memory limit (absent: no limit)"),
        limit,
    );
    reg.register(
        "vgpu_sm_limit_percent",
        format!("{c}compute (SM) limit, percent (absent: no limit)"),
        sm,
    );
    reg.register(
        "vgpu_memory_used_bytes",
        format!("{c}device memory in use by its live processes"),
        used,
    );
    reg.register(
        "vgpu_memory_peak_bytes",
        format!("{c}high-water mark of device memory in use"),
        peak,
    );
    reg.register(
        "vgpu_gpu_time_seconds",
        format!("{c}GPU time of its kernels, exited processes included (absent: not measured)"),
        gpu,
    );
    reg.register(
        "vgpu_throttled_seconds",
        format!(
            "{c}time kernel launches were held back by the compute limit (absent: not measured)"
        ),
        thr,
    );
    reg.register(
        "vgpu_alloc_denied",
        format!("{c}allocations refused by the memory limit, exited processes included"),
        denied,
    );
    reg.register(
        "vgpu_kernel_launches",
        format!("{c}kernels launched, exited processes included (absent: not measured)"),
        launches,
    );
    reg.register(
        "vgpu_process_memory_used_bytes",
        format!("{p}device memory in use"),
        p_used,
    );
    reg.register(
        "vgpu_process_memory_peak_bytes",
        format!("{p}high-water mark of device memory in use"),
        p_peak,
    );
    reg.register(
        "vgpu_process_gpu_time_seconds",
        format!("{p}GPU time of its kernels (absent: not measured)"),
        p_gpu,
    );
    reg.register(
        "vgpu_process_throttled_seconds",
        format!(
            "{p}time its kernel launches were held back by the compute limit (absent: not measured)"
        ),
        p_thr,
    );
    reg.register(
        "vgpu_process_alloc_denied",
        format!("{p}allocations refused by the memory limit"),
        p_denied,
    );
    reg.register(
        "vgpu_process_kernel_launches",
        format!("{p}kernels launched (absent: not measured)"),
        p_launches,
    );
}

fn hami_families(
    reg: &mut Registry,
    shown: &[&Watched],
    before: &HashMap<(PathBuf, String), Seen>,
    after: &HashMap<(PathBuf, String), Seen>,
    now: SystemTime,
) {
    let used = GaugeI::default();
    let limit = GaugeI::default();
    let context = GaugeI::default();
    let module = GaugeI::default();
    let buffer = GaugeI::default();
    let util = GaugeF::default();
    let last = GaugeF::default();
    for w in shown {
        let mut base = Labels::new();
        identity_labels(&w.identity, &mut base);
        if w.identity.container.is_none() {
            // Without a container identity, the file keeps the series of two regions apart.
            base.push(("region".to_owned(), w.path.display().to_string()));
        }
        for (i, d) in w.snap.devices.iter().enumerate() {
            let mut l = base.clone();
            l.push(("vdevice_index".to_owned(), i.to_string()));
            l.push(("device_uuid".to_owned(), d.uuid.clone()));
            used.get_or_create(&l).set(gauge(d.used));
            if let Some(v) = d.limit {
                limit.get_or_create(&l).set(gauge(v));
            }
            context.get_or_create(&l).set(gauge(d.context));
            module.get_or_create(&l).set(0);
            buffer
                .get_or_create(&l)
                .set(gauge(d.used.saturating_sub(d.context)));
            let key = (w.path.clone(), d.uuid.clone());
            if measured(d)
                && let (Some(b), Some(a)) = (before.get(&key), after.get(&key))
                && let Ok(wall) = a.at.duration_since(b.at)
                && !wall.is_zero()
            {
                // GPU time arrives a window at a time (reported when the window drains), so
                // a window that straddles the previous scrape can put more GPU time than wall
                // time between two scrapes: a ratio of the device's time is at most 1.
                let busy = a.gpu_ns.saturating_sub(b.gpu_ns) as f64;
                util.get_or_create(&l)
                    .set((busy / wall.as_nanos() as f64).min(1.0));
            }
            if let Some(t) = after.get(&key).and_then(|s| s.last_launch) {
                let ago = now.duration_since(t).unwrap_or_default();
                last.get_or_create(&l).set(ago.as_secs_f64());
            }
        }
    }
    reg.register(
        "hami_vgpu_memory_used_bytes",
        "Container: device memory in use (HAMi name)",
        used,
    );
    reg.register(
        "hami_vgpu_memory_limit_bytes",
        "Container: device memory limit (HAMi name)",
        limit,
    );
    reg.register(
        "hami_vgpu_memory_context_bytes",
        "Container: device memory of CUDA contexts, as vgpu charged them (HAMi name)",
        context,
    );
    reg.register(
        "hami_vgpu_memory_module_bytes",
        "Container: device memory of loaded modules (HAMi name; vgpu does not split it out of the context: 0)",
        module,
    );
    reg.register(
        "hami_vgpu_memory_buffer_bytes",
        "Container: device memory of allocations: in use less contexts (HAMi name)",
        buffer,
    );
    reg.register(
        "hami_container_device_utilization_ratio",
        "Container: share of the device's time its kernels ran since the previous scrape (HAMi name; absent: not measured or first scrape)",
        util,
    );
    reg.register(
        "hami_container_last_kernel_elapsed_seconds",
        "Container: seconds since the exporter last saw its launch count grow (HAMi name; absent: not seen)",
        last,
    );
}

pub fn main(args: MetricsArgs) -> Result<ExitCode> {
    let (files, dirs) = args.regions.resolve()?;
    let mut set = RegionSet::new(files, dirs);
    set.drop_after = args.drop_after.0;
    // The DaemonSet mounts the node's regions read-only: never open them for writing.
    set.read_only = true;
    let mut exp = Exporter::new(set, args.names);
    if args.once {
        let out = exp.scrape(args.format, SystemTime::now());
        for (p, e) in &exp.set.unreadable {
            eprintln!("vgpu metrics: cannot read {}: {e}", p.display());
        }
        if !exp.set.errors.is_empty() {
            return Err(Error::Missing(exp.set.errors.join("\n")));
        }
        crate::shared::output::write_stdout(out.as_bytes())?;
        return Ok(ExitCode::SUCCESS);
    }
    let listener = TcpListener::bind(&args.listen).map_err(|source| Error::Listen {
        addr: args.listen.clone(),
        source,
    })?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::io("listening socket", e))?;
    eprintln!("vgpu metrics: serving http://{addr}/metrics");
    let exp = Mutex::new((exp, Vec::<String>::new()));
    http::serve(listener, http::Limits::default(), move |req: &Request| {
        match req.path.as_str() {
            "/metrics" => {
                let format = negotiate(req.accept.as_deref());
                let mut g = exp.lock().unwrap_or_else(|e| e.into_inner());
                let (exp, logged) = &mut *g;
                let body = exp.scrape(format, SystemTime::now());
                // Each region error once, not at every scrape.
                let errors: Vec<String> = exp
                    .set
                    .errors
                    .iter()
                    .cloned()
                    .chain(
                        exp.set
                            .unreadable
                            .iter()
                            .map(|(p, e)| format!("cannot read {}: {e}", p.display())),
                    )
                    .collect();
                if errors != *logged {
                    // Never `eprintln!`: a closed stderr would panic the server.
                    use std::io::Write as _;
                    let mut err = std::io::stderr().lock();
                    for e in &errors {
                        let _ = writeln!(err, "vgpu metrics: {e}");
                    }
                    *logged = errors;
                }
                Response {
                    status: 200,
                    content_type: match format {
                        Format::Text => TEXT,
                        Format::Openmetrics => OPENMETRICS,
                    },
                    body: body.into_bytes(),
                }
            }
            "/" => Response::text(200, "vgpu metrics: see /metrics\n"),
            _ => Response::text(404, "not found\n"),
        }
    })
    .map_err(|e| Error::io("serving HTTP", e))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_negotiation() {
        assert_eq!(negotiate(None), Format::Text);
        assert_eq!(negotiate(Some("*/*")), Format::Text);
        assert_eq!(negotiate(Some("text/plain;version=0.0.4")), Format::Text);
        // Prometheus 2.x's header.
        let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                    version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(negotiate(Some(prom)), Format::Openmetrics);
        assert_eq!(
            negotiate(Some("application/openmetrics-text;q=0.2, text/plain;q=0.9")),
            Format::Text
        );
        assert_eq!(
            negotiate(Some("application/openmetrics-text; version=1.0.0")),
            Format::Openmetrics
        );
    }

    #[test]
    fn text_format_names_counters_by_their_samples() {
        let om = "# HELP a_seconds A.\n# TYPE a_seconds counter\n# UNIT a_seconds seconds\n\
                  a_seconds_total{x=\"1\"} 1.5\n# HELP b_bytes B.\n# TYPE b_bytes gauge\n\
                  b_bytes 3\n# EOF\n";
        assert_eq!(
            to_text(om),
            "# HELP a_seconds_total A.\n# TYPE a_seconds_total counter\n\
             a_seconds_total{x=\"1\"} 1.5\n# HELP b_bytes B.\n# TYPE b_bytes gauge\nb_bytes 3\n"
        );
    }

    #[test]
    fn grace_periods() {
        assert_eq!(parse_grace("never"), Ok(Grace(None)));
        assert_eq!(parse_grace("90s"), Ok(Grace(Some(Duration::from_secs(90)))));
        assert_eq!(parse_grace("5m"), Ok(Grace(Some(Duration::from_secs(300)))));
        assert!(parse_grace("soon").is_err());
    }
}
