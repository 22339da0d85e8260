//! Issue 23's shapes on the model, under a policy: `cargo run -p vgpu-model --release --example
//! issue23`.
use vgpu_model::targets::*;
use vgpu_model::*;

fn main() {
    let policy = Policy::Vgpu;
    for gap in [5 * US, 20 * US, 100 * US] {
        for limit in [50, 25] {
            println!(
                "stream gap {} us at {limit}%: {:.2} of plain",
                gap / US,
                alone_ratio(policy, stream(gap), limit, 4)
            );
        }
    }
    let plain = service_alone(policy, DECODE, 100, 6);
    println!("decode alone plain: {plain:?}");
    for limit in [50, 25] {
        println!(
            "decode alone {limit}%: {:?}",
            service_alone(policy, DECODE, limit, 6)
        );
    }
    let cnn = cnn_step();
    for limit in [50, 25] {
        println!(
            "cnn alone {limit}%: {:.3} of plain",
            alone_ratio(policy, cnn, limit, 6)
        );
    }
    println!(
        "cnn pair plain: {:?}",
        pair(policy, [100, 100], [cnn, cnn], 6)
    );
    for l in [[30, 70], [50, 50]] {
        println!("cnn pair {l:?}: {:?}", pair(policy, l, [cnn, cnn], 6));
    }
    let sat = saturating(11 * MS, 4);
    for (w, name) in [(sat, "11 ms"), (saturating(50 * US, 4), "50 us")] {
        println!(
            "stream beside {name} plain: {:?}",
            service_beside(policy, [100, 100], stream(5 * US), w, 5)
        );
        println!(
            "stream beside {name} 50/50: {:?}",
            service_beside(policy, [50, 50], stream(5 * US), w, 5)
        );
    }
    println!(
        "decode beside cnn plain: {:?}",
        service_beside(policy, [100, 100], DECODE, cnn, 6)
    );
    for l in [[50, 50], [30, 70]] {
        println!(
            "decode beside cnn {l:?}: {:?}",
            service_beside(policy, l, DECODE, cnn, 6)
        );
    }
}
