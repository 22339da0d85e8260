//! The targets of issues 11 and 23 as measurements on the model: each function runs the
//! scenarios of one target under a policy and returns the figures the target speaks of. The
//! tests (`tests/targets.rs`) assert them; `cargo run -p vgpu-model --release --example table`
//! prints them, plain time-slicing beside vgpu.
use crate::*;

/// The light inference service of issue 11: 1.6 ms of GPU work (8 kernels of 200 µs), a
/// request every 20 ms.
pub const LIGHT: Workload = Workload::Requests {
    period: 20 * MS,
    offset: 0,
    kernels: 8,
    kernel: 200 * US,
};

/// A training-like loop: iterations of 8 kernels of 160 µs, a sync per iteration.
pub const TRAINING: Workload = Workload::Loop {
    kernel: 160 * US,
    sync_every: 8,
    host: 20 * US,
};

/// `sm_bench`'s `long` shape: 20 ms kernels launched asynchronously, each watched by an event.
pub const WATCHED_LONG: Workload = Workload::Ring {
    kernel: 20 * MS,
    mark_every: 1,
    host: 5 * US,
};

/// `sm_bench`'s `tiny` shape: 10 µs kernels launched asynchronously, an event every 100, as
/// fast as the launch path goes (the H200 ran it GPU-bound, ~101 000 launches a second alone).
pub const WATCHED_TINY: Workload = Workload::Ring {
    kernel: 10 * US,
    mark_every: 100,
    host: 0,
};

/// The saturating loop of issue 11's share measurements: ~11 ms kernels, sync every 4.
pub const SATURATING: Workload = Workload::Loop {
    kernel: 11 * MS,
    sync_every: 4,
    host: 5 * US,
};

/// A saturating loop of `kernel` ns kernels, synchronising every `sync_every` (0: never).
pub fn saturating(kernel: u64, sync_every: u32) -> Workload {
    Workload::Loop {
        kernel,
        sync_every,
        host: 5 * US,
    }
}

/// Shares of saturating containers (one process each).
#[derive(Clone, Debug)]
pub struct Shares {
    /// Each container's average share (percent of its alone throughput), from its start.
    pub avg: Vec<f64>,
    /// The largest deviation from its limit of any container in any whole 1 s window in
    /// which all containers ran (points).
    pub worst_window: f64,
    /// The GPU's total work in the time all ran, as percent of one container alone.
    pub total: f64,
}

/// Runs one saturating process per container (`w[i]` at `limits[i]`, starting at
/// `starts[i]` s) for `secs` seconds; shares are of each workload's alone throughput, measured
/// over the seconds after everyone started (the first second of each skipped).
pub fn shares(policy: Policy, limits: &[u8], w: &[Workload], starts: &[u64], secs: u64) -> Shares {
    shares_with(Params::default(), policy, limits, w, starts, secs)
}

/// [`shares`] with other timing constants (a slower context switch, a slower wake-up).
pub fn shares_with(
    params: Params,
    policy: Policy,
    limits: &[u8],
    w: &[Workload],
    starts: &[u64],
    secs: u64,
) -> Shares {
    let procs = (0..limits.len())
        .map(|i| Proc {
            container: i,
            workload: w[i],
            start: starts[i] * S,
        })
        .collect();
    let o = run(&Scenario {
        limits: limits.to_vec(),
        priorities: Vec::new(),
        work_conserving: Vec::new(),
        procs,
        duration: secs * S,
        policy,
        params,
    });
    let from = *starts.iter().max().unwrap_or(&0) as usize + 1;
    let to = secs as usize;
    let mut avg = Vec::new();
    let mut worst: f64 = 0.0;
    let mut total = 0.0;
    for i in 0..limits.len() {
        let alone = alone_rate(w[i], params, 3);
        let mine = o.work_between(i, starts[i] as usize + 1, to) as f64
            / (to - starts[i] as usize - 1) as f64;
        avg.push(100.0 * mine / alone);
        total += 100.0 * o.work_between(i, from, to) as f64 / (to - from) as f64 / alone;
        for s in from..to {
            let got = 100.0 * o.per_second[i][s] as f64 / alone;
            worst = worst.max((got - f64::from(limits[i])).abs());
        }
    }
    Shares {
        avg,
        worst_window: worst,
        total,
    }
}

