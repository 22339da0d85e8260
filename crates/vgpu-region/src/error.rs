//! [`RegionError`]: what went wrong, and with which file.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// An error opening, validating or using a region file. Its `Display` names the path.
#[derive(Debug)]
pub struct RegionError {
    /// The region file.
    pub path: PathBuf,
    /// What is wrong.
    pub kind: ErrorKind,
}

/// What is wrong with a region file.
#[derive(Debug)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A system call failed.
    Io {
        /// What was being done.
        op: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The file's size is not that of this layout version (truncated, or another version).
    WrongSize {
        /// Size found.
        found: u64,
        /// Size expected.
        expected: u64,
    },
    /// Offset 0 does not hold HAMi-core's magic, or its major version is not 1.
    NotHami {
        /// Magic found.
        magic: i32,
        /// Major version found.
        major: i32,
    },
    /// vgpu's section has the wrong magic (a plain HAMi-core file, or garbage).
    BadMagic {
        /// Magic found.
        found: u64,
    },
    /// vgpu's section is of another layout version.
    WrongVersion {
        /// Version found.
        found: u32,
        /// Version this build reads.
        expected: u32,
    },
    /// The header's checksum does not match its fields (corruption).
    BadChecksum {
        /// Stored checksum.
        stored: u64,
        /// Checksum of the fields as found.
        computed: u64,
    },
    /// A header field is out of range.
    BadHeader(&'static str),
    /// The file stayed uninitialised (or locked by its initialiser) too long.
    NotInitialised,
    /// The file or its directory is not safe to trust (owner, permissions, type).
    Insecure(String),
    /// All process slots are taken.
    NoFreeSlot,
    /// No device with this UUID is in the region.
    UnknownDevice(String),
    /// The region already describes the maximum number of devices.
    TooManyDevices,
    /// Another process holds the file's creation lock past the wait (a process stopped while
    /// attaching, a frozen cgroup, anyone running `flock`).
    LockHeld,
    /// A limit above the platform's ceiling (the limit the container was created with) was
    /// asked for; only the node side can raise it.
    AboveCeiling {
        /// The device.
        uuid: String,
        /// What was asked (`None`: no limit).
        requested: String,
        /// The ceiling.
        ceiling: String,
    },
}

impl RegionError {
    pub(crate) fn new(path: &Path, kind: ErrorKind) -> Self {
        RegionError {
            path: path.to_path_buf(),
            kind,
        }
    }
    pub(crate) fn io(path: &Path, op: &'static str, source: io::Error) -> Self {
        Self::new(path, ErrorKind::Io { op, source })
    }

    /// Whether the file (or its directory) does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(&self.kind, ErrorKind::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

impl fmt::Display for RegionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "vgpu region {}: ", self.path.display())?;
        match &self.kind {
            ErrorKind::Io { op, source } => write!(f, "{op}: {source}"),
            ErrorKind::WrongSize { found, expected } => write!(
                f,
                "size is {found} bytes, expected {expected} (truncated, or another layout version)"
            ),
            ErrorKind::NotHami { magic, major } => write!(
                f,
                "not a HAMi v1 shared region (magic {magic}, major version {major})"
            ),
            ErrorKind::BadMagic { found } => {
                write!(
                    f,
                    "no vgpu section (magic {found:#018x}): not a vgpu region"
                )
            }
            ErrorKind::WrongVersion { found, expected } => write!(
                f,
                "layout version {found}, this vgpu reads version {expected}"
            ),
            ErrorKind::BadChecksum { stored, computed } => write!(
                f,
                "header checksum mismatch (stored {stored:#x}, computed {computed:#x}): corrupted"
            ),
            ErrorKind::BadHeader(what) => write!(f, "corrupted header: {what}"),
            ErrorKind::NotInitialised => {
                write!(
                    f,
                    "still not initialised after waiting (initialiser stuck?)"
                )
            }
            ErrorKind::Insecure(why) => write!(f, "not trusted: {why}"),
            ErrorKind::NoFreeSlot => write!(f, "all process slots are in use"),
            ErrorKind::UnknownDevice(uuid) => write!(f, "no device {uuid} in the region"),
            ErrorKind::TooManyDevices => write!(f, "no room for another device"),
            ErrorKind::LockHeld => write!(
                f,
                "its creation lock is held by another process (stopped while attaching? flock?) past the wait"
            ),
            ErrorKind::AboveCeiling {
                uuid,
                requested,
                ceiling,
            } => write!(
                f,
                "{uuid}: {requested} is above the platform's limit {ceiling}, the container's ceiling; \
                 lower it or restore it, raising it needs the node side (recreate the container with a higher limit)"
            ),
        }
    }
}

impl std::error::Error for RegionError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            ErrorKind::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
