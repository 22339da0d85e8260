//! HAMi-core's suspend and resume signals.
//!
//! HAMi-core's `shrreg_tool --suspend` sends `SIGUSR2` to every process listed in the region's
//! HAMi slots and waits until each slot's `status` reads 2; `--resume` sends `SIGUSR1` and
//! waits for 1. A HAMi-core process installs handlers that write those values (and holds its
//! memory calls while suspended). A vgpu process sits in the same slots, so it gets the same
//! signals: with the default action, `SIGUSR1` and `SIGUSR2` end the process.
//!
//! [`watch`] names the process's own slot `status` word and installs (once) a handler for each
//! signal whose action is still the default one; a handler the program installed is never
//! replaced, and one it installs later replaces ours. The handler writes 2 (`SIGUSR2`) or 1
//! (`SIGUSR1`) to the watched word, so the tool's wait ends as with HAMi-core. vgpu does not
//! hold memory calls while the slot reads 2 (docs/HAMI.md).
//!
//! The handler is async-signal-safe: an atomic load and an atomic store, into a mapping
//! guarded against truncation ([`crate::fault`]). [`forget_range`] clears the watched word
//! before its mapping goes.

use std::sync::Once;
use std::sync::atomic::{AtomicI32, AtomicPtr, Ordering};

static STATUS: AtomicPtr<AtomicI32> = AtomicPtr::new(std::ptr::null_mut());
static INSTALL: Once = Once::new();

/// HAMi's `status` of a suspended process.
pub const SUSPENDED: i32 = 2;
/// HAMi's `status` of a running one.
pub const RUNNING: i32 = 1;

/// The process's own HAMi slot `status`: the signals write it from now on. `status` must lie
/// in a mapping that calls [`forget_range`] before it is unmapped (`raw::Mapping` does).
pub fn watch(status: &AtomicI32) {
    STATUS.store(std::ptr::from_ref(status).cast_mut(), Ordering::Release);
    INSTALL.call_once(|| {
        for sig in [libc::SIGUSR1, libc::SIGUSR2] {
            install(sig);
        }
    });
}

/// The slot of `status` is given back: the signals write nowhere (if it was the watched one).
pub fn unwatch(status: &AtomicI32) {
    let _ = STATUS.compare_exchange(
        std::ptr::from_ref(status).cast_mut(),
        std::ptr::null_mut(),
        Ordering::AcqRel,
        Ordering::Acquire,
    );
}

/// `[start, start + len)` is about to be unmapped: a watched word inside it is forgotten.
pub fn forget_range(start: usize, len: usize) {
    let p = STATUS.load(Ordering::Acquire);
    let a = p as usize;
    if !p.is_null() && a >= start && a - start < len {
        let _ =
            STATUS.compare_exchange(p, std::ptr::null_mut(), Ordering::AcqRel, Ordering::Acquire);
    }
}

/// Installs the handler for `sig` where its action is the default one. A handler the program
/// installs between the read and the write is replaced (a race only a program installing one
/// during vgpu's start-up can lose).
fn install(sig: libc::c_int) {
    if crate::sys::current_action(sig).is_some_and(|old| old.sa_sigaction == libc::SIG_DFL) {
        let action = crate::sys::signal_action(on_signal as *const () as usize, libc::SA_RESTART);
        // SAFETY: `on_signal` is a static `fn(c_int)` (no SA_SIGINFO), async-signal-safe.
        unsafe { crate::sys::set_action(sig, &action) };
    }
}

extern "C" fn on_signal(sig: libc::c_int) {
    let p = STATUS.load(Ordering::Acquire);
    if p.is_null() {
        return;
    }
    let value = if sig == libc::SIGUSR2 {
        SUSPENDED
    } else {
        RUNNING
    };
    // SAFETY: a non-null `STATUS` points into a live mapping: it is cleared (`unwatch`,
    // `forget_range`) before its slot is given back or its mapping unmapped, and a truncated
    // file's pages are replaced with zeroes, never left unmapped (`crate::fault`).
    unsafe { &*p }.store(value, Ordering::Release);
}
