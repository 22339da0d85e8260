//! The budget: per-device limits (memory and SM), the device total, and the glue that shows one
//! device of the mapped file to [`crate::protocol`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::Region;
use crate::error::{ErrorKind, RegionError};
use crate::layout;
use crate::protocol::{self, NO_LIMIT};

/// A stored memory limit as an option (`NO_LIMIT`: none).
pub(super) fn to_opt(limit: u64) -> Option<u64> {
    (limit != NO_LIMIT).then_some(limit)
}

/// A stored SM limit as an option (0: none).
pub(super) fn sm_opt(sm: u64) -> Option<u64> {
    (sm != 0).then_some(sm)
}

/// A stored SM limit as a percent (the file may hold anything: clamped to 100).
pub(super) fn sm_percent(sm: u64) -> u8 {
    u8::try_from(sm.min(100)).unwrap_or(100)
}

impl Region {
    /// Sets or clears a device's limit, effective at once for every process. Lowering it below
    /// current use revokes nothing; charges are refused until usage falls below it.
    ///
    /// The platform's limit (the environment the container's processes were created with,
    /// recorded as the device's ceiling) cannot be exceeded: a higher limit, or none where the
    /// ceiling is one, is [`ErrorKind::AboveCeiling`]. Lowering and restoring are allowed.
    pub fn set_limit(&self, uuid: &str, limit: Option<u64>) -> Result<(), RegionError> {
        let i = self.device_index(uuid).ok_or_else(|| {
            RegionError::new(&self.path, ErrorKind::UnknownDevice(uuid.to_owned()))
        })?;
        if let Some(ceiling) = self.ceiling_index(i)
            && limit.is_none_or(|l| l > ceiling)
        {
            return Err(RegionError::new(
                &self.path,
                ErrorKind::AboveCeiling {
                    uuid: uuid.to_owned(),
                    requested: limit
                        .map_or_else(|| "no limit".to_owned(), vgpu_policy::size::format_size),
                    ceiling: vgpu_policy::size::format_size(ceiling),
                },
            ));
        }
        self.set_limit_index(i, limit);
        Ok(())
    }

    /// A device's memory ceiling (the platform's limit; `None`: none or not recorded).
    pub fn ceiling_index(&self, i: usize) -> Option<u64> {
        if i >= self.device_count() {
            return None;
        }
        let c = self.layout().devices[i].ceiling.load(Ordering::SeqCst);
        (c != 0).then_some(c).and_then(to_opt)
    }

    /// A device's SM ceiling in percent (`None`: none or not recorded).
    pub fn sm_ceiling_index(&self, i: usize) -> Option<u8> {
        if i >= self.device_count() {
            return None;
        }
        let c = self.layout().devices[i].sm_ceiling.load(Ordering::SeqCst);
        (c != 0 && c < 100).then(|| sm_percent(c))
    }

    pub(crate) fn set_limit_index(&self, i: usize, limit: Option<u64>) {
        let l = self.layout();
        if i >= self.device_count() {
            return;
        }
        l.devices[i]
            .limit
            .store(limit.unwrap_or(NO_LIMIT), Ordering::SeqCst);
        self.hami().set_limit(i, limit);
        protocol::bump(&self.budget(i));
    }

    /// Sets or clears a device's SM (compute) limit in percent, effective for every process at
    /// its next poll of [`sm_limit_index`](Region::sm_limit_index). `None`, 0 and 100 or more
    /// mean no limit.
    ///
    /// As for [`set_limit`](Region::set_limit), the platform's SM limit is a ceiling
    /// ([`ErrorKind::AboveCeiling`]).
    pub fn set_sm_limit(&self, uuid: &str, sm: Option<u8>) -> Result<(), RegionError> {
        let i = self.device_index(uuid).ok_or_else(|| {
            RegionError::new(&self.path, ErrorKind::UnknownDevice(uuid.to_owned()))
        })?;
        let want = sm.filter(|&s| s != 0 && s < 100);
        if let Some(ceiling) = self.sm_ceiling_index(i)
            && want.is_none_or(|s| s > ceiling)
        {
            return Err(RegionError::new(
                &self.path,
                ErrorKind::AboveCeiling {
                    uuid: uuid.to_owned(),
                    requested: want.map_or_else(|| "no SM limit".to_owned(), |s| format!("{s}%")),
                    ceiling: format!("{ceiling}%"),
                },
            ));
        }
        self.set_sm_limit_index(i, sm);
        Ok(())
    }

