//! The queue hold (`vgpu_policy::limiter::Decision::hold_queue`): a process kept off the GPU
//! for a light (or high-priority) neighbour's synchronisation has its streams wait there, on
//! the GPU, instead of its launching threads waiting at the gate. Its host goes on queueing
//! work (a training step's Python between its kernels is not lost), and what it queued runs as
//! soon as the hold is lifted.
//!
//! The controller starts a hold by taking the next value of a counter (`Marks::queue_hold`) and
//! publishing it (`queue_want`); each launching thread then puts, before its launch, a wait
//! for the queue word (the second word of the brackets' pinned allocation) to reach that value
//! (`cuStreamWaitValue32_v2`, `GEQ`) into the launch's stream, once per stream and hold (a
//! small table of streams already waiting, by a hash of the stream's handle: a collision
//! costs one wait more, or, rarely, one stream left unheld). The controller lifts it by
//! writing the value. The value only grows, so a wait put in after the lift, or read by the
//! GPU after a later hold began, passes at once.
//!
//! Never into a stream being captured (the wait would become a node of the program's graph),
//! and only before a launch of a function (or graph) launched before (a first launch may load
//! its module, which synchronises the context: it would wait for the held stream). A hold
//! stands at most `HOLD_MAX_NS` past the controller's last look that wanted it (each renews
//! it): a watchdog thread of its own (the brackets' protocol, `vgpu_policy::holdwatch`) lifts
//! it then, and the controller lifts it before it drains, when the context is retired, and at
//! exit. One relaxed load on the launch path while no hold stands.
use super::Marks;
use crate::driver::{Driver, REAL};
use std::sync::atomic::{AtomicU64, Ordering};
use vgpu_sys::cuda::CUstream;

/// Streams remembered per hold (a power of two).
pub(super) const SEEN: usize = 64;

/// The table entry of `stream` waiting for `value`: a hash of the handle above the value, and
/// the entry's index.
fn tag(stream: CUstream, value: u32) -> (u64, usize) {
    let h = (stream as usize as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let hi = h >> 32;
    #[allow(clippy::cast_possible_truncation)]
    (hi << 32 | u64::from(value), (hi as usize) & (SEEN - 1))
}

impl Marks {
    /// Whether the queue can be held: the word is made, streams may be held, its watchdog runs.
    pub fn can_hold_queue(&self) -> bool {
        self.holding.load(Ordering::Acquire)
            && self.queue_hold.dog.load(Ordering::Acquire)
            && self.word.made().is_some()
            && !self.retired()
    }

    /// The value launches wait for now (0: no hold stands). The launch path's one load.
    #[inline]
    pub fn queue_wanted(&self) -> u32 {
        self.queue_want.load(Ordering::Relaxed)
    }

    /// Starts a hold, or renews the one standing (the controller, at each look that holds the
    /// queue): the watchdog lifts it `HOLD_MAX_NS` after the controller's last look that
    /// wanted it, not after it was placed (a hold it lifted stays so until the controller lifts
    /// it: a controller that looks late holds no more than before).
    pub fn hold_queue(&self) {
        if self.queue_want.load(Ordering::Acquire) != 0 {
            let _ = self.queue_hold.renewed_now();
            return;
        }
        if !self.can_hold_queue() {
            return;
        }
        let v = self.queue_hold.take();
        // Watched before any stream waits (`vgpu_policy::holdwatch`).
        self.queue_hold.placed_now();
        self.queue_want.store(v, Ordering::Release);
    }

    /// Lifts the standing hold, if any (the controller, a drain, the exit handler).
    pub fn lift_queue(&self) {
        // A load first: the controller calls this at every look that holds nothing, and a
        // swap would write the launch path's cache line each time.
        if self.queue_want.load(Ordering::Relaxed) == 0 {
            return;
        }
        // When the hold was placed or renewed, read before it is taken: the exit handler lifts
        // from its own thread, and a hold the controller places meanwhile keeps its watch
        // (cleared unconditionally, it stood unwatched).
        let since = self.queue_hold.watch.since();
        let v = self.queue_want.swap(0, Ordering::AcqRel);
        if v == 0 {
            return;
        }
        if let Some(_using) = self.enter()
            && let Some(w) = self.word.made()
        {
            REAL.set_word(self.queue_hold.word(w), v);
        }
        // Renewed in between, it stays watched: the watchdog then lifts what is already
        // lifted, 2 ms on.
        let _ = self.queue_hold.watch.take_over(since);
    }

    /// Before a launch (of a function or graph launched before: `loaded`) on `stream` while a
    /// hold for `value` stands: the stream waits for the word, once per hold.
    #[cold]
    #[inline(never)]
    pub fn queue_wait(&self, stream: CUstream, value: u32, loaded: bool) {
        let (t, i) = tag(stream, value);
        if !loaded || self.queue_seen[i].load(Ordering::Relaxed) == t || REAL.capturing(stream) {
            return;
        }
        let Some(_using) = self.enter() else {
            return;
        };
        let Some(w) = self.word.made() else {
            return;
        };
        if !self.holding.load(Ordering::Acquire) {
            return;
        }
        if REAL.hold(stream, self.queue_hold.word(w), value) {
            self.queue_seen[i].store(t, Ordering::Relaxed);
        } else {
            // Nothing waits; brackets go unheld from now on too.
            self.holding.store(false, Ordering::Release);
            crate::log::debug(format_args!(
                "cuStreamWaitValue32 refused: queues and brackets are no longer held"
            ));
        }
    }

    /// Forgets the streams that waited (their handles may name other streams in a new context).
    pub(super) fn forget_queue_streams(&self) {
        for s in &self.queue_seen {
            s.store(0, Ordering::Relaxed);
        }
    }
}

/// The table of streams waiting, empty.
pub(super) const fn no_streams() -> [AtomicU64; SEEN] {
    [const { AtomicU64::new(0) }; SEEN]
}
