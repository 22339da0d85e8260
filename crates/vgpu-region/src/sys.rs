//! The few system calls vgpu makes that std lacks: file locks, the monotonic and wall clocks,
//! futexes (process-private and shared), descriptor identity, file allocation, the uid, signal
//! actions.
//!
//! One module for the whole project: the preload's compute limiter uses the same clock and
//! futex as the region and the node token. Each function is safe to call; the unsafe code is
//! confined here, every block with its `SAFETY` argument.
//!
//! Hot-path cost: [`monotonic_ns`] and [`realtime_secs`] are vDSO calls (no system call);
//! everything else is a system call.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

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

fn lock_struct(kind: libc::c_int, offset: i64) -> libc::flock {
    // SAFETY: `struct flock` is plain integers; all zeroes is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    // F_WRLCK/F_UNLCK and SEEK_SET are small constants (0..=2): they fit a `c_short`.
    #[allow(clippy::cast_possible_truncation)]
    {
        fl.l_type = kind as libc::c_short;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
    }
    fl.l_start = offset;
    fl.l_len = 1;
    fl.l_pid = 0; // required for OFD locks
    fl
}

/// Takes an open-file-description write lock on the byte at `offset` without waiting.
/// `Ok(false)`: another open file description holds a lock there.
pub fn ofd_try_lock(fd: RawFd, offset: i64) -> io::Result<bool> {
    let fl = lock_struct(libc::F_WRLCK, offset);
    // SAFETY: F_OFD_SETLK reads the `struct flock` we pass by pointer, valid for the call.
    match check(unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &fl) }) {
        Ok(_) => Ok(true),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Takes an open-file-description write lock on the byte at `offset`, waiting for as long as
/// another open file description holds it (`F_OFD_SETLKW`, retried on EINTR). A holder that
/// dies or closes its description lets the wait end: no process can keep it by dying. For a
/// thread that has nothing else to do until it holds the lock (no CPU while it waits).
pub fn ofd_lock_wait(fd: RawFd, offset: i64) -> io::Result<()> {
    let fl = lock_struct(libc::F_WRLCK, offset);
    loop {
        // SAFETY: F_OFD_SETLKW reads the `struct flock` we pass by pointer, valid for the call.
        match check(unsafe { libc::fcntl(fd, libc::F_OFD_SETLKW, &fl) }) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r.map(drop),
        }
    }
}

/// Whether another open file description holds a lock on the byte at `offset`
/// (`F_OFD_GETLK`: tests, takes nothing; works on a read-only descriptor).
pub fn ofd_lock_held(fd: RawFd, offset: i64) -> io::Result<bool> {
    let mut fl = lock_struct(libc::F_WRLCK, offset);
    // SAFETY: F_OFD_GETLK reads and writes the `struct flock` we pass, valid for the call.
    check(unsafe { libc::fcntl(fd, libc::F_OFD_GETLK, &mut fl) })?;
    Ok(i32::from(fl.l_type) != libc::F_UNLCK)
}

/// Drops this open file description's lock on the byte at `offset`.
pub fn ofd_unlock(fd: RawFd, offset: i64) -> io::Result<()> {
    let fl = lock_struct(libc::F_UNLCK, offset);
    // SAFETY: as in `ofd_try_lock`.
    check(unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &fl) }).map(drop)
}

/// `(st_dev, st_ino)` of the file open on `fd`: which file a descriptor number names now.
pub fn fd_identity(fd: RawFd) -> io::Result<(u64, u64)> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a `struct stat` into the buffer we pass, valid for the call; a bad
    // fd gives EBADF and writes nothing.
    check(unsafe { libc::fstat(fd, st.as_mut_ptr()) })?;
    // SAFETY: fstat succeeded, so it filled the whole struct.
    let st = unsafe { st.assume_init() };
    #[allow(clippy::useless_conversion)] // the field types differ between targets
    Ok((u64::from(st.st_dev), u64::from(st.st_ino)))
}

/// Allocates the file's blocks for `[offset, offset + len)` (`posix_fallocate`), extending it
/// if shorter, so that writes through a mapping can never meet a full filesystem (which would
/// be a SIGBUS).
///
/// On a filesystem without `fallocate`, glibc emulates it by writing a zero byte into each block
/// it reads as zero: call it only on a range nobody else writes meanwhile.
pub fn allocate(fd: RawFd, offset: u64, len: u64) -> io::Result<()> {
    let too_large = || io::Error::new(io::ErrorKind::InvalidInput, "length too large");
    let offset = libc::off_t::try_from(offset).map_err(|_| too_large())?;
    let len = libc::off_t::try_from(len).map_err(|_| too_large())?;
    loop {
        // SAFETY: posix_fallocate only reads its integer arguments; a bad fd gives EBADF.
        match unsafe { libc::posix_fallocate(fd, offset, len) } {
            0 => return Ok(()),
            libc::EINTR => continue,
            e => return Err(io::Error::from_raw_os_error(e)),
        }
    }
}

