//! The watchdog of a held bracket: no hold on a stream stands unwatched.
//!
//! The preload holds a sampled launch's stream on a word of pinned host memory until the
//! launch's timing events are recorded (`vgpu-preload`'s `marks.rs`); the launching thread lifts
//! it. Should that thread stop inside its launch call (a driver that waits for the held
//! stream), a watchdog thread lifts the hold after a while, and sleeps while no hold stands.
//!
//! A thread that places a hold notes when (`since`; 0: none), then counts the placement in the
//! alarm word and wakes the watchdog; a queue hold's controller renews its hold the same way at
//! each look that still wants it (`since` moved on by a compare-exchange, counted, woken). The
//! watchdog sleeps only on the count it last looked at (a futex wait on the alarm word returns
//! at once if the count has moved), and reads `since` after the count, so every placement and
//! renewal counted is seen: it never sleeps through a standing hold. (A first version lowered
//! a flag and re-read `since` behind a fence, a Dekker pattern that loom's model of `SeqCst`
//! cannot confirm; a counter needs no fence.)
//!
//! Generic over the two words so that `loom` can check it (`tests/loom_holdwatch.rs`).
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};

/// How long a hold stands at most past its placement or its last renewal: the watchdog lifts
/// it then (a bracket's launching thread stopped inside its launch call; a queue hold whose
/// controller is late to renew or lift it).
pub const HOLD_MAX_NS: u64 = 2_000_000;

/// The atomic operations the watch uses (all `SeqCst`).
pub trait Words: Sync {
    /// The alarm: placements counted, wrapping.
    fn alarm_load(&self) -> u32;
    /// Counts one placement.
    fn alarm_increment(&self);
    /// When the standing hold was placed or last renewed (0: none).
    fn since_load(&self) -> u64;
    /// Stores it.
    fn since_store(&self, v: u64);
    /// Replaces `from` by `to` if it is still `from`.
    fn since_replace(&self, from: u64, to: u64) -> bool;
}

/// The words of the preload: the alarm is also the watchdog's futex word.
#[derive(Debug, Default)]
pub struct Atomics {
    /// The alarm.
    pub alarm: AtomicU32,
    /// When the standing hold was placed.
    pub since: AtomicU64,
}

impl Atomics {
    /// No hold, nothing counted.
    pub const fn new() -> Self {
        Atomics {
            alarm: AtomicU32::new(0),
            since: AtomicU64::new(0),
        }
    }
}

impl Words for Atomics {
    fn alarm_load(&self) -> u32 {
        self.alarm.load(SeqCst)
    }
    fn alarm_increment(&self) {
        self.alarm.fetch_add(1, SeqCst);
    }
    fn since_load(&self) -> u64 {
        self.since.load(SeqCst)
    }
    fn since_store(&self, v: u64) {
        self.since.store(v, SeqCst);
    }
    fn since_replace(&self, from: u64, to: u64) -> bool {
        self.since
            .compare_exchange(from, to, SeqCst, SeqCst)
            .is_ok()
    }
}

/// What the watchdog does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Sleep while the alarm's word holds this count (a futex wait on it).
    Sleep(u32),
    /// Look again at once.
    Again,
    /// A hold placed or last renewed at this instant stands: look again once it is old enough
    /// to lift.
    Standing(u64),
}

/// A held bracket's watch: the placing thread's side and the watchdog's.
#[derive(Debug, Default)]
pub struct HoldWatch<W> {
    /// The words.
    pub words: W,
}

impl HoldWatch<Atomics> {
    /// No hold, nothing counted.
    pub const fn new() -> Self {
        HoldWatch {
            words: Atomics::new(),
        }
    }
}

impl<W: Words> HoldWatch<W> {
    /// A hold was placed at `now` (noted as at least 1); the caller then wakes the watchdog.
    pub fn placed(&self, now: u64) {
        self.words.since_store(now.max(1));
        self.words.alarm_increment();
    }

    /// The hold placed (or last renewed) at `since` is renewed at `now` (noted as at least 1),
    /// if it still stands: true if so (the watchdog lifts it [`HOLD_MAX_NS`] after `now`; the
    /// caller then wakes it, as after a placement), false if the watchdog took it over or it
    /// was lifted.
    pub fn renewed(&self, since: u64, now: u64) -> bool {
        if since == 0 || !self.words.since_replace(since, now.max(1)) {
            return false;
        }
        self.words.alarm_increment();
        true
    }

    /// The placing thread lifted its hold.
    pub fn lifted(&self) {
        self.words.since_store(0);
    }

    /// The hold placed or renewed at `since` is taken over by the watchdog (or a drain), if it
    /// is still the standing one: true if so (lift it), false if it was lifted, renewed since,
    /// or another was placed.
    pub fn take_over(&self, since: u64) -> bool {
        since != 0 && self.words.since_replace(since, 0)
    }

    /// When the standing hold was placed or last renewed (0: none).
    pub fn since(&self) -> u64 {
        self.words.since_load()
    }

    /// The watchdog's next step; `seen`: the count it last looked at (0 at first).
    pub fn step(&self, seen: &mut u32) -> Step {
        let count = self.words.alarm_load();
        if count == *seen {
            return Step::Sleep(count);
        }
        *seen = count;
        match self.words.since_load() {
            0 => Step::Again,
            since => Step::Standing(since),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_sleeps_on_the_count_it_looked_at_and_sees_every_placement() {
        let w = HoldWatch::new();
        let mut seen = 0;
        assert_eq!(w.step(&mut seen), Step::Sleep(0));
        w.placed(5);
        assert_eq!(w.step(&mut seen), Step::Standing(5));
        assert_eq!(w.step(&mut seen), Step::Sleep(1), "nothing new placed");
        w.lifted();
        w.placed(7);
        assert_eq!(w.step(&mut seen), Step::Standing(7));
        assert!(w.take_over(7));
        assert!(!w.take_over(7), "taken over once");
        assert_eq!(w.step(&mut seen), Step::Sleep(2));
        w.placed(9);
        w.lifted();
        assert_eq!(
            w.step(&mut seen),
            Step::Again,
            "placed and lifted before it looked"
        );
        w.placed(0);
        assert_eq!(w.since(), 1, "a hold at instant 0 is noted as 1");
    }

    #[test]
    fn a_renewed_hold_is_seen_anew_and_one_taken_over_is_not_renewed() {
        let w = HoldWatch::new();
        let mut seen = 0;
        w.placed(5);
        assert_eq!(w.step(&mut seen), Step::Standing(5));
        assert!(w.renewed(5, 8));
        assert!(
            !w.take_over(5),
            "the watchdog's look at the old instant lifts nothing"
        );
        assert_eq!(
            w.step(&mut seen),
            Step::Standing(8),
            "it looks again at the new one"
        );
        assert!(
            !w.renewed(5, 9),
            "renewed from an instant that no longer stands"
        );
        assert!(w.take_over(8));
        assert!(!w.renewed(8, 10), "taken over: not renewed");
        assert_eq!(w.since(), 0);
        assert!(!w.renewed(0, 11), "nothing stands");
    }
}
