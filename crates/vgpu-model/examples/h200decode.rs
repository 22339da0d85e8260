//! Scratch: the H200's decode service shape beside its ResNet step.
use vgpu_model::targets::*;
use vgpu_model::*;
use vgpu_policy::limiter::Priority;

fn main() {
    let dec = Workload::Decode {
        period: 250 * MS,
        offset: 0,
        tokens: 33,
        kernels: 165,
        kernel: 3 * US,
        host: 30 * US,
    };
    let args: Vec<String> = std::env::args().collect();
    let ts: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let sw: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(100);
    let p = Params { timeslice: ts * US, switch: sw * US, ..Params::default() };
    let policy = Policy::Vgpu;
    let alone = service_alone_with(p, policy, dec, 100, 6);
    println!("alone {alone:?}");
    for (l, w) in [([100u8, 100u8], "plain"), ([50, 50], "50/50"), ([30, 70], "30/70")] {
        let b = service_beside_with(p, policy, l, [Priority::Normal; 2], dec, resnet_step(), 6);
        println!("{w}: {:?} p50 {:.2}x training {:.3}", b.latency, b.latency.p50 / alone.p50, b.training);
    }
}
