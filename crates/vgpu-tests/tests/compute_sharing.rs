//! Issue 11's targets on the simulated GPU, with real processes and the real library: a light
//! service under its share is not slowed (target 1), a service beside a training container
//! keeps its latency (2), saturating containers add up to their limits (3), the processes of
//! one container share its limit fairly (4). Target 5 (one container alone keeps its accuracy)
//! is `compute.rs`'s `a_limit_slows_every_workload_shape_by_about_its_share`.
//!
//! Each test fails with the limiter before issue 11 (checked by running it with
//! `VGPU_TEST_LIB` pointing at that library: the numbers are in docs/COMPUTE.md). Tolerances are
//! wide enough for a loaded 2-core CI machine and still far from the old limiter's results;
//! the tight numbers come from the deterministic model (`crates/vgpu-model`).
use std::time::Duration;
use vgpu_tests::*;

/// The tests of this file run one at a time: they measure the simulated GPU's timeline in wall
/// time, and running beside each other on a 2-core machine would measure the CPU instead.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A node directory of its own (and a simulated GPU timeline shared by the processes of one
/// test: `VGPU_SIM_STATE`).
fn node(name: &str) -> String {
    fresh_node_dir("share", name)
}

/// A process of a container (`region`) at `percent` on the node `dir`'s simulated GPU.
fn proc_at(percent: u32, dir: &str, region: &std::path::Path) -> Probe {
    Probe::new()
        .region(region)
        .env("CUDA_DEVICE_SM_LIMIT", &percent.to_string())
        .env("VGPU_NODE_DIR", dir)
        .env("VGPU_SIM_STATE", &format!("{dir}/sim.state"))
}

/// A request loop: 4 kernels of 400 µs (1.6 ms of GPU work) every 20 ms, about 8 % of the GPU;
/// five requests warm up first (module load, the controller's start).
const WARM: &str = "requests:spin_400us:4:20000:5";
const REQUESTS: &str = "requests:spin_400us:4:20000:60";

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

#[test]
fn a_light_service_under_its_share_is_not_slowed() {
    let _serial = serial(&SERIAL);
    // Target 1. Before issue 11 a window was charged from its first launch to its drain, host
    // gaps included: at 50 % the service's p50/p99 were 3.6 / 27 ms here, at 25 % 18 / 40 ms
    // (plain: 2.0 / 2.2 ms). Now a window ends when the program's sync shows its queue empty,
    // charged 1.6 ms: the service is always under its share and never waits for a window.
    let plain = Probe::bare()
        .ops(&["init", "ctx", WARM, REQUESTS])
        .run()
        .success();
    let (p50, p90) = (
        plain.nth_value("requests", 1, "p50_ns"),
        plain.nth_value("requests", 1, "p90_ns"),
    );
    for percent in [50, 25] {
        let r = Probe::new()
            .env("CUDA_DEVICE_SM_LIMIT", &percent.to_string())
            .env("VGPU_NODE_DIR", &node(&format!("light{percent}")))
            .ops(&["init", "ctx", WARM, REQUESTS])
            .run()
            .success();
        let (g50, g90, g99) = (
            r.nth_value("requests", 1, "p50_ns"),
            r.nth_value("requests", 1, "p90_ns"),
            r.nth_value("requests", 1, "p99_ns"),
        );
        // The bounds are p50 ≤ 1.1× and p99 ≤ 1.2× plain; on a loaded CI machine the
        // simulator's tail is the CPU's, so the tail is checked at p90, with a margin (still
        // far below the old limiter's).
        assert!(
            ms(g50) <= ms(p50) * 1.1 + 1.0,
            "{percent} %: p50 {:.2} ms against plain {:.2} ms",
            ms(g50),
            ms(p50)
        );
        assert!(
            ms(g90) <= ms(p90) * 1.2 + 4.0,
            "{percent} %: p90 {:.2} ms (p99 {:.2}) against plain {:.2} ms",
            ms(g90),
            ms(g99),
            ms(p90)
        );
    }
}

/// Kernels of 11 ms, a sync after every 4, for `secs` s of wall time: how many completed.
fn busy_op(secs: u64) -> String {
    format!("busy:spin_11000us:{}:4", secs * 1000)
}

/// Percent of the GPU that `n` kernels of 11 ms are over `secs` s.
fn pct(n: u64, secs: u64) -> f64 {
    n as f64 * 11.0 / (secs as f64 * 1000.0) * 100.0
}