/// Two equally busy processes of one container at `limit`: each one's share (percent of the
/// workload's alone throughput).
pub fn two_processes(policy: Policy, limit: u8, w: Workload, secs: u64) -> (f64, f64) {
    let params = Params::default();
    let procs = (0..2)
        .map(|_| Proc {
            container: 0,
            workload: w,
            start: 0,
        })
        .collect();
    let o = run(&Scenario {
        limits: vec![limit],
        priorities: Vec::new(),
        work_conserving: Vec::new(),
        procs,
        duration: secs * S,
        policy,
        params,
    });
    let alone = alone_rate(w, params, 3);
    let share = |p| 100.0 * o.work_between(p, 1, secs as usize) as f64 / (secs - 1) as f64 / alone;
    (share(0), share(1))
}

/// Request latency percentiles (ms): p50, p99.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// A service's latency over the requests due after the warm-up ([`crate::WARM`]): its kernels
/// unpriced, its neighbour starting, as the GPU benchmarks' services warm up before they are
/// measured (`decode_service.py`).
fn latency(v: &[u64]) -> Latency {
    // A service that answered nothing past its first request stalled: no bar holds for it
    // (read as 0, the decode service held for seconds by module loads priced as kernels
    // passed every latency bar).
    if v.is_empty() {
        return Latency {
            p50: f64::INFINITY,
            p99: f64::INFINITY,
        };
    }
    Latency {
        p50: quantile(v, 0.5) as f64 / 1e6,
        p99: quantile(v, 0.99) as f64 / 1e6,
    }
}

/// The light service alone at `limit` (100: plain, no limiter), for `secs` seconds.
pub fn light_alone(policy: Policy, limit: u8, secs: u64) -> Latency {
    light_alone_with(Params::default(), policy, limit, secs)
}

/// A host whose wake-ups have a tail, as a virtual machine's vCPUs do (the H200 machine is
/// one): one futex wake in 25 (pseudo-random) takes 400 µs longer.
pub fn vm_host() -> Params {
    Params {
        wake_tail: (25, 400 * US),
        ..Params::default()
    }
}

/// [`light_alone`] with other timing constants (e.g. [`vm_host`]).
pub fn light_alone_with(params: Params, policy: Policy, limit: u8, secs: u64) -> Latency {
    service_alone_with(params, policy, LIGHT, limit, secs)
}

/// One process of `w` alone at `limit` (100: plain, no limiter) for `secs` seconds.
pub fn alone(params: Params, policy: Policy, w: Workload, limit: u8, secs: u64) -> Outcome {
    run(&Scenario {
        limits: vec![limit],
        priorities: Vec::new(),
        work_conserving: Vec::new(),
        procs: vec![Proc {
            container: 0,
            workload: w,
            start: 0,
        }],
        duration: secs * S,
        policy: if limit >= 100 { Policy::Plain } else { policy },
        params,
    })
}

/// The light service beside a training loop, at `infer` / `train` percent (100 / 100: plain
/// co-location): the service's latency and training's throughput as percent of its alone
/// throughput.
pub fn beside_training(policy: Policy, infer: u8, train: u8, secs: u64) -> (Latency, f64) {
    beside(policy, infer, train, TRAINING, secs)
}

/// [`beside_training`] with another training workload (e.g. an async loop that queues deep).
pub fn beside(
    policy: Policy,
    infer: u8,
    train: u8,
    training: Workload,
    secs: u64,
) -> (Latency, f64) {
    let b = service_beside_with(
        Params::default(),
        policy,
        [infer, train],
        [Priority::Normal; 2],
        LIGHT,
        training,
        secs,
    );
    (b.latency, 100.0 * b.training)
}

