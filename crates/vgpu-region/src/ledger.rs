//! [`RegionLedger`]: the [`Ledger`] of one process over the shared region.
//!
//! Naming: the [`Ledger`] trait indexes devices densely, `0..n` in the process's CUDA order
//! (`vgpu_policy::ledger::DeviceIndex`); here it is `device`, and the region's own index of the
//! same GPU is `dev`. "Slot" in this crate means a process slot only.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use vgpu_policy::ledger::{Denied, DenyReason, Ledger};

use crate::Region;
use crate::protocol;

/// One process's view of the region as a [`Ledger`]: its dense device index `device` maps to a
/// region device (by UUID, see [`Region::ledger`]).
///
/// * [`used`](Ledger::used) is the **container-wide** total of the device (what counts against
///   the limit); [`process_used`](RegionLedger::process_used) is this process's share.
/// * [`try_charge`](Ledger::try_charge) / [`release`](Ledger::release) are atomics only (no lock,
///   no syscall, no allocation) once the process has its slot. The first charge after a fork
///   takes a new slot (a few syscalls, once). At a refusal, dead processes are reaped first and
///   the charge retried once if any were.
/// * A device with no region device (unknown UUID) is unlimited and untracked, as the trait asks.
/// * If no process slot can be had (all 1024 taken), charges on limited devices are refused and
///   on unlimited ones granted untracked.
#[derive(Debug)]
pub struct RegionLedger {
    region: Arc<Region>,
    /// Region device index of each ledger device.
    devs: Box<[Option<usize>]>,
}

impl RegionLedger {
    pub(crate) fn new(region: Arc<Region>, devs: Box<[Option<usize>]>) -> Self {
        RegionLedger { region, devs }
    }

    /// The region.
    pub fn region(&self) -> &Arc<Region> {
        &self.region
    }

    fn dev(&self, device: usize) -> Option<usize> {
        self.devs.get(device).copied().flatten()
    }

    /// The container's compute schedule word of the device (see [`crate::layout::Device`]):
    /// shared by every process of the container; `None` for a device not in the region.
    pub fn sm_next_ns(&self, device: usize) -> Option<&AtomicU64> {
        let d = self.dev(device)?;
        Some(&self.region.layout().devices[d].sm_next_ns)
    }

    /// Bytes of the device charged by this process.
    pub fn process_used(&self, device: usize) -> u64 {
        match (self.dev(device), self.region.slot()) {
            (Some(d), Some(me)) => {
                protocol::Budget::used(&self.region.budget(d), me).load(Ordering::SeqCst)
            }
            _ => 0,
        }
    }

    /// Adds to this process's compute counters of `device`: GPU time consumed and time
    /// throttled (ns, from the compute limiter's own measurement) and kernels launched. Relaxed
    /// atomic adds on this process's own slot only (no shared word, no lock): for the monitor
    /// (`vgpu status/top/metrics`). A no-op if `device` has no region device or the process
    /// holds no region slot (it does not take one).
    pub fn add_compute(&self, device: usize, gpu_ns: u64, throttled_ns: u64, launches: u64) {
        if let (Some(d), Some(me)) = (self.dev(device), self.region.slot()) {
            self.region
                .add_compute(me, d, gpu_ns, throttled_ns, launches);
        }
    }

    /// The region device index behind `device` (for [`Region::sm_limit_index`]), if any.
    pub fn device_index(&self, device: usize) -> Option<usize> {
        self.dev(device)
    }

    /// The SM limit (percent) in force for `device`: one relaxed load, cheap enough to poll
    /// each compute window. `None`: no limit (or no region device).
    #[inline]
    pub fn sm_limit(&self, device: usize) -> Option<u8> {
        self.dev(device).and_then(|d| self.region.sm_limit_index(d))
    }

    /// Charges `bytes` of **context** memory (a CUDA context's reservation) on `device`: against
    /// the budget exactly like [`try_charge`](Ledger::try_charge) (`enforce`) or
    /// [`force_charge`](Ledger::force_charge) (`!enforce`), and published to HAMi's monitor as
    /// `used[dev].contextSize` rather than as buffer memory.
    pub fn charge_context(&self, device: usize, bytes: u64, enforce: bool) -> Result<(), Denied> {
        let Some(d) = self.dev(device) else {
            return Ok(());
        };
        // The slot first (claiming one resets the figure), then the figure, so that the
        // grant's publication already shows it as context.
        let _ = self.region.claim_slot();
        self.region.note_context(d, bytes, true);
        let r = self.charge(device, bytes, enforce);
        if r.is_err() || self.region.slot().is_none() {
            self.region.note_context(d, bytes, false);
        }
        r
    }

