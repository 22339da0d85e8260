//! Time-slicing between processes (`VGPU_SIM_TIMESLICE_US` > 0), as a GPU without MPS does it.
//!
//! Each process (context) has its own FIFO queue of GPU work on each physical GPU: a *slot* of
//! [`SlicedDev`], in the shared state file (or process memory), so that every process sharing
//! the file sees every queue. The GPU runs one context at a time. When several contexts have
//! queued work it alternates between them in timeslices: a piece of work shorter than the slice
//! is never preempted (a slice that expires during it ends when it does), a longer one is
//! preempted at the slice's end and resumed at a later turn (so its wall duration includes the
//! others' time). When the running context has nothing ready, the GPU turns at once to the next
//! context (round robin) that has; each change of process costs `VGPU_SIM_SWITCH_NS` of GPU
//! time (counted on the [`DevTimeline`]).
//!
//! Because what runs when depends on work that other processes queue later, the schedule is
//! computed lazily: [`Sliced::advance`] runs it forward up to a given instant, and every call
//! that launches, queries, synchronises or reads an event advances it to `now` first. Work only
//! ever arrives at or after the instant the schedule has reached (its earliest start is clamped
//! to it), so the result does not depend on when, or by whom, the schedule is advanced.
//!
//! The owner of a slot *harvests* its completed work (start and end of each piece) into its own
//! bookkeeping; a queue entry is reused only after its owner harvested it. A launch onto a full
//! queue ([`QUEUE`] pieces) waits, as a launch on a real driver's full push buffer does.
//!
//! Everything is atomics (`repr(C)`, all-zero is an idle device), guarded by a spin lock word
//! inside [`SlicedDev`]; a value a dead or confused process left behind can make the schedule
//! wrong, never index out of bounds.
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

use crate::timeline::{DevTimeline, Guard, lock_word, now_ns};

/// Processes (contexts) per GPU in time-slicing mode (one bit each in a `u64`).
pub const SLOTS: usize = 64;
const SLOTS_U64: u64 = SLOTS as u64;
/// Pieces of work a process can have queued (and not yet harvested) on one GPU.
pub const QUEUE: usize = 512;
/// A piece of work that is a kernel.
pub const KERNEL: u64 = 1;
/// A piece of work that is a timing event's cost.
pub const EVENT: u64 = 2;

/// One piece of queued work.
#[repr(C)]
pub struct Op {
    /// GPU nanoseconds it takes in all.
    dur: AtomicU64,
    /// GPU nanoseconds still to run.
    left: AtomicU64,
    /// When it may start (the launch, plus its latency).
    earliest: AtomicU64,
    /// When it first ran (valid once `left < dur`, or once done).
    start: AtomicU64,
    /// When it completed (valid once done).
    end: AtomicU64,
    /// [`KERNEL`] or [`EVENT`].
    kind: AtomicU64,
}

/// One process's queue on one GPU. Pieces are numbered from 1 in queue order; piece `n` sits
/// at `ops[(n - 1) % QUEUE]`. `harvested <= done <= tail`.
#[repr(C)]
pub struct Slot {
    /// The owner's pid; 0: free.
    pid: AtomicU64,
    /// Pieces the owner has harvested.
    harvested: AtomicU64,
    /// Pieces completed.
    done: AtomicU64,
    /// Pieces queued.
    tail: AtomicU64,
    /// GPU nanoseconds this process's work has run (partly run pieces count partly).
    busy: AtomicU64,
    _pad: [AtomicU64; 3],
    ops: [Op; QUEUE],
}

/// One physical GPU in time-slicing mode.
#[repr(C)]
pub struct SlicedDev {
    lock: AtomicU32,
    _pad0: AtomicU32,
    /// The instant up to which the schedule has been computed.
    tau: AtomicU64,
    /// Slot index + 1 of the context running (or that ran last); 0: none yet.
    cur: AtomicU64,
    /// While a context switch is in progress: when it completes.
    switch_until: AtomicU64,
    /// When the running context's timeslice ends.
    slice_end: AtomicU64,
    /// Bit `s` set: slot `s` has queued work.
    active: AtomicU64,
    _pad1: [AtomicU64; 2],
    slots: [Slot; SLOTS],
}

