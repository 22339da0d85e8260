use vgpu_model::targets::*;
use vgpu_model::*;
fn main() {
    for (name, w) in [("cnn", cnn_step()), ("resnet", resnet_step())] {
        for limit in [25u8, 50] {
            let p = Params::default();
            let o = run(&Scenario {
                limits: vec![limit],
                priorities: vec![],
                procs: vec![Proc {
                    container: 0,
                    workload: w,
                    start: 0,
                }],
                duration: 4 * S,
                policy: Policy::Vgpu,
                params: p,
            });
            let a = alone_rate(w, p, 3);
            println!(
                "{name} {limit}%: share {:.2} charged/work {:.3}",
                100.0 * o.work_between(0, 1, 4) as f64 / 3.0 / a,
                o.charged[0] as f64 / o.work[0] as f64
            );
        }
    }
}