    /// Releases `bytes` of context memory charged by [`charge_context`](Self::charge_context).
    pub fn release_context(&self, device: usize, bytes: u64) {
        if let Some(d) = self.dev(device) {
            self.region.note_context(d, bytes, false);
        }
        self.release(device, bytes);
    }

    /// Records a charge of `device` refused to the program in the region's refusal log
    /// ([`Region::refusals`]): what was asked, the device's use and limit (`d`), what this
    /// process holds, and which live process holds the most of the device, with the time. For
    /// the refusal path only (a scan of the process slots and a clock read); a no-op for a
    /// device the region does not have.
    pub fn record_refusal(&self, device: usize, d: &Denied) {
        if let Some(dev) = self.dev(device) {
            self.region
                .note_refusal(self.region.slot(), dev, d.requested, d.used, d.limit);
        }
    }

    /// Publishes this process's SM utilisation of `device` in percent to HAMi's monitor
    /// (`deviceUtil[dev].sm`); see [`crate::sm_util_percent`]. A relaxed store.
    pub fn publish_sm_util(&self, device: usize, percent: u8) {
        if let Some(d) = self.dev(device) {
            self.region.publish_sm_util(d, percent);
        }
    }

    fn charge(&self, device: usize, bytes: u64, enforce: bool) -> Result<(), Denied> {
        let Some(d) = self.dev(device) else {
            return Ok(());
        };
        if bytes == 0 {
            return Ok(());
        }
        let refuse = |used: u64, limit: u64| Denied::over_limit(bytes, used, limit);
        if enforce && self.region.is_broken() {
            // Cut off from the container's budget: fail closed, never a budget of our own.
            let limit = self.region.limit_index(d).unwrap_or(0);
            return Err(refuse(self.region.used_index(d), limit).because(DenyReason::CutOff));
        }
        let Ok(me) = self.region.claim_slot() else {
            return match self.region.limit_index(d) {
                Some(limit) if enforce => {
                    Err(refuse(self.region.used_index(d), limit).because(DenyReason::NoProcessSlot))
                }
                _ => Ok(()),
            };
        };
        let budget = self.region.budget(d);
        let mut result = protocol::charge_total(&budget, me, bytes, enforce);
        if result.is_err_and(|r| !r.stalled) && self.region.reap_dead() > 0 {
            result = protocol::charge_total(&budget, me, bytes, enforce);
        }
        match result {
            Ok(total) => {
                self.region.note_grant(me, d, total);
                self.region.publish_hami(me, d);
                Ok(())
            }
            Err(r) => {
                self.region.note_denied(me, d);
                let denied = refuse(r.used, r.limit);
                Err(if r.stalled {
                    denied.because(DenyReason::Stalled)
                } else {
                    denied
                })
            }
        }
    }
}

impl Ledger for RegionLedger {
    fn limit(&self, device: usize) -> Option<u64> {
        let d = self.dev(device)?;
        let limit = self.region.limit_index(d);
        // Cut off from the container's budget (the file truncated: it reads as zeroes, which
        // would say "no device, no limit"): every region device is limited to nothing.
        if self.region.is_broken() {
            return Some(0);
        }
        limit
    }

    fn set_limit(&self, device: usize, limit: Option<u64>) {
        if let Some(d) = self.dev(device) {
            self.region.set_limit_index(d, limit);
        }
    }

    fn used(&self, device: usize) -> u64 {
        self.dev(device).map_or(0, |d| self.region.used_index(d))
    }

    fn try_charge(&self, device: usize, bytes: u64) -> Result<(), Denied> {
        self.charge(device, bytes, true)
    }

    fn force_charge(&self, device: usize, bytes: u64) {
        let _ = self.charge(device, bytes, false);
    }

    fn release(&self, device: usize, bytes: u64) {
        if let (Some(d), Some(me)) = (self.dev(device), self.region.slot()) {
            protocol::release(&self.region.budget(d), me, bytes);
            self.region.publish_hami(me, d);
        }
    }
}
