//! A CNN step whose GPU idles ~22 % alone (a host-bound tail as long as eager PyTorch's on the
//! H200: issue 23's ResNet-50 alone at 50 % ran 64.6 % of its alone rate), in pairs and beside
//! the decode service, plain and under vgpu.
//! `cargo run -p vgpu-model --release --example gappy`
use vgpu_model::targets::*;
use vgpu_model::*;

fn gappy() -> Workload {
    cnn_step_with(800, true)
}

fn main() {
    let w = gappy();
    let p = Params::default();
    let alone = alone_rate(w, p, 3);
    println!("alone: GPU busy {:.1} %", alone / 1e7);
    for l in [25u8, 50] {
        println!(
            "alone at {l} %: {:.1} % of alone",
            100.0 * alone_ratio(Policy::Vgpu, w, l, 4)
        );
    }
    for lim in [[100u8, 100], [30, 70], [50, 50]] {
        let pol = if lim[0] == 100 {
            Policy::Plain
        } else {
            Policy::Vgpu
        };
        let (s, t) = pair(pol, lim, [w, w], 6);
        println!(
            "pair {lim:?} {pol:?}: {:.1} / {:.1}, total {t:.1}",
            s[0], s[1]
        );
    }
    for (i, t) in [(100u8, 100u8), (50, 50), (30, 70)] {
        let pol = if i == 100 {
            Policy::Plain
        } else {
            Policy::Vgpu
        };
        let (lat, _, tr) = service_beside(pol, [i, t], DECODE, w, 8);
        println!(
            "decode beside {i}/{t} {pol:?}: {lat:?}, training {:.1} % of alone",
            100.0 * tr
        );
    }
}