#[test]
fn saturating_containers_add_up_to_their_limits() {
    let _serial = serial(&SERIAL);
    // Target 3. Two containers at 30 / 70 with 11 ms kernels synchronised every 4 (the H200's
    // worst case): before issue 11 they got 23.5 / 63.2 % here (H200: 22.1 / 65.5), the 30 %
    // one losing its waits for the node token. Now waits are credited (A1) and the token goes
    // to the earliest due waiter (A2): 27.9 / 67.5 here, 29.1 / 69.8 in the model.
    // Measured after a second of warm-up (the duty cycles learn their budgets).
    let dir = node("pair");
    let secs = 3;
    let (warm, op) = (busy_op(1), busy_op(secs));
    let a = spawn(proc_at(30, &dir, &fresh_region()), &[&warm, &op]);
    let b = spawn(proc_at(70, &dir, &fresh_region()), &[&warm, &op]);
    let (a, b) = (
        pct(result(a, "busy", "n"), secs),
        pct(result(b, "busy", "n"), secs),
    );
    assert!(
        (26.0..=34.0).contains(&a),
        "the 30 % container got {a:.1} % (70 %: {b:.1} %)"
    );
    // The 70 % side is bounded loosely (a loaded 2-core machine slows its launches); the old
    // limiter fails the 30 % bound and the sum.
    assert!(
        (60.0..=74.0).contains(&b),
        "the 70 % container got {b:.1} % (30 %: {a:.1} %)"
    );
    assert!(a + b >= 92.0, "together {:.1} % of the GPU", a + b);
}

#[test]
fn processes_of_one_container_share_its_limit_fairly() {
    let _serial = serial(&SERIAL);
    // Target 4. Two equally busy processes of one container at 50 %: before issue 11 one of
    // them took nearly all of it (H200: 38.7 / 11.0; the model: 50 / 0). Now they share one key
    // (the container's schedule) and ties go to the least recently served (A3). The simulator
    // does not reproduce the old starvation (the old limiter split 23 / 24 here): this test
    // guards the new protocol, and the model's `processes_of_one_container_share_fairly` shows
    // the old failure.
    let dir = node("siblings");
    let region = fresh_region();
    let secs = 3;
    let (warm, op) = (busy_op(1), busy_op(secs));
    let a = spawn(proc_at(50, &dir, &region), &[&warm, &op]);
    let b = spawn(proc_at(50, &dir, &region), &[&warm, &op]);
    let (a, b) = (
        pct(result(a, "busy", "n"), secs),
        pct(result(b, "busy", "n"), secs),
    );
    assert!(
        (a - b).abs() <= 10.0 && (14.0..=30.0).contains(&a) && (14.0..=30.0).contains(&b),
        "two processes of one container at 50 % got {a:.1} / {b:.1} %"
    );
}

/// The request loop (`service`) beside a trainer (`trainer`: 1 ms kernels synchronised every
/// 8, for 2.5 s, started 300 ms before it) on one simulated GPU: the service's p50 and p90 (ms)
/// and the trainer's share of the GPU (%).
fn service_beside_trainer(trainer: Probe, service: Probe) -> (f64, f64, f64) {
    let trainer = spawn(trainer, &["busy:spin_1000us:2500:8"]);
    std::thread::sleep(Duration::from_millis(300));
    let r = service
        .ops(&["init", "ctx", WARM, REQUESTS])
        .run()
        .success();
    // 1 ms kernels over 2.5 s.
    let trained = result(trainer, "busy", "n") as f64 / 2500.0 * 100.0;
    let p50 = ms(r.nth_value("requests", 1, "p50_ns"));
    let p90 = ms(r.nth_value("requests", 1, "p90_ns"));
    (p50, p90, trained)
}

