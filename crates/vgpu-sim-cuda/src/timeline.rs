//! The device timeline: a monotonic clock, and per physical GPU the schedule of kernels it
//! executes one at a time (time slicing).
//!
//! A [`DevTimeline`] lives in the shared state file when `VGPU_SIM_STATE` is set (so processes
//! sharing a simulated GPU contend for it), else in process memory. It holds the end of the
//! last scheduled kernel (`busy_until`), the total kernel nanoseconds ever scheduled, and a ring
//! of the most recent *busy runs* (maximal stretches of back-to-back kernels), from which the
//! busy time of any recent window, and the part of the scheduled work already executed, follow
//! exactly (as long as the ring reaches back far enough: [`RUNS`] runs).
//!
//! Processes sharing a GPU pay a context switch ([`DevTimeline::schedule_as`]): a kernel of
//! another process than the last one's starts `switch` ns after the GPU would otherwise have
//! started it (the GPU is idle meanwhile: the switch is neither busy time nor kernel time), and
//! the timeline counts the switches.
//!
//! Every field is guarded by a spin lock word inside the structure (held for a few
//! instructions; a holder that seems stuck for a second, a process killed inside the lock, is
//! overridden).
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Busy runs remembered per GPU (the structure fills one 4 KiB page).
pub const RUNS: usize = 253;

/// Nanoseconds of `CLOCK_MONOTONIC` (shared by all processes of the machine).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// Sleeps (without holding anything) until `now_ns() >= t`.
pub fn sleep_until(t: u64) {
    loop {
        let now = now_ns();
        if now >= t {
            return;
        }
        std::thread::sleep(std::time::Duration::from_nanos(t - now));
    }
}

/// Busy-spins the calling thread for `ns` nanoseconds (launch overhead).
pub fn spin_for(ns: u64) {
    if ns == 0 {
        return;
    }
    let end = now_ns().saturating_add(ns);
    while now_ns() < end {
        std::hint::spin_loop();
    }
}

/// One physical GPU's timeline. `repr(C)`, 4096 bytes, all atomics: it may sit in a file
/// mapped by several processes.
#[repr(C)]
pub struct DevTimeline {
    lock: AtomicU32,
    /// The process (id) whose kernel was scheduled last; 0: none yet.
    owner: AtomicU32,
    /// End of the last scheduled kernel.
    busy_until: AtomicU64,
    /// Kernel nanoseconds ever scheduled.
    total_ns: AtomicU64,
    /// Runs ever pushed; run `i` sits at `runs[i % RUNS]`.
    head: AtomicU64,
    /// Context switches (a kernel of another process than the previous kernel's).
    switches: AtomicU64,
    /// Nanoseconds of GPU time those switches took.
    switch_ns: AtomicU64,
    /// (start, end) of each busy run, oldest overwritten first.
    runs: [[AtomicU64; 2]; RUNS],
}

const _: () = assert!(core::mem::size_of::<DevTimeline>() == 4096);

/// Holds a spin lock word (a [`DevTimeline`]'s, or a time-slicing device's).
pub struct Guard<'a>(&'a AtomicU32);

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Release);
    }
}

/// Takes the spin lock `word` (0 free, 1 held): spins, yielding now and then; a holder that
/// seems stuck for a second (a process killed inside the lock) is overridden.
pub fn lock_word(word: &AtomicU32) -> Guard<'_> {
    let mut spins = 0u32;
    let mut since: Option<u64> = None;
    loop {
        if word
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return Guard(word);
        }
        spins += 1;
        if spins.is_multiple_of(64) {
            std::thread::yield_now();
            let now = now_ns();
            match since {
                None => since = Some(now),
                // A holder dead inside the lock: take it over.
                Some(s) if now.saturating_sub(s) > 1_000_000_000 => {
                    word.store(1, Ordering::Release);
                    return Guard(word);
                }
                Some(_) => {}
            }
        } else {
            std::hint::spin_loop();
        }
    }
}

