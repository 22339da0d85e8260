//! Issue 11's five targets on the deterministic model, each shown failing under the limiter as
//! it was ([`Policy::Old`]) and met by the new policy ([`Policy::New`]). Virtual time: every
//! run gives the same numbers on any machine. `cargo run -p vgpu-model --release --example
//! table` prints them all (docs/COMPUTE.md records the table).
use vgpu_model::targets::*;
use vgpu_model::*;

fn near(got: f64, want: f64, tol: f64) -> bool {
    (got - want).abs() <= tol
}

/// Target 1: a light service alone under 50 % and 25 %: p50 ≤ 1.1× and p99 ≤ 1.2× plain.
#[test]
fn a_light_service_under_its_share_is_not_slowed() {
    let plain = light_alone(Policy::Plain, 100, 10);
    for limit in [50, 25] {
        let old = light_alone(Policy::Old, limit, 10);
        assert!(
            old.p99 > 5.0 * plain.p99,
            "the old limiter charged host gaps: {limit} %: {old:?} vs plain {plain:?}"
        );
        let new = light_alone(Policy::New, limit, 10);
        assert!(
            new.p50 <= 1.1 * plain.p50 && new.p99 <= 1.2 * plain.p99,
            "{limit} %: {new:?} vs plain {plain:?}"
        );
    }
}

/// Target 1 on a host whose wake-ups have a tail (a virtual machine, as the H200 machine is):
/// a request that finds the gate closed waits for two wake-ups (the controller's, then its
/// own), and the tail lands in the p99 (the H200 measured 1.25× plain at 50 % and 25 %).
/// An armed window — opened before the request while the container is under its share and
/// alone — lets the request's launches pass at once.
#[test]
fn a_light_service_on_a_vm_host_is_not_slowed() {
    let host = vm_host();
    let plain = light_alone_with(host, Policy::Plain, 100, 10);
    for limit in [50, 25] {
        let new = light_alone_with(host, Policy::New, limit, 10);
        assert!(
            new.p50 <= 1.1 * plain.p50 && new.p99 <= 1.2 * plain.p99,
            "{limit} %: {new:?} vs plain {plain:?}"
        );
    }
}

/// An armed window (opened before a launch while the container is under its share and alone)
/// counts from its first launch, not from its opening: idle time is never banked. A burst of
/// 40 ms of work every 200 ms under 25 % must take about 160 ms (40 ms / 0.25, less the first
/// window's on-time): counted from the arming instead, the burst ran on up to `LAG` of banked
/// idle time and took 100 ms.
#[test]
fn an_armed_window_banks_no_idle_time() {
    let o = run(&Scenario {
        limits: vec![25],
        procs: vec![Proc {
            container: 0,
            workload: Workload::Requests {
                period: 200 * MS,
                offset: 0,
                kernels: 10,
                kernel: 4 * MS,
            },
            start: 0,
        }],
        duration: 10 * S,
        policy: Policy::New,
        params: Params::default(),
    });
    let p50 = quantile(&o.latencies[0], 0.5) as f64 / 1e6;
    assert!(p50 >= 140.0, "a 40 ms burst at 25 % took {p50:.1} ms");
    let share = 100.0 * o.work_between(0, 1, 10) as f64 / 9.0 / S as f64;
    assert!(share <= 20.5, "a 20 % load at a 25 % limit: {share:.1} %");
}

/// Target 3 with asynchronous loops watched through events (as `sm_bench` and pipelined
/// frameworks run): each event synchronisation returns while later kernels are queued, and the
/// watcher is back inside the next one. Beside a sync-each loop and a training loop, and two
/// of them with 10 µs kernels.
#[test]
fn event_watched_loops_add_up() {
    for (limits, w) in [
        (&[50u8, 50][..], &[WATCHED_LONG, saturating(MS, 1)][..]),
        (&[30, 70], &[WATCHED_LONG, TRAINING]),
        (&[50, 50], &[WATCHED_TINY, WATCHED_TINY]),
    ] {
        let s = shares(Policy::New, limits, w, &[0, 0], 8);
        assert_adds_up(&s, limits, &format!("{limits:?} {w:?}"));
    }
}