fn cstring(p: &std::path::Path) -> io::Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a path"))
}

/// Creates (if missing) and opens the directory `path` without following a symlink at its last
/// component (its parent is resolved normally: it is the operator's choice, e.g. `/tmp`, while
/// the last component lives in a directory others may write). The mode is set explicitly, not
/// through the umask: on a directory we create, and, when `fix_existing`, on one we own whose
/// mode differs (an older vgpu's node directory, created through the umask).
///
/// A symlink or a non-directory at `path` is an error (`ELOOP`/`ENOTDIR`): a planted
/// `/tmp/vgpu-node -> /etc` must not make a root process create files in `/etc`. Returns the
/// open directory: resolve names inside it through it ([`fd_path`]), not through `path` again.
pub fn open_dir_nofollow(
    path: &std::path::Path,
    mode: u32,
    fix_existing: bool,
) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{FromRawFd, OwnedFd};
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no directory name"))?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    let parent_c = cstring(parent)?;
    let name_c = cstring(std::path::Path::new(name))?;
    // SAFETY: a NUL-terminated path we own; the result is checked.
    let pfd = check(unsafe {
        libc::open(
            parent_c.as_ptr(),
            libc::O_DIRECTORY | libc::O_RDONLY | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: `pfd` was just opened by us and is owned by nobody else.
    let pfd = unsafe { OwnedFd::from_raw_fd(pfd) };
    use std::os::fd::AsRawFd;
    // SAFETY: a directory descriptor and a NUL-terminated name we own; mkdirat does not follow
    // a symlink at the name (it fails with EEXIST).
    let created = match check(unsafe { libc::mkdirat(pfd.as_raw_fd(), name_c.as_ptr(), 0o700) }) {
        Ok(_) => true,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
        Err(e) => return Err(e),
    };
    // SAFETY: as above; O_NOFOLLOW refuses a symlink at the name.
    let fd = check(unsafe {
        libc::openat(
            pfd.as_raw_fd(),
            name_c.as_ptr(),
            libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_RDONLY | libc::O_CLOEXEC,
        )
    })
    .map_err(|e| {
        if matches!(e.raw_os_error(), Some(libc::ELOOP) | Some(libc::ENOTDIR)) {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is a symlink or not a directory", path.display()),
            )
        } else {
            e
        }
    })?;
    // SAFETY: just opened by us.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat fills the buffer we pass on success.
    check(unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: fstat succeeded.
    let st = unsafe { st.assume_init() };
    if (created || (fix_existing && st.st_uid == getuid())) && st.st_mode & 0o7777 != mode & 0o7777
    {
        // SAFETY: fchmod on our own descriptor.
        check(unsafe { libc::fchmod(fd.as_raw_fd(), mode & 0o7777) })?;
    }
    Ok(fd)
}

/// A path that names `name` inside the open directory `dir` through the descriptor
/// (`/proc/self/fd/N/name`), so that a directory renamed or replaced by a symlink after it was
/// opened cannot redirect it; the plain `fallback` where `/proc` is not mounted.
pub fn fd_path(
    dir: &std::os::fd::OwnedFd,
    name: &str,
    fallback: &std::path::Path,
) -> std::path::PathBuf {
    use std::os::fd::AsRawFd;
    let proc = std::path::PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
    if proc.is_dir() {
        proc.join(name)
    } else {
        fallback.join(name)
    }
}

/// Whether a process with this PID exists in our PID namespace (`kill(pid, 0)`: EPERM means it
/// exists but is another user's). PID 0 and negative PIDs: `false`.
pub fn pid_exists(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 sends nothing; kill only checks that `pid` exists and may be signalled.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

fn clock_ns(clock: libc::clockid_t) -> (u64, u64) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec on our stack.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u64::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// A signal action that runs `handler` (a function's address) with `flags` and an empty mask.
pub fn signal_action(handler: usize, flags: libc::c_int) -> libc::sigaction {
    // SAFETY: all-zero is a valid `struct sigaction` (no handler, empty mask, no flags).
    let mut a: libc::sigaction = unsafe { std::mem::zeroed() };
    a.sa_sigaction = handler;
    a.sa_flags = flags;
    // SAFETY: `sa_mask` is a field of our own struct.
    unsafe { libc::sigemptyset(&mut a.sa_mask) };
    a
}

/// The action of signal `sig` now (`None`: the call failed).
pub fn current_action(sig: libc::c_int) -> Option<libc::sigaction> {
    // SAFETY: all-zero is a valid `struct sigaction`.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: reading the current action into our own, valid `old`.
    (unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } == 0).then_some(old)
}

/// Installs `action` for signal `sig`; false if the call failed.
///
/// # Safety
/// `action`'s handler must be a function of the signature its flags name, async-signal-safe,
/// and live as long as the process.
pub unsafe fn set_action(sig: libc::c_int, action: &libc::sigaction) -> bool {
    // SAFETY: `action` is a valid action; its handler is the caller's contract.
    unsafe { libc::sigaction(sig, action, std::ptr::null_mut()) == 0 }
}

/// Asks that the calling thread's timed sleeps wake on time: a timer slack of 1 ns. Linux's
/// default, 50 µs, lets the kernel wake a timed sleep up to that much late to batch wake-ups.
/// Best effort: a kernel or a seccomp filter that refuses it leaves the default.
pub fn precise_timers() {
    let one: libc::c_ulong = 1;
    // SAFETY: prctl(PR_SET_TIMERSLACK) takes plain integers and changes only the calling
    // thread's timer slack; it touches no memory of ours.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, one);
    }
}

/// CLOCK_MONOTONIC nanoseconds: one clock for every process of the host (vDSO, no system
/// call).
pub fn monotonic_ns() -> u64 {
    let (s, ns) = clock_ns(libc::CLOCK_MONOTONIC);
    s.wrapping_mul(1_000_000_000).wrapping_add(ns)
}

/// Unix time in whole seconds (CLOCK_REALTIME, vDSO, no system call): what C's `time()`
/// returns.
pub fn realtime_secs() -> u64 {
    clock_ns(libc::CLOCK_REALTIME).0
}

/// Unix time in milliseconds (CLOCK_REALTIME, vDSO, no system call).
pub fn realtime_ms() -> u64 {
    let (s, ns) = clock_ns(libc::CLOCK_REALTIME);
    s.saturating_mul(1000).saturating_add(ns / 1_000_000)
}

fn timespec(timeout: Duration) -> libc::timespec {
    libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        // Below 10^9: fits any `c_long` (32 bits on some targets, hence `try_from`).
        #[allow(clippy::unnecessary_fallible_conversions)]
        tv_nsec: libc::c_long::try_from(timeout.subsec_nanos()).unwrap_or(0),
    }
}

