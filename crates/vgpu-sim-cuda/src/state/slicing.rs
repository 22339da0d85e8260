//! The model's side of time-slicing (`VGPU_SIM_TIMESLICE_US`, see [`crate::slicer`]): this
//! process's slot on each GPU, queuing its work there, harvesting what completed, and telling
//! when a [`Tail`] completes.
//!
//! A tail refers to this process's pieces by number; the end of each harvested piece is kept
//! until the tails that refer to it have been resolved to times (`Model::ts_tidy` does that
//! once a GPU's list grows long, before any tail is read).
use std::collections::VecDeque;

use vgpu_sys::cuda::*;

use super::{Due, LAUNCH_OUT_OF_RESOURCES, Model, R, Tail};
use crate::config::MAX_DEVICES;
use crate::slicer::{KERNEL, Sliced};
use crate::timeline::now_ns;

/// Piece ends kept per GPU before the tails that refer to them are resolved.
const ENDS_KEPT: usize = 4096;
/// How long a launch onto a full queue sleeps before it looks again, ns.
const FULL_QUEUE_SLEEP_NS: u64 = 100_000;

/// This process's time-slicing bookkeeping.
#[derive(Default)]
pub struct TsLocal {
    /// The process the slots belong to (a forked child is another).
    pid: u32,
    /// This process's slot on each physical GPU, once claimed.
    slot: [Option<usize>; MAX_DEVICES],
    /// Per GPU, the end of each harvested piece, from piece `base + 1` on.
    ends: [VecDeque<u64>; MAX_DEVICES],
    base: [u64; MAX_DEVICES],
    /// The line about running out of slots was printed.
    warned: bool,
}

impl Model {
    /// Locks GPU `p`, runs its schedule forward to now and harvests this process's completed
    /// work there. Returns the locked device and this process's slot on it, if it has one;
    /// `None` without time-slicing.
    pub(super) fn ts_sync(&mut self, p: usize) -> Option<(Sliced<'static>, Option<usize>)> {
        let sl = self.slicing?;
        self.ts_check_pid();
        let g = sl.advance(p, self.cfg.switch_ns, self.timelines.get(p)?)?;
        let mut slot = self.ts.slot.get(p).copied().flatten();
        if let Some(s) = slot
            && !g.owns(s, self.ts.pid)
        {
            // Taken over by another process (this one looked dead): its queue is gone.
            self.ts_forget(Some(p));
            self.ts.slot[p] = None;
            self.kernel_launches[p].clear();
            slot = None;
        }
        if let Some(s) = slot {
            let mut got = Vec::new();
            g.harvest(s, |kind, start, end| got.push((kind, start, end)));
            for (kind, start, end) in got {
                self.ts.ends[p].push_back(end);
                if kind == KERNEL {
                    self.log_kernel(p, start, end);
                }
            }
        }
        Some((g, slot))
    }

    /// Time-slicing: before tails are read, notices a fork and resolves the tails of GPUs
    /// whose list of piece ends has grown long.
    pub(super) fn ts_tidy(&mut self) {
        if self.slicing.is_none() {
            return;
        }
        self.ts_check_pid();
        for p in 0..MAX_DEVICES {
            if self.ts.ends[p].len() > ENDS_KEPT {
                let ends = std::mem::take(&mut self.ts.ends[p]);
                let base = self.ts.base[p];
                self.for_each_tail(|tp, t| {
                    if tp == p && t.op > base && t.op - base <= ends.len() as u64 {
                        t.at = t.at.max(ends[(t.op - base - 1) as usize]);
                        t.op = 0;
                    }
                });
                self.ts.base[p] = base + ends.len() as u64;
            }
        }
    }

    /// A forked child's slots are its parent's: it starts afresh.
    fn ts_check_pid(&mut self) {
        let pid = std::process::id();
        if pid != self.ts.pid {
            if self.ts.pid != 0 {
                self.ts_forget(None);
                for l in &mut self.kernel_launches {
                    l.clear();
                }
            }
            self.ts.pid = pid;
            self.ts.slot = [None; MAX_DEVICES];
        }
    }

    /// Drops the references to this process's pieces on GPU `only` (all GPUs: `None`): their
    /// tails count as complete now.
    fn ts_forget(&mut self, only: Option<usize>) {
        let now = now_ns();
        self.for_each_tail(|p, t| {
            if t.op != 0 && only.is_none_or(|o| o == p) {
                t.at = t.at.max(now);
                t.op = 0;
            }
        });
        for p in 0..MAX_DEVICES {
            if only.is_none_or(|o| o == p) {
                self.ts.ends[p].clear();
                self.ts.base[p] = 0;
            }
        }
    }