/// The pace's marks are timing events, and the GPU stamps each before the next kernel of its
/// queue starts ([`Params::event`]). Recorded at every launch the pace held, a run of 10 µs
/// kernels carried a mark every ~20 launches and two such containers lost 1.3 points of the
/// GPU in the model (2–3 on the H200, run 39); with at most `MARKS_IN_FLIGHT` unread the marks
/// cost at most half a point, and the training step they price keeps its share.
#[test]
fn the_pace_marks_cost_the_gpu_little() {
    let free = Params {
        event: 0,
        ..Params::default()
    };
    let w = [WATCHED_TINY; 2];
    let unpriced = shares_with(free, Policy::New, &[50, 50], &w, &[0, 0], 8);
    let priced = shares(Policy::New, &[50, 50], &w, &[0, 0], 8);
    assert!(
        priced.total >= unpriced.total - 0.6,
        "marks cost {:.2} points: {priced:?} against {unpriced:?}",
        unpriced.total - priced.total
    );
    let (_, t) = beside(Policy::New, 50, 50, H200_STEP, 6);
    assert!(t >= 0.97 * 50.0, "training {t:.1} % of 50");
}

/// Target 2: the light service beside a training loop (50/50, 30/70): its p99 ≤ 1.5× plain
/// co-location's; training ≥ 95 % of its share of its alone throughput.
#[test]
fn inference_beside_training_keeps_its_latency_and_training_its_share() {
    let (plain, _) = beside_training(Policy::Plain, 100, 100, 10);
    for (infer, train) in [(50, 50), (30, 70)] {
        let (old, _) = beside_training(Policy::Old, infer, train, 10);
        assert!(
            old.p99 > 1.5 * plain.p99,
            "old {infer}/{train}: {old:?} vs plain {plain:?}"
        );
        let (new, t) = beside_training(Policy::New, infer, train, 10);
        assert!(
            new.p99 <= 1.5 * plain.p99,
            "{infer}/{train}: {new:?} vs plain co-location {plain:?}"
        );
        assert!(
            t >= 0.95 * f64::from(train),
            "{infer}/{train}: training got {t:.1} % of its alone throughput"
        );
    }
}

/// Target 2 beside training loops that queue deep (async, no sync per iteration): pacing
/// keeps the holder's queue about `PACE_DEPTH` long, so the service waits for little more than
/// that when it preempts.
#[test]
fn inference_beside_an_async_training_loop() {
    // Training steps (the H200's PyTorch `train`, and one whose wait the preload cannot see):
    // `a_request_beside_a_training_step_waits_for_about_the_pace`.
    for training in [saturating(MS, 0), saturating(200 * US, 0)] {
        let (plain, _) = beside(Policy::Plain, 100, 100, training, 6);
        for (infer, train) in [(50, 50), (30, 70)] {
            let (old, _) = beside(Policy::Old, infer, train, training, 6);
            assert!(old.p99 > 1.5 * plain.p99, "old: {old:?} vs {plain:?}");
        }
        new_policy_beside(training, 1.5);
    }
}

/// Target 2 for the new policy beside `training` at 50/50 and 30/70: the service's p99 within
/// `within` × plain co-location's, the training at 95 % of its share or more.
fn new_policy_beside(training: Workload, within: f64) {
    let (plain, _) = beside(Policy::Plain, 100, 100, training, 6);
    for (infer, train) in [(50, 50), (30, 70)] {
        let (new, t) = beside(Policy::New, infer, train, training, 6);
        assert!(
            new.p99 <= within * plain.p99,
            "{training:?} {infer}/{train}: {new:?} vs plain co-location {plain:?}"
        );
        assert!(
            t >= 0.95 * f64::from(train),
            "{training:?}: training {t:.1} %"
        );
    }
}

/// Target 2 on the H200's own PyTorch step (`H200_STEP`, run 36's profile: matrix products of
/// 44–177 µs among optimizer kernels of 25–86 µs and short ones, with the host behind the GPU
/// in the loss and before the optimizer). Counted in launches of the mean time, a 0.5 ms pace
/// keeps the step's host from running ahead of those host-bound stretches as it does alone, and
/// training got 0.947 of its share at 50/50 (the H200: 0.91–0.98 over four runs, runs 33–36).
/// Asked here with a margin (0.97), since the GPU's runs spread ±3 points around the model's.
#[test]
fn the_h200_training_step_beside_the_service_keeps_its_share() {
    let (plain, _) = beside(Policy::Plain, 100, 100, H200_STEP, 6);
    for (infer, train) in [(50, 50), (30, 70)] {
        let (new, t) = beside(Policy::New, infer, train, H200_STEP, 6);
        assert!(
            new.p99 <= 0.9 * plain.p99,
            "{infer}/{train}: {new:?} vs plain co-location {plain:?}"
        );
        assert!(
            t >= 0.97 * f64::from(train),
            "{infer}/{train}: training {t:.1} %"
        );
    }
}

