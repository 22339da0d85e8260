use vgpu_model::targets::*;
use vgpu_model::*;
fn main() {
    set_trace(true);
    let r = two_processes(Policy::New, 50, saturating(MS, 0), 2);
    eprintln!("{r:?}");
}
