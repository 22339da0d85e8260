use vgpu_model::targets::*;
use vgpu_model::*;
fn main() {
    let (_, s, l) = service_beside(
        Policy::Vgpu,
        [50, 50],
        stream(5 * US),
        saturating(11 * MS, 4),
        5,
    );
    println!("{s:.3} {l:.3}");
}
