//! Counters for the monitor: per-process and per-device high-water marks, refusals and compute
//! time; moving a cleared slot's counters into the devices' retired totals; the [`Snapshot`]
//! that `vgpu status/top/metrics` read.

use std::sync::atomic::{AtomicU64, Ordering};

use super::Region;
use super::budget::{sm_opt, sm_percent, to_opt};
use crate::layout::{self, MAX_DEVICES};

/// Status of one device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceStatus {
    /// NVML UUID.
    pub uuid: String,
    /// Memory limit (`None`: none).
    pub limit: Option<u64>,
    /// SM limit in percent (`None`: none).
    pub sm_limit: Option<u8>,
    /// Σ used over live processes.
    pub used: u64,
    /// The part of `used` that is CUDA context memory (what
    /// [`RegionLedger::charge_context`](crate::RegionLedger::charge_context) charged), Σ over
    /// live processes; `used - context` is buffer memory.
    pub context: u64,
    /// `limit - used` (0 when over), `None` without a limit.
    pub free: Option<u64>,
    /// High-water mark of `used` (the container's, since the region was created).
    pub peak: u64,
    /// GPU time consumed, ns: live processes plus those gone (never decreases).
    pub gpu_ns: u64,
    /// Time throttled by the compute limiter, ns: live plus gone.
    pub throttled_ns: u64,
    /// Allocations refused: live plus gone.
    pub denied: u64,
    /// Kernels launched: live plus gone.
    pub launches: u64,
}

/// Status of one live process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessStatus {
    /// Its process slot.
    pub slot: usize,
    /// PID in its own namespace.
    pub pid: u32,
    /// Command line (truncated to 63 bytes).
    pub command: String,
    /// Unix seconds when it took its slot.
    pub start_time: u64,
    /// Bytes used per device (indexed like [`Snapshot::devices`]).
    pub used: Vec<u64>,
    /// The part of `used` that is context memory, per device.
    pub context: Vec<u64>,
    /// High-water mark of `used` per device.
    pub peak: Vec<u64>,
    /// GPU time consumed per device, ns.
    pub gpu_ns: Vec<u64>,
    /// Time throttled per device, ns.
    pub throttled_ns: Vec<u64>,
    /// Allocations refused per device.
    pub denied: Vec<u64>,
    /// Kernels launched per device.
    pub launches: Vec<u64>,
    /// The library it runs, "`<version> <commit>`", as it stamped its slot (`None`: a library
    /// that does not, an earlier vgpu).
    pub library: Option<String>,
    /// It accounts without limiting (`VGPU_OBSERVE`).
    pub observing: bool,
}

/// A point-in-time copy of the region.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Devices, in region order.
    pub devices: Vec<DeviceStatus>,
    /// Live processes, by slot.
    pub processes: Vec<ProcessStatus>,
    /// The container's Kubernetes identity as its region's creator recorded it (see
    /// [`Region::open_or_create_as`]); empty when unknown.
    pub identity: super::PodIdentity,
    /// The last refused charges, newest first (see [`Region::refusals`]).
    pub refusals: Vec<super::RefusalStatus>,
}

type PerDevice = [AtomicU64; MAX_DEVICES];

impl Region {
    /// After a grant to process slot `me` on `dev`, `total` being the device total right after
    /// it: raises the process's and the device's high-water marks (a load, and a `fetch_max`
    /// only when a mark is passed).
    #[inline]
    pub(crate) fn note_grant(&self, me: usize, dev: usize, total: u64) {
        let l = self.layout();
        if let (Some(p), Some(d)) = (l.procs.get(me), l.devices.get(dev)) {
            let used = p.used[dev].load(Ordering::Relaxed);
            if p.peak[dev].load(Ordering::Relaxed) < used {
                p.peak[dev].fetch_max(used, Ordering::Relaxed);
            }
            if d.peak.load(Ordering::Relaxed) < total {
                d.peak.fetch_max(total, Ordering::Relaxed);
            }
        }
    }

