//! The per-device memory budget.
//!
//! [`Ledger`] is the interface the preload library charges allocations against;
//! [`LocalLedger`] is the single-process implementation. A cross-process implementation over a
//! shared-memory region can implement the same trait: it is object-safe and uses only plain
//! integers.
//!
//! Terms: a device is named by its [`DeviceIndex`] (the CUDA ordinal, after
//! `CUDA_VISIBLE_DEVICES`). "Slot" in this project means an entry of a shared process table (a
//! region's process slot, the node file's waiter slot), never a device.

use std::sync::atomic::{AtomicU64, Ordering};

/// Dense per-process index of a device (the preload maps CUDA ordinals/UUIDs to these indices).
pub type DeviceIndex = usize;

/// Why a charge was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DenyReason {
    /// The charge does not fit under the limit.
    #[default]
    OverLimit,
    /// The process has no place in the container's budget: every process slot of the region
    /// is taken.
    NoProcessSlot,
    /// Another process's charge stayed unfinished past the wait's bound (a process stopped
    /// between two of its own stores, or a corrupt region): the budget cannot be read exactly,
    /// so the charge is refused (fail closed).
    Stalled,
    /// The process is cut off from the container's budget (the region file was truncated,
    /// renamed or replaced).
    CutOff,
}

/// A refused charge: what was asked, what was in use at that moment, the limit, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Denied {
    /// Bytes the refused charge asked for.
    pub requested: u64,
    /// Bytes in use when it was refused.
    pub used: u64,
    /// The device's limit.
    pub limit: u64,
    /// Why.
    pub reason: DenyReason,
}

impl Denied {
    /// A charge of `requested` bytes that does not fit: `used` of `limit` in use.
    pub const fn over_limit(requested: u64, used: u64, limit: u64) -> Self {
        Denied {
            requested,
            used,
            limit,
            reason: DenyReason::OverLimit,
        }
    }

    /// The same refusal for another reason.
    pub const fn because(self, reason: DenyReason) -> Self {
        Denied { reason, ..self }
    }
}

/// The budget interface.
///
/// Implementations must be lock-free (atomics only) and must not allocate in
/// [`try_charge`](Ledger::try_charge), [`force_charge`](Ledger::force_charge),
/// [`release`](Ledger::release) and [`used`](Ledger::used), and must not panic for any input,
/// including a device they do not have (such a device has no limit and uses nothing).
pub trait Ledger: Send + Sync {
    /// The device's limit (`None`: unlimited).
    fn limit(&self, device: DeviceIndex) -> Option<u64>;
    /// Sets or clears the device's limit. Lowering it below what is in use is allowed: further
    /// charges are refused until enough is released.
    fn set_limit(&self, device: DeviceIndex, limit: Option<u64>);
    /// Bytes currently charged to the device.
    fn used(&self, device: DeviceIndex) -> u64;
    /// Atomically adds `bytes` if `used + bytes <= limit` (always succeeds when there is no
    /// limit, and for `bytes == 0`); else changes nothing and says why.
    fn try_charge(&self, device: DeviceIndex, bytes: u64) -> Result<(), Denied>;
    /// Adds `bytes` unconditionally (for corrections after the driver reports a real size),
    /// saturating at `u64::MAX`.
    fn force_charge(&self, device: DeviceIndex, bytes: u64);
    /// Subtracts `bytes`, saturating at 0.
    fn release(&self, device: DeviceIndex, bytes: u64);
}

/// `limit` value meaning "no limit".
const NO_LIMIT: u64 = u64::MAX;

#[derive(Debug)]
struct DeviceState {
    used: AtomicU64,
    limit: AtomicU64,
}

/// Single-process [`Ledger`]: one `AtomicU64` for the bytes in use and one for the limit
/// (`u64::MAX` = none) per device; [`try_charge`](Ledger::try_charge) is a CAS loop.
///
/// A device index past [`devices`](LocalLedger::devices) is unlimited, always reads 0 used, and
/// ignores charges and releases.
#[derive(Debug)]
pub struct LocalLedger {
    devices: Box<[DeviceState]>,
}

impl LocalLedger {
    /// A ledger with one device per entry of `limits`, nothing used.
    pub fn new(limits: &[Option<u64>]) -> Self {
        LocalLedger {
            devices: limits
                .iter()
                .map(|l| DeviceState {
                    used: AtomicU64::new(0),
                    limit: AtomicU64::new(l.unwrap_or(NO_LIMIT)),
                })
                .collect(),
        }
    }

    /// Number of devices.
    pub fn devices(&self) -> usize {
        self.devices.len()
    }
}

impl Ledger for LocalLedger {
    fn limit(&self, device: DeviceIndex) -> Option<u64> {
        let limit = self.devices.get(device)?.limit.load(Ordering::Acquire);
        (limit != NO_LIMIT).then_some(limit)
    }