#[test]
fn a_service_beside_a_training_container_keeps_its_latency() {
    let _serial = serial(&SERIAL);
    // Target 2. The request loop at 30 % beside a container at 70 % that keeps the GPU busy
    // with 1 ms kernels synchronised every 8. Before issue 11 the service waited for whole
    // windows of the trainer and for its own schedule (p99 tens of ms); now it is fresh, the
    // trainer yields at once and its windows are paced, so the service waits at most about a
    // drain of PACE_DEPTH.
    let dir = node("beside");
    let (p50, p90, trained) = service_beside_trainer(
        proc_at(70, &dir, &fresh_region()),
        proc_at(30, &dir, &fresh_region()),
    );
    assert!(
        p50 <= 6.0 && p90 <= 12.0,
        "service p50 {p50:.2} / p90 {p90:.2} ms"
    );
    // The trainer waits while the service synchronises: 56-73 % in 18 runs of this library on
    // a 2-core machine, 49 and 56 % in two runs of `.ci/run` while the host stole 12 % of its
    // CPU time (a debug build's launches then fall behind the simulated GPU; the previous
    // library: 62-73 % in 8 runs, unloaded). This bound guards against a starved trainer; its
    // share beside a service is the model's target (t3) and the GPU benchmark's.
    assert!(
        trained >= 45.0,
        "the trainer got {trained:.1} % of the GPU beside the service"
    );
}

#[test]
fn a_service_announces_its_steady_synchronisations_beside_a_trainer() {
    let _serial = serial(&SERIAL);
    // The request loop synchronises once a request, every 20 ms. Beside a busy trainer its
    // slot says, from SYNC_LEAD before each, that the next is due: the hooks count its
    // synchronisations, its controller times the gaps between them. Its trace prints the slot
    // it publishes at every look.
    let dir = node("soon");
    let trainer = spawn(
        proc_at(50, &dir, &fresh_region()),
        &["busy:spin_1000us:2000:8"],
    );
    std::thread::sleep(Duration::from_millis(300));
    let r = proc_at(50, &dir, &fresh_region())
        .env("LIBCUDA_LOG_LEVEL", "5")
        .ops(&["init", "ctx", WARM, REQUESTS])
        .run()
        .success();
    assert!(result(trainer, "busy", "n") > 0);
    // Its looks, and those whose slot says `what`.
    let count = |what: &str| {
        r.stderr
            .lines()
            .filter(|l| l.contains("trace: look") && l.contains(what))
            .count()
    };
    let (looks, soon, heavy) = (count(""), count("soon: true"), count("heavy: true"));
    // From 1 ms before each synchronisation of one every 20 ms: now and then, not always.
    assert!(
        soon > 0 && soon * 4 < looks,
        "{soon} of {looks} looks said a synchronisation was due ({heavy} found it heavy)"
    );
}

#[test]
fn a_trainer_beside_a_service_is_held_on_the_gpu_for_its_synchronisations() {
    let _serial = serial(&SERIAL);
    // The request loop at 30 % beside a trainer at 70 % (1 ms kernels synchronised every 8):
    // while the service synchronises, the trainer's stream waits on the GPU (a queue hold, a
    // wait on a word of pinned memory) and its launching thread goes on; its controller's
    // debug line counts the holds. The service keeps its latency as at the gate.
    let dir = node("queue-hold");
    let mut trainer = Children(vec![
        proc_at(70, &dir, &fresh_region())
            .env("LIBCUDA_LOG_LEVEL", "4")
            .ops(&["init", "ctx", "busy:spin_1000us:2500:8"])
            .command()
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn the trainer"),
    ]);
    std::thread::sleep(Duration::from_millis(300));
    let r = proc_at(30, &dir, &fresh_region())
        .ops(&["init", "ctx", WARM, REQUESTS])
        .run()
        .success();
    let out = trainer
        .0
        .pop()
        .expect("the trainer")
        .wait_with_output()
        .expect("wait for the trainer");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let holds = debug_total(&stderr, " queue holds (");
    assert!(
        holds > 0.0,
        "no queue hold in the trainer's lines:\n{stderr}"
    );
    let p50 = ms(r.nth_value("requests", 1, "p50_ns"));
    let p90 = ms(r.nth_value("requests", 1, "p90_ns"));
    assert!(
        p50 <= 6.0 && p90 <= 12.0,
        "service p50 {p50:.2} / p90 {p90:.2} ms"
    );
    let trained = stdout
        .lines()
        .rfind(|l| l.starts_with("OK busy "))
        .and_then(|l| {
            l.split_whitespace()
                .find_map(|kv| kv.strip_prefix("n="))?
                .parse::<f64>()
                .ok()
        })
        .unwrap_or(0.0)
        / 2500.0
        * 100.0;
    assert!(
        trained >= 45.0,
        "the trainer got {trained:.1} % of the GPU beside the service"
    );
}

/// The sum over a process's debug lines of device 0 (`sm device 0: ...`) of the number written
/// just before `before`.
fn debug_total(stderr: &str, before: &str) -> f64 {
    stderr
        .lines()
        .filter(|l| l.contains("sm device 0:"))
        .filter_map(|l| {
            l.split(before)
                .next()?
                .rsplit(' ')
                .next()?
                .parse::<f64>()
                .ok()
        })
        .sum()
}