/// Target 2's "no worse than MPS": MPS shares the GPU in space, so a request beside training
/// never waits for it; under a time share a request waits for the holder's running kernel and
/// its paced queue. With short training kernels that queue is what the request waits for, and
/// it must not make the wait longer than plain hardware time-slicing's (which the H200 shows
/// above MPS's: run 26). A 2 ms pace looked at every 250 µs left p99 at 4.28 ms against plain
/// co-location's 3.71; a 1 ms pace looked at every 125 µs (`PACE_DEPTH`, `PACED_POLL`) brings
/// it under.
#[test]
fn a_request_beside_short_training_kernels_waits_less_than_under_time_slicing() {
    let training = saturating(200 * US, 0);
    let (plain, _) = beside(Policy::Plain, 100, 100, training, 6);
    for (infer, train) in [(50, 50), (30, 70)] {
        let (new, t) = beside(Policy::New, infer, train, training, 6);
        assert!(
            new.p99 <= plain.p99,
            "{infer}/{train}: {new:?} vs plain co-location {plain:?}"
        );
        assert!(t >= 0.95 * f64::from(train), "training {t:.1} %");
    }
}

fn assert_adds_up(s: &Shares, limits: &[u8], what: &str) {
    for (a, l) in s.avg.iter().zip(limits) {
        assert!(near(*a, f64::from(*l), 2.0), "{what}: {s:?}");
    }
    assert!(s.worst_window <= 4.0, "{what}: {s:?}");
    if limits.iter().map(|&l| u32::from(l)).sum::<u32>() == 100 {
        assert!(s.total >= 95.0, "{what}: {s:?}");
    }
}

fn misses(s: &Shares, limits: &[u8]) -> bool {
    s.avg
        .iter()
        .zip(limits)
        .any(|(a, l)| !near(*a, f64::from(*l), 2.0))
        || s.worst_window > 4.0
        || s.total < 95.0
}

const MIXES: [(&[u8], &[u64]); 4] = [
    (&[30, 70], &[0, 0]),
    (&[50, 50], &[0, 0]),
    (&[20, 30, 50], &[0, 0, 0]),
    (&[30, 70], &[0, 2]),
];

/// Target 3 on issue 11's own shape (11 ms kernels, sync every 4): the old limiter loses
/// time in every mix, the new one adds up.
#[test]
fn saturating_containers_add_up_where_they_did_not() {
    for (limits, starts) in MIXES {
        let w = vec![SATURATING; limits.len()];
        let old = shares(Policy::Old, limits, &w, starts, 8);
        assert!(
            misses(&old, limits),
            "old {limits:?} {starts:?} was fine? {old:?}"
        );
        let new = shares(Policy::New, limits, &w, starts, 8);
        assert_adds_up(&new, limits, &format!("{limits:?} late {starts:?}"));
    }
}

fn sweep(kernel: u64, secs: u64) {
    for sync in [0, 4, 1] {
        for (limits, starts) in MIXES {
            let w = vec![saturating(kernel, sync); limits.len()];
            let s = shares(Policy::New, limits, &w, starts, secs);
            assert_adds_up(
                &s,
                limits,
                &format!("{kernel} ns kernels, sync every {sync}, {limits:?} late {starts:?}"),
            );
        }
    }
}

/// Target 3 across kernel lengths and sync patterns (async, sync every 4, sync each).
#[test]
fn saturating_containers_add_up_with_10us_kernels() {
    sweep(10 * US, 4);
}

#[test]
fn saturating_containers_add_up_with_1ms_kernels() {
    sweep(MS, 6);
}

#[test]
fn saturating_containers_add_up_with_20ms_kernels() {
    sweep(20 * MS, 8);
}

