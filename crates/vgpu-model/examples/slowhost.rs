//! The H200's decode service beside its ResNet step with each one's host work scaled
//! ([`host_scaled`]): the service's by `DECODE` % and the trainer's by `TRAINER` % (default 100
//! each), at 50/50 and 30/70, with the trainer's counters of its peer's synchronisations (held
//! in them, for their announcements, behind its share at them, of that far behind and held so
//! on its allowance). The service alone already takes ~186 ms a request, as on run 127's H100
//! host; `slowhost 100 140` gives a trainer that cannot use its 70 % beside it, as there (the
//! figures `FAR_HOLD_PART` cites). `JITTER` (default 30, at most 100) is how far each token's
//! host work moves either way, in percent: a less regular service's synchronisations are
//! foretold less often. `held-slices` anywhere among the arguments runs it with
//! [`Params::held_slices`]: a context held on the GPU still takes its time slices;
//! `switch=US` and `slice=MS` set [`Params::switch`] (µs) and [`Params::timeslice`] (ms): the
//! H100's plain co-location cost the service more than the model's defaults do (runs 145-147).
//! `h100` sets what comes close to the H100 of runs 145-148 (a trainer with 1.4x the host work,
//! 400 µs a context switch, 3 ms slices; `TRAINER`, `switch=` and `slice=` still override):
//! plain co-location p50 1.30x alone, the loop 0.858 (the H100: 1.32-1.54x, 0.84-0.88); 50/50
//! 1.11x, 0.605 (1.00-1.08x, 0.59-0.61); 30/70 1.12x, 0.707, the trainer far behind its share
//! (1.12-1.23x, 0.71-0.78). Each line gives the service's synchronisations foretold
//! (`Stats::syncs_foretold`), the GPU's context switches (between any two contexts) over the
//! service's synchronisations, a token's, and the service's share of the GPU. After 50/50 and
//! 30/70 come 50/50 with both work-conserving and priorities 0 / 1 without limits (target 4:
//! the trainer's bar is 0.9 x (1 - the service's share of the GPU)).
//! `cargo run -p vgpu-model --release --example slowhost [DECODE] [TRAINER] [JITTER]
//! [held-slices] [h100] [switch=US] [slice=MS]`.
use vgpu_model::targets::*;
use vgpu_model::*;
use vgpu_policy::limiter::Priority;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let held_slices = args.iter().any(|a| a == "held-slices");
    let preset = args.iter().any(|a| a == "h100");
    let named = |key: &str| {
        args.iter()
            .find_map(|a| a.strip_prefix(key)?.parse::<u64>().ok())
    };
    let defaults = Params::default();
    let base = if preset { h100(defaults) } else { defaults };
    let trainer = if preset { H100_TRAINER_HOST } else { 100 };
    let switch = named("switch=").map_or(base.switch, |us| us * 1_000);
    let timeslice = named("slice=").map_or(base.timeslice, |ms| ms * 1_000_000);
    // Percentages; a missing or unreadable one is 100 (the trainer's `H100_TRAINER_HOST` with
    // `h100`).
    let mut pct = args
        .iter()
        .filter(|a| *a != "held-slices" && *a != "h100" && !a.contains('='))
        .map(|s| s.parse().unwrap_or(100));
    let (dpct, tpct): (u64, u64) = (pct.next().unwrap_or(100), pct.next().unwrap_or(trainer));
    let jitter = pct.next().map_or(30, |j| j.min(100)) as u32;
    let p = Params {
        held_slices,
        switch,
        timeslice,
        ..defaults
    };
    let dec = host_scaled(jittered(h200_decode(), jitter), dpct);
    let step = host_scaled(resnet_step(), tpct);
    let alone = service_alone_with(p, Policy::Vgpu, dec, 100, 8);
    println!(
        "host x{dpct} % / x{tpct} %, jitter {jitter} %, switch {} us, slices {} ms{}: decode \
         alone {alone:?}",
        switch / 1_000,
        timeslice / 1_000_000,
        if held_slices {
            ", held contexts take slices"
        } else {
            ""
        }
    );
    let (normal, prio) = ([Priority::Normal; 2], [Priority::High, Priority::Low]);
    for (l, pr, wc, w) in [
        ([100u8, 100u8], normal, false, "plain"),
        ([50, 50], normal, false, "50/50"),
        ([30, 70], normal, false, "30/70"),
        ([50, 50], normal, true, "50/50 work-conserving"),
        ([100, 100], prio, false, "priorities 0 / 1"),
    ] {
        let sc = beside_scenario(p, Policy::Vgpu, l, pr, wc, dec, step, 8);
        let o = run(&sc);
        let b = beside_of(&sc, &o);
        let foretold = o.learned[0]
            .as_ref()
            .map_or((0, 0), |(_, _, st)| (st.syncs_foretold, st.syncs));
        println!(
            "beside the ResNet step {w}: p50 {:.1} ({:.2}x) p99 {:.1} ({:.2}x) training {:.3}, \
             {} of the service's {} syncs foretold, {:.1} context switches a service sync, \
             the service's kernels {:.1} % of the GPU",
            b.latency.p50,
            b.latency.p50 / alone.p50,
            b.latency.p99,
            b.latency.p99 / alone.p99,
            b.training,
            foretold.0,
            foretold.1,
            // Both over the whole run, warm-up included (the latencies leave it out).
            o.switches as f64 / o.syncs[0].max(1) as f64,
            100.0 * b.service_busy
        );
        if let Some((_, _, st)) = &o.learned[1] {
            println!(
                "  trainer: charged {:.1} %, held in syncs {} ms, for announced {} ms, \
                     passed over {} ms ({} far behind, {} held so)",
                100.0 * o.charged[1] as f64 / (8 * S) as f64,
                st.held_peer_sync_ns / 1_000_000,
                st.held_announced_ns / 1_000_000,
                st.announced_behind_ns / 1_000_000,
                st.announced_far_ns / 1_000_000,
                st.held_far_ns / 1_000_000
            );
        }
    }
}