/// One saturating container alone at `limit`: its share (percent of alone) on average and the
/// worst 1 s window's deviation (points).
pub fn single(policy: Policy, limit: u8, w: Workload, secs: u64) -> (f64, f64) {
    let s = shares(policy, &[limit], &[w], &[0], secs);
    (s.avg[0], s.worst_window)
}

/// A GPU-bound training step whose end the limiter cannot see (`Workload::Steps`): 88
/// launches of 53 µs (4.7 ms of GPU work) with 10 µs of host work after each, then an unseen
/// wait for the GPU: the shape of the H200's PyTorch `train` loop (run 27) as it looked before
/// run 31 showed its `torch.cuda.synchronize()` seen; kept as the case of a wait the preload
/// cannot see.
pub const UNSEEN_STEPS: Workload = Workload::Steps {
    kernels: 88,
    kernel: 53 * US,
    long: 0,
    long_every: 0,
    host: 10 * US,
    seen: false,
};

/// The H200's PyTorch `train` step (hidden 4096, depth 4, batch 4096; runs 27 and 31) as the
/// GPU runs it: 88 launches, 4.7 ms of GPU work, of which every 7th is a 300 µs matrix product
/// (12 of them, 3.6 ms) and the rest 15 µs kernels, 10 µs of host work after each, then a
/// synchronisation the preload sees. The mean launch (54 µs) is a poor guide to what a queue
/// of a given number of launches holds.
pub const TRAIN_STEPS: Workload = Workload::Steps {
    kernels: 88,
    kernel: 15 * US,
    long: 300 * US,
    long_every: 7,
    host: 10 * US,
    seen: true,
};

const fn l(host_us: u32, gpu_us: u32, key: u32) -> Launch {
    Launch {
        host_us,
        gpu_us,
        key,
    }
}

/// One step of the H200's PyTorch `train` loop (hidden 4096, depth 4, batch 4096) as
/// `tests/gpu/compute/step_trace.py` recorded it (run 36): 88 launches, 4.3 ms of GPU work —
/// 13 matrix products of 44–177 µs, 32 optimizer kernels of 25–86 µs, 43 others of 1–50 µs —
/// keyed by kernel, each with the host time before it: 8 µs, plus half the GPU gap the
/// profiled run showed before it where the host was behind (the loss's short kernels, the
/// optimizer's 530 µs set-up); then the synchronisation the preload sees.
pub const H200_STEP: Workload = Workload::Trace {
    launches: &H200_STEP_LAUNCHES,
    seen: true,
};

const H200_STEP_LAUNCHES: [Launch; 88] = [
    l(12, 1, 0),
    l(101, 24, 1),
    l(18, 24, 1),
    l(162, 177, 2),
    l(12, 23, 3),
    l(12, 1, 0),
    l(12, 26, 1),
    l(30, 172, 2),
    l(12, 23, 3),
    l(12, 1, 0),
    l(12, 25, 1),
    l(12, 167, 2),
    l(12, 22, 3),
    l(12, 1, 0),
    l(12, 26, 1),
    l(12, 169, 2),
    l(12, 23, 3),
    l(12, 2, 4),
    l(12, 8, 5),
    l(12, 44, 6),
    l(12, 8, 7),
    l(12, 10, 8),
    l(12, 14, 9),
    l(53, 1, 0),
    l(229, 4, 10),
    l(34, 9, 11),
    l(80, 5, 10),
    l(67, 13, 12),
    l(115, 48, 13),
    l(18, 47, 13),
    l(12, 16, 14),
    l(92, 11, 8),
    l(127, 2, 15),
    l(82, 33, 1),
    l(81, 175, 2),
    l(12, 164, 16),
    l(12, 22, 14),
    l(12, 50, 17),
    l(12, 3, 18),
    l(30, 33, 1),
    l(55, 174, 2),
    l(12, 166, 16),
    l(12, 22, 14),
    l(12, 50, 17),
    l(12, 3, 18),
    l(12, 33, 1),
    l(12, 172, 2),
    l(12, 169, 16),
    l(12, 22, 14),
    l(12, 49, 17),
    l(12, 3, 18),
    l(12, 33, 1),
    l(12, 171, 16),
    l(12, 22, 14),
    l(12, 49, 17),
    l(12, 3, 18),
    l(542, 44, 19),
    l(12, 46, 20),
    l(12, 45, 19),
    l(12, 25, 19),
    l(12, 66, 20),
    l(12, 63, 20),
    l(12, 62, 20),
    l(12, 34, 19),
    l(12, 44, 19),
    l(12, 46, 20),
    l(12, 45, 19),
    l(12, 25, 19),
    l(12, 66, 20),
    l(12, 65, 20),
    l(12, 62, 20),
    l(12, 33, 19),
    l(12, 46, 20),
    l(12, 47, 20),
    l(12, 45, 20),
    l(12, 28, 19),
    l(12, 46, 20),
    l(12, 46, 20),
    l(12, 47, 20),
    l(12, 27, 19),
    l(12, 45, 19),
    l(12, 45, 19),
    l(12, 45, 20),
    l(12, 26, 19),
    l(12, 86, 20),
    l(12, 81, 20),
    l(12, 83, 20),
    l(12, 41, 19),
];

