//! `vgpu run`: preload libvgpu.so with limits set, then exec the command.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::Args;
use vgpu_policy::config::{self, ACCEPTED_SIZE_FORMS, Config, MAX_DEVICE_INDEX};
use vgpu_policy::size::{format_size, parse_size};

use crate::error::{Error, Result};

/// File name of the preload library.
pub const LIB_NAME: &str = "libvgpu.so";
/// Environment variable naming the preload library when `--lib` is not given.
pub const LIB_ENV: &str = "VGPU_LIB";

#[derive(Debug, Args)]
#[command(
    after_help = "Sizes: a byte count or a number with a binary suffix k, m, g, t (e.g. 4g, 4096m, 4Gi, 4294967296); 0 means no limit.\n\
                  libvgpu.so is taken from --lib, else $VGPU_LIB, else next to the vgpu executable (also its deps/ and ../lib/)."
)]
pub struct RunArgs {
    /// Device-memory limit for every GPU.
    #[arg(long, value_name = "SIZE", value_parser = parse_size_arg)]
    memory: Option<u64>,

    /// Device-memory limit for one GPU, by CUDA ordinal (repeatable), e.g. --memory-device 1=2g.
    #[arg(long = "memory-device", value_name = "I=SIZE", value_parser = parse_device_size)]
    memory_device: Vec<(u32, u64)>,

    /// Compute (SM) limit for every GPU, in percent 1..=100 (0 means no limit).
    #[arg(long, value_name = "PCT", value_parser = clap::value_parser!(u8).range(0..=100))]
    sm: Option<u8>,

    /// Measure GPU time for the monitor on GPUs without a compute limit too
    /// (sets VGPU_MEASURE_GPU_TIME=true; measured cost on an H200: within 0.7 %).
    #[arg(long = "measure-gpu-time")]
    measure_gpu_time: bool,

    /// Path of libvgpu.so.
    #[arg(long, value_name = "PATH")]
    lib: Option<PathBuf>,

    /// The command to run, and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    command: Vec<OsString>,
}

fn parse_size_arg(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| format!("{e}; use {ACCEPTED_SIZE_FORMS}"))
}

fn parse_device_size(s: &str) -> Result<(u32, u64), String> {
    let (index, size) = s
        .split_once('=')
        .ok_or_else(|| "expected I=SIZE, a CUDA device ordinal and a size, e.g. 1=4g".to_owned())?;
    let index = index
        .trim_ascii()
        .parse::<u32>()
        .ok()
        .filter(|&i| i <= MAX_DEVICE_INDEX)
        .ok_or_else(|| {
            format!("device index {index:?} is not an ordinal 0 to {MAX_DEVICE_INDEX}")
        })?;
    Ok((index, parse_size_arg(size)?))
}

/// Runs `vgpu run`. Returns only on failure (success replaces this process).
pub fn main(args: RunArgs) -> Result<ExitCode> {
    let lib = find_lib(
        args.lib.as_deref(),
        std::env::var_os(LIB_ENV),
        std::env::current_exe(),
    )?;
    let vars = limit_vars(&args)?;
    let preload = preload_value(&lib, std::env::var_os("LD_PRELOAD").as_deref())?;

    // Check the environment the command will see, so a bad inherited variable is reported now
    // rather than by the preload library inside the command.
    let mut env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.to_string_lossy().into_owned())))
        .filter(|(k, _)| !vars.iter().any(|(name, _)| name == k))
        .collect();
    env.extend(vars.iter().cloned());
    Config::from_vars(env)?;

    let (program, rest) = args
        .command
        .split_first()
        .expect("clap requires at least one CMD value");
    let source = Command::new(program)
        .args(rest)
        .envs(vars)
        .env("LD_PRELOAD", preload)
        .exec();
    Err(Error::Exec {
        program: program.to_string_lossy().into_owned(),
        source,
    })
}

