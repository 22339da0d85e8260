//! The C boundary: no panic ever crosses it.
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};

static REPORTED: AtomicBool = AtomicBool::new(false);

/// Runs a hook body; if it panics (a vgpu bug), reports it once on stderr and returns
/// `fallback`, which must be a real result code of the API being hooked.
#[inline]
pub fn ffi<R>(name: &'static str, fallback: R, body: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(_) => {
            if !REPORTED.swap(true, Ordering::Relaxed) {
                crate::log::error(format_args!(
                    "internal error in the {name} hook; returning an error code for this call"
                ));
            }
            fallback
        }
    }
}
