//! Target 3 over kernel lengths × sync patterns × limit mixes, under vgpu, plus one container
//! alone (target 5): `cargo run -p vgpu-model --release --example sweep` (MISS marks a miss).
use vgpu_model::targets::*;
use vgpu_model::*;
fn main() {
    let kernels = [10 * US, 100 * US, MS, 11 * MS, 20 * MS];
    {
        let pol = Policy::Vgpu;
        for &k in &kernels {
            for sync in [0u32, 4, 1] {
                let w = saturating(k, sync);
                for (limits, starts) in [
                    (vec![30u8, 70], vec![0u64, 0]),
                    (vec![50, 50], vec![0, 0]),
                    (vec![20, 30, 50], vec![0, 0, 0]),
                    (vec![30, 70], vec![0, 2]),
                ] {
                    let ws = vec![w; limits.len()];
                    let secs = if k < 100 * US { 5 } else { 8 };
                    let s = shares(pol, &limits, &ws, &starts, secs);
                    let bad = s
                        .avg
                        .iter()
                        .zip(&limits)
                        .any(|(a, l)| (a - f64::from(*l)).abs() > 2.0)
                        || s.worst_window > 4.0
                        || s.total < 95.0;
                    println!(
                        "{pol:?} k={}us sync={sync} {limits:?} late={:?}: {:?} worst {:.1} total {:.1} {}",
                        k / US,
                        starts,
                        s.avg
                            .iter()
                            .map(|a| (a * 10.0).round() / 10.0)
                            .collect::<Vec<_>>(),
                        s.worst_window,
                        s.total,
                        if bad { "MISS" } else { "" }
                    );
                }
            }
            for p in [10u8, 25, 50, 75] {
                for sync in [0u32, 4, 1] {
                    let (a, wst) = single(pol, p, saturating(k, sync), 6);
                    println!(
                        "single {p} k={}us sync={sync}: {a:.1} (worst {wst:.1})",
                        k / US
                    );
                }
            }
        }
    }
}
