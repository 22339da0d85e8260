//! The probe's host-bound launch stream (`stream:NAME:LAUNCHES:GAP_US:SYNC_EVERY`) on the
//! simulator: a short kernel, then host work, a synchronisation every few launches (eager
//! framework code; issue 23's host-bound shape).
use vgpu_tests::*;

/// The timing tests run one at a time (each compares wall times; beside each other on a
/// 2-core machine they measured each other).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn the_probe_runs_a_host_bound_stream() {
    let r = Probe::bare()
        .ops(&["init", "ctx", "stream:spin_3us:2000:20:256", "simkernel"])
        .run()
        .success();
    assert_eq!(r.value("stream", "n"), 2000);
    // Every launch is followed by 20 µs of host work (a spin: never shorter); the GPU ran
    // 3 µs per kernel.
    let per = r.value("stream", "ns_per_launch");
    assert!(per >= 20_000, "{per} ns per launch");
    assert_eq!(r.value("stream", "wall_ns") / 2000, per);
    let rate = r.value("stream", "launches_per_s");
    assert!(
        rate.abs_diff(1_000_000_000 / per) <= rate / 100,
        "{rate}/s, {per} ns"
    );
    assert_eq!(r.value("simkernel", "ns"), 2000 * 3000);
}

#[test]
fn the_host_bound_stream_checks_its_arguments() {
    let r = Probe::bare()
        .ops(&["init", "ctx", "stream:spin_3us:0:5:1", "stream:spin_3us:9"])
        .run();
    assert_eq!(r.line("stream")[0], "ERR");
    assert_eq!(r.nth("stream", 1)[0], "ERR");
}

