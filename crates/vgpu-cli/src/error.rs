//! The CLI's one error type: each variant carries what its message needs, and its exit status.
//!
//! `main` prints `vgpu <subcommand>: <error>` (a configuration error prints its own one line,
//! `vgpu: VAR="value" ...`, as libvgpu.so would) and exits with [`Error::exit_code`].

use std::io;
use std::path::PathBuf;

use vgpu_policy::config::ConfigError;
use vgpu_region::RegionError;

/// What went wrong, with enough context for one clear message.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A region named (or defaulted) that cannot be opened.
    #[error(
        "{source}\n  hint: no vgpu process has created this region yet, or this is not the \
         container's region; pass --region PATH (the CUDA_DEVICE_MEMORY_SHARED_CACHE of the \
         workload) or --dir DIR"
    )]
    NoRegion {
        /// Why it cannot be opened.
        source: RegionError,
    },
    /// A region operation failed.
    #[error(transparent)]
    Region(#[from] RegionError),
    /// A CUDA/vgpu variable (inherited or built from the flags) is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A device index past the region's devices.
    #[error(
        "device {index}: the region has {count} device(s) (indices 0..{count}); see `vgpu status`"
    )]
    DeviceIndex {
        /// As given.
        index: usize,
        /// Devices in the region.
        count: usize,
    },
    /// A device UUID the region does not hold.
    #[error("device {0}: no such UUID in the region; see `vgpu status`")]
    DeviceUuid(String),
    /// The same device given twice.
    #[error("--memory-device given twice for device {index} ({first} and {second})")]
    DuplicateDevice {
        /// The device.
        index: u32,
        /// First size, human-readable.
        first: String,
        /// Second size, human-readable.
        second: String,
    },
    /// libvgpu.so was not found.
    #[error("cannot find libvgpu.so (looked for {looked}); pass --lib PATH or set VGPU_LIB")]
    LibNotFound {
        /// The candidates, comma-separated.
        looked: String,
    },
    /// The given libvgpu.so path is not usable.
    #[error("{origin}: {problem}")]
    LibPath {
        /// `--lib PATH` or `VGPU_LIB=PATH`.
        origin: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A path LD_PRELOAD cannot hold.
    #[error("cannot preload {0}: LD_PRELOAD cannot hold a path with a space or colon")]
    PreloadPath(PathBuf),
    /// The command could not be executed.
    #[error("cannot run {program}: {source}")]
    Exec {
        /// The program.
        program: String,
        /// Why.
        source: io::Error,
    },
    /// A directory to watch that does not exist or cannot be read.
    #[error("--dir {}: {source}", path.display())]
    Dir {
        /// The directory.
        path: PathBuf,
        /// Why it cannot be read.
        source: io::Error,
    },
    /// A per-device flag for an NVML index the machine does not have.
    #[error(
        "{flag} {index}=...: this machine has {count} GPU(s) as NVML numbers them (indices 0 to \
         {}, the order of `nvidia-smi -L`; CUDA_VISIBLE_DEVICES does not renumber them)",
        count.saturating_sub(1)
    )]
    NoSuchGpu {
        /// The flag.
        flag: &'static str,
        /// The index given.
        index: u32,
        /// GPUs NVML numbers here.
        count: u32,
    },
    /// A region named for monitoring that is missing (`metrics --once`, `top --once`).
    #[error("{0}")]
    Missing(String),
    /// Stdout was closed by its reader (`vgpu status | head`): not a failure.
    #[error("stdout closed")]
    Closed,
    /// The listen address cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// As given.
        addr: String,
        /// Why.
        source: io::Error,
    },
    /// Other I/O, with what was being done.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: io::Error,
    },
    /// A usage error the flags' parser cannot express.
    #[error("{0}")]
    Usage(String),
}

impl Error {
    /// The process exit status for this error: 126/127 as a shell for a command that cannot
    /// be executed, 2 for usage and configuration errors, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Exec { source, .. } if source.kind() == io::ErrorKind::PermissionDenied => 126,
            Error::Exec { .. } => 127,
            Error::Config(_)
            | Error::Usage(_)
            | Error::DuplicateDevice { .. }
            | Error::LibNotFound { .. }
            | Error::LibPath { .. }
            | Error::PreloadPath(_)
            | Error::NoSuchGpu { .. }
            | Error::Dir { .. } => 2,
            Error::Closed => 0,
            _ => 1,
        }
    }

    /// Wraps an I/O error with what was being done.
    pub fn io(what: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}

/// The CLI's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
