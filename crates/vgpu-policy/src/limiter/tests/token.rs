//! The node token between heavy processes: keys, ties, turns, hand-overs, a crowd, HAMi's
//! monitor, late looks.
use super::*;

#[test]
fn keys_compare_as_published_and_at_most_a_span_behind_the_latest() {
    let now = 10_000 * MS;
    // Two waiters that took turns all along, both far behind the clock (an oversubscribed
    // GPU: they bank nothing): the smaller key goes first, whoever was served last.
    let far = now - 5_000 * MS;
    let pair = [waiter(2, far + 3 * MS, now - 500 * MS, now)];
    assert!(may_take_now(
        1,
        Some((far, now - 10 * MS)),
        &pair,
        now,
        (now, 0)
    ));
    assert!(!may_take_now(
        1,
        Some((far + 6 * MS, 0)),
        &pair,
        now,
        (now, 0)
    ));
    let both = [pair[0], waiter(1, far, now - 10 * MS, now)];
    assert_eq!(next_in_line(&both, now), [Some(1), Some(2)]);
    // A key more than KEY_SPAN behind the latest counts as that (a clock running behind
    // the others' wins no more): it ties with one exactly that far behind, and the one
    // served longest ago goes first.
    let latest = now - 2 * MS;
    let floor = latest - ns(crate::token::KEY_SPAN);
    assert_eq!(crate::token::key_floor([latest, far, now + MS], now), floor);
    let skewed = [
        waiter(2, latest, 0, now),
        waiter(3, floor - 3_000 * MS, now - 10 * MS, now),
    ];
    assert_eq!(next_in_line(&skewed, now), [Some(3), Some(2)]);
    assert!(may_take_now(
        1,
        Some((floor, now - 500 * MS)),
        &skewed,
        now,
        (now, 0)
    ));
}

#[test]
fn in_a_crowd_keys_far_behind_tie_and_its_containers_bank() {
    let now = 1_001 * MS;
    let far = now - 900 * MS;
    // Four waiters, one 400 ms of virtual time further along than the rest (a price learned
    // beside the others' work overcharged it): a crowd. Every key from before BANK ties at
    // the floor, and the one served longest ago goes first.
    let crowd = [
        waiter(2, far, now - 10 * MS, now),
        waiter(3, far + MS, now - 20 * MS, now),
        waiter(4, far + 2 * MS, now - 30 * MS, now),
        waiter(5, far + 400 * MS, now - 800 * MS, now),
    ];
    assert!(crate::token::crowd(
        crowd.iter().filter_map(|p| p.state.want),
        now
    ));
    assert_eq!(next_in_line(&crowd, now), [Some(5), Some(4)]);
    // Three are not: the smallest key goes first.
    assert!(!crate::token::crowd(
        crowd[1..].iter().filter_map(|p| p.state.want),
        now
    ));
    assert_eq!(next_in_line(&crowd[1..], now), [Some(3), Some(4)]);
    // A heavy process taking turns in a crowd banks from now, as alone: at most BANK.
    let mut l = Limiter::default();
    make_heavy(&mut l);
    let mut lk = look(now, 400, &[], far, 50);
    lk.held = true;
    lk.peers = &crowd;
    for t in [now, now + MS] {
        lk.now = t;
        let d = l.look(&lk);
        assert_eq!(d.bank_at, Some(t), "{d:?}");
        assert_eq!(d.charge_vt(far, t, 50), t - ns(BANK));
    }
    // Beside two (three waiters with itself), it banks nothing once it takes turns; beside
    // three it is one of four, a crowd again.
    lk.peers = &crowd[2..];
    lk.now = now + 2 * MS;
    let _ = l.look(&lk);
    lk.now = now + 3 * MS;
    assert_eq!(l.look(&lk).bank_at, None);
    lk.peers = &crowd[1..];
    lk.now = now + 4 * MS;
    assert_eq!(l.look(&lk).bank_at, Some(now + 4 * MS));
}

