//! HAMi's node-monitor protocol as HAMi's monitor sees it (issue 12, part 1): real processes
//! under `libvgpu.so` against the simulated driver, their region read and written by the model
//! of HAMi's monitor (`vgpu-hami-model`: the same offsets, the same `Observe()` decisions, the
//! same per-process sums as HAMi's collector). docs/HAMI.md lists every variable and field.
use std::os::unix::fs::FileExt;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use vgpu_hami_model::{Container, Monitor, ProcUsage, write_hami_core_region};
use vgpu_tests::*;

/// The simulated GPU 0's UUID, as NVML spells it.
const SIM_UUID: &str = "GPU-5a1e0000-0000-4000-8000-000000000000";

/// Lets a holding probe finish normally (`exit` after its last op) and waits for it.
fn finish(mut child: Child) {
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
}

fn pid(child: &Child) -> i32 {
    i32::try_from(child.id()).unwrap()
}

#[test]
fn the_task_priority_is_written_into_the_region_clamped_with_one_warning() {
    for (given, published, warned) in [("0", 0, false), ("1", 1, false), ("-3", 0, true)] {
        let region = fresh_region();
        let r = Probe::new()
            .region(&region)
            .limit("1g")
            .env("CUDA_TASK_PRIORITY", given)
            .ops(&["init", "ctx"])
            .run()
            .success();
        let c = Container::open(&region).unwrap();
        assert_eq!(
            c.priority().unwrap(),
            published,
            "CUDA_TASK_PRIORITY={given}"
        );
        let warnings: Vec<&str> = r
            .stderr
            .lines()
            .filter(|l| l.contains("CUDA_TASK_PRIORITY"))
            .collect();
        assert_eq!(warnings.len(), usize::from(warned), "{}", r.stderr);
    }
}

#[test]
fn a_task_priority_alone_puts_the_process_under_the_monitor() {
    // HAMi's webhook injects CUDA_TASK_PRIORITY; with no limit at all, vgpu still attaches to
    // the container's region (so the monitor sees the process and its priority), and the
    // program runs at full speed (the gate is at 100 %).
    let region = fresh_region();
    let (child, lines) = holding(
        Probe::new()
            .region(&region)
            .env("CUDA_TASK_PRIORITY", "0")
            .env("VGPU_NODE_DIR", &own_temp_dir().display().to_string()),
        &["init", "ctx", "kernels:spin_1000us:1:50:0"],
    );
    assert!(
        lines.iter().any(|l| l.starts_with("OK kernels n=50")),
        "{lines:?}"
    );
    let c = Container::open(&region).unwrap();
    assert_eq!(c.priority().unwrap(), 0);
    let procs = c.processes(0).unwrap();
    assert_eq!(procs.len(), 1, "{procs:?}");
    assert_eq!(procs[0].pid, pid(&child));
    finish(child);
}

#[test]
fn context_memory_is_published_as_context_size_apart_from_buffers() {
    let region = fresh_region();
    let (child, _) = holding(
        Probe::new().region(&region).limit("2g"),
        &["init", "ctx", "alloc:100m", "ctxcreate", "alloc:50m"],
    );
    let c = Container::open(&region).unwrap();
    let procs = c.processes(0).unwrap();
    assert_eq!(
        procs,
        vec![ProcUsage {
            pid: pid(&child),
            // The primary context and the created one.
            context: 2 * SIM_CTX,
            module: 0,
            buffer: 150 * MIB,
            total: 2 * SIM_CTX + 150 * MIB,
            sm_util: 0,
        }]
    );
    // vgpu's own view counts the contexts in the budget, as before.
    let r = Probe::new()
        .region(&region)
        .limit("2g")
        .ops(&["init", "ctx", "meminfo"])
        .run()
        .success();
    assert_eq!(
        r.value("meminfo", "free"),
        2 * GIB - 3 * SIM_CTX - 150 * MIB
    );
    finish(child);
}

