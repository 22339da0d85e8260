//! `vgpu run`: preload libvgpu.so with limits set, then exec the command.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::Args;
use vgpu_policy::config::{self, Config, MAX_DEVICE_INDEX};

use crate::error::{Error, Result};
use crate::inherited::Inherited;
use crate::shared::libpath::{LIB_ENV, find_lib, preload_value};
use crate::shared::limits::{MemLimit, SmLimit, parse_mem_limit, parse_sm_limit};
use crate::shared::locate::{location, run_pid, user_dir, user_run_regions};
use crate::shared::output::size_or_none;

#[derive(Debug, Args)]
#[command(
    after_help = "Sizes: a byte count or a number with a binary suffix k, m, g, t (e.g. 4g, 4096m, 4Gi, 4294967296); 0 or none: no limit.\n\
                  SM limits: a percentage 1 to 99; 0, 100 or none: no limit.\n\
                  Region: each run gets a container (region, one budget) of its own, /tmp/vgpu-<uid>/run-<pid>.cache, unless \
                  --region PATH joins one or $CUDA_DEVICE_MEMORY_SHARED_CACHE names the container's.\n\
                  Flags come before the command; `--` before it is optional unless the command starts with `-`.\n\
                  libvgpu.so is taken from --lib, else $VGPU_LIB, else next to the vgpu executable (also its deps/ and ../lib/)."
)]
pub struct RunArgs {
    /// Device-memory limit for every GPU.
    #[arg(long, value_name = "SIZE", value_parser = parse_mem_limit, allow_hyphen_values = true)]
    memory: Option<MemLimit>,

    /// Device-memory limit for one GPU (repeatable), e.g. --memory-device 1=2g. I is the
    /// container's device index as NVML numbers the GPUs (the order of `nvidia-smi -L`), not
    /// the CUDA ordinal: CUDA_VISIBLE_DEVICES does not renumber it.
    #[arg(long = "memory-device", value_name = "I=SIZE", value_parser = parse_device_size, allow_hyphen_values = true)]
    memory_device: Vec<(u32, MemLimit)>,

    /// Compute (SM) limit for every GPU: a percentage 1 to 99; 0, 100 or none: no limit.
    #[arg(long, value_name = "PCT", value_parser = parse_sm_limit, allow_hyphen_values = true)]
    sm: Option<SmLimit>,

    /// Join this region (a container's shared budget) instead of creating one for this run.
    #[arg(long, value_name = "PATH")]
    region: Option<PathBuf>,

    /// Measure GPU time for the monitor on GPUs without a compute limit too
    /// (sets VGPU_MEASURE_GPU_TIME=true; measured cost on an H200: within 0.7 %).
    #[arg(long = "measure-gpu-time")]
    measure_gpu_time: bool,

    /// Observe only: account memory (on every GPU) and GPU time in the region, refuse and
    /// throttle nothing; --memory and --sm are then not enforced (sets VGPU_OBSERVE=true).
    #[arg(long)]
    observe: bool,

    /// Path of libvgpu.so.
    #[arg(long, value_name = "PATH")]
    lib: Option<PathBuf>,

    /// The command to run, and its arguments.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    command: Vec<OsString>,
}

fn parse_device_size(s: &str) -> std::result::Result<(u32, MemLimit), String> {
    let (index, size) = s.split_once('=').ok_or_else(|| {
        "expected I=SIZE, a device index (as NVML numbers the GPUs) and a size, e.g. 1=4g"
            .to_owned()
    })?;
    let index = index
        .trim_ascii()
        .parse::<u32>()
        .ok()
        .filter(|&i| i <= MAX_DEVICE_INDEX)
        .ok_or_else(|| format!("device index {index:?} is not an index 0 to {MAX_DEVICE_INDEX}"))?;
    Ok((index, parse_mem_limit(size)?))
}

