use vgpu_model::targets::*;
use vgpu_model::*;
fn main() {
    for train in [
        TRAINING,
        saturating(MS, 0),
        saturating(200 * US, 0),
        saturating(11 * MS, 4),
        saturating(MS, 1),
    ] {
        for (i, t) in [(100u8, 100u8), (50, 50), (30, 70)] {
            let params = Params::default();
            let plain = i >= 100;
            let o = run(&Scenario {
                limits: vec![i, t],
                procs: vec![
                    Proc {
                        container: 0,
                        workload: LIGHT,
                        start: 0,
                    },
                    Proc {
                        container: 1,
                        workload: train,
                        start: 0,
                    },
                ],
                duration: 10 * S,
                policy: if plain { Policy::Plain } else { Policy::New },
                params,
            });
            let alone = alone_rate(train, params, 3);
            println!(
                "{train:?} {i}/{t}: p50 {:.2} p99 {:.2} train {:.1}",
                quantile(&o.latencies[0], 0.5) as f64 / 1e6,
                quantile(&o.latencies[0], 0.99) as f64 / 1e6,
                100.0 * o.work_between(1, 1, 10) as f64 / 9.0 / alone
            );
        }
    }
}