#[test]
fn a_destroyed_context_leaves_context_size() {
    let region = fresh_region();
    let (child, lines) = holding(
        Probe::new().region(&region).limit("2g"),
        &["init", "ctx", "ctxcreate", "ctxdestroy", "alloc:10m"],
    );
    assert!(
        lines.iter().any(|l| l.starts_with("OK ctxdestroy")),
        "{lines:?}"
    );
    let procs = Container::open(&region).unwrap().processes(0).unwrap();
    assert_eq!(procs.len(), 1, "{procs:?}");
    assert_eq!(
        (procs[0].context, procs[0].buffer, procs[0].total),
        (SIM_CTX, 10 * MIB, SIM_CTX + 10 * MIB)
    );
    finish(child);
}

#[test]
fn a_process_that_exits_normally_clears_its_hami_slot_at_once() {
    // No reaper runs here (no other process of the container, nothing opens it with vgpu's
    // tools): only the exit handler can clear the slot.
    let region = fresh_region();
    let r = Probe::new()
        .region(&region)
        .limit("2g")
        .ops(&["init", "ctx", "alloc:100m", "managed:10m", "exit:0"])
        .run();
    assert!(r.status.success(), "{r:?}");
    let c = Container::open(&region).unwrap();
    assert_eq!(c.processes(0).unwrap(), vec![], "HAMi's collector");
    assert_eq!(c.volcano_used_total(0).unwrap(), 0, "Volcano's sum");
    // And the container's budget is whole again, without a reap.
    let v = vgpu_region::Region::open_existing(&vgpu_region::Location::shared(&region)).unwrap();
    let s = v.snapshot();
    assert_eq!(s.devices[0].used, 0);
    assert!(s.processes.is_empty(), "{:?}", s.processes);
}

#[test]
fn hooks_called_after_the_exit_handler_keep_the_budget_right() {
    // The program's own teardown runs after vgpu's exit handler (registered before `cuInit`,
    // as the CUDA runtime's is): its frees find the slot gone and change nothing.
    let region = fresh_region();
    let r = Probe::new()
        .region(&region)
        .limit("2g")
        .ops(&["atexit:0", "init", "ctx", "alloc:100m", "alloc:50m"])
        .run()
        .success();
    assert_eq!(r.nth_value("atexit", 1, "freed"), 2, "{}", r.stdout);
    assert_eq!(r.nth_value("atexit", 1, "free_error"), 0, "{}", r.stdout);
    assert_eq!(r.nth_value("atexit", 1, "release"), 0, "{}", r.stdout);
    let v = vgpu_region::Region::open_existing(&vgpu_region::Location::shared(&region)).unwrap();
    assert_eq!(v.snapshot().devices[0].used, 0);
    assert_eq!(
        Container::open(&region).unwrap().processes(0).unwrap(),
        vec![]
    );
    // An allocation made after the handler (freed again, then the primary context released)
    // is checked against what the container has left and recorded nowhere: the process does
    // not come back in HAMi's metrics.
    let region = fresh_region();
    let (other, _) = holding(
        Probe::new().region(&region).limit("2g"),
        &["init", "ctx", "alloc:1g"],
    );
    let late = |size: &str| {
        let r = Probe::new()
            .region(&region)
            .limit("2g")
            .ops(&[&format!("atexit:{size}"), "init", "ctx", "alloc:100m"])
            .run()
            .success();
        assert_eq!(r.nth_value("atexit", 1, "freed"), 1, "{}", r.stdout);
        assert_eq!(r.nth_value("atexit", 1, "release"), 0, "{}", r.stdout);
        r.nth_value("atexit", 1, "alloc")
    };
    // 2 GiB − 1 GiB − one context: 64 MiB fits, 800 MiB does not.
    assert_eq!(late("64m"), 0);
    assert_eq!(late("800m"), 2);
    let c = Container::open(&region).unwrap();
    let procs = c.processes(0).unwrap();
    assert_eq!(procs.len(), 1, "only the holding process: {procs:?}");
    assert_eq!(procs[0].pid, pid(&other));
    let v = vgpu_region::Region::open_existing(&vgpu_region::Location::shared(&region)).unwrap();
    assert_eq!(v.snapshot().devices[0].used, SIM_CTX + GIB);
    finish(other);
}