/// Runs `vgpu run`. Returns only on failure (success replaces this process).
pub fn main(args: RunArgs, inherited: &Inherited) -> Result<ExitCode> {
    let lib = find_lib(
        args.lib.as_deref(),
        inherited.get(LIB_ENV).map(ToOwned::to_owned),
        std::env::current_exe(),
    )?;
    let vars = limit_vars(&args)?;
    check_device_ordinals(&args)?;
    // Kept as bytes: a path need not be UTF-8.
    let region = region_var(args.region.as_deref())?;
    let preload = preload_value(&lib, inherited.get("LD_PRELOAD"))?;

    // Check the environment the command will see, so a bad inherited variable is reported now
    // rather than by the preload library inside the command.
    let mut env: Vec<(String, String)> = inherited
        .utf8()
        .filter(|(k, _)| {
            let replaced = vars.iter().any(|(name, _)| name == k)
                || (region.is_some() && k == config::vars::SHARED_CACHE);
            !replaced
        })
        .collect();
    env.extend(vars.iter().cloned());
    if let Some(path) = &region {
        // Only checked here (a path is any non-empty bytes); the command gets the bytes.
        env.push((
            config::vars::SHARED_CACHE.to_owned(),
            path.to_string_lossy().into_owned(),
        ));
    }
    Config::from_vars(env)?;

    let (program, rest) = args
        .command
        .split_first()
        .expect("clap requires at least one CMD value");
    let mut command = Command::new(program);
    command.args(rest).envs(vars).env("LD_PRELOAD", preload);
    if let Some(path) = region {
        command.env(config::vars::SHARED_CACHE, path);
    }
    let source = command.exec();
    Err(Error::Exec {
        program: program.to_string_lossy().into_owned(),
        source,
    })
}

/// The limit variables to set, from the flags.
fn limit_vars(args: &RunArgs) -> Result<Vec<(String, String)>> {
    let mut vars = Vec::new();
    // `none` is written as 0, which the configuration reads as "no limit" (and which
    // overrides an inherited value).
    let bytes = |m: MemLimit| m.0.unwrap_or(0).to_string();
    if let Some(m) = args.memory {
        vars.push((config::vars::MEMORY_LIMIT.to_owned(), bytes(m)));
    }
    let mut seen: Vec<(u32, MemLimit)> = Vec::new();
    for &(index, m) in &args.memory_device {
        if let Some(&(_, earlier)) = seen.iter().find(|(i, _)| *i == index) {
            return Err(Error::DuplicateDevice {
                index,
                first: size_or_none(earlier.0),
                second: size_or_none(m.0),
            });
        }
        seen.push((index, m));
        vars.push((format!("{}_{index}", config::vars::MEMORY_LIMIT), bytes(m)));
    }
    if let Some(pct) = args.sm {
        vars.push((
            config::vars::SM_LIMIT.to_owned(),
            pct.0.unwrap_or(0).to_string(),
        ));
    }
    if args.measure_gpu_time {
        vars.push((config::vars::MEASURE_GPU_TIME.to_owned(), "true".to_owned()));
    }
    if args.observe {
        vars.push((config::vars::OBSERVE.to_owned(), "true".to_owned()));
    }
    Ok(vars)
}

/// `--memory-device I=...` for an index this machine does not have is an error (when NVML can
/// tell how many GPUs there are).
fn check_device_ordinals(args: &RunArgs) -> Result<()> {
    let Some(&(index, _)) = args.memory_device.iter().max_by_key(|(i, _)| *i) else {
        return Ok(());
    };
    let Some(machine) = crate::nvml::Nvml::load().and_then(|n| n.count()) else {
        return Ok(());
    };
    // `CUDA_DEVICE_MEMORY_LIMIT_<i>` numbers the container's devices as NVML does (whatever a
    // program's CUDA_VISIBLE_DEVICES), so the index is checked against NVML's count.
    let count = machine;
    if index >= count {
        return Err(Error::NoSuchGpu {
            flag: "--memory-device",
            index,
            count,
        });
    }
    Ok(())
}

/// The region the command's processes share: `--region PATH`; else the container's
/// (`CUDA_DEVICE_MEMORY_SHARED_CACHE` inherited: `None`, left as it is); else a new one for
/// this run, `run-<pid>.cache` in the user's directory (the PID is the command's: `exec`
/// keeps it), after removing the regions of earlier runs that have ended.
fn region_var(region: Option<&Path>) -> Result<Option<PathBuf>> {
    if let Some(p) = region {
        let abs = std::path::absolute(p)
            .map_err(|e| Error::io(format!("--region {}", p.display()), e))?;
        return Ok(Some(abs));
    }
    if config::Config::shared_cache_from_env()
        .ok()
        .flatten()
        .is_some()
    {
        return Ok(None);
    }
    let Some(dir) = user_dir() else {
        return Ok(None);
    };
    private_dir(&dir)?;
    remove_ended_runs();
    Ok(Some(dir.join(format!("run-{}.cache", std::process::id()))))
}

