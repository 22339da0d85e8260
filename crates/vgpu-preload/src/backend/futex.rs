//! Process-local futex wait/wake on an `AtomicU32`: how a blocked launch sleeps until its
//! device's window opens, without spinning and without a lock.
use core::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `word` holds `expected`, at most `timeout`. Spurious wake-ups are allowed:
/// callers re-check their condition in a loop.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
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
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
