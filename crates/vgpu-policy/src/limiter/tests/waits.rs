//! Synchronisations that waited longer than the work they waited for was charged
//! ([`Look::waited`], `Limiter::waited`).
use super::*;

/// Key 7 (function 1) priced at 10 µs; then a round of 100 launches of it and 50 of function 9
/// over new grids, never timed (charged what unpriced launches cost), admitted at 1 s + 1 ms
/// under `percent`, beside `peers`. Returns the launches so far.
fn a_round(l: &mut Limiter, percent: u8, peers: &[Peer]) -> u64 {
    *l = Limiter::new(Priority::Normal, 1_000 * MS - 100 * US);
    let mut lk = look(1_000 * MS, 1, &[7], 1, percent);
    lk.units = &[1];
    lk.peers = peers;
    let timed = [bracket_at(0, 7, 10 * US, false)];
    lk.marks = &timed;
    let _ = l.look(&lk);
    let mut keys = vec![7u64; 100];
    keys.extend(1_000..1_050);
    let mut units = vec![1u64; 100];
    units.extend([9u64; 50]);
    let mut lk = look(1_000 * MS + MS, 151, &keys, 1, percent);
    lk.units = &units;
    lk.peers = peers;
    let d = l.look(&lk);
    assert!(
        d.charge < 10 * MS,
        "the round charged its guess: {}",
        d.charge
    );
    151
}

/// The look after the round's synchronisation: it began at 1 s + 2 ms and waited `waited`.
fn after_the_sync(
    l: &mut Limiter,
    launched: u64,
    waited: u64,
    percent: u8,
    peers: &[Peer],
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
    lk.peers = peers;
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
    let n = a_round(&mut l, 25, &[]);
    let d = after_the_sync(&mut l, n, 50 * MS, 25, &[]);
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
fn a_synchronisation_no_longer_than_its_work_was_charged_charges_nothing() {
    let mut l = Limiter::default();
    let n = a_round(&mut l, 25, &[]);
    let d = after_the_sync(&mut l, n, MS, 25, &[]);
    assert!(d.charge < 100 * US, "charged {}", d.charge);
    assert_eq!(l.stats().waited_ns, 0);
}

#[test]
fn what_a_synchronisation_waited_is_not_charged_where_it_may_not_be_its_work() {
    // Beside a live peer (its work may be what the synchronisation waited for), measuring
    // only (nothing is charged after the fact), or where every launch had a price of its own
    // (a synchronisation may wait for copies or host functions, no kernel's cost).
    let peers = [active_light_peer(1_000 * MS)];
    for (percent, peers) in [(25, &peers[..]), (100, &[][..])] {
        let mut l = Limiter::default();
        let n = a_round(&mut l, percent, peers);
        let _ = after_the_sync(&mut l, n, 50 * MS, percent, peers);
        assert_eq!(l.stats().waited_ns, 0, "{percent} % beside {peers:?}");
    }
    let mut l = Limiter::new(Priority::Normal, 1_000 * MS - 100 * US);
    let mut lk = look(1_000 * MS, 1, &[7], 1, 25);
    let timed = [bracket_at(0, 7, 10 * US, false)];
    lk.marks = &timed;
    let _ = l.look(&lk);
    let keys = [7u64; 150];
    let _ = l.look(&look(1_000 * MS + MS, 151, &keys, 1, 25));
    let _ = after_the_sync(&mut l, 151, 50 * MS, 25, &[]);
    assert_eq!(l.stats().waited_ns, 0, "every launch priced");
}

#[test]
fn each_synchronisation_counts_the_launches_since_the_last_one_began() {
    // Two rounds, each synchronised: the second's window holds the second round's launches
    // only (the first's were done when the first returned), so a second wait no longer than
    // what they were charged charges nothing, however many blind launches came before.
    let mut l = Limiter::default();
    let n = a_round(&mut l, 25, &[]);
    let first = after_the_sync(&mut l, n, 50 * MS, 25, &[]);
    assert!(first.charge >= 45 * MS, "{}", first.charge);
    let keys = [7u64; 10];
    let t = 1_000 * MS + 60 * MS;
    let _ = l.look(&look(t, n + 10, &keys, 1, 25));
    let w = [Waited {
        after: n + 10,
        from: t + 100 * US,
        ns: 300 * US,
    }];
    let mut lk = look(t + MS, n + 10, &[], 1, 25);
    lk.waited = &w;
    let d = l.look(&lk);
    assert!(d.charge < 100 * US, "charged {}", d.charge);
    assert_eq!(l.stats().waited_ns, first.charge);
}
