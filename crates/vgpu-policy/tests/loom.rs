//! Model check of the drain/capture exclusion (`vgpu_policy::exclusion`) under loom.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p vgpu-policy --release --test loom`
//!
//! Threads stand for the program's capturing threads and the compute controllers. Each tries a
//! few times to get in (the callers wait between tries), marks itself inside, checks that the
//! other kind is not inside, and leaves. Loom treats `SeqCst` accesses as acquire/release (its
//! documented limitation), so without the protocol's `SeqCst` fence it finds an overlap in this
//! Dekker pattern (tried: it does). With the fence the pattern holds in loom's model as in C++'s.
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU32, Ordering::SeqCst};
use vgpu_policy::exclusion::{Counter, Exclusion};

#[derive(Default)]
struct C(AtomicU32);

impl Counter for C {
    fn load(&self) -> u32 {
        self.0.load(SeqCst)
    }
    fn increment(&self) {
        self.0.fetch_add(1, SeqCst);
    }
    fn decrement(&self) {
        let _ = self.0.fetch_update(SeqCst, SeqCst, |c| c.checked_sub(1));
    }
    fn store(&self, v: u32) {
        self.0.store(v, SeqCst)
    }
    fn fence(&self) {
        loom::sync::atomic::fence(SeqCst);
    }
}

#[derive(Default)]
struct World {
    x: Exclusion<C>,
    capturing: AtomicU32,
    draining: AtomicU32,
}

/// Tries a few times (the callers wait between tries; a bounded loop keeps the model finite).
const TRIES: usize = 3;

fn capture(w: &World) {
    for _ in 0..TRIES {
        if w.x.try_begin_capture().is_ok() {
            w.capturing.fetch_add(1, SeqCst);
            assert_eq!(w.draining.load(SeqCst), 0, "a drain ran inside a capture");
            w.capturing.fetch_sub(1, SeqCst);
            w.x.end_capture();
            return;
        }
        loom::thread::yield_now();
    }
}

fn drain(w: &World) {
    for _ in 0..TRIES {
        if w.x.try_begin_drain() {
            w.draining.fetch_add(1, SeqCst);
            assert_eq!(w.capturing.load(SeqCst), 0, "a capture ran inside a drain");
            w.draining.fetch_sub(1, SeqCst);
            w.x.end_drain();
            return;
        }
        loom::thread::yield_now();
    }
}

fn model(threads: Vec<fn(&World)>, preemptions: usize) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    b.check(move || {
        let w = Arc::new(World::default());
        let hs: Vec<_> = threads
            .iter()
            .map(|&f| {
                let w = Arc::clone(&w);
                loom::thread::spawn(move || f(&w))
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(w.x.captures.load(), 0);
        assert_eq!(w.x.draining.load(), 0);
    });
}

#[test]
fn a_capture_and_a_drain_never_overlap() {
    model(vec![capture, drain], 3);
}

#[test]
fn two_captures_and_a_drain_never_overlap() {
    model(vec![capture, capture, drain], 2);
}

#[test]
fn a_capture_and_two_drains_never_overlap() {
    model(vec![capture, drain, drain], 2);
}
