//! The charge/release protocol of one device, generic over the atomics so that `loom` can check
//! it (`tests/loom.rs`).
//!
//! # Data
//! Per device: `limit` (`u64::MAX`: none) and `version`, a word holding a commit sequence in its
//! high bits and, in its low [`SLOT_BITS`] bits, `1 +` the slot of the last committer (0: none).
//! Per process slot: `used` (committed bytes) and `pending` (bytes of this slot's charges between
//! "about to commit" and "applied"). The device total is never stored: it is Σ `used` over the
//! slots, so a dead process never leaves a shared counter wrong; reaping its slot zeroes its
//! counters.
//!
//! # Charge `n` from slot `me`
//! ```text
//! loop {
//!     w = version.load()
//!     if w names a last committer c, c may commit and c.pending != 0 {      // (1)
//!         wait (bounded: past the bound, refuse as stalled); continue
//!     }
//!     committed = Σ_i used[i]                                               // (2)
//!     if committed + n > limit { if version.load() == w { deny(committed) } else { continue } }
//!     me.pending += n
//!     if version.compare_exchange(w, (seq(w)+1, me)) { me.used += n; me.pending -= n; grant }
//!     me.pending -= n                                                       // somebody else won
//! }
//! ```
//! Release: `me.used -= n` (saturating); no shared word is touched. Force charge: the same loop
//! without the limit test. Every access is `SeqCst`.
//!
//! # Why it is exact
//! * **Commits are totally ordered** by the successful CASes on `version`: a CAS from `w` succeeds
//!   only if no other commit happened since `w` was read.
//! * **At most one commit is unapplied** (its CAS done, its `used += n` not yet): the committer of
//!   `w` is named in `w`; a charger that read `w` first waits (1) until that slot's `pending` is
//!   0. `pending` is raised before the CAS and lowered after `used` is raised, so reading it as 0
//!   after reading `w` (which the committer's CAS wrote) proves the commit is visible in `used`.
//!   By induction every earlier commit was applied before the next one could CAS.
//! * **A grant never exceeds the limit**: when the CAS from `w` succeeds, every commit so far is
//!   ordered before `w` and applied, so the scan (2) counted all of them (minus releases, which
//!   only lower the total): total after the grant = scanned + `n` ≤ limit.
//! * **A denial is justified**: between the two loads of `version` (same `w`) no commit happened,
//!   and each `used` value read is at most what it was when `w` was first read plus later forced
//!   or committed charges (there were none) minus releases: Σ read ≤ the true total at that first
//!   load, so the true total + `n` exceeded the limit at that instant. So 16 racing charges of
//!   100 MiB under 1 GiB give exactly 10 grants: never 11 (grant rule), never 9 (denial rule).
//! * **Progress**: a CAS fails only because another commit succeeded (lock-free). The only wait is
//!   (1), on a process between two of its own stores (`pending += n` .. CAS .. `used += n;
//!   pending -= n`), which never waits while its `pending` is raised; if it dies there, reaping
//!   its slot zeroes `pending` and the waiters go on. There is no retry storm among chargers over
//!   the limit: they never publish `pending`.
//! * Threads of one process share a slot: `pending` is a counter, and (1) also applies to one's
//!   own slot, so a thread never misses a sibling's unapplied commit.
//! * **A committer that cannot commit is not waited for** ([`Budget::may_commit`]): a slot past
//!   the scan's high-water mark, or one no process holds (FREE), has no commit in flight: its
//!   process claimed the slot (raising the mark, making it live) before its `pending += n`, and
//!   a slot is freed only after its counters were cleared. A non-zero `pending` there is stale
//!   (a file left by an earlier run, a stray write), and waiting for it would wait for ever.
//!   The one exception, a thread charging while another thread of its process gives the slot
//!   back at exit, can only add that process's own bytes, which are leaving with it.
//! * **Every wait is bounded** ([`Budget::pause`] says when to give up): a live committer
//!   stopped between its two stores (a debugger, `SIGSTOP`, a frozen cgroup) or a corrupt
//!   `pending` of a live slot makes the charge fail closed ([`Refused::stalled`]) rather than
//!   spin, and the next charge tries again.

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

/// Bits of `version` naming the last committer (slot + 1).
pub const SLOT_BITS: u32 = 11;
const SLOT_MASK: u64 = (1 << SLOT_BITS) - 1;
/// `limit` meaning "no limit".
pub const NO_LIMIT: u64 = u64::MAX;

