//! Where a region is: the workload's (`CUDA_DEVICE_MEMORY_SHARED_CACHE`), the per-user default,
//! the user's `vgpu run` regions, and whether a path is shared or private; opening one region
//! and naming one of its devices.

use std::path::{Path, PathBuf};

use vgpu_policy::config::Config;
use vgpu_region::{Location, Region};

use crate::error::{Error, Result};

/// The region a workload started from this environment uses: `CUDA_DEVICE_MEMORY_SHARED_CACHE`
/// (read through the one configuration reader) when set, else the per-user default.
pub fn default_location() -> Location {
    Location::new(Config::shared_cache_from_env().ok().flatten())
}

/// Where `path` (or the default) is: the per-user default path is private, any other shared.
pub fn location(path: Option<&Path>) -> Location {
    match path {
        None => default_location(),
        Some(p) if p == Region::default_path() => Location::private(p),
        Some(p) => Location::shared(p),
    }
}

/// The user's region directory (`/tmp/vgpu-<uid>`): the default region's, where `vgpu run`
/// puts one region per run.
pub fn user_dir() -> Option<PathBuf> {
    Region::default_path().parent().map(Path::to_path_buf)
}

/// The PID of the `vgpu run` that created a `run-<pid>.cache` region.
pub fn run_pid(path: &Path) -> Option<u32> {
    path.file_name()?
        .to_str()?
        .strip_prefix("run-")?
        .strip_suffix(".cache")?
        .parse()
        .ok()
}

/// The user's `vgpu run` regions (`run-<pid>.cache` in the user's directory), sorted.
pub fn user_run_regions() -> Vec<PathBuf> {
    let Some(dir) = user_dir() else {
        return Vec::new();
    };
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| run_pid(p).is_some())
        .collect();
    out.sort();
    out
}

/// The region at `path`, opened without taking a process slot (read-only use of the
/// workload's locks: none). Without a path: the workload's region
/// (`CUDA_DEVICE_MEMORY_SHARED_CACHE`), else the default one if it exists, else the user's only
/// `vgpu run` region; several are an error that lists them.
pub fn open_region(path: Option<&Path>) -> Result<Region> {
    let loc = match path {
        Some(_) => location(path),
        None => {
            let loc = default_location();
            if loc.path == Region::default_path() && !loc.path.exists() {
                match user_run_regions().as_slice() {
                    [one] => location(Some(one)),
                    [] => loc,
                    many => {
                        let list: Vec<String> =
                            many.iter().map(|p| p.display().to_string()).collect();
                        return Err(Error::Usage(format!(
                            "several regions ({}): pass --region PATH",
                            list.join(", ")
                        )));
                    }
                }
            } else {
                loc
            }
        }
    };
    Region::open_existing(&loc).map_err(|source| Error::NoRegion { source })
}

/// A device given as a region index (`0`, `1`, ...) or a UUID.
pub fn device_index(region: &Region, spec: &str) -> Result<usize> {
    let spec = spec.trim();
    if let Ok(index) = spec.parse::<usize>() {
        let count = region.device_count();
        return if index < count {
            Ok(index)
        } else {
            Err(Error::DeviceIndex { index, count })
        };
    }
    region
        .device_index(spec)
        .ok_or_else(|| Error::DeviceUuid(spec.to_owned()))
}
