//! Which library each process runs: the preload stamps its version and commit, and whether it
//! only observes (`VGPU_OBSERVE`), into its process slot ([`layout::Proc::library`],
//! [`layout::Proc::about`]), for `vgpu status` and `vgpu_build_info`.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use super::Region;
use crate::layout;

/// This process's stamp, kept so that every slot it claims (a forked child's too) carries it.
#[derive(Debug, Default)]
pub(super) struct Stamp {
    set: AtomicBool,
    library: [AtomicU64; 4],
    flags: AtomicU32,
}

impl Region {
    /// Records that this process runs `library` ("`<version> <commit>`", at most 31 bytes kept)
    /// and whether it only observes (accounts without limiting): in its slot now, and in every
    /// slot it claims later. Plain stores into the process's own slot.
    pub fn stamp_library(&self, library: &str, observing: bool) {
        layout::write_str(&self.stamp.library, library.as_bytes());
        self.stamp.flags.store(
            if observing { layout::OBSERVING } else { 0 },
            Ordering::Relaxed,
        );
        self.stamp.set.store(true, Ordering::Release);
        if let Some(i) = self.slot() {
            self.write_stamp(i, self.claimed.load(Ordering::Acquire));
        }
    }

    /// Writes the stamp into slot `i`, claimed with state word `claimed` (before or after it is
    /// made live: readers match `about` against the slot's state word).
    pub(super) fn write_stamp(&self, i: usize, claimed: u32) {
        if !self.stamp.set.load(Ordering::Acquire) {
            return;
        }
        let Some(p) = self.layout().procs.get(i) else {
            return;
        };
        for (to, from) in p.library.iter().zip(&self.stamp.library) {
            to.store(from.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        let flags = u64::from(self.stamp.flags.load(Ordering::Relaxed));
        p.about
            .store(u64::from(claimed) | flags << 32, Ordering::Release);
    }

    /// Slot `i`'s stamp, read by a monitor: the library and the flags, if the slot's owner
    /// wrote them for its current claim (`state` is the slot's state word).
    pub(super) fn read_stamp(&self, i: usize, state: u32) -> (Option<String>, u32) {
        let p = &self.layout().procs[i];
        let about = p.about.load(Ordering::Acquire);
        if about & u64::from(u32::MAX) != u64::from(state) {
            return (None, 0);
        }
        let lib = layout::read_string(&p.library);
        let flags = u32::try_from(about >> 32).unwrap_or(0);
        ((!lib.is_empty()).then_some(lib), flags)
    }
}