    fn set_limit(&self, device: DeviceIndex, limit: Option<u64>) {
        if let Some(s) = self.devices.get(device) {
            s.limit.store(limit.unwrap_or(NO_LIMIT), Ordering::Release);
        }
    }

    fn used(&self, device: DeviceIndex) -> u64 {
        self.devices
            .get(device)
            .map_or(0, |s| s.used.load(Ordering::Acquire))
    }

    fn try_charge(&self, device: DeviceIndex, bytes: u64) -> Result<(), Denied> {
        let Some(s) = self.devices.get(device) else {
            return Ok(());
        };
        if bytes == 0 {
            return Ok(());
        }
        let mut used = s.used.load(Ordering::Acquire);
        loop {
            let limit = s.limit.load(Ordering::Acquire);
            let new = match used.checked_add(bytes) {
                Some(new) if new <= limit => new,
                // Over the limit, or over u64::MAX (only possible with no limit: saturate).
                None if limit == NO_LIMIT => NO_LIMIT,
                _ => return Err(Denied::over_limit(bytes, used, limit)),
            };
            match s
                .used
                .compare_exchange_weak(used, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(()),
                Err(current) => used = current,
            }
        }
    }

    fn force_charge(&self, device: DeviceIndex, bytes: u64) {
        if let Some(s) = self.devices.get(device) {
            // The closure always returns Some, so this cannot fail.
            let _ = s
                .used
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                    Some(u.saturating_add(bytes))
                });
        }
    }

    fn release(&self, device: DeviceIndex, bytes: u64) {
        if let Some(s) = self.devices.get(device) {
            let _ = s
                .used
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                    Some(u.saturating_sub(bytes))
                });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    #[test]
    fn charge_up_to_limit_then_deny() {
        let l = LocalLedger::new(&[Some(GIB), None]);
        assert_eq!(l.devices(), 2);
        assert_eq!(l.limit(0), Some(GIB));
        assert_eq!(l.limit(1), None);
        assert_eq!(l.try_charge(0, GIB - MIB), Ok(()));
        assert_eq!(l.try_charge(0, MIB), Ok(()));
        assert_eq!(l.used(0), GIB);
        assert_eq!(l.try_charge(0, 1), Err(Denied::over_limit(1, GIB, GIB)));
        assert_eq!(l.used(0), GIB);
        l.release(0, MIB);
        assert_eq!(l.try_charge(0, MIB), Ok(()));
        // Unlimited device takes anything and saturates.
        assert_eq!(l.try_charge(1, u64::MAX), Ok(()));
        assert_eq!(l.try_charge(1, 5), Ok(()));
        assert_eq!(l.used(1), u64::MAX);
    }

    #[test]
    fn zero_charge_always_succeeds() {
        let l = LocalLedger::new(&[Some(10)]);
        l.force_charge(0, 20);
        assert_eq!(l.try_charge(0, 0), Ok(()));
        assert_eq!(l.used(0), 20);
    }

    #[test]
    fn force_and_release_saturate() {
        let l = LocalLedger::new(&[Some(10)]);
        l.force_charge(0, u64::MAX - 1);
        l.force_charge(0, 5);
        assert_eq!(l.used(0), u64::MAX);
        l.release(0, u64::MAX);
        assert_eq!(l.used(0), 0);
        l.release(0, 1);
        assert_eq!(l.used(0), 0);
    }

    #[test]
    fn set_limit_below_use_blocks_until_released() {
        let l = LocalLedger::new(&[None]);
        assert_eq!(l.try_charge(0, 100), Ok(()));
        l.set_limit(0, Some(50));
        assert_eq!(l.limit(0), Some(50));
        assert!(l.try_charge(0, 1).is_err());
        l.release(0, 60);
        assert_eq!(l.try_charge(0, 10), Ok(()));
        l.set_limit(0, None);
        assert_eq!(l.limit(0), None);
        assert_eq!(l.try_charge(0, GIB), Ok(()));
    }

    #[test]
    fn unknown_device_is_unlimited_and_ignored() {
        let l = LocalLedger::new(&[Some(1)]);
        assert_eq!(l.limit(7), None);
        assert_eq!(l.try_charge(7, GIB), Ok(()));
        l.force_charge(7, 1);
        l.release(7, 1);
        l.set_limit(7, Some(1));
        assert_eq!(l.used(7), 0);
        assert_eq!(l.limit(7), None);
        let empty = LocalLedger::new(&[]);
        assert_eq!(empty.devices(), 0);
        assert_eq!(empty.try_charge(0, 1), Ok(()));
    }

    #[test]
    fn is_object_safe() {
        let l: Box<dyn Ledger> = Box::new(LocalLedger::new(&[Some(3)]));
        assert!(l.try_charge(0, 4).is_err());
    }
}
