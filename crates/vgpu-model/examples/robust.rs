//! Issue 23's shapes under other timing constants: a context switch of 25 / 100 / 250 µs, a
//! host whose wake-ups have a tail (a virtual machine, [`vm_host`]), a slower launch path (a
//! kernel runnable 5 / 50 µs after its launch), timed looks 300 µs late, controllers starved of
//! CPU (they run only every 2 ms): `cargo run -p vgpu-model --release --example robust`. Each
//! line is one case against plain time-slicing under the same constants; COLLAPSE marks a
//! container far below its share (under 0.8 of it) or a GPU left idle while work waits (a pair's
//! total under 0.85 of plain's), MISS a figure outside issue 23's bar.
use vgpu_model::targets::*;
use vgpu_model::*;
use vgpu_policy::limiter::Priority;

const V: Policy = Policy::Vgpu;

fn flag(collapse: bool, miss: bool) -> &'static str {
    if collapse {
        "COLLAPSE"
    } else if miss {
        "MISS"
    } else {
        ""
    }
}

fn main() {
    let mut collapses = 0;
    for (name, p) in [
        ("default", Params::default()),
        (
            "switch 25 us",
            Params {
                switch: 25 * US,
                ..Params::default()
            },
        ),
        (
            "switch 250 us",
            Params {
                switch: 250 * US,
                ..Params::default()
            },
        ),
        ("vm wake-up tail", vm_host()),
        (
            "restart 3 us, idle lag 10 us",
            Params {
                restart: 3 * US,
                idle_lag: 10 * US,
                ..Params::default()
            },
        ),
        (
            "launch latency 50 us",
            Params {
                launch_latency: 50 * US,
                ..Params::default()
            },
        ),
        (
            "switch 250 us, vm tail, latency 50 us",
            Params {
                switch: 250 * US,
                launch_latency: 50 * US,
                ..vm_host()
            },
        ),
        (
            "timed looks 300 us late",
            Params {
                jitter: 300 * US,
                ..Params::default()
            },
        ),
        (
            "controllers run every 2 ms",
            Params {
                ctl_quantum: 2 * MS,
                ..Params::default()
            },
        ),
    ] {
        println!("== {name}");
        let cnn = cnn_step();
        // Saturating containers and CNN pairs: each near its share, the GPU kept busy.
        for (l, w) in [
            (vec![30u8, 70], vec![SATURATING; 2]),
            (vec![50, 50], vec![SATURATING; 2]),
            (vec![20, 30, 50], vec![SATURATING; 3]),
            (vec![30, 70], vec![saturating(MS, 0); 2]),
            (vec![50, 50], vec![saturating(10 * US, 0); 2]),
            (
                vec![50, 50],
                vec![saturating(11 * MS, 4), saturating(50 * US, 4)],
            ),
        ] {
            let s = shares_with(p, V, &l, &w, &vec![0; l.len()], 5);
            let plain = shares_with(
                p,
                Policy::Plain,
                &vec![100; l.len()],
                &w,
                &vec![0; l.len()],
                5,
            );
            let collapse = s.avg.iter().zip(&l).any(|(a, &x)| *a < 0.8 * f64::from(x))
                || s.total < 0.85 * plain.total.min(100.0);
            let miss = s.avg.iter().zip(&l).any(|(a, &x)| *a < f64::from(x) - 2.0);
            collapses += usize::from(collapse);
            println!(
                "  {:?} at {l:?}: {:.1?} total {:.1} (plain {:.1}) {}",
                w[0],
                s.avg,
                s.total,
                plain.total,
                flag(collapse, miss)
            );
        }
        // Training pairs: the CNN step, and the H200's ResNet step of short kernels.
        for (name, w) in [("CNN", cnn), ("ResNet", resnet_step())] {
            let (_, pt) = pair_with(p, V, [100, 100], [w, w], 5);
            for l in [[30u8, 70], [50, 50]] {
                let (s, t) = pair_with(p, V, l, [w, w], 5);
                let collapse =
                    s.iter().zip(&l).any(|(a, &x)| *a < 0.8 * f64::from(x)) || t < 0.85 * pt;
                let miss =
                    s.iter().zip(&l).any(|(a, &x)| *a < 0.95 * f64::from(x)) || t < 0.95 * pt;
                collapses += usize::from(collapse);
                println!(
                    "  {name} pair {l:?}: {s:.1?} total {t:.1} (plain {pt:.1}) {}",
                    flag(collapse, miss)
                );
            }
        }
        // Light work: the stream and the decode service alone, and beside training.
        for limit in [25u8, 50] {
            let r = alone_ratio_with(p, V, stream(5 * US), limit, 4);
            let plain = service_alone_with(p, V, DECODE, 100, 5);
            let d = service_alone_with(p, V, DECODE, limit, 5);
            let collapse = r < 0.8 || d.p50 > 2.0 * plain.p50;
            let miss = r < 0.95 || d.p50 > 1.1 * plain.p50 || d.p99 > 1.2 * plain.p99;
            collapses += usize::from(collapse);
            println!(
                "  alone at {limit} %: stream {r:.3} of plain, decode {:.1} / {:.1} ms (plain {:.1} / {:.1}) {}",
                d.p50,
                d.p99,
                plain.p50,
                plain.p99,
                flag(collapse, miss)
            );
        }
        let n = [Priority::Normal; 2];
        let alone = service_alone_with(p, V, DECODE, 100, 5);
        let plain = service_beside_with(p, V, [100, 100], n, DECODE, cnn, 5);
        for l in [[50u8, 50], [30, 70]] {
            let b = service_beside_with(p, V, l, n, DECODE, cnn, 5);
            let share = f64::from(l[1]) / 100.0;
            let collapse = b.training < 0.8 * share || b.latency.p50 > 2.0 * alone.p50;
            let miss = b.training < 0.95 * share
                || b.latency.p50 > 1.3 * alone.p50
                || b.latency.p99 > plain.latency.p99;
            collapses += usize::from(collapse);
            println!(
                "  decode beside the CNN at {l:?}: {:.1} / {:.1} ms (alone p50 {:.1}, plain p99 {:.1}), training {:.3} {}",
                b.latency.p50,
                b.latency.p99,
                alone.p50,
                plain.latency.p99,
                b.training,
                flag(collapse, miss)
            );
        }
        let plain = service_beside_with(p, V, [100, 100], n, stream(5 * US), SATURATING, 5);
        let b = service_beside_with(p, V, [50, 50], n, stream(5 * US), SATURATING, 5);
        let collapse = b.training < 0.4 || b.service < 0.8 * plain.service;
        let miss = b.training < 0.475 || b.service < plain.service;
        collapses += usize::from(collapse);
        println!(
            "  stream beside 11 ms loop at 50/50: stream {:.3} (plain {:.3}), loop {:.3} {}",
            b.service,
            plain.service,
            b.training,
            flag(collapse, miss)
        );
        let alone = service_alone_with(p, V, LIGHT, 100, 5);
        let b = service_beside_with(
            p,
            V,
            [100, 100],
            [Priority::High, Priority::Low],
            LIGHT,
            cnn,
            5,
        );
        let bar = 0.9 * (1.0 - b.service_busy);
        let collapse = b.training < 0.8 * bar || b.latency.p99 > 3.0 * alone.p99;
        let miss = b.training < bar || b.latency.p99 > 1.2 * alone.p99;
        collapses += usize::from(collapse);
        println!(
            "  matmul service (high) beside the CNN (low): p99 {:.2} ms (alone {:.2}), training {:.3} (bar {bar:.3}) {}",
            b.latency.p99,
            alone.p99,
            b.training,
            flag(collapse, miss)
        );
    }
    println!("{collapses} collapses");
}
