//! [`HamiMirror`]: the only writer of HAMi-core's v1 prefix.
//!
//! The first 2,008,953 bytes of the file are HAMi-core's `shared_region_t`, kept current as a
//! *published view* for HAMi's and Volcano's node monitors (HAMi-core's
//! `multiprocess_memory_limit.h`; offsets in [`crate::layout::Hami`]).
//! vgpu never reads its own figures back from it: the budget lives in vgpu's section. Every store
//! into the prefix goes through this type, so what the monitors see is decided in one file.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::layout::{self, Hami, HamiProc};

/// Writes HAMi's view of a region (a borrow of the mapped prefix).
#[derive(Clone, Copy)]
pub(crate) struct HamiMirror<'a> {
    h: &'a Hami,
}

impl<'a> HamiMirror<'a> {
    pub(crate) fn new(h: &'a Hami) -> Self {
        HamiMirror { h }
    }

    /// A new file's header fields, all but the magic (see [`publish_magic`](Self::publish_magic)).
    pub(crate) fn initialise(&self, owner_pid: u32) {
        let h = self.h;
        h.major_version.store(layout::HAMI_MAJOR, Ordering::Release);
        h.minor_version.store(layout::HAMI_MINOR, Ordering::Release);
        h.owner_pid.store(u64::from(owner_pid), Ordering::Release);
        h.priority.store(1, Ordering::Release);
    }

    /// The magic, written last: HAMi's monitor takes it as "initialised".
    pub(crate) fn publish_magic(&self) {
        self.h
            .initialized_flag
            .store(layout::HAMI_MAGIC, Ordering::Release);
    }

    /// Device `i` (a new one: `num` becomes `i + 1`).
    pub(crate) fn add_device(&self, i: usize, uuid: &[u8], limit: Option<u64>, sm: u64) {
        let h = self.h;
        let Some(words) = h.uuids.get(i) else {
            return;
        };
        layout::write_str(words, uuid);
        self.set_limit(i, limit);
        self.set_sm_limit(i, sm);
        h.num.store(i as u64 + 1, Ordering::Release);
    }

    /// `limit[i]`, bytes (0: none, as HAMi-core writes it).
    pub(crate) fn set_limit(&self, i: usize, limit: Option<u64>) {
        if let Some(w) = self.h.limit.get(i) {
            w.store(limit.unwrap_or(0), Ordering::Release);
        }
    }

    /// `sm_limit[i]`, percent (0: none).
    pub(crate) fn set_sm_limit(&self, i: usize, sm: u64) {
        if let Some(w) = self.h.sm_limit.get(i) {
            w.store(sm, Ordering::Release);
        }
    }

    fn proc(&self, slot: usize) -> Option<&'a HamiProc> {
        self.h.procs.get(slot)
    }

    /// Process slot `slot` is taken by `pid`: a clean slot with `status` 1, and `procnum` raised
    /// past it.
    pub(crate) fn open_slot(&self, slot: usize, pid: u32) {
        let Some(p) = self.proc(slot) else {
            return;
        };
        clear(p);
        // HAMi's field is an `int`; a Linux PID is at most 2^22 (`pid_max`), so it fits.
        p.pid
            .store(i32::try_from(pid).unwrap_or(0), Ordering::Release);
        p.status.store(1, Ordering::Release);
        self.h
            .procnum
            .fetch_max(procnum_of(slot + 1), Ordering::AcqRel);
    }

    /// Process slot `slot` is gone: all of it zeroed (Volcano's monitor sums every slot).
    pub(crate) fn close_slot(&self, slot: usize) {
        if let Some(p) = self.proc(slot) {
            clear(p);
        }
    }

    /// Lowers `procnum` to `top` (one past the highest slot still in use), unless it is already
    /// at or below it, or rose meanwhile; `top` is re-evaluated after a lost race.
    pub(crate) fn shrink_procnum(&self, top: impl Fn() -> usize) {
        let h = self.h;
        loop {
            let cur = h.procnum.load(Ordering::Acquire);
            let top = procnum_of(top());
            if top >= cur
                || h.procnum
                    .compare_exchange(cur, top, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                return;
            }
        }
    }

    /// Copies a process's usage of `dev` (`used`, the slot's vgpu counter) into its HAMi slot.
    pub(crate) fn publish_used(&self, slot: usize, dev: usize, used: &AtomicU64) {
        let Some(hu) = self.proc(slot).and_then(|p| p.used.get(dev)) else {
            return;
        };
        // Re-store until stable so that a racing thread's older value does not stay behind.
        for _ in 0..4 {
            let v = used.load(Ordering::SeqCst);
            hu.total.store(v, Ordering::Relaxed);
            hu.data.store(v, Ordering::Relaxed);
            if used.load(Ordering::SeqCst) == v {
                break;
            }
        }
    }
}

/// A slot count as HAMi's `int procnum` (at most [`layout::MAX_PROCS`], so it fits).
fn procnum_of(n: usize) -> i32 {
    i32::try_from(n.min(layout::MAX_PROCS)).unwrap_or(0)
}

fn clear(h: &HamiProc) {
    h.status.store(0, Ordering::Release);
    h.pid.store(0, Ordering::Relaxed);
    h.hostpid.store(0, Ordering::Relaxed);
    for u in &h.used {
        for w in [&u.context, &u.module, &u.data, &u.offset, &u.total] {
            w.store(0, Ordering::Relaxed);
        }
    }
    for w in &h.monitorused {
        w.store(0, Ordering::Relaxed);
    }
    for u in &h.device_util {
        for w in [&u.dec, &u.enc, &u.sm] {
            w.store(0, Ordering::Relaxed);
        }
    }
}
