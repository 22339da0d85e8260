//! Taking turns on a GPU across containers: the node token.
//!
//! Every vgpu process of every container on the node that has a compute limit on a GPU opens
//! `<node dir>/<gpu uuid>.sched` (node dir: `$VGPU_NODE_DIR`, else HAMi's node-wide
//! `/tmp/vgpulock` when it exists, else `/tmp/vgpu-node`). Only the holder of the file's token
//! has work on that GPU: it opens its window, drains, and hands the token on. So containers
//! never time-slice each other in hardware (which costs 10–19 % on the H200 and makes events
//! over-count), and each one's measured windows are its own.
//!
//! Layout (64-bit words): 0 magic, 1 holder (0 free, else the holder's id), 2 heartbeat
//! (CLOCK_MONOTONIC ns, refreshed by the holder), 3 futex generation (low 32 bits), 4 waiters.
//! The holder also holds an open-file-description lock on byte [`HOLDER_BYTE`] of the file; the
//! kernel drops it when the holder dies (in any PID namespace), and a waiter that finds the
//! token held but the byte unlocked takes over at once. A holder that hangs stops refreshing its
//! heartbeat; after [`STALE`] anyone may take over.
use crate::backend::futex::now_ns;
use crate::backend::shm::{SharedWords, futex_wait_shared, futex_wake_shared};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

const MAGIC: u64 = 0x5647_5055_4e4f_4431; // "VGPUNOD1"
const W_MAGIC: usize = 0;
const W_HOLDER: usize = 1;
const W_BEAT: usize = 2;
const W_GEN: usize = 3;
const W_WAITERS: usize = 4;
const WORDS: usize = 8;

/// The byte whose lock marks the live holder.
pub const HOLDER_BYTE: u64 = 4096;

/// A token held without a heartbeat for this long is taken over.
pub const STALE: Duration = Duration::from_secs(2);

/// One GPU's token file.
pub struct NodeToken {
    words: SharedWords,
    id: u64,
}

/// The directory of the node files.
pub fn node_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("VGPU_NODE_DIR") {
        return PathBuf::from(d);
    }
    let hami = PathBuf::from("/tmp/vgpulock");
    if hami.is_dir() {
        return hami;
    }
    PathBuf::from("/tmp/vgpu-node")
}

impl NodeToken {
    /// Opens the token file of the GPU `uuid`; `None` (with a warning) if it cannot be used,
    /// in which case the container schedules alone.
    pub fn open(uuid: &str) -> Option<NodeToken> {
        let dir = node_dir();
        if !dir.is_dir() {
            // A node-wide directory shared by every user: world-writable with the sticky bit.
            use std::os::unix::fs::DirBuilderExt;
            let _ = std::fs::DirBuilder::new().mode(0o1777).create(&dir);
        }
        let path = dir.join(format!("{uuid}.sched"));
        let words = match SharedWords::open(&path, WORDS, 0o666) {
            Ok(w) => w,
            Err(e) => {
                crate::log::warn(format_args!(
                    "cannot use {} ({e}); this container's compute limit is kept without coordinating with other containers",
                    path.display()
                ));
                return None;
            }
        };
        let m = words.word(W_MAGIC);
        if m.load(Ordering::Acquire) == 0 {
            let _ = m.compare_exchange(0, MAGIC, Ordering::AcqRel, Ordering::Acquire);
        }
        if m.load(Ordering::Acquire) != MAGIC {
            crate::log::warn(format_args!(
                "{} is not a vgpu node file; ignored",
                path.display()
            ));
            return None;
        }
        // A random non-zero id for this process.
        let mut id = 0u64;
        while id == 0 {
            id = (now_ns() ^ (u64::from(std::process::id()) << 32))
                .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
        Some(NodeToken { words, id })
    }

    /// Waits until this process holds the token.
    pub fn acquire(&self) {
        let holder = self.words.word(W_HOLDER);
        let beat = self.words.word(W_BEAT);
        let gen_word = self.words.futex_word(W_GEN);
        let waiters = self.words.word(W_WAITERS);
        let mut waiting = false;
        loop {
            let g = gen_word.load(Ordering::Acquire);
            let h = holder.load(Ordering::Acquire);
            let since = now_ns().saturating_sub(beat.load(Ordering::Acquire));
            let free = h == 0
                || h == self.id
                || since > STALE.as_nanos() as u64
                // Held, but the holder's lock is gone: it died. (The 20 ms grace covers a
                // holder between its compare-exchange and taking the lock.)
                || (since > 20_000_000 && !self.words.byte_locked_by_other(HOLDER_BYTE));
            if free
                && holder
                    .compare_exchange(h, self.id, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                beat.store(now_ns(), Ordering::Release);
                self.words.lock_byte(HOLDER_BYTE);
                if waiting {
                    waiters.fetch_sub(1, Ordering::AcqRel);
                }
                return;
            }
            if !waiting {
                waiting = true;
                waiters.fetch_add(1, Ordering::AcqRel);
            }
            futex_wait_shared(gen_word, g, Duration::from_millis(50));
        }
    }

    /// Refreshes the heartbeat while holding.
    pub fn heartbeat(&self) {
        self.words.word(W_BEAT).store(now_ns(), Ordering::Release);
    }

    /// Hands the token on.
    pub fn release(&self) {
        self.words.unlock_byte(HOLDER_BYTE);
        let _ = self.words.word(W_HOLDER).compare_exchange(
            self.id,
            0,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        self.words.futex_word(W_GEN).fetch_add(1, Ordering::AcqRel);
        futex_wake_shared(self.words.futex_word(W_GEN));
    }

    /// How many processes wait for the token now.
    pub fn waiters(&self) -> u64 {
        self.words.word(W_WAITERS).load(Ordering::Acquire)
    }
}