/// The atomic operations the protocol uses (implemented for `AtomicU64`; the loom test wraps
/// `loom`'s).
pub trait Atomic64: Sync {
    /// `SeqCst` load.
    fn load(&self) -> u64;
    /// `SeqCst` store.
    fn store(&self, v: u64);
    /// `SeqCst` compare-exchange; `true` on success.
    fn cas(&self, current: u64, new: u64) -> bool;
    /// `SeqCst` wrapping add.
    fn fetch_add(&self, v: u64) -> u64;
    /// `SeqCst` wrapping sub.
    fn fetch_sub(&self, v: u64) -> u64;
    /// `SeqCst` read-modify-write loop applying `f`; returns the new value.
    fn update(&self, f: impl Fn(u64) -> u64) -> u64 {
        let mut cur = self.load();
        loop {
            let new = f(cur);
            if self.cas(cur, new) {
                return new;
            }
            cur = self.load();
        }
    }
}

impl Atomic64 for AtomicU64 {
    fn load(&self) -> u64 {
        AtomicU64::load(self, SeqCst)
    }
    fn store(&self, v: u64) {
        AtomicU64::store(self, v, SeqCst)
    }
    fn cas(&self, current: u64, new: u64) -> bool {
        self.compare_exchange(current, new, SeqCst, SeqCst).is_ok()
    }
    fn fetch_add(&self, v: u64) -> u64 {
        AtomicU64::fetch_add(self, v, SeqCst)
    }
    fn fetch_sub(&self, v: u64) -> u64 {
        AtomicU64::fetch_sub(self, v, SeqCst)
    }
}

/// One device's shared state as the protocol sees it.
pub trait Budget {
    /// Atomic type.
    type A: Atomic64;
    /// The device's version word.
    fn version(&self) -> &Self::A;
    /// The device's limit (`NO_LIMIT`: none).
    fn limit(&self) -> &Self::A;
    /// Number of slots to scan (a high-water mark: slots past it hold nothing).
    fn slots(&self) -> usize;
    /// `used` of a slot below [`slots`](Budget::slots) (or of one's own slot).
    fn used(&self, slot: usize) -> &Self::A;
    /// `pending` of a slot.
    fn pending(&self, slot: usize) -> &Self::A;
    /// Whether the slot can have a commit in flight: below [`slots`](Budget::slots) and held
    /// by a process (not FREE). A version word naming any other slot names a committer whose
    /// commit is applied (or was dropped with its slot).
    fn may_commit(&self, slot: usize) -> bool;
    /// Called while waiting for another process to finish its commit (round 0, 1, ...);
    /// `false`: the wait has lasted past its bound, give up (the charge is refused as stalled).
    fn pause(&self, round: u32) -> bool;
}

/// A refused charge: the total in use when refused, and the limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused {
    /// Σ used when refused.
    pub used: u64,
    /// The limit.
    pub limit: u64,
    /// Refused because another committer's commit stayed unapplied past the wait's bound
    /// ([`Budget::pause`]), not because the charge does not fit.
    pub stalled: bool,
}

/// Σ `used` over the slots (saturating).
pub fn total<B: Budget>(b: &B) -> u64 {
    let mut sum: u64 = 0;
    for i in 0..b.slots() {
        sum = sum.saturating_add(b.used(i).load());
    }
    sum
}

fn next_version(w: u64, me: usize) -> u64 {
    (((w >> SLOT_BITS).wrapping_add(1)) << SLOT_BITS) | ((me as u64 + 1) & SLOT_MASK)
}

/// Charges `n` bytes to slot `me`: granted only if the device total after it stays within the
/// limit (`enforce`), else refused; with `enforce == false` always granted (a forced charge).
pub fn charge<B: Budget>(b: &B, me: usize, n: u64, enforce: bool) -> Result<(), Refused> {
    charge_total(b, me, n, enforce).map(|_| ())
}

/// [`charge`], returning on a grant the device total it was granted against plus `n` (the total
/// right after the grant, exact when enforced; for the container high-water mark).
pub fn charge_total<B: Budget>(b: &B, me: usize, n: u64, enforce: bool) -> Result<u64, Refused> {
    if n == 0 {
        return Ok(total(b));
    }
    let mut round = 0u32;
    loop {
        let w = b.version().load();
        let last = (w & SLOT_MASK) as usize;
        if last != 0 && b.may_commit(last - 1) && b.pending(last - 1).load() != 0 {
            // The last committer may not have applied its commit yet (or is about to CAS).
            if !b.pause(round) {
                return Err(Refused {
                    used: total(b),
                    limit: b.limit().load(),
                    stalled: true,
                });
            }
            round = round.saturating_add(1);
            continue;
        }
        let limit = b.limit().load();
        let committed = total(b);
        if enforce && limit != NO_LIMIT && committed.checked_add(n).is_none_or(|t| t > limit) {
            if b.version().load() == w {
                return Err(Refused {
                    used: committed,
                    limit,
                    stalled: false,
                });
            }
            continue;
        }
        b.pending(me).fetch_add(n);
        if b.version().cas(w, next_version(w, me)) {
            b.used(me).update(|u| u.saturating_add(n));
            b.pending(me).fetch_sub(n);
            return Ok(committed.saturating_add(n));
        }
        b.pending(me).fetch_sub(n);
    }
}

