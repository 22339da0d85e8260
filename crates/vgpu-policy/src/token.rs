//! Who gets a GPU's node token next: the rules over the waiters published in the node file's
//! slot table ([`crate::slots`] is the shared-memory protocol around them; the node file itself
//! is `vgpu_region::node`). Plain arithmetic on nanoseconds; the caller supplies the times.
//!
//! * A free token goes to the eligible waiter with the smallest key (its due time; keys more
//!   than [`KEY_SPAN`] before the latest count as that: [`key_floor`]), ties to the least
//!   recently served,
//!   then to the smaller id ([`winner`], [`order`]); anyone may take it once the
//!   winner has let it lie for [`HANDOFF_GRACE`] ([`may_take`]), or for the longer grace the
//!   taker allows a winner that is alive (the limiter's path: [`may_take_after`]).
//! * Waiters without a slot of their own (the table is full) are published together under the
//!   id [`OVERFLOW`], at the earliest of their keys: they take turns with the others in key
//!   order, and among themselves the earliest goes first.
//! * A release wakes the first two in line ([`next_in_line`]), not every waiter; a waiter
//!   refused while the token is held looks again after [`HELD_POLL`] at the latest, to notice a
//!   holder that died without releasing ([`look_again_at`]).
//! * A waiter counts while its slot's heartbeat is recent ([`beat_fresh`], [`SLOT_STALE`]): a
//!   waiter that died stops counting by itself, whatever it left published.
use crate::limiter::ns;
use std::time::Duration;

/// A token free for this long may be taken by any eligible waiter, whatever the keys say.
pub const HANDOFF_GRACE: Duration = Duration::from_millis(2);

/// A waiter slot whose heartbeat is older than this is ignored (its owner died or hangs).
pub const SLOT_STALE: Duration = Duration::from_millis(500);

/// The id under which the waiters without a slot of their own are published (in the table's
/// overflow slot, at the earliest of their keys). No process has it: process ids are random,
/// and this one is never drawn (`vgpu_region::node`).
pub const OVERFLOW: u64 = u64::MAX;

/// The longest a waiter refused while another process holds the token sleeps before it looks
/// again. A release wakes the first two in line at once ([`next_in_line`]), so this only bounds
/// how late a waiter notices a holder that died without releasing, and how stale its own slot's
/// heartbeat gets (well under [`SLOT_STALE`]).
pub const HELD_POLL: Duration = Duration::from_millis(50);

/// The shortest sleep of a refused waiter ([`look_again_at`]): it never polls faster.
pub const MIN_LOOK: Duration = Duration::from_micros(50);

/// One waiter as published in the node file's slot table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waiter {
    /// The waiting process's token id (non-zero).
    pub id: u64,
    /// Its key: when its turn is due (the limiter's `credit_at` of its container's virtual time).
    pub key: u64,
    /// Whether it is fresh (an older library's flag; the limiter publishes its own state words).
    pub fresh: bool,
    /// When it last took the token (0: never).
    pub served: u64,
    /// Its slot's heartbeat.
    pub beat: u64,
}

/// Packs a key and the fresh flag into the one word a slot publishes atomically (bit 0 is the
/// flag, so keys have a 2 ns resolution; 0 means "not waiting", so a key is never 0).
pub fn key_word(key: u64, fresh: bool) -> u64 {
    (key & !1).max(2) | u64::from(fresh)
}

/// The (key, fresh) of a published key word; `None` for 0 (not waiting).
pub fn parse_key_word(w: u64) -> Option<(u64, bool)> {
    (w != 0).then_some((w & !1, w & 1 == 1))
}

/// Whether a published waiter counts now: its heartbeat is recent and it is eligible.
fn live(w: &Waiter, now: u64) -> bool {
    w.id != 0 && w.key <= now && beat_fresh(w.beat, now)
}

/// Whether a slot's heartbeat `beat` is recent at `now`: no older than [`SLOT_STALE`], and
/// not ahead of `now` by more than that either (a beat from a wrong clock or a corrupted file
/// must not keep a slot alive forever).
pub fn beat_fresh(beat: u64, now: u64) -> bool {
    now.saturating_sub(beat) <= ns(SLOT_STALE) && beat.saturating_sub(now) <= ns(SLOT_STALE)
}

