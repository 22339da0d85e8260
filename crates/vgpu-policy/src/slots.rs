//! The waiter slot table of a GPU's node token file: how waiters announce their keys and how
//! a free token is taken in key order ([`crate::token`] decides; this is the shared-memory
//! protocol around it).
//!
//! Words, all `u64`, all accessed `SeqCst` (the layout in docs/COMPUTE.md places them after the
//! existing words of the node file, so libraries that know nothing of them keep the holder word
//! as a plain mutex):
//!
//! * `holder`: 0 free, else the holder's id (the existing mutex word);
//! * `freed_at`, `last_holder`: written by a releaser *before* it clears `holder`;
//! * per slot: `owner` (0 empty, else a process id), `key` (a [`token::key_word`], 0 when not
//!   waiting), `served` (when the owner last took the token), `beat` (heartbeat);
//! * `high`: every slot at or above it is unused (a claim raises it before its owner publishes
//!   anything), so a scan reads only the slots in use, never fewer than [`Table::always`] (the
//!   slots of version-2 libraries, which do not know the word);
//! * the overflow slot: the waiters without a slot of their own (the table is full) publish
//!   there together, at the earliest of their keys (a compare-exchange that only lowers it);
//!   they appear as one waiter with the id [`token::OVERFLOW`], and the earliest of them takes
//!   the token when that waiter is first in line.
//!
//! The orders that matter (checked by `tests/loom_slots.rs`):
//! 1. A waiter publishes its key **before** it looks at the token (A3: announce before
//!    sleeping), and withdraws it only after taking the token or giving up; a claim raises
//!    `high` before the key is published.
//! 2. A waiter that finds the token free reads the holder word **first**, then `high` and the
//!    slots, and takes the token by compare-exchange. So if a waiter's key was published before
//!    the token was released, every waiter that sees the token free also sees that key, and
//!    only its owner (or, after [`token::HANDOFF_GRACE`], anyone) takes it. Mutual exclusion
//!    rests on the compare-exchange alone, whatever the slots say.
//!
//! Nothing read here is trusted beyond its bounds: `high` is clamped to the table, a loop on a
//! word another process keeps changing gives up after [`CAS_TRIES`].
//!
//! Generic over the word type so that loom can check it, as [`crate::exclusion`] is.
use crate::token::{self, OVERFLOW, Waiter};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

/// The atomic operations on one shared word (all `SeqCst`).
pub trait Word: Sync {
    /// Load.
    fn load(&self) -> u64;
    /// Store.
    fn store(&self, v: u64);
    /// Compare-exchange; `Err` carries the value found.
    fn cas(&self, old: u64, new: u64) -> Result<u64, u64>;
}

impl Word for AtomicU64 {
    fn load(&self) -> u64 {
        AtomicU64::load(self, SeqCst)
    }
    fn store(&self, v: u64) {
        AtomicU64::store(self, v, SeqCst)
    }
    fn cas(&self, old: u64, new: u64) -> Result<u64, u64> {
        self.compare_exchange(old, new, SeqCst, SeqCst)
    }
}

/// One waiter slot (32 bytes in the file).
#[derive(Debug, Default)]
#[repr(C)]
pub struct Slot<W> {
    /// 0: empty; else the owning process's token id.
    pub owner: W,
    /// A [`token::key_word`], or 0 while not waiting.
    pub key: W,
    /// When the owner last took the token.
    pub served: W,
    /// The owner's heartbeat.
    pub beat: W,
}

/// Slots in a node file of layout version 3 (docs/COMPUTE.md). More than one GPU can hold
/// contexts (each reserves hundreds of MiB), and as many processes as HAMi's region has slots
/// for one container; processes past it still take turns, through the overflow slot.
pub const SLOTS: usize = 1024;

/// The slots of layout version 2 (the first ones; a version-2 library uses only these).
pub const V2_SLOTS: usize = 32;

/// How many times a compare-exchange loop on a shared word is tried before it gives up (another
/// process that keeps changing the word must not hold this one in a loop).
pub const CAS_TRIES: usize = 64;

/// Where a waiter publishes its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seat {
    /// Its own slot (its index).
    Slot(usize),
    /// The overflow slot (the table was full), with the key word it published there.
    Overflow(u64),
}

