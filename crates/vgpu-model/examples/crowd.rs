//! N saturating containers at P % on one GPU: each one's share of the GPU.
//! `cargo run -p vgpu-model --release --example crowd -- N P KERNEL_US SECS`
use vgpu_model::targets::*;
use vgpu_model::*;

fn main() {
    let a: Vec<u64> = std::env::args()
        .skip(1)
        .map(|s| s.parse().unwrap())
        .collect();
    let (n, p, k, secs) = (a[0] as usize, a[1] as u8, a[2], a[3]);
    let w = saturating(k * US, 4);
    if std::env::var_os("TRACE").is_some() {
        set_trace(true);
    }
    let s = shares(Policy::Vgpu, &vec![p; n], &vec![w; n], &vec![0; n], secs);
    let mut v = s.avg.clone();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "{n} at {p} %: total {:.1} %, shares min {:.2} max {:.2}",
        s.total,
        v[0],
        v[n - 1]
    );
    println!(
        "{:?}",
        v.iter()
            .map(|x| (x * 10.0).round() / 10.0)
            .collect::<Vec<_>>()
    );
}