fn futex_wait_op(word: &AtomicU32, op: libc::c_int, expected: u32, timeout: Duration) {
    let ts = timespec(timeout);
    // SAFETY: FUTEX_WAIT (with or without the private flag) reads only the u32 at the address
    // of a live AtomicU32 (borrowed for the call) and the timespec on our stack; the kernel
    // compares and sleeps, touching nothing else.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

fn futex_wake_op(word: &AtomicU32, op: libc::c_int) {
    // SAFETY: FUTEX_WAKE on the address of a live AtomicU32; no memory is accessed.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), op, i32::MAX);
    }
}

/// Sleeps while the process-private word holds `expected`, at most `timeout`. Spurious
/// wake-ups are allowed: callers re-check their condition in a loop. The word must not be in
/// memory shared with another process (use [`futex_wait_shared`] there).
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    futex_wait_op(
        word,
        libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
        expected,
        timeout,
    );
}

/// Wakes every thread of this process waiting on the private word (see [`futex_wait`]).
pub fn futex_wake(word: &AtomicU32) {
    futex_wake_op(word, libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG);
}

/// Sleeps while the word, which may be in a `MAP_SHARED` mapping, holds `expected`, at most
/// `timeout`; spurious wake-ups are allowed.
pub fn futex_wait_shared(word: &AtomicU32, expected: u32, timeout: Duration) {
    futex_wait_op(word, libc::FUTEX_WAIT, expected, timeout);
}

/// Wakes every process waiting on the shared word (see [`futex_wait_shared`]).
pub fn futex_wake_shared(word: &AtomicU32) {
    futex_wake_op(word, libc::FUTEX_WAKE);
}

/// [`futex_wait_shared`] for the wakes of `bits` only (`FUTEX_WAIT_BITSET`; `bits` 0 counts as
/// every bit): a [`futex_wake_shared_bits`] whose bits share none with these does not wake this
/// waiter; a plain [`futex_wake_shared`] (an older library's) wakes it as every other.
pub fn futex_wait_shared_bits(word: &AtomicU32, expected: u32, timeout: Duration, bits: u32) {
    // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline (the kernel converts it from
    // this process's time namespace).
    let deadline = timespec(Duration::from_nanos(
        monotonic_ns().saturating_add(u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX)),
    ));
    let bits = if bits == 0 { u32::MAX } else { bits };
    // SAFETY: FUTEX_WAIT_BITSET reads only the u32 at the address of a live AtomicU32 (borrowed
    // for the call) and the timespec on our stack; uaddr2 is unused (null); the kernel compares
    // and sleeps, touching nothing else.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT_BITSET,
            expected,
            &deadline as *const libc::timespec,
            std::ptr::null::<u32>(),
            bits,
        );
    }
}

