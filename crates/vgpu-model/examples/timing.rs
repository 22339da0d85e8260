use vgpu_model::targets::*;
use vgpu_model::*;
fn main() {
    let t = std::time::Instant::now();
    let s = shares(Policy::New, &[30, 70], &[saturating(10 * US, 0); 2], &[0, 0], 4);
    println!("10us async 4s: {:?} {:?}", s.avg, t.elapsed());
    let t = std::time::Instant::now();
    let s = shares(Policy::New, &[30, 70], &[saturating(11 * MS, 4); 2], &[0, 0], 8);
    println!("11ms 8s: {:?} {:?}", s.avg, t.elapsed());
    let t = std::time::Instant::now();
    let r = beside_training(Policy::New, 30, 70, 10);
    println!("beside 10s: {:?} {:?}", r, t.elapsed());
}