#[test]
fn what_an_exiting_process_still_holds_counts_against_its_allocations_at_exit() {
    // A static destructor allocates 1 GiB while the process still holds its context and 1 GiB
    // under a 2 GiB limit: refused (before: granted, the exit handler having taken the
    // process's memory out of the budget; six in a row went through). A late allocation that
    // fits what the process and the container hold is granted, and neither shows afterwards.
    let held = |size: &str| {
        let region = fresh_region();
        let r = Probe::new()
            .region(&region)
            .limit("2g")
            .ops(&[&format!("atexit_held:{size}"), "init", "ctx", "alloc:1g"])
            .run()
            .success();
        assert_eq!(r.nth_value("atexit", 1, "free_error"), 0, "{}", r.stdout);
        let v =
            vgpu_region::Region::open_existing(&vgpu_region::Location::shared(&region)).unwrap();
        assert_eq!(v.snapshot().devices[0].used, 0);
        r.nth_value("atexit", 1, "alloc")
    };
    assert_eq!(held("1g"), 2);
    assert_eq!(held("600m"), 0);
}

#[test]
fn a_killed_process_is_cleared_by_the_next_reap_not_at_exit() {
    let region = fresh_region();
    let r = Probe::new()
        .region(&region)
        .limit("2g")
        .ops(&["init", "ctx", "alloc:100m", "kill"])
        .run();
    assert!(!r.status.success());
    let c = Container::open(&region).unwrap();
    assert_eq!(c.processes(0).unwrap().len(), 1, "no exit handler ran");
    let v = vgpu_region::Region::open_existing(&vgpu_region::Location::shared(&region)).unwrap();
    assert_eq!(v.reap_dead(), 1);
    assert_eq!(c.processes(0).unwrap(), vec![]);
    assert_eq!(c.volcano_used_total(0).unwrap(), 0);
}

