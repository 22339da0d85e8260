//! [`Region`]: one mapped, validated region file and this process's slot in it.
//!
//! The type is one struct; its methods live by concern:
//! * [`file`]: where the file is ([`Location`]), opening, creating and validating it, adding
//!   devices;
//! * [`slots`]: claiming a process slot, reaping the slots of dead processes, detaching, fork;
//! * [`budget`]: limits and device totals, and the view of one device the [`crate::protocol`]
//!   charges against;
//! * [`counters`]: high-water marks, refusals, compute counters, the [`Snapshot`];
//! * [`refusals`]: the log of the last refused charges;
//! * [`library`]: which library (version, commit, observing) each process runs;
//! * [`hami`]: [`HamiMirror`](hami::HamiMirror), the only writer of HAMi-core's prefix.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};

use crate::layout::{self, Layout};
use crate::raw::Mapping;

mod budget;
mod counters;
mod file;
mod hami;
mod library;
mod refusals;
mod slots;

pub use counters::{DeviceStatus, ProcessStatus, Snapshot};
pub use file::{Location, SHARED_CACHE_ENV, Sharing};
use hami::HamiMirror;
pub use hami::sm_util_percent;
pub use refusals::RefusalStatus;
pub use vgpu_policy::plan::PodIdentity;

/// "No process slot" in [`Region::slot`]'s word.
const NO_SLOT: u32 = u32::MAX;

/// A device as a process sees it when attaching.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInit {
    /// NVML UUID (`GPU-...`).
    pub uuid: String,
    /// Memory limit from the environment (`None`: none).
    pub limit: Option<u64>,
    /// SM limit in percent (`None`: none).
    pub sm_limit: Option<u8>,
}

/// Which limit differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitKind {
    /// Memory, bytes.
    Memory,
    /// SM, percent.
    Sm,
}

/// A limit from the attaching process's environment that differs from the region's (the
/// region's wins).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The device.
    pub uuid: String,
    /// Which limit.
    pub kind: LimitKind,
    /// The attaching process's value.
    pub requested: Option<u64>,
    /// The region's value, in force.
    pub region: Option<u64>,
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: Option<u64>| match (v, self.kind) {
            (None, _) => "none".to_owned(),
            (Some(v), LimitKind::Memory) => vgpu_policy::size::format_size(v),
            (Some(v), LimitKind::Sm) => format!("{v}%"),
        };
        let what = match self.kind {
            LimitKind::Memory => "memory limit",
            LimitKind::Sm => "SM limit",
        };
        write!(
            f,
            "{}: {what} {} from the environment ignored, the shared region's {} applies",
            self.uuid,
            show(self.requested),
            show(self.region)
        )
    }
}

/// A mapped, validated region file, and this process's slot in it (taken by
/// [`open_or_create`](Region::open_or_create), or lazily on the first charge after a fork).
pub struct Region {
    path: PathBuf,
    map: Mapping<Layout>,
    /// The descriptor holding our slot lock (-1 after a fork until reopened).
    fd: AtomicI32,
    /// `(st_dev, st_ino)` of the mapped file.
    dev_ino: (u64, u64),
    /// Our process slot ([`NO_SLOT`]: none).
    slot: AtomicU32,
    /// The state word our slot had when we made it live (its generation tells a reaped and
    /// reused slot from ours).
    claimed: AtomicU32,
    /// Bytes of our `used` per region device that are context memory (process-local: only the
    /// owner publishes its slot). See [`RegionLedger::charge_context`](crate::RegionLedger).
    context: [AtomicU64; layout::MAX_DEVICES],
    /// Process-local guard serialising slot claims and reaping within this process.
    busy: AtomicBool,
    /// Opened read-only ([`Region::open_read_only`]): no slot, no lock, no reaping, no store.
    read_only: bool,
    /// The path no longer names the mapped file (renamed, removed or replaced): set by
    /// [`Region::reap_dead`]; this process is cut off from the container's budget.
    lost: AtomicBool,
    /// Our slot is ours but its lock could not be taken again on a new descriptor (a copy of
    /// the old one, in a child forked before it exec'ed, still holds it): retried at each
    /// reap pass until it is taken.
    relock: AtomicBool,
    /// This process's library stamp, written into each slot it claims.
    stamp: library::Stamp,
    /// This process holds the container's reaper lease ([`layout::REAPER_LOCK`]).
    reaper: AtomicBool,
    /// The reaper's beat as last seen, and when it was last seen to change (ns on the caller's
    /// clock; 0: never looked).
    seen_beat: AtomicU64,
    seen_at: AtomicU64,
    /// When this process, as the reaper, last made a pass (ns on the caller's clock).
    last_pass: AtomicU64,
    /// The reaper's last reading of every slot's GPU time, and when it last published the
    /// container's SM utilisation (see `hami.rs`, `publish_utilisation`).
    util: std::sync::Mutex<hami::UtilReadings>,
    util_at: AtomicU64,
    /// Slot-lock system calls this process made on the region (`F_OFD_SETLK`/`GETLK` probes
    /// and takes): the cost of housekeeping, counted for tests ([`Region::lock_calls`]).
    lock_calls: AtomicU64,
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("path", &self.path)
            .field("slot", &self.slot())
            .finish()
    }
}