    /// Counts a refused charge of process slot `me` on `dev`.
    #[inline]
    pub(crate) fn note_denied(&self, me: usize, dev: usize) {
        if let Some(c) = self.layout().procs.get(me).and_then(|p| p.denied.get(dev)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Adds compute counters to process slot `me`, device `dev` (relaxed; the owner only).
    #[inline]
    pub(crate) fn add_compute(
        &self,
        me: usize,
        dev: usize,
        gpu_ns: u64,
        throttled_ns: u64,
        launches: u64,
    ) {
        let Some(p) = self.layout().procs.get(me) else {
            return;
        };
        if dev >= MAX_DEVICES {
            return;
        }
        for (c, v) in [
            (&p.gpu_ns[dev], gpu_ns),
            (&p.throttled_ns[dev], throttled_ns),
            (&p.launches[dev], launches),
        ] {
            if v != 0 {
                c.fetch_add(v, Ordering::Relaxed);
            }
        }
    }

    /// Zeroes process slot `i`'s usage and counters (a slot being claimed).
    pub(super) fn reset_counters(&self, i: usize) {
        let p = &self.layout().procs[i];
        for d in 0..MAX_DEVICES {
            p.used[d].store(0, Ordering::SeqCst);
            p.pending[d].store(0, Ordering::SeqCst);
            for c in [
                &p.peak[d],
                &p.denied[d],
                &p.gpu_ns[d],
                &p.throttled_ns[d],
                &p.launches[d],
            ] {
                c.store(0, Ordering::Relaxed);
            }
        }
    }

    /// Moves process slot `i`'s counters into the devices' retired totals, so that container
    /// totals never go backwards; readers see the move as one step (see
    /// [`layout::Header::reaps_begun`]).
    pub(super) fn retire_counters(&self, i: usize) {
        let l = self.layout();
        let p = &l.procs[i];
        l.header.reaps_begun.fetch_add(1, Ordering::SeqCst);
        for (d, dev) in l.devices.iter().enumerate() {
            for (from, to) in [
                (&p.gpu_ns[d], &dev.retired_gpu_ns),
                (&p.throttled_ns[d], &dev.retired_throttled_ns),
                (&p.denied[d], &dev.retired_denied),
                (&p.launches[d], &dev.retired_launches),
            ] {
                let v = from.swap(0, Ordering::SeqCst);
                if v != 0 {
                    to.fetch_add(v, Ordering::SeqCst);
                }
            }
            p.peak[d].store(0, Ordering::Relaxed);
        }
        l.header.reaps_done.fetch_add(1, Ordering::SeqCst);
    }

    /// A copy of the region's state for display. Reads atomics only (no lock, no slot): safe to
    /// call from a monitor at any rate without slowing the workload. Counter totals include the
    /// processes already gone; a scan that raced with a reap is retried (a few times) so that
    /// totals read never go backwards.
    pub fn snapshot(&self) -> Snapshot {
        let h = &self.layout().header;
        let mut snap = self.snapshot_once();
        for _ in 0..64 {
            let done = h.reaps_done.load(Ordering::SeqCst);
            let begun = h.reaps_begun.load(Ordering::SeqCst);
            if begun == done {
                snap = self.snapshot_once();
                if h.reaps_begun.load(Ordering::SeqCst) == begun {
                    return snap;
                }
            }
            std::thread::yield_now();
        }
        snap
    }

    /// Process slot `i`'s status over the first `n` devices, if it is live.
    fn process_status(&self, i: usize, n: usize) -> Option<ProcessStatus> {
        let p = &self.layout().procs[i];
        let state = p.state.load(Ordering::Acquire);
        if layout::state_of(state) != layout::LIVE || self.dead_unreaped(i) {
            return None;
        }
        let (library, flags) = self.read_stamp(i, state);
        let per_dev = |a: &PerDevice| -> Vec<u64> {
            a[..n].iter().map(|c| c.load(Ordering::Relaxed)).collect()
        };
        let used: Vec<u64> = (0..n).map(|d| p.used[d].load(Ordering::SeqCst)).collect();
        let hami = self.hami();
        Some(ProcessStatus {
            slot: i,
            pid: p.pid.load(Ordering::Acquire),
            command: layout::read_string(&p.command),
            start_time: p.start_time.load(Ordering::Acquire),
            context: (0..n).map(|d| hami.context_of(i, d).min(used[d])).collect(),
            used,
            peak: per_dev(&p.peak),
            gpu_ns: per_dev(&p.gpu_ns),
            throttled_ns: per_dev(&p.throttled_ns),
            denied: per_dev(&p.denied),
            launches: per_dev(&p.launches),
            library,
            observing: flags & layout::OBSERVING != 0,
        })
    }

    fn snapshot_once(&self) -> Snapshot {
        let l = self.layout();
        let n = self.device_count();
        let hw = (l.header.high_water.load(Ordering::Acquire) as usize).min(layout::MAX_PROCS);
        let processes: Vec<ProcessStatus> =
            (0..hw).filter_map(|i| self.process_status(i, n)).collect();
        // Counters of live slots that are not LIVE right now (claiming, reaping) are counted
        // too: a slot being cleared still holds them until the move (bracketed by reaps_begun).
        let live_sum = |d: usize, f: fn(&layout::Proc) -> &PerDevice| {
            (0..hw)
                .filter(|&i| {
                    layout::state_of(l.procs[i].state.load(Ordering::Acquire)) != layout::FREE
                })
                .map(|i| f(&l.procs[i])[d].load(Ordering::Relaxed))
                .fold(0u64, u64::wrapping_add)
        };
        // A read-only reader cannot reap: leave out what dead, unreaped slots still hold.
        let dead: Vec<usize> = (0..hw)
            .filter(|&i| {
                layout::state_of(l.procs[i].state.load(Ordering::Acquire)) != layout::FREE
                    && self.dead_unreaped(i)
            })
            .collect();
        let devices = (0..n)
            .map(|i| {
                let d = &l.devices[i];
                let limit = to_opt(d.limit.load(Ordering::Acquire));
                let held_by_dead = dead
                    .iter()
                    .map(|&s| l.procs[s].used[i].load(Ordering::SeqCst))
                    .fold(0u64, u64::saturating_add);
                let used = self.used_index(i).saturating_sub(held_by_dead);
                let context = processes
                    .iter()
                    .filter_map(|p| p.context.get(i))
                    .fold(0u64, |a, &c| a.saturating_add(c))
                    .min(used);
                let retired = |c: &AtomicU64| c.load(Ordering::SeqCst);
                DeviceStatus {
                    uuid: layout::read_string(&d.uuid),
                    limit,
                    sm_limit: sm_opt(d.sm_limit.load(Ordering::Acquire)).map(sm_percent),
                    used,
                    context,
                    free: limit.map(|lim| lim.saturating_sub(used)),
                    peak: d.peak.load(Ordering::Relaxed).max(used),
                    gpu_ns: retired(&d.retired_gpu_ns).wrapping_add(live_sum(i, |p| &p.gpu_ns)),
                    throttled_ns: retired(&d.retired_throttled_ns)
                        .wrapping_add(live_sum(i, |p| &p.throttled_ns)),
                    denied: retired(&d.retired_denied).wrapping_add(live_sum(i, |p| &p.denied)),
                    launches: retired(&d.retired_launches)
                        .wrapping_add(live_sum(i, |p| &p.launches)),
                }
            })
            .collect();
        let id = &l.identity;
        let text = |words: &[AtomicU64]| {
            let s = layout::read_string(words);
            (!s.is_empty()).then_some(s)
        };
        let (namespace, pod, container) = (text(&id.namespace), text(&id.pod), text(&id.container));
        Snapshot {
            devices,
            processes,
            identity: super::PodIdentity::new(
                namespace.as_deref(),
                pod.as_deref(),
                container.as_deref(),
            ),
            refusals: self.refusals(),
        }
    }
}