/// The liveness locks of the slots: a lock per slot that its owner holds while it lives (in the
/// node file, an open-file-description lock on a byte of its own, which the kernel drops when the
/// process dies). A claim takes the lock first, so a live owner's slot is never taken over,
/// whatever the clocks say of its heartbeat.
pub trait SlotLocks {
    /// Takes the lock of slot `i` if nobody holds it (without waiting).
    fn try_lock(&self, i: usize) -> bool;
    /// Gives the lock of slot `i` back.
    fn unlock(&self, i: usize);
}

/// No locks (a model, or a table whose owners all run in one process): a claim goes by the
/// heartbeats alone.
pub struct NoLocks;

impl SlotLocks for NoLocks {
    fn try_lock(&self, _: usize) -> bool {
        true
    }
    fn unlock(&self, _: usize) {}
}

/// The futex wake bit of a waiter in `seat` (a release wakes the first two in line by their
/// bits, [`Table::wake_bits`]): slot `i` waits on bit `i % 31`, the overflow's waiters (and a
/// waiter with no seat) on bit 31. Waiters of older libraries wait on every bit, so every
/// release still wakes them.
pub fn wake_bit(seat: Option<Seat>) -> u32 {
    match seat {
        Some(Seat::Slot(i)) => 1 << (i % 31),
        _ => 1 << 31,
    }
}

/// The token's words and its slot table, as mapped from the node file.
pub struct Table<'a, W> {
    /// The holder word (the mutex).
    pub holder: &'a W,
    /// When the token was last released.
    pub freed_at: &'a W,
    /// Who last released it.
    pub last_holder: &'a W,
    /// The waiter slots.
    pub slots: &'a [Slot<W>],
    /// The scan bound: slots at and above it are unused.
    pub high: &'a W,
    /// The slots scanned whatever `high` says (those of libraries that do not raise it).
    pub always: usize,
    /// The overflow slot (its `owner` is unused).
    pub overflow: &'a Slot<W>,
}