/// Another process's heartbeat as this one watches it: whose, its value, and since when it has
/// stood at that value on *this* process's clock. Judging a process by how long the watcher has
/// seen its heartbeat unchanged needs no clock shared with it: a beat written from a clock ahead
/// of the watcher's (a time namespace, a restored checkpoint, a corrupted file) neither keeps a
/// dead process alive forever nor makes a live one look dead. The node file's holder check and
/// the limiter's view of its peers both judge by it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Watched {
    /// The watched process's id.
    pub id: u64,
    /// Its heartbeat as last seen.
    pub beat: u64,
    /// When (the watcher's clock) that heartbeat was first seen.
    pub since: u64,
}

impl Watched {
    /// What the watcher knows after seeing `id` beat `beat` at `now`, having known `before`:
    /// the same process with the same beat keeps its `since`; anything else starts now.
    pub fn seen(before: Option<Watched>, id: u64, beat: u64, now: u64) -> Watched {
        match before {
            Some(b) if b.id == id && b.beat == beat => b,
            _ => Watched {
                id,
                beat,
                since: now,
            },
        }
    }

    /// How long (ns, the watcher's clock) the heartbeat has stood still at `now`.
    pub fn still_for(&self, now: u64) -> u64 {
        now.saturating_sub(self.since)
    }
}

/// How far a waiter's key may be behind the latest eligible one's and still count: a process
/// whose clock runs behind the others' (another time namespace, a restored checkpoint) comes
/// first in line for at most this much of its virtual time. Containers that take turns on an
/// oversubscribed GPU all fall behind the clock together (their waits are no idleness: they
/// bank nothing, `limiter::Decision::bank_at`), so their keys are compared as they are.
pub const KEY_SPAN: Duration = Duration::from_secs(1);

/// More eligible waiters than this are a crowd: there keys from further back than
/// [`crate::limiter::BANK`] before now all count as that, and its containers bank their
/// idleness again (`limiter::Decision::bank_at`). Exact keys need exact prices: in a crowd every
/// price one learned beside the others' work (a start beside 63 containers priced a 1 ms kernel
/// at 20 ms) sent it behind the whole line, and it waited many rounds: of the simulator's 64
/// containers at 10 %, now and then one did 4-16 kernels in 5 s where the mean was 68 (3 of 22
/// runs); tied at the floor, those far behind take turns round robin.
pub const CROWD: usize = 3;

/// The least a key counts as among the eligible `keys` at `now`: [`KEY_SPAN`] before the
/// latest, or in a crowd ([`CROWD`]) [`crate::limiter::BANK`] before now.
pub fn key_floor(keys: impl IntoIterator<Item = u64>, now: u64) -> u64 {
    let (n, latest) = eligible(keys, now);
    if n > CROWD {
        crate::limiter::credit_at(now.saturating_sub(ns(crate::limiter::BANK)))
    } else {
        latest.map_or(0, |k| k.saturating_sub(ns(KEY_SPAN)))
    }
}

/// Whether the eligible `keys` at `now` are a crowd ([`CROWD`]).
pub fn crowd(keys: impl IntoIterator<Item = u64>, now: u64) -> bool {
    eligible(keys, now).0 > CROWD
}

/// How many of `keys` are eligible at `now` (due), and the latest of those.
fn eligible(keys: impl IntoIterator<Item = u64>, now: u64) -> (usize, Option<u64>) {
    keys.into_iter()
        .filter(|k| *k <= now)
        .fold((0, None), |(n, m), k| {
            (n + 1, Some(m.map_or(k, |m: u64| m.max(k))))
        })
}

/// The floor of the live waiters' keys ([`key_floor`]).
fn floor(waiters: &[Waiter], now: u64) -> u64 {
    key_floor(waiters.iter().filter(|w| live(w, now)).map(|w| w.key), now)
}

/// Where waiter `w` stands in line (smaller first): its key raised to `floor` ([`key_floor`]),
/// then the least recently served, then the smaller id.
pub fn order(w: &Waiter, floor: u64) -> (u64, u64, u64) {
    (w.key.max(floor), w.served, w.id)
}

