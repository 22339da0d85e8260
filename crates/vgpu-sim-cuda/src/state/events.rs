//! Events: record, query, synchronize, elapsed time, and stream waits on them.
use vgpu_sys::cuda::*;

use super::{Due, Model, R, Tail};
use crate::slicer::EVENT;
use crate::timeline::now_ns;

/// An event: completes when `tail` does (never recorded: `None`, complete).
#[derive(Clone, Copy, Debug)]
pub struct Event {
    /// The context it was created in (destroyed with it).
    pub ctx: Option<u64>,
    pub ordinal: Option<usize>,
    pub flags: u32,
    pub tail: Option<Tail>,
    /// Recorded on a stream that waits for a word (`waits`): not reached until the wait ends.
    pub deferred: bool,
}

impl Model {
    /// `cuEventCreate`.
    pub fn event_create(&mut self, ctx: Option<u64>, flags: u32) -> R<u64> {
        let o = self.ctx_ordinal(ctx)?;
        let h = self.handle();
        self.events.insert(
            h,
            Event {
                ctx,
                ordinal: Some(o),
                flags,
                tail: None,
                deferred: false,
            },
        );
        Ok(h)
    }

    /// `cuEventDestroy*`.
    pub fn event_destroy(&mut self, h: u64) -> R<()> {
        self.live(h, "event");
        self.events
            .remove(&h)
            .map(|_| ())
            .ok_or(CUDA_ERROR_INVALID_HANDLE)
    }

    /// `cuEventRecord*`: the event completes when the stream's queued work does (now if
    /// idle); a timing event then takes `VGPU_SIM_EVENT_NS` of GPU time in the stream's order
    /// (the device's, like a kernel's) and completes after it. On a capturing stream: nothing
    /// (event record nodes are not modelled).
    pub fn event_record(&mut self, ctx: Option<u64>, h: u64, stream: u64) -> R<()> {
        self.live(h, "event");
        let (k, o) = self.skey(ctx, stream)?;
        let e = *self.events.get(&h).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if self.tl(k).capture.is_some() {
            return Ok(());
        }
        if self.defer(k, super::waits::Deferred::Event(h)) {
            if let Some(e) = self.events.get_mut(&h) {
                e.ordinal = Some(o);
                e.deferred = true;
            }
            return Ok(());
        }
        let timing = e.flags & CU_EVENT_DISABLE_TIMING == 0;
        if timing
            && self.cfg.event_fails_after_ms.is_some_and(|ms| {
                now_ns().saturating_sub(self.born_ns) >= ms.saturating_mul(1_000_000)
            })
        {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        let tail = if timing && self.cfg.event_ns > 0 {
            self.run_work(k, o, self.op_now(), 0, &[self.cfg.event_ns], EVENT)?
        } else {
            Tail::at(self.op_now()).max(self.tail(k))
        };
        if let Some(e) = self.events.get_mut(&h) {
            e.ordinal = Some(o);
            e.tail = Some(tail);
            e.deferred = false;
        }
        if timing && let Some(tl) = self.tl_mut(k) {
            tl.after_event = Some(tail.at);
        }
        Ok(())
    }

    /// What waiting for event `h` takes (never recorded: nothing).
    pub fn event_due(&mut self, h: u64) -> R<Due> {
        self.live(h, "event");
        self.ts_tidy();
        let e = *self.events.get(&h).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if e.deferred {
            return Ok(Due::Pending(
                crate::timeline::now_ns().saturating_add(20_000),
            ));
        }
        Ok(match (e.tail, e.ordinal) {
            (Some(t), Some(o)) => self.due(self.phys_of(o), t),
            _ => Due::At(0),
        })
    }

    /// When event `h` completes, if that is known now.
    fn event_done_at(&mut self, h: u64) -> R<Option<u64>> {
        Ok(match self.event_due(h)? {
            Due::At(t) => Some(t),
            Due::Pending(_) => None,
        })
    }

    /// `cuEventQuery`: `CUDA_ERROR_NOT_READY` until the event's time.
    pub fn event_query(&mut self, h: u64) -> R<()> {
        self.live(h, "event");
        self.potentially_unsafe()?;
        match self.event_done_at(h)? {
            Some(t) if t <= now_ns() => Ok(()),
            _ => Err(CUDA_ERROR_NOT_READY),
        }
    }

    /// `cuEventElapsedTime`: milliseconds from `start` to `end`.
    pub fn event_elapsed(&mut self, start: u64, end: u64) -> R<f32> {
        self.live(start, "event");
        self.live(end, "event");
        let a = *self.events.get(&start).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        let b = *self.events.get(&end).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if (a.flags | b.flags) & CU_EVENT_DISABLE_TIMING != 0
            || a.tail.is_none()
            || b.tail.is_none()
        {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        }
        let (Some(ta), Some(tb)) = (self.event_done_at(start)?, self.event_done_at(end)?) else {
            return Err(CUDA_ERROR_NOT_READY);
        };
        if now_ns() < ta.max(tb) {
            return Err(CUDA_ERROR_NOT_READY);
        }
        Ok(((tb as f64 - ta as f64) / 1e6) as f32)
    }

    /// `cuEventSynchronize` (after waiting for the event): like a stream synchronize of the
    /// event's device.
    pub fn event_sync(&mut self, h: u64) -> R<()> {
        self.live(h, "event");
        let e = *self.events.get(&h).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if let Some(o) = e.ordinal {
            self.device_sync(o);
        }
        Ok(())
    }

    /// Whether `h` is a live event.
    pub fn event_valid(&self, h: u64) -> bool {
        self.events.contains_key(&h)
    }

    /// `cuStreamWaitEvent`: later work on the stream starts after the event completes. An
    /// event of another GPU whose completion is not known yet (time-slicing) counts as
    /// completing when it would if that GPU ran nothing else.
    pub fn stream_wait_event(&mut self, ctx: Option<u64>, stream: u64, ev: u64) -> R<()> {
        let (k, o) = self.skey(ctx, stream)?;
        self.ts_tidy();
        let e = *self.events.get(&ev).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if self.tl(k).capture.is_some() {
            return Ok(());
        }
        let (Some(t), Some(eo)) = (e.tail, e.ordinal) else {
            return Ok(());
        };
        let t = if self.phys_of(eo) == self.phys_of(o) {
            t
        } else {
            match self.due(self.phys_of(eo), t) {
                Due::At(x) | Due::Pending(x) => Tail::at(x),
            }
        };
        if let Some(tl) = self.tl_mut(k) {
            tl.tail = tl.tail.max(t);
        }
        Ok(())
    }
}
