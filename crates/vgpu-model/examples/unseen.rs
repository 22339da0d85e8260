//! The light service beside a GPU-bound training loop whose synchronisation the limiter does
//! not see (`UNSEEN_STEPS`, the H200's PyTorch `train`, run 27), old and new policy:
//! `cargo run -p vgpu-model --release --example unseen`. With an argument N (the service's
//! percent), one line per window of the new policy instead.
use vgpu_model::targets::*;
use vgpu_model::*;
fn main() {
    let (plain, _) = beside(Policy::Plain, 100, 100, UNSEEN_STEPS, 6);
    println!("plain co-location {plain:?}");
    if let Some(i) = std::env::args().nth(1) {
        let i: u8 = i.parse().expect("the service's percent");
        set_trace(true);
        let r = beside(Policy::New, i, 100 - i, UNSEEN_STEPS, 2);
        println!("{r:?}");
        return;
    }
    for (i, t) in [(50, 50), (30, 70)] {
        let (old, to) = beside(Policy::Old, i, t, UNSEEN_STEPS, 6);
        let (new, tn) = beside(Policy::New, i, t, UNSEEN_STEPS, 6);
        println!("{i}/{t}: old {old:?}, training {to:.1} %; new {new:?}, training {tn:.1} %");
    }
}