#[test]
fn the_free_token_goes_to_the_smallest_due_key_and_never_before_its_own_key() {
    let now = 1_000 * MS;
    let wants = |id, key, served| waiter(id, key, served, now);
    // Keys 100 ms and 50 ms in the past: the smaller one goes first.
    let other = [wants(2, now - 100 * MS, 0)];
    assert!(!may_take_now(
        1,
        Some((now - 50 * MS, 0)),
        &other,
        now,
        (now, 0)
    ));
    let other = [wants(2, now - 50 * MS, 0)];
    assert!(may_take_now(
        1,
        Some((now - 100 * MS, 0)),
        &other,
        now,
        (now, 0)
    ));
    // A waiter whose own key is not due yet never takes it, even with nobody about.
    assert!(!may_take_now(1, Some((now + MS, 0)), &[], now, (now, 0)));
    assert!(may_take_now(1, Some((now, 0)), &[], now, (now, 0)));
}

#[test]
fn ties_go_to_the_least_recently_served_and_exactly_one_of_two_equal_keys_takes() {
    let now = 1_000 * MS;
    // Two waiters of one key (two processes of one container, or two containers at the
    // bank's floor), at a key that the published word rounds.
    let key = now - 150 * MS + 77;
    let wants = |id, served| waiter(id, key, served, now);
    // 1 was served at 10 ms, 2 at 5 ms: 2 goes first.
    assert!(!may_take_now(
        1,
        Some((key, 10 * MS)),
        &[wants(2, 5 * MS)],
        now,
        (now, 0)
    ));
    assert!(may_take_now(
        2,
        Some((key, 5 * MS)),
        &[wants(1, 10 * MS)],
        now,
        (now, 0)
    ));
    // Served alike: exactly one of them may take it (each compares its own key as the
    // other sees it).
    let one = may_take_now(1, Some((key, 0)), &[wants(2, 0)], now, (now, 0));
    let two = may_take_now(2, Some((key, 0)), &[wants(1, 0)], now, (now, 0));
    assert!(one ^ two, "1: {one}, 2: {two}");
}

#[test]
fn a_holder_drains_its_queue_before_it_hands_the_token_on() {
    let mut l = Limiter::default();
    make_heavy(&mut l);
    let now = 1_001 * MS;
    // A heavy waiter whose container is far behind this one's (at its share).
    let state = SlotState {
        want: Some(now - 400 * MS),
        heavy: true,
        active: true,
        ..SlotState::default()
    };
    let peers = [peer(2, state, 0, false, now)];
    let mut lk = look(now, 400, &[], now, 50);
    lk.held = true;
    lk.holding = true;
    lk.peers = &peers;
    assert!(l.queued(now) > ns(YIELD_EMPTY), "work is queued");
    let d = l.look(&lk);
    assert_eq!(
        d.token,
        Token::Hold,
        "it keeps the token while its queue drains"
    );
    assert!(d.drain, "it drains");
    assert_eq!(d.budget, 400, "it admits nothing meanwhile");
    // Drained, it hands the token on.
    lk.now = now + 3 * MS;
    lk.drained = true;
    let d = l.look(&lk);
    assert_eq!(d.token, Token::Free);
}

#[test]
fn a_holder_waiting_in_a_synchronisation_keeps_its_turn_until_a_waiter_is_due() {
    // A loop that synchronises after each 1 ms kernel, beside a container at its share
    // (its key 20 ms ahead). Released at each synchronisation, the token stayed free
    // (nobody was due) and the loop's next launch waited at its gate for its own
    // controller to take it back: on the model the loop got 46.7 % of its alone rate at 50 %
    // beside 20 ms kernels, the GPU idle 3 % of the time (the H200's run 80: 45.0 %).
    let mut l = Limiter::default();
    make_heavy(&mut l);
    let now = 1_001 * MS;
    let peers = [waiter(2, now + 20 * MS, 0, now)];
    let mut lk = look(now, 400, &[], 0, 50);
    lk.holding = true;
    lk.syncing = true;
    lk.peers = &peers;
    let d = l.look(&lk);
    assert_eq!(d.token, Token::Hold, "nobody is due: its turn goes on");
    assert!(!d.drain, "it does not drain for nobody");
    // The waiter's key comes due while it still waits in the synchronisation: it hands
    // its turn on (its queue drained first).
    let peers = [waiter(2, now, 0, now)];
    lk.now = now + 100 * US;
    lk.peers = &peers;
    lk.drained = true;
    let d = l.look(&lk);
    assert_eq!(d.token, Token::Free);
}

