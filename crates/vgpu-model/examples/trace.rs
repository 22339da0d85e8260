//! One line per window of the new policy for saturating containers:
//! `cargo run -p vgpu-model --release --example trace <kernel µs> <sync every> <limits a/b/..>`.
use vgpu_model::targets::*;
use vgpu_model::*;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let k: u64 = a[1].parse().unwrap();
    let sync: u32 = a[2].parse().unwrap();
    let l: Vec<u8> = a[3].split('/').map(|x| x.parse().unwrap()).collect();
    set_trace(true);
    let s = shares(
        Policy::New,
        &l,
        &vec![saturating(k * US, sync); l.len()],
        &vec![0; l.len()],
        2,
    );
    eprintln!("{s:?}");
}
