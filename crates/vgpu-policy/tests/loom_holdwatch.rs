//! Model check of the held bracket's watch (`vgpu_policy::holdwatch`) under loom.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p vgpu-policy --release --test loom_holdwatch`
//!
//! One thread places holds and lifts them (the launching thread; the last hold stays standing,
//! as when the thread stops inside its launch call), another runs the watchdog's steps and, on
//! `Step::Sleep(count)`, sleeps as a futex wait does: only if the alarm still holds that count
//! (checked with the sleep, atomically), until a wake. Every placement counts itself and then
//! wakes, so a sleeper whose count has moved is woken. Whatever the interleaving, the watchdog
//! never ends asleep on the current count while a hold stands, nor, where the controller renews
//! a standing hold (a queue hold), on a count from before the renewal.
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::SeqCst};
use vgpu_policy::holdwatch::{HoldWatch, Step, Words};

#[derive(Default)]
struct W {
    alarm: AtomicU32,
    since: AtomicU64,
    /// The watchdog took a hold over (the renewal model's record, read after the joins).
    taken: AtomicBool,
}

impl Words for W {
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
        self.since.store(v, SeqCst)
    }
    fn since_replace(&self, from: u64, to: u64) -> bool {
        self.since
            .compare_exchange(from, to, SeqCst, SeqCst)
            .is_ok()
    }
}

struct World {
    watch: HoldWatch<W>,
}

/// Runs `placer` beside the watchdog's steps (a few: the real loop is endless; the model must
/// be finite), where `standing` is what the watchdog does at `Step::Standing` (false: it sleeps
/// timed, not on the alarm, and the model ends there); then checks that the watchdog did not
/// end asleep on the alarm, unwoken, while a hold stands. Returns the watch as left.
fn watched(placer: fn(&HoldWatch<W>), standing: fn(&HoldWatch<W>) -> bool) -> Arc<World> {
    let w = Arc::new(World {
        watch: HoldWatch::default(),
    });
    let p = {
        let w = Arc::clone(&w);
        loom::thread::spawn(move || placer(&w.watch))
    };
    let watchdog = {
        let w = Arc::clone(&w);
        loom::thread::spawn(move || {
            // Returns the count it fell asleep on, if it did.
            let mut seen = 0;
            for _ in 0..4 {
                match w.watch.step(&mut seen) {
                    Step::Sleep(count) => {
                        // A futex wait: returns at once if the count moved.
                        if w.watch.words.alarm_load() != count {
                            continue;
                        }
                        return Some(count);
                    }
                    Step::Again => {}
                    Step::Standing(_) => {
                        if !standing(&w.watch) {
                            return None;
                        }
                    }
                }
                loom::thread::yield_now();
            }
            None
        })
    };
    p.join().unwrap();
    let asleep = watchdog.join().unwrap();
    // Asleep while a hold stands: then the count moved after it slept (a placement's or a
    // renewal's wake, which comes after its count, reaches it).
    if let Some(count) = asleep
        && w.watch.since() != 0
    {
        assert_ne!(
            w.watch.words.alarm_load(),
            count,
            "the watchdog sleeps through a standing hold, unwoken"
        );
    }
    w
}

#[test]
fn the_watchdog_never_sleeps_through_a_standing_hold() {
    loom::model(|| {
        // A hold placed and lifted, then one left standing (each placement then wakes a
        // sleeper, which the end check stands for).
        watched(
            |h| {
                h.placed(10);
                h.lifted();
                h.placed(20);
            },
            |_| false,
        );
    });
}

#[test]
fn the_watchdog_never_sleeps_through_a_renewed_hold() {
    loom::model(|| {
        // A hold placed, then renewed at each look that still wants it (each renewal counts
        // itself and then wakes, as a placement does). Where one stands the watchdog sleeps
        // until it is old enough, then reads when it was placed or renewed again and takes it
        // over if that is old enough: here any instant before 30 is, the last renewal's not.
        let w = watched(
            |h| {
                h.placed(10);
                let _ = h.renewed(10, 20);
                let _ = h.renewed(20, 30);
            },
            |h| {
                let since = h.since();
                since < 30 && {
                    if h.take_over(since) {
                        h.words.taken.store(true, SeqCst);
                    }
                    true
                }
            },
        );
        // A hold the watchdog took over is never renewed back into standing.
        let since = w.watch.since();
        if w.watch.words.taken.load(SeqCst) {
            assert_eq!(since, 0, "a hold taken over was renewed");
        } else {
            assert_eq!(since, 30, "renewed to the last look");
        }
    });
}
