//! Stream capture begin and end: kept track of while a compute gate exists, because the
//! controller's drain (`cuCtxSynchronize`) invalidates a capture in progress on the real driver,
//! whatever the draining thread's capture mode (measured on the H200, docs/GPU-RESULTS.md run 7).
//! [`crate::compute`] makes drains and captures exclude each other. Under a memory limit the
//! count tells the stream-ordered allocations whether to ask if their stream captures. Without
//! either these hooks are a load and a forward.
use crate::compute;
use crate::real::ty;
use crate::runtime::runtime;
use crate::symbols::Call;
use vgpu_sys::cuda::*;

/// Whether captures must be counted: whenever vgpu enforces anything (a compute gate: drains
/// must not fall in one; a memory limit: a captured stream-ordered allocation is charged at the
/// graph's launch, not at capture, `hooks::pools`). Fixed for the process, so that a capture
/// counted at its beginning is uncounted at its end even if a limit changed in between.
#[inline]
fn tracked() -> bool {
    runtime().is_some()
}

/// Runs the real begin-capture `call` between the bookkeeping: waits for a drain in progress,
/// counts the capture, and uncounts it if the driver refused it.
fn begin(call: impl FnOnce() -> CUresult) -> CUresult {
    if !tracked() {
        return call();
    }
    compute::capture_begin();
    let r = call();
    if r != CUDA_SUCCESS {
        compute::capture_end();
    }
    r
}

/// Runs the real end-capture `call` and uncounts the capture if it ended (done, or ended
/// invalidated or unjoined: the driver returns no graph but the sequence is over).
fn end(call: impl FnOnce() -> CUresult) -> CUresult {
    let counted = tracked();
    let r = call();
    if counted
        && matches!(
            r,
            CUDA_SUCCESS
                | CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
                | CUDA_ERROR_STREAM_CAPTURE_UNJOINED
        )
    {
        compute::capture_end();
    }
    r
}

/// # Safety
/// C API contract of `cuStreamBeginCapture` / `_ptsz`.
pub unsafe fn begin_capture(call: Call<ty::cuStreamBeginCapture>, stream: CUstream) -> CUresult {
    begin(|| crate::forward!(call(stream)))
}

/// # Safety
/// C API contract of `cuStreamBeginCapture_v2` / `_v2_ptsz`.
pub unsafe fn begin_capture_v2(
    call: Call<ty::cuStreamBeginCapture_v2>,
    stream: CUstream,
    mode: CUstreamCaptureMode,
) -> CUresult {
    begin(|| crate::forward!(call(stream, mode)))
}

/// # Safety
/// C API contract of `cuStreamBeginCaptureToGraph` / `_ptsz`.
pub unsafe fn begin_capture_to_graph(
    call: Call<ty::cuStreamBeginCaptureToGraph>,
    stream: CUstream,
    graph: CUgraph,
    deps: *const CUgraphNode,
    edges: *const CUgraphEdgeData,
    n: usize,
    mode: CUstreamCaptureMode,
) -> CUresult {
    begin(|| crate::forward!(call(stream, graph, deps, edges, n, mode)))
}

/// # Safety
/// C API contract of `cuStreamEndCapture` / `_ptsz`.
pub unsafe fn end_capture(
    call: Call<ty::cuStreamEndCapture>,
    stream: CUstream,
    graph: *mut CUgraph,
) -> CUresult {
    end(|| crate::forward!(call(stream, graph)))
}
