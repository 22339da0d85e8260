//! Synchronisations that waited longer than the work they waited for was charged
//! ([`Look::waited`], `Limiter::charge_waits`).
use super::*;

/// Where the process stands at each look: beside these peers, holding the token or not.
#[derive(Clone, Copy)]
struct Beside<'a> {
    peers: &'a [Peer],
    holding: bool,
}

const ALONE: Beside<'static> = Beside {
    peers: &[],
    holding: false,
};

/// Key 7 (function 1) priced at 10 µs; then a round of 100 launches of it and 50 of function 9
/// over new grids, never timed (charged what unpriced launches cost), admitted at 1 s + 1 ms
/// under `percent`. Returns the launches so far.
fn a_round(l: &mut Limiter, percent: u8, b: Beside<'_>) -> u64 {
    *l = seven_priced(percent, b);
    let mut keys = vec![7u64; 100];
    keys.extend(1_000..1_050);
    let mut units = vec![1u64; 100];
    units.extend([9u64; 50]);
    let mut lk = look(1_000 * MS + MS, 151, &keys, 1, percent);
    lk.units = &units;
    (lk.peers, lk.holding) = (b.peers, b.holding);
    let d = l.look(&lk);
    assert!(
        d.charge < 10 * MS,
        "the round charged its guess: {}",
        d.charge
    );
    151
}

/// A new limiter under `percent` whose first look (at 1 s, beside `b`) priced key 7 (function
/// 1) at 10 µs.
fn seven_priced(percent: u8, b: Beside<'_>) -> Limiter {
    let mut l = Limiter::new(Priority::Normal, 1_000 * MS - 100 * US);
    let mut lk = look(1_000 * MS, 1, &[7], 1, percent);
    lk.units = &[1];
    (lk.peers, lk.holding) = (b.peers, b.holding);
    let timed = [bracket_at(0, 7, 10 * US, false)];
    lk.marks = &timed;
    let _ = l.look(&lk);
    l
}

/// The look after the round's synchronisation: it began at 1 s + 2 ms and waited `waited`.
fn after_the_sync(
    l: &mut Limiter,
    launched: u64,
    waited: u64,
    percent: u8,
    b: Beside<'_>,
) -> Decision {
    let w = [Waited {
        after: launched,
        from: 1_000 * MS + 2 * MS,
        ns: waited,
    }];
    let mut lk = look(
        1_000 * MS + 2 * MS + waited + 100 * US,
        launched,
        &[],
        1,
        percent,
    );
    lk.waited = &w;
    lk.empty = true;
    (lk.peers, lk.holding) = (b.peers, b.holding);
    l.look(&lk)
}

#[test]
fn a_synchronisation_longer_than_its_work_was_charged_charges_the_blind_launches() {
    // 50 launches of a function never timed (1 ms each, say) charged a 10 µs guess: alone,
    // the program's synchronisation after them waits 50 ms, which proves they cost at least
    // that less what the round was charged. (Else, where no bracket timed the function, a
    // 25 % limit let it run at the whole GPU: the simulator's loaded-functions test under a
    // compile's load.)
    let mut l = Limiter::default();
    let n = a_round(&mut l, 25, ALONE);
    let d = after_the_sync(&mut l, n, 50 * MS, 25, ALONE);
    assert!(d.charge >= 45 * MS, "charged {}", d.charge);
    assert!(
        d.charge <= 50 * MS,
        "charged more than it waited: {}",
        d.charge
    );
    assert_eq!(l.stats().waited_ns, d.charge);
    // The function's first timing (1 ms) then charges them only what is left.
    let timed = [bracket_at(120, 1_020, MS, false)];
    let d = marks_at(&mut l, 1_000 * MS + 60 * MS, n, &timed);
    assert!(d.charge < 5 * MS, "charged twice: {}", d.charge);
}

#[test]
fn in_its_turn_beside_waiting_heavy_peers_a_synchronisation_charges_them_too() {
    // Holding the token, its heavy peers wait for their turns with their queues drained: the
    // GPU is its own, and what its synchronisation waited is its work's.
    let waiting = [waiter(2, 1_000 * MS, 0, 1_000 * MS)];
    let b = Beside {
        peers: &waiting,
        holding: true,
    };
    let mut l = Limiter::default();
    let n = a_round(&mut l, 25, b);
    let _ = after_the_sync(&mut l, n, 50 * MS, 25, b);
    assert!(l.stats().waited_ns >= 45 * MS, "{:?}", l.stats());
}

