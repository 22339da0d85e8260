//! The only place that turns raw memory and raw file descriptors into Rust values.
//!
//! [`Shared`] is an `unsafe trait` whose contract makes a reference into a shared mapping
//! sound; [`Mapping`] is the safe type on top. [`sys`] wraps the few `libc` calls std lacks.

use std::fs::File;
use std::io;
use std::marker::PhantomData;

use memmap2::{MmapOptions, MmapRaw};

/// Types that may be viewed in a `MAP_SHARED` file mapping that other processes write.
///
/// # Safety
/// An implementor must be `#[repr(C)]` (or a primitive), have no `Drop`, accept every bit pattern
/// of its `size_of` bytes as a valid value (zeroes included), and be mutable only through atomics
/// (so that another process writing the bytes at any time is, to us, just another atomic
/// access). A type made only of `Atomic*` integers and arrays of them satisfies this.
pub unsafe trait Shared: Sync {}

// SAFETY: every type below is `#[repr(C)]`, has no `Drop`, and consists only of atomic integers
// (and arrays of them), for which every bit pattern is valid.
unsafe impl Shared for crate::layout::Layout {}
// SAFETY: as above: `#[repr(C)]`, atomics only.
unsafe impl Shared for crate::node::NodeFile {}

/// A read-write `MAP_SHARED` mapping of a file, viewed as a `T`.
pub struct Mapping<T: Shared> {
    map: MmapRaw,
    _t: PhantomData<T>,
}

impl<T: Shared> Mapping<T> {
    /// Maps the first `size_of::<T>()` bytes of `file` (which must be at least that long)
    /// read-write and shared.
    ///
    /// The file must not be truncated below `size_of::<T>()` while mapped (the kernel would send
    /// SIGBUS on access): callers check the size first, and only the file's owner could shrink
    /// it.
    pub fn new(file: &File) -> io::Result<Mapping<T>> {
        let len = file.metadata()?.len();
        if len < size_of::<T>() as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "file shorter than the layout",
            ));
        }
        let map = MmapOptions::new().len(size_of::<T>()).map_raw(file)?;
        if map.len() < size_of::<T>() || !(map.as_ptr() as usize).is_multiple_of(align_of::<T>()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "mapping too short or misaligned",
            ));
        }
        Ok(Mapping {
            map,
            _t: PhantomData,
        })
    }

    /// The mapped `T`.
    pub fn get(&self) -> &T {
        // SAFETY: `new` checked that the mapping is at least `size_of::<T>()` bytes long and
        // aligned for `T`; it stays mapped as long as `self` (the returned borrow); `T: Shared`
        // accepts any bit pattern and is only mutated through atomics, so concurrent writes by
        // other processes (or through other `&T`s) are not data races on non-atomic memory.
        unsafe { &*self.map.as_ptr().cast::<T>() }
    }
}

/// Thin wrappers of the `libc` calls used (file locks, uid).
pub mod sys {
    use std::io;
    use std::os::fd::RawFd;

    fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(rc)
        }
    }

    /// The real user id.
    pub fn getuid() -> u32 {
        // SAFETY: getuid has no preconditions and cannot fail.
        unsafe { libc::getuid() }
    }

    /// `flock(fd, op)`, retried on EINTR.
    pub fn flock(fd: RawFd, op: libc::c_int) -> io::Result<()> {
        loop {
            // SAFETY: flock only reads its integer arguments; a bad fd gives EBADF.
            match check(unsafe { libc::flock(fd, op) }) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => return r.map(drop),
            }
        }
    }

    fn lock_struct(kind: libc::c_short, offset: i64) -> libc::flock {
        // SAFETY: `struct flock` is plain integers; all zeroes is a valid value.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = kind;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        fl.l_start = offset;
        fl.l_len = 1;
        fl.l_pid = 0; // required for OFD locks
        fl
    }

    /// Takes an open-file-description write lock on the byte at `offset` without waiting.
    /// `Ok(false)`: another open file description holds a lock there.
    pub fn ofd_try_lock(fd: RawFd, offset: i64) -> io::Result<bool> {
        let fl = lock_struct(libc::F_WRLCK as libc::c_short, offset);
        // SAFETY: F_OFD_SETLK reads the `struct flock` we pass by pointer, valid for the call.
        match check(unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &fl) }) {
            Ok(_) => Ok(true),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES)) => {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Drops this open file description's lock on the byte at `offset`.
    pub fn ofd_unlock(fd: RawFd, offset: i64) -> io::Result<()> {
        let fl = lock_struct(libc::F_UNLCK as libc::c_short, offset);
        // SAFETY: as in `ofd_try_lock`.
        check(unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &fl) }).map(drop)
    }

    /// CLOCK_MONOTONIC nanoseconds: one clock for every process of the host.
    pub fn monotonic_ns() -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes the timespec on our stack.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    /// Sleeps while the (shared-mapping) word holds `expected`, at most `timeout`; spurious
    /// wake-ups are allowed.
    pub fn futex_wait_shared(
        word: &std::sync::atomic::AtomicU32,
        expected: u32,
        timeout: std::time::Duration,
    ) {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: FUTEX_WAIT (not private: the word may be in a MAP_SHARED mapping) reads only
        // the u32 at the address of a live AtomicU32 and our timespec.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAIT,
                expected,
                &ts as *const libc::timespec,
            );
        }
    }

    /// Wakes every process waiting on the word.
    pub fn futex_wake_shared(word: &std::sync::atomic::AtomicU32) {
        // SAFETY: FUTEX_WAKE on the address of a live AtomicU32; no memory is accessed.
        unsafe {
            libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
        }
    }

    /// Closes `fd` (async-signal-safe; errors are ignored, the descriptor is gone either way).
    ///
    /// # Safety
    /// `fd` must be a descriptor the caller owns and that nothing uses afterwards.
    pub unsafe fn close(fd: RawFd) {
        // SAFETY: the caller owns `fd` and never uses it again.
        unsafe { libc::close(fd) };
    }
}
