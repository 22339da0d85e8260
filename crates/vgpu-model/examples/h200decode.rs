//! The H200's decode service shape (run 66's trace: 33 tokens of 165 launches of ~3 µs kernels,
//! 57 kernels, ~30 µs of host work each; each kernel's first call loads its module): alone under
//! a limit and beside the ResNet step. `cargo run -p vgpu-model --release --example h200decode
//! [LAZY_LOAD_US] [TIMESLICE_US] [SWITCH_US]`.
use vgpu_model::targets::*;
use vgpu_model::*;
use vgpu_policy::limiter::Priority;

fn main() {
    let arg = |i: usize, d: u64| {
        std::env::args()
            .nth(i)
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let p = Params {
        lazy_load: arg(1, 2000) * US,
        timeslice: arg(2, 2000) * US,
        switch: arg(3, 100) * US,
        ..Params::default()
    };
    let policy = Policy::Vgpu;
    let dec = h200_decode();
    // TRACE_AT=N: the limiter's every look at N %, for two seconds, on stderr.
    if let Some(l) = std::env::var("TRACE_AT").ok().and_then(|v| v.parse().ok()) {
        set_trace(true);
        service_alone_with(p, policy, dec, l, 2);
        return;
    }
    let alone = service_alone_with(p, policy, dec, 100, 6);
    println!("decode alone plain {alone:?}");
    for limit in [50, 30, 25] {
        let got = service_alone_with(p, policy, dec, limit, 6);
        println!(
            "decode alone {limit} %: {got:?} p50 {:.2}x p99 {:.2}x",
            got.p50 / alone.p50,
            got.p99 / alone.p99
        );
    }
    for (l, w) in [
        ([100u8, 100u8], "plain"),
        ([50, 50], "50/50"),
        ([30, 70], "30/70"),
    ] {
        let b = service_beside_with(p, policy, l, [Priority::Normal; 2], dec, resnet_step(), 6);
        println!(
            "beside the ResNet step {w}: {:?} p50 {:.2}x training {:.3}",
            b.latency,
            b.latency.p50 / alone.p50,
            b.training
        );
    }
}