/// Bytes of one [`SlicedDev`].
pub const BYTES: usize = core::mem::size_of::<SlicedDev>();
const _: () = assert!(BYTES == 64 + SLOTS * (64 + QUEUE * 48));

/// The scheduler's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SliceCfg {
    /// The timeslice, ns (> 0).
    pub slice_ns: u64,
    /// GPU time of a change of process, ns.
    pub switch_ns: u64,
}

/// Time-slicing is on: the devices (shared through the state file, or process-local) and the
/// timeslice (the state file's).
#[derive(Clone, Copy)]
pub struct Slicing {
    pub devs: &'static [SlicedDev],
    pub slice_ns: u64,
}

impl Slicing {
    /// Locks physical GPU `p` and runs its schedule forward to now (read under the lock).
    pub fn advance(&self, p: usize, switch_ns: u64, tl: &DevTimeline) -> Option<Sliced<'static>> {
        let g = self.devs.get(p)?.lock();
        let cfg = SliceCfg {
            slice_ns: self.slice_ns,
            switch_ns,
        };
        g.advance(now_ns(), cfg, tl);
        Some(g)
    }
}

fn ld(a: &AtomicU64) -> u64 {
    a.load(Relaxed)
}

fn st(a: &AtomicU64, v: u64) {
    a.store(v, Relaxed);
}

/// Whether process `pid` no longer exists.
fn dead(pid: u64) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return true;
    };
    if pid <= 0 {
        return true;
    }
    // SAFETY: kill with signal 0 only checks whether the process exists; no memory involved.
    let r = unsafe { libc::kill(pid, 0) };
    r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

impl SlicedDev {
    /// `n` idle devices in process memory (process-local state, and tests).
    pub fn leak_zeroed(n: usize) -> &'static [SlicedDev] {
        let b = Box::<[SlicedDev]>::new_zeroed_slice(n);
        // SAFETY: SlicedDev is `repr(C)` and made only of atomics, for which all-zero bytes
        // are a valid value (the idle device).
        Box::leak(unsafe { b.assume_init() })
    }

    /// Locks the device for scheduling and bookkeeping.
    pub fn lock(&self) -> Sliced<'_> {
        Sliced {
            _g: lock_word(&self.lock),
            d: self,
        }
    }
}

/// A locked [`SlicedDev`].
pub struct Sliced<'a> {
    _g: Guard<'a>,
    d: &'a SlicedDev,
}

