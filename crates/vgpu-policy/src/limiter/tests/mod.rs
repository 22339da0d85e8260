//! The limiter's unit tests, by theme, and the helpers they share.
use super::*;

mod peers;
mod prices;
mod share;
mod token;
mod waits;

const US: u64 = 1_000;
const MS: u64 = 1_000_000;

fn look(now: u64, launched: u64, keys: &[u64], vt: u64, percent: u8) -> Look<'_> {
    Look::alone(now, launched, keys, vt, percent)
}

/// Two looks of a program that fills its queue (400 launches of 10 µs, twice the alone
/// depth) and is held: it is heavy after them. (Its container was charged long ago: `vt` 1,
/// far behind now; `vt` 0 would be a container never charged, which starts at now.)
fn make_heavy(l: &mut Limiter) {
    *l = Limiter::new(Priority::Normal, 1_000 * MS - 10 * US);
    let keys = [1u64; 400];
    let mut lk = look(1_000 * MS, 400, &keys, 1, 50);
    lk.held = true;
    let priced = [bracket(1, 10 * US, false)];
    lk.marks = &priced;
    let d = l.look(&lk);
    assert_eq!(d.held, Held::Queue);
    let mut lk = look(1_000 * MS + 100 * US, 400, &[], 1, 50);
    lk.held = true;
    let _ = l.look(&lk);
}

/// A look at `now` of a program that launched `launched` so far, nothing new, under 50 % with
/// its container far behind the clock, that reads `marks`.
fn marks_at(l: &mut Limiter, now: u64, launched: u64, marks: &[Mark]) -> Decision {
    let mut lk = look(now, launched, &[], 1, 50);
    lk.marks = marks;
    l.look(&lk)
}

/// A bracket that timed one launch of `key` at `elapsed` ns.
fn bracket(key: u64, elapsed: u64, shared: bool) -> Mark {
    bracket_at(0, key, elapsed, shared)
}

/// The same for launch number `at`.
fn bracket_at(at: u64, key: u64, elapsed: u64, shared: bool) -> Mark {
    Mark {
        kind: MarkKind::Bracket {
            at,
            key,
            elapsed,
            gap: 0,
        },
        shared,
    }
}

/// A peer as its slot shows it.
fn peer(id: u64, state: SlotState, served: u64, holder: bool, now: u64) -> Peer {
    Peer {
        id,
        state,
        served,
        beat: now,
        holder,
        kin: false,
    }
}

/// A heavy peer that wants the token with `key`, as its published word reads.
fn waiter(id: u64, key: u64, served: u64, now: u64) -> Peer {
    let state = SlotState {
        want: Some(key),
        heavy: true,
        ..SlotState::default()
    };
    peer(
        id,
        SlotState::parse(state.word()).unwrap(),
        served,
        false,
        now,
    )
}

fn heavy_holder(now: u64) -> Peer {
    let state = SlotState {
        heavy: true,
        active: true,
        ..SlotState::default()
    };
    peer(2, state, 0, true, now)
}

/// Drives a program that launches up to `per_look` launches of `price` ns every `every` ns
/// through the gate (its key priced at the first look), for `looks` looks beside `peers`
/// at 50 %, its container's virtual time at the bank's floor (it used less than its share
/// lately); returns the last decision.
fn drive(
    l: &mut Limiter,
    price: u64,
    per_look: u64,
    every: u64,
    looks: u64,
    peers: &[Peer],
) -> Decision {
    let keys = vec![5u64; usize::try_from(per_look).unwrap()];
    let priced = [bracket(5, price, false)];
    let (mut launched, mut budget) = (0, 0);
    let mut d = None;
    for i in 1..=looks {
        let now = 1_000 * MS + i * every;
        let n = per_look.min(budget - launched);
        launched += n;
        let mut lk = look(now, launched, &keys[..usize::try_from(n).unwrap()], 1, 50);
        lk.held = n < per_look;
        lk.peers = peers;
        lk.marks = if i == 1 { &priced } else { &[] };
        let dd = l.look(&lk);
        budget = dd.budget;
        d = Some(dd);
    }
    d.unwrap()
}

/// An active light peer (a service under its share), its heartbeat at `now`.
fn active_light_peer(now: u64) -> Peer {
    let light = SlotState {
        active: true,
        ..SlotState::default()
    };
    peer(2, light, 0, false, now)
}
