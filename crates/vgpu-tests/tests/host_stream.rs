//! The probe's host-bound launch stream (`stream:NAME:LAUNCHES:GAP_US:SYNC_EVERY`) on the
//! simulator: a short kernel, then host work, a synchronisation every few launches (eager
//! framework code; issue 23's host-bound shape).
use vgpu_tests::*;

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