#[test]
fn a_process_taking_turns_banks_nothing_and_one_coming_back_banks_from_the_gpus_time() {
    let mut l = Limiter::default();
    make_heavy(&mut l);
    let now = 1_001 * MS;
    // Its container 900 ms behind the clock (an oversubscribed GPU), waiting for its turn
    // beside a heavy holder: from its second look on it takes turns, and its virtual time
    // stays where it is (the wait is no idleness).
    let far = now - 900 * MS;
    let peers = [heavy_holder(now)];
    let mut lk = look(now, 400, &[], far, 50);
    lk.held = true;
    lk.peers = &peers;
    let _ = l.look(&lk);
    lk.now = now + MS;
    let d = l.look(&lk);
    assert!(matches!(d.token, Token::Want(_)), "{d:?}");
    assert_eq!(d.bank_at, None);
    assert_eq!(d.charge_vt(far, now + MS, 50), far);
    assert_eq!(d.token, Token::Want(credit_at(far)));
    // Alone on the GPU it banks from now: at most BANK.
    let mut l = Limiter::default();
    make_heavy(&mut l);
    let d = l.look(&look(now, 400, &[], far, 50));
    assert_eq!(d.bank_at, Some(now));
    assert_eq!(d.charge_vt(far, now, 50), now - ns(BANK));
    // Coming back beside a container that took turns all along, 900 ms behind the clock, it
    // banks from that container's virtual time: at most BANK ahead of it in line.
    let mut l = Limiter::default();
    make_heavy(&mut l);
    let waiting = [waiter(2, far, 0, now)];
    let mut lk = look(now, 400, &[], 1, 50);
    lk.peers = &waiting;
    let d = l.look(&lk);
    let gpu = waiting[0].state.want.unwrap() + ns(AHEAD);
    assert_eq!(d.bank_at, Some(gpu));
    assert_eq!(d.charge_vt(1, now, 50), gpu - ns(BANK));
}

#[test]
fn a_process_taking_turns_banks_nothing_until_it_has_been_idle() {
    let mut l = Limiter::default();
    let now = 1_000 * MS;
    let peers = [waiter(2, now - 10 * MS, 0, now)];
    // Heavy (at its share) beside a heavy waiter, a launch held: it takes turns.
    let keys = [1u64; 4];
    let mut lk = look(now, 4, &keys, now, 50);
    lk.held = true;
    lk.peers = &peers;
    let _ = l.look(&lk);
    lk.keys = &[];
    // Then, its container far behind (it is light for a moment), it waits in a
    // synchronisation: it still banks nothing.
    let far = now - 900 * MS;
    lk.vt = far;
    lk.held = false;
    lk.syncing = true;
    for t in [now + MS, now + 2 * MS] {
        lk.now = t;
        let d = l.look(&lk);
        assert_eq!(d.bank_at, None, "{d:?}");
        assert_eq!(d.charge_vt(far, t, 50), far);
    }
    // 20 ms without a launch, none held, no synchronisation (its threads wait for a CPU on
    // a loaded host): still none.
    lk.syncing = false;
    lk.now = now + 3 * MS + ns(ACTIVE);
    let _ = l.look(&lk);
    lk.now += MS;
    assert_eq!(l.look(&lk).bank_at, None);
    // Idle for BANK, it banks again.
    lk.now = now + 2 * MS + ns(BANK);
    let _ = l.look(&lk);
    lk.now += MS;
    assert!(l.look(&lk).bank_at.is_some());
}

#[test]
fn a_process_that_hamis_monitor_blocks_neither_wants_nor_keeps_the_token() {
    let mut l = Limiter::default();
    make_heavy(&mut l);
    let now = 1_001 * MS;
    // A heavy waiter ahead of it in line (it will never be behind this one, which charges
    // nothing while blocked).
    let waiting = [waiter(2, now - MS, 0, now)];
    let mut lk = look(now, 400, &[], now - 500 * MS, 50);
    lk.held = true;
    lk.blocked = true;
    lk.peers = &waiting;
    assert_eq!(l.look(&lk).token, Token::Free);
    // Holding it, it hands it on once its queue has drained.
    lk.holding = true;
    lk.now = now + MS;
    let d = l.look(&lk);
    assert!(d.drain, "{d:?}");
    assert_eq!(d.held, Held::Blocked);
    lk.now = now + 2 * MS;
    lk.drained = true;
    assert_eq!(l.look(&lk).token, Token::Free);
}

