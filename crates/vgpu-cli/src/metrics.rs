//! `vgpu metrics`: the regions' accounting in the OpenMetrics text format, over HTTP
//! (`/metrics`) or once on stdout.
//!
//! Metrics (label `region`: the file, `device`: the UUID; per-process series add `pid`, the
//! others are the container's, including processes that have exited):
//!
//! | name | type | series |
//! |---|---|---|
//! | `vgpu_memory_limit_bytes` | gauge | device (absent: no limit) |
//! | `vgpu_sm_limit_percent` | gauge | device (absent: no limit) |
//! | `vgpu_memory_used_bytes` | gauge | device; device+pid |
//! | `vgpu_memory_peak_bytes` | gauge | device; device+pid |
//! | `vgpu_gpu_time_seconds_total` | counter | device; device+pid |
//! | `vgpu_throttled_seconds_total` | counter | device; device+pid |
//! | `vgpu_alloc_denied_total` | counter | device; device+pid |
//! | `vgpu_kernel_launches_total` | counter | device; device+pid |
//!
//! A scrape reads the mapped files' atomics: it takes no slot and no lock a workload takes.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

use crate::common::RegionSet;
use crate::error::{Error, Result};

/// Content type of `/metrics`.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Debug, Args)]
pub struct MetricsArgs {
    /// Address to serve /metrics on, e.g. 0.0.0.0:9400 or 127.0.0.1:0.
    #[arg(long, value_name = "ADDR", required_unless_present = "once")]
    listen: Option<String>,
    /// A region file to watch (repeatable).
    #[arg(long, value_name = "PATH")]
    region: Vec<PathBuf>,
    /// A directory of region files to watch (repeatable; files appearing later are picked up,
    /// one level of subdirectories is searched).
    #[arg(long, value_name = "DIR")]
    dir: Vec<PathBuf>,
    /// Print one exposition to stdout and exit.
    #[arg(long)]
    once: bool,
}

pub fn main(args: MetricsArgs) -> Result<ExitCode> {
    let mut files = args.region.clone();
    if files.is_empty() && args.dir.is_empty() {
        files.push(crate::common::default_location().path);
    }
    let mut set = RegionSet::new(files, args.dir.clone());
    if args.once {
        set.refresh();
        for e in &set.errors {
            eprintln!("vgpu metrics: {e}");
        }
        print!("{}", render(&set));
        return Ok(ExitCode::SUCCESS);
    }
    let Some(addr) = args.listen else {
        return Err(Error::Usage("--listen ADDR or --once is needed".into()));
    };
    let server = tiny_http::Server::http(&addr).map_err(|e| Error::Listen {
        addr: addr.clone(),
        source: std::io::Error::other(e),
    })?;
    if let Some(a) = server.server_addr().to_ip() {
        eprintln!("vgpu metrics: serving http://{a}/metrics");
    }
    for req in server.incoming_requests() {
        let path = req.url().split('?').next().unwrap_or("").to_owned();
        let resp = match path.as_str() {
            "/metrics" => {
                set.refresh();
                for e in &set.errors {
                    eprintln!("vgpu metrics: {e}");
                }
                tiny_http::Response::from_string(render(&set)).with_header(header(CONTENT_TYPE))
            }
            "/" => tiny_http::Response::from_string("vgpu metrics: see /metrics\n")
                .with_header(header("text/plain; charset=utf-8")),
            _ => tiny_http::Response::from_string("not found\n").with_status_code(404),
        };
        let _ = req.respond(resp);
    }
    Ok(ExitCode::SUCCESS)
}

fn header(content_type: &str) -> tiny_http::Header {
    tiny_http::Header::from_bytes(&b"Content-Type"[..], content_type.as_bytes())
        .expect("a valid header")
}

type Labels = Vec<(String, String)>;
type G = Family<Labels, Gauge>;
type CU = Family<Labels, Counter>;
type CF = Family<Labels, Counter<f64, AtomicU64>>;

