//! HAMi's launch-side protocol on the simulated GPU, against the model of HAMi's node monitor
//! (`vgpu-hami-model`, which writes `recent_kernel` and `utilization_switch` as HAMi's
//! `Observe()` does): a container the monitor blocks opens no window until it is unblocked; the
//! controller marks launches once per window (the monitor sees the container active) and
//! refreshes `last_kernel_time`; under `GPU_CORE_UTILIZATION_POLICY=default` a container the
//! monitor finds alone on its GPU runs unthrottled, under `force` it stays at its limit.
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use vgpu_hami_model::Monitor;
use vgpu_region::{Location, Region};
use vgpu_tests::*;

static SERIAL: Mutex<()> = Mutex::new(());

fn node(name: &str) -> String {
    let d = own_temp_dir().join(format!("hami-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d.display().to_string()
}

fn container(dir: &str, region: &Path, percent: u32) -> Probe {
    Probe::new()
        .region(region)
        .env("CUDA_DEVICE_SM_LIMIT", &percent.to_string())
        .env("VGPU_NODE_DIR", dir)
        .env("VGPU_SIM_STATE", &format!("{dir}/sim.state"))
}

/// A region created by a short run, with its task priority set (as `CUDA_TASK_PRIORITY` does).
fn region_with_priority(dir: &str, priority: i32, percent: u32) -> PathBuf {
    let region = fresh_region();
    container(dir, &region, percent)
        .ops(&["init", "ctx", "kernels:spin_10us:1:1:0"])
        .run()
        .success();
    Region::open_existing(&Location::shared(&region))
        .unwrap()
        .set_priority(priority);
    region
}

fn n_of(c: Child, op: &str) -> u64 {
    result(c, op, "n")
}

/// Launches the region at `path` has reported (its windows' counts).
fn launches(path: &Path) -> u64 {
    let r = Region::open_existing(&Location::shared(path)).unwrap();
    r.snapshot().devices[0].launches
}

/// Runs the monitor model over `regions` every `every` until `stop`; returns the rounds'
/// `recent_kernel` values of each region.
fn monitor(
    regions: Vec<PathBuf>,
    every: Duration,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<Vec<i32>>> {
    std::thread::spawn(move || {
        let mut m = Monitor::new();
        for r in &regions {
            m.watch(r).unwrap();
        }
        let mut seen = vec![Vec::new(); regions.len()];
        while !stop.load(Ordering::Acquire) {
            for (i, d) in m.observe().unwrap().into_iter().enumerate() {
                seen[i].push(d.recent_kernel);
            }
            std::thread::sleep(every);
        }
        seen
    })
}

#[test]
fn a_blocked_low_priority_container_waits_and_resumes() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = node("block");
    let high = region_with_priority(&dir, 0, 50);
    let low = region_with_priority(&dir, 1, 50);
    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let mon = monitor(
        vec![high.clone(), low.clone()],
        // Rounds much longer than a window (HAMi's are 5 s): a container that launches is
        // marked in every round.
        Duration::from_millis(300),
        stop.clone(),
    );
    // The low-priority container runs for 4 s; the high one from 0.5 s to 2.5 s. (`force`:
    // the containers stay at their limits when the monitor finds one alone.)
    let force = |p: Probe| p.env("GPU_CORE_UTILIZATION_POLICY", "force");
    let lo = spawn(
        force(container(&dir, &low, 50)),
        &["busy:spin_1000us:4000:8"],
    );
    std::thread::sleep(Duration::from_millis(500));
    let hi = spawn(
        force(container(&dir, &high, 50)),
        &["busy:spin_1000us:2000:8"],
    );
    // Once the monitor has seen the high one active (two rounds) and blocked the low one, the
    // low one's launch count stands still.
    std::thread::sleep(Duration::from_millis(1000));
    let a = launches(&low);
    std::thread::sleep(Duration::from_millis(700));
    let b = launches(&low);
    let hi_n = n_of(hi, "busy");
    let lo_n = n_of(lo, "busy");
    stop.store(true, Ordering::Release);
    let seen = mon.join().unwrap();
    assert!(
        seen[1].contains(&-1),
        "the monitor never blocked the low-priority container: {:?}",
        seen[1]
    );
    assert!(
        seen[0].iter().any(|&k| k > 0),
        "the high-priority container's launches were never marked: {:?}",
        seen[0]
    );
    assert!(
        b - a <= 40,
        "the blocked container went on launching: {a} → {b} in 0.7 s"
    );
    // It resumed: the high one ran 2 s at 50 %, the low one was blocked about that long
    // (plus the monitor's rounds), and ran at 50 % the rest of its 4 s.
    assert!(
        hi_n >= 700,
        "the high-priority container did {hi_n} ms of work"
    );
    assert!(
        lo_n >= 500,
        "the low-priority container did {lo_n} ms of work in 4 s: it did not resume"
    );
    assert!(
        lo_n <= 1600,
        "the low-priority container did {lo_n} ms of work: it was not blocked"
    );
    let hami = vgpu_hami_model::Container::open(&high).unwrap();
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let since = unix - t0.elapsed().as_secs() - 1;
    assert!(
        hami.last_kernel_time().unwrap() >= since as i64,
        "last_kernel_time not refreshed"
    );
}

#[test]
fn under_the_default_policy_a_container_alone_runs_unthrottled() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for (policy, alone_free) in [("default", true), ("force", false)] {
        let dir = node(policy);
        let region = region_with_priority(&dir, 1, 25);
        let stop = Arc::new(AtomicBool::new(false));
        let mon = monitor(
            vec![region.clone()],
            Duration::from_millis(50),
            stop.clone(),
        );
        let c = spawn(
            container(&dir, &region, 25).env("GPU_CORE_UTILIZATION_POLICY", policy),
            &["busy:spin_1000us:2000:8"],
        );
        let n = n_of(c, "busy");
        stop.store(true, Ordering::Release);
        let _ = mon.join().unwrap();
        let pct = n as f64 / 2000.0 * 100.0;
        if alone_free {
            assert!(pct >= 50.0, "{policy}: alone at 25 % it got {pct:.1} %");
        } else {
            assert!(pct <= 35.0, "{policy}: at 25 % it got {pct:.1} %");
        }
    }
}