/// Creates `dir` 0700 if missing; it must be a directory (not a link) of ours that nobody else
/// can write.
fn private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let what = || format!("region directory {}", dir.display());
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(Error::io(what(), e)),
    }
    let md = std::fs::symlink_metadata(dir).map_err(|e| Error::io(what(), e))?;
    let me = std::fs::metadata("/proc/self").map(|m| m.uid()).ok();
    if !md.is_dir() || Some(md.uid()) != me || md.mode() & 0o022 != 0 {
        return Err(Error::io(
            what(),
            io::Error::other("not a directory of this user's that only it can write"),
        ));
    }
    Ok(())
}

/// Removes `run-<pid>.cache` regions whose `vgpu run` process has exited and that no live
/// process uses.
fn remove_ended_runs() {
    for path in user_run_regions() {
        let Some(pid) = run_pid(&path) else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let Ok(r) = vgpu_region::Region::open_existing(&location(Some(&path))) else {
            continue;
        };
        r.reap_dead();
        if r.snapshot().processes.is_empty() {
            let _ = std::fs::remove_file(&path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_size_forms() {
        let m = |v| MemLimit(Some(v));
        assert_eq!(parse_device_size("1=2g"), Ok((1, m(2 << 30))));
        assert_eq!(parse_device_size("0=4096"), Ok((0, m(4096))));
        assert_eq!(parse_device_size("63=1GiB"), Ok((63, m(1 << 30))));
        assert_eq!(parse_device_size("1=none"), Ok((1, MemLimit(None))));
        assert!(parse_device_size("64=1g").is_err());
        assert!(parse_device_size("x=1g").is_err());
        assert!(parse_device_size("1g").is_err());
        assert!(
            parse_device_size("1=12zz")
                .unwrap_err()
                .contains("binary suffix")
        );
    }

    #[test]
    fn flags_become_the_limit_variables() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            run: RunArgs,
        }
        let cli = Cli::try_parse_from([
            "vgpu",
            "--memory",
            "4g",
            "--sm",
            "30",
            "--measure-gpu-time",
            "--observe",
            "--",
            "python3",
        ])
        .unwrap();
        let vars = limit_vars(&cli.run).unwrap();
        let want = [
            ("CUDA_DEVICE_MEMORY_LIMIT", "4294967296"),
            ("CUDA_DEVICE_SM_LIMIT", "30"),
            ("VGPU_MEASURE_GPU_TIME", "true"),
            ("VGPU_OBSERVE", "true"),
        ];
        let got: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(got, want);
        let plain = Cli::try_parse_from(["vgpu", "--memory", "1g", "--", "x"]).unwrap();
        assert!(
            limit_vars(&plain.run)
                .unwrap()
                .iter()
                .all(|(k, _)| k != "VGPU_MEASURE_GPU_TIME" && k != "VGPU_OBSERVE")
        );
    }

    #[test]
    fn flags_before_the_command_are_strict() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            run: RunArgs,
        }
        let e = Cli::try_parse_from(["vgpu", "--memroy", "4g", "--", "cmd"])
            .err()
            .expect("a typo is an error")
            .to_string();
        assert!(e.contains("--memroy"), "{e}");
        assert!(e.contains("similar argument exists: '--memory'"), "{e}");
        // After the command (with or without `--`), everything is the command's.
        for argv in [
            &["vgpu", "--memory", "1g", "python3", "-u", "--memory", "x"][..],
            &[
                "vgpu", "--memory", "1g", "--", "python3", "-u", "--memory", "x",
            ][..],
        ] {
            let cli = Cli::try_parse_from(argv).unwrap();
            assert_eq!(cli.run.command, ["python3", "-u", "--memory", "x"]);
            assert_eq!(cli.run.memory, Some(MemLimit(Some(1 << 30))));
        }
        // `none` wherever a limit is, written as 0 (no limit, overriding an inherited value).
        let cli = Cli::try_parse_from([
            "vgpu",
            "--memory",
            "none",
            "--memory-device",
            "1=none",
            "--sm",
            "none",
            "x",
        ])
        .unwrap();
        let vars = limit_vars(&cli.run).unwrap();
        let got: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            got,
            [
                ("CUDA_DEVICE_MEMORY_LIMIT", "0"),
                ("CUDA_DEVICE_MEMORY_LIMIT_1", "0"),
                ("CUDA_DEVICE_SM_LIMIT", "0")
            ]
        );
    }
}
