//! Stream capture: begin/end, capture info, and the context-wide sync that invalidates captures.
use vgpu_sys::cuda::*;

use super::{Model, R, SKey};

impl Model {
    /// `cuStreamBeginCapture*`: later work on the stream goes into a new graph.
    pub fn capture_begin(&mut self, ctx: Option<u64>, h: u64) -> R<()> {
        let (k, _) = self.skey(ctx, h)?;
        if matches!(k, SKey::Legacy(_)) {
            return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        }
        if self.tl(k).capture.is_some() {
            return Err(CUDA_ERROR_ILLEGAL_STATE);
        }
        let g = self.graph_create();
        if let Some(tl) = self.tl_mut(k) {
            tl.capture = Some(g);
        }
        Ok(())
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
        let mut refused = false;
        for s in self.streams.values_mut().filter(|s| s.ctx == c) {
            if s.tl.capture.is_some() {
                s.tl.capture_invalidated = true;
                refused = true;
            }
        }
        let keys: Vec<SKey> = self.implicit.keys().copied().collect();
        for k in keys {
            if self.key_ctx(k) == c
                && let Some(tl) = self.implicit.get_mut(&k)
                && tl.capture.is_some()
            {
                tl.capture_invalidated = true;
                refused = true;
            }
        }
        if refused {
            Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
        } else {
            Ok(())
        }
    }

    /// The graph stream `h` captures into, if any.
    pub fn capture_graph(&self, ctx: Option<u64>, h: u64) -> R<Option<u64>> {
        let (k, _) = self.skey(ctx, h)?;
        Ok(self.tl(k).capture)
    }
}