#[test]
fn what_a_synchronisation_made_of_one_function_prices_its_new_grids_until_a_timing() {
    // The 50 blind launches are all of function 9: each charged about 1 ms after the wait, so
    // its next grids are charged that at once, not the 10 µs guess (and a later wait that saw
    // only the end of their work, its host slow, leaves them no cheaper).
    let mut l = Limiter::default();
    let n = a_round(&mut l, 25, ALONE);
    let _ = after_the_sync(&mut l, n, 50 * MS, 25, ALONE);
    let keys: Vec<u64> = (2_000..2_010).collect();
    let units = [9u64; 10];
    let mut lk = look(1_000 * MS + 60 * MS, n + 10, &keys, 1, 25);
    lk.units = &units;
    let d = l.look(&lk);
    assert!(d.charge >= 10 * 850 * US, "charged {}", d.charge);
    // A clean timing of the function (100 µs) prices its grids from then on.
    let timed = [bracket_at(n, 2_000, 100 * US, false)];
    let _ = marks_at(&mut l, 1_000 * MS + 61 * MS, n + 10, &timed);
    let keys: Vec<u64> = (3_000..3_010).collect();
    let mut lk = look(1_000 * MS + 62 * MS, n + 20, &keys, 1, 25);
    lk.units = &units;
    let d = l.look(&lk);
    assert!(d.charge <= 10 * 150 * US, "charged {}", d.charge);
}

#[test]
fn a_synchronisation_no_longer_than_its_work_was_charged_charges_nothing() {
    let mut l = Limiter::default();
    let n = a_round(&mut l, 25, ALONE);
    let d = after_the_sync(&mut l, n, MS, 25, ALONE);
    assert!(d.charge < 100 * US, "charged {}", d.charge);
    assert_eq!(l.stats().waited_ns, 0);
}

#[test]
fn what_a_synchronisation_waited_is_not_charged_where_it_may_not_be_its_work() {
    // Beside a live peer (its work may be what the synchronisation waited for), measuring
    // only (nothing is charged after the fact), or where every launch had a price of its own
    // (a synchronisation may wait for copies or host functions, no kernel's cost).
    // (A light peer runs beside the token's holder too.)
    let light = [active_light_peer(1_000 * MS)];
    let heavy = [heavy_holder(1_000 * MS)];
    for (percent, b) in [
        (
            25,
            Beside {
                peers: &light,
                holding: false,
            },
        ),
        (
            25,
            Beside {
                peers: &light,
                holding: true,
            },
        ),
        (
            25,
            Beside {
                peers: &heavy,
                holding: false,
            },
        ),
        (100, ALONE),
    ] {
        let mut l = Limiter::default();
        let n = a_round(&mut l, percent, b);
        let _ = after_the_sync(&mut l, n, 50 * MS, percent, b);
        assert_eq!(
            l.stats().waited_ns,
            0,
            "{percent} % beside {:?}, holding: {}",
            b.peers,
            b.holding
        );
    }
    let mut l = seven_priced(25, ALONE);
    let keys = [7u64; 150];
    let _ = l.look(&look(1_000 * MS + MS, 151, &keys, 1, 25));
    let _ = after_the_sync(&mut l, 151, 50 * MS, 25, ALONE);
    assert_eq!(l.stats().waited_ns, 0, "every launch priced");
}

#[test]
fn each_synchronisation_counts_the_launches_since_the_last_one_began() {
    // Two rounds, each synchronised: the second's window holds the second round's launches
    // only (the first's were done when the first returned), so a second wait no longer than
    // what they were charged charges nothing, however many blind launches came before.
    let mut l = Limiter::default();
    let n = a_round(&mut l, 25, ALONE);
    let first = after_the_sync(&mut l, n, 50 * MS, 25, ALONE);
    assert!(first.charge >= 45 * MS, "{}", first.charge);
    let keys = [7u64; 10];
    let t = 1_000 * MS + 60 * MS;
    let _ = l.look(&look(t, n + 10, &keys, 1, 25));
    // (Were the window the launches since the first round began, its 50 blind ones would
    // take 200 ms less what they were charged.)
    let w = [Waited {
        after: n + 10,
        from: t + 100 * US,
        ns: 200 * MS,
    }];
    let mut lk = look(t + MS, n + 10, &[], 1, 25);
    lk.waited = &w;
    let d = l.look(&lk);
    assert!(d.charge < 100 * US, "charged {}", d.charge);
    assert_eq!(l.stats().waited_ns, first.charge);
}

#[test]
fn a_synchronisation_that_began_before_the_gpu_was_its_own_charges_nothing() {
    // A peer live at the round's looks, gone at the look after the synchronisation, which
    // began while it was live: its wait may have been the peer's work.
    let light = [active_light_peer(1_000 * MS)];
    let mut l = Limiter::default();
    let n = a_round(
        &mut l,
        25,
        Beside {
            peers: &light,
            holding: false,
        },
    );
    let _ = after_the_sync(&mut l, n, 50 * MS, 25, ALONE);
    assert_eq!(l.stats().waited_ns, 0);
}

