//! `vgpu metrics`: the regions' accounting for Prometheus, over HTTP (`/metrics`, default
//! `127.0.0.1:9431`) or once on stdout.
//!
//! Formats: the classic text format 0.0.4 (`text/plain; version=0.0.4`), or OpenMetrics 1.0
//! when the scraper's `Accept` header prefers it (Prometheus does); `--once` prints the text
//! format unless `--format openmetrics`. The exposition is built once with `prometheus-client`
//! (OpenMetrics) and [`to_text`] rewrites it for 0.0.4 (counter families named with `_total`,
//! no `# EOF`).
//!
//! The families are one table ([`families::FAMILIES`]); each name set renders from it. Names
//! (`--names vgpu`, the default): container series (the region's totals, processes that have
//! exited included) and per-process series (`vgpu_process_*`, label `pid`) have separate
//! names, so `sum by (device)` over either never counts twice. See docs/CLI.md for the table.
//! `--names hami` serves HAMi's monitor's names instead (`hami_vgpu_memory_used_bytes`, ...),
//! `--names legacy` those of Volcano's monitor and of HAMi's `--legacy-metrics`
//! (`vGPU_device_memory_usage_in_bytes`, ...); `--names hami,legacy` both.
//!
//! Labels (vgpu's names): `region` (the file), `device` (the region's device index), `UUID` and
//! `gpu` (the physical GPU as dcgm-exporter labels it; `gpu` only where NVML answers), and
//! `namespace`, `pod`, `container`, `pod_uid` where known ([`crate::shared::regions::Identity`]).
//! HAMi's and the legacy names carry their monitors' labels instead (see [`families`]).
//!
//! A scrape reads the mapped files' atomics: it takes no slot and no lock a workload takes.

use std::collections::HashMap;
use std::net::TcpListener;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::{Args, ValueEnum};
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;

use crate::error::{Error, Result};
use crate::http::{self, Request, Response};
use crate::nvml::Nvml;
use crate::shared::regions::{RegionArgs, RegionSet, Watched};

mod families;
mod watchlog;

pub use families::Names;
use families::{Scrape, Seen, SeenKey};

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
    /// Metric names: vgpu's, HAMi's monitor's (`hami`), or the legacy names of Volcano's
    /// monitor and of HAMi's --legacy-metrics (`legacy`), for existing dashboards; several
    /// (`--names hami,legacy`) are served side by side.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "vgpu")]
    names: Vec<Names>,
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

/// The exporter: the watched regions, NVML (for the `gpu` label) and the last scrape's view.
pub struct Exporter {
    set: RegionSet,
    nvml: Option<Nvml>,
    names: Vec<Names>,
    seen: HashMap<SeenKey, Seen>,
}

impl Exporter {
    /// Watches `set` under the name sets `names`; loads NVML if present.
    pub fn new(set: RegionSet, names: Vec<Names>) -> Exporter {
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
        let shown: Vec<&Watched> = self.set.shown_at(now).collect();
        let (view, seen) = Scrape::new(
            &shown,
            &self.set.unreadable,
            &self.set.skipped,
            &gpus,
            &self.seen,
            now,
        );
        let mut reg = Registry::default();
        families::render(&self.names, &view, &mut reg);
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

pub fn main(args: MetricsArgs) -> Result<ExitCode> {
    // Connections are descriptors: take all the hard limit allows (regions keep none).
    let nofile = http::raise_nofile();
    let (files, dirs) = args.regions.resolve()?;
    let watching = watchlog::watching(&files, &dirs);
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
    // What it watches, then what a first look finds and skips; again at each change.
    let mut log = watchlog::WatchLog::default();
    exp.set.refresh_at(SystemTime::now());
    {
        use std::io::Write as _;
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{watching}");
        for l in log.lines(&exp.set, SystemTime::now()) {
            let _ = writeln!(err, "{l}");
        }
    }
    let limits = http::Limits::default().within_descriptors(nofile);
    http::serve(listener, limits, move |req: &Request| {
        match req.path.as_str() {
            "/metrics" => {
                let format = negotiate(req.accept.as_deref());
                let now = SystemTime::now();
                let body = exp.scrape(format, now);
                // What was found and skipped, when it changed (not at every scrape). Never
                // `eprintln!`: a closed stderr would panic the server.
                use std::io::Write as _;
                let mut err = std::io::stderr().lock();
                for l in log.lines(&exp.set, now) {
                    let _ = writeln!(err, "{l}");
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