#[test]
fn a_turn_is_charged_its_own_gaps_where_another_container_waited_through_it() {
    // A turn: its queue empty, 4 launches of 10 µs kernels, a look 100 µs later (the queue
    // ran dry 60 µs before it), another 100 µs later (dry throughout), and then, a waiter
    // now far behind it, it hands the token on. `kin`: the waiter is a process of its own
    // container.
    let turn = |kin: bool| {
        let mut l = Limiter::default();
        make_heavy(&mut l);
        let now = 1_001 * MS;
        let heavy = |key| {
            let mut w = waiter(2, key, 0, now);
            w.kin = kin;
            w.state.active = true;
            w
        };
        let ahead = [heavy(now - 10 * MS)];
        let keys = [1u64; 4];
        let mut lk = look(now, 400, &[], now - 200 * MS, 50);
        lk.holding = true;
        lk.held = true;
        lk.peers = &ahead;
        lk.empty = true;
        assert_eq!(l.look(&lk).token, Token::Hold);
        lk.empty = false;
        lk.now = now + 100 * US;
        lk.launched = 404;
        lk.keys = &keys;
        assert_eq!(l.look(&lk).token, Token::Hold);
        let behind = [heavy(now - 400 * MS)];
        lk.now = now + 200 * US;
        lk.keys = &[];
        lk.peers = &behind;
        lk.drained = true;
        let d = l.look(&lk);
        assert_eq!(d.token, Token::Free, "{d:?}");
        // What the next look charges, nothing new launched.
        lk.now = now + 300 * US;
        lk.holding = false;
        l.look(&lk).charge
    };
    assert_eq!(turn(true), 0);
    assert_eq!(turn(false), 100 * US);
}

#[test]
fn a_heavy_process_waits_for_the_token_while_another_heavy_one_holds_it() {
    let mut l = Limiter::new(Priority::Normal, 0);
    let peer = Peer {
        id: 2,
        state: SlotState {
            heavy: true,
            active: true,
            ..SlotState::default()
        },
        served: 0,
        beat: 0,
        holder: true,
        kin: false,
    };
    make_heavy(&mut l);
    let peers = [peer];
    let mut lk = look(1_001 * MS, 4, &[], 1_000 * MS, 50);
    lk.held = true;
    lk.peers = &peers;
    let d = l.look(&lk);
    assert!(matches!(d.token, Token::Want(_)), "{:?}", d.token);
    assert_eq!(d.budget, 4, "admits nothing without the token");
    assert_eq!(d.held, Held::Peer);
    assert!(d.peer_runs(), "the holder runs meanwhile");
    // Holding it, it runs (once its queue has room).
    lk.holding = true;
    lk.now = 1_010 * MS;
    let d = l.look(&lk);
    assert_eq!(d.token, Token::Hold);
    // (Its prices were never measured alone: it first asks the others to keep off the GPU
    // for a clean sample, and admits again once they had time to stop.)
    lk.now = 1_011 * MS;
    let d = l.look(&lk);
    assert_eq!(d.token, Token::Hold);
    assert!(d.budget > 4, "{d:?}");
}

/// A holder at 70 % beside a heavy peer whose turn is not due, its looks coming `late` after
/// the time each decision asked for (a controller starved of CPU), the program launching 1 ms
/// kernels as fast as the gate admits them: how many it admits at each of the last 20 looks.
fn admitted_per_late_look(late: u64) -> Vec<u64> {
    let mut l = Limiter::new(Priority::Normal, 1_000 * MS);
    let keys = vec![5u64; 4096];
    let priced = [bracket(5, MS, false)];
    // Its first launch, timed at 1 ms.
    let (mut launched, mut budget, mut now) = (0u64, 1u64, 1_000 * MS);
    let mut per_look = Vec::new();
    for i in 0..60 {
        // The peer's turn is due only later: this process keeps the token.
        let peers = [waiter(2, now + 10_000 * MS, 0, now)];
        let n = budget - launched;
        launched += n;
        let mut lk = look(
            now,
            launched,
            &keys[..usize::try_from(n).unwrap()],
            now - 10 * MS,
            70,
        );
        lk.held = true;
        lk.holding = true;
        lk.peers = &peers;
        lk.marks = if i == 0 { &priced } else { &[] };
        let d = l.look(&lk);
        assert_eq!(d.token, Token::Hold, "look {i}: {d:?}");
        per_look.push(d.budget - launched);
        budget = d.budget;
        // The next look: when it asked, or `late` after that.
        now = d.next.max(now + 1) + late;
    }
    per_look.split_off(40)
}

