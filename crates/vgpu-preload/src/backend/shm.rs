//! A small file of 64-bit words mapped `MAP_SHARED` into every process that opens it: the node
//! scheduling file through which containers on one node take turns on a GPU.
use core::sync::atomic::{AtomicU32, AtomicU64};
use std::ffi::CString;
use std::path::Path;

/// A mapping of `len` atomic words, valid for the rest of the process (never unmapped: hooks
/// may use it until the process exits).
pub struct SharedWords {
    base: *mut AtomicU64,
    len: usize,
    /// The file, kept open for its open-file-description locks (close-on-exec).
    fd: libc::c_int,
}

// SAFETY: the mapping is only accessed through atomics and lives until exit.
unsafe impl Send for SharedWords {}
// SAFETY: as above.
unsafe impl Sync for SharedWords {}

impl SharedWords {
    /// Opens (creating with `mode` if missing) and maps `len` words of the file at `path`.
    /// A new file is zero-filled by `ftruncate`, so every word starts at 0.
    pub fn open(path: &Path, len: usize, mode: libc::mode_t) -> std::io::Result<SharedWords> {
        let c = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        let bytes = len * 8;
        // SAFETY: open(2) with a NUL-terminated path; the fd is closed below in every case.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC | libc::O_NOFOLLOW,
                mode as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let result = (|| {
            // SAFETY: fchmod/fstat/ftruncate on the fd we own; `st` is a plain C struct.
            unsafe {
                // Whatever the umask, others must be able to share the file (mode as asked).
                let mut st: libc::stat = core::mem::zeroed();
                if libc::fstat(fd, &mut st) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if st.st_uid == libc::geteuid() {
                    libc::fchmod(fd, mode);
                }
                if (st.st_size as usize) < bytes && libc::ftruncate(fd, bytes as libc::off_t) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // SAFETY: a fresh shared mapping of `bytes` of the file; checked for failure.
            let p = unsafe {
                libc::mmap(
                    core::ptr::null_mut(),
                    bytes,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
            Ok(SharedWords {
                base: p.cast(),
                len,
                fd,
            })
        })();
        if result.is_err() {
            // SAFETY: closing our own fd on failure.
            unsafe { libc::close(fd) };
        }
        result
    }

    /// Word `i` (panics if out of range: callers use fixed indices below `len`).
    pub fn word(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.len);
        // SAFETY: `i < len`, the mapping is `len` words, page-aligned, live until exit, and
        // AtomicU64 has the layout of u64.
        unsafe { &*self.base.add(i) }
    }

    /// The low half of word `i` as a futex word.
    pub fn futex_word(&self, i: usize) -> &AtomicU32 {
        assert!(i < self.len);
        // SAFETY: the first 4 bytes of an 8-aligned word in the live mapping (little-endian
        // low half on x86-64 and aarch64); AtomicU32 has the layout of u32.
        unsafe { &*(self.base.add(i) as *const AtomicU32) }
    }
}

impl SharedWords {
    fn ofd(&self, cmd: libc::c_int, kind: libc::c_short, byte: u64) -> libc::flock {
        // SAFETY: a zeroed flock is valid; OFD locks require l_pid = 0.
        let mut fl: libc::flock = unsafe { core::mem::zeroed() };
        fl.l_type = kind;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        fl.l_start = byte as libc::off_t;
        fl.l_len = 1;
        // SAFETY: fcntl on our own open fd with a valid flock.
        unsafe { libc::fcntl(self.fd, cmd, &mut fl) };
        fl
    }

    /// Takes a write lock on one byte (blocking is not needed: the caller holds the role the
    /// byte stands for). The kernel drops it when this process dies, in any PID namespace.
    pub fn lock_byte(&self, byte: u64) {
        self.ofd(libc::F_OFD_SETLK, libc::F_WRLCK as libc::c_short, byte);
    }

    /// Releases the byte lock.
    pub fn unlock_byte(&self, byte: u64) {
        self.ofd(libc::F_OFD_SETLK, libc::F_UNLCK as libc::c_short, byte);
    }

    /// Whether some other open file description holds a lock on the byte.
    pub fn byte_locked_by_other(&self, byte: u64) -> bool {
        let fl = self.ofd(libc::F_OFD_GETLK, libc::F_WRLCK as libc::c_short, byte);
        fl.l_type != libc::F_UNLCK as libc::c_short
    }
}

/// Shared (cross-process) futex wait: sleeps while `word == expected`, at most `timeout`.
pub fn futex_wait_shared(word: &AtomicU32, expected: u32, timeout: std::time::Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT (shared) on a word of a live MAP_SHARED mapping; reads only it.
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

/// Shared futex wake of every waiter on `word`.
pub fn futex_wake_shared(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE (shared) on a word of a live mapping; touches no memory.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}
