//! `vgpu status`: per device the limits, use and counters; per process its pid, command, use
//! and start time. Reads the region without taking a slot or a lock: usable while the workload
//! runs.

use std::process::ExitCode;

use clap::Args;

use crate::error::{Error, Result};
use crate::shared::output::write_stdout;
use crate::shared::regions::{RegionArgs, RegionSet, Watched};
use crate::shared::report::{StatusJson, render};

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
            .map(|w| StatusJson::new(&w.path, &w.snap, &w.identity))
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
            out.push_str(&render(&w.path, &w.snap, &w.identity, None));
        }
    }
    write_stdout(out.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}
