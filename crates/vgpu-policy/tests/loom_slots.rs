//! Model check of the node token's waiter slots (`vgpu_policy::slots`) under loom.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p vgpu-policy --release --test loom_slots`
//!
//! A holder releases the token while two waiters, A (the earlier key) and B, announce their
//! keys and try to take it (a bounded number of tries: the real waiters sleep on the node
//! file's generation word between tries, and the grace never expires in this model, since the
//! clock stands still). Checked in every interleaving:
//! * at most one process holds the token at a time (the compare-exchange);
//! * if A's key was published before the release, B never takes the token before A has had
//!   it (key order: the taker reads the holder word first, then the slots);
//! * the token never stays free while an announced waiter that should take it keeps trying
//!   (someone takes it).
//!
//! A second model puts the earlier waiter in the overflow slot (the table was full) and lets it
//! claim nothing: B must not pass it either. A third has A claim its slot during the model,
//! above the scan bound `high`: the claim raises `high` before A publishes, so B still sees A.
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, Ordering::SeqCst};
use vgpu_policy::slots::{Seat, Slot, Table, Word};

#[derive(Default)]
struct W(AtomicU64);

impl Word for W {
    fn load(&self) -> u64 {
        self.0.load(SeqCst)
    }
    fn store(&self, v: u64) {
        self.0.store(v, SeqCst)
    }
    fn cas(&self, old: u64, new: u64) -> Result<u64, u64> {
        self.0.compare_exchange(old, new, SeqCst, SeqCst)
    }
}

const NOW: u64 = 1_000_000_000;
const HOLDER: u64 = 9;
const A: u64 = 1;
const B: u64 = 2;

struct World {
    holder: W,
    freed_at: W,
    last_holder: W,
    slots: [Slot<W>; 2],
    high: W,
    overflow: Slot<W>,
    /// Processes inside (holding the token).
    inside: AtomicU64,
    /// Who took the token first after the release.
    first: AtomicU64,
    /// Whether A's key was published when the holder released.
    a_before_release: AtomicU64,
}

impl World {
    fn table(&self) -> Table<'_, W> {
        Table {
            holder: &self.holder,
            freed_at: &self.freed_at,
            last_holder: &self.last_holder,
            slots: &self.slots,
            high: &self.high,
            always: 0,
            overflow: &self.overflow,
        }
    }
}

fn new_world() -> World {
    let w = World {
        holder: W::default(),
        freed_at: W::default(),
        last_holder: W::default(),
        slots: [Slot::default(), Slot::default()],
        high: W::default(),
        overflow: Slot::default(),
        inside: AtomicU64::new(1),
        first: AtomicU64::new(0),
        a_before_release: AtomicU64::new(0),
    };
    w.holder.store(HOLDER);
    // Slots claimed at start (claiming is a plain compare-exchange on an owner word).
    w.slots[0].owner.store(A);
    w.slots[0].beat.store(NOW);
    w.slots[1].owner.store(B);
    w.slots[1].beat.store(NOW);
    w.high.store(2);
    w
}

/// The holder's release; first records whether A's key (at `a`) was published by then. That is
/// read with a read-modify-write (a compare-exchange of 0 with 0), which reads the latest value:
/// loom models `SeqCst` loads as acquire loads, which may read an older one (and a plain load
/// here never saw the overflow's key, which A publishes by compare-exchange, so the check was
/// vacuous). Only A's key word is read: its `owner` could read older still.
fn release(w: &World, a: Place) {
    w.inside.fetch_sub(1, SeqCst);
    let word = match a {
        Place::Slot(i) | Place::Claims(i) => &w.slots[i].key,
        Place::Overflow => &w.overflow.key,
    };
    let published = word.cas(0, 0).is_err();
    w.a_before_release.store(u64::from(published), SeqCst);
    w.table().release(HOLDER, NOW);
}

/// The wrong order, for the negative test: the slots read before the holder word.
fn take_reading_slots_first(w: &World, me: u64, slot: usize) -> bool {
    let t = w.table();
    let mut scratch = Vec::new();
    t.waiters(&mut scratch);
    if t.holder.load() != 0
        || !vgpu_policy::token::may_take(me, &scratch, NOW, t.freed_at.load())
        || t.holder.cas(0, me).is_err()
    {
        return false;
    }
    t.withdraw(slot);
    true
}