// ----- issue 23: framework-shaped work ----------------------------------------------------------

/// A host-bound launch stream (issue 23): a 1.5 µs kernel, then `gap` ns of host work, a
/// synchronisation every 256 launches — eager decode's and a training step's small ops. With
/// the model's 4 µs launch path it keeps the GPU 16 % (5 µs gaps) to 1.4 % (100 µs) busy.
pub fn stream(gap: u64) -> Workload {
    Workload::Loop {
        kernel: 1_500,
        sync_every: 256,
        host: gap,
    }
}

/// An eager transformer decode service at batch 1 (issue 23's shape): a request every 250 ms,
/// 32 tokens of 150 launches each (8 µs kernels, 35 µs of host work before each), a
/// synchronisation per token: ~200 ms a request alone, the GPU ~20 % busy while it runs.
pub const DECODE: Workload = Workload::Decode {
    period: 250 * MS,
    offset: 0,
    tokens: 32,
    kernels: 150,
    kernel: 8 * US,
    host: 35 * US,
    keys: 1,
    fresh: 0,
    fresh_kernel: 0,
    jitter: 0,
};

/// The H200's decode service as run 66 traced it: a request every 250 ms, 33 tokens of 165
/// launches of 3 µs kernels (57 kernels in turn) with 30 µs of host work before each, a
/// synchronisation per token (~175 ms a request alone, the GPU ~7 % busy).
pub fn h200_decode() -> Workload {
    Workload::Decode {
        period: 250 * MS,
        offset: 0,
        tokens: 33,
        kernels: 165,
        kernel: 3 * US,
        host: 30 * US,
        keys: 57,
        fresh: 0,
        fresh_kernel: 0,
        jitter: 0,
    }
}

/// `p` with the GPU's costs that bring the model close to the H100 of runs 145-148: 400 µs a
/// change of context and 3 ms time slices (with [`H100_TRAINER_HOST`] and the decode service
/// [`jittered`] by 30 %, plain co-location answers at p50 1.30x alone and leaves the ResNet
/// step 0.858 of its alone rate, the H100 1.32-1.54x and 0.84-0.88; the default costs with the
/// same host work, 1.16x and 0.991). The `slowhost` example's `h100`.
pub fn h100(p: Params) -> Params {
    Params {
        switch: 400 * US,
        timeslice: 3 * MS,
        ..p
    }
}

/// The ResNet step's host work on the H100 of runs 145-148, in percent of [`resnet_step`]'s
/// ([`host_scaled`]): with it the step at 30/70 beside the decode service falls behind its
/// share, as the H100's trainer did (charged 54-63 % of the GPU).
pub const H100_TRAINER_HOST: u64 = 140;

