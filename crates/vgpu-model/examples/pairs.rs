//! Every pair of the model's training and loop shapes in two containers at 30/70, 50/50 and
//! 70/30, against target 2's bar: each container at least 0.95 of its share of its alone rate
//! (more is fine where its own gaps are free). A row is MISS where one falls short.
//! `cargo run -p vgpu-model --release --example pairs [-- --misses]`
use vgpu_model::targets::*;
use vgpu_model::*;
use vgpu_policy::limiter::Priority;

fn main() {
    let misses_only = std::env::args().any(|a| a == "--misses");
    let p = Params::default();
    let shapes = [
        ("CNN", cnn_step()),
        ("CNN, optimizer first", cnn_step_with(800, true)),
        ("CNN, optimizer last", cnn_step_with(800, false)),
        ("ResNet", resnet_step()),
        ("11 ms loop", saturating(11 * MS, 4)),
        ("50 us loop", saturating(50 * US, 4)),
        ("sync-every-8 loop", TRAINING),
    ];
    let secs = 4u64;
    let alone: Vec<f64> = shapes.iter().map(|(_, w)| alone_rate(*w, p, 3)).collect();
    let mut misses = 0;
    for (i, (a, wa)) in shapes.iter().enumerate() {
        for (j, (b, wb)) in shapes.iter().enumerate().skip(i) {
            for limits in [[30u8, 70], [50, 50], [70, 30]] {
                let o = run(&Scenario {
                    limits: limits.to_vec(),
                    priorities: vec![Priority::Normal; 2],
                    work_conserving: vec![false; 2],
                    procs: vec![
                        Proc {
                            container: 0,
                            workload: *wa,
                            start: 0,
                        },
                        Proc {
                            container: 1,
                            workload: *wb,
                            start: 0,
                        },
                    ],
                    duration: secs * S,
                    policy: Policy::Vgpu,
                    params: p,
                });
                // Each one's work after the first second, as a share of its alone rate.
                let rate = |k: usize, alone: f64| {
                    100.0 * o.work_between(k, 1, secs as usize) as f64 / (secs - 1) as f64 / alone
                };
                let got = [rate(0, alone[i]), rate(1, alone[j])];
                let miss = (0..2).any(|k| got[k] < 0.95 * f64::from(limits[k]));
                misses += usize::from(miss);
                if miss || !misses_only {
                    println!(
                        "{a} + {b} at {} / {}: {:.1} / {:.1} % of alone{}",
                        limits[0],
                        limits[1],
                        got[0],
                        got[1],
                        if miss { " MISS" } else { "" }
                    );
                }
            }
        }
    }
    println!("{misses} pairs below 0.95 of a share");
}
