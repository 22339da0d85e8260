//! The recorded H200 training step (`H200_STEP`) alone and beside the light service.
use vgpu_model::targets::*;
use vgpu_model::*;
fn main() {
    let p = Params::default();
    let alone = alone_rate(H200_STEP, p, 3);
    println!(
        "alone: GPU busy {:.1} %, step {:.2} ms",
        alone / 1e7,
        4.323e6 / alone * 1e3
    );
    let (plain, tp) = beside(Policy::Plain, 100, 100, H200_STEP, 6);
    println!("plain co-location {plain:?}, training {tp:.1} %");
    for (i, t) in [(50, 50), (30, 70)] {
        let (new, tn) = beside(Policy::Vgpu, i, t, H200_STEP, 6);
        println!(
            "  {i}/{t}: {new:?}, training {tn:.1} % ({:.3} of share)",
            tn / f64::from(t)
        );
    }
}