/// One exposition of every open region.
pub fn render(set: &RegionSet) -> String {
    let limit = G::default();
    let sm = G::default();
    let used = G::default();
    let peak = G::default();
    let gpu = CF::default();
    let thr = CF::default();
    let denied = CU::default();
    let launches = CU::default();
    let gauge = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let secs = |ns: u64| ns as f64 / 1e9;
    for (path, region) in set.regions() {
        // Clear the slots of processes that died since the last vgpu process looked (a
        // non-blocking try-lock per slot), so a stopped container does not show stale use.
        region.reap_dead();
        let s = region.snapshot();
        let region = path.display().to_string();
        let labels = |uuid: &str, pid: Option<u32>| {
            let mut l = vec![
                ("region".to_owned(), region.clone()),
                ("device".to_owned(), uuid.to_owned()),
            ];
            if let Some(p) = pid {
                l.push(("pid".to_owned(), p.to_string()));
            }
            l
        };
        for d in &s.devices {
            let l = labels(&d.uuid, None);
            if let Some(v) = d.limit {
                limit.get_or_create(&l).set(gauge(v));
            }
            if let Some(v) = d.sm_limit {
                sm.get_or_create(&l).set(i64::from(v));
            }
            used.get_or_create(&l).set(gauge(d.used));
            peak.get_or_create(&l).set(gauge(d.peak));
            gpu.get_or_create(&l).inc_by(secs(d.gpu_ns));
            thr.get_or_create(&l).inc_by(secs(d.throttled_ns));
            denied.get_or_create(&l).inc_by(d.denied);
            launches.get_or_create(&l).inc_by(d.launches);
        }
        // Two slots of one PID (a PID reused in another namespace) are summed.
        let mut seen: HashMap<(usize, u32), ()> = HashMap::new();
        for p in &s.processes {
            for (i, d) in s.devices.iter().enumerate() {
                let at = |v: &[u64]| v.get(i).copied().unwrap_or(0);
                let l = labels(&d.uuid, Some(p.pid));
                let first = seen.insert((i, p.pid), ()).is_none();
                let g = used.get_or_create(&l);
                g.set(if first { 0 } else { g.get() } + gauge(at(&p.used)));
                let g = peak.get_or_create(&l);
                g.set(if first { 0 } else { g.get() }.max(gauge(at(&p.peak))));
                gpu.get_or_create(&l).inc_by(secs(at(&p.gpu_ns)));
                thr.get_or_create(&l).inc_by(secs(at(&p.throttled_ns)));
                denied.get_or_create(&l).inc_by(at(&p.denied));
                launches.get_or_create(&l).inc_by(at(&p.launches));
            }
        }
    }
    let mut reg = Registry::default();
    reg.register(
        "vgpu_memory_limit_bytes",
        "Device memory limit of the container",
        limit,
    );
    reg.register(
        "vgpu_memory_used_bytes",
        "Device memory in use (per container, or per process with pid)",
        used,
    );
    reg.register(
        "vgpu_memory_peak_bytes",
        "High-water mark of device memory in use",
        peak,
    );
    reg.register(
        "vgpu_gpu_time_seconds",
        "GPU time consumed, as the compute limiter measures it",
        gpu,
    );
    reg.register(
        "vgpu_throttled_seconds",
        "Time kernel launches were held back by the compute limit",
        thr,
    );
    reg.register(
        "vgpu_sm_limit_percent",
        "Compute (SM) limit of the container, percent",
        sm,
    );
    reg.register(
        "vgpu_alloc_denied",
        "Allocations refused by the memory limit",
        denied,
    );
    reg.register("vgpu_kernel_launches", "Kernels launched", launches);
    let mut out = String::new();
    if encode(&mut out, &reg).is_err() {
        return "# EOF\n".to_owned();
    }
    out
}
