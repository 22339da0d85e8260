//! Drains and stream captures exclude each other.
//!
//! The compute controller ends each window with a context-wide drain (`cuCtxSynchronize`). On
//! the real driver a drain made while a stream capture is in progress invalidates the capture,
//! whatever the draining thread's capture mode (measured on the H200, docs/GPU-RESULTS.md run 7).
//! So a process keeps two counters: captures in progress and drains in progress. Each side
//! announces itself before it looks at the other (`SeqCst`, with a `SeqCst` fence between the
//! two, as in Dekker's algorithm), and withdraws if it sees the other. Of two racing sides at least one sees the other, so a drain
//! and a capture never overlap. Both may withdraw at once; each then retries, which is why the
//! callers wait and try again rather than assume success.
//!
//! The waiting is the caller's. A capture that saw a drain waits for it: a drain depends on no
//! thread of the program. A drain that saw a capture keeps its window open, so the capturing
//! thread can launch into its uncaptured streams, and retries when captures end.
//!
//! Generic over the counter so that `loom` can check it (`tests/loom.rs`).
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};

/// The atomic operations the exclusion uses (all `SeqCst`).
pub trait Counter: Sync {
    /// Load.
    fn load(&self) -> u32;
    /// Adds one.
    fn increment(&self);
    /// Subtracts one, never below zero.
    fn decrement(&self);
    /// Store.
    fn store(&self, v: u32);
    /// A `SeqCst` fence, between announcing oneself and looking at the other side.
    fn fence(&self);
}

impl Counter for AtomicU32 {
    fn load(&self) -> u32 {
        AtomicU32::load(self, SeqCst)
    }
    fn increment(&self) {
        self.fetch_add(1, SeqCst);
    }
    fn decrement(&self) {
        let _ = self.fetch_update(SeqCst, SeqCst, |c| c.checked_sub(1));
    }
    fn store(&self, v: u32) {
        AtomicU32::store(self, v, SeqCst)
    }
    fn fence(&self) {
        std::sync::atomic::fence(SeqCst);
    }
}

/// A process's captures and drains.
#[derive(Debug, Default)]
pub struct Exclusion<C> {
    /// Stream captures in progress.
    pub captures: C,
    /// Drains in progress.
    pub draining: C,
}

impl Exclusion<AtomicU32> {
    /// No capture, no drain.
    pub const fn new() -> Self {
        Exclusion {
            captures: AtomicU32::new(0),
            draining: AtomicU32::new(0),
        }
    }
}

impl<C: Counter> Exclusion<C> {
    /// Announces a capture. `Err(n)`: `n` drains were running and the announcement is
    /// withdrawn; wait for `draining` to change and try again.
    pub fn try_begin_capture(&self) -> Result<(), u32> {
        self.captures.increment();
        self.captures.fence();
        let d = self.draining.load();
        if d == 0 {
            return Ok(());
        }
        self.captures.decrement();
        Err(d)
    }

    /// A capture announced by [`Self::try_begin_capture`] ended (or never began).
    pub fn end_capture(&self) {
        self.captures.decrement();
    }

    /// Announces a drain; `false` while a capture is in progress (withdrawn: retry later).
    pub fn try_begin_drain(&self) -> bool {
        self.draining.increment();
        self.draining.fence();
        if self.captures.load() == 0 {
            return true;
        }
        self.draining.decrement();
        false
    }

    /// A drain announced by [`Self::try_begin_drain`] ended.
    pub fn end_drain(&self) {
        self.draining.decrement();
    }

    /// In a forked child: no drain runs there, and no capture of the parent's threads goes on.
    pub fn reset(&self) {
        self.draining.store(0);
        self.captures.store(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capture_and_a_drain_keep_each_other_out() {
        let x = Exclusion::new();
        assert_eq!(x.try_begin_capture(), Ok(()));
        assert!(!x.try_begin_drain(), "a drain must wait for the capture");
        assert_eq!(x.draining.load(SeqCst), 0, "the drain withdrew");
        x.end_capture();
        assert!(x.try_begin_drain());
        assert_eq!(
            x.try_begin_capture(),
            Err(1),
            "a capture must wait for the drain"
        );
        assert_eq!(x.captures.load(SeqCst), 0, "the capture withdrew");
        x.end_drain();
        assert_eq!(x.try_begin_capture(), Ok(()));
        assert_eq!(
            x.try_begin_capture(),
            Ok(()),
            "captures do not exclude each other"
        );
        x.end_capture();
        x.end_capture();
        x.end_capture();
        assert_eq!(x.captures.load(SeqCst), 0, "an unmatched end never wraps");
        Counter::store(&x.captures, 3);
        Counter::store(&x.draining, 1);
        x.reset();
        assert!(x.try_begin_drain());
    }
}