/// The limit variables to set, from the flags.
fn limit_vars(args: &RunArgs) -> Result<Vec<(String, String)>> {
    let mut vars = Vec::new();
    if let Some(bytes) = args.memory {
        vars.push((config::vars::MEMORY_LIMIT.to_owned(), bytes.to_string()));
    }
    let mut seen: Vec<(u32, u64)> = Vec::new();
    for &(index, bytes) in &args.memory_device {
        if let Some(&(_, earlier)) = seen.iter().find(|(i, _)| *i == index) {
            return Err(Error::DuplicateDevice {
                index,
                first: format_size(earlier),
                second: format_size(bytes),
            });
        }
        seen.push((index, bytes));
        vars.push((
            format!("{}_{index}", config::vars::MEMORY_LIMIT),
            bytes.to_string(),
        ));
    }
    if let Some(pct) = args.sm {
        vars.push((config::vars::SM_LIMIT.to_owned(), pct.to_string()));
    }
    if args.measure_gpu_time {
        vars.push((config::vars::MEASURE_GPU_TIME.to_owned(), "true".to_owned()));
    }
    Ok(vars)
}

/// Finds libvgpu.so: `flag`, else `env` (`$VGPU_LIB`), else next to the executable `exe`
/// (its directory, then `deps/`, then `../lib/`). Returns an absolute, canonical path.
pub(crate) fn find_lib(
    flag: Option<&Path>,
    env: Option<OsString>,
    exe: io::Result<PathBuf>,
) -> Result<PathBuf> {
    let given = |origin: String, path: &Path| {
        existing_file(path).map_err(|problem| Error::LibPath { origin, problem })
    };
    if let Some(path) = flag {
        return given(format!("--lib {}", path.display()), path);
    }
    if let Some(path) = env.filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return given(format!("{LIB_ENV}={}", path.display()), &path);
    }
    let exe = exe.map_err(|e| Error::LibNotFound {
        looked: format!("the vgpu executable's directory, which cannot be located: {e}"),
    })?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let candidates = [
        dir.join(LIB_NAME),
        dir.join("deps").join(LIB_NAME),
        dir.join("..").join("lib").join(LIB_NAME),
    ];
    for candidate in &candidates {
        if let Ok(path) = existing_file(candidate) {
            return Ok(path);
        }
    }
    let looked: Vec<String> = candidates.iter().map(|c| c.display().to_string()).collect();
    Err(Error::LibNotFound {
        looked: looked.join(", "),
    })
}

fn existing_file(path: &Path) -> Result<PathBuf, String> {
    let canonical = std::fs::canonicalize(path).map_err(|e| e.to_string())?;
    if !canonical.is_file() {
        return Err("not a file".to_owned());
    }
    Ok(canonical)
}