/// Where a waiter of the models sits.
#[derive(Clone, Copy)]
enum Place {
    /// Its slot, claimed before the model starts.
    Slot(usize),
    /// A slot it claims at its start (above the scan bound until then).
    Claims(usize),
    /// The overflow slot.
    Overflow,
}

fn waiter_with(w: &World, me: u64, slot: usize, key: u64, tries: usize, wrong: bool) {
    waiter_at(w, me, Place::Slot(slot), key, tries, wrong)
}

/// A waiter at `place`: announces `key`, then tries to take the token a few times (`wrong`:
/// reading the slots first); inside, checks that it is alone, then releases.
fn waiter_at(w: &World, me: u64, place: Place, key: u64, tries: usize, wrong: bool) {
    let t = w.table();
    let seat = match place {
        Place::Slot(i) => {
            t.announce(i, key, false, NOW);
            Seat::Slot(i)
        }
        Place::Claims(i) => {
            assert_eq!(t.claim(me, NOW), Some(i));
            t.announce(i, key, false, NOW);
            Seat::Slot(i)
        }
        Place::Overflow => t.announce_overflow(key, false, NOW),
    };
    let slot = match seat {
        Seat::Slot(i) => i,
        Seat::Overflow(_) => usize::MAX,
    };
    let mut scratch = Vec::new();
    for _ in 0..tries {
        let took = if wrong {
            take_reading_slots_first(w, me, slot)
        } else {
            t.try_take(me, Some(seat), NOW, &mut scratch)
        };
        if took {
            assert_eq!(w.inside.fetch_add(1, SeqCst), 0, "two holders");
            let _ = w.first.compare_exchange(0, me, SeqCst, SeqCst);
            if me == B && w.a_before_release.load(SeqCst) == 1 {
                assert_eq!(
                    w.first.load(SeqCst),
                    A,
                    "B passed A, whose key was published before the release"
                );
            }
            w.inside.fetch_sub(1, SeqCst);
            t.release(me, NOW);
            return;
        }
        loom::thread::yield_now();
    }
}

/// Explores every interleaving (preemption bound 3) of a holder releasing while A (at `a`, the
/// earlier key) and B (slot `b`, reading in the wrong order if `wrong`) wait; `setup` arranges
/// the table first.
fn model(setup: fn(&World), a: Place, b: usize, wrong: bool) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(move || {
        let w = Arc::new(new_world());
        setup(&w);
        let wa = Arc::clone(&w);
        let wb = Arc::clone(&w);
        let ta = loom::thread::spawn(move || waiter_at(&wa, A, a, NOW - 20, 3, false));
        let tb = loom::thread::spawn(move || waiter_with(&wb, B, b, NOW - 10, 3, wrong));
        release(&w, a);
        ta.join().unwrap();
        tb.join().unwrap();
        assert_eq!(w.inside.load(SeqCst), 0);
    });
}

#[test]
fn the_earliest_published_waiter_gets_the_token_and_never_two_at_once() {
    model(|_| {}, Place::Slot(0), 1, false);
}

/// The check can fail: reading the slots before the holder word lets B pass A.
#[test]
#[should_panic(expected = "B passed A")]
fn reading_the_slots_before_the_holder_word_lets_a_later_waiter_pass() {
    model(|_| {}, Place::Slot(0), 1, true);
}

/// The earlier waiter A has no slot (the table was full): it waits in the overflow slot, and B
/// (a slot of its own, a later key) must not pass it.
#[test]
fn a_waiter_without_a_slot_is_not_passed_by_a_later_one() {
    model(|w| w.slots[0].owner.store(0), Place::Overflow, 1, false);
}

/// A claims slot 1 during the model, above the scan bound (`high` = 1 at the start: only B's
/// slot 0 is scanned): its claim raises the bound before it publishes.
#[test]
fn a_slot_claimed_above_the_scan_bound_is_seen() {
    model(
        |w| {
            w.slots[0].owner.store(B);
            w.slots[1].owner.store(0);
            w.high.store(1);
        },
        Place::Claims(1),
        0,
        false,
    );
}