#[test]
fn a_holder_whose_looks_come_late_keeps_a_queue_that_lasts_to_its_next_look() {
    // In time, a turn's queue: a couple of its 1 ms kernels at a look.
    let in_time = admitted_per_late_look(0);
    assert!(in_time.iter().all(|n| *n <= 3), "{in_time:?}");
    // Every look 20 ms late (`MAX_LATE`): about enough for the GPU to run until the next one
    // (20 a look). Only looks timed for the queue counted as late before: the holder never
    // used up its room (two launches at each look), kept a 2 ms queue, and the GPU idled 18 ms
    // of every 20.
    let late = admitted_per_late_look(20 * MS);
    assert!(late.iter().all(|n| *n >= 15), "{late:?}");
}

#[test]
fn a_process_leaves_the_free_token_to_a_live_waiter_a_whole_turn_behind_it() {
    // A heavy process at 50 % whose container is at now (its key: now - AHEAD), the token free.
    let decide = |waiter_key: u64, beat: u64, at: u64| {
        let mut l = Limiter::new(Priority::Normal, 0);
        make_heavy(&mut l);
        let mut d = None;
        for now in [1_001 * MS, at] {
            let peers = [Peer {
                beat,
                ..waiter(2, waiter_key, 0, now)
            }];
            let mut lk = look(now, 400, &[], now, 50);
            lk.held = true;
            lk.peers = &peers;
            d = Some(l.look(&lk));
        }
        d.unwrap()
    };
    let key = 1_002 * MS - ns(AHEAD);
    // A waiter whose container is more than a turn (`TURN_VT`) behind: as holder it would hand
    // the token to it at once, so it leaves it there, its own want published.
    let d = decide(400 * MS, 7, 1_002 * MS);
    assert_eq!(d.token, Token::Wait(key), "{d:?}");
    assert_eq!(d.slot.want, Some(key));
    assert_eq!(d.held, Held::Peer, "and admits nothing");
    // Less than a turn behind: it wants the token as before (the order decides who takes it).
    let d = decide(key - ns(TURN_VT) / 2, 7, 1_002 * MS);
    assert_eq!(d.token, Token::Want(key), "{d:?}");
    // A waiter whose heartbeat stood still past HOLD_STILL (it died) holds nobody back.
    let d = decide(400 * MS, 7, 1_001 * MS + ns(HOLD_STILL) + MS);
    assert!(matches!(d.token, Token::Want(_)), "{d:?}");
}

/// The grace a waiter leaves the first in line ([`Limiter::handoff_grace`]): `MAX_LATE` more
/// than `token::HANDOFF_GRACE` while its heartbeat moves, whatever the waiter's own lateness,
/// and the plain grace once it stood still for `HELD_WAIT` and `MAX_LATE` (it died or hangs:
/// the GPU does not idle for it).
#[test]
fn a_waiter_leaves_a_live_first_in_line_a_longer_grace_and_a_still_one_the_plain_one() {
    let plain = ns(crate::token::HANDOFF_GRACE);
    let grace_after = |beats: &[u64], looks: &[u64]| {
        let mut l = Limiter::new(Priority::Normal, 0);
        make_heavy(&mut l);
        for (&now, &beat) in looks.iter().zip(beats) {
            let peers = [Peer {
                beat,
                // Ahead of this process in line, but not a whole turn behind it: it wants the
                // token (a waiter a turn behind it would be left the token, `Token::Wait`).
                ..waiter(2, now - 60 * MS, 0, now)
            }];
            let mut lk = look(now, 400, &[], now, 50);
            lk.held = true;
            lk.peers = &peers;
            let _ = l.look(&lk);
        }
        l.handoff_grace()
    };
    let t = 1_001 * MS;
    let looks = [t, t + 40 * MS, t + 80 * MS];
    // Its beat moves at each look: the longer grace.
    assert_eq!(
        grace_after(&[t, t + 40 * MS, t + 80 * MS], &looks),
        plain + ns(MAX_LATE)
    );
    // Still for 80 ms (past HELD_WAIT and MAX_LATE, 70 ms): the plain grace.
    assert_eq!(grace_after(&[t, t, t], &looks), plain);
    // Still for 40 ms only: still the longer one.
    assert_eq!(
        grace_after(&[t, t], &[t, t + 40 * MS]),
        plain + ns(MAX_LATE)
    );
}