impl Default for DevTimeline {
    fn default() -> Self {
        Self::new()
    }
}

impl DevTimeline {
    /// An idle timeline.
    pub const fn new() -> DevTimeline {
        DevTimeline {
            lock: AtomicU32::new(0),
            owner: AtomicU32::new(0),
            busy_until: AtomicU64::new(0),
            total_ns: AtomicU64::new(0),
            head: AtomicU64::new(0),
            switches: AtomicU64::new(0),
            switch_ns: AtomicU64::new(0),
            runs: [const { [AtomicU64::new(0), AtomicU64::new(0)] }; RUNS],
        }
    }

    fn lock(&self) -> Guard<'_> {
        lock_word(&self.lock)
    }

    fn run(&self, i: u64) -> (u64, u64) {
        let r = &self.runs[(i % RUNS as u64) as usize];
        (r[0].load(Ordering::Relaxed), r[1].load(Ordering::Relaxed))
    }

    /// Schedules a kernel of `dur` ns that may start at `earliest`: it starts at
    /// `max(earliest, busy_until)`. Returns (start, end).
    pub fn schedule(&self, earliest: u64, dur: u64) -> (u64, u64) {
        self.schedule_as(0, 0, earliest, dur)
    }

    /// [`Self::schedule`] for process `owner` (non-zero; 0: not tracked): when the previous
    /// kernel was another process's, the GPU first spends `switch` ns changing context, so
    /// the kernel starts at `max(earliest, busy_until) + switch`.
    pub fn schedule_as(&self, owner: u32, switch: u64, earliest: u64, dur: u64) -> (u64, u64) {
        let _g = self.lock();
        let mut start = earliest.max(self.busy_until.load(Ordering::Relaxed));
        if dur == 0 {
            return (start, start);
        }
        if owner != 0 {
            start = start.saturating_add(self.turn_locked(owner, switch));
        }
        let end = start.saturating_add(dur);
        self.push_locked(start, end);
        (start, end)
    }

    /// Time-slicing mode: the GPU turns to process `owner`'s work. Returns the switch's cost
    /// (`switch`, counted) when the work it ran last was another process's, else 0.
    pub fn turn_to(&self, owner: u32, switch: u64) -> u64 {
        let _g = self.lock();
        self.turn_locked(owner, switch)
    }

    /// Time-slicing mode: the GPU executed work in `[start, end)` (the schedule is computed as
    /// time passes, so only work already done is recorded).
    pub fn record(&self, start: u64, end: u64) {
        if end > start {
            let _g = self.lock();
            self.push_locked(start, end);
        }
    }

    fn turn_locked(&self, owner: u32, switch: u64) -> u64 {
        let last = self.owner.swap(owner, Ordering::Relaxed);
        if last != 0 && last != owner {
            self.switches.fetch_add(1, Ordering::Relaxed);
            self.switch_ns.fetch_add(switch, Ordering::Relaxed);
            switch
        } else {
            0
        }
    }

    /// Appends busy time `[start, end)` (extending the last run if it ends at `start`).
    fn push_locked(&self, start: u64, end: u64) {
        let until = self.busy_until.load(Ordering::Relaxed).max(end);
        self.busy_until.store(until, Ordering::Relaxed);
        self.total_ns.fetch_add(end - start, Ordering::Relaxed);
        let head = self.head.load(Ordering::Relaxed);
        if head > 0 && self.run(head - 1).1 == start {
            self.runs[((head - 1) % RUNS as u64) as usize][1].store(end, Ordering::Relaxed);
        } else {
            let r = &self.runs[(head % RUNS as u64) as usize];
            r[0].store(start, Ordering::Relaxed);
            r[1].store(end, Ordering::Relaxed);
            self.head.store(head + 1, Ordering::Relaxed);
        }
    }

    /// Context switches so far, and the GPU nanoseconds they took.
    pub fn switches(&self) -> (u64, u64) {
        let _g = self.lock();
        (
            self.switches.load(Ordering::Relaxed),
            self.switch_ns.load(Ordering::Relaxed),
        )
    }

    /// End of the last scheduled kernel.
    pub fn busy_until(&self) -> u64 {
        let _g = self.lock();
        self.busy_until.load(Ordering::Relaxed)
    }

    /// Kernel nanoseconds executed by `now`: everything scheduled minus the part of the
    /// remembered runs that lies after `now`.
    pub fn executed_ns(&self, now: u64) -> u64 {
        let _g = self.lock();
        let total = self.total_ns.load(Ordering::Relaxed);
        let head = self.head.load(Ordering::Relaxed);
        let mut future = 0u64;
        for i in (head.saturating_sub(RUNS as u64)..head).rev() {
            let (s, e) = self.run(i);
            if e <= now {
                break;
            }
            future += e - s.max(now);
        }
        total.saturating_sub(future)
    }

    /// Busy nanoseconds within `[from, to)` (runs older than the ring count as idle).
    pub fn busy_between(&self, from: u64, to: u64) -> u64 {
        let _g = self.lock();
        let head = self.head.load(Ordering::Relaxed);
        let mut busy = 0u64;
        for i in (head.saturating_sub(RUNS as u64)..head).rev() {
            let (s, e) = self.run(i);
            if e <= from {
                break;
            }
            busy += e.min(to).saturating_sub(s.max(from));
        }
        busy
    }
}