#[test]
fn a_long_wait_charges_each_blind_launch_at_most_wait_each_max() {
    // One blind launch, and a synchronisation that waited 2 s (a copy, a host function):
    // the launch is charged at most WAIT_EACH_MAX more.
    let mut l = Limiter::new(Priority::Normal, 1_000 * MS - 100 * US);
    let mut lk = look(1_000 * MS, 1, &[7], 1, 25);
    lk.units = &[1];
    let timed = [bracket_at(0, 7, 10 * US, false)];
    lk.marks = &timed;
    let _ = l.look(&lk);
    let mut lk = look(1_000 * MS + MS, 2, &[1_000], 1, 25);
    lk.units = &[9];
    let _ = l.look(&lk);
    let d = after_the_sync(&mut l, 2, 2_000 * MS, 25, ALONE);
    assert!(d.charge >= ns(WAIT_EACH_MAX) * 9 / 10, "{}", d.charge);
    assert!(d.charge <= ns(WAIT_EACH_MAX) + MS, "{}", d.charge);
}

#[test]
fn a_launch_whose_function_was_timed_since_is_not_charged_a_wait() {
    // The round's 50 launches of function 9, then a clean timing of function 9 (10 µs) that
    // comes back before the synchronisation's look: they are priced by it, not blind.
    let mut l = Limiter::default();
    let n = a_round(&mut l, 25, ALONE);
    let timed = [bracket_at(120, 1_020, 10 * US, false)];
    let _ = marks_at(&mut l, 1_000 * MS + MS + 500 * US, n, &timed);
    let _ = after_the_sync(&mut l, n, 50 * MS, 25, ALONE);
    assert_eq!(l.stats().waited_ns, 0);
}

#[test]
fn a_synchronisation_over_launches_not_yet_priced_charges_nothing() {
    // Its record says it began after 160 launches, and this look prices only 151: it may have
    // waited for the other nine, whose work its wait holds and its window would not.
    let mut l = Limiter::default();
    let n = a_round(&mut l, 25, ALONE);
    let w = [Waited {
        after: n + 9,
        from: 1_000 * MS + 2 * MS,
        ns: 50 * MS,
    }];
    let mut lk = look(1_000 * MS + 53 * MS, n, &[], 1, 25);
    lk.waited = &w;
    let _ = l.look(&lk);
    assert_eq!(l.stats().waited_ns, 0);
}

/// A synchronisation that waited for launches whose charge a single shared price deferred
/// (`UNSURE_AHEAD`) counts what they deferred as work it waited for: else the deferred part
/// seemed unpaid wait, was charged to the blind launches beside them, and the second sample
/// charged it again (helper-21's review: 197 ms charged for 114 ms of work).
#[test]
fn a_wait_for_deferred_launches_charges_no_work_twice() {
    let t0 = 1_000 * MS;
    let mut l = Limiter::new(Priority::Normal, t0 - 100 * US);
    // 8 launches of key 9, whose first (shared) sample says 13 ms, and 10 of functions never
    // timed (function 5): charged 20 ms at 10 %, 84 deferred.
    let keys: Vec<u64> = (0..18).map(|i| if i < 8 { 9 } else { 100 + i }).collect();
    let units: Vec<u64> = (0..18).map(|i| if i < 8 { 0 } else { 5 }).collect();
    let first = [bracket_at(0, 9, 13 * MS, true)];
    let mut lk = look(t0, 18, &keys, 1, 10);
    lk.units = &units;
    lk.marks = &first;
    let d = l.look(&lk);
    let mut charged = d.charge;
    let mut vt = d.charge_vt(1, t0, 10);
    // The program's synchronisation after them waited 114 ms: what they cost, about.
    let w = [Waited {
        after: 18,
        from: t0 + MS,
        ns: 114 * MS,
    }];
    let now = t0 + MS + 114 * MS + 100 * US;
    let mut lk = look(now, 18, &[], vt, 10);
    lk.waited = &w;
    lk.empty = true;
    let d = l.look(&lk);
    charged += d.charge;
    vt = d.charge_vt(vt, now, 10);
    // Key 9's clean second sample confirms 13 ms: the deferred part is charged now.
    let clean = [bracket_at(0, 9, 13 * MS, false)];
    let mut lk = look(now + MS, 18, &[], vt, 10);
    lk.marks = &clean;
    let d = l.look(&lk);
    charged += d.charge;
    charged = charged.saturating_sub(d.refund);
    let d = l.look(&look(now + 2 * MS, 18, &[], vt, 10));
    charged += d.charge;
    assert!(
        charged <= 120 * MS,
        "{:.1} ms charged for about 114 ms of work",
        charged as f64 / 1e6
    );
}
