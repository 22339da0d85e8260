use vgpu_model::targets::*;
use vgpu_model::*;
fn main() {
    for sw in [100 * US, 150 * US, 250 * US] {
        let p = Params {
            switch: sw,
            ..Params::default()
        };
        for (n, w) in [("cnn", cnn_step()), ("resnet", resnet_step())] {
            for l in [[30u8, 70], [50, 50]] {
                let (s, t) = pair_with(p, Policy::Vgpu, l, [w, w], 5);
                println!("{n} sw{} {:?}: {:.2?} total {t:.1}", sw / US, l, s);
            }
        }
        let s = shares_with(
            Params {
                switch: sw,
                wake: 100 * US,
                ..Params::default()
            },
            Policy::Vgpu,
            &[50, 50],
            &[saturating(11 * MS, 4), saturating(50 * US, 4)],
            &[0, 0],
            6,
        );
        println!("keep sw{} {:.2?}", sw / US, s.avg);
    }
}
