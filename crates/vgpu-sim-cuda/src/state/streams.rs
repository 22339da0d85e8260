//! Streams: created, legacy and per-thread; their timelines (legacy-stream semantics),
//! synchronization and queries.
use vgpu_sys::cuda::*;

use super::{Model, R, STREAM_LEGACY, STREAM_PER_THREAD};
use crate::timeline::now_ns;

/// A stream's place on the timeline.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tl {
    /// When the stream's last queued work completes.
    pub last_end: u64,
    /// The graph being captured into, if capturing.
    pub capture: Option<u64>,
    /// The capture was invalidated (by a context-wide sync): its end returns no graph.
    pub capture_invalidated: bool,
}

/// A stream.
#[derive(Clone, Debug)]
pub struct Stream {
    pub ctx: u64,
    pub ordinal: usize,
    pub flags: u32,
    pub priority: i32,
    pub tl: Tl,
}

/// Which stream an operation targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SKey {
    /// A created stream.
    Explicit(u64),
    /// The legacy NULL stream of a context.
    Legacy(u64),
    /// The per-thread default stream of (context, thread).
    PerThread(u64, u64),
}

impl Model {
    /// `cuStreamCreate*`: a stream of the current context.
    pub fn stream_create(&mut self, ctx: Option<u64>, flags: u32, priority: i32) -> R<u64> {
        let o = self.ctx_ordinal(ctx)?;
        let h = self.handle();
        self.streams.insert(
            h,
            Stream {
                ctx: ctx.unwrap_or_default(),
                ordinal: o,
                flags,
                priority,
                tl: Tl::default(),
            },
        );
        Ok(h)
    }

    /// `cuStreamDestroy*`.
    pub fn stream_destroy(&mut self, h: u64) -> R<()> {
        let s = self.streams.remove(&h).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if let Some(c) = self.ctxs.get_mut(&s.ctx) {
            c.retired = c.retired.max(s.tl.last_end);
        }
        Ok(())
    }

    /// Device ordinal of stream `h` (null, legacy and per-thread streams: the current
    /// context's device).
    pub fn stream_ordinal(&self, ctx: Option<u64>, h: u64) -> R<usize> {
        if h == 0 || h == STREAM_LEGACY || h == STREAM_PER_THREAD {
            return self.ctx_ordinal(ctx);
        }
        let s = self.streams.get(&h).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if !self.ctx_valid(s.ctx) {
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        }
        Ok(s.ordinal)
    }

    /// `cuStreamSynchronize*`: completes the stream; pools of its device release memory
    /// above their release threshold.
    pub fn stream_sync(&mut self, ctx: Option<u64>, h: u64) -> R<()> {
        let o = self.stream_ordinal(ctx, h)?;
        self.device_sync(o);
        Ok(())
    }

    /// `cuCtxSynchronize`.
    pub fn ctx_sync(&mut self, ctx: Option<u64>) -> R<()> {
        let o = self.ctx_ordinal(ctx)?;
        self.device_sync(o);
        Ok(())
    }

    /// Every pool of ordinal `o` shrinks to `max(used, release_threshold)`.
    pub fn device_sync(&mut self, o: usize) {
        let pools: Vec<(u64, u64)> = self
            .pools
            .iter()
            .filter(|(_, p)| p.ordinal == o)
            .map(|(&h, p)| (h, p.release_threshold))
            .collect();
        for (h, threshold) in pools {
            self.pool_shrink(h, threshold);
        }
    }

    /// Resolves stream handle `h` (0 and `CU_STREAM_LEGACY`: the context's legacy stream;
    /// `CU_STREAM_PER_THREAD`: the calling thread's) to its key and device ordinal.
    pub fn skey(&self, ctx: Option<u64>, h: u64) -> R<(SKey, usize)> {
        match h {
            0 | STREAM_LEGACY => Ok((
                SKey::Legacy(ctx.unwrap_or_default()),
                self.ctx_ordinal(ctx)?,
            )),
            STREAM_PER_THREAD => Ok((
                SKey::PerThread(ctx.unwrap_or_default(), self.thread),
                self.ctx_ordinal(ctx)?,
            )),
            _ => Ok((SKey::Explicit(h), self.stream_ordinal(ctx, h)?)),
        }
    }