    /// Calls `f(physical GPU, tail)` on every tail the model keeps.
    fn for_each_tail(&mut self, mut f: impl FnMut(usize, &mut Tail)) {
        let vis = &self.cfg.visible;
        let phys = |o: usize| vis.get(o).copied().unwrap_or(usize::MAX);
        for s in self.streams.values_mut() {
            f(phys(s.ordinal), &mut s.tl.tail);
        }
        for (k, tl) in self.implicit.iter_mut() {
            let c = match *k {
                super::SKey::Legacy(c) | super::SKey::PerThread(c, _) => c,
                super::SKey::Explicit(_) => continue,
            };
            if let Some(x) = self.ctxs.get(&c) {
                f(phys(x.ordinal), &mut tl.tail);
            }
        }
        for c in self.ctxs.values_mut() {
            f(phys(c.ordinal), &mut c.retired);
        }
        for e in self.events.values_mut() {
            if let (Some(o), Some(t)) = (e.ordinal, e.tail.as_mut()) {
                f(phys(o), t);
            }
        }
    }

    /// This process's slot on GPU `p` (locked as `g`), claimed if needed.
    fn ts_slot(&mut self, g: &Sliced<'static>, p: usize) -> R<usize> {
        if let Some(s) = self.ts.slot[p] {
            return Ok(s);
        }
        let Some(s) = g.claim(self.ts.pid) else {
            if !std::mem::replace(&mut self.ts.warned, true) {
                eprintln!(
                    "vgpu-sim-cuda: VGPU_SIM_TIMESLICE_US: more than {} processes on simulated \
                     GPU {p}; launches fail with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
                    crate::slicer::SLOTS
                );
            }
            return Err(LAUNCH_OUT_OF_RESOURCES);
        };
        self.ts.slot[p] = Some(s);
        self.ts.ends[p].clear();
        self.ts.base[p] = 0;
        Ok(s)
    }

    /// Queues pieces of `durs` ns and `kind`, asked for at host instant `at`, on GPU `p`,
    /// none starting before `at + latency` or `floor`; a full queue waits for the GPU to drain
    /// it. Returns when the last one completes.
    pub(super) fn ts_enqueue(
        &mut self,
        p: usize,
        at: u64,
        latency: u64,
        floor: u64,
        durs: &[u64],
        kind: u64,
    ) -> R<Tail> {
        let mut last = Tail::at(floor);
        for &d in durs {
            loop {
                let (g, slot) = self.ts_sync(p).ok_or(CUDA_ERROR_INVALID_DEVICE)?;
                let s = match slot {
                    Some(s) => s,
                    None => self.ts_slot(&g, p)?,
                };
                // Work arrives no earlier than the schedule's instant (a wait for the lock,
                // or for queue room, is the host's).
                let at = at.max(g.tau());
                let earliest = at.saturating_add(latency).max(floor);
                if let Some(n) = g.enqueue(s, d, earliest, kind) {
                    if kind == KERNEL {
                        self.kernel_launches[p].push_back(at);
                    }
                    last.op = n;
                    break;
                }
                drop(g);
                std::thread::sleep(std::time::Duration::from_nanos(FULL_QUEUE_SLEEP_NS));
            }
        }
        Ok(last)
    }

    /// When tail `t` of GPU `p` completes: known (FIFO mode, or its work is done), or not
    /// before an estimate (what this process still has queued up to it, run alone).
    pub(super) fn due(&mut self, p: usize, t: Tail) -> Due {
        if t.op == 0 {
            return Due::At(t.at);
        }
        let Some((g, slot)) = self.ts_sync(p) else {
            return Due::At(t.at);
        };
        let base = self.ts.base.get(p).copied().unwrap_or(0);
        let ends = &self.ts.ends[p.min(MAX_DEVICES - 1)];
        if t.op <= base {
            return Due::At(t.at);
        }
        if let Some(&e) = ends.get((t.op - base - 1) as usize) {
            return Due::At(t.at.max(e));
        }
        let now = now_ns();
        let est = slot.map_or(now, |s| g.alone_estimate(s, t.op, now));
        Due::Pending(est.max(t.at))
    }

    /// Pieces of GPU `p` whose ends were resolved into tails and dropped (for tests).
    #[cfg(test)]
    pub(super) fn ts_base(&self, p: usize) -> u64 {
        self.ts.base[p]
    }

    /// GPU ns this process's work has run on GPU `p` so far (time-slicing).
    pub(super) fn ts_busy(&mut self, p: usize) -> u64 {
        match self.ts_sync(p) {
            Some((g, Some(s))) => g.busy(s),
            _ => 0,
        }
    }
}
