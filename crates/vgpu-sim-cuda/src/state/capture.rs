//! Stream capture: begin/end, capture info, the context-wide sync that invalidates captures,
//! and the potentially unsafe calls a capture's mode prohibits.
use vgpu_sys::cuda::*;

use super::{Model, R, SKey, Tl};

impl Model {
    /// `cuStreamBeginCapture*`: later work on the stream goes into a new graph, captured by the
    /// calling thread in `mode`.
    pub fn capture_begin(&mut self, ctx: Option<u64>, h: u64, mode: CUstreamCaptureMode) -> R<()> {
        let (k, _) = self.skey(ctx, h)?;
        if matches!(k, SKey::Legacy(_)) {
            return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        }
        if self.tl(k).capture.is_some() {
            return Err(CUDA_ERROR_ILLEGAL_STATE);
        }
        let g = self.graph_create();
        let thread = self.thread;
        if let Some(tl) = self.tl_mut(k) {
            tl.capture = Some(g);
            tl.capture_mode = mode;
            tl.capture_thread = thread;
        }
        Ok(())
    }

    /// `cuThreadExchangeStreamCaptureMode`: sets the calling thread's capture interaction mode
    /// and returns the one it had (`GLOBAL` until set).
    pub fn exchange_capture_mode(&mut self, mode: CUstreamCaptureMode) -> R<CUstreamCaptureMode> {
        if mode > CU_STREAM_CAPTURE_MODE_RELAXED {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        Ok(self
            .capture_modes
            .insert(self.thread, mode)
            .unwrap_or(CU_STREAM_CAPTURE_MODE_GLOBAL))
    }

    /// A potentially unsafe call (`cuEventQuery`, `cuEventSynchronize`, `cuStreamQuery`,
    /// `cuStreamSynchronize`) by the calling thread, as the driver rules it: a thread in
    /// `RELAXED` mode may make it; otherwise its own capture in progress (not begun `RELAXED`)
    /// prohibits it, and so, for a thread in `GLOBAL` mode (the default), does another thread's
    /// capture begun `GLOBAL`. A prohibited call fails with
    /// `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` and invalidates the captures that prohibit it (a
    /// watchdog thread's `cudaEventQuery` invalidated PyTorch's captures: pytorch#104487).
    pub fn potentially_unsafe(&mut self) -> R<()> {
        let me = self.thread;
        let mode = self
            .capture_modes
            .get(&me)
            .copied()
            .unwrap_or(CU_STREAM_CAPTURE_MODE_GLOBAL);
        if mode == CU_STREAM_CAPTURE_MODE_RELAXED {
            return Ok(());
        }
        // (`invalidate_captures` offers only timelines with a capture in progress.)
        let prohibits = |tl: &Tl| {
            if tl.capture_thread == me {
                tl.capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED
            } else {
                mode == CU_STREAM_CAPTURE_MODE_GLOBAL
                    && tl.capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL
            }
        };
        self.invalidate_captures(|_, tl| prohibits(tl))
    }

    /// Invalidates every capture in progress that `hit` picks (by its stream's context and
    /// timeline; `hit` sees only timelines that capture): `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`
    /// if there was one.
    fn invalidate_captures(&mut self, hit: impl Fn(u64, &Tl) -> bool) -> R<()> {
        let implicit: Vec<(SKey, u64)> = self
            .implicit
            .keys()
            .map(|&k| (k, self.key_ctx(k)))
            .collect();
        let mut refused = false;
        let mut mark = |c: u64, tl: &mut Tl| {
            if tl.capture.is_some() && hit(c, tl) {
                tl.capture_invalidated = true;
                refused = true;
            }
        };
        for s in self.streams.values_mut() {
            mark(s.ctx, &mut s.tl);
        }
        for (k, c) in implicit {
            if let Some(tl) = self.implicit.get_mut(&k) {
                mark(c, tl);
            }
        }
        if refused {
            Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
        } else {
            Ok(())
        }
    }

    /// `cuStreamEndCapture*`: the captured graph, or `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`
    /// (and no graph) if a context-wide sync invalidated the capture.
    pub fn capture_end(&mut self, ctx: Option<u64>, h: u64) -> R<u64> {
        let (k, _) = self.skey(ctx, h)?;
        let tl = self.tl_mut(k).ok_or(CUDA_ERROR_ILLEGAL_STATE)?;
        let g = tl.capture.take().ok_or(CUDA_ERROR_ILLEGAL_STATE)?;
        if std::mem::take(&mut tl.capture_invalidated) {
            self.graph_destroy(g)?;
            return Err(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        }
        Ok(g)
    }

    /// The start of `cuCtxSynchronize`. It waits for every stream of the context, and a
    /// capturing stream cannot be waited for: with a capture in progress in the context, the
    /// sync fails and invalidates every such capture. The calling thread's capture mode does
    /// not change that; measured on the H200 (docs/GPU-RESULTS.md run 7), a sync from a
    /// RELAXED-mode thread still invalidated PyTorch's GLOBAL-mode captures.
    pub fn ctx_sync_begin(&mut self, ctx: Option<u64>) -> R<()> {
        self.ctx_ordinal(ctx)?;
        let c = ctx.unwrap_or_default();
        self.invalidate_captures(|sc, _| sc == c)
    }

    /// The graph stream `h` captures into, if any.
    pub fn capture_graph(&self, ctx: Option<u64>, h: u64) -> R<Option<u64>> {
        let (k, _) = self.skey(ctx, h)?;
        Ok(self.tl(k).capture)
    }
}
