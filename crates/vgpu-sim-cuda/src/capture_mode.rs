//! Stream captures and the calls that conflict with them. `cuCtxSynchronize` waits for every
//! stream of the context, a capturing one included, which cannot be waited for: it fails with
//! `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` and invalidates every capture in progress, whose
//! `cuStreamEndCapture` then fails with `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`. The calling
//! thread's capture mode (`cuThreadExchangeStreamCaptureMode`) does not help: measured on the
//! H200 (docs/GPU-RESULTS.md run 7), a drain from a thread in RELAXED mode still invalidated
//! PyTorch's GLOBAL-mode captures.
//!
//! Process-local (capture never crosses processes), unlike the device model in [`crate::state`].
use std::cell::Cell;
use std::sync::Mutex;

use vgpu_sys::cuda::*;

use crate::state::R;

thread_local! {
    static MODE: Cell<CUstreamCaptureMode> = const { Cell::new(CU_STREAM_CAPTURE_MODE_GLOBAL) };
}

struct Capture {
    stream: u64,
    invalidated: bool,
}

static CAPTURES: Mutex<Vec<Capture>> = Mutex::new(Vec::new());

fn captures() -> std::sync::MutexGuard<'static, Vec<Capture>> {
    CAPTURES.lock().unwrap_or_else(|e| e.into_inner())
}

/// `cuThreadExchangeStreamCaptureMode`: sets this thread's mode, returns the previous one. (The
/// mode decides which *potentially* unsafe calls are refused; none of the calls simulated here
/// is one, so it is kept, not consulted.)
pub fn exchange(mode: CUstreamCaptureMode) -> R<CUstreamCaptureMode> {
    if mode > CU_STREAM_CAPTURE_MODE_RELAXED {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(MODE.with(|m| m.replace(mode)))
}

/// A capture of `stream` began on this thread.
pub fn began(stream: u64) {
    captures().push(Capture {
        stream,
        invalidated: false,
    });
}

/// The capture of `stream` ended: whether it had been invalidated.
pub fn ended(stream: u64) -> bool {
    let mut c = captures();
    match c.iter().position(|k| k.stream == stream) {
        Some(i) => c.swap_remove(i).invalidated,
        None => false,
    }
}

/// Called at the start of a context-wide synchronisation: refuses it, and invalidates every
/// capture in progress, if there is one.
pub fn context_sync() -> R<()> {
    let mut c = captures();
    if c.is_empty() {
        return Ok(());
    }
    for k in c.iter_mut() {
        k.invalidated = true;
    }
    Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
}