impl Sliced<'_> {
    fn slot(&self, s: usize) -> &Slot {
        &self.d.slots[s % SLOTS]
    }

    /// The slot's next piece to run, if any.
    fn head(&self, s: usize) -> Option<&Op> {
        let sl = self.slot(s);
        let (done, tail) = (ld(&sl.done), ld(&sl.tail));
        (done < tail && tail - done <= QUEUE as u64)
            .then(|| &sl.ops[(done % QUEUE as u64) as usize])
    }

    fn ready(&self, s: usize, t: u64) -> bool {
        self.head(s).is_some_and(|op| ld(&op.earliest) <= t)
    }

    /// Slots with queued work, in round-robin order from slot `first`.
    fn active_from(&self, first: usize) -> impl Iterator<Item = usize> {
        let mut m = ld(&self.d.active).rotate_right((first % SLOTS) as u32);
        std::iter::from_fn(move || {
            (m != 0).then(|| {
                let b = m.trailing_zeros() as usize;
                m &= m - 1;
                (first + b) % SLOTS
            })
        })
    }

    /// The first slot after `after` (round robin; all slots when `None`) other than `skip`
    /// with work ready at `t`.
    fn next_ready(&self, t: u64, after: Option<usize>, skip: Option<usize>) -> Option<usize> {
        self.active_from(after.map_or(0, |a| a + 1))
            .find(|&s| Some(s) != skip && self.ready(s, t))
    }

    /// The earliest start of any slot's next piece.
    fn next_arrival(&self) -> Option<u64> {
        self.active_from(0)
            .filter_map(|s| self.head(s).map(|op| ld(&op.earliest)))
            .min()
    }

    fn cur(&self) -> Option<usize> {
        match ld(&self.d.cur) {
            c @ 1..=SLOTS_U64 => Some(c as usize - 1),
            _ => None,
        }
    }

    /// The instant up to which the schedule has been computed.
    pub fn tau(&self) -> u64 {
        ld(&self.d.tau)
    }

    /// The GPU turns to slot `n` at `t`: a switch if the previous work was another process's,
    /// then a fresh timeslice.
    fn turn_to(&self, n: usize, t: u64, cfg: SliceCfg, tl: &DevTimeline) {
        let pid = u32::try_from(ld(&self.slot(n).pid)).unwrap_or(u32::MAX);
        let cost = tl.turn_to(pid, cfg.switch_ns);
        st(&self.d.cur, n as u64 + 1);
        st(&self.d.switch_until, t.saturating_add(cost));
        st(
            &self.d.slice_end,
            t.saturating_add(cost).saturating_add(cfg.slice_ns),
        );
    }

    /// Runs the schedule forward to `to`, recording the work done on `tl`.
    pub fn advance(&self, to: u64, cfg: SliceCfg, tl: &DevTimeline) {
        let slice = cfg.slice_ns.max(1);
        let cfg = SliceCfg {
            slice_ns: slice,
            ..cfg
        };
        let mut t = self.tau();
        if to <= t {
            return;
        }
        loop {
            let su = ld(&self.d.switch_until);
            if su > t {
                if su >= to {
                    t = to;
                    break;
                }
                t = su;
            }
            let Some(c) = self.cur().filter(|&c| self.ready(c, t)) else {
                // Nothing ready in the current context: the next one that has, else idle
                // until the next arrival.
                if let Some(n) = self.next_ready(t, self.cur(), None) {
                    self.turn_to(n, t, cfg, tl);
                    continue;
                }
                match self.next_arrival() {
                    Some(e) if e > t && e < to => t = e,
                    _ => {
                        t = to;
                        break;
                    }
                }
                continue;
            };
            if t >= ld(&self.d.slice_end) {
                if let Some(n) = self.next_ready(t, Some(c), Some(c)) {
                    self.turn_to(n, t, cfg, tl);
                    continue;
                }
                // Alone: another slice.
                st(&self.d.slice_end, t.saturating_add(slice));
            }
            let sl = self.slot(c);
            let Some(op) = self.head(c) else { continue };
            let (dur, left) = (ld(&op.dur), ld(&op.left).min(ld(&op.dur)));
            if left == dur {
                st(&op.start, t);
            }
            let mut stop = t.saturating_add(left);
            let slice_end = ld(&self.d.slice_end);
            if dur >= slice && stop > slice_end {
                // Long work is preempted where the slice ends.
                stop = slice_end;
            }
            let seg = stop.min(to);
            let ran = seg - t;
            st(&op.left, left - ran);
            sl.busy.fetch_add(ran, Relaxed);
            tl.record(t, seg);
            t = seg;
            if ran == left {
                st(&op.end, t);
                if sl.done.fetch_add(1, Relaxed) + 1 >= ld(&sl.tail) {
                    self.d.active.fetch_and(!(1 << c), Relaxed);
                }
            }
            if t >= to {
                break;
            }
        }
        st(&self.d.tau, t);
    }

    /// A slot for process `pid`: its own (a previous process with the same pid: reset), else
    /// a free one, else one whose process is dead and whose work is done. `None`: all taken.
    pub fn claim(&self, pid: u32) -> Option<usize> {
        let me = u64::from(pid);
        let idle = |s: &Slot| ld(&s.done) >= ld(&s.tail);
        let s = (0..SLOTS)
            .find(|&s| ld(&self.slot(s).pid) == me)
            .or_else(|| (0..SLOTS).find(|&s| ld(&self.slot(s).pid) == 0))
            .or_else(|| (0..SLOTS).find(|&s| idle(self.slot(s)) && dead(ld(&self.slot(s).pid))))?;
        let sl = self.slot(s);
        for a in [&sl.harvested, &sl.done, &sl.tail, &sl.busy] {
            st(a, 0);
        }
        st(&sl.pid, me);
        self.d.active.fetch_and(!(1 << s), Relaxed);
        Some(s)
    }

    /// Whether slot `s` still belongs to process `pid`.
    pub fn owns(&self, s: usize, pid: u32) -> bool {
        ld(&self.slot(s).pid) == u64::from(pid)
    }

    /// Queues a piece of `kind` taking `dur` ns that may start at `earliest` (no earlier than
    /// the schedule's instant) on slot `s`. Returns its number, or `None` if the queue is full.
    pub fn enqueue(&self, s: usize, dur: u64, earliest: u64, kind: u64) -> Option<u64> {
        let sl = self.slot(s);
        let tail = ld(&sl.tail);
        if tail.saturating_sub(ld(&sl.harvested)) >= QUEUE as u64 {
            return None;
        }
        let op = &sl.ops[(tail % QUEUE as u64) as usize];
        for (a, v) in [
            (&op.dur, dur),
            (&op.left, dur),
            (&op.earliest, earliest.max(self.tau())),
            (&op.start, 0),
            (&op.end, 0),
            (&op.kind, kind),
        ] {
            st(a, v);
        }
        st(&sl.tail, tail + 1);
        self.d.active.fetch_or(1 << (s % SLOTS), Relaxed);
        Some(tail + 1)
    }

    /// Hands every completed piece of slot `s` not harvested yet to `f(kind, start, end)`, in
    /// order, and frees their entries.
    pub fn harvest(&self, s: usize, mut f: impl FnMut(u64, u64, u64)) {
        let sl = self.slot(s);
        let done = ld(&sl.done);
        let from = ld(&sl.harvested).max(done.saturating_sub(QUEUE as u64));
        for n in from..done {
            let op = &sl.ops[(n % QUEUE as u64) as usize];
            f(ld(&op.kind), ld(&op.start), ld(&op.end));
        }
        st(&sl.harvested, done);
    }

    /// Pieces of slot `s` completed so far.
    pub fn done(&self, s: usize) -> u64 {
        ld(&self.slot(s).done)
    }

    /// GPU nanoseconds slot `s`'s work has run so far.
    pub fn busy(&self, s: usize) -> u64 {
        ld(&self.slot(s).busy)
    }

    /// When piece `n` of slot `s` would complete if the GPU ran nothing but this slot's work
    /// from `now` (a lower bound; `now` if it is done).
    pub fn alone_estimate(&self, s: usize, n: u64, now: u64) -> u64 {
        let sl = self.slot(s);
        let (done, tail) = (ld(&sl.done), ld(&sl.tail));
        let mut t = now;
        for i in done..n.min(tail).min(done + QUEUE as u64) {
            let op = &sl.ops[(i % QUEUE as u64) as usize];
            t = t.max(ld(&op.earliest)).saturating_add(ld(&op.left));
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1_000;
    const MS: u64 = 1_000_000;
    const CFG: SliceCfg = SliceCfg {
        slice_ns: 2 * MS,
        switch_ns: 0,
    };

    struct Gpu {
        d: &'static SlicedDev,
        tl: DevTimeline,
        cfg: SliceCfg,
    }

    impl Gpu {
        fn new(cfg: SliceCfg) -> Gpu {
            Gpu {
                d: &SlicedDev::leak_zeroed(1)[0],
                tl: DevTimeline::new(),
                cfg,
            }
        }
        fn claim(&self, pid: u32) -> usize {
            self.d.lock().claim(pid).unwrap()
        }
        /// Queues `n` pieces of `dur` on slot `s` at `t` (advancing to `t` first, as the model
        /// does); returns the last one's number.
        fn queue(&self, s: usize, t: u64, dur: u64, n: usize) -> u64 {
            let g = self.d.lock();
            g.advance(t, self.cfg, &self.tl);
            (0..n).fold(0, |_, _| g.enqueue(s, dur, t, KERNEL).unwrap())
        }
        fn advance(&self, t: u64) {
            self.d.lock().advance(t, self.cfg, &self.tl);
        }
        /// (start, end) of every piece of slot `s` completed and not harvested yet.
        fn harvest(&self, s: usize) -> Vec<(u64, u64)> {
            let mut v = Vec::new();
            self.d.lock().harvest(s, |_, a, b| v.push((a, b)));
            v
        }
        fn busy(&self, s: usize) -> u64 {
            self.d.lock().busy(s)
        }
    }

    #[test]
    fn alone_it_runs_back_to_back() {
        let g = Gpu::new(CFG);
        let a = g.claim(10);
        g.queue(a, 1000, 3 * MS, 3);
        g.advance(1000 + 10 * MS);
        assert_eq!(
            g.harvest(a),
            vec![
                (1000, 1000 + 3 * MS),
                (1000 + 3 * MS, 1000 + 6 * MS),
                (1000 + 6 * MS, 1000 + 9 * MS)
            ]
        );
        assert_eq!(g.tl.executed_ns(u64::MAX), 9 * MS);
        assert_eq!(g.tl.switches().0, 0);
    }

    #[test]
    fn a_late_short_kernel_waits_one_slice_not_the_whole_queue() {
        let g = Gpu::new(SliceCfg {
            switch_ns: 100 * US,
            ..CFG
        });
        let (a, b) = (g.claim(10), g.claim(20));
        // A queues 100 × 1 ms at 0; B one 0.5 ms kernel at 10.3 ms.
        g.queue(a, 0, MS, 100);
        let nb = g.queue(b, 10_300 * US, 500 * US, 1);
        g.advance(200 * MS);
        let done = g.harvest(b);
        assert_eq!(done.len(), 1, "{nb}");
        // A, alone until then, is in a slice that ends at 12 ms: B starts then, after the
        // switch, not after A's 100 ms.
        let (start, end) = done[0];
        assert!(start <= 12 * MS + 100 * US, "start {start}");
        assert_eq!(end - start, 500 * US, "a short kernel is not preempted");
        // A got the rest: all its work ran, B's in between.
        assert_eq!(g.harvest(a).len(), 100);
        assert_eq!(g.busy(a), 100 * MS);
    }

    #[test]
    fn two_saturating_contexts_share_the_gpu_by_slices() {
        let g = Gpu::new(CFG);
        let (a, b) = (g.claim(10), g.claim(20));
        g.queue(a, 0, MS, 200);
        g.queue(b, 0, MS, 200);
        g.advance(100 * MS);
        let (ba, bb) = (g.busy(a), g.busy(b));
        assert_eq!(ba + bb, 100 * MS);
        assert!(ba.abs_diff(bb) <= 2 * MS, "{ba} {bb}");
        // They alternate in 2 ms turns (two 1 ms kernels each).
        let ends: Vec<u64> = g.harvest(a).iter().map(|p| p.1).collect();
        assert_eq!(&ends[..4], &[MS, 2 * MS, 5 * MS, 6 * MS]);
    }

    #[test]
    fn an_empty_queue_gives_way_at_once() {
        let g = Gpu::new(SliceCfg {
            slice_ns: 50 * MS,
            switch_ns: 0,
        });
        let (a, b) = (g.claim(10), g.claim(20));
        // A runs 0.1 ms at 0 and has nothing more; its 50 ms slice is not over at 5 ms.
        g.queue(a, 0, 100 * US, 1);
        g.queue(b, 5 * MS, MS, 1);
        g.advance(20 * MS);
        assert_eq!(g.harvest(b), vec![(5 * MS, 6 * MS)]);
        // A host-bound A (0.1 ms every 1 ms) beside a saturating B: B fills every gap.
        let g = Gpu::new(CFG);
        let (a, b) = (g.claim(10), g.claim(20));
        g.queue(b, 0, 500 * US, 400);
        for i in 0..100 {
            g.queue(a, i * MS, 100 * US, 1);
        }
        g.advance(110 * MS);
        assert_eq!(g.busy(a) + g.busy(b), 110 * MS, "the GPU never idles");
        assert_eq!(g.busy(a), 10 * MS);
    }

    #[test]
    fn a_long_kernel_is_preempted_and_its_span_includes_the_other() {
        let g = Gpu::new(SliceCfg {
            switch_ns: 50 * US,
            ..CFG
        });
        let (a, b) = (g.claim(10), g.claim(20));
        g.queue(a, 0, 20 * MS, 1);
        g.queue(b, 0, MS, 20);
        g.advance(100 * MS);
        let (start, end) = g.harvest(a)[0];
        assert_eq!(start, 0);
        // A's 20 ms ran in 2 ms slices alternating with B's 20 ms: its span holds both.
        assert!(end - start >= 38 * MS, "{}", end - start);
        assert_eq!(g.busy(a), 20 * MS);
        // B's 1 ms kernels were never preempted.
        assert!(g.harvest(b).iter().all(|&(s, e)| e - s == MS));
        let (n, ns) = g.tl.switches();
        assert!(n >= 19 && ns == n * 50 * US, "{n} {ns}");
    }

    #[test]
    fn the_schedule_does_not_depend_on_when_it_is_advanced() {
        let run = |steps: &[u64]| {
            let g = Gpu::new(SliceCfg {
                slice_ns: 2 * MS,
                switch_ns: 30 * US,
            });
            let (a, b) = (g.claim(10), g.claim(20));
            g.queue(a, 0, 7 * MS, 5);
            g.queue(b, 3 * MS, 300 * US, 10);
            for &t in steps {
                g.advance(t);
            }
            g.queue(b, 40 * MS, 5 * MS, 2);
            g.advance(200 * MS);
            (g.harvest(a), g.harvest(b), g.tl.switches())
        };
        assert_eq!(
            run(&[]),
            run(&[1, 2 * MS, 2 * MS + 7, 5 * MS, 13 * MS, 39 * MS])
        );
    }

    #[test]
    fn queues_fill_and_slots_are_claimed_once() {
        let g = Gpu::new(CFG);
        let a = g.claim(10);
        assert_eq!(g.claim(10), a, "the same pid, the same slot");
        let lk = g.d.lock();
        for _ in 0..QUEUE {
            assert!(lk.enqueue(a, MS, 0, KERNEL).is_some());
        }
        assert_eq!(lk.enqueue(a, MS, 0, KERNEL), None, "full");
        lk.advance(3 * MS + 1, CFG, &g.tl);
        // Done but not harvested: still full.
        assert_eq!(lk.enqueue(a, MS, 0, KERNEL), None);
        let mut n = 0;
        lk.harvest(a, |_, _, _| n += 1);
        assert_eq!(n, 3);
        assert!(lk.enqueue(a, MS, 0, KERNEL).is_some());
        assert_eq!(lk.alone_estimate(a, 5, 10 * MS), 10 * MS + MS - 1 + MS);
        // Every slot taken by a live process: no slot.
        let me = std::process::id();
        for s in 0..SLOTS {
            st(&lk.slot(s).pid, u64::from(me));
        }
        assert_eq!(lk.claim(1), None);
        // A dead process's idle slot is reused.
        st(&lk.slot(7).pid, u64::from(u32::MAX - 1));
        assert_eq!(lk.claim(1), Some(7));
    }
}