impl<W: Word> Table<'_, W> {
    /// The slots a scan reads: below `high` (clamped to the table), and never fewer than
    /// [`Self::always`].
    pub fn in_use(&self) -> &[Slot<W>] {
        let high = usize::try_from(self.high.load()).unwrap_or(usize::MAX);
        &self.slots[..high.max(self.always).min(self.slots.len())]
    }

    /// Raises `high` to at least `n`.
    fn raise_high(&self, n: u64) {
        for _ in 0..CAS_TRIES {
            let h = self.high.load();
            if h >= n || self.high.cas(h, n).is_ok() {
                return;
            }
        }
    }

    /// Claims a slot for process `me`, by the heartbeats alone ([`Self::claim_locked`] with
    /// [`NoLocks`]).
    pub fn claim(&self, me: u64, now: u64) -> Option<usize> {
        self.claim_locked(me, now, &NoLocks)
    }

    /// Claims a slot for process `me`: the one it owns already, or an empty one, or one whose
    /// owner's heartbeat is not fresh ([`token::beat_fresh`]) and whose lock nobody holds (its
    /// owner died: a live owner of this library keeps its lock however old its beat looks). The
    /// claimer keeps the slot's lock. `None` when the table is full (the process then waits in
    /// the overflow slot).
    pub fn claim_locked(&self, me: u64, now: u64, locks: &impl SlotLocks) -> Option<usize> {
        for (i, s) in self.slots.iter().enumerate() {
            let o = s.owner.load();
            if o == me {
                return Some(i);
            }
            let free = o == 0 || !token::beat_fresh(s.beat.load(), now);
            if !free || !locks.try_lock(i) {
                continue;
            }
            if s.owner.cas(o, me).is_ok() {
                s.key.store(0);
                s.served.store(0);
                s.beat.store(now);
                self.raise_high(i as u64 + 1);
                return Some(i);
            }
            locks.unlock(i);
        }
        None
    }

    /// Gives a claimed slot back (at exit; a dead process's slot goes stale instead). The
    /// caller then gives its lock back.
    pub fn unclaim(&self, slot: usize, me: u64) {
        let s = &self.slots[slot];
        s.key.store(0);
        let _ = s.owner.cas(me, 0);
    }

    /// Publishes (or refreshes) the owner's key: due time `key`, `fresh` (A3: before looking
    /// at the token, and before every sleep).
    pub fn announce(&self, slot: usize, key: u64, fresh: bool, now: u64) {
        let s = &self.slots[slot];
        s.beat.store(now);
        s.key.store(token::key_word(key, fresh));
    }

    /// Publishes the key of a waiter without a slot in the overflow slot (lowering its key to
    /// this one if it is later, refreshing its heartbeat); returns the seat to take the token
    /// with ([`Self::try_take`]).
    pub fn announce_overflow(&self, key: u64, fresh: bool, now: u64) -> Seat {
        let o = self.overflow;
        let word = token::key_word(key, fresh);
        o.beat.store(now);
        for _ in 0..CAS_TRIES {
            let cur = o.key.load();
            if cur != 0 && cur & !1 <= word & !1 {
                break;
            }
            if o.key.cas(cur, word).is_ok() {
                break;
            }
        }
        Seat::Overflow(word)
    }

    /// Withdraws the key (no longer waiting).
    pub fn withdraw(&self, slot: usize) {
        self.slots[slot].key.store(0);
    }

    /// Withdraws a waiter's key from the overflow slot if it is the one published there (the
    /// later keys of other waiters without a slot are published again at their next look).
    pub fn withdraw_overflow(&self, word: u64) {
        let _ = self.overflow.key.cas(word, 0);
    }

    /// The published waiters, into `out` (cleared first; the caller keeps it, so that the
    /// controller does not allocate per look). The waiters without a slot appear as one, with
    /// the id [`OVERFLOW`].
    pub fn waiters(&self, out: &mut Vec<Waiter>) {
        self.scan(out);
    }

    /// [`Self::waiters`]; returns the overflow slot's key word as it read it.
    fn scan(&self, out: &mut Vec<Waiter>) -> u64 {
        out.clear();
        for s in self.in_use() {
            let id = s.owner.load();
            if id == 0 || id == OVERFLOW {
                continue;
            }
            if let Some((key, fresh)) = token::parse_key_word(s.key.load()) {
                out.push(Waiter {
                    id,
                    key,
                    fresh,
                    served: s.served.load(),
                    beat: s.beat.load(),
                });
            }
        }
        let o = self.overflow;
        let word = o.key.load();
        if let Some((key, fresh)) = token::parse_key_word(word) {
            out.push(Waiter {
                id: OVERFLOW,
                key,
                fresh,
                served: o.served.load(),
                beat: o.beat.load(),
            });
        }
        word
    }

    /// Tries to take the free token for `me` (from its `seat`, if it published a key) under A2:
    /// reads the holder word first, then the slots; takes it by compare-exchange if
    /// [`token::may_take`] says so (a waiter of the overflow slot whose key is the earliest
    /// there takes as [`OVERFLOW`]). On success its key is withdrawn and `served` set; when the
    /// overflow was first in line, its key is cleared (taken by its earliest waiter, or passed
    /// over after the grace: the live ones publish theirs again at their next look).
    pub fn try_take(
        &self,
        me: u64,
        seat: Option<Seat>,
        now: u64,
        scratch: &mut Vec<Waiter>,
    ) -> bool {
        if self.holder.load() != 0 {
            return false;
        }
        let overflow = self.scan(scratch);
        let taker = match seat {
            Some(Seat::Overflow(word)) if overflow != 0 && word & !1 <= overflow & !1 => OVERFLOW,
            _ => me,
        };
        if !token::may_take(taker, scratch, now, self.freed_at.load()) {
            return false;
        }
        let first = token::winner(scratch, now);
        if self.holder.cas(0, me).is_err() {
            return false;
        }
        if let Some(Seat::Slot(i)) = seat {
            self.slots[i].served.store(now);
            self.withdraw(i);
        }
        if taker == OVERFLOW {
            self.overflow.served.store(now);
        }
        if first == Some(OVERFLOW) {
            let _ = self.overflow.key.cas(overflow, 0);
        }
        true
    }

    /// Releases the token held by `me`: records who and when, then frees the holder word (the
    /// caller then bumps the generation and wakes the next in line: [`Self::wake_bits`]).
    pub fn release(&self, me: u64, now: u64) {
        self.last_holder.store(me);
        self.freed_at.store(now);
        let _ = self.holder.cas(me, 0);
    }

    /// The futex bits a release wakes: those of the first two in line ([`token::next_in_line`],
    /// [`wake_bit`]); bit 31 alone when nobody is (it wakes the waiters of older libraries,
    /// which wait on every bit, and those without a seat).
    pub fn wake_bits(&self, now: u64, scratch: &mut Vec<Waiter>) -> u32 {
        self.scan(scratch);
        let mut bits = 0;
        for id in token::next_in_line(scratch, now).into_iter().flatten() {
            let seat = if id == OVERFLOW {
                None
            } else {
                self.in_use()
                    .iter()
                    .position(|s| s.owner.load() == id)
                    .map(Seat::Slot)
            };
            bits |= wake_bit(seat);
        }
        if bits == 0 { wake_bit(None) } else { bits }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    const MS: u64 = 1_000_000;

    struct File {
        holder: AtomicU64,
        freed_at: AtomicU64,
        last_holder: AtomicU64,
        slots: Vec<Slot<AtomicU64>>,
        high: AtomicU64,
        overflow: Slot<AtomicU64>,
    }

    fn file_of(n: usize) -> File {
        File {
            holder: AtomicU64::new(0),
            freed_at: AtomicU64::new(0),
            last_holder: AtomicU64::new(0),
            slots: (0..n).map(|_| Slot::default()).collect(),
            high: AtomicU64::new(0),
            overflow: Slot::default(),
        }
    }

    fn file() -> File {
        file_of(4)
    }

    fn table(f: &File) -> Table<'_, AtomicU64> {
        Table {
            holder: &f.holder,
            freed_at: &f.freed_at,
            last_holder: &f.last_holder,
            slots: &f.slots,
            high: &f.high,
            always: 0,
            overflow: &f.overflow,
        }
    }

    #[test]
    fn the_earliest_announced_waiter_takes_the_released_token() {
        let f = file();
        let t = table(&f);
        let now = 1000 * MS;
        let mut scratch = Vec::new();
        let (a, b) = (t.claim(1, now).unwrap(), t.claim(2, now).unwrap());
        assert_eq!(t.claim(1, now), Some(a), "a process keeps its slot");
        f.holder.store(9, SeqCst);
        t.announce(a, now - 20 * MS, false, now);
        t.announce(b, now - 30 * MS, false, now);
        let (sa, sb) = (Some(Seat::Slot(a)), Some(Seat::Slot(b)));
        assert!(!t.try_take(1, sa, now, &mut scratch), "held");
        t.release(9, now);
        assert_eq!(f.last_holder.load(SeqCst), 9);
        assert_eq!(t.wake_bits(now, &mut scratch), wake_bit(sa) | wake_bit(sb));
        assert!(!t.try_take(1, sa, now, &mut scratch), "B is earlier");
        assert!(t.try_take(2, sb, now, &mut scratch));
        assert_eq!(f.holder.load(SeqCst), 2);
        assert_eq!(f.slots[b].key.load(SeqCst), 0, "withdrawn on taking");
        assert_eq!(f.slots[b].served.load(SeqCst), now);
        t.release(2, now + MS);
        assert!(t.try_take(1, sa, now + MS, &mut scratch));
    }

    #[test]
    fn a_full_table_or_a_dead_owner() {
        let f = file();
        let t = table(&f);
        let now = 1000 * MS;
        for id in 1..=4 {
            assert!(t.claim(id, now).is_some());
        }
        assert_eq!(t.claim(5, now), None, "full");
        // Slot owners' heartbeats go stale: a newcomer takes one over.
        assert_eq!(t.claim(5, now + 501 * MS), Some(0));
        t.unclaim(0, 1);
        assert_eq!(
            f.slots[0].owner.load(SeqCst),
            5,
            "only its owner gives a slot back"
        );
        t.unclaim(0, 5);
        assert_eq!(f.slots[0].owner.load(SeqCst), 0);
        // Without a seat, a process takes a free token nobody eligible waits for.
        let mut scratch = Vec::new();
        assert!(t.try_take(6, None, now, &mut scratch));
    }

    /// Locks held by the owners in `held` (a live owner's lock: the kernel's, in the node file).
    struct Held(RefCell<Vec<usize>>);

    impl SlotLocks for Held {
        fn try_lock(&self, i: usize) -> bool {
            let mut h = self.0.borrow_mut();
            if h.contains(&i) {
                return false;
            }
            h.push(i);
            true
        }
        fn unlock(&self, i: usize) {
            self.0.borrow_mut().retain(|&j| j != i);
        }
    }

    #[test]
    fn a_live_owners_slot_is_never_taken_over_whatever_its_beat_says() {
        // A claimer whose clock runs seconds ahead sees every beat as stale; before, it took
        // over the slots of live processes. A live owner holds its slot's lock: only a slot
        // whose lock is free (its owner died) and whose beat is not fresh is taken over.
        let f = file_of(2);
        let t = table(&f);
        let now = 1000 * MS;
        let locks = Held(RefCell::new(Vec::new()));
        assert_eq!(t.claim_locked(1, now, &locks), Some(0));
        assert_eq!(t.claim_locked(2, now, &locks), Some(1));
        let ahead = now + 5_000 * MS;
        assert_eq!(t.claim_locked(3, ahead, &locks), None, "both owners live");
        assert_eq!(f.slots[0].owner.load(SeqCst), 1);
        // Owner 1 dies: the kernel drops its lock; its beat is stale.
        locks.unlock(0);
        assert_eq!(t.claim_locked(3, ahead, &locks), Some(0));
        // A free lock alone is not enough while the beat is fresh (a version-2 owner, which
        // holds no lock, is judged by its beat as before).
        locks.unlock(1);
        assert_eq!(t.claim_locked(4, now, &locks), None);
    }

    #[test]
    fn scans_read_the_slots_in_use_and_never_fewer_than_the_old_librarys() {
        let f = file_of(64);
        let mut t = table(&f);
        let now = 1000 * MS;
        let mut scratch = Vec::new();
        // A version-2 library's waiter in slot 3 (it never raises `high`).
        f.slots[3].owner.store(7, SeqCst);
        t.announce(3, now - MS, false, now);
        t.waiters(&mut scratch);
        assert!(scratch.is_empty(), "above `high`, not scanned");
        t.always = V2_SLOTS;
        t.waiters(&mut scratch);
        assert_eq!(scratch.len(), 1);
        // A claim raises `high` past its slot; a hostile `high` is clamped to the table.
        for id in 1..=40 {
            t.claim(100 + id, now).unwrap();
        }
        assert_eq!(f.high.load(SeqCst), 41);
        t.announce(40, now - 2 * MS, false, now);
        t.waiters(&mut scratch);
        assert_eq!(scratch.len(), 2);
        f.high.store(u64::MAX, SeqCst);
        t.waiters(&mut scratch);
        assert_eq!(scratch.len(), 2);
    }

    #[test]
    fn waiters_without_a_slot_take_turns_in_key_order() {
        // Before, a process that found the table full waited without a key and took the token
        // only when no slotted waiter was eligible: with busy slotted waiters, never.
        let f = file_of(1);
        let t = table(&f);
        let now = 1000 * MS;
        let mut s = Vec::new();
        let a = Seat::Slot(t.claim(1, now).unwrap());
        assert_eq!(t.claim(2, now), None, "full");
        f.holder.store(9, SeqCst);
        let Seat::Slot(ai) = a else { unreachable!() };
        t.announce(ai, now - 10 * MS, false, now);
        // Two without a slot, 3 due before A, 2 after.
        let c3 = t.announce_overflow(now - 20 * MS, false, now);
        let c2 = t.announce_overflow(now - 5 * MS, false, now);
        t.waiters(&mut s);
        assert_eq!(s.len(), 2);
        assert!(s.iter().any(|w| w.id == OVERFLOW && w.key == now - 20 * MS));
        t.release(9, now);
        assert_eq!(t.wake_bits(now, &mut s), wake_bit(None) | wake_bit(Some(a)));
        assert!(
            !t.try_take(1, Some(a), now, &mut s),
            "the overflow is first"
        );
        assert!(!t.try_take(2, Some(c2), now, &mut s), "3 is earlier");
        assert!(t.try_take(3, Some(c3), now, &mut s));
        assert_eq!(
            f.overflow.key.load(SeqCst),
            0,
            "taken: the others publish again"
        );
        t.release(3, now + MS);
        let c2 = t.announce_overflow(now - 5 * MS, false, now + MS);
        assert!(!t.try_take(2, Some(c2), now + MS, &mut s), "A is earlier");
        assert!(t.try_take(1, Some(a), now + MS, &mut s));
        t.release(1, now + 2 * MS);
        assert!(t.try_take(2, Some(c2), now + 2 * MS, &mut s));
        // A waiter of the overflow that died leaves its key: once passed over after the grace
        // it is cleared, and does not hold up every release.
        t.release(2, now + 3 * MS);
        t.announce_overflow(now, false, now + 3 * MS);
        t.announce(ai, now + MS, false, now + 3 * MS);
        assert!(!t.try_take(1, Some(a), now + 3 * MS, &mut s));
        assert!(
            t.try_take(1, Some(a), now + 5 * MS, &mut s),
            "after the grace"
        );
        assert_eq!(f.overflow.key.load(SeqCst), 0);
    }
}