impl Region {
    pub(crate) fn layout(&self) -> &Layout {
        self.map.get()
    }

    /// The writer of HAMi's view.
    fn hami(&self) -> HamiMirror<'_> {
        HamiMirror::new(&self.layout().hami)
    }

    /// Whether this process is cut off from the container's budget: the file was truncated
    /// under the mapping (it now reads as zeroes, see [`crate::fault`]), or its path names
    /// another file or none (noticed by [`Region::reap_dead`]). The ledger then refuses every
    /// charge on a limited device: failing closed, never a second budget.
    pub fn is_broken(&self) -> bool {
        self.lost.load(Ordering::Relaxed)
            || self.map.broken()
            || self.layout().header.orphaned.load(Ordering::Relaxed) != 0
    }

    /// Why [`is_broken`](Region::is_broken) holds, in words (`None`: it does not).
    pub fn broken_reason(&self) -> Option<String> {
        if self.map.broken() {
            Some(format!(
                "{}: the region file was truncated while in use",
                self.path.display()
            ))
        } else if self.lost.load(Ordering::Relaxed)
            || self.layout().header.orphaned.load(Ordering::Relaxed) != 0
        {
            Some(format!(
                "{}: the path no longer names the region file in use (renamed, removed or replaced)",
                self.path.display()
            ))
        } else {
            None
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A 32-bit tag of the container whose region this is (its file's device and inode, the
    /// same for every process that maps it): its processes' node token ids carry it
    /// ([`crate::node::NodeToken::open_for`]).
    pub fn container_tag(&self) -> u32 {
        let (dev, ino) = self.dev_ino;
        let h = (dev.rotate_left(32) ^ ino).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> 32) as u32
    }

    /// Number of devices in the region.
    pub fn device_count(&self) -> usize {
        (self.layout().header.device_count.load(Ordering::Acquire) as usize)
            .min(layout::MAX_DEVICES)
    }

    /// Index of the device with this UUID.
    pub fn device_index(&self, uuid: &str) -> Option<usize> {
        let l = self.layout();
        (0..self.device_count()).find(|&i| layout::str_eq(&l.devices[i].uuid, uuid.as_bytes()))
    }

    /// A [`vgpu_policy::ledger::Ledger`] for this process: its device `k` (the ledger's dense
    /// device index) is the region device whose UUID is `uuids[k]` (an unknown UUID:
    /// unlimited, untracked).
    pub fn ledger(self: &Arc<Self>, uuids: &[String]) -> crate::RegionLedger {
        crate::ledger::RegionLedger::new(
            Arc::clone(self),
            uuids.iter().map(|u| self.device_index(u)).collect(),
        )
    }

    /// Adds `bytes` (or removes, `add == false`) of context memory of region device `dev` to
    /// this process's published context figure.
    pub(crate) fn note_context(&self, dev: usize, bytes: u64, add: bool) {
        if let Some(c) = self.context.get(dev) {
            if add {
                c.fetch_add(bytes, Ordering::Relaxed);
            } else {
                let _ = c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                    Some(v.saturating_sub(bytes))
                });
            }
        }
    }

    /// Copies process slot `slot`'s usage of `dev` into its HAMi slot (a published view only).
    pub(crate) fn publish_hami(&self, slot: usize, dev: usize) {
        if let Some(used) = self.layout().procs.get(slot).and_then(|p| p.used.get(dev)) {
            let context = self
                .context
                .get(dev)
                .map_or(0, |c| c.load(Ordering::Relaxed));
            self.hami().publish_used(slot, dev, used, context);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conflict_reads_in_human_sizes_and_percent() {
        let c = Conflict {
            uuid: "GPU-a".into(),
            kind: LimitKind::Memory,
            requested: Some(4 << 30),
            region: Some(1536 << 20),
        };
        assert_eq!(
            c.to_string(),
            "GPU-a: memory limit 4 GiB from the environment ignored, the shared region's 1.50 GiB applies"
        );
        let c = Conflict {
            kind: LimitKind::Sm,
            requested: Some(30),
            region: None,
            ..c
        };
        assert_eq!(
            c.to_string(),
            "GPU-a: SM limit 30% from the environment ignored, the shared region's none applies"
        );
    }
}