    /// The stream's own timeline state.
    pub fn tl(&self, k: SKey) -> Tl {
        match k {
            SKey::Explicit(h) => self.streams.get(&h).map(|s| s.tl),
            _ => self.implicit.get(&k).copied(),
        }
        .unwrap_or_default()
    }

    pub(super) fn tl_mut(&mut self, k: SKey) -> Option<&mut Tl> {
        match k {
            SKey::Explicit(h) => self.streams.get_mut(&h).map(|s| &mut s.tl),
            _ => Some(self.implicit.entry(k).or_default()),
        }
    }

    /// Context of a stream key.
    pub(super) fn key_ctx(&self, k: SKey) -> u64 {
        match k {
            SKey::Explicit(h) => self.streams.get(&h).map_or(0, |s| s.ctx),
            SKey::Legacy(c) | SKey::PerThread(c, _) => c,
        }
    }

    /// Whether work on `k` synchronizes with the legacy stream (everything but the legacy
    /// stream itself and `CU_STREAM_NON_BLOCKING` streams).
    fn blocking(&self, k: SKey) -> bool {
        match k {
            SKey::Explicit(h) => self
                .streams
                .get(&h)
                .is_some_and(|s| s.flags & CU_STREAM_NON_BLOCKING == 0),
            SKey::PerThread(..) => true,
            SKey::Legacy(_) => false,
        }
    }

    /// When work queued on `k` now could start, with legacy-stream semantics: the legacy
    /// stream waits for every blocking stream of its context, a blocking stream for the
    /// legacy stream.
    pub fn tail(&self, k: SKey) -> u64 {
        let own = self.tl(k).last_end;
        match k {
            SKey::Legacy(c) => {
                let explicit = self
                    .streams
                    .iter()
                    .filter(|(h, s)| s.ctx == c && self.blocking(SKey::Explicit(**h)))
                    .map(|(_, s)| s.tl.last_end);
                let per_thread = self
                    .implicit
                    .iter()
                    .filter(|(k, _)| matches!(k, SKey::PerThread(kc, _) if *kc == c))
                    .map(|(_, t)| t.last_end);
                explicit.chain(per_thread).fold(own, u64::max)
            }
            _ if self.blocking(k) => own.max(self.tl(SKey::Legacy(self.key_ctx(k))).last_end),
            _ => own,
        }
    }

    /// When everything queued on stream `h` completes (for `cuStreamSynchronize`). Fails on
    /// a capturing stream.
    pub fn stream_end(&self, ctx: Option<u64>, h: u64) -> R<u64> {
        let (k, _) = self.skey(ctx, h)?;
        if self.tl(k).capture.is_some() {
            return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        }
        Ok(self.tail(k))
    }

    /// `cuStreamQuery`: `CUDA_ERROR_NOT_READY` while work is queued.
    pub fn stream_query(&self, ctx: Option<u64>, h: u64) -> R<()> {
        let (k, _) = self.skey(ctx, h)?;
        if self.tl(k).capture.is_some() {
            return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        }
        if now_ns() < self.tail(k) {
            return Err(CUDA_ERROR_NOT_READY);
        }
        Ok(())
    }

    /// When everything queued on any stream of the current context completes.
    pub fn ctx_end(&self, ctx: Option<u64>) -> R<u64> {
        self.ctx_ordinal(ctx)?;
        let c = ctx.unwrap_or_default();
        let explicit = self
            .streams
            .values()
            .filter(|s| s.ctx == c)
            .map(|s| s.tl.last_end);
        let implicit = self
            .implicit
            .iter()
            .filter(|(k, _)| self.key_ctx(**k) == c)
            .map(|(_, t)| t.last_end);
        let retired = self.ctxs.get(&c).map_or(0, |x| x.retired);
        Ok(explicit.chain(implicit).fold(retired, u64::max))
    }
}
