use vgpu_model::targets::*;
use vgpu_model::*;
fn main() {
    let cases: Vec<(Vec<u8>, Vec<Workload>, Vec<u64>)> = vec![
        (
            vec![30, 70],
            vec![saturating(20 * MS, 1), TRAINING],
            vec![0, 0],
        ),
        (
            vec![30, 70],
            vec![saturating(11 * MS, 4), saturating(100 * US, 0)],
            vec![0, 0],
        ),
        (
            vec![50, 50],
            vec![saturating(10 * US, 0), saturating(20 * MS, 4)],
            vec![0, 0],
        ),
        (
            vec![20, 30, 50],
            vec![saturating(1 * MS, 1), saturating(20 * MS, 0), TRAINING],
            vec![0, 0, 2],
        ),
        (
            vec![20, 30, 50],
            vec![
                saturating(10 * US, 4),
                saturating(11 * MS, 4),
                saturating(500 * US, 1),
            ],
            vec![2, 0, 0],
        ),
        (
            vec![25, 25],
            vec![saturating(11 * MS, 4), saturating(11 * MS, 4)],
            vec![0, 0],
        ),
        (
            vec![10, 90],
            vec![saturating(11 * MS, 4), saturating(11 * MS, 4)],
            vec![0, 0],
        ),
    ];
    for pol in [Policy::Old, Policy::New] {
        for (l, w, st) in &cases {
            let s = shares(pol, l, w, st, 8);
            println!(
                "{pol:?} {l:?} late {st:?}: {:?} worst {:.1} total {:.1}",
                s.avg
                    .iter()
                    .map(|a| (a * 10.0).round() / 10.0)
                    .collect::<Vec<_>>(),
                s.worst_window,
                s.total
            );
        }
    }
}