/// Best-of-two wall times of `ops` behind a 40 µs launch latency: bare, and at 25 % with
/// brackets held and unheld (`VGPU_HOLD_BRACKETS`). Bare and limited runs alternate.
fn bare_held_unheld(ops: &[&str], tag: &str) -> (u64, u64, u64) {
    let dir = own_temp_dir().join(format!("node-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    let wall = |p: Probe| {
        p.env("VGPU_SIM_LAUNCH_LATENCY_NS", "40000")
            .ops(ops)
            .run()
            .success()
            .value("stream", "wall_ns")
    };
    let limited = |hold: &str| {
        Probe::new()
            .env("CUDA_DEVICE_SM_LIMIT", "25")
            .env("VGPU_HOLD_BRACKETS", hold)
            .env("VGPU_NODE_DIR", &dir.display().to_string())
    };
    let (mut bare, mut held, mut unheld) = (u64::MAX, u64::MAX, u64::MAX);
    for _ in 0..2 {
        bare = bare.min(wall(Probe::bare()));
        held = held.min(wall(limited("true")));
        unheld = unheld.min(wall(limited("false")));
    }
    let _ = std::fs::remove_dir_all(&dir);
    (bare, held, unheld)
}

/// Issue 23, target 1, on the simulator: a host-bound stream (20 µs kernels, 100 µs of host
/// work after each: the GPU ~16 % busy) at 25 %, on a GPU whose kernels start 40 µs after
/// their launch. On an idle stream a bracket's first events are reached at once and its
/// kernel only then, so an unheld bracket prices each kernel at 60 µs, half the GPU, and the
/// stream ran at 0.5× its bare speed (`VGPU_HOLD_BRACKETS=false` still does: 1.90× slower);
/// held until its last event is recorded, the bracket times the kernel alone.
#[test]
fn a_host_bound_stream_is_charged_its_kernels_not_their_launch_latency() {
    let _serial = serial(&SERIAL);
    let (bare, held, unheld) =
        bare_held_unheld(&["init", "ctx", "stream:spin_20us:3000:100:256"], "latency");
    let ratio = held as f64 / bare as f64;
    assert!(
        ratio <= 1.25,
        "25 % slowed a 16 %-busy stream {ratio:.2}x: {held} ns against {bare} ns bare"
    );
    // The switch is honoured: unheld, the launch latency is priced again.
    assert!(
        unheld as f64 >= 1.5 * bare as f64,
        "VGPU_HOLD_BRACKETS=false: {unheld} ns against {bare} ns bare"
    );
}

/// The same stream over 1,024 launch shapes of one function (each launched about three times:
/// a framework's kernels over ever new sizes, as a decode step's grow with its sequence). A
/// new shape is a new key without a price; holding only keys with a price left every one of
/// these brackets unheld, priced with the launch latency (the H200's decode service at 50 %:
/// p50 1.40× plain, run 59). A function launched before has its module loaded, so any later
/// launch of it may be held.
#[test]
fn a_stream_of_ever_new_kernel_shapes_is_charged_its_kernels() {
    let _serial = serial(&SERIAL);
    let (bare, held, _) = bare_held_unheld(
        &["init", "ctx", "stream:spin_20us:3000:100:256:1024"],
        "shapes",
    );
    let ratio = held as f64 / bare as f64;
    assert!(
        ratio <= 1.25,
        "25 % slowed a 16 %-busy stream of new shapes {ratio:.2}x: {held} ns against {bare} ns bare"
    );
}

/// A stream of 2 µs kernels with 5 µs of host work after each (the GPU ~15 % busy) at 25 %, on
/// a GPU where a kernel queued behind a timing event starts 3 µs late: a held bracket measures
/// 5 µs, and with no back-to-back segment (the stream never queues) nothing but the restart
/// probe (an empty kernel of vgpu's own, once and twice behind an event) teaches the 3 µs:
/// charged 5 µs a launch, the stream was held to 25 % at ~37 % of priced work (1.4× slower
/// without the probe). The H200's decode service is this shape (3 µs kernels, a restart of
/// ~1.4–2.7 µs; run 62).
#[test]
fn a_stream_of_tiny_kernels_is_not_charged_the_restart_its_brackets_add() {
    let _serial = serial(&SERIAL);
    let ops = ["init", "ctx", "stream:spin_2us:60000:5:256"];
    let dir = own_temp_dir().join("node-restart");
    std::fs::create_dir_all(&dir).unwrap();
    let wall = |p: Probe| {
        p.env("VGPU_SIM_RESTART_NS", "3000")
            .ops(&ops)
            .run()
            .success()
            .value("stream", "wall_ns")
    };
    // Each limited run is compared with the bare run just before it, and the best pair is
    // judged: four pairs, then more, up to eight, until one meets the bar: the simulator's speed drifts with the machine's load (bare runs of one check took
    // 587-797 ms), and the best of two unpaired runs failed one check in five, at 1.38-1.46x,
    // on ebe0206 as on d81b972; paired, the best of four read 1.05-1.20x, and once 1.37x where
    // CI shared its two cores with other builds (7b6da68). What it guards against reads
    // 1.75-2.5x in every pair.
    let bar = 1.35;
    let kernels = 60_000.0 * 2_000.0;
    let (mut best, mut figures) = (f64::MAX, (0u64, 0u64, 0.0f64));
    for pair in 0..8 {
        if pair >= 4 && best <= bar {
            break;
        }
        let bare = wall(Probe::bare());
        let limited = wall(
            Probe::new()
                .env("CUDA_DEVICE_SM_LIMIT", "25")
                .env("VGPU_NODE_DIR", &dir.display().to_string()),
        );
        // What the stream may take at 25 %: its bare time, or its kernels' 60,000 × 2 µs at a
        // quarter of the GPU where the host is fast enough to make it busier than that.
        let allowed = (bare as f64).max(kernels / 0.25);
        let ratio = limited as f64 / allowed;
        if ratio < best {
            (best, figures) = (ratio, (limited, bare, allowed));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    // (A release build's bare stream took 5.7 µs a launch, so its 2 µs kernels kept the GPU
    // ~35 % busy; a debug build's ~15 %.) Charged the 3 µs restart too, it would take 2.5× as
    // long as its kernels allow; 1.75x without the probe.
    let (limited, bare, allowed) = figures;
    assert!(
        best <= bar,
        "25 % slowed a stream {:.0} % busy {best:.2}x: {limited} ns against {allowed:.0} ns \
         allowed ({bare} ns bare)",
        100.0 * kernels / bare as f64
    );
}
