//! Prints issue 11's targets on the model, the limiter as it was beside the new policy, as the
//! markdown table docs/COMPUTE.md records: `cargo run -p vgpu-model --release --example table`.
use vgpu_model::targets::*;
use vgpu_model::*;

fn shares_row(what: &str, target: &str, limits: &[u8], w: &[Workload], starts: &[u64]) {
    let fmt = |p: Policy| {
        let s = shares(p, limits, w, starts, 8);
        let avg: Vec<String> = s.avg.iter().map(|a| format!("{a:.1}")).collect();
        format!(
            "{} (worst 1 s ±{:.1}, total {:.1})",
            avg.join(" / "),
            s.worst_window,
            s.total
        )
    };
    println!(
        "| {what} | {target} | {} | {} |",
        fmt(Policy::Old),
        fmt(Policy::New)
    );
}

fn main() {
    println!("| case | target | old | new |");
    println!("|---|---|---|---|");
    let plain = light_alone(Policy::Plain, 100, 10);
    for limit in [50, 25] {
        let old = light_alone(Policy::Old, limit, 10);
        let new = light_alone(Policy::New, limit, 10);
        println!(
            "| 1. light service alone at {limit} % (plain {:.2} / {:.2} ms) | p50 ≤ {:.2}, p99 ≤ {:.2} ms | {:.2} / {:.2} ms | {:.2} / {:.2} ms |",
            plain.p50,
            plain.p99,
            1.1 * plain.p50,
            1.2 * plain.p99,
            old.p50,
            old.p99,
            new.p50,
            new.p99
        );
    }
    let host = vm_host();
    let vplain = light_alone_with(host, Policy::Plain, 100, 10);
    for limit in [50, 25] {
        let old = light_alone_with(host, Policy::Old, limit, 10);
        let new = light_alone_with(host, Policy::New, limit, 10);
        println!(
            "| 1. same on a host with a wake-up tail (1 in 25 wakes +400 µs), {limit} % (plain {:.2} / {:.2} ms) | p50 ≤ {:.2}, p99 ≤ {:.2} ms | {:.2} / {:.2} ms | {:.2} / {:.2} ms |",
            vplain.p50,
            vplain.p99,
            1.1 * vplain.p50,
            1.2 * vplain.p99,
            old.p50,
            old.p99,
            new.p50,
            new.p99
        );
    }
    let (co, _) = beside_training(Policy::Plain, 100, 100, 10);
    for (i, t) in [(50, 50), (30, 70)] {
        let (ol, ot) = beside_training(Policy::Old, i, t, 10);
        let (nl, nt) = beside_training(Policy::New, i, t, 10);
        println!(
            "| 2. service beside training {i}/{t} (plain co-location p99 {:.2} ms) | p99 ≤ {:.2} ms, training ≥ {:.1} % | {:.2} / {:.2} ms, {ot:.1} % | {:.2} / {:.2} ms, {nt:.1} % |",
            co.p99,
            1.5 * co.p99,
            0.95 * f64::from(t),
            ol.p50,
            ol.p99,
            nl.p50,
            nl.p99
        );
    }
    for (name, training) in [
        ("async 1 ms kernels", saturating(MS, 0)),
        ("async 200 µs kernels", saturating(200 * US, 0)),
        ("11 ms kernels sync-4 (limitation)", SATURATING),
        (
            "88 steps, 12 × 300 µs among 76 × 15 µs, synchronised (H200 train)",
            TRAIN_STEPS,
        ),
        ("88 × 53 µs steps, synchronisation unseen", UNSEEN_STEPS),
    ] {
        let (pl, _) = beside(Policy::Plain, 100, 100, training, 6);
        for (i, t) in [(50, 50), (30, 70)] {
            let (ol, ot) = beside(Policy::Old, i, t, training, 6);
            let (nl, nt) = beside(Policy::New, i, t, training, 6);
            println!(
                "| 2. service beside a training loop of {name}, {i}/{t} (plain co-location p99 {:.2} ms) | p99 ≤ {:.2} ms, training ≥ {:.1} % | {:.2} / {:.2} ms, {ot:.1} % | {:.2} / {:.2} ms, {nt:.1} % |",
                pl.p99,
                1.5 * pl.p99,
                0.95 * f64::from(t),
                ol.p50,
                ol.p99,
                nl.p50,
                nl.p99
            );
        }
    }
    let t3 = "±2 avg, ±4 per 1 s, total ≥ 95";
    shares_row(
        "3. 11 ms kernels, sync every 4: 30/70",
        t3,
        &[30, 70],
        &[SATURATING; 2],
        &[0, 0],
    );
    shares_row("3. same, 50/50", t3, &[50, 50], &[SATURATING; 2], &[0, 0]);
    shares_row(
        "3. same, 20/30/50",
        t3,
        &[20, 30, 50],
        &[SATURATING; 3],
        &[0, 0, 0],
    );
    shares_row(
        "3. same, 30/70, the 70 % 2 s late",
        t3,
        &[30, 70],
        &[SATURATING; 2],
        &[0, 2],
    );
    shares_row(
        "3. 20 ms kernels sync each (30) beside a training loop (70)",
        t3,
        &[30, 70],
        &[saturating(20 * MS, 1), TRAINING],
        &[0, 0],
    );
    shares_row(
        "3. 10 µs async (50) beside 20 ms sync-4 (50)",
        t3,
        &[50, 50],
        &[saturating(10 * US, 0), saturating(20 * MS, 4)],
        &[0, 0],
    );
    shares_row(
        "3. 1 ms sync each / 20 ms async / training at 20/30/50, training 2 s late",
        t3,
        &[20, 30, 50],
        &[saturating(MS, 1), saturating(20 * MS, 0), TRAINING],
        &[0, 0, 2],
    );
    shares_row(
        "3. 20 ms async watched by events (50) beside 1 ms sync each (50)",
        t3,
        &[50, 50],
        &[WATCHED_LONG, saturating(MS, 1)],
        &[0, 0],
    );
    shares_row(
        "3. 10 µs async watched by events, 50/50",
        t3,
        &[50, 50],
        &[WATCHED_TINY, WATCHED_TINY],
        &[0, 0],
    );
    for (name, w) in [
        ("11 ms sync-4", SATURATING),
        ("1 ms async", saturating(MS, 0)),
        ("training loop", TRAINING),
    ] {
        let (oa, ob) = two_processes(Policy::Old, 50, w, 8);
        let (na, nb) = two_processes(Policy::New, 50, w, 8);
        println!(
            "| 4. two processes of one container at 50 %, {name} | 25 / 25 ± 5 | {oa:.1} / {ob:.1} | {na:.1} / {nb:.1} |"
        );
    }
    for (name, w) in [
        ("11 ms sync-4", SATURATING),
        ("20 µs async", saturating(20 * US, 0)),
        ("1 ms sync each", saturating(MS, 1)),
    ] {
        let row: Vec<String> = [10u8, 25, 50, 75]
            .iter()
            .map(|&l| {
                let (o, _) = single(Policy::Old, l, w, 6);
                let (n, _) = single(Policy::New, l, w, 6);
                format!("{o:.1}→{n:.1}")
            })
            .collect();
        println!(
            "| 5. one container alone, {name}, at 10/25/50/75 (old→new) | unchanged | {} | |",
            row.join(", ")
        );
    }
}
