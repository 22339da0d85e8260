//! A set of launch keys (or functions) the launch path can ask about without a lock: the gate's
//! "has a price" and "was launched before" tables ([`super::Gate`]).
//!
//! Set-associative: a key's bits, mixed, pick a set of [`WAYS`] entries, and it may sit in any
//! of them. Direct-mapped (one entry per key, 1,024 of them), two keys that shared an entry
//! evicted each other at every look that saw both launched, and the gate took the one missing
//! for unpriced and timed it at each launch: a program's 56 kernels make such a pair in most
//! runs (a birthday collision), and the H100's decode service beside training was timed 1,900
//! times a second instead of ~100 in one run of 12, its tokens 7.5 ms apart instead of 3.2
//! (run 113). Five keys of one set still evict each other, at one entry: `WAYS` keys per set
//! stand, and with [`SETS`] sets a program needs thousands of kernels before that is likely.
use std::sync::atomic::{AtomicU64, Ordering};

/// Entries a key may sit in.
pub(super) const WAYS: usize = 4;

/// Sets of [`WAYS`] entries (a power of two): 32 KiB a table, on the heap.
pub(super) const SETS: usize = 1024;

/// Keys, each in one of the [`WAYS`] entries of its set (0 is no key: the launch path's keys
/// and functions are never 0). Readers (launching threads) and writers (the controller; a
/// launching thread for the functions) race only to a stale answer: a key seen missing is
/// timed once more, one seen present is one the writer just added or is removing.
pub(super) struct KeySet {
    sets: Box<[Set]>,
}

/// One set's entries, in one cache line.
#[repr(align(32))]
struct Set([AtomicU64; WAYS]);

impl KeySet {
    pub(super) fn new() -> Self {
        // Built on the heap: the gate is made on whatever thread first calls CUDA, whose
        // stack may be small.
        KeySet {
            sets: (0..SETS)
                .map(|_| Set([const { AtomicU64::new(0) }; WAYS]))
                .collect(),
        }
    }

    /// The set of `key`: its top bits after a multiplication (a driver's handles are pointers,
    /// alike in their low bits), and which of its entries a new key evicts when all are taken.
    fn set(key: u64) -> (usize, usize) {
        let h = key.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        // Shifted down to the set's and the way's bits: the casts cannot truncate.
        #[allow(clippy::cast_possible_truncation)]
        let set = (h >> (64 - SETS.trailing_zeros())) as usize;
        #[allow(clippy::cast_possible_truncation)]
        let way = (h >> (64 - SETS.trailing_zeros() - WAYS.trailing_zeros())) as usize & (WAYS - 1);
        (set, way)
    }

    fn entries(&self, key: u64) -> (&[AtomicU64], usize) {
        let (set, way) = Self::set(key);
        (&self.sets[set].0, way)
    }

    /// Whether `key` is in the set (never 0; the launch path: `WAYS` relaxed loads of one
    /// cache line).
    #[inline]
    pub(super) fn contains(&self, key: u64) -> bool {
        key != 0
            && self
                .entries(key)
                .0
                .iter()
                .any(|s| s.load(Ordering::Relaxed) == key)
    }

    /// Adds `key` (nothing for 0, or a key already there): into an empty entry of its set if
    /// there is one, else over the entry its bits pick.
    pub(super) fn insert(&self, key: u64) {
        if key == 0 {
            return;
        }
        let (e, way) = self.entries(key);
        if e.iter().any(|s| s.load(Ordering::Relaxed) == key) {
            return;
        }
        for s in e {
            if s.compare_exchange(0, key, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
        e[way].store(key, Ordering::Relaxed);
    }

    /// Empties the set (a forked child's gate: its limiter starts with no price).
    pub(super) fn clear(&self) {
        for set in &*self.sets {
            for s in &set.0 {
                s.store(0, Ordering::Relaxed);
            }
        }
    }

    /// Removes `key` where it is.
    pub(super) fn remove(&self, key: u64) {
        if key == 0 {
            return;
        }
        let (e, _) = self.entries(key);
        for s in e {
            let _ = s.compare_exchange(key, 0, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` keys of one set, found by search.
    fn one_set(n: usize, from: u64) -> Vec<u64> {
        let want = KeySet::set(from).0;
        (from..)
            .filter(|&k| KeySet::set(k).0 == want)
            .take(n)
            .collect()
    }

    #[test]
    fn keys_that_share_a_set_all_stand_up_to_its_ways() {
        let s = KeySet::new();
        let keys = one_set(WAYS, 0x7f00_dead_0000);
        // Added again and again in turn, as the controller does at each look that saw them
        // launched: a direct-mapped table kept only the last of them.
        for _ in 0..3 {
            for &k in &keys {
                s.insert(k);
            }
        }
        assert!(keys.iter().all(|&k| s.contains(k)));
        // One more evicts one entry; the newest always stands.
        let fifth = one_set(WAYS + 1, 0x7f00_dead_0000)[WAYS];
        s.insert(fifth);
        assert!(s.contains(fifth));
        assert_eq!(keys.iter().filter(|&&k| s.contains(k)).count(), WAYS - 1);
    }

    #[test]
    fn a_removed_key_is_gone_and_the_others_stay() {
        let s = KeySet::new();
        let keys = one_set(3, 0x1234_5678);
        keys.iter().for_each(|&k| s.insert(k));
        s.remove(keys[1]);
        assert!(!s.contains(keys[1]));
        assert!(s.contains(keys[0]) && s.contains(keys[2]));
        // Removing a key that is not there, or 0, changes nothing; clearing removes all.
        s.remove(keys[1]);
        s.remove(0);
        s.insert(0);
        assert!(!s.contains(0));
        assert!(s.contains(keys[0]) && s.contains(keys[2]));
        s.clear();
        assert!(!keys.iter().any(|&k| s.contains(k)));
    }

    #[test]
    fn a_program_s_kernels_all_stand() {
        // Handles 16 bytes apart, each over two grids (kernel keys, as `kernel_key` makes
        // them), and keys counting up: a thousand stand at once (in the direct-mapped table of
        // 1,024 entries before, 445 of them had lost their entry to another).
        let s = KeySet::new();
        let base = 0x7f00_dead_0000_u64;
        let mut keys: Vec<u64> = (0..256u64)
            .flat_map(|f| {
                (1..=2u64).map(move |g| (base + 16 * f) ^ g.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            })
            .collect();
        keys.extend(1..=488u64);
        keys.iter().for_each(|&k| s.insert(k));
        let missing = keys.iter().filter(|&&k| !s.contains(k)).count();
        assert!(
            missing <= keys.len() / 100,
            "{missing} of {} keys missing",
            keys.len()
        );
    }
}