/// Process-local timelines (used without `VGPU_SIM_STATE`).
pub static LOCAL: [DevTimeline; crate::config::MAX_DEVICES] =
    [const { DevTimeline::new() }; crate::config::MAX_DEVICES];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_and_account() {
        let t = DevTimeline::new();
        assert_eq!(t.schedule(100, 50), (100, 150));
        // Queued behind the first.
        assert_eq!(t.schedule(120, 50), (150, 200));
        // After an idle gap.
        assert_eq!(t.schedule(300, 10), (300, 310));
        assert_eq!(t.executed_ns(0), 0);
        assert_eq!(t.executed_ns(125), 25);
        assert_eq!(t.executed_ns(250), 100);
        assert_eq!(t.executed_ns(305), 105);
        assert_eq!(t.executed_ns(1000), 110);
        assert_eq!(t.busy_between(0, 1000), 110);
        assert_eq!(t.busy_between(175, 305), 30);
        assert_eq!(t.busy_until(), 310);
        // Zero-length kernels take no time.
        assert_eq!(t.schedule(400, 0), (400, 400));
        assert_eq!(t.busy_until(), 310);
    }

    #[test]
    fn a_switch_between_processes_costs_gpu_time() {
        let t = DevTimeline::new();
        assert_eq!(
            t.schedule_as(7, 30, 100, 50),
            (100, 150),
            "the first owner pays nothing"
        );
        assert_eq!(
            t.schedule_as(7, 30, 120, 50),
            (150, 200),
            "same process: back to back"
        );
        assert_eq!(
            t.schedule_as(8, 30, 120, 50),
            (230, 280),
            "another process: after a switch"
        );
        assert_eq!(
            t.schedule_as(7, 30, 1000, 10),
            (1030, 1040),
            "a switch after idle too"
        );
        assert_eq!(t.switches(), (2, 60));
        // The switch is neither kernel time nor busy time.
        assert_eq!(t.executed_ns(u64::MAX), 160);
        assert_eq!(t.busy_between(0, 2000), 160);
        // Untracked scheduling neither pays nor counts.
        assert_eq!(t.schedule(2000, 10), (2000, 2010));
        assert_eq!(t.switches(), (2, 60));
    }

    #[test]
    fn ring_wraps() {
        let t = DevTimeline::new();
        for i in 0..1000u64 {
            t.schedule(i * 10, 5);
        }
        assert_eq!(t.executed_ns(u64::MAX), 5000);
        assert_eq!(t.busy_between(9000, 10_000), 500);
    }
}
