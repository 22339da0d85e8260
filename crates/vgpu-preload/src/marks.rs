//! What a paced window's launches cost (docs/COMPUTE.md, "Pricing launches"): the transport
//! between the launching threads and the controller for `vgpu_policy::compute::Costing`.
//!
//! - [`Keys`]: each admitted launch stores its key (its function, or its graph) in a ring at
//!   its launch number — one relaxed store on the launch path, nothing else — and whether the
//!   window's launches all went to one stream. The controller copies the keys at each look.
//! - [`Marks`]: a launch the pace holds (it waits anyway, so the launch path pays nothing)
//!   records a timing event on its stream after the work admitted before it, unless another
//!   thread is recording one or `MARKS_IN_FLIGHT` are unread (the GPU stamps each timing event
//!   before the next kernel starts: a few µs). The controller queries them in order at each
//!   look: a completed mark shows the GPU done with every launch before it, and the GPU time
//!   between two marks whose launches ran back to back (the earlier was still queued when the
//!   later was recorded) is what those launches cost.
//!
//! Nothing here waits: a mark that cannot be recorded (another thread is recording, enough are
//! in flight, the driver refuses) is skipped, and a driver error turns marks off for the
//! process (the pace then counts launches at the mean time, as without marks). Events are
//! created lazily, a few per device for the process's life.
use crate::driver::{Driver, REAL};
use core::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use vgpu_policy::share::MARKS_IN_FLIGHT;
use vgpu_sys::cuda::CUstream;

/// Launch keys kept (a power of two): the controller looks every 125 µs, so a window loses
/// keys only to a program launching faster than one per half microsecond.
const KEYS: usize = 256;

/// The ring's slots: the marks in flight (`vgpu_policy::share::MARKS_IN_FLIGHT`, recorded and
/// not yet consumed) and the last completed mark, the start of the next timed segment.
const SLOTS: usize = 4;
const _: () = assert!(MARKS_IN_FLIGHT < SLOTS);

/// A completed mark, as the controller hands it to `Costing`: the launch count it was recorded
/// at, the GPU time since the previous completed mark if the launches between ran back to
/// back (ns), and when it was seen completed.
pub type Seen = (u64, Option<u64>, u64);

/// The keys of a window's admitted launches, by launch number.
pub struct Keys {
    ring: [AtomicU64; KEYS],
    /// The window's first stream, plus one (0: none yet).
    stream: AtomicU64,
    /// A launch of the window went to another stream.
    mixed: AtomicBool,
}

impl Keys {
    pub(crate) const fn new() -> Self {
        Keys {
            ring: [const { AtomicU64::new(0) }; KEYS],
            stream: AtomicU64::new(0),
            mixed: AtomicBool::new(false),
        }
    }

    /// Launch `n` of the window, of `key`, on `stream` (the launch path).
    #[inline]
    pub fn put(&self, n: u64, key: u64, stream: CUstream) {
        self.ring[index(n, KEYS)].store(key, Ordering::Relaxed);
        let s = (stream as u64).wrapping_add(1);
        if self.stream.load(Ordering::Relaxed) != s {
            self.another_stream(s);
        }
    }

    #[cold]
    fn another_stream(&self, s: u64) {
        if let Err(first) = self
            .stream
            .compare_exchange(0, s, Ordering::Relaxed, Ordering::Relaxed)
            && first != s
        {
            self.mixed.store(true, Ordering::Relaxed);
        }
    }

    /// A new window (the controller, before opening the gate).
    pub fn open(&self) {
        self.stream.store(0, Ordering::Relaxed);
        self.mixed.store(false, Ordering::Relaxed);
    }

    /// Whether the window's launches went to more than one stream (its marks then say nothing
    /// of the others' queues).
    pub fn mixed(&self) -> bool {
        self.mixed.load(Ordering::Relaxed)
    }

    /// The keys of launches `from..to`, oldest first; those the ring no longer holds as 0.
    pub fn copy(&self, from: u64, to: u64, mut put: impl FnMut(u64)) {
        let kept = to.saturating_sub(KEYS as u64);
        for n in from..to {
            put(if n < kept {
                0
            } else {
                self.ring[index(n, KEYS)].load(Ordering::Relaxed)
            });
        }
    }
}

/// `n` modulo `len` (a power of two).
fn index(n: u64, len: usize) -> usize {
    // The mask keeps the value below `len`, a usize: the cast cannot truncate.
    #[allow(clippy::cast_possible_truncation)]
    let i = (n & (len as u64 - 1)) as usize;
    i
}

struct Slot {
    event: AtomicPtr<c_void>,
    /// Launches admitted before it.
    at: AtomicU64,
    /// The window it was recorded in.
    window: AtomicU64,
    /// The previous mark was still queued when this one was recorded.
    back_to_back: AtomicBool,
}