/// The synchronisations whose waits device 0's debug lines told apart, foretold or not
/// (`sync waits: N foretold X ms, M not Y ms`), summed.
fn sync_waits_counted(stderr: &str) -> f64 {
    stderr
        .lines()
        .filter(|l| l.contains("sm device 0:"))
        .filter_map(|l| {
            let tail = l.split("sync waits: ").nth(1)?;
            let (fore, rest) = tail.split_once(" foretold ")?;
            let not = rest.split(", ").nth(1)?.split(' ').next()?;
            Some(fore.parse::<f64>().ok()? + not.parse::<f64>().ok()?)
        })
        .sum()
}

/// A process of a container (`region`) with only a task priority (`CUDA_TASK_PRIORITY`, HAMi's
/// 0 high, 1 low) on the node `dir`'s simulated GPU: no compute limit.
fn prioritised(priority: u32, dir: &str, region: &std::path::Path) -> Probe {
    Probe::new()
        .region(region)
        .env("CUDA_TASK_PRIORITY", &priority.to_string())
        .env("VGPU_NODE_DIR", dir)
        .env("VGPU_SIM_STATE", &format!("{dir}/sim.state"))
}

#[test]
fn a_high_priority_service_keeps_its_latency_beside_low_priority_training_without_limits() {
    let _serial = serial(&SERIAL);
    // Issue 23 target 4: priorities alone, no compute limit. The trainer at priority 1 keeps
    // its queue short while the service at 0 is active and admits nothing while it
    // synchronises, so a request waits for about one of the trainer's 1 ms kernels: p50 2.4 /
    // p90 2.8 ms here. Before, an unlimited process's gate stayed open whatever its priority
    // and the service waited behind the trainer's 8 ms batches: p50 5.7 / p90 8.7 ms (and
    // 12-13 / 17 ms with the limiter consulted but the gate still opened).
    let dir = node("priority");
    let (p50, p90, trained) = service_beside_trainer(
        prioritised(1, &dir, &fresh_region()),
        prioritised(0, &dir, &fresh_region()),
    );
    assert!(
        p50 <= 4.0 && p90 <= 6.0,
        "service p50 {p50:.2} / p90 {p90:.2} ms"
    );
    // The trainer keeps what the service leaves (the service is ~8 % of the GPU; 72-91 % in
    // runs here): a guard against a starved trainer, with the margin of the test above.
    assert!(
        trained >= 45.0,
        "the trainer got {trained:.1} % of the GPU beside the service"
    );
}

#[test]
fn a_low_priority_trainer_is_held_for_a_high_priority_services_announced_synchronisations() {
    let _serial = serial(&SERIAL);
    // Target 4 with the announcement: the request loop at priority 0 synchronises every
    // 20 ms, so its slot says from SYNC_LEAD before each that the next is due; the trainer at
    // priority 1 is held then (whatever its share: at its gate, then its queue on the GPU),
    // and its controller's debug line counts the time: "held X ms in a peer's syncs, Y ms for
    // its announced ones, ...".
    held_for_announced_synchronisations("prio-soon", "requests:spin_400us:4:20000:150");
}

#[test]
fn a_service_that_waits_by_copying_its_answer_to_the_host_announces_its_synchronisations() {
    let _serial = serial(&SERIAL);
    // The same service, waiting for each request by a synchronous copy of its answer
    // (cuMemcpyDtoH, as `cudaMemcpy` programs do) instead of a stream synchronisation. Before
    // the copies were hooked the trainer was held 0 ms in the service's syncs and 0 ms for
    // its announced ones: the service never synchronised as far as vgpu knew (now 162-168 and
    // 91-94 ms over the trainer's run, as with the stream synchronisation).
    held_for_announced_synchronisations("prio-copy", "requests:spin_400us:4:20000:150:copy");
}

#[test]
fn a_service_that_waits_by_a_2d_3d_or_array_copy_to_the_host_announces_its_synchronisations() {
    let _serial = serial(&SERIAL);
    // The same by cuMemcpy2D, cuMemcpy3D and cuMemcpy3DPeer (`cudaMemcpy2D` / `3D` /
    // `3DPeer` to the host: their descriptors put the answer's end in host memory) and by
    // cuMemcpyAtoH out of an array: they wait like cuMemcpyDtoH. Before they were hooked the
    // trainer was held 0 ms in the service's syncs and 0 ms for its announced ones.
    for mode in ["copy2d", "copy3d", "copy3dpeer", "copyatoh"] {
        held_for_announced_synchronisations(
            &format!("prio-{mode}"),
            &format!("requests:spin_400us:4:20000:150:{mode}"),
        );
    }
}

