//! `vgpu status`: per device the limits, use and counters; per process its pid, command, use
//! and start time. Reads the region without taking a slot or a lock: usable while the workload
//! runs.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use vgpu_policy::config::Config;
use vgpu_policy::plan::Plan;

use crate::error::{Error, Result};
use crate::shared::output::write_stdout;
use crate::shared::regions::{RegionArgs, RegionSet, Watched};
use crate::shared::report::{StatusJson, render};

#[derive(Debug, Args)]
#[command(
    after_help = "JSON fields (numbers in bytes, nanoseconds, Unix seconds; null: none):\n  \
    region; devices[]: index, uuid, limit, sm_limit, used, free, peak, gpu_ns, throttled_ns, denied, launches\n  \
    (gpu_ns, throttled_ns, denied, launches include processes that have exited);\n  \
    processes[]: pid, slot, command, start_time, library, observing, devices[]: index, uuid, used, peak, gpu_ns, throttled_ns, denied, launches;\n  \
    refusals[] (newest first, the last 16): index, uuid, seq, time_ms (Unix ms), pid, requested, used, limit, own, holder_pid, holder_used.\n\
    --node [DIR]: each GPU's node token (DIR default: $VGPU_NODE_DIR, else /tmp/vgpulock if it exists, else /tmp/vgpu-node):\n  \
    gpus[]: uuid, file, holder {id, process {pid, command, region}, held_ms, heartbeat_ms, locked} or null, waiting, waiters[], open_by[]"
)]
pub struct StatusArgs {
    #[command(flatten)]
    regions: RegionArgs,
    /// Print JSON instead of tables (one object for one region, else an array).
    #[arg(long)]
    json: bool,
    /// Show who holds each GPU's node token (the turns containers with a compute limit take)
    /// and who waits, instead of the regions; DIR: the node directory (default: as the library
    /// finds it).
    #[arg(long, value_name = "DIR", num_args = 0..=1, default_missing_value = "")]
    node: Option<PathBuf>,
}

/// `status --node [DIR]`.
fn node(dir: &Path, json: bool) -> Result<ExitCode> {
    let dir = if dir.as_os_str().is_empty() {
        Plan::resolve(&Config::from_env()?).node_dir
    } else {
        dir.to_owned()
    };
    let (gpus, errors) = crate::tokens::read(&dir);
    let out = if json {
        #[derive(serde::Serialize)]
        struct Doc<'a> {
            node_dir: String,
            gpus: &'a [crate::tokens::Gpu],
            errors: &'a [String],
        }
        let doc = Doc {
            node_dir: dir.display().to_string(),
            gpus: &gpus,
            errors: &errors,
        };
        serde_json::to_string_pretty(&doc).map_err(|e| Error::io("JSON", e.into()))? + "\n"
    } else {
        crate::tokens::render(&dir, &gpus, &errors)
    };
    write_stdout(out.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

pub fn main(args: StatusArgs) -> Result<ExitCode> {
    if let Some(dir) = &args.node {
        return node(dir, args.json);
    }
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
