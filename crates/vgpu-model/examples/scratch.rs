use vgpu_model::*;
fn main() {
    let p = Params::default();
    let w = Workload::Loop { kernel: 11 * MS, sync_every: 4, host: 5 * US };
    let alone = alone_rate(w, p, 4);
    for pol in [Policy::Old, Policy::New] {
        for limits in [vec![30u8, 70], vec![50, 50], vec![20, 30, 50]] {
            let procs = (0..limits.len()).map(|c| Proc { container: c, workload: w, start: 0 }).collect();
            let o = run(&Scenario { limits: limits.clone(), procs, duration: 11 * S, policy: pol, params: p });
            let sh: Vec<String> = (0..limits.len()).map(|i| format!("{:.1}", 100.0 * o.work_between(i, 1, 11) as f64 / 10.0 / alone)).collect();
            println!("{pol:?} {limits:?}: {} windows {:?} switches {}", sh.join(" / "), o.windows, o.switches);
        }
        // two procs one container
        let procs = (0..2).map(|_| Proc { container: 0, workload: w, start: 0 }).collect();
        let o = run(&Scenario { limits: vec![50], procs, duration: 11 * S, policy: pol, params: p });
        println!("{pol:?} 2 procs @50: {:.1} / {:.1}", 100.0 * o.work_between(0, 1, 11) as f64 / 10.0 / alone, 100.0 * o.work_between(1, 1, 11) as f64 / 10.0 / alone);
        // light alone
        let req = Workload::Requests { period: 20 * MS, offset: 0, kernels: 8, kernel: 200 * US };
        for lim in [100u8, 50, 25] {
            let o = run(&Scenario { limits: vec![lim], procs: vec![Proc { container: 0, workload: req, start: 0 }], duration: 10 * S, policy: if lim == 100 { Policy::Plain } else { pol }, params: p });
            println!("{pol:?} light @{lim}: p50 {:.2} p99 {:.2} ms", quantile(&o.latencies[0], 0.5) as f64 / 1e6, quantile(&o.latencies[0], 0.99) as f64 / 1e6);
        }
        let train = Workload::Loop { kernel: 160 * US, sync_every: 8, host: 20 * US };
        let talone = alone_rate(train, p, 4);
        for (li, lt) in [(100u8, 100u8), (50, 50), (30, 70)] {
            let o = run(&Scenario { limits: vec![li, lt], procs: vec![Proc { container: 0, workload: req, start: 0 }, Proc { container: 1, workload: train, start: 0 }], duration: 10 * S, policy: if li == 100 { Policy::Plain } else { pol }, params: p });
            println!("{pol:?} infer+train {li}/{lt}: p50 {:.2} p99 {:.2} ms, train {:.1} % of alone", quantile(&o.latencies[0], 0.5) as f64 / 1e6, quantile(&o.latencies[0], 0.99) as f64 / 1e6, 100.0 * o.work_between(1, 1, 10) as f64 / 9.0 / talone);
        }
    }
}
