//! [`HamiMirror`]: the only writer of HAMi-core's v1 prefix.
//!
//! The first 2,008,953 bytes of the file are HAMi-core's `shared_region_t`, kept current as a
//! *published view* for HAMi's and Volcano's node monitors (HAMi-core's
//! `multiprocess_memory_limit.h`; offsets in [`crate::layout::Hami`]).
//! The budget never reads its own figures back from it: it lives in vgpu's section. Only the
//! [`Snapshot`](crate::Snapshot) reads one back, each live process's `contextSize` (the part of
//! its `used` that is context memory, which only its owner knows), for display. Every store
//! into the prefix goes through this type, so what the monitors see is decided in one file.

use std::sync::atomic::{AtomicU64, Ordering};

use super::Region;
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

    /// A new file's header fields, all but the magic (see [`publish_magic`](Self::publish_magic)),
    /// as HAMi-core's initialiser writes them: versions, `priority` 1, `utilization_switch` 1,
    /// `recent_kernel` 2 (active), and its two locks (`owner_pid` 0, `sem` and `sem_postinit`
    /// free process-shared glibc semaphores: value 1), so that a HAMi-core process that opens a
    /// vgpu file finds them free rather than waiting on zeroed semaphores (on `sem_postinit`,
    /// HAMi-core waits 11 × 30 s in `cuInit`, then runs without its SM limit).
    pub(crate) fn initialise(&self) {
        let h = self.h;
        h.major_version.store(layout::HAMI_MAJOR, Ordering::Release);
        h.minor_version.store(layout::HAMI_MINOR, Ordering::Release);
        h.owner_pid.store(0, Ordering::Release);
        // glibc's `struct new_sem` on 64-bit targets (x86-64, aarch64): `uint64_t data` (the
        // value in the low 32 bits, waiters above), then `int private`, which `sem_init` sets to
        // FUTEX_SHARED (128, `FUTEX_PRIVATE_FLAG`, XORed into the futex op) for a
        // process-shared semaphore, then padding.
        for sem in [&h.sem, &h.sem_postinit] {
            sem[0].store(1, Ordering::Release);
            sem[1].store(128, Ordering::Release);
        }
        h.priority.store(1, Ordering::Release);
        h.utilization_switch.store(1, Ordering::Release);
        h.recent_kernel.store(2, Ordering::Release);
    }

    /// An existing file whose `sem_postinit` was never initialised (all zero: made by a vgpu
    /// before it knew the field, or by a HAMi-core before 1.2 added it) gets a free semaphore.
    /// A semaphore in use is never all zero (its `private` word is 128), so none is disturbed.
    pub(crate) fn repair_postinit(&self) {
        let s = &self.h.sem_postinit;
        if s.iter().all(|w| w.load(Ordering::Acquire) == 0)
            && s[1]
                .compare_exchange(0, 128, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            let _ = s[0].compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire);
        }
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
        // HAMi-core's `shrreg_tool` signals every listed process (`crate::suspend`).
        crate::suspend::watch(&p.status);
        self.h
            .procnum
            .fetch_max(procnum_of(slot + 1), Ordering::AcqRel);
    }

    /// Process slot `slot` is gone: all of it zeroed (Volcano's monitor sums every slot).
    pub(crate) fn close_slot(&self, slot: usize) {
        if let Some(p) = self.proc(slot) {
            crate::suspend::unwatch(&p.status);
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

    /// Copies a process's usage of `dev` into its HAMi slot: `total` is `used` (the slot's vgpu
    /// counter), `context` the part of it that is context memory (`context`, at most `used`),
    /// `data` the rest.
    pub(crate) fn publish_used(&self, slot: usize, dev: usize, used: &AtomicU64, context: u64) {
        let Some(hu) = self.proc(slot).and_then(|p| p.used.get(dev)) else {
            return;
        };
        // Re-store until stable so that a racing thread's older value does not stay behind.
        for _ in 0..4 {
            let v = used.load(Ordering::SeqCst);
            let ctx = context.min(v);
            hu.context.store(ctx, Ordering::Relaxed);
            hu.data.store(v - ctx, Ordering::Relaxed);
            hu.total.store(v, Ordering::Relaxed);
            if used.load(Ordering::SeqCst) == v {
                break;
            }
        }
    }

    /// The context memory process slot `slot` published for `dev` (`used[dev].contextSize`), for
    /// the snapshot (0 for a slot or device out of range).
    pub(crate) fn context_of(&self, slot: usize, dev: usize) -> u64 {
        self.proc(slot)
            .and_then(|p| p.used.get(dev))
            .map_or(0, |u| u.context.load(Ordering::Relaxed))
    }

    /// `deviceUtil[dev].sm` of process slot `slot`: the process's share of the GPU, percent.
    pub(crate) fn publish_sm_util(&self, slot: usize, dev: usize, percent: u8) {
        if let Some(u) = self.proc(slot).and_then(|p| p.device_util.get(dev)) {
            u.sm.store(u64::from(percent.min(100)), Ordering::Relaxed);
        }
    }

    /// `priority` (HAMi: 0 high, 1 low; other values crash older and Volcano monitors, so the
    /// value is clamped to 0..=1).
    pub(crate) fn set_priority(&self, priority: i32) {
        self.h
            .priority
            .store(priority.clamp(0, 1), Ordering::Release);
    }

    /// Marks a launch: `recent_kernel` = 2, unless the monitor blocks the container (< 0) or it
    /// is already 2. A load, and a compare-exchange about once per monitor round (the monitor
    /// decrements it every 5 s): no system call, no store on the common path.
    #[inline]
    pub(crate) fn mark_launch(&self) {
        let w = &self.h.recent_kernel;
        let cur = w.load(Ordering::Relaxed);
        if (0..2).contains(&cur) {
            // Lost to the monitor (a decrement, or a block): its value stands.
            let _ = w.compare_exchange(cur, 2, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// Raises `last_kernel_time` to `unix_s` (a load; a store only when the second changed).
    #[inline]
    pub(crate) fn note_kernel_time(&self, unix_s: u64) {
        let w = &self.h.last_kernel_time;
        let now = i64::try_from(unix_s).unwrap_or(i64::MAX);
        if w.load(Ordering::Relaxed) < now {
            w.fetch_max(now, Ordering::Relaxed);
        }
    }

    /// Whether HAMi slot `slot` holds a process vgpu did not put there (a HAMi-core process of
    /// the container, still running after the node switched to vgpu): only asked of slots free
    /// on vgpu's side, whose HAMi slot vgpu always leaves zeroed.
    pub(crate) fn foreign(&self, slot: usize) -> Option<i32> {
        let p = self.proc(slot)?;
        let pid = p.pid.load(Ordering::Acquire);
        (pid != 0 || p.status.load(Ordering::Acquire) != 0).then_some(pid)
    }

    /// HAMi's `procnum` (clamped to the slot count).
    pub(crate) fn procnum(&self) -> usize {
        usize::try_from(self.h.procnum.load(Ordering::Acquire))
            .unwrap_or(0)
            .min(layout::MAX_PROCS)
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

/// HAMi's monitor protocol, for the preload (see [`crate`]'s "HAMi's monitor" section).
impl super::Region {
    /// Publishes the container's task priority (`CUDA_TASK_PRIORITY`: 0 high, 1 low, the
    /// default; clamped to 0..=1). Every process of a container has the same value; the preload
    /// calls this once after attaching.
    pub fn set_priority(&self, priority: i32) {
        self.hami().set_priority(priority);
    }

    /// Marks "this container launched a kernel" for HAMi's monitor (`recent_kernel` = 2), unless
    /// the monitor blocks the container. Atomics only, no system call, no store when already
    /// marked: cheap enough for every launch.
    #[inline]
    pub fn mark_launch(&self) {
        self.hami().mark_launch();
    }

    /// HAMi's `recent_kernel`: > 0 the container launched recently, 0 idle, < 0 **blocked** by the
    /// monitor (a higher-priority container is active on the same GPU): HAMi-core's launch path
    /// sleeps while it is negative. One relaxed load.
    #[inline]
    pub fn recent_kernel(&self) -> i32 {
        self.layout().hami.recent_kernel.load(Ordering::Relaxed)
    }

    /// Whether HAMi's monitor blocks this container's launches now ([`recent_kernel`] < 0).
    ///
    /// [`recent_kernel`]: Self::recent_kernel
    #[inline]
    pub fn launch_blocked(&self) -> bool {
        self.recent_kernel() < 0
    }

    /// HAMi's `utilization_switch`: 1 (set at creation; the monitor keeps it 1 while a container
    /// of the same or higher priority is active on the same GPU) means throttle; 0 means this
    /// container may run unthrottled under `GPU_CORE_UTILIZATION_POLICY=default`. One relaxed
    /// load.
    #[inline]
    pub fn utilization_switch(&self) -> i32 {
        self.layout()
            .hami
            .utilization_switch
            .load(Ordering::Relaxed)
    }

    /// Records the time of the latest kernel launch, Unix seconds (HAMi's `last_kernel_time`,
    /// set to the attach time by [`open_or_create`](Self::open_or_create)). A relaxed load, and
    /// a store only when `unix_s` is newer: the launch path calls it at most once per
    /// `RECORD_KERNEL_INTERVAL` with [`crate::sys::realtime_secs`] (vDSO, no system call).
    #[inline]
    pub fn note_kernel_time(&self, unix_s: u64) {
        self.hami().note_kernel_time(unix_s);
    }

    /// Publishes this process's SM utilisation of region device `dev` in percent (HAMi's
    /// `deviceUtil[dev].sm`, exported as `hami_container_device_utilization_ratio`), from the GPU
    /// time the preload measures (see [`sm_util_percent`]). A no-op without a process slot.
    pub fn publish_sm_util(&self, dev: usize, percent: u8) {
        if let Some(me) = self.slot() {
            self.hami().publish_sm_util(me, dev, percent);
        }
    }
}

/// How often the container's reaper republishes every process's SM utilisation (at most as
/// often as it makes a pass).
pub(super) const UTIL_PERIOD_NS: u64 = 1_000_000_000;

/// One slot's GPU time as the reaper last read it.
#[derive(Clone, Copy)]
struct Reading {
    /// The slot's state word when read: another generation is another process.
    state: u32,
    /// When (the reaper's clock, ns).
    at: u64,
    /// GPU time per region device, ns.
    gpu: [u64; layout::MAX_DEVICES],
}

/// The reaper's last reading of each process slot, to publish every process's SM utilisation
/// from the GPU time each reports to its slot (process-local, the reaper's alone).
#[derive(Default)]
pub(super) struct UtilReadings {
    last: Vec<Option<Reading>>,
}

impl UtilReadings {
    /// Slot `slot` (state word `state`) read `gpu` at `at`: the utilisation of each device since
    /// the last reading, or `None` for a first reading, a new process in the slot, or a
    /// counter that went back.
    fn read(
        &mut self,
        slot: usize,
        state: u32,
        at: u64,
        gpu: [u64; layout::MAX_DEVICES],
    ) -> Option<[u8; layout::MAX_DEVICES]> {
        if self.last.len() <= slot {
            self.last.resize(slot + 1, None);
        }
        let prev = self.last[slot].replace(Reading { state, at, gpu });
        let prev = prev.filter(|p| p.state == state && at > p.at)?;
        let mut pct = [0u8; layout::MAX_DEVICES];
        for (d, p) in pct.iter_mut().enumerate() {
            *p = sm_util_percent(gpu[d].checked_sub(prev.gpu[d])?, at - prev.at);
        }
        Some(pct)
    }

    /// A slot no process holds now.
    fn forget(&mut self, slot: usize) {
        if let Some(r) = self.last.get_mut(slot) {
            *r = None;
        }
    }
}

impl Region {
    /// The reaper's share of HAMi's monitor protocol: every live process's SM utilisation
    /// (`deviceUtil[dev].sm`), from the GPU time the process's compute gate reported to its
    /// slot since the last reading, at most once per [`UTIL_PERIOD_NS`]. So no process wakes
    /// to publish its own figure; a process whose devices are not measured reads 0.
    pub(super) fn publish_utilisation(&self, now_ns: u64) {
        let due = self.util_at.load(Ordering::Relaxed);
        if due != 0 && now_ns.saturating_sub(due) < UTIL_PERIOD_NS {
            return;
        }
        self.util_at.store(now_ns.max(1), Ordering::Relaxed);
        let l = self.layout();
        let n = self.device_count();
        let hw = (l.header.high_water.load(Ordering::Acquire) as usize).min(layout::MAX_PROCS);
        let mut readings = self.util.lock().unwrap_or_else(|e| e.into_inner());
        for (i, p) in l.procs.iter().enumerate().take(hw) {
            let state = p.state.load(Ordering::Acquire);
            if layout::state_of(state) != layout::LIVE {
                readings.forget(i);
                continue;
            }
            let mut gpu = [0u64; layout::MAX_DEVICES];
            for (d, g) in gpu.iter_mut().enumerate().take(n) {
                *g = p.gpu_ns[d].load(Ordering::Relaxed);
            }
            if let Some(pct) = readings.read(i, state, now_ns, gpu) {
                for (d, &v) in pct.iter().enumerate().take(n) {
                    self.hami().publish_sm_util(i, d, v);
                }
            }
        }
    }
}

/// GPU time `gpu_ns` measured over `wall_ns` of wall time as a percent of the GPU (0..=100; 0
/// for an empty interval).
pub fn sm_util_percent(gpu_ns: u64, wall_ns: u64) -> u8 {
    if wall_ns == 0 {
        return 0;
    }
    let pct = (u128::from(gpu_ns) * 100 / u128::from(wall_ns)).min(100);
    u8::try_from(pct).unwrap_or(100)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn gpu(ns: u64) -> [u64; layout::MAX_DEVICES] {
        let mut g = [0; layout::MAX_DEVICES];
        g[0] = ns;
        g
    }

    #[test]
    fn utilisation_is_gpu_time_gained_over_wall_time_since_the_last_reading() {
        let mut r = UtilReadings::default();
        assert_eq!(r.read(3, 0x102, S, gpu(0)), None, "a first reading");
        assert_eq!(r.read(3, 0x102, 2 * S, gpu(S / 2)).map(|p| p[0]), Some(50));
        assert_eq!(r.read(3, 0x102, 3 * S, gpu(S / 2)).map(|p| p[0]), Some(0));
        // Another process in the slot (another generation): no reading across it.
        assert_eq!(r.read(3, 0x202, 4 * S, gpu(S)), None);
        assert_eq!(
            r.read(3, 0x202, 5 * S, gpu(S + S / 10)).map(|p| p[0]),
            Some(10)
        );
        // A counter that went back, or no time passed: no reading.
        assert_eq!(r.read(3, 0x202, 6 * S, gpu(0)), None);
        assert_eq!(r.read(3, 0x202, 6 * S, gpu(0)), None);
        // A slot given up starts over.
        r.forget(3);
        assert_eq!(r.read(3, 0x202, 7 * S, gpu(S)), None);
        // More GPU time than wall time (a window reported late): at most 100.
        assert_eq!(r.read(3, 0x202, 8 * S, gpu(4 * S)).map(|p| p[0]), Some(100));
    }
}