/// `w` (a [`Workload::Decode`]) with each token's host work moved by up to `percent` % either
/// way ([`Workload::Decode::jitter`]); any other workload as it is. At 30 %, the model's H200
/// decode service beside its ResNet step foretells 69 % of its synchronisations, as the
/// limiter's counters on the H100 found of the real service (54-73 %, runs 106-107).
pub fn jittered(mut w: Workload, percent: u32) -> Workload {
    if let Workload::Decode { jitter, .. } = &mut w {
        *jitter = percent;
    }
    w
}

/// `w` with every launch's host work scaled to `percent` % (its `host`, or a
/// [`Workload::Trace`]'s launches' `host_us`): the same program on a slower or faster host
/// (run 127's H100 machine ran the decode service at 185 ms a request where run 124's took 87,
/// the ResNet loop at 34 steps/s against 36). Any other workload (it has no host work) as it is.
pub fn host_scaled(mut w: Workload, percent: u64) -> Workload {
    let scale = |t: u64| t.saturating_mul(percent) / 100;
    match &mut w {
        Workload::Trace { launches, .. } => {
            let v: Vec<Launch> = launches
                .iter()
                .map(|l| Launch {
                    host_us: u32::try_from(scale(u64::from(l.host_us))).unwrap_or(u32::MAX),
                    ..*l
                })
                .collect();
            *launches = Box::leak(v.into_boxed_slice());
        }
        Workload::Loop { host, .. }
        | Workload::Ring { host, .. }
        | Workload::Steps { host, .. }
        | Workload::Decode { host, .. } => *host = scale(*host),
        _ => {}
    }
    w
}

/// A CNN training step with a real optimizer (issue 23's ResNet-50 shape): 320 launches of
/// convolutions and their gradients (every 8th 600 µs, the others 120 µs) with 20 µs of host
/// work before each, then 160 optimizer launches of 8 µs with 30 µs of host work before each
/// (host-bound), then a synchronisation: the GPU ~90 % busy alone.
pub fn cnn_step() -> Workload {
    cnn_step_with(160, false)
}

/// [`cnn_step`] with `optimizer` launches in its host-bound phase, run before the convolutions
/// when `optimizer_first` (the queue is empty then, so the GPU idles through it: with 800, the
/// GPU is ~75 % busy alone, as eager PyTorch's ResNet-50 on the H200).
pub fn cnn_step_with(optimizer: u32, optimizer_first: bool) -> Workload {
    let convs = (0..320u32).map(|i| {
        let long = i % 8 == 7;
        Launch {
            host_us: 20,
            gpu_us: if long { 600 } else { 120 },
            key: if long { 1 } else { 2 + i % 6 },
        }
    });
    let opt = (0..optimizer).map(|i| Launch {
        host_us: 30,
        gpu_us: 8,
        key: 10 + i % 4,
    });
    let v: Vec<Launch> = if optimizer_first {
        opt.chain(convs).collect()
    } else {
        convs.chain(opt).collect()
    };
    Workload::Trace {
        launches: Box::leak(v.into_boxed_slice()),
        seen: true,
    }
}

/// Eager PyTorch's ResNet-50 training step on the H200 as its run 53 profiled it (1,007 kernels,
/// 22 µs on average, 22.1 ms a step by CUPTI; the GPU ~90 % busy alone): 960 launches of 48
/// kernels (16 of 4 µs: normalisations and element-wise ops; 16 of 12 µs; 12 of 30 µs; 4 of
/// 150 µs: the large convolutions and their gradients) with 18 µs of host work before each, then
/// 40 optimizer launches of 6 µs with 30 µs of host work before each, then a synchronisation.
/// Most of its kernels are short, so what a timing event adds to one ([`Params::restart`]) is
/// a large part of it.
pub fn resnet_step() -> Workload {
    const SIZES: [u32; 4] = [4, 12, 30, 150];
    let body = (0..960u32).map(|i| {
        let key = i % 48;
        Launch {
            host_us: 18,
            gpu_us: SIZES[match key {
                0..16 => 0,
                16..32 => 1,
                32..44 => 2,
                _ => 3,
            }],
            key,
        }
    });
    let opt = (0..40u32).map(|i| Launch {
        host_us: 30,
        gpu_us: 6,
        key: 48 + i % 4,
    });
    Workload::Trace {
        launches: Box::leak(body.chain(opt).collect::<Vec<_>>().into_boxed_slice()),
        seen: true,
    }
}

