//! Model check of the charge/release protocol (`vgpu_region::protocol`) under loom.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p vgpu-region --release --test loom`
//!
//! Threads stand for processes (one slot each) or, in `threads_sharing_a_slot`, for threads of
//! one process. Loom explores their interleavings (bounded preemptions) and memory orderings.
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, Ordering::SeqCst};
use vgpu_region::protocol::{self, Atomic64, Budget, NO_LIMIT};

struct A(AtomicU64);

impl Atomic64 for A {
    fn load(&self) -> u64 {
        self.0.load(SeqCst)
    }
    fn store(&self, v: u64) {
        self.0.store(v, SeqCst)
    }
    fn cas(&self, current: u64, new: u64) -> bool {
        self.0
            .compare_exchange(current, new, SeqCst, SeqCst)
            .is_ok()
    }
    fn fetch_add(&self, v: u64) -> u64 {
        self.0.fetch_add(v, SeqCst)
    }
    fn fetch_sub(&self, v: u64) -> u64 {
        self.0.fetch_sub(v, SeqCst)
    }
}

struct Dev {
    version: A,
    limit: A,
    used: Vec<A>,
    pending: Vec<A>,
    /// 1: the slot is held by a process; 0: FREE.
    live: Vec<A>,
}

impl Budget for Dev {
    type A = A;
    fn version(&self) -> &A {
        &self.version
    }
    fn limit(&self) -> &A {
        &self.limit
    }
    fn slots(&self) -> usize {
        self.used.len()
    }
    fn used(&self, s: usize) -> &A {
        &self.used[s]
    }
    fn pending(&self, s: usize) -> &A {
        &self.pending[s]
    }
    fn may_commit(&self, s: usize) -> bool {
        s < self.used.len() && self.live[s].load() != 0
    }
    fn pause(&self, _round: u32) -> bool {
        loom::thread::yield_now();
        true
    }
}

fn dev(slots: usize, limit: u64) -> Arc<Dev> {
    Arc::new(Dev {
        version: A(AtomicU64::new(0)),
        limit: A(AtomicU64::new(limit)),
        used: (0..slots).map(|_| A(AtomicU64::new(0))).collect(),
        pending: (0..slots).map(|_| A(AtomicU64::new(0))).collect(),
        live: (0..slots).map(|_| A(AtomicU64::new(1))).collect(),
    })
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.max_branches = 100_000;
    b.check(f);
}

/// Three threads: fewer preemptions, or the state space explodes.
fn model3(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(1);
    b.max_branches = 100_000;
    b.check(f);
}

/// Runs `charges[i] = (slot, bytes)` on one thread each; returns which were granted.
fn race(d: &Arc<Dev>, charges: &[(usize, u64)]) -> Vec<bool> {
    let handles: Vec<_> = charges
        .iter()
        .map(|&(slot, n)| {
            let d = d.clone();
            loom::thread::spawn(move || protocol::charge(&*d, slot, n, true).is_ok())
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn two_processes_over_the_limit_exactly_one_wins() {
    model(|| {
        let d = dev(2, 10);
        let granted = race(&d, &[(0, 6), (1, 6)]);
        assert_eq!(granted.iter().filter(|&&g| g).count(), 1);
        assert_eq!(protocol::total(&*d), 6);
        assert!(d.pending.iter().all(|p| p.load() == 0));
    });
}

#[test]
fn three_processes_exact_count() {
    model3(|| {
        let d = dev(3, 10);
        let granted = race(&d, &[(0, 4), (1, 4), (2, 4)]);
        assert_eq!(granted.iter().filter(|&&g| g).count(), 2);
        assert_eq!(protocol::total(&*d), 8);
    });
}

#[test]
fn threads_sharing_a_slot() {
    model3(|| {
        let d = dev(2, 10);
        let granted = race(&d, &[(0, 4), (0, 4), (1, 4)]);
        assert_eq!(granted.iter().filter(|&&g| g).count(), 2);
        assert_eq!(protocol::total(&*d), 8);
    });
}

#[test]
fn both_fit_both_granted() {
    model(|| {
        let d = dev(2, 10);
        let granted = race(&d, &[(0, 5), (1, 5)]);
        assert_eq!(granted, [true, true]);
        assert_eq!(protocol::total(&*d), 10);
    });
}

#[test]
fn release_racing_a_charge() {
    model(|| {
        let d = dev(2, 10);
        protocol::charge(&*d, 0, 6, true).unwrap();
        let d2 = d.clone();
        let releaser = loom::thread::spawn(move || {
            protocol::release(&*d2, 0, 6);
        });
        let granted = protocol::charge(&*d, 1, 8, true).is_ok();
        releaser.join().unwrap();
        // Granted only after the release; refused only while the 6 were still held.
        assert_eq!(protocol::total(&*d), if granted { 8 } else { 0 });
    });
}

#[test]
fn observer_never_sees_more_than_the_limit() {
    model(|| {
        let d = dev(2, 10);
        let d2 = d.clone();
        let watcher = loom::thread::spawn(move || {
            for _ in 0..2 {
                assert!(protocol::total(&*d2) <= 10);
            }
        });
        let granted = race(&d, &[(0, 7), (1, 7)]);
        watcher.join().unwrap();
        assert_eq!(granted.iter().filter(|&&g| g).count(), 1);
    });
}

#[test]
fn forced_charge_and_reap_keep_counts_consistent() {
    model(|| {
        let d = dev(2, NO_LIMIT);
        d.limit.store(10);
        let d2 = d.clone();
        let forcer = loom::thread::spawn(move || {
            protocol::charge(&*d2, 0, 9, false).unwrap();
            protocol::clear(&*d2, 0); // slot 0's process "dies" and is reaped
        });
        let granted = protocol::charge(&*d, 1, 5, true).is_ok();
        forcer.join().unwrap();
        assert_eq!(protocol::total(&*d), if granted { 5 } else { 0 });
        assert!(d.pending.iter().all(|p| p.load() == 0));
    });
}

/// A version word naming a FREE slot whose `pending` is stale (a file left by an earlier run):
/// racing chargers neither wait for it nor lose exactness.
#[test]
fn a_free_committers_stale_pending_is_not_waited_for() {
    model(|| {
        let d = dev(3, 10);
        d.live[2].store(0);
        d.pending[2].store(1);
        d.version.store((5 << protocol::SLOT_BITS) | 3);
        let granted = race(&d, &[(0, 6), (1, 6)]);
        assert_eq!(granted.iter().filter(|&&g| g).count(), 1);
        assert_eq!(protocol::total(&*d), 6);
    });
}

/// A process gives its slot back (exit) while one of its threads is mid-commit: the slot is
/// FREE when the thread finishes (its `pending` may wrap), and another process's charge must
/// still finish (it once waited for that `pending` for ever).
#[test]
fn a_slot_given_back_during_its_own_commit_never_blocks_others() {
    model(|| {
        let d = dev(2, 10);
        let d2 = d.clone();
        let leaver = loom::thread::spawn(move || {
            let _ = protocol::charge(&*d2, 0, 4, true);
        });
        let d3 = d.clone();
        let detacher = loom::thread::spawn(move || {
            d3.live[0].store(0);
            protocol::clear(&*d3, 0);
        });
        let granted = protocol::charge(&*d, 1, 6, true).is_ok();
        leaver.join().unwrap();
        detacher.join().unwrap();
        // Both fit: never refused, and nothing beyond the two charges is counted.
        assert!(granted);
        assert!(protocol::total(&*d) <= 10);
    });
}