#[test]
fn sm_utilisation_is_published_from_the_measured_gpu_time() {
    // A container at 50 % runs 1.5 s of kernels (about 3 s of wall time); HAMi's collector
    // reads `deviceUtil[0].smUtil` of its process while it runs.
    let region = fresh_region();
    let dir = own_temp_dir().join("node-smutil");
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = Probe::new()
        .region(&region)
        .env("CUDA_DEVICE_SM_LIMIT", "50")
        .env("VGPU_NODE_DIR", &dir.display().to_string())
        .ops(&["init", "ctx", "kernels:spin_1000us:1:1500:0"])
        .command()
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut seen = Vec::new();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() && t0.elapsed() < Duration::from_secs(30) {
        if let Ok(c) = Container::open(&region)
            && let Ok(p) = c.processes(0)
            && let Some(u) = p.first().map(|p| p.sm_util)
            && u > 0
        {
            seen.push(u);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    assert!(child.wait().unwrap().success());
    assert!(!seen.is_empty(), "smUtil stayed 0 while kernels ran");
    assert!(seen.iter().all(|&u| u <= 100), "{seen:?}");
    assert!(
        seen.iter().any(|&u| (25..=75).contains(&u)),
        "a container at 50 % should read about 50: {seen:?}"
    );
}

#[test]
fn without_measured_gpu_time_sm_utilisation_stays_zero() {
    let region = fresh_region();
    let (child, _) = holding(
        Probe::new().region(&region).limit("1g"),
        &["init", "ctx", "kernels:spin_1000us:1:300:0", "sleep:1300"],
    );
    let procs = Container::open(&region).unwrap().processes(0).unwrap();
    assert_eq!(procs.len(), 1);
    assert_eq!(procs[0].sm_util, 0);
    finish(child);
}

#[test]
fn mixed_node_a_hami_core_container_and_a_vgpu_one_in_one_monitor_round() {
    // One GPU: a vgpu container of priority 0 (serving) and a HAMi-core container of priority
    // 1 (training), both active at first (a new region starts with recentKernel 2).
    let dir = tempdir();
    let hami_core = dir.join("hami-core.cache");
    let region = fresh_region();
    let (child, _) = holding(
        Probe::new()
            .region(&region)
            .limit("1g")
            .env("CUDA_TASK_PRIORITY", "0"),
        &["init", "ctx", "alloc:64m"],
    );
    write_hami_core_region(&hami_core, SIM_UUID, 1).unwrap();
    let mut m = Monitor::new();
    m.watch(&region).unwrap();
    m.watch(&hami_core).unwrap();
    let [vgpu, hami] = &m.containers() else {
        unreachable!()
    };
    // The simulator has two GPUs; the HAMi-core container shares the first.
    assert_eq!(vgpu.uuids().unwrap()[0], (0, SIM_UUID.to_string()));
    let r = m.observe().unwrap();
    // The higher-priority vgpu container runs on; the HAMi-core one is blocked and throttles.
    assert!(r[0].active && r[1].active);
    assert_eq!((r[0].recent_kernel, r[0].utilization_switch), (1, 0));
    assert_eq!((r[1].recent_kernel, r[1].utilization_switch), (-1, 1));
    // The collector reads vgpu's process as it reads HAMi-core's.
    let procs = vgpu.processes(0).unwrap();
    assert_eq!(procs.len(), 1);
    assert_eq!(
        (procs[0].pid, procs[0].context, procs[0].buffer),
        (pid(&child), SIM_CTX, 64 * MIB)
    );
    assert_eq!(hami.processes(0).unwrap(), vec![]);
    // Next round: nobody launched; the vgpu container goes idle and the HAMi-core one is
    // unblocked.
    let r = m.observe().unwrap();
    assert!(!r[0].active);
    assert_eq!((r[1].recent_kernel, r[1].utilization_switch), (0, 0));
    assert_eq!(hami.recent_kernel().unwrap(), 0);
    // The other way round: the vgpu container at the low priority is the one blocked, and the
    // monitor's block stands in its region.
    finish(child);
    let low = fresh_region();
    let (child, _) = holding(
        Probe::new()
            .region(&low)
            .limit("1g")
            .env("CUDA_TASK_PRIORITY", "1"),
        &["init", "ctx"],
    );
    let high = dir.join("hami-core-high.cache");
    write_hami_core_region(&high, SIM_UUID, 0).unwrap();
    let mut m = Monitor::new();
    m.watch(&low).unwrap();
    m.watch(&high).unwrap();
    let r = m.observe().unwrap();
    assert_eq!((r[0].recent_kernel, r[0].utilization_switch), (-1, 1));
    assert_eq!((r[1].recent_kernel, r[1].utilization_switch), (1, 0));
    let v = vgpu_region::Region::open_existing(&vgpu_region::Location::shared(&low)).unwrap();
    assert!(v.launch_blocked());
    finish(child);
}

#[test]
fn a_hami_core_file_at_the_cache_path_is_adopted_and_its_processes_share_one_budget() {
    // The node switched from HAMi-core to vgpu while the pod lived: the container's cache path
    // already holds HAMi-core's file. Two vgpu processes under 2 GiB cannot together pass it.
    let dir = tempdir();
    let path = dir.join("vgpu.cache");
    write_hami_core_region(&path, SIM_UUID, 1).unwrap();
    let p = || Probe::new().region(&path).limit("2g");
    let (a, la) = holding(p(), &["init", "ctx", "alloc:1200m"]);
    assert!(la.iter().any(|l| l.starts_with("OK alloc")), "{la:?}");
    let r = p()
        .ops(&["init", "ctx", "meminfo", "alloc:1200m"])
        .run()
        .success();
    assert_eq!(
        r.value("meminfo", "free"),
        2 * GIB - 2 * SIM_CTX - 1200 * MIB
    );
    assert_eq!(r.line("alloc")[..3], ["ERR", "alloc", "2"], "{}", r.stdout);
    // HAMi's monitor still reads the file in place (never recreated), with A in it.
    let c = Container::open(&path).unwrap();
    let procs = c.processes(0).unwrap();
    assert_eq!(procs.len(), 1, "{procs:?}");
    assert_eq!(procs[0].total, SIM_CTX + 1200 * MIB);
    finish(a);
}

#[test]
fn limits_written_into_hamis_view_by_another_tool_are_ignored() {
    // vgpu never reads its published view back: `limit[]` / `sm_limit[]` written by an outside
    // tool change nothing. `vgpu limit` (Region::set_limit) changes the limit, and the view.
    // One process of the container stays alive throughout: a region that nobody uses takes
    // the next process's limits, so only a live container shows which limit is in force.
    let region = fresh_region();
    let (mut holder, _) = holding(Probe::new().region(&region).limit("4g"), &["init", "ctx"]);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&region)
        .unwrap();
    f.write_all_at(&GIB.to_ne_bytes(), 1600).unwrap();
    f.write_all_at(&10u64.to_ne_bytes(), 1728).unwrap();
    let alloc2g = || {
        Probe::new()
            .region(&region)
            .limit("4g")
            .ops(&["init", "ctx", "alloc:2g"])
            .run()
            .success()
    };
    let outside_ignored = alloc2g().ok("alloc");
    let v = vgpu_region::Region::open_existing(&vgpu_region::Location::shared(&region)).unwrap();
    let before = v.snapshot().devices[0].clone();
    v.set_limit(SIM_UUID, Some(GIB)).unwrap();
    let refused = !alloc2g().ok("alloc");
    let published = Container::open(&region).unwrap().limits(0).unwrap().0;
    drop(holder.stdin.take());
    let _ = holder.wait();
    assert!(outside_ignored, "the outside 1 GiB is not enforced");
    assert_eq!(before.limit, Some(4 * GIB));
    assert_eq!(before.sm_limit, None);
    assert!(refused, "vgpu limit is enforced");
    assert_eq!(published, GIB, "and published");
}

#[test]
fn log_levels_follow_hami_cores_meanings() {
    let denial = |level: &str| {
        let r = Probe::new()
            .limit("1g")
            .env("LIBCUDA_LOG_LEVEL", level)
            .env("CUDA_OVERSUBSCRIBE", "true")
            .ops(&["init", "ctx", "alloc:2g"])
            .run()
            .success();
        assert_eq!(r.line("alloc")[..3], ["ERR", "alloc", "2"]);
        r.stderr
    };
    // 0: errors only.
    assert_eq!(denial("0"), "");
    // 1 and 2 (the default): errors, warnings and messages: the first denial.
    for level in ["1", "2"] {
        let e = denial(level);
        assert_eq!(e.lines().count(), 1, "level {level}: {e}");
        assert!(e.contains("CUDA_DEVICE_MEMORY_LIMIT"), "level {level}: {e}");
    }
    // 3 adds info, such as what CUDA_OVERSUBSCRIBE means here.
    let e = denial("3");
    assert!(
        e.lines()
            .any(|l| l.contains("CUDA_OVERSUBSCRIBE=true") && l.contains("limit holds")),
        "{e}"
    );
    assert!(!denial("2").contains("CUDA_OVERSUBSCRIBE"));
    // An error is printed at 0: a region file vgpu cannot use.
    let dir = tempdir();
    let bad = dir.join("bad.cache");
    std::fs::write(&bad, [7u8; 100]).unwrap();
    let r = Probe::new()
        .region(&bad)
        .limit("1g")
        .env("LIBCUDA_LOG_LEVEL", "0")
        .ops(&["init", "ctx"])
        .run();
    assert!(r.stderr.contains("bad.cache"), "{r:?}");
}

#[test]
fn cuda_oversubscribe_leaves_the_limit_in_force() {
    let r = Probe::new()
        .limit("1g")
        .env("CUDA_OVERSUBSCRIBE", "true")
        .env("ACTIVE_OOM_KILLER", "true")
        .ops(&["init", "ctx", "alloc:2g", "alloc:100m"])
        .run()
        .success();
    assert_eq!(r.line("alloc")[..3], ["ERR", "alloc", "2"]);
    assert!(r.nth("alloc", 1)[0] == "OK", "{}", r.stdout);
}

/// A fresh directory of its own (HAMi mounts one per container).
fn tempdir() -> std::path::PathBuf {
    let p = fresh_region().with_extension("d");
    std::fs::create_dir_all(&p).unwrap();
    p
}

#[test]
fn the_monitors_block_holds_back_only_what_hami_core_would() {
    // HAMi's monitor blocks a low-priority container by writing `recentKernel` -1 in its
    // region. HAMi-core obeys that only under an SM limit of 1-99 % with the utilisation switch
    // on; a container without a compute limit (HAMi's webhook sets CUDA_TASK_PRIORITY whenever
    // a pod has a priority, and CUDA_DEVICE_SM_LIMIT=0 without `gpucores`) runs on. Before,
    // vgpu held any container with a priority back: it never ran while the block stood.
    const RECENT_KERNEL: u64 = 2_008_904;
    let timed = |env: &[(&str, &str)]| -> Duration {
        let region = fresh_region();
        Probe::new()
            .region(&region)
            .env("CUDA_TASK_PRIORITY", "1")
            .ops(&["init", "ctx"])
            .run()
            .success();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&region)
            .unwrap();
        file.write_all_at(&(-1i32).to_le_bytes(), RECENT_KERNEL)
            .unwrap();
        let mut p = Probe::new().region(&region).env("CUDA_TASK_PRIORITY", "1");
        for (k, v) in env {
            p = p.env(k, v);
        }
        let t0 = Instant::now();
        let mut child = Reaped(
            p.ops(&["init", "ctx", "kernels:spin_1000us:1:20:1"])
                .command()
                .stdout(Stdio::null())
                .spawn()
                .unwrap(),
        );
        // The monitor lifts the block after 2 s.
        let mut lifted = false;
        loop {
            if child.0.try_wait().unwrap().is_some() {
                return t0.elapsed();
            }
            if !lifted && t0.elapsed() > Duration::from_secs(2) {
                file.write_all_at(&0i32.to_le_bytes(), RECENT_KERNEL)
                    .unwrap();
                lifted = true;
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "never ran");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let unlimited = timed(&[]);
    let unlimited_zero = timed(&[("CUDA_DEVICE_SM_LIMIT", "0")]);
    let disabled = timed(&[
        ("CUDA_DEVICE_SM_LIMIT", "50"),
        ("GPU_CORE_UTILIZATION_POLICY", "disable"),
    ]);
    let limited = timed(&[
        ("CUDA_DEVICE_SM_LIMIT", "50"),
        ("GPU_CORE_UTILIZATION_POLICY", "force"),
    ]);
    for (what, t) in [
        ("no limit", unlimited),
        ("limit 0", unlimited_zero),
        ("policy disable", disabled),
    ] {
        assert!(t < Duration::from_millis(1800), "{what}: {t:?}: held back");
    }
    assert!(
        limited >= Duration::from_secs(2),
        "limited: {limited:?}: not held back"
    );
}

/// HAMi-core's `shrreg_tool --suspend` sends SIGUSR2 to every process in the region's HAMi
/// slots and waits until each slot's `status` reads 2; `--resume` sends SIGUSR1 and waits
/// for a 1. A vgpu process answers both and lives on (before: the signals' default action
/// ended it, and its slot never answered).
#[test]
fn hami_cores_suspend_and_resume_signals_are_answered_not_fatal() {
    let region = fresh_region();
    let mut child = Probe::new()
        .region(&region)
        .limit("1g")
        .ops(&["init", "ctx", "alloc:16m", "hold", "alloc:16m"])
        .command()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("OK hold") {
        line.clear();
        assert!(std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0);
    }
    let c = Container::open(&region).unwrap();
    let me = pid(&child);
    let reaches = |want: i32| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while c.status_of(me).unwrap() != Some(want) {
            assert!(Instant::now() < deadline, "status {:?}", c.status_of(me));
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    reaches(1);
    for (sig, want) in [(libc::SIGUSR2, 2), (libc::SIGUSR1, 1)] {
        // SAFETY: a signal to our own child, which is alive (it holds).
        assert_eq!(unsafe { libc::kill(me, sig) }, 0);
        reaches(want);
        assert!(child.try_wait().unwrap().is_none(), "signal {sig} ended it");
    }
    let mut rest = String::new();
    drop(child.stdin.take());
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(child.wait().unwrap().success());
    assert!(rest.contains("OK alloc"), "{rest}");
}