/// A device's marks: a ring of timing events, recorded by held launches (`head`) and consumed
/// in order by the controller (`tail`).
pub struct Marks {
    slots: [Slot; SLOTS],
    head: AtomicU64,
    tail: AtomicU64,
    /// A thread is recording a mark (the others skip theirs).
    recording: AtomicBool,
    /// Marks work in this process (off after any driver error).
    on: AtomicBool,
    /// The controller's window number.
    window: AtomicU64,
}

impl Marks {
    pub(crate) const fn new() -> Self {
        Marks {
            slots: [const {
                Slot {
                    event: AtomicPtr::new(core::ptr::null_mut()),
                    at: AtomicU64::new(0),
                    window: AtomicU64::new(0),
                    back_to_back: AtomicBool::new(false),
                }
            }; SLOTS],
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            recording: AtomicBool::new(false),
            on: AtomicBool::new(true),
            window: AtomicU64::new(0),
        }
    }

    /// A launch held by the pace, `at` launches into the window, records a mark on `stream`
    /// (skipped if another thread is recording one, `MARKS_IN_FLIGHT` are unread, or marks are
    /// off).
    #[cold]
    #[inline(never)]
    pub fn record(&self, stream: CUstream, at: u64) {
        if !self.on.load(Ordering::Acquire) || self.recording.swap(true, Ordering::Acquire) {
            return;
        }
        self.record_claimed(stream, at);
        self.recording.store(false, Ordering::Release);
    }

    fn record_claimed(&self, stream: CUstream, at: u64) {
        let head = self.head.load(Ordering::Acquire);
        let tail = self.tail.load(Ordering::Acquire);
        if head.saturating_sub(tail) >= MARKS_IN_FLIGHT as u64 {
            return;
        }
        let window = self.window.load(Ordering::Acquire);
        let slot = &self.slots[index(head, SLOTS)];
        let mut event = slot.event.load(Ordering::Acquire);
        if event.is_null() {
            let Some(e) = REAL.event_create() else {
                self.on.store(false, Ordering::Release);
                return;
            };
            slot.event.store(e, Ordering::Release);
            event = e;
        }
        // The previous mark, if the controller has not consumed it and it is of this window:
        // still queued means the launches between it and this one run back to back.
        let back_to_back = head > tail && {
            let prev = &self.slots[index(head - 1, SLOTS)];
            prev.window.load(Ordering::Acquire) == window
                && REAL.event_done(prev.event.load(Ordering::Acquire)) == Some(false)
        };
        if REAL.event_record(event, stream) != vgpu_sys::cuda::CUDA_SUCCESS {
            self.on.store(false, Ordering::Release);
            return;
        }
        slot.at.store(at, Ordering::Release);
        slot.window.store(window, Ordering::Release);
        slot.back_to_back.store(back_to_back, Ordering::Release);
        self.head.store(head + 1, Ordering::Release);
    }

    /// A new window (the controller): returns its number. The last window's marks were all
    /// consumed at its settle.
    pub fn open(&self) -> u64 {
        self.window.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The controller's look: consumes the marks the GPU has reached, in order, into `out`
    /// (those of `window` only; `prev` is the slot of the last one consumed, the start of the
    /// next timed segment). Stops at the first mark still queued.
    pub fn collect(&self, window: u64, now: u64, prev: &mut Option<u64>, out: &mut Vec<Seen>) {
        let head = self.head.load(Ordering::Acquire);
        let mut tail = self.tail.load(Ordering::Acquire);
        while tail < head {
            let slot = &self.slots[index(tail, SLOTS)];
            let event = slot.event.load(Ordering::Acquire);
            match REAL.event_done(event) {
                Some(true) => {}
                Some(false) => break,
                None => {
                    self.on.store(false, Ordering::Release);
                    *prev = None;
                    tail += 1;
                    continue;
                }
            }
            let mine = slot.window.load(Ordering::Acquire) == window;
            let elapsed = match *prev {
                Some(p) if mine && slot.back_to_back.load(Ordering::Acquire) => {
                    let from = self.slots[index(p, SLOTS)].event.load(Ordering::Acquire);
                    REAL.event_elapsed(from, event)
                }
                _ => None,
            };
            if mine {
                out.push((slot.at.load(Ordering::Acquire), elapsed, now));
            }
            *prev = Some(tail);
            tail += 1;
        }
        self.tail.store(tail, Ordering::Release);
    }

    /// In a forked child: the parent's events mean nothing there, and a thread that was
    /// recording did not survive.
    pub fn after_fork(&self) {
        for s in &self.slots {
            s.event.store(core::ptr::null_mut(), Ordering::Release);
        }
        self.head.store(0, Ordering::Release);
        self.tail.store(0, Ordering::Release);
        self.recording.store(false, Ordering::Release);
    }
}