#[test]
fn a_unified_copy_counts_as_a_synchronisation_where_an_end_is_host_memory() {
    let _serial = serial(&SERIAL);
    // `cudaMemcpy` with `cudaMemcpyDefault` reaches cuMemcpy (unified addresses): on the H100
    // a service that waited for its answers so was seen to synchronise 0 times a second
    // against 192-196 by cudaMemcpy with a direction (run 144). Where the driver says an end
    // is host memory it waits like cuMemcpyDtoH, and counts; between two device allocations
    // it returns at once, and does not (each request here then synchronises its stream).
    // The same for cuMemcpy2D with both ends `CU_MEMORYTYPE_UNIFIED` (`cudaMemcpy2D` with
    // `cudaMemcpyDefault`): before the unified ends were resolved it counted 0.
    for mode in [
        "copydefault",
        "copyd2d",
        "copy2ddefault",
        "copy2dd2d",
        "copy",
    ] {
        let dir = node(&format!("unified-{mode}"));
        let run = proc_at(50, &dir, &fresh_region())
            .env("LIBCUDA_LOG_LEVEL", "4")
            .ops(&[
                "init",
                "ctx",
                &format!("requests:spin_400us:4:20000:150:{mode}"),
            ])
            .run()
            .success();
        let syncs = debug_total(&run.stderr, " syncs (");
        // The debug lines cover the whole seconds of the 3 s run (the last part-second is
        // not printed), and each request synchronises once: about 50 a line, whatever the
        // lines (a copy counted besides its stream synchronisation would make ~100 a line; a
        // loop that fell behind catches up, so a line may run over 50 but the mean hardly).
        #[allow(clippy::cast_precision_loss)]
        let lines = run
            .stderr
            .lines()
            .filter(|l| l.contains("sm device 0:") && l.contains(" syncs ("))
            .count() as f64;
        assert!(
            lines >= 1.0 && syncs <= 1.2 * 150.0 && (25.0..=80.0).contains(&(syncs / lines)),
            "{mode}: {syncs} synchronisations counted over {lines} lines for 150 requests:\n{}",
            run.stderr
        );
        // Each one's wait is told apart, foretold or not (`sync waits: N foretold X ms, M not
        // Y ms`): about one a synchronisation (one may end in the next, unprinted, second).
        let told = sync_waits_counted(&run.stderr);
        assert!(
            (0.8 * syncs - 2.0..=syncs + 2.0).contains(&told),
            "{mode}: {told} waits told apart for {syncs} synchronisations:\n{}",
            run.stderr
        );
    }
}

/// A service running `requests` at priority 0 beside a trainer at priority 1 on the node
/// `name`: the trainer's controller counts time held in the service's synchronisations and for
/// its announced ones.
fn held_for_announced_synchronisations(name: &str, requests: &str) {
    let dir = node(name);
    let service = Reaped(
        prioritised(0, &dir, &fresh_region())
            .ops(&["init", "ctx", WARM, requests])
            .command()
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn the service"),
    );
    std::thread::sleep(Duration::from_millis(300));
    let trainer = prioritised(1, &dir, &fresh_region())
        .env("LIBCUDA_LOG_LEVEL", "4")
        .ops(&["init", "ctx", "busy:spin_1000us:2000:8"])
        .run()
        .success();
    drop(service);
    let syncs = debug_total(&trainer.stderr, " ms in a peer's syncs");
    let announced = debug_total(&trainer.stderr, " ms for its announced ones");
    // About 1 ms before each of 50 synchronisations a second (less while the service warms
    // up and its rhythm is learned), and the synchronisations themselves.
    assert!(
        announced > 0.0 && syncs > 0.0,
        "held {syncs:.1} ms in the service's syncs, {announced:.1} ms for its announced ones:\n{}",
        trainer.stderr
    );
}

