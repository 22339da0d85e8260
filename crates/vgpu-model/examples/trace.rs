//! One line per window of the limiter for saturating containers:
//! `cargo run -p vgpu-model --release --example trace <kernel µs> <sync every> <limits a/b/..>`;
//! a sync-every of `wN` runs asynchronous kernels launched as fast as the launch path goes,
//! watched by an event every N (`sm_bench`'s `tiny` is `10 w100`).
use vgpu_model::targets::*;
use vgpu_model::*;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let k: u64 = a[1].parse().unwrap();
    let w = match a[2].strip_prefix('w') {
        Some(n) => Workload::Ring {
            kernel: k * US,
            mark_every: n.parse().unwrap(),
            host: 0,
        },
        None => saturating(k * US, a[2].parse().unwrap()),
    };
    let l: Vec<u8> = a[3].split('/').map(|x| x.parse().unwrap()).collect();
    set_trace(true);
    let s = shares(Policy::Vgpu, &l, &vec![w; l.len()], &vec![0; l.len()], 2);
    eprintln!("{s:?}");
}
