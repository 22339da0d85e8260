//! The waiter slot table of a GPU's node token file: how waiters announce their keys and how
//! a free token is taken in key order ([`crate::share`] decides; this is the shared-memory
//! protocol around it).
//!
//! Words, all `u64`, all accessed `SeqCst` (the layout in docs/COMPUTE.md places them after the
//! existing words of the node file, so libraries that know nothing of them keep the holder word
//! as a plain mutex):
//!
//! * `holder`: 0 free, else the holder's id (the existing mutex word);
//! * `freed_at`, `last_holder`: written by a releaser *before* it clears `holder`;
//! * per slot: `owner` (0 empty, else a process id), `key` (a [`crate::share::key_word`], 0
//!   when not waiting), `served` (when the owner last took the token), `beat` (heartbeat).
//!
//! The orders that matter (checked by `tests/loom_slots.rs`):
//! 1. A waiter publishes its key **before** it looks at the token (A3: announce before
//!    sleeping), and withdraws it only after taking the token or giving up.
//! 2. A waiter that finds the token free reads the holder word **first**, then the slots, and
//!    takes the token by compare-exchange. So if a waiter's key was published before the token
//!    was released, every waiter that sees the token free also sees that key, and only its
//!    owner (or, after [`crate::share::HANDOFF_GRACE`], anyone) takes it. Mutual exclusion
//!    rests on the compare-exchange alone, whatever the slots say.
//!
//! Generic over the word type so that loom can check it, as [`crate::exclusion`] is.
use crate::share::{self, Waiter};
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
    /// A [`share::key_word`], or 0 while not waiting.
    pub key: W,
    /// When the owner last took the token.
    pub served: W,
    /// The owner's heartbeat.
    pub beat: W,
}

/// Slots in a node file.
pub const SLOTS: usize = 32;

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
}

impl<W: Word> Table<'_, W> {
    /// Claims a slot for process `me` (an empty one, or one whose owner's heartbeat is older
    /// than [`share::SLOT_STALE`]); `None` when the table is full (the process then waits
    /// without a key: see [`share::may_take`]).
    pub fn claim(&self, me: u64, now: u64) -> Option<usize> {
        for (i, s) in self.slots.iter().enumerate() {
            let o = s.owner.load();
            if o == me {
                return Some(i);
            }
            let stale = o != 0 && !share::beat_fresh(s.beat.load(), now);
            if (o == 0 || stale) && s.owner.cas(o, me).is_ok() {
                s.key.store(0);
                s.served.store(0);
                s.beat.store(now);
                return Some(i);
            }
        }
        None
    }

    /// Gives a claimed slot back (at exit; a dead process's slot goes stale instead).
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
        s.key.store(share::key_word(key, fresh));
    }

    /// Withdraws the key (no longer waiting).
    pub fn withdraw(&self, slot: usize) {
        self.slots[slot].key.store(0);
    }

    /// The published waiters, into `out` (cleared first; the caller keeps it, so that the
    /// controller does not allocate per look).
    pub fn waiters(&self, out: &mut Vec<Waiter>) {
        out.clear();
        for s in self.slots {
            let id = s.owner.load();
            if id == 0 {
                continue;
            }
            if let Some((key, fresh)) = share::parse_key_word(s.key.load()) {
                out.push(Waiter {
                    id,
                    key,
                    fresh,
                    served: s.served.load(),
                    beat: s.beat.load(),
                });
            }
        }
    }

    /// Tries to take the free token for `me` (with its slot, if it has one) under A2: reads the
    /// holder word first, then the slots; takes it by compare-exchange if [`share::may_take`]
    /// says so. On success the slot's key is withdrawn and `served` set.
    pub fn try_take(
        &self,
        me: u64,
        slot: Option<usize>,
        now: u64,
        scratch: &mut Vec<Waiter>,
    ) -> bool {
        if self.holder.load() != 0 {
            return false;
        }
        self.waiters(scratch);
        if !share::may_take(me, scratch, now, self.freed_at.load()) {
            return false;
        }
        if self.holder.cas(0, me).is_err() {
            return false;
        }
        if let Some(i) = slot {
            self.slots[i].served.store(now);
            self.withdraw(i);
        }
        true
    }

    /// Releases the token held by `me`: records who and when, then frees the holder word (the
    /// caller then bumps the generation and wakes the waiters, as today).
    pub fn release(&self, me: u64, now: u64) {
        self.last_holder.store(me);
        self.freed_at.store(now);
        let _ = self.holder.cas(me, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    struct File {
        holder: AtomicU64,
        freed_at: AtomicU64,
        last_holder: AtomicU64,
        slots: Vec<Slot<AtomicU64>>,
    }

    fn file() -> File {
        File {
            holder: AtomicU64::new(0),
            freed_at: AtomicU64::new(0),
            last_holder: AtomicU64::new(0),
            slots: (0..4).map(|_| Slot::default()).collect(),
        }
    }

    fn table(f: &File) -> Table<'_, AtomicU64> {
        Table {
            holder: &f.holder,
            freed_at: &f.freed_at,
            last_holder: &f.last_holder,
            slots: &f.slots,
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
        assert!(!t.try_take(1, Some(a), now, &mut scratch), "held");
        t.release(9, now);
        assert_eq!(f.last_holder.load(SeqCst), 9);
        assert!(!t.try_take(1, Some(a), now, &mut scratch), "B is earlier");
        assert!(t.try_take(2, Some(b), now, &mut scratch));
        assert_eq!(f.holder.load(SeqCst), 2);
        assert_eq!(f.slots[b].key.load(SeqCst), 0, "withdrawn on taking");
        assert_eq!(f.slots[b].served.load(SeqCst), now);
        t.release(2, now + MS);
        assert!(t.try_take(1, Some(a), now + MS, &mut scratch));
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
        // Without a slot, a process takes a free token nobody eligible waits for.
        let mut scratch = Vec::new();
        assert!(t.try_take(6, None, now, &mut scratch));
    }
}
