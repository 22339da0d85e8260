//! `vgpu status`: per device the limits, use and counters; per process its pid, command, use
//! and start time. Reads the region without taking a slot or a lock: usable while the workload
//! runs.

use std::collections::HashMap;
use std::path::Path;
use std::process::ExitCode;

use clap::Args;
use vgpu_policy::size::format_size;
use vgpu_region::Snapshot;

use crate::common::{self, StatusJson, secs, size_or_none, table, utc};
use crate::error::{Error, Result};
use crate::regions::{RegionArgs, RegionSet, Watched};

#[derive(Debug, Args)]
#[command(
    after_help = "JSON fields (numbers in bytes, nanoseconds, Unix seconds; null: none):\n  \
    region; devices[]: index, uuid, limit, sm_limit, used, free, peak, gpu_ns, throttled_ns, denied, launches\n  \
    (gpu_ns, throttled_ns, denied, launches include processes that have exited);\n  \
    processes[]: pid, slot, command, start_time, devices[]: index, uuid, used, peak, gpu_ns, throttled_ns, denied, launches"
)]
pub struct StatusArgs {
    #[command(flatten)]
    regions: RegionArgs,
    /// Print JSON instead of tables (one object for one region, else an array).
    #[arg(long)]
    json: bool,
}

pub fn main(args: StatusArgs) -> Result<ExitCode> {
    let (files, dirs) = args.regions.resolve()?;
    let mut set = RegionSet::new(files, dirs);
    set.refresh();
    let shown: Vec<&Watched> = set.shown().collect();
    if shown.is_empty() {
        if let Some(e) = set.errors.first() {
            return Err(Error::Missing(format!(
                "{e}\n  hint: no vgpu process has created this region yet, or this is not the \
                 container's region; pass --region PATH (the CUDA_DEVICE_MEMORY_SHARED_CACHE of \
                 the workload) or --dir DIR"
            )));
        }
        return Err(Error::Missing(
            "no region files found; pass --region PATH or --dir DIR".into(),
        ));
    }
    let mut out = String::new();
    if args.json {
        let all: Vec<StatusJson> = shown
            .iter()
            .map(|w| StatusJson::new(&w.path, &w.snap))
            .collect();
        let s = if all.len() == 1 {
            serde_json::to_string_pretty(&all[0])
        } else {
            serde_json::to_string_pretty(&all)
        };
        out = s.map_err(|e| Error::io("JSON", e.into()))? + "\n";
    } else {
        for (i, w) in shown.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            out.push_str(&render(&w.path, &w.snap, None));
        }
    }
    common::write_stdout(out.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// Shares of GPU time over the last refresh interval, percent (`vgpu top`).
#[derive(Debug, Default)]
pub struct Shares {
    /// Per device.
    pub devices: Vec<Option<f64>>,
    /// Per (process slot, device).
    pub processes: HashMap<(usize, usize), f64>,
}

/// The text form: a device table and a process table (processes in the snapshot's order).
/// With `shares` (`top`), a GPU% column: the share of GPU time used over the last interval.
pub fn render(path: &Path, s: &Snapshot, shares: Option<&Shares>) -> String {
    let id = crate::regions::Identity::from_path(path).with_recorded(&s.identity);
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
    out
}
