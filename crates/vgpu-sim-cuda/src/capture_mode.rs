//! Stream-capture interaction modes, as `cuThreadExchangeStreamCaptureMode` documents them:
//! while a thread captures in `GLOBAL` mode, a potentially unsafe call (here: `cuCtxSynchronize`)
//! from any thread whose own mode is not `RELAXED` fails with
//! `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` and invalidates that capture, whose
//! `cuStreamEndCapture` then fails with `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`. A thread's own
//! non-relaxed capture likewise forbids it the call.
//!
//! Process-local (capture never crosses processes), unlike the device model in [`crate::state`].
use std::cell::Cell;
use std::sync::Mutex;
use std::thread::ThreadId;

use vgpu_sys::cuda::*;

use crate::state::R;

thread_local! {
    static MODE: Cell<CUstreamCaptureMode> = const { Cell::new(CU_STREAM_CAPTURE_MODE_GLOBAL) };
}

struct Capture {
    stream: u64,
    thread: ThreadId,
    mode: CUstreamCaptureMode,
    invalidated: bool,
}

static CAPTURES: Mutex<Vec<Capture>> = Mutex::new(Vec::new());

fn captures() -> std::sync::MutexGuard<'static, Vec<Capture>> {
    CAPTURES.lock().unwrap_or_else(|e| e.into_inner())
}

/// `cuThreadExchangeStreamCaptureMode`: sets this thread's mode, returns the previous one.
pub fn exchange(mode: CUstreamCaptureMode) -> R<CUstreamCaptureMode> {
    if mode > CU_STREAM_CAPTURE_MODE_RELAXED {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(MODE.with(|m| m.replace(mode)))
}

/// A capture of `stream` began on this thread in `mode`.
pub fn began(stream: u64, mode: CUstreamCaptureMode) {
    if mode == CU_STREAM_CAPTURE_MODE_RELAXED {
        return;
    }
    captures().push(Capture {
        stream,
        thread: std::thread::current().id(),
        mode,
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

/// Called at the start of a potentially unsafe call: refuses it (and invalidates the captures
/// it conflicts with) where the calling thread's mode and the running captures forbid it.
pub fn unsafe_call() -> R<()> {
    let mine = MODE.with(Cell::get);
    if mine == CU_STREAM_CAPTURE_MODE_RELAXED {
        return Ok(());
    }
    let me = std::thread::current().id();
    let mut refused = false;
    for k in captures().iter_mut() {
        let conflicts = if k.thread == me {
            true
        } else {
            mine == CU_STREAM_CAPTURE_MODE_GLOBAL && k.mode == CU_STREAM_CAPTURE_MODE_GLOBAL
        };
        if conflicts {
            k.invalidated = true;
            refused = true;
        }
    }
    if refused {
        Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
    } else {
        Ok(())
    }
}
