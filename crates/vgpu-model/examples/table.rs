//! Prints issue 23's targets on the model as a markdown table, plain time-slicing (no limiter)
//! beside vgpu's limiter: `cargo run -p vgpu-model --release --example table`. The tests
//! (`tests/targets.rs`) assert the same figures.
use vgpu_model::targets::*;
use vgpu_model::*;
use vgpu_policy::limiter::Priority;

const V: Policy = Policy::Vgpu;

fn pct(v: &[f64]) -> String {
    v.iter()
        .map(|a| format!("{a:.1}"))
        .collect::<Vec<_>>()
        .join(" / ")
}

fn main() {
    println!("| case | target | plain | vgpu |");
    println!("|---|---|---|---|");
    for gap in [5 * US, 20 * US, 100 * US] {
        let r: Vec<f64> = [50, 25]
            .iter()
            .map(|&l| alone_ratio(V, stream(gap), l, 4))
            .collect();
        println!(
            "| 1. host-bound stream ({} µs gaps) alone at 50 / 25 % | ≥ 0.95 of plain | 1 | {:.3} / {:.3} |",
            gap / US,
            r[0],
            r[1]
        );
    }
    let plain = service_alone(V, DECODE, 100, 6);
    for limit in [50, 25] {
        let d = service_alone(V, DECODE, limit, 6);
        println!(
            "| 1. decode service alone at {limit} % | p50 ≤ {:.1}, p99 ≤ {:.1} ms | {:.1} / {:.1} | {:.1} / {:.1} |",
            1.1 * plain.p50,
            1.2 * plain.p99,
            plain.p50,
            plain.p99,
            d.p50,
            d.p99
        );
    }
    let cnn = cnn_step();
    for limit in [50u8, 25] {
        println!(
            "| 2. CNN step alone at {limit} % (% of alone) | ≥ {} | 100 | {:.1} |",
            limit - 2,
            100.0 * alone_ratio(V, cnn, limit, 6)
        );
    }
    // The CNN step, and the same with an optimizer phase of 800 host-bound launches first.
    for (what, w) in [
        ("CNN", cnn),
        ("CNN (optimizer first)", cnn_step_with(800, true)),
    ] {
        let (ps, pt) = pair(V, [100, 100], [w, w], 6);
        for l in [[30u8, 70], [50, 50]] {
            let (s, t) = pair(V, l, [w, w], 6);
            println!(
                "| 2. two {what} containers at {} / {} (% of alone, total) | ≥ {:.1} / {:.1}, total ≥ {:.1} | {}, {pt:.1} | {}, {t:.1} |",
                l[0],
                l[1],
                0.95 * f64::from(l[0]),
                0.95 * f64::from(l[1]),
                0.95 * pt,
                pct(&ps),
                pct(&s)
            );
        }
    }
    for (name, w) in [
        ("11 ms", saturating(11 * MS, 4)),
        ("50 µs", saturating(50 * US, 4)),
    ] {
        let (_, ps, pl) = service_beside(V, [100, 100], stream(5 * US), w, 5);
        let (_, s, l) = service_beside(V, [50, 50], stream(5 * US), w, 5);
        println!(
            "| 3. stream (5 µs gaps) beside a saturating {name} loop at 50/50 (stream of alone, loop %) | stream ≥ plain, loop ≥ 47.5 | {ps:.3}, {:.1} | {s:.3}, {:.1} |",
            100.0 * pl,
            100.0 * l
        );
    }
    let alone = service_alone(V, DECODE, 100, 6);
    let (pd, _, pt) = service_beside(V, [100, 100], DECODE, cnn, 6);
    for l in [[50u8, 50], [30, 70]] {
        let (d, _, t) = service_beside(V, l, DECODE, cnn, 6);
        println!(
            "| 3. decode beside the CNN at {} / {} (p50 / p99 ms, training %) | p50 ≤ {:.1}, p99 ≤ {:.1}, training ≥ {:.1} | {:.1} / {:.1}, {:.1} | {:.1} / {:.1}, {:.1} |",
            l[0],
            l[1],
            1.3 * alone.p50,
            pd.p99,
            0.95 * f64::from(l[1]),
            pd.p50,
            pd.p99,
            100.0 * pt,
            d.p50,
            d.p99,
            100.0 * t
        );
    }
    for (name, tr) in [("CNN", cnn), ("training loop", TRAINING)] {
        let (pl, _, pt) = service_beside(V, [100, 100], LIGHT, tr, 6);
        for l in [[50u8, 50], [30, 70]] {
            let (d, _, t) = service_beside(V, l, LIGHT, tr, 6);
            println!(
                "| 3. matmul service beside the {name} at {} / {} (p99 ms, training %) | p99 ≤ {:.2}, training ≥ {:.1} | {:.2}, {:.1} | {:.2}, {:.1} |",
                l[0],
                l[1],
                pl.p99,
                0.95 * f64::from(l[1]),
                pl.p99,
                100.0 * pt,
                d.p99,
                100.0 * t
            );
        }
    }
    let p = Params::default();
    for (sname, svc) in [("matmul service", LIGHT), ("decode service", DECODE)] {
        let alone = service_alone(V, svc, 100, 6);
        let plain = service_beside_with(p, V, [100, 100], [Priority::Normal; 2], svc, cnn, 6);
        let b = service_beside_with(
            p,
            V,
            [100, 100],
            [Priority::High, Priority::Low],
            svc,
            cnn,
            6,
        );
        println!(
            "| 4. {sname} (high) beside the CNN (low), no limits (p99 ms, training % of alone) | p99 ≤ {:.2}, training ≥ {:.1} | {:.2}, {:.1} | {:.2}, {:.1} |",
            1.2 * alone.p99,
            90.0 * (1.0 - b.service_busy),
            plain.latency.p99,
            100.0 * plain.training,
            b.latency.p99,
            100.0 * b.training
        );
    }
    for (l, st) in [
        (vec![30u8, 70], vec![0u64, 0]),
        (vec![50, 50], vec![0, 0]),
        (vec![20, 30, 50], vec![0, 0, 0]),
    ] {
        let s = shares(V, &l, &vec![SATURATING; l.len()], &st, 8);
        println!(
            "| keep: saturating 11 ms loops at {} | ±2 each, total ≥ 95 | | {} (worst 1 s ±{:.1}, total {:.1}) |",
            pct(&l.iter().map(|&x| f64::from(x)).collect::<Vec<_>>()),
            pct(&s.avg),
            s.worst_window,
            s.total
        );
    }
    let s = shares(
        V,
        &[50, 50],
        &[saturating(11 * MS, 4), saturating(50 * US, 4)],
        &[0, 0],
        8,
    );
    println!(
        "| keep: 11 ms beside 50 µs loops at 50 / 50 | ±2 each | | {} (total {:.1}) |",
        pct(&s.avg),
        s.total
    );
    for (name, w) in [
        ("11 ms sync-4", SATURATING),
        ("1 ms async", saturating(MS, 0)),
        ("training loop", TRAINING),
    ] {
        let (a, b) = two_processes(V, 50, w, 8);
        println!(
            "| keep: two processes of one container at 50 %, {name} | 25 / 25 ± 2 | | {a:.1} / {b:.1} |"
        );
    }
    for (name, w) in [
        ("11 ms sync-4", SATURATING),
        ("20 µs async", saturating(20 * US, 0)),
        ("1 ms sync each", saturating(MS, 1)),
        ("10 µs async", saturating(10 * US, 0)),
    ] {
        let row: Vec<f64> = [10u8, 25, 50, 75]
            .iter()
            .map(|&l| single(V, l, w, 6).0)
            .collect();
        println!(
            "| keep: one container alone, {name}, at 10 / 25 / 50 / 75 | within 0.6 on average | | {} |",
            pct(&row)
        );
    }
}