/// Releases `n` bytes from slot `me` (saturating at 0); returns the slot's new `used`.
pub fn release<B: Budget>(b: &B, me: usize, n: u64) -> u64 {
    b.used(me).update(|u| u.saturating_sub(n))
}

/// Clears a dead slot's counters (reaping): its bytes are released and its in-flight commit, if
/// any, is dropped. Bumps the version so that concurrent chargers re-read.
pub fn clear<B: Budget>(b: &B, slot: usize) {
    b.used(slot).store(0);
    b.pending(slot).store(0);
    bump(b);
}

/// Advances the commit sequence without naming a committer change (after a limit change or a
/// reap): a charger that read the old version retries.
pub fn bump<B: Budget>(b: &B) {
    b.version().fetch_add(1 << SLOT_BITS);
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Local {
        version: AtomicU64,
        limit: AtomicU64,
        used: [AtomicU64; 3],
        pending: [AtomicU64; 3],
        live: [AtomicU64; 3],
    }
    impl Budget for Local {
        type A = AtomicU64;
        fn version(&self) -> &AtomicU64 {
            &self.version
        }
        fn limit(&self) -> &AtomicU64 {
            &self.limit
        }
        fn slots(&self) -> usize {
            3
        }
        fn used(&self, s: usize) -> &AtomicU64 {
            &self.used[s]
        }
        fn pending(&self, s: usize) -> &AtomicU64 {
            &self.pending[s]
        }
        fn may_commit(&self, s: usize) -> bool {
            s < 3 && self.live[s].load(SeqCst) != 0
        }
        fn pause(&self, round: u32) -> bool {
            std::thread::yield_now();
            round < 1000
        }
    }
    fn local(limit: u64) -> Local {
        Local {
            version: AtomicU64::new(0),
            limit: AtomicU64::new(limit),
            used: Default::default(),
            pending: Default::default(),
            live: [AtomicU64::new(1), AtomicU64::new(1), AtomicU64::new(1)],
        }
    }

    #[test]
    fn charge_deny_release() {
        let b = local(10);
        assert_eq!(charge(&b, 0, 6, true), Ok(()));
        assert_eq!(charge(&b, 1, 4, true), Ok(()));
        assert_eq!(
            charge(&b, 2, 1, true),
            Err(Refused {
                used: 10,
                limit: 10,
                stalled: false
            })
        );
        assert_eq!(release(&b, 0, 100), 0);
        assert_eq!(charge(&b, 2, 6, true), Ok(()));
        assert_eq!(charge(&b, 2, 1, false), Ok(()));
        assert_eq!(total(&b), 11);
        assert_eq!(charge(&b, 0, u64::MAX, true).unwrap_err().used, 11);
        b.limit.store(NO_LIMIT, SeqCst);
        assert_eq!(charge(&b, 0, u64::MAX, true), Ok(()));
        assert_eq!(total(&b), u64::MAX);
        clear(&b, 0);
        assert_eq!(total(&b), 11);
        assert_eq!(b.version.load(SeqCst) & SLOT_MASK, 1);
    }

    #[test]
    fn a_free_committer_is_applied_and_a_live_stuck_one_bounds_the_wait() {
        let b = local(10);
        // The version names slot 2 with a stale pending, but slot 2 is free: not waited for.
        b.live[2].store(0, SeqCst);
        b.pending[2].store(5, SeqCst);
        b.version.store(3, SeqCst);
        assert_eq!(charge(&b, 0, 4, true), Ok(()));
        // Slot 1 is live and its commit never finishes: the wait gives up, and says so.
        b.pending[1].store(1, SeqCst);
        b.version.store((9 << SLOT_BITS) | 2, SeqCst);
        assert_eq!(
            charge(&b, 0, 1, true),
            Err(Refused {
                used: 4,
                limit: 10,
                stalled: true
            })
        );
        b.pending[1].store(0, SeqCst);
        assert_eq!(charge(&b, 0, 1, true), Ok(()));
        assert_eq!(total(&b), 5);
    }

    #[test]
    fn threads_never_overcommit() {
        let b = local(1000);
        let grants = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..3 {
                let (b, grants) = (&b, &grants);
                s.spawn(move || {
                    for _ in 0..200 {
                        if charge(b, t, 7, true).is_ok() {
                            grants.fetch_add(1, SeqCst);
                        }
                    }
                });
            }
        });
        assert_eq!(grants.load(SeqCst), 1000 / 7);
        assert_eq!(total(&b), 1000 / 7 * 7);
    }
}
