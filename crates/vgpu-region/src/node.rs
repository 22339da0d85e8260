//! Taking turns on a GPU across containers: the node token.
//!
//! Every vgpu process of every container on a node that has a compute limit on a GPU opens the
//! GPU's token file (the preload names it `<node dir>/<gpu uuid>.sched`). Only the holder of the
//! token has work on that GPU: it opens its window, drains, and hands the token on. So containers
//! never time-slice each other in hardware (which costs 10–19 % on an H200 by the project's
//! reference measurements, and makes CUDA events over-count), and each one's measured windows are its own.
//!
//! The file is a [`NodeFile`]: magic, holder (0 free, else the holder's id), heartbeat
//! (CLOCK_MONOTONIC ns, refreshed by the holder), a futex generation word, and the number of
//! waiters. The holder also holds an open-file-description lock on byte [`HOLDER_BYTE`], taken on
//! a descriptor of its own (not the one the file was mapped from, so a forked child's inherited
//! mapping cannot keep a dead holder's lock alive); the kernel drops it when the holder dies, in
//! any PID namespace, and a waiter that finds the token held but the byte free takes over at
//! once. A holder that hangs stops refreshing its heartbeat; after [`STALE`] anyone may take over.
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use crate::raw::Mapping;
use crate::sys;

const MAGIC: u64 = 0x5647_5055_4e4f_4431; // "VGPUNOD1"

/// The byte whose lock marks the live holder.
pub const HOLDER_BYTE: i64 = 4096;

/// A token held without a heartbeat for this long is taken over.
pub const STALE: Duration = Duration::from_secs(2);

/// How long after taking the token a holder may still be without its lock.
const LOCK_GRACE_NS: u64 = 20_000_000;

/// The token file's layout.
#[repr(C)]
pub struct NodeFile {
    magic: AtomicU64,
    holder: AtomicU64,
    beat: AtomicU64,
    generation: AtomicU32,
    pad: AtomicU32,
    waiters: AtomicU64,
    reserved: [AtomicU64; 3],
}

/// One GPU's token, as this process holds it open.
pub struct NodeToken {
    map: Mapping<NodeFile>,
    /// The descriptor of the holder lock (its own open file description).
    lock: File,
    id: u64,
}

fn open_rw(path: &Path, create: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .mode(0o666)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

impl NodeToken {
    /// Opens (creating if missing, 0666 whatever the umask: containers of every user share it)
    /// the token file at `path`.
    pub fn open(path: &Path) -> io::Result<NodeToken> {
        let file = open_rw(path, true)?;
        let md = file.metadata()?;
        if md.uid() == sys::getuid() {
            file.set_permissions(std::fs::Permissions::from_mode(0o666))?;
        }
        let size = size_of::<NodeFile>() as u64;
        if md.len() < size {
            file.set_len(size)?;
        }
        let map = Mapping::<NodeFile>::new(&file)?;
        let lock = open_rw(path, false)?;
        let lmd = lock.metadata()?;
        if (lmd.dev(), lmd.ino()) != (md.dev(), md.ino()) {
            return Err(io::Error::other(
                "the token file was replaced while opening",
            ));
        }
        let f = map.get();
        let _ = f
            .magic
            .compare_exchange(0, MAGIC, Ordering::AcqRel, Ordering::Acquire);
        if f.magic.load(Ordering::Acquire) != MAGIC {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not a vgpu node token file",
            ));
        }
        // A random non-zero id for this process.
        let mut id = 0u64;
        while id == 0 {
            id = (sys::monotonic_ns() ^ (u64::from(std::process::id()) << 32))
                .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
        Ok(NodeToken { map, lock, id })
    }

    /// Whether the holder's lock byte is held by another open file description (on an error,
    /// assume it is: the heartbeat then decides).
    fn holder_alive(&self) -> bool {
        let fd = self.lock.as_raw_fd();
        match sys::ofd_try_lock(fd, HOLDER_BYTE) {
            Ok(true) => {
                let _ = sys::ofd_unlock(fd, HOLDER_BYTE);
                false
            }
            Ok(false) | Err(_) => true,
        }
    }

    /// Waits until this process holds the token.
    pub fn acquire(&self) {
        let f = self.map.get();
        let mut waiting = false;
        loop {
            let g = f.generation.load(Ordering::Acquire);
            let h = f.holder.load(Ordering::Acquire);
            let since = sys::monotonic_ns().saturating_sub(f.beat.load(Ordering::Acquire));
            let free = h == 0
                || h == self.id
                || since > u64::try_from(STALE.as_nanos()).unwrap_or(u64::MAX)
                // Held, but the holder's lock is gone: it died. (The grace covers a holder
                // between its compare-exchange and taking the lock.)
                || (since > LOCK_GRACE_NS && !self.holder_alive());
            if free
                && f.holder
                    .compare_exchange(h, self.id, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                f.beat.store(sys::monotonic_ns(), Ordering::Release);
                let _ = sys::ofd_try_lock(self.lock.as_raw_fd(), HOLDER_BYTE);
                if waiting {
                    f.waiters.fetch_sub(1, Ordering::AcqRel);
                }
                return;
            }
            if !waiting {
                waiting = true;
                f.waiters.fetch_add(1, Ordering::AcqRel);
            }
            sys::futex_wait_shared(&f.generation, g, Duration::from_millis(50));
        }
    }

    /// Refreshes the heartbeat while holding.
    pub fn heartbeat(&self) {
        self.map
            .get()
            .beat
            .store(sys::monotonic_ns(), Ordering::Release);
    }

    /// Hands the token on.
    pub fn release(&self) {
        let f = self.map.get();
        let _ = sys::ofd_unlock(self.lock.as_raw_fd(), HOLDER_BYTE);
        let _ = f
            .holder
            .compare_exchange(self.id, 0, Ordering::AcqRel, Ordering::Acquire);
        f.generation.fetch_add(1, Ordering::AcqRel);
        sys::futex_wake_shared(&f.generation);
    }

    /// How many processes wait for the token now.
    pub fn waiters(&self) -> u64 {
        self.map.get().waiters.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_a_released_token_passes_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpu.sched");
        let a = NodeToken::open(&path).unwrap();
        let b = NodeToken::open(&path).unwrap();
        a.acquire();
        assert_eq!(a.map.get().holder.load(Ordering::Acquire), a.id);
        // B's descriptor sees A's holder lock.
        assert!(b.holder_alive());
        a.release();
        assert!(!b.holder_alive());
        b.acquire();
        assert_eq!(b.map.get().holder.load(Ordering::Acquire), b.id);
        b.release();
        assert_eq!(b.waiters(), 0);
    }

    #[test]
    fn a_file_of_something_else_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("other");
        std::fs::write(&path, [0xffu8; 64]).unwrap();
        assert!(NodeToken::open(&path).is_err());
    }
}
