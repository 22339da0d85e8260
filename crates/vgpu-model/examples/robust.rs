//! Target 3 under slower context switches and wake-ups (the new policy):
//! `cargo run -p vgpu-model --release --example robust`.
use vgpu_model::targets::*;
use vgpu_model::*;
fn main() {
    for sw in [100 * US, 300 * US, 500 * US, 700 * US, 1000 * US] {
        for wake in [30 * US, 100 * US] {
            let p = Params {
                switch: sw,
                wake,
                ..Params::default()
            };
            let mut worst_avg: f64 = 0.0;
            let mut worst_win: f64 = 0.0;
            let mut min_total: f64 = 200.0;
            for k in [10 * US, MS, 11 * MS, 20 * MS] {
                for sync in [0u32, 4, 1] {
                    for (l, st) in [
                        (vec![30u8, 70], vec![0u64, 0]),
                        (vec![20, 30, 50], vec![0, 0, 0]),
                        (vec![30, 70], vec![0, 2]),
                    ] {
                        let s = shares_with(
                            p,
                            Policy::New,
                            &l,
                            &vec![saturating(k, sync); l.len()],
                            &st,
                            if k < 100 * US { 4 } else { 8 },
                        );
                        for (a, x) in s.avg.iter().zip(&l) {
                            worst_avg = worst_avg.max((a - f64::from(*x)).abs());
                        }
                        worst_win = worst_win.max(s.worst_window);
                        min_total = min_total.min(s.total);
                    }
                }
            }
            println!(
                "switch {} us wake {} us: worst avg dev {worst_avg:.1}, worst 1 s window {worst_win:.1}, min total {min_total:.1}",
                sw / US,
                wake / US
            );
        }
    }
}
