//! Events: record, query, synchronize, elapsed time, and stream waits on them.
use vgpu_sys::cuda::*;

use super::{Model, R};
use crate::timeline::now_ns;

/// An event: completes at `time` (never recorded: `None`, complete).
#[derive(Clone, Copy, Debug)]
pub struct Event {
    pub ordinal: Option<usize>,
    pub flags: u32,
    pub time: Option<u64>,
}

impl Model {
    /// `cuEventCreate`.
    pub fn event_create(&mut self, ctx: Option<u64>, flags: u32) -> R<u64> {
        let o = self.ctx_ordinal(ctx)?;
        let h = self.handle();
        self.events.insert(
            h,
            Event {
                ordinal: Some(o),
                flags,
                time: None,
            },
        );
        Ok(h)
    }

    /// `cuEventDestroy*`.
    pub fn event_destroy(&mut self, h: u64) -> R<()> {
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
        let (k, o) = self.skey(ctx, stream)?;
        if !self.events.contains_key(&h) {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        }
        if self.tl(k).capture.is_some() {
            return Ok(());
        }
        let timing = self.events[&h].flags & CU_EVENT_DISABLE_TIMING == 0;
        let t = if timing && self.cfg.event_ns > 0 {
            self.run_work(k, o, now_ns(), &[self.cfg.event_ns])
        } else {
            now_ns().max(self.tail(k))
        };
        if let Some(e) = self.events.get_mut(&h) {
            e.ordinal = Some(o);
            e.time = Some(t);
        }
        Ok(())
    }

    /// When event `h` completes (`None`: never recorded).
    pub fn event_time(&self, h: u64) -> R<Option<u64>> {
        Ok(self.events.get(&h).ok_or(CUDA_ERROR_INVALID_HANDLE)?.time)
    }

    /// `cuEventQuery`: `CUDA_ERROR_NOT_READY` until the event's time.
    pub fn event_query(&self, h: u64) -> R<()> {
        match self.event_time(h)? {
            Some(t) if now_ns() < t => Err(CUDA_ERROR_NOT_READY),
            _ => Ok(()),
        }
    }

    /// `cuEventElapsedTime`: milliseconds from `start` to `end`.
    pub fn event_elapsed(&self, start: u64, end: u64) -> R<f32> {
        let a = *self.events.get(&start).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        let b = *self.events.get(&end).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if (a.flags | b.flags) & CU_EVENT_DISABLE_TIMING != 0 {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        }
        let (Some(ta), Some(tb)) = (a.time, b.time) else {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        };
        if now_ns() < ta.max(tb) {
            return Err(CUDA_ERROR_NOT_READY);
        }
        Ok(((tb as f64 - ta as f64) / 1e6) as f32)
    }

    /// `cuEventSynchronize` (after waiting for the event's time): like a stream synchronize
    /// of the event's device.
    pub fn event_sync(&mut self, h: u64) -> R<()> {
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

    /// `cuStreamWaitEvent`: later work on the stream starts after the event completes.
    pub fn stream_wait_event(&mut self, ctx: Option<u64>, stream: u64, ev: u64) -> R<()> {
        let (k, _) = self.skey(ctx, stream)?;
        let t = self.event_time(ev)?;
        if self.tl(k).capture.is_some() {
            return Ok(());
        }
        if let (Some(t), Some(tl)) = (t, self.tl_mut(k)) {
            tl.last_end = tl.last_end.max(t);
        }
        Ok(())
    }
}