/// `LD_PRELOAD` with `lib` first, then the entries of `existing` (space- or colon-separated)
/// other than `lib` itself, joined by colons.
pub(crate) fn preload_value(lib: &Path, existing: Option<&OsStr>) -> Result<OsString> {
    let lib_bytes = lib.as_os_str().as_bytes();
    if lib_bytes.iter().any(|&c| c == b' ' || c == b':') {
        return Err(Error::PreloadPath(lib.to_owned()));
    }
    let mut out = lib_bytes.to_vec();
    if let Some(existing) = existing {
        for entry in existing
            .as_bytes()
            .split(|&c| c == b' ' || c == b':')
            .filter(|e| !e.is_empty() && *e != lib_bytes)
        {
            out.push(b':');
            out.extend_from_slice(entry);
        }
    }
    Ok(OsString::from_vec(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_size_forms() {
        assert_eq!(parse_device_size("1=2g"), Ok((1, 2 << 30)));
        assert_eq!(parse_device_size("0=4096"), Ok((0, 4096)));
        assert_eq!(parse_device_size("63=1GiB"), Ok((63, 1 << 30)));
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
            "--",
            "python3",
        ])
        .unwrap();
        let vars = limit_vars(&cli.run).unwrap();
        let want = [
            ("CUDA_DEVICE_MEMORY_LIMIT", "4294967296"),
            ("CUDA_DEVICE_SM_LIMIT", "30"),
            ("VGPU_MEASURE_GPU_TIME", "true"),
        ];
        let got: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(got, want);
        let plain = Cli::try_parse_from(["vgpu", "--memory", "1g", "--", "x"]).unwrap();
        assert!(
            limit_vars(&plain.run)
                .unwrap()
                .iter()
                .all(|(k, _)| k != "VGPU_MEASURE_GPU_TIME")
        );
    }

    #[test]
    fn preload_prepends_and_dedups() {
        let lib = Path::new("/opt/vgpu/libvgpu.so");
        assert_eq!(preload_value(lib, None).unwrap(), "/opt/vgpu/libvgpu.so");
        assert_eq!(
            preload_value(lib, Some(OsStr::new(""))).unwrap(),
            "/opt/vgpu/libvgpu.so"
        );
        assert_eq!(
            preload_value(lib, Some(OsStr::new("/a.so /b.so:/c.so"))).unwrap(),
            "/opt/vgpu/libvgpu.so:/a.so:/b.so:/c.so"
        );
        assert_eq!(
            preload_value(lib, Some(OsStr::new("/opt/vgpu/libvgpu.so:/a.so"))).unwrap(),
            "/opt/vgpu/libvgpu.so:/a.so"
        );
        assert!(preload_value(Path::new("/my dir/libvgpu.so"), None).is_err());
        assert!(preload_value(Path::new("/a:b/libvgpu.so"), None).is_err());
    }

    #[test]
    fn lib_search_order() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("bin").join("vgpu");
        std::fs::create_dir_all(dir.path().join("bin/deps")).unwrap();
        std::fs::create_dir_all(dir.path().join("lib")).unwrap();
        let none = find_lib(None, None, Ok(exe.clone()))
            .unwrap_err()
            .to_string();
        assert!(none.contains("cannot find libvgpu.so"), "{none}");
        assert!(none.contains("--lib"), "{none}");

        let in_lib = dir.path().join("lib").join(LIB_NAME);
        std::fs::write(&in_lib, b"").unwrap();
        let found = find_lib(None, None, Ok(exe.clone())).unwrap();
        assert_eq!(found, in_lib.canonicalize().unwrap());

        let in_deps = dir.path().join("bin/deps").join(LIB_NAME);
        std::fs::write(&in_deps, b"").unwrap();
        assert_eq!(
            find_lib(None, None, Ok(exe.clone())).unwrap(),
            in_deps.canonicalize().unwrap()
        );

        let beside = dir.path().join("bin").join(LIB_NAME);
        std::fs::write(&beside, b"").unwrap();
        assert_eq!(
            find_lib(None, None, Ok(exe.clone())).unwrap(),
            beside.canonicalize().unwrap()
        );

        // $VGPU_LIB beats the executable's directory, --lib beats both.
        let other = dir.path().join("other.so");
        std::fs::write(&other, b"").unwrap();
        assert_eq!(
            find_lib(None, Some(other.clone().into()), Ok(exe.clone())).unwrap(),
            other.canonicalize().unwrap()
        );
        assert_eq!(
            find_lib(Some(&in_deps), Some(other.clone().into()), Ok(exe.clone())).unwrap(),
            in_deps.canonicalize().unwrap()
        );
        // An empty $VGPU_LIB is ignored; a wrong one is an error, not a fallback.
        assert_eq!(
            find_lib(None, Some("".into()), Ok(exe.clone())).unwrap(),
            beside.canonicalize().unwrap()
        );
        let e = find_lib(None, Some("/nonexistent/x.so".into()), Ok(exe.clone()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("VGPU_LIB=/nonexistent/x.so"), "{e}");
        let e = find_lib(Some(Path::new("/nonexistent/y.so")), None, Ok(exe))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--lib /nonexistent/y.so"), "{e}");
        let e = find_lib(Some(dir.path()), None, Err(io::Error::other("x")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a file"), "{e}");
    }
}
