//! The compute limit on the simulated GPU's timeline. These tests check that the limiter
//! governs every launch path and throttles by about the right factor; the accuracy targets
//! (±3 points per 1 s window) are measured on the H200 by tests/gpu/compute/ (docs/GPU-RESULTS.md),
//! not here: CI machines are too noisy for timing assertions that tight.
use std::time::Duration;
use vgpu_tests::*;

fn node_dir(name: &str) -> String {
    let d = own_temp_dir().join(format!("node-{name}"));
    std::fs::create_dir_all(&d).unwrap();
    d.display().to_string()
}

/// Wall time of `kernels:...` under the given probe.
fn wall(p: Probe, kernels: &str) -> Duration {
    let r = p.ops(&["init", "ctx", kernels]).run().success();
    Duration::from_nanos(r.value("kernels", "wall_ns"))
}

fn limited(percent: u32, name: &str) -> Probe {
    Probe::new()
        .env("CUDA_DEVICE_SM_LIMIT", &percent.to_string())
        .env("VGPU_NODE_DIR", &node_dir(name))
}

/// Runs `p` to its end, killing it and failing with `what` if it takes longer than `limit`;
/// returns whether it succeeded, and its stdout.
fn run_within(p: Probe, limit: Duration, what: &str) -> (bool, String) {
    let mut child = p
        .command()
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > limit {
            let _ = child.kill();
            panic!("{what} hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The wall time of `p` running `round` (after `init` and `ctx`) `rounds` times.
fn rounds_wall(p: Probe, rounds: usize, round: [&str; 2]) -> Duration {
    rounds_wall_after(p, &[], rounds, round)
}

/// [`rounds_wall`] with the ops `before` first (their time included).
fn rounds_wall_after(p: Probe, before: &[&str], rounds: usize, round: [&str; 2]) -> Duration {
    let mut ops = vec!["init", "ctx"];
    ops.extend(before);
    for _ in 0..rounds {
        ops.extend(round);
    }
    // A last cheap launch, admitted only once the container's virtual time is back within
    // `AHEAD` (50 ms) of now: launches admitted on a guessed price are charged what they cost
    // when a timing comes back, and that debt is held for at the next launch; a program that
    // ends on such a batch leaves it on its container's virtual time (with a loaded machine's
    // late looks the last round's 50 ms, 200 ms at 25 %, took "mixed" under its bar: 0.98-1.01
    // s with every kernel charged). Launches never charged leave no debt: it does not wait.
    ops.push("kernels:spin_10us:1:1:0");
    let t0 = std::time::Instant::now();
    p.ops(&ops).run().success();
    t0.elapsed()
}

/// Runs `kernels` (300 ms of simulated GPU work) bare and under `p` (25 %): the limited run
/// must take about 1.2 s. The lower bound is absolute (the simulated GPU time is on the clock:
/// a loaded machine can only make a run slower); the upper one (starvation) is relative to the
/// bare run, with room for load.
fn assert_a_quarter_of_300_ms(p: Probe, kernels: &str, what: &str) {
    let bare = wall(Probe::bare(), kernels);
    let got = wall(p, kernels);
    assert!(
        got >= Duration::from_millis(1_020),
        "{what}: 25 % of 300 ms of GPU work must take about 1.2 s: {got:?} (bare {bare:?})"
    );
    let cap = bare.max(Duration::from_millis(300)).mul_f64(5.5) + Duration::from_millis(500);
    assert!(got <= cap, "{what}: 25 % was starved: {bare:?} → {got:?}");
}

/// The wall time a probe's `kernels:…` op of `n` launches printed in `out`.
fn kernels_wall(out: &str, n: u64) -> u64 {
    let prefix = format!("OK kernels n={n} wall_ns=");
    out.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no result of {n} kernels in {out}"))
}

#[test]
fn a_limit_slows_every_workload_shape_by_about_its_share() {
    // 300 ms of GPU work in each shape: 1 ms kernels queued, 1 ms kernels with a sync after
    // each, 20 µs kernels queued. At 25 % that is 1.2 s of wall time. (The lower bound being
    // absolute, the "short" shape, whose 15 000 launches are CPU-bound on a loaded 2-core
    // machine, does not fail when the bare run is slowed more than the limited one.)
    for (shape, kernels) in [
        ("async", "kernels:spin_1000us:1:300:0"),
        ("sync", "kernels:spin_1000us:1:300:1"),
        ("short", "kernels:spin_20us:1:15000:0"),
    ] {
        assert_a_quarter_of_300_ms(limited(25, shape), kernels, shape);
    }
}

#[test]
fn every_launch_path_is_governed() {
    for mode in [
        &["--via", "link"][..],
        &["--via", "cudart", "--ptds"],
        &["--via", "gpa:12000:0"],
    ] {
        let p = mode.iter().fold(limited(25, "paths"), |p, a| p.arg(a));
        let got = wall(p, "kernels:spin_1000us:1:200:0");
        assert!(got >= Duration::from_millis(550), "{mode:?}: {got:?}");
    }
}

#[test]
fn limit_100_unset_or_disabled_runs_as_without_vgpu() {
    let k = "kernels:spin_1000us:1:200:0";
    let bare = wall(Probe::bare(), k);
    for p in [
        Probe::new().env("CUDA_DEVICE_SM_LIMIT", "100"),
        Probe::new(),
        Probe::new().env("CUDA_DEVICE_SM_LIMIT", "0"),
        Probe::new()
            .env("CUDA_DEVICE_SM_LIMIT", "20")
            .env("GPU_CORE_UTILIZATION_POLICY", "disable"),
    ] {
        let got = wall(p.clone(), k);
        assert!(
            got.as_secs_f64() < bare.as_secs_f64() * 1.3 + 0.05,
            "{p:?}: {bare:?} → {got:?}"
        );
    }
}

#[test]
fn two_containers_take_turns_in_proportion_to_their_limits() {
    // Two containers (separate regions) on one simulated GPU share its timeline
    // (VGPU_SIM_STATE) and the node directory; A (30 %) runs 400 × 1 ms of work, B (70 %) 800.
    let dir = node_dir("pair");
    let state = format!("{dir}/sim.state");
    let spawn = |percent: u32, k: &str| {
        limited(percent, "unused")
            .env("VGPU_NODE_DIR", &dir)
            .env("VGPU_SIM_STATE", &state)
            .ops(&["init", "ctx", k])
            .command()
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let t0 = std::time::Instant::now();
    let a = spawn(30, "kernels:spin_1000us:1:400:0");
    let b = spawn(70, "kernels:spin_1000us:1:800:0");
    let out_b = b.wait_with_output().unwrap();
    let out_a = a.wait_with_output().unwrap();
    assert!(out_a.status.success() && out_b.status.success());
    // B (70 %) does its 0.8 s of work in about 0.8/0.7 s; A meanwhile gets about 30 %. Timed
    // by B itself from its first launch (its start-up, slow on a loaded machine, is not in
    // it): alone at its share from there it needs about (800 − 70 − 8) / 0.7 = 1031 ms (a new
    // container starts `AHEAD` back, and 8 probe launches go before its first price; 0.99 s
    // seen when A started late), unlimited about 800 ms; beside A, 1.18-1.43 s in 20 runs on
    // a 2-core machine. Timed by the parent from the spawn (400 × 1 ms, the earlier form), its
    // start-up skew failed one run in ten either way.
    let stdout_b = String::from_utf8_lossy(&out_b.stdout).to_string();
    let tb = stdout_b
        .split_whitespace()
        .find_map(|w| w.strip_prefix("wall_ns="))
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_nanos)
        .unwrap_or_else(|| panic!("no wall time from B: {stdout_b}"));
    assert!(
        tb >= Duration::from_millis(880),
        "70 % finished too fast: {tb:?}"
    );
    assert!(
        tb <= Duration::from_millis(2000),
        "70 % was starved: {tb:?}"
    );
    let wall_a = String::from_utf8_lossy(&out_a.stdout).to_string();
    assert!(wall_a.contains("OK kernels"), "{wall_a}");
    // A's share is checked too (issue 13 item 18): 0.4 s of work at 30 % needs about 1.33 s
    // whoever else runs; a lower bound, which load cannot break.
    let ta = t0.elapsed();
    assert!(
        ta >= Duration::from_millis(1_150),
        "30 % finished too fast: {ta:?}"
    );
    assert!(ta <= Duration::from_secs(6), "30 % was starved: {ta:?}");
}

#[test]
fn a_global_mode_capture_survives_the_controllers_drains() {
    // A context-wide sync invalidates a capture in progress, whatever the syncing thread's
    // capture mode (measured on the H200), and so does an event or stream query from a thread in
    // GLOBAL mode (PyTorch's watchdog, pytorch#104487; the H200's run 80); the simulated driver
    // models both. The controller drains the device at each window's end and reads the timing
    // events of the kernels launched just before, while the program captures for ~80 ms,
    // longer than a window at 50 % and than a measuring window: the capture must still succeed,
    // under a limit and when only measuring, whichever way the program reached the capture
    // entry points.
    let ops = [
        "init",
        "ctx",
        "kernels:spin_1000us:1:20:0",
        "capture:spin_1000us:1:80:0:1000",
        "capture:spin_200us:1:80:0:1000",
    ];
    let vias: [&[&str]; 4] = [
        &["--via", "link"],
        &["--via", "dlsym"],
        &["--via", "gpa:12000:0"],
        &["--via", "cudart", "--ptds"],
    ];
    for via in vias {
        for (what, p) in [
            ("limit 50", limited(50, "capglobal")),
            (
                "measuring",
                Probe::new()
                    .env("VGPU_MEASURE_GPU_TIME", "1")
                    .env("VGPU_NODE_DIR", &node_dir("capglobal-m")),
            ),
        ] {
            let p = via.iter().fold(p, |p, a| p.arg(a));
            check_captures(&format!("{what} {via:?}"), p.ops(&ops).run());
        }
    }
}

fn check_captures(what: &str, r: Run) {
    assert!(
        r.stdout.matches("OK capture").count() == 2,
        "{what}: a capture failed: {}{}",
        r.stdout,
        r.stderr
    );
}

#[test]
fn a_capturing_thread_that_also_launches_uncaptured_work_is_not_deadlocked() {
    // While a capture runs, the controller keeps its window open rather than drain (a drain
    // would invalidate the capture). The capturing thread also launches into a stream it does
    // not capture: those launches are governed, and must find a window; none may wait for a
    // drain that waits for the capture to end. Under 20 % the off-windows are long, so the
    // launches do wait, for a while, but never forever.
    let p = limited(20, "capmixed").ops(&[
        "init",
        "ctx",
        "kernels:spin_1000us:1:20:0",
        "capture:spin_1000us:1:60:0:500:1",
        "capture:spin_1000us:1:60:1:500:1",
    ]);
    let (_, s) = run_within(
        p,
        Duration::from_secs(20),
        "a capture with uncaptured launches beside it",
    );
    assert_eq!(s.matches("OK capture").count(), 2, "{s}");
}

#[test]
fn a_long_capture_does_not_shut_other_containers_out() {
    // Container A captures for ~1.5 s (300 launches, 5 ms apart) under 50 %: its window stays
    // open for the whole capture. Container B (another region, the same node directory) starts
    // meanwhile with 100 ms of work at 50 %: it must get the GPU while A's capture goes on, not
    // after it (A gives the node token back after 100 ms).
    let dir = node_dir("longcapture");
    let a = limited(50, "unused")
        .env("VGPU_NODE_DIR", &dir)
        .ops(&[
            "init",
            "ctx",
            "kernels:spin_1000us:1:10:0",
            "capture:spin_1000us:1:300:0:5000",
        ])
        .command()
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let b = limited(50, "unused").env("VGPU_NODE_DIR", &dir).ops(&[
        "init",
        "ctx",
        "kernels:spin_1000us:1:100:0",
    ]);
    let (ok, out) = run_within(
        b,
        Duration::from_secs(20),
        "container B beside a long capture",
    );
    assert!(ok, "{out}");
    let a = a.wait_with_output().unwrap();
    let a_out = String::from_utf8_lossy(&a.stdout);
    assert!(a_out.contains("OK capture"), "{a_out}");
    let wall = kernels_wall(&out, 100);
    assert!(
        wall < 900_000_000,
        "B waited for A's 1.5 s capture: its 100 ms of work took {wall} ns"
    );
}

#[test]
fn captured_work_is_charged_when_the_graph_runs_not_when_captured() {
    // Under 20 %, capturing 100 × 1 ms never waits for a window (it runs nothing); running the
    // graph is governed: after the first graph's 100 ms the container owes 400 ms off, so the
    // second graph waits for it.
    let r = limited(20, "capture")
        .ops(&[
            "init",
            "ctx",
            "capture:spin_1000us:1:100",
            "capture:spin_1000us:1:100",
        ])
        .run()
        .success();
    for n in 0..2 {
        let cap = r.nth_value("capture", n, "capture_ns");
        assert!(cap < 50_000_000, "capture {n} took {cap} ns: {}", r.stdout);
    }
    let second = r.nth_value("capture", 1, "graph_ns");
    assert!(
        second > 300_000_000,
        "the second graph ran without waiting: {second} ns"
    );
}

#[test]
fn work_conserving_runs_past_the_share_only_while_nobody_else_waits() {
    let k = "kernels:spin_1000us:1:300:0";
    let bare = wall(Probe::bare(), k);
    // Alone, a work-conserving container at 25 % runs at about full speed.
    let alone = wall(
        limited(25, "wc-alone").env("VGPU_SM_WORK_CONSERVING", "true"),
        k,
    );
    assert!(
        alone.as_secs_f64() < bare.as_secs_f64() * 1.6 + 0.05,
        "alone: {bare:?} → {alone:?}"
    );
    // Beside a container at 75 % that wants the GPU, it gives the GPU back: the other one
    // still gets about its 75 % (300 ms of work in about 400 ms, not 600 ms or more).
    let dir = node_dir("wc-pair");
    let state = format!("{dir}/sim.state");
    let spawn = |p: Probe| {
        p.env("VGPU_NODE_DIR", &dir)
            .env("VGPU_SIM_STATE", &state)
            .ops(&["init", "ctx", "kernels:spin_1000us:1:1500:0"])
            .command()
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let greedy = spawn(limited(25, "unused").env("VGPU_SM_WORK_CONSERVING", "1"));
    std::thread::sleep(Duration::from_millis(200));
    let r = limited(75, "unused")
        .env("VGPU_NODE_DIR", &dir)
        .env("VGPU_SIM_STATE", &state)
        .ops(&["init", "ctx", k])
        .run()
        .success();
    let other = Duration::from_nanos(r.value("kernels", "wall_ns"));
    let mut greedy = greedy;
    let _ = greedy.kill();
    let _ = greedy.wait();
    assert!(
        other < Duration::from_millis(650),
        "the 75 % container was held back: {other:?}"
    );
}

#[test]
fn the_limit_changes_live_and_the_region_counts_gpu_time() {
    // A container at 50 % runs 300 ms of work; 300 ms in, its limit drops to 10 % through the
    // region (what `vgpu limit --sm 10` does): the rest runs at 10 %.
    let region = fresh_region();
    let p = limited(50, "live").region(&region);
    let child = p
        .ops(&["init", "ctx", "kernels:spin_1000us:1:300:0"])
        .command()
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let r = vgpu_region::Region::open_existing(&vgpu_region::Location::shared(&region)).unwrap();
    let uuid = r.snapshot().devices[0].uuid.clone();
    r.set_sm_limit(&uuid, Some(10)).unwrap();
    let out = child.wait_with_output().unwrap();
    let s = String::from_utf8_lossy(&out.stdout).to_string();
    let wall = s
        .split_whitespace()
        .find_map(|w| w.strip_prefix("wall_ns="))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("{s}"));
    // Unchanged it would take about 0.6 s; with the change about 0.3 + (0.3 − 0.15) / 0.1 s.
    assert!(
        wall > 1_200_000_000,
        "the new limit did not apply: {wall} ns"
    );
    // The container's GPU time and launches are in the region (the process has exited: its
    // counters were retired into the device totals), every launch counted: those after the
    // controller's last look at exit.
    let dev = &r.snapshot().devices[0];
    assert!(dev.gpu_ns >= 250_000_000, "gpu time {} ns", dev.gpu_ns);
    assert_eq!(dev.launches, 300);
    assert!(dev.throttled_ns > 0);
}

/// A process of the container of `region` at `percent` on the node `dir` that runs `kernels`
/// kernels of 1 ms, its stdout piped.
fn in_container(
    percent: u32,
    region: &std::path::Path,
    dir: &str,
    kernels: u32,
) -> std::process::Child {
    limited(percent, "unused")
        .region(region)
        .env("VGPU_NODE_DIR", dir)
        .ops(&["init", "ctx", &format!("kernels:spin_1000us:1:{kernels}:0")])
        .command()
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn the_share_is_the_containers_not_each_processes() {
    // Two processes of one container (one region) at 30 %, each with 300 ms of work: together
    // they get 30 % of the GPU, so both are done after about 0.6 / 0.3 = 2 s, not 1 s.
    let region = fresh_region();
    let dir = node_dir("one-container");
    let t0 = std::time::Instant::now();
    let (a, b) = (
        in_container(30, &region, &dir, 300),
        in_container(30, &region, &dir, 300),
    );
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let both = t0.elapsed();
    assert!(a.status.success() && b.status.success());
    assert!(
        both >= Duration::from_millis(1600),
        "two processes of one container at 30 % finished 600 ms of work in {both:?}"
    );
    assert!(both <= Duration::from_millis(3500), "{both:?}");
}

#[test]
fn launches_are_refused_where_no_controller_can_start() {
    // No thread can be created in the process (a shim preloaded before vgpu; in production a
    // pids or thread limit the program has used up): under a compute limit nobody would ever
    // raise the gate's budget, so its launches are refused with CUDA_ERROR_OPERATING_SYSTEM
    // (304) and one line says why; before, they ran unlimited. Without a limit they run.
    let preload = format!("{} {}", nothreads().display(), libvgpu().display());
    let ops = [
        "init",
        "ctx",
        "kernels:spin_1000us:1:20:0",
        "kernels:spin_1000us:1:20:0",
    ];
    let r = limited(50, "nothreads")
        .env("LD_PRELOAD", &preload)
        .ops(&ops)
        .run();
    for n in 0..2 {
        assert_eq!(r.nth("kernels", n), ["ERR", "kernels", "304"], "{r:?}");
    }
    assert_eq!(
        r.stderr
            .matches("could not start the compute controller")
            .count(),
        1,
        "{}",
        r.stderr
    );
    let r = Probe::new()
        .limit("4g")
        .env("LD_PRELOAD", &preload)
        .ops(&ops)
        .run();
    assert!(r.ok("kernels"), "{r:?}");
}

#[test]
fn processes_started_beside_each_other_are_charged_every_kernel() {
    // Two processes of one container at 50 %, 200 kernels of 1 ms each, started together:
    // each one's first samples are shared (the other's work may be in them), so its first
    // launches, charged the mean's guess, wait for a clean sample to be corrected. Before,
    // they went uncharged: the region read 384 ms for 400 kernels of 1 ms (8 launches of
    // each process uncharged; 398 in a run where neither's first sample was shared). Now
    // 398.6-400 on an idle machine; 405.5 in a CI run beside a release build using both cores
    // of a 2-core machine (the simulated GPU runs on the wall clock, so a host thread waiting
    // for a core can stretch what a bracket measures). 410 sits between that and a deferred
    // correction made twice in both processes (~416; in one process, ~408, would pass).
    let region = fresh_region();
    let dir = node_dir("beside");
    let (a, b) = (
        in_container(50, &region, &dir, 200),
        in_container(50, &region, &dir, 200),
    );
    for c in [a, b] {
        assert!(c.wait_with_output().unwrap().status.success());
    }
    let r = vgpu_region::Region::open_existing(&vgpu_region::Location::shared(&region)).unwrap();
    r.reap_dead();
    let dev = &r.snapshot().devices[0];
    assert_eq!(dev.launches, 400);
    assert!(
        (397_000_000..=410_000_000).contains(&dev.gpu_ns),
        "gpu time {} ns for 400 kernels of 1 ms",
        dev.gpu_ns
    );
}

#[test]
fn gpu_time_is_measured_without_a_limit_only_when_asked() {
    // VGPU_MEASURE_GPU_TIME=1 with no compute limit: the program runs at full speed and its GPU
    // time and launches are in the region; without it, nothing sits on the launch path and
    // nothing is measured.
    let k = "kernels:spin_1000us:1:300:0";
    let bare = wall(Probe::bare(), k);
    for (measure, want_time) in [(true, true), (false, false)] {
        let region = fresh_region();
        let mut p = Probe::new().limit("4g").region(&region);
        if measure {
            p = p.env("VGPU_MEASURE_GPU_TIME", "1");
        }
        let got = wall(p, k);
        assert!(
            got.as_secs_f64() < bare.as_secs_f64() * 1.3 + 0.05,
            "measure={measure}: {bare:?} → {got:?}"
        );
        let r =
            vgpu_region::Region::open_existing(&vgpu_region::Location::shared(&region)).unwrap();
        r.reap_dead();
        let dev = &r.snapshot().devices[0];
        if want_time {
            // 300 ms of kernels, to within the program's own wall time: the last window is
            // reported at exit, not lost.
            let (lo, hi) = (285_000_000, got.as_nanos() as u64 + 20_000_000);
            assert!(
                (lo..=hi).contains(&dev.gpu_ns),
                "gpu time {} ns, not in {lo}..={hi}",
                dev.gpu_ns
            );
            assert_eq!(dev.launches, 300);
            assert_eq!(dev.throttled_ns, 0, "nothing is throttled at 100 %");
        } else {
            assert_eq!((dev.gpu_ns, dev.launches), (0, 0));
        }
    }
}

#[test]
fn a_launch_from_a_thread_without_a_context_is_refused_not_hung() {
    // Under a compute limit, a launch from a thread with no current context reaches the driver
    // (which refuses it) instead of waiting for a controller that cannot start.
    // One device: the gate is found without asking the driver for the current device.
    let p = limited(30, "noctx")
        .env("VGPU_SIM_DEVICES", "1")
        .ops(&["init", "ctx", "noctxlaunch"]);
    let (ok, s) = run_within(p, Duration::from_secs(10), "the launch without a context");
    assert!(ok, "{s}");
    assert!(s.contains("OK noctxlaunch code=201"), "{s}");
}

/// A sampled launch's stream is held on a word until its bracket is recorded
/// (`marks.rs`). A GPU-bound loop of 120 kernels (launch keys) keeps ~2 ms queued and is
/// sampled every 0.5 ms while some are unpriced, so a later hold is placed and lifted before
/// the stream reaches an earlier one: a hold that waited for exactly its value then waited
/// forever (the H200's ResNet loop hung so, runs 57–58; here the 90 % run hung with
/// `CU_STREAM_WAIT_VALUE_EQ`). Each must end, at about its share.
#[test]
fn held_brackets_never_hang_a_loop_with_a_deep_queue() {
    for percent in [90u32, 50] {
        let p = limited(percent, &format!("deep{percent}")).ops(&[
            "init",
            "ctx",
            "kernels:spin_20us:1-120:15000:0",
        ]);
        let (ok, out) = run_within(p, Duration::from_secs(60), "a deep-queued loop");
        assert!(ok, "{percent} %: {out}");
        let wall = kernels_wall(&out, 15_000);
        // 300 ms of GPU work: never faster than the GPU runs it.
        assert!(wall >= 299_000_000, "{percent} %: {wall} ns");
    }
}

/// A driver that waits for the context's work inside a launch call (CUDA's lazy loading does
/// when a launch loads its module; `VGPU_SIM_LAUNCH_SYNCS`) would wait forever for a stream
/// held around that launch, whose word is written after the call returns. The watchdog lifts
/// a hold after 2 ms, so such a loop ends, each held sample costing at most a few ms (without
/// the lift the run hung).
#[test]
fn a_launch_that_waits_for_the_context_is_not_deadlocked_by_a_held_bracket() {
    let kernels = "kernels:spin_200us:1:1500:0";
    let bare = Probe::bare()
        .env("VGPU_SIM_LAUNCH_SYNCS", "1")
        .ops(&["init", "ctx", kernels])
        .run()
        .success()
        .value("kernels", "wall_ns");
    let p = limited(50, "launch-syncs")
        .env("VGPU_SIM_LAUNCH_SYNCS", "1")
        .ops(&["init", "ctx", kernels]);
    let (ok, out) = run_within(p, Duration::from_secs(60), "a loop whose launches sync");
    assert!(ok, "{out}");
    let wall = kernels_wall(&out, 1_500);
    // 300 ms of GPU work at 50 %: about 0.6 s; a held sample that waited for good would
    // not end, one that waited a second each would take minutes.
    assert!(
        wall <= bare.max(300_000_000) * 4 + 1_000_000_000,
        "{wall} ns against {bare} ns bare"
    );
}

/// The controller's timed looks (a queue half run down, a chunk of credit due) wake on time: its
/// thread asks for a timer slack of 1 ns. With Linux's default of 50 µs a timed wait of 100 µs
/// woke 56 µs late on the H200, 4.4 µs with 1 ns (run 85): a quarter of a low-priority process's
/// whole queue (`LOW_DEPTH`, 200 µs). On the model a low-priority CNN beside the decode service
/// gets 0.691 of its alone rate with looks 50 µs late, 0.710 with 5 µs.
#[test]
fn the_controller_thread_wakes_on_time() {
    let child = started(
        limited(50, "slack").ops(&["init", "ctx", "kernels:spin_100us:1:20:0", "hold"]),
        "OK hold",
    );
    let tasks = std::path::PathBuf::from(format!("/proc/{}/task", child.0.id()));
    let controller = std::fs::read_dir(&tasks)
        .unwrap()
        .filter_map(Result::ok)
        .find(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "vgpu-sm0")
        })
        .expect("the controller thread vgpu-sm0 runs");
    // /proc/<tid>/ holds a thread's own timer slack (its task/ directory has none). The
    // controller set it before its first look, and the probe's launches past the first few
    // waited for that look. Linux before 4.6 has no such file, and a ptrace policy stricter than
    // Yama's default may forbid reading it: the test then says so and checks nothing.
    let path = std::path::Path::new("/proc")
        .join(controller.file_name())
        .join("timerslack_ns");
    let slack = match std::fs::read_to_string(&path) {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
            ) =>
        {
            eprintln!("skipped: {}: {e}", path.display());
            return;
        }
        Err(e) => panic!("{}: {e}", path.display()),
    };
    assert_eq!(slack.trim(), "1", "the controller's timer slack (ns)");
}

/// A program that releases its primary context (or resets it, or destroys a context it made)
/// while its process lives on takes the driver objects vgpu's controller made in it with it:
/// the timing events, the restart probe's stream and module, the pinned word streams are held
/// on. The simulator aborts at a use of any of them and unmaps the word, as the real driver
/// may crash (cuda-python under SM 50 % exited 139 on the H200 after its last
/// cuDevicePrimaryCtxRelease). The controller keeps looking for 300 ms after each; the
/// program ends cleanly, and a context made again afterwards still runs its kernels.
#[test]
fn a_destroyed_context_takes_nothing_vgpu_uses_with_it() {
    for (what, ops) in [
        (
            "primary released",
            &[
                "ctxdestroy",
                "sleep:300",
                "ctx",
                "kernels:spin_200us:1:200:0",
            ][..],
        ),
        (
            "primary reset",
            &["reset", "sleep:300", "kernels:spin_200us:1:200:0"][..],
        ),
        (
            "created context destroyed",
            &[
                "ctxcreate",
                "kernels:spin_200us:1:400:0",
                "ctxdestroy",
                "sleep:300",
            ][..],
        ),
    ] {
        let mut all = vec!["init", "ctx", "kernels:spin_200us:1-40:400:0", "sync"];
        all.extend_from_slice(ops);
        let p = limited(50, &format!("ctx-gone-{}", what.replace(' ', "-"))).ops(&all);
        let r = p.run();
        assert!(
            r.status.success() && !r.stderr.contains("destroyed context"),
            "{what}: {:?}\n{}\n{}",
            r.status,
            r.stdout,
            r.stderr
        );
    }
}

/// The brackets the controller's debug lines (`LIBCUDA_LOG_LEVEL=4`) say it measured.
fn brackets_measured(stderr: &str) -> u64 {
    stderr
        .lines()
        .filter(|l| l.contains("sm device 0:"))
        .filter_map(|l| {
            l.split(" brackets (")
                .next()?
                .rsplit(' ')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// A stream cycling over 200 launch shapes (200 keys, each launched 300 times, 20 µs
/// kernels back to back) at 50 %:
/// - it is held to its share. Its probes of the restart waited behind its 2 ms queue, and
///   before segments could teach the restart (its prices too new) they said it was 20 µs: the
///   stream was charged half its kernels and took 1.2-1.3 s, its bare time, for 1.2 s of
///   kernels (now 2.3 s);
/// - it is timed at each key's first launch and at the limiter's samples, not at every turn
///   of the cycle: the gate's table of priced keys was direct-mapped, and two keys that shared
///   an entry evicted each other at each look, the one missing timed again at its next launch
///   (4,594 brackets in its first second, now ~330; the H100's decode service was timed 1,900
///   times a second instead of ~100 in one run of 12, its tokens 7.5 ms apart instead of 3.2,
///   run 113).
#[test]
fn a_stream_over_many_kernels_is_held_to_its_share_and_timed_only_at_samples() {
    let r = limited(50, "keyset")
        .env("LIBCUDA_LOG_LEVEL", "4")
        .ops(&["init", "ctx", "stream:spin_20us:60000:0:0:200"])
        .run()
        .success();
    let wall = Duration::from_nanos(r.value("stream", "wall_ns"));
    // 1.2 s of kernels at 50 %: 2.4 s, less the bank a new container starts with (AHEAD,
    // 50 ms at 50 %: 100 ms of wall time) and a margin; a loaded host only makes it slower.
    assert!(
        wall >= Duration::from_millis(2_000),
        "1.2 s of kernels at 50 % took {wall:?}\n{}",
        r.stderr
    );
    let brackets = brackets_measured(&r.stderr);
    // Each key's first launch, a sample every SAMPLE_REFRESH (20 ms) once all are priced, and
    // as much again for samples lost or taken while the first prices came in.
    let allowed = 2 * (200 + wall.as_millis() as u64 / 20);
    assert!(
        brackets > 0 && brackets <= allowed,
        "{brackets} brackets in {wall:?} (at most {allowed})\n{}",
        r.stderr
    );
}

/// A program that resets its device before its first launch (CUDA samples do, and so does
/// `cudaDeviceReset` between phases) has made no timing event, word or probe yet: nothing to
/// retire, and its launches are still timed afterwards. The controller's debug line counts the
/// brackets it measured; with the marks retired for good at the reset it counted none.
#[test]
fn a_reset_before_the_first_launch_leaves_the_marks_working() {
    let r = limited(50, "reset-first")
        .env("LIBCUDA_LOG_LEVEL", "4")
        .ops(&["init", "ctx", "reset", "kernels:spin_200us:1-40:4000:0"])
        .run()
        .success();
    let brackets = brackets_measured(&r.stderr);
    assert!(
        brackets > 0,
        "no bracket measured after the reset\n{}",
        r.stderr
    );
}

/// After a context that held the marks' objects goes, the controller binds to the program's
/// next context and the marks are made again there: kernels first seen after it are timed
/// and charged what they cost. Retired for good, they were charged the mean of the prices
/// learned before (here 20 µs for a 1 ms kernel): 1.5 s of GPU work at 50 % ran in 1.50 s,
/// the limit escaped (2.97 s re-armed, 2.91 s where no context went). The lower bound holds
/// on a loaded machine (load only slows a run).
#[test]
fn a_context_made_again_gets_its_launches_timed_again() {
    for (what, ops) in [
        ("primary released", &["ctxdestroy", "ctx"][..]),
        ("primary reset", &["reset"][..]),
        // Another context than the controller's: only its events go (`Marks::flush`).
        (
            "created context destroyed",
            &[
                "ctxcreate",
                "kernels:spin_20us:1:200:0",
                "ctxdestroy",
                "ctx",
            ][..],
        ),
    ] {
        let mut all = vec!["init", "ctx", "kernels:spin_20us:1:2000:0", "sync"];
        all.extend_from_slice(ops);
        all.push("kernels:spin_1000us:1-40:1500:0");
        let r = limited(50, &format!("again-{}", what.replace(' ', "-")))
            .ops(&all)
            .run()
            .success();
        let wall = kernels_wall(&r.stdout, 1500);
        // 1.5 s of GPU work at 50 %: about 3 s (a little less with the credit banked).
        assert!(
            wall >= 2_400_000_000,
            "{what}: 1500 launches of 1 ms at 50 % took only {wall} ns\n{}",
            r.stderr
        );
    }
}

/// A stream that waits for a word the program writes only after it has launched its kernels
/// (`cuStreamWaitValue32` on pinned host memory): every mark behind the wait stays unreached
/// until then, and the pace counts the unpriced launches past the oldest as still queued. It
/// must not hold the launches before the write for ever: the rule lapses after
/// `limiter::UNREACHED_MAX` (1 s). Without the lapse the program hung here (killed after 20 s);
/// with it, 300 launches of 1 ms at 50 % take about 1.3 s.
#[test]
fn a_stream_waiting_for_a_later_host_write_never_hangs_the_gate() {
    let p = limited(50, "waitvalue").ops(&[
        "init",
        "ctx",
        "kernels:spin_20us:1:500:0",
        "sync",
        "waitvalue:spin_1000us:1-40:300",
    ]);
    let (ok, out) = run_within(
        p,
        Duration::from_secs(60),
        "a stream waiting for a host write",
    );
    assert!(ok, "{out}");
    assert!(out.contains("OK waitvalue n=300"), "{out}");
}

#[test]
fn a_neighbour_killed_while_it_asked_the_others_off_holds_nobody_for_long() {
    use std::io::{BufRead, BufReader};
    // A process asks the others off the GPU for a clean sample (its node slot says
    // `exclusive`) and dies before it takes the request back: here a slot published once, while
    // a limited process runs, and never again (its heartbeat stands still). The limited process
    // was held until the slot went stale (`token::SLOT_STALE`, 0.5 s: `vgpu doctor`'s 25 %
    // check measured 17 % beside a peer killed so); now for `limiter::HOLD_STILL` (20 ms).
    let dir = node_dir("dead-asker");
    let path = std::path::Path::new(&dir).join("GPU-5a1e0000-0000-4000-8000-000000000000.sched");
    let asker = vgpu_region::node::NodeToken::open(&path).unwrap();
    let mut child = Reaped(
        limited(50, "dead-asker")
            .env("VGPU_NODE_DIR", &dir)
            .ops(&[
                "init",
                "ctx",
                "kernels:spin_1000us:1:20:0",
                "echo:asking",
                "kernels:spin_1000us:1:200:0",
            ])
            .command()
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut out = BufReader::new(child.0.stdout.take().unwrap());
    let mut line = String::new();
    let mut all = String::new();
    while out.read_line(&mut line).unwrap() > 0 {
        if line.starts_with("OK echo") {
            let asking = vgpu_policy::limiter::SlotState {
                exclusive: true,
                active: true,
                ..Default::default()
            };
            asker.publish(&asking, vgpu_region::sys::monotonic_ns());
        }
        all.push_str(&line);
        line.clear();
    }
    drop(asker);
    // 200 launches of 1 ms at 50 % after the first 20 (some of the container's head start
    // left): 0.31-0.32 s seen with the request standing still; 0.75 s before (96413cd).
    let wall = Duration::from_nanos(kernels_wall(&all, 200));
    assert!(
        wall < Duration::from_millis(600),
        "held by a dead neighbour's request: {wall:?}"
    );
}

#[test]
fn kernels_over_ever_new_shapes_are_held_to_the_share() {
    // 300 launches of 1 ms kernels over 132 grid shapes (a framework's kernels over ever new
    // sizes: each a key without a price, and only about two timed at once). 300 ms of GPU work
    // at 25 % is about 1.2 s. Unpriced launches were charged a mean that only priced launches
    // moved, which for these stayed at the first guess: the model's program of ever-new 1 ms
    // kernels ran at 99.8 % of the GPU under a 25 % limit.
    let kernels = "kernels:spin_1000us:1-132:300:0";
    assert_a_quarter_of_300_ms(limited(25, "shapes"), kernels, "new shapes");
}

#[test]
// It failed now and then beside a heavy load on a 2-core machine (about one run in three beside
// a release build, and in CI): the controller's late looks left the 1 ms function's launches
// unbracketed and charged the 10 µs kernels' cost, 1.04 s. The synchronisation after each
// round now charges what they cost beyond that (`Limiter::charge_waits`; docs/COMPUTE.md,
// known gaps: "Expensive kernels never timed").
fn new_grids_of_loaded_functions_among_known_short_kernels_are_held_to_the_share() {
    // A framework's functions stay loaded (the probe's "=NAME"): 100 launches of a 10 µs
    // function over 100 shapes, then 50 of a 1 ms function over 132 grids, twenty times, most
    // of them keys never timed: 1.02 s of GPU work, about 4.1 s at 25 %. (Unpriced launches are
    // charged their function's last timing, else what timed unpriced launches cost; here
    // either holds it: 5.1 s with both, 6.0 s with the second alone.)
    let got = rounds_wall(
        limited(25, "loaded"),
        20,
        [
            "stream:=spin_10us:100:0:0:100",
            "kernels:=spin_1000us:1-132:50:0",
        ],
    );
    assert!(
        got >= Duration::from_millis(3_500),
        "25 % of 1.02 s of GPU work over new grids of loaded functions must take about 4.1 s: {got:?}"
    );
}

#[test]
fn new_functions_after_the_driver_refuses_the_marks_are_held_to_the_share() {
    // The loaded-functions rounds, after the driver began refusing timing events (the
    // simulator from 800 ms on): vgpu turns its marks off, so no bracket ever times the 1 ms
    // function, and its launches over new grids are charged what the 10 µs ones cost. The
    // synchronisation after each round waited for them: what it waited beyond their charge
    // is charged to them, and prices the function's next grids (`Limiter::charge_waits`).
    // Before, 20 rounds (1.02 s of GPU work, about 4.1 s at 25 %) ran in 1.7-2.2 s; now about
    // 5.1.
    let mut warm = vec!["stream:=spin_10us:100:0:0:100"; 5];
    warm.push("sleep:1000");
    let got = rounds_wall_after(
        limited(25, "marks-refused").env("VGPU_SIM_EVENT_FAILS_AFTER_MS", "800"),
        &warm,
        20,
        [
            "stream:=spin_10us:100:0:0:100",
            "kernels:=spin_1000us:1-132:50:0",
        ],
    )
    .saturating_sub(Duration::from_millis(1_000));
    assert!(
        got >= Duration::from_millis(3_300),
        "25 % of 1.02 s of GPU work no bracket timed must take about 4.1 s: {got:?}"
    );
    // Nor charged wildly more (a wait counted twice, or charged whole to each launch).
    assert!(
        got <= Duration::from_millis(12_000),
        "25 % of 1.02 s of GPU work no bracket timed was starved: {got:?}"
    );
}

#[test]
// Each kernels op loads its module anew, so every function is new each op, the 1 ms ones
// included, and a function's first timing often came back before the look that priced its
// launches: it then priced none of them, and they ran on what unpriced launches cost (about
// 10 µs): 306 ms of work in 0.70-0.87 s under 25 %. Now that timing prices the function's
// launches admitted before it (`Limiter::first_unit_price`), wherever it lands.
fn new_long_kernels_right_after_short_known_ones_are_held_to_the_share() {
    // The same new shapes among short kernels (100 of 10 µs before every 50 new ones of 1 ms,
    // six times: 306 ms of GPU work; at 25 % about 1.2 s).
    let got = rounds_wall(
        limited(25, "mixed"),
        6,
        [
            "kernels:spin_10us:1:100:0",
            "kernels:spin_1000us:1-132:50:0",
        ],
    );
    assert!(
        got >= Duration::from_millis(1_040),
        "25 % of 306 ms of GPU work, new shapes among known ones, must take about 1.2 s: {got:?}"
    );
}