/// A workload alone at `limit` (100: plain): its throughput as a fraction of its plain
/// throughput (work per second after the first second).
pub fn alone_ratio(policy: Policy, w: Workload, limit: u8, secs: u64) -> f64 {
    alone_ratio_with(Params::default(), policy, w, limit, secs)
}

/// [`alone_ratio`] with other timing constants.
pub fn alone_ratio_with(params: Params, policy: Policy, w: Workload, limit: u8, secs: u64) -> f64 {
    let o = alone(params, policy, w, limit, secs);
    let got = o.work_between(0, 1, secs as usize) as f64 / (secs - 1) as f64;
    got / alone_rate(w, params, secs - 1)
}

/// A service alone at `limit` (100: plain): its request latency.
pub fn service_alone(policy: Policy, service: Workload, limit: u8, secs: u64) -> Latency {
    service_alone_with(Params::default(), policy, service, limit, secs)
}

/// [`service_alone`] with other timing constants (e.g. [`vm_host`]).
pub fn service_alone_with(
    params: Params,
    policy: Policy,
    service: Workload,
    limit: u8,
    secs: u64,
) -> Latency {
    latency(&alone(params, policy, service, limit, secs).latencies[0])
}

/// Two containers of one process each, at `limits` (both 100: plain time-slicing): each one's
/// throughput as percent of its alone throughput, and their sum.
pub fn pair(policy: Policy, limits: [u8; 2], w: [Workload; 2], secs: u64) -> ([f64; 2], f64) {
    pair_with(Params::default(), policy, limits, w, secs)
}

/// Two containers at `limits`, one process each (`w`), for `secs` seconds: the model's whole
/// outcome (plain time-slicing where both limits are 100).
pub fn pair_run(
    params: Params,
    policy: Policy,
    limits: [u8; 2],
    w: [Workload; 2],
    secs: u64,
) -> Outcome {
    pair_run_conserving(params, policy, limits, w, secs, false)
}

/// [`pair_run`], both containers work-conserving (`VGPU_SM_WORK_CONSERVING`) or not.
pub fn pair_run_conserving(
    params: Params,
    policy: Policy,
    limits: [u8; 2],
    w: [Workload; 2],
    secs: u64,
    conserving: bool,
) -> Outcome {
    let plain = limits.iter().all(|&l| l >= 100);
    run(&Scenario {
        limits: limits.to_vec(),
        priorities: Vec::new(),
        work_conserving: vec![conserving; 2],
        procs: (0..2)
            .map(|i| Proc {
                container: i,
                workload: w[i],
                start: 0,
            })
            .collect(),
        duration: secs * S,
        policy: if plain { Policy::Plain } else { policy },
        params,
    })
}

/// [`pair`] with other timing constants.
pub fn pair_with(
    params: Params,
    policy: Policy,
    limits: [u8; 2],
    w: [Workload; 2],
    secs: u64,
) -> ([f64; 2], f64) {
    pair_shares(&pair_run(params, policy, limits, w, secs), params, w, secs)
}

/// Each process's share of its alone rate (percent) over seconds 1.. of a pair's run, and their
/// sum.
pub fn pair_shares(o: &Outcome, params: Params, w: [Workload; 2], secs: u64) -> ([f64; 2], f64) {
    let share = |i: usize| {
        100.0 * o.work_between(i, 1, secs as usize) as f64
            / (secs - 1) as f64
            / alone_rate(w[i], params, 3)
    };
    let s = [share(0), share(1)];
    (s, s[0] + s[1])
}

