//! The light service beside a GPU-bound training loop, under vgpu: the H200's PyTorch
//! `train` step (`TRAIN_STEPS`: few long kernels among many short ones, a synchronisation the
//! preload sees) and a step whose wait it cannot see (`UNSEEN_STEPS`):
//! `cargo run -p vgpu-model --release --example steps`. With arguments `N [unseen]` (the
//! service's percent), one line per window of the limiter instead.
use vgpu_model::targets::*;
use vgpu_model::*;
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cases = [("train", TRAIN_STEPS), ("unseen", UNSEEN_STEPS)];
    if let Some(i) = args.first() {
        let i: u8 = i.parse().expect("the service's percent");
        let w = if args.get(1).is_some_and(|a| a == "unseen") {
            UNSEEN_STEPS
        } else {
            TRAIN_STEPS
        };
        set_trace(true);
        let r = beside(Policy::Vgpu, i, 100 - i, w, 2);
        println!("{r:?}");
        return;
    }
    for (name, w) in cases {
        let (plain, _) = beside(Policy::Plain, 100, 100, w, 6);
        println!("{name}: plain co-location {plain:?}");
        for (i, t) in [(50, 50), (30, 70)] {
            let (got, tn) = beside(Policy::Vgpu, i, t, w, 6);
            println!("  {i}/{t}: {got:?}, training {tn:.1} %");
        }
    }
}