/// A2 + A3: the waiter that should get the token now: the first in [`order`] among live,
/// eligible waiters.
pub fn winner(waiters: &[Waiter], now: u64) -> Option<u64> {
    let floor = floor(waiters, now);
    waiters
        .iter()
        .filter(|w| live(w, now))
        .min_by_key(|w| order(w, floor))
        .map(|w| w.id)
}

/// Whether process `me` may take the free token now (it was freed at `freed_at`): it is the
/// [`winner`], or there is none, or the winner has had the free token for [`HANDOFF_GRACE`]
/// since it became eligible and not taken it (it is slow, or gone). A process without a slot
/// (the table was full) counts as a waiter with no key: it takes the token when nobody
/// published is eligible, or after the grace.
pub fn may_take(me: u64, waiters: &[Waiter], now: u64, freed_at: u64) -> bool {
    may_take_after(me, waiters, now, freed_at, ns(HANDOFF_GRACE))
}

/// [`may_take`] with the winner's grace `grace` ns (at least [`HANDOFF_GRACE`]).
pub fn may_take_after(me: u64, waiters: &[Waiter], now: u64, freed_at: u64, grace: u64) -> bool {
    let floor = floor(waiters, now);
    let Some(w) = waiters
        .iter()
        .filter(|w| live(w, now))
        .min_by_key(|w| order(w, floor))
    else {
        return true;
    };
    w.id == me || now.saturating_sub(freed_at.max(w.key)) >= grace.max(ns(HANDOFF_GRACE))
}

/// When a waiter that [`may_take`] refused now should look again (the grace's end), if no
/// release or announcement wakes it first.
pub fn retry_at(waiters: &[Waiter], now: u64, freed_at: u64) -> u64 {
    let key = waiters
        .iter()
        .filter(|w| live(w, now))
        .map(|w| w.key)
        .min()
        .unwrap_or(now);
    freed_at.max(key).saturating_add(ns(HANDOFF_GRACE))
}

/// Whether some other live waiter is fresh (under its share): the holder should end its window
/// now.
pub fn fresh_waiter(waiters: &[Waiter], me: u64, now: u64) -> bool {
    waiters
        .iter()
        .any(|w| w.id != me && w.fresh && live(w, now))
}

/// How long after another process last released the token a process still plans its windows
/// as contended (B): two default periods, so a neighbour in its off time still counts.
pub const SHARED_MEMORY: Duration = Duration::from_millis(100);

/// Whether the token is contended for the process `me` at `now`: another live waiter is
/// eligible, or another process released the token within [`SHARED_MEMORY`] (`other_freed`:
/// when the token was last released by a process other than `me`, as seen when `me` took it
/// — the node file's last-holder word tells; 0: never). Then B caps the budget, and an empty
/// open window gives the token back.
pub fn contended(waiters: &[Waiter], me: u64, now: u64, other_freed: u64) -> bool {
    waiters.iter().any(|w| w.id != me && live(w, now))
        || (other_freed != 0 && now.saturating_sub(other_freed) < ns(SHARED_MEMORY))
}

/// The first two in line for the token now ([`winner`]'s order over the live, eligible
/// waiters): a release wakes these two only. The second is woken so that, should the first not
/// take the token within its grace ([`HANDOFF_GRACE`], or the longer one of
/// [`may_take_after`]: it died, or is slow), someone takes it at the grace's end rather than at
/// the next [`HELD_POLL`].
pub fn next_in_line(waiters: &[Waiter], now: u64) -> [Option<u64>; 2] {
    let mut first: Option<&Waiter> = None;
    let mut second: Option<&Waiter> = None;
    let floor = floor(waiters, now);
    let order = |w: &Waiter| order(w, floor);
    for w in waiters.iter().filter(|w| live(w, now)) {
        if first.is_none_or(|f| order(w) < order(f)) {
            second = first;
            first = Some(w);
        } else if second.is_none_or(|s| order(w) < order(s)) {
            second = Some(w);
        }
    }
    [first.map(|w| w.id), second.map(|w| w.id)]
}