/// A service (container 0, `limits[0]`) beside a training workload (container 1): the
/// service's latency (for a request service) and both throughputs as fractions of alone.
pub fn service_beside(
    policy: Policy,
    limits: [u8; 2],
    service: Workload,
    training: Workload,
    secs: u64,
) -> (Latency, f64, f64) {
    let b = service_beside_with(
        Params::default(),
        policy,
        limits,
        [Priority::Normal; 2],
        service,
        training,
        secs,
    );
    (b.latency, b.service, b.training)
}

/// What [`service_beside_with`] measured.
#[derive(Clone, Copy, Debug)]
pub struct Beside {
    /// The service's request latency (for a request service).
    pub latency: Latency,
    /// The service's throughput as a fraction of its alone throughput.
    pub service: f64,
    /// The training's throughput as a fraction of its alone throughput.
    pub training: f64,
    /// The fraction of the GPU's time the service's kernels ran.
    pub service_busy: f64,
}

/// [`service_beside`] with other timing constants and task priorities (the service's first).
/// Both limits at 100 with normal priorities run plain co-location (no limiter).
pub fn service_beside_with(
    params: Params,
    policy: Policy,
    limits: [u8; 2],
    priorities: [Priority; 2],
    service: Workload,
    training: Workload,
    secs: u64,
) -> Beside {
    service_run(&beside_scenario(
        params, policy, limits, priorities, false, service, training, secs,
    ))
}

/// [`service_beside`] with both containers work-conserving (`VGPU_SM_WORK_CONSERVING`).
pub fn service_beside_conserving(
    limits: [u8; 2],
    service: Workload,
    training: Workload,
    secs: u64,
) -> Beside {
    let normal = [Priority::Normal; 2];
    let p = Params::default();
    service_run(&beside_scenario(
        p,
        Policy::Vgpu,
        limits,
        normal,
        true,
        service,
        training,
        secs,
    ))
}

/// The scenario of `service` in one container beside `training` in another, at `limits`
/// with `priorities` (the service's first), for `secs` seconds; both limits at 100 with normal
/// priorities run plain co-location (no limiter). Its [`Outcome`] has what [`Beside`] leaves
/// out (each limiter's counters, [`Outcome::learned`]).
#[allow(clippy::too_many_arguments)]
pub fn beside_scenario(
    params: Params,
    policy: Policy,
    limits: [u8; 2],
    priorities: [Priority; 2],
    conserving: bool,
    service: Workload,
    training: Workload,
    secs: u64,
) -> Scenario {
    let plain =
        limits.iter().all(|&l| l >= 100) && priorities.iter().all(|&p| p == Priority::Normal);
    Scenario {
        limits: limits.to_vec(),
        priorities: priorities.to_vec(),
        work_conserving: vec![conserving; 2],
        procs: vec![
            Proc {
                container: 0,
                workload: service,
                start: 0,
            },
            Proc {
                container: 1,
                workload: training,
                start: 0,
            },
        ],
        duration: secs * S,
        policy: if plain { Policy::Plain } else { policy },
        params,
    }
}

/// Runs a [`beside_scenario`] ([`beside_of`] its outcome).
fn service_run(sc: &Scenario) -> Beside {
    beside_of(sc, &run(sc))
}

/// What a run of a [`beside_scenario`] gave: the service's latency, each one's throughput
/// against its alone throughput, the service's busy fraction (after the first second).
pub fn beside_of(sc: &Scenario, o: &Outcome) -> Beside {
    let (service, training) = (sc.procs[0].workload, sc.procs[1].workload);
    let (params, secs) = (sc.params, sc.duration / S);
    let work = |i: usize| o.work_between(i, 1, secs as usize) as f64 / (secs - 1) as f64;
    Beside {
        latency: latency(&o.latencies[0]),
        service: work(0) / alone_rate(service, params, 3),
        training: work(1) / alone_rate(training, params, 3),
        service_busy: work(0) / S as f64,
    }
}