/// Target 3 with different programs side by side (the worst case of the old limiter: 20 ms
/// kernels beside a training-like loop), and a third container arriving late.
#[test]
fn mixed_programs_add_up() {
    let old = shares(
        Policy::Old,
        &[30, 70],
        &[saturating(20 * MS, 1), TRAINING],
        &[0, 0],
        8,
    );
    assert!(misses(&old, &[30, 70]), "{old:?}");
    for (limits, w, starts) in [
        (
            &[30u8, 70][..],
            &[saturating(20 * MS, 1), TRAINING][..],
            &[0u64, 0][..],
        ),
        (
            &[50, 50],
            &[saturating(10 * US, 0), saturating(20 * MS, 4)],
            &[0, 0],
        ),
        (
            &[20, 30, 50],
            &[saturating(MS, 1), saturating(20 * MS, 0), TRAINING],
            &[0, 0, 2],
        ),
    ] {
        let s = shares(Policy::New, limits, w, starts, 8);
        assert_adds_up(&s, limits, &format!("{limits:?} {w:?}"));
    }
}

/// Target 4: two equally busy processes of one container split its share evenly (the old
/// limiter starved one of them in the model; 38.7 / 11.0 on the H200).
#[test]
fn processes_of_one_container_share_fairly() {
    for w in [SATURATING, saturating(MS, 0), TRAINING] {
        let (a, b) = two_processes(Policy::Old, 50, w, 8);
        assert!(!near(a, 25.0, 5.0) || !near(b, 25.0, 5.0), "old: {a} / {b}");
        let (a, b) = two_processes(Policy::New, 50, w, 8);
        assert!(
            near(a, 25.0, 5.0) && near(b, 25.0, 5.0),
            "{w:?}: {a:.1} / {b:.1}"
        );
    }
}

/// Target 5: one container alone keeps its accuracy, the same as before.
#[test]
fn single_container_accuracy_is_unchanged() {
    for kernel in [20 * US, MS, 11 * MS] {
        for sync in [0, 4, 1] {
            for limit in [10, 25, 50, 75] {
                let w = saturating(kernel, sync);
                let (new, worst) = single(Policy::New, limit, w, 5);
                let (old, _) = single(Policy::Old, limit, w, 5);
                let what = format!("{kernel} ns, sync {sync}, {limit} %");
                assert!(near(new, old, 0.5), "{what}: {old:.2} → {new:.2}");
                assert!(near(new, f64::from(limit), 1.0), "{what}: {new:.2}");
                assert!(worst <= 3.0, "{what}: worst second {worst:.2} off");
            }
        }
    }
}

/// The model itself: deterministic, and plain time-slicing behaves like the H200's (two
/// saturating processes share evenly, losing some time to context switches).
#[test]
fn the_model_is_deterministic_and_time_slices_plainly() {
    let a = shares(Policy::New, &[30, 70], &[SATURATING; 2], &[0, 0], 4);
    let b = shares(Policy::New, &[30, 70], &[SATURATING; 2], &[0, 0], 4);
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    let plain = shares(Policy::Plain, &[100, 100], &[SATURATING; 2], &[0, 0], 4);
    assert!(near(plain.avg[0], plain.avg[1], 1.0), "{plain:?}");
    assert!(
        (85.0..99.0).contains(&plain.total),
        "switches cost: {plain:?}"
    );
}

/// Target 2 beside the H200's PyTorch training step (`TRAIN_STEPS`: 12 matrix products of
/// 300 µs among 76 kernels of 15 µs, one synchronisation a step) and a step whose wait the
/// preload cannot see (`UNSEEN_STEPS`): a request that preempts waits for the training's queue,
/// which the pace must keep about `PACE_DEPTH` deep. Counted in mean launches, as the pace once
/// did from the window's first launch, and shortened each time a window's drain found the queue
/// short, the queue grew to most of a step: p99 5.36 / 5.44 ms beside `TRAIN_STEPS` against
/// plain co-location's 3.71 (the H200: 4.55 against 3.91, MPS 3.58, run 27). A pace that never
/// banks a pause and steers its time per launch by the drains it measures
/// (`DutyCycle::finish_paced`) brings it within a tenth of plain time-slicing.
#[test]
fn a_request_beside_a_training_step_waits_for_about_the_pace() {
    for training in [TRAIN_STEPS, UNSEEN_STEPS] {
        new_policy_beside(training, 1.1);
    }
}
