//! Process-local futex wait/wake on an `AtomicU32`: how a blocked launch sleeps until its
//! device's window opens, without spinning and without a lock.
use core::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `word` holds `expected`, at most `timeout`. Spurious wake-ups are allowed:
/// callers re-check their condition in a loop.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(timeout.subsec_nanos()),
    };
    // SAFETY: FUTEX_WAIT_PRIVATE reads the u32 at the address of a live AtomicU32 and the
    // timespec on our stack; the kernel compares and sleeps, touching nothing else.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

/// Wakes every thread waiting on `word`.
pub fn wake_all(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE_PRIVATE on the address of a live AtomicU32; no memory is accessed.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        );
    }
}

/// Monotonic nanoseconds (vDSO `clock_gettime`, no system call).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec on our stack.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    // CLOCK_MONOTONIC is never negative.
    let (s, ns) = (ts.tv_sec.unsigned_abs(), ts.tv_nsec.unsigned_abs());
    s * 1_000_000_000 + ns
}