/// When a waiter that could not take the token should look again at the latest, if no release
/// wakes it first: while another process holds it, after [`HELD_POLL`] (only to notice a holder
/// that died: a live holder's release wakes the next in line); while it is free, at the end of
/// the winner's grace ([`retry_at`]). Never sooner than [`MIN_LOOK`] nor later than
/// [`HELD_POLL`] from `now` (a `freed_at` from a clock far ahead must not put the look off).
pub fn look_again_at(held: bool, waiters: &[Waiter], now: u64, freed_at: u64) -> u64 {
    let (min, max) = (
        now.saturating_add(ns(MIN_LOOK)),
        now.saturating_add(ns(HELD_POLL)),
    );
    if held {
        max
    } else {
        retry_at(waiters, now, freed_at).clamp(min, max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn w(id: u64, key: u64, fresh: bool, served: u64) -> Waiter {
        Waiter {
            id,
            key,
            fresh,
            served,
            beat: 100 * MS,
        }
    }

    #[test]
    fn a_watched_heartbeat_counts_still_from_when_this_process_first_saw_it() {
        let a = Watched::seen(None, 7, 1000, 10 * MS);
        assert_eq!(a.still_for(10 * MS), 0);
        // Unchanged: counted from the first sight, whatever the beat's own value says.
        let b = Watched::seen(Some(a), 7, 1000, 30 * MS);
        assert_eq!(b.still_for(30 * MS), 20 * MS);
        // A beat far ahead of this clock still starts at 0, and ages only on this clock.
        let c = Watched::seen(Some(b), 7, u64::MAX - 5, 31 * MS);
        assert_eq!(c.still_for(31 * MS), 0);
        assert_eq!(
            Watched::seen(Some(c), 7, u64::MAX - 5, 40 * MS).still_for(40 * MS),
            9 * MS
        );
        // Another process in the same place starts afresh, beat equal or not.
        assert_eq!(
            Watched::seen(Some(c), 8, u64::MAX - 5, 41 * MS).still_for(41 * MS),
            0
        );
        // A clock read before `since` (never on one monotonic clock) reads 0, not a wrap.
        assert_eq!(c.still_for(MS), 0);
    }

    #[test]
    fn the_winner_has_the_free_token_for_the_grace_the_taker_allows() {
        let now = 100 * MS;
        let first = Waiter {
            id: 1,
            key: now - 10 * MS,
            fresh: false,
            served: 0,
            beat: now,
        };
        let second = Waiter {
            id: 2,
            served: 5 * MS,
            ..first
        };
        let ws = [first, second];
        let freed = now - 5 * MS;
        assert!(may_take_after(1, &ws, now, freed, 0), "the winner, at once");
        // Past the plain grace: the second may take it, unless it allows the winner more.
        assert!(may_take_after(2, &ws, now, freed, 0));
        assert!(!may_take_after(2, &ws, now, freed, 6 * MS));
        assert!(may_take_after(2, &ws, now + MS, freed, 6 * MS));
        // Never less than HANDOFF_GRACE.
        assert!(!may_take_after(2, &ws, freed + MS, freed, 0));
    }

    #[test]
    fn key_words_round_trip() {
        assert_eq!(parse_key_word(0), None);
        assert_eq!(parse_key_word(key_word(1000, true)), Some((1000, true)));
        assert_eq!(parse_key_word(key_word(1001, false)), Some((1000, false)));
        assert_eq!(parse_key_word(key_word(0, false)), Some((2, false)));
    }

    #[test]
    fn the_earliest_eligible_waiter_wins_and_ties_go_to_the_least_recently_served() {
        let now = 100 * MS;
        let ws = [w(1, 50 * MS, false, 0), w(2, 40 * MS, false, 90 * MS)];
        assert_eq!(winner(&ws, now), Some(2));
        // Same key: the one served longer ago.
        let ws = [w(1, 40 * MS, false, 80 * MS), w(2, 40 * MS, false, 60 * MS)];
        assert_eq!(winner(&ws, now), Some(2));
        // A key in the future is not eligible.
        let ws = [w(1, 150 * MS, false, 0), w(2, 90 * MS, false, 0)];
        assert_eq!(winner(&ws, now), Some(2));
        // A stale slot is ignored.
        let later = 1000 * MS;
        let mut dead = w(3, 1, false, 0);
        dead.beat = later - ns(SLOT_STALE) - 1;
        let mut alive = w(4, 90 * MS, false, 0);
        alive.beat = later;
        assert_eq!(winner(&[dead, alive], later), Some(4));
        // So is one whose heartbeat is far in the future.
        let mut future = w(5, 1, false, 0);
        future.beat = later + 10 * ns(SLOT_STALE);
        assert_eq!(winner(&[future, alive], later), Some(4));
        assert_eq!(winner(&[], now), None);
    }

    #[test]
    fn only_the_winner_takes_a_freshly_freed_token_until_the_grace_ends() {
        let now = 100 * MS;
        let ws = [w(1, 50 * MS, false, 0), w(2, 40 * MS, false, 0)];
        assert!(may_take(2, &ws, now, now - MS));
        assert!(!may_take(1, &ws, now, now - MS));
        assert!(may_take(1, &ws, now, now - 2 * MS), "after the grace");
        // Free for long, but the winner only just became eligible: it has its grace.
        let ws = [w(1, now - MS / 2, false, 0), w(2, now - MS, false, 0)];
        assert!(!may_take(1, &ws, now, 10 * MS));
        assert_eq!(retry_at(&ws, now, 10 * MS), now + MS);
        assert!(may_take(1, &ws, now + MS, 10 * MS));
        assert!(may_take(9, &[], now, now), "nobody published");
        assert!(!may_take(9, &ws, now, now), "a slotless process waits");
    }

    #[test]
    fn only_a_fresh_live_waiter_makes_the_holder_yield() {
        let now = 100 * MS;
        assert!(!fresh_waiter(&[w(2, 40 * MS, false, 0)], 1, now));
        assert!(fresh_waiter(&[w(2, 40 * MS, true, 0)], 1, now));
        assert!(!fresh_waiter(&[w(1, 40 * MS, true, 0)], 1, now), "itself");
        assert!(!fresh_waiter(&[w(2, 140 * MS, true, 0)], 1, now), "not due");
        assert!(contended(&[w(2, 40 * MS, false, 0)], 1, now, 0));
        assert!(!contended(&[w(1, 40 * MS, false, 0)], 1, now, 0));
        assert!(
            contended(&[], 1, now, now - 99 * MS),
            "a neighbour ran lately"
        );
        assert!(!contended(&[], 1, now, now - 100 * MS));
    }

    #[test]
    fn a_release_wakes_the_first_two_in_line() {
        let now = 100 * MS;
        let ws = [
            w(1, 50 * MS, false, 0),
            w(2, 40 * MS, false, 0),
            w(3, 45 * MS, false, 0),
            w(4, 150 * MS, false, 0),
        ];
        assert_eq!(next_in_line(&ws, now), [Some(2), Some(3)]);
        assert_eq!(next_in_line(&ws[..1], now), [Some(1), None]);
        assert_eq!(next_in_line(&ws[3..], now), [None, None], "not due yet");
        // Same order as the winner's, ties included.
        let ws = [w(1, 40 * MS, false, 80 * MS), w(2, 40 * MS, false, 60 * MS)];
        assert_eq!(next_in_line(&ws, now), [Some(2), Some(1)]);
        assert_eq!(winner(&ws, now), Some(2));
    }

    #[test]
    fn a_refused_waiter_looks_again_at_the_grace_or_after_the_held_poll() {
        let now = 100 * MS;
        let ws = [w(1, 50 * MS, false, 0), w(2, 40 * MS, false, 0)];
        // Held: the release wakes the next in line; the poll only notices a dead holder. (It
        // used to be the grace's end, long past once the holder held the token past it: a
        // waiter then looked again every 50 µs.)
        assert_eq!(
            look_again_at(true, &ws, now, now - 30 * MS),
            now + ns(HELD_POLL)
        );
        // Free: at the winner's grace's end.
        assert_eq!(look_again_at(false, &ws, now, now - MS), now + MS);
        // Never a busy poll, nor put off by a release stamped from a clock far ahead.
        assert_eq!(
            look_again_at(false, &ws, now, now - 10 * MS),
            now + ns(MIN_LOOK)
        );
        assert_eq!(
            look_again_at(false, &ws, now, now + 5_000 * MS),
            now + ns(HELD_POLL)
        );
    }
}