/// Wakes the processes waiting on the shared word whose wait bits share one with `bits` (0:
/// every bit), and every plain [`futex_wait_shared`] waiter.
pub fn futex_wake_shared_bits(word: &AtomicU32, bits: u32) {
    let bits = if bits == 0 { u32::MAX } else { bits };
    // SAFETY: FUTEX_WAKE_BITSET on the address of a live AtomicU32; the timeout and uaddr2
    // arguments are unused (null); no memory is accessed.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE_BITSET,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            bits,
        );
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn clocks_move_forward() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(a > 0 && b >= a);
        // 2020-01-01 or later.
        assert!(realtime_secs() > 1_577_836_800);
    }

    #[test]
    fn futex_wait_returns_at_once_when_the_word_differs() {
        let w = AtomicU32::new(1);
        // Would sleep an hour if the comparison were ignored.
        futex_wait(&w, 0, Duration::from_secs(3600));
        futex_wait_shared(&w, 0, Duration::from_secs(3600));
        futex_wake(&w);
        futex_wake_shared(&w);
    }

    #[test]
    fn a_wake_of_other_bits_does_not_end_a_bitset_wait() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let w = Arc::new(AtomicU32::new(0));
        let ready = Arc::new(AtomicBool::new(false));
        let (w2, r2) = (Arc::clone(&w), Arc::clone(&ready));
        let t = std::thread::spawn(move || {
            let t0 = std::time::Instant::now();
            r2.store(true, Ordering::Release);
            futex_wait_shared_bits(&w2, 0, Duration::from_secs(3), 0b10);
            t0.elapsed()
        });
        while !ready.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        std::thread::sleep(Duration::from_millis(50));
        futex_wake_shared_bits(&w, 0b01);
        std::thread::sleep(Duration::from_millis(100));
        futex_wake_shared_bits(&w, 0b10);
        let waited = t.join().unwrap();
        assert!(
            waited >= Duration::from_millis(140) && waited < Duration::from_secs(2),
            "{waited:?}"
        );
        // A timed-out wait returns.
        let t0 = std::time::Instant::now();
        futex_wait_shared_bits(&w, 0, Duration::from_millis(20), 1);
        assert!(t0.elapsed() >= Duration::from_millis(19));
    }

    #[test]
    fn a_wake_ends_a_wait() {
        let w = std::sync::Arc::new(AtomicU32::new(0));
        let w2 = std::sync::Arc::clone(&w);
        let t = std::thread::spawn(move || {
            while w2.load(std::sync::atomic::Ordering::Acquire) == 0 {
                futex_wait(&w2, 0, Duration::from_secs(3600));
            }
        });
        w.store(1, std::sync::atomic::Ordering::Release);
        futex_wake(&w);
        t.join().unwrap();
    }

    #[test]
    fn directories_get_their_mode_and_symlinks_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("node");
        let fd = open_dir_nofollow(&d, 0o1777, true).unwrap();
        let mode =
            |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&d), 0o1777);
        std::fs::write(fd_path(&fd, "x", &d), b"1").unwrap();
        assert!(d.join("x").exists());
        // An existing directory of ours with another mode (an older vgpu's 1755) is fixed.
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1755)).unwrap();
        open_dir_nofollow(&d, 0o1777, true).unwrap();
        assert_eq!(mode(&d), 0o1777);
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&d, &link).unwrap();
        let e = open_dir_nofollow(&link, 0o1777, true).unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");
        std::fs::write(dir.path().join("file"), b"").unwrap();
        assert!(open_dir_nofollow(&dir.path().join("file"), 0o700, false).is_err());
    }

    #[test]
    fn identity_and_allocation() {
        let dir = tempfile::tempdir().unwrap();
        let f = std::fs::File::create(dir.path().join("f")).unwrap();
        let md = f.metadata().unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(fd_identity(f.as_raw_fd()).unwrap(), (md.dev(), md.ino()));
        allocate(f.as_raw_fd(), 0, 1 << 20).unwrap();
        let md = f.metadata().unwrap();
        assert_eq!(md.len(), 1 << 20);
        assert!(md.blocks() * 512 >= 1 << 20, "{} blocks", md.blocks());
        assert!(fd_identity(-1).is_err());
        assert!(pid_exists(i32::try_from(std::process::id()).unwrap()));
        assert!(!pid_exists(0));
        assert!(!pid_exists(-1));
    }
}
