//! Streams: created, legacy and per-thread; their timelines (legacy-stream semantics),
//! synchronization and queries.
use vgpu_sys::cuda::*;

use super::{Model, R, STREAM_LEGACY, STREAM_PER_THREAD};
use crate::timeline::now_ns;

/// When queued work (a stream's, an event's, a context's) completes: at `at`, or when piece
/// `op` of this process's queue on that stream's GPU does (time-slicing mode only; 0: none),
/// whichever is later. A process's pieces on one GPU run in queue order, so the later of two
/// pieces is the greater number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tail {
    pub at: u64,
    pub op: u64,
}

impl Tail {
    /// Completes at `t`.
    pub const fn at(t: u64) -> Tail {
        Tail { at: t, op: 0 }
    }

    /// Completes when both have.
    pub fn max(self, o: Tail) -> Tail {
        Tail {
            at: self.at.max(o.at),
            op: self.op.max(o.op),
        }
    }
}

/// What a wait for a [`Tail`] has to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Due {
    /// The work completes at this instant (sleep until then).
    At(u64),
    /// Not known yet (time-slicing: it depends on what runs meanwhile): it cannot complete
    /// before this instant; look again then.
    Pending(u64),
}

/// How soon a synchronisation with a stream held on a word looks again.
const WAIT_POLL_NS: u64 = 20_000;

/// A stream's place on the timeline.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tl {
    /// When the stream's queued work completes.
    pub tail: Tail,
    /// The last work queued is a timing event, which completes then (a kernel queued behind
    /// it restarts late).
    pub after_event: Option<u64>,
    /// The graph being captured into, if capturing.
    pub capture: Option<u64>,
    /// The capture was invalidated (by a context-wide sync, or a potentially unsafe call it
    /// prohibits): its end returns no graph.
    pub capture_invalidated: bool,
    /// The capture's mode (`cuStreamBeginCapture_v2`'s).
    pub capture_mode: CUstreamCaptureMode,
    /// The thread that began the capture.
    pub capture_thread: u64,
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
        self.live(h, "stream");
        let s = self.streams.remove(&h).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if let Some(c) = self.ctxs.get_mut(&s.ctx) {
            c.retired = c.retired.max(s.tl.tail);
        }
        Ok(())
    }

    /// Device ordinal of stream `h` (null, legacy and per-thread streams: the current
    /// context's device).
    pub fn stream_ordinal(&self, ctx: Option<u64>, h: u64) -> R<usize> {
        if h == 0 || h == STREAM_LEGACY || h == STREAM_PER_THREAD {
            return self.ctx_ordinal(ctx);
        }
        self.live(h, "stream");
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
    pub fn tail(&self, k: SKey) -> Tail {
        let own = self.tl(k).tail;
        match k {
            SKey::Legacy(c) => {
                let explicit = self
                    .streams
                    .iter()
                    .filter(|(h, s)| s.ctx == c && self.blocking(SKey::Explicit(**h)))
                    .map(|(_, s)| s.tl.tail);
                let per_thread = self
                    .implicit
                    .iter()
                    .filter(|(k, _)| matches!(k, SKey::PerThread(kc, _) if *kc == c))
                    .map(|(_, t)| t.tail);
                explicit.chain(per_thread).fold(own, Tail::max)
            }
            _ if self.blocking(k) => own.max(self.tl(SKey::Legacy(self.key_ctx(k))).tail),
            _ => own,
        }
    }

    /// When everything queued on stream `h` completes. Fails on a capturing stream.
    pub fn stream_end(&self, ctx: Option<u64>, h: u64) -> R<Tail> {
        let (k, _) = self.skey(ctx, h)?;
        if self.tl(k).capture.is_some() {
            return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        }
        Ok(self.tail(k))
    }

    /// What `cuStreamSynchronize` waits for (fails on a capturing stream).
    pub fn stream_due(&mut self, ctx: Option<u64>, h: u64) -> R<Due> {
        self.ts_tidy();
        let (k, _) = self.skey(ctx, h)?;
        if self.waits.contains_key(&k) {
            // Its work waits for a word: not done before the wait is over.
            return Ok(Due::Pending(now_ns().saturating_add(WAIT_POLL_NS)));
        }
        let tail = self.stream_end(ctx, h)?;
        let o = self.stream_ordinal(ctx, h)?;
        Ok(self.due(self.phys_of(o), tail))
    }

    /// `cuStreamQuery`: `CUDA_ERROR_NOT_READY` while work is queued.
    pub fn stream_query(&mut self, ctx: Option<u64>, h: u64) -> R<()> {
        let (k, _) = self.skey(ctx, h)?;
        self.potentially_unsafe()?;
        if self.waits.contains_key(&k) {
            return Err(CUDA_ERROR_NOT_READY);
        }
        match self.stream_due(ctx, h)? {
            Due::At(t) if t <= now_ns() => Ok(()),
            _ => Err(CUDA_ERROR_NOT_READY),
        }
    }

    /// When everything queued on any stream of the current context completes.
    pub fn ctx_end(&self, ctx: Option<u64>) -> R<Tail> {
        self.ctx_ordinal(ctx)?;
        let c = ctx.unwrap_or_default();
        let explicit = self
            .streams
            .values()
            .filter(|s| s.ctx == c)
            .map(|s| s.tl.tail);
        let implicit = self
            .implicit
            .iter()
            .filter(|(k, _)| self.key_ctx(**k) == c)
            .map(|(_, t)| t.tail);
        let retired = self.ctxs.get(&c).map_or(Tail::default(), |x| x.retired);
        Ok(explicit.chain(implicit).fold(retired, Tail::max))
    }

    /// What `cuCtxSynchronize` waits for.
    pub fn ctx_due(&mut self, ctx: Option<u64>) -> R<Due> {
        if self.waits.values().any(|w| w.ctx == ctx) {
            return Ok(Due::Pending(now_ns().saturating_add(WAIT_POLL_NS)));
        }
        self.ts_tidy();
        let tail = self.ctx_end(ctx)?;
        let o = self.ctx_ordinal(ctx)?;
        Ok(self.due(self.phys_of(o), tail))
    }
}