#[test]
fn a_paced_container_prices_its_launches_by_its_marks() {
    let _serial = serial(&SERIAL);
    // Beside the service the trainer's launches are priced by its marks: the first launch of
    // its kernel is timed on its own (a bracket of timing events on the simulated GPU), its
    // held launches mark its queue, and its price settles at what the kernel costs (300 µs
    // here, far from the limiter's first guess of 1 ms). The controller's debug line says so.
    let dir = node("marks");
    let trainer = proc_at(70, &dir, &fresh_region())
        .env("LIBCUDA_LOG_LEVEL", "4")
        .ops(&["init", "ctx", "busy:spin_300us:1500:8"])
        .command()
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the trainer");
    std::thread::sleep(Duration::from_millis(300));
    proc_at(30, &dir, &fresh_region())
        .ops(&["init", "ctx", WARM, REQUESTS])
        .run()
        .success();
    let out = trainer.wait_with_output().expect("the trainer");
    assert!(out.status.success());
    let log = String::from_utf8_lossy(&out.stderr);
    // The controller's line once a second: "..., 1 kernels priced, mean 1000.3 us, vt ...".
    let priced: Vec<(u64, f64)> = log
        .lines()
        .filter(|l| l.contains("sm device 0:"))
        .filter_map(|l| {
            let kernels = l
                .split(" kernels priced")
                .next()?
                .rsplit(' ')
                .next()?
                .parse()
                .ok()?;
            let mean = l
                .split(" us, vt")
                .next()?
                .rsplit(' ')
                .next()?
                .parse()
                .ok()?;
            Some((kernels, mean))
        })
        .collect();
    let &(kernels, mean) = priced.last().expect("the controller's report lines");
    assert_eq!(kernels, 1, "one kernel, priced: {log}");
    assert!(
        (240.0..=400.0).contains(&mean),
        "a 300 µs kernel priced at {mean:.1} us: {log}"
    );
}

#[test]
fn a_container_arriving_beside_an_armed_service_gets_its_share() {
    let _serial = serial(&SERIAL);
    // A service alone and under its share has its next window opened before each request
    // (armed), holding the node token while it waits for the request, up to 100 ms. A container
    // that arrives must not find the token held idle: an armed window is given back as soon as
    // another process waits, and none is armed while one does. Here the service (50 %, 1.6 ms
    // every 80 ms) is alone for 400 ms, then a batch container (50 %, 1 ms kernels synchronised
    // every 8) runs for 1 s beside it.
    let dir = node("armed");
    let service = spawn(
        proc_at(50, &dir, &fresh_region()),
        &[WARM, "requests:spin_400us:4:80000:20"],
    );
    std::thread::sleep(Duration::from_millis(400));
    let batch = proc_at(50, &dir, &fresh_region())
        .ops(&["init", "ctx", "busy:spin_1000us:1000:8"])
        .run()
        .success();
    // 1 ms kernels over 1 s.
    let got = batch.value("busy", "n") as f64 / 1000.0 * 100.0;
    eprintln!("the batch got {got:.1} % of the GPU");
    assert!(
        got >= 42.0,
        "a container arriving beside an armed service got {got:.1} % of the GPU"
    );
    assert_eq!(result(service, "requests", "n"), 20);
}

#[test]
fn a_heartbeat_in_the_future_does_not_stop_a_limited_container() {
    let _serial = serial(&SERIAL);
    // Issue 13 item 2: a node file whose holder word names a process that is gone, with a
    // heartbeat far in the future, hung every SM-limited launch (its age computed as 0). Now a
    // beat ahead of now counts as stale.
    let dir = node("future");
    let region = fresh_region();
    // Create the node file (the simulator's GPU 0), then corrupt it.
    proc_at(50, &dir, &region)
        .ops(&["init", "ctx", "kernels:spin_100us:1:10:0"])
        .run()
        .success();
    let file = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "sched"))
        .expect("a node file");
    let mut bytes = std::fs::read(&file).unwrap();
    let future = vgpu_region::sys::monotonic_ns() + 3_600_000_000_000;
    bytes[8..16].copy_from_slice(&0xdead_u64.to_ne_bytes());
    bytes[16..24].copy_from_slice(&future.to_ne_bytes());
    std::fs::write(&file, &bytes).unwrap();
    let mut c = spawn(
        proc_at(50, &dir, &fresh_region()),
        &["kernels:spin_1000us:1:20:0"],
    );
    let t0 = std::time::Instant::now();
    while c.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(10) {
            let _ = c.kill();
            panic!("an SM-limited launch hung behind a heartbeat in the future");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(result(c, "kernels", "n"), 20);
}