    /// [`set_sm_limit`](Region::set_sm_limit) by region device index (ignored if out of range).
    pub fn set_sm_limit_index(&self, i: usize, sm: Option<u8>) {
        if i >= self.device_count() {
            return;
        }
        let v = sm
            .map(u64::from)
            .filter(|&s| s != 0 && s < 100)
            .unwrap_or(0);
        self.layout().devices[i].sm_limit.store(v, Ordering::SeqCst);
        self.hami().set_sm_limit(i, v);
    }

    /// A device's SM limit in percent (1..=99; `None`: none). One relaxed atomic load: cheap
    /// enough for the compute limiter to poll every window.
    #[inline]
    pub fn sm_limit_index(&self, i: usize) -> Option<u8> {
        let d = self.layout().devices.get(i)?;
        sm_opt(d.sm_limit.load(Ordering::Relaxed)).map(sm_percent)
    }

    /// A device's limit.
    pub fn limit_index(&self, i: usize) -> Option<u64> {
        if i >= self.device_count() {
            return None;
        }
        to_opt(self.layout().devices[i].limit.load(Ordering::SeqCst))
    }

    /// Σ used of a device over all live processes.
    pub fn used_index(&self, i: usize) -> u64 {
        if i >= layout::MAX_DEVICES {
            return 0;
        }
        protocol::total(&self.budget(i))
    }

    pub(crate) fn budget(&self, dev: usize) -> DevBudget<'_> {
        DevBudget { region: self, dev }
    }
}

/// Rounds of [`protocol::Budget::pause`] before a charge waiting for another process's commit
/// gives up: 64 spins, 960 yields, then sleeps of at least 50 µs, so at least 2 s in all. A
/// live process finishes its commit within microseconds unless it is stopped (a debugger,
/// `SIGSTOP`, a frozen cgroup) or its `pending` word is corrupt; past the bound the charge is
/// refused (fail closed) and the next one waits again.
const STALL_ROUNDS: u32 = 1024 + 40_000;

/// Stands in for an out-of-range slot or device (never written: only one's own, valid, slot is).
static ZERO: AtomicU64 = AtomicU64::new(0);
static NONE: AtomicU64 = AtomicU64::new(NO_LIMIT);

/// One device of a region as the protocol sees it.
pub(crate) struct DevBudget<'a> {
    region: &'a Region,
    dev: usize,
}

impl protocol::Budget for DevBudget<'_> {
    type A = AtomicU64;
    fn version(&self) -> &Self::A {
        let l = self.region.layout();
        l.devices.get(self.dev).map_or(&ZERO, |d| &d.version)
    }
    fn limit(&self) -> &Self::A {
        let l = self.region.layout();
        l.devices.get(self.dev).map_or(&NONE, |d| &d.limit)
    }
    fn slots(&self) -> usize {
        (self
            .region
            .layout()
            .header
            .high_water
            .load(Ordering::SeqCst) as usize)
            .min(layout::MAX_PROCS)
    }
    fn used(&self, slot: usize) -> &Self::A {
        let l = self.region.layout();
        l.procs
            .get(slot)
            .and_then(|p| p.used.get(self.dev))
            .unwrap_or(&ZERO)
    }
    fn pending(&self, slot: usize) -> &Self::A {
        // `slot` may come from the shared version word: never index with it unchecked.
        let l = self.region.layout();
        l.procs
            .get(slot)
            .and_then(|p| p.pending.get(self.dev))
            .unwrap_or(&ZERO)
    }
    fn may_commit(&self, slot: usize) -> bool {
        // `slot` comes from the shared version word: checked against the scan's bound first.
        slot < self.slots()
            && self
                .region
                .layout()
                .procs
                .get(slot)
                .is_some_and(|p| layout::state_of(p.state.load(Ordering::SeqCst)) != layout::FREE)
    }
    fn pause(&self, round: u32) -> bool {
        if round < 64 {
            std::hint::spin_loop();
        } else if round < 1024 {
            std::thread::yield_now();
        } else {
            if round >= STALL_ROUNDS {
                return false;
            }
            std::thread::sleep(Duration::from_micros(50));
            if round.is_multiple_of(1024) {
                // A process died between its commit and its apply: free its slot.
                self.region.reap_dead();
            }
        }
        true
    }
}
