//! Two GPUs at once (issue 6), on the simulated driver's two devices: compute limits set
//! differently per device and holding on both at the same time, usage charged to the physical
//! GPU (by UUID) under CUDA_VISIBLE_DEVICES, and processes of one container on different devices
//! sharing each device's budget; VMM memory (`cuMemCreate`, NCCL's buffers) charged to the
//! device it names; per-index limits under CUDA_VISIBLE_DEVICES=1,0 for memory and compute
//! alike (issue 25); a stream of one device synchronised while another is current. The same
//! checks on real GPUs are tests/gpu/multi/run-multi.sh (not the last).
//! (tests/devices.rs covers one process's per-device limits and views.)
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdin, Stdio};
use std::time::Instant;
use vgpu_region::{Location, Region, Snapshot};
use vgpu_tests::*;

/// The simulated driver's UUID of physical GPU `p` (what NVML and cuDeviceGetUuid report).
fn uuid(p: usize) -> String {
    format!("GPU-5a1e0000-0000-4000-8000-{p:012x}")
}

/// The region's state, after clearing the slots of processes that have exited (a live vgpu
/// process's reaper would do the same within 250 ms).
fn snapshot(region: &Path) -> Snapshot {
    let r = Region::open_existing(&Location::shared(region)).expect("open region");
    r.reap_dead();
    r.snapshot()
}

/// `(limit, used)` of the device with this UUID in the region, `None` if the region lacks it.
fn device(s: &Snapshot, uuid: &str) -> Option<(Option<u64>, u64)> {
    s.devices
        .iter()
        .find(|d| d.uuid == uuid)
        .map(|d| (d.limit, d.used))
}

fn node_dir(name: &str) -> String {
    let d = own_temp_dir().join(format!("multi-{name}"));
    std::fs::create_dir_all(&d).unwrap();
    d.display().to_string()
}

/// A probe that runs `ops` and then holds (keeps its memory) until the returned stdin is
/// dropped; returns once it printed `OK hold`, with its earlier lines.
struct Holder {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Vec<String>,
}

impl Holder {
    fn start(p: Probe, ops: &[&str]) -> Holder {
        let mut h = Holder::spawn(p, ops);
        h.wait_held();
        h
    }
    fn spawn(p: Probe, ops: &[&str]) -> Holder {
        let mut child = spawn_holding(p, ops);
        let stdin = child.stdin.take();
        Holder {
            child,
            stdin,
            lines: Vec::new(),
        }
    }
    /// Reads the probe's lines up to `OK hold`.
    fn wait_held(&mut self) {
        let mut out = BufReader::new(self.child.stdout.take().expect("stdout"));
        loop {
            let mut l = String::new();
            if out.read_line(&mut l).unwrap_or(0) == 0 {
                panic!("probe ended before holding: {:?}", self.lines);
            }
            let held = l.starts_with("OK hold");
            self.lines.push(l.trim_end().to_string());
            if held {
                return;
            }
        }
    }
    fn value(&self, op: &str, key: &str) -> u64 {
        let prefix = format!("{key}=");
        self.lines
            .iter()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|w| w.len() >= 2 && w[1] == op)
            .and_then(|w| w.iter().find_map(|x| x.strip_prefix(&prefix)?.parse().ok()))
            .unwrap_or_else(|| panic!("no {op} {key}= in {:?}", self.lines))
    }
    fn release(mut self) {
        drop(self.stdin.take());
        let st = self.child.wait().expect("wait probe");
        assert!(st.success(), "holder exited {st:?}: {:?}", self.lines);
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        if self.stdin.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One container (one region, one environment) with CUDA_DEVICE_SM_LIMIT_0=30 and _1=70 (and
/// `visible` as CUDA_VISIBLE_DEVICES, if any); one process per physical GPU, both running
/// 300 × 1 ms at the same time, the one on physical GPU `p` as the program's `--device
/// ordinal[p]`. Asserts that each physical GPU runs at its own container index's limit (30 %:
/// about 3.3× as long as bare, 70 %: about 1.4×), not the other's, that both ran at once, and
/// that the region holds each device's own SM limit and GPU time.
fn sm_30_70_on_their_own_devices(name: &str, visible: Option<&str>, ordinal: [u32; 2]) {
    // 900 ms of work each: long enough that what a new container may run ahead of its share
    // (the limiter's AHEAD) does not blur the ratio.
    let k = "kernels:spin_1000us:1:900:0";
    let with_visible = |p: Probe| match visible {
        Some(v) => p.env("CUDA_VISIBLE_DEVICES", v),
        None => p,
    };
    let wall = |r: &Run| r.value("kernels", "wall_ns") as f64 / 1e9;
    let bare: Vec<f64> = ordinal
        .iter()
        .map(|d| {
            wall(
                &with_visible(Probe::bare())
                    .ops(&["--device", &d.to_string(), "init", "ctx", k])
                    .run()
                    .success(),
            )
        })
        .collect();
    let region = fresh_region();
    let node = node_dir(name);
    let spawn = |dev: u32| {
        with_visible(Probe::new())
            .region(&region)
            .env("VGPU_NODE_DIR", &node)
            .env("CUDA_DEVICE_SM_LIMIT_0", "30")
            .env("CUDA_DEVICE_SM_LIMIT_1", "70")
            .ops(&["--device", &dev.to_string(), "init", "ctx", k])
            .command()
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let t0 = Instant::now();
    let (a, b) = (spawn(ordinal[0]), spawn(ordinal[1]));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let elapsed = t0.elapsed();
    let parse = |o: &std::process::Output| {
        assert!(o.status.success(), "{o:?}");
        let s = String::from_utf8_lossy(&o.stdout).to_string();
        s.split_whitespace()
            .find_map(|w| w.strip_prefix("wall_ns="))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{s}")) as f64
            / 1e9
    };
    let (wa, wb) = (parse(&a), parse(&b));
    let (ra, rb) = (wa / bare[0], wb / bare[1]);
    // 30 %: about 3.3× as long; 70 %: about 1.4×. Each at its own factor, not the other's.
    assert!(
        (2.4..=5.0).contains(&ra),
        "{name}: physical GPU 0 at 30 %: {:.3}s → {wa:.3}s ({ra:.2}×)",
        bare[0]
    );
    assert!(
        (1.15..=2.1).contains(&rb),
        "{name}: physical GPU 1 at 70 %: {:.3}s → {wb:.3}s ({rb:.2}×)",
        bare[1]
    );
    assert!(ra > rb * 1.5, "{name}: 30 % ({ra:.2}×) vs 70 % ({rb:.2}×)");
    // At once: the pair took about as long as the slower one, not the sum.
    assert!(
        elapsed.as_secs_f64() < wa + wb * 0.6,
        "{name}: {elapsed:?} for {wa:.3}s + {wb:.3}s"
    );
    // The region has each device's own SM limit and GPU time.
    let s = snapshot(&region);
    for (p, sm) in [(0, 30), (1, 70)] {
        let d = s
            .devices
            .iter()
            .find(|d| d.uuid == uuid(p))
            .unwrap_or_else(|| panic!("{name}: {} not in {:?}", uuid(p), s.devices));
        assert_eq!(d.sm_limit, Some(sm), "{name}: {}", d.uuid);
        assert!(
            d.gpu_ns >= 250_000_000,
            "{name}: {}: gpu_ns {}",
            d.uuid,
            d.gpu_ns
        );
        assert!(
            d.launches >= 250,
            "{name}: {}: launches {}",
            d.uuid,
            d.launches
        );
    }
}

#[test]
fn sm_limits_30_and_70_hold_on_their_own_devices_at_once() {
    // Both processes see both GPUs in NVML's order: ordinal = physical GPU.
    sm_30_70_on_their_own_devices("sm3070", None, [0, 1]);
}

#[test]
fn sm_limits_30_and_70_follow_the_containers_index_under_visible_devices_1_0() {
    // Both processes see both GPUs as 1,0: the one on physical GPU 0 is the program's device 1,
    // the one on physical GPU 1 its device 0. `_0` and `_1` name the container's devices
    // (NVML's index), so physical GPU 0 runs at 30 % as its `--device 1` (were the limits read
    // by ordinal, it would run at 70 % and physical GPU 1 at 30 %).
    sm_30_70_on_their_own_devices("sm3070-cvd10", Some("1,0"), [1, 0]);
}

#[test]
fn visible_devices_1_charges_physical_gpu_1_and_nothing_else() {
    let region = fresh_region();
    let h = Holder::start(
        Probe::new()
            .region(&region)
            .env("CUDA_VISIBLE_DEVICES", "1")
            .env("CUDA_DEVICE_MEMORY_LIMIT_0", "1g")
            .env("CUDA_DEVICE_MEMORY_LIMIT_1", "3g"),
        &["init", "ctx", "meminfo", "alloc:100m"],
    );
    // Its device 0 is the container's device 1: `_1` applies.
    assert_eq!(h.value("meminfo", "total"), 3 * GIB);
    let s = snapshot(&region);
    assert_eq!(
        device(&s, &uuid(1)),
        Some((Some(3 * GIB), SIM_CTX + 100 * MIB))
    );
    // Physical GPU 0 is not visible: not in the region, or with nothing on it.
    if let Some((_, used)) = device(&s, &uuid(0)) {
        assert_eq!(used, 0, "{s:?}");
    }
    let procs: Vec<_> = s.processes.iter().filter(|p| p.pid != 0).collect();
    assert_eq!(procs.len(), 1, "{s:?}");
    let i1 = s.devices.iter().position(|d| d.uuid == uuid(1)).unwrap();
    assert_eq!(procs[0].used[i1], SIM_CTX + 100 * MIB);
    assert_eq!(procs[0].used.iter().sum::<u64>(), SIM_CTX + 100 * MIB);
    h.release();
    assert_eq!(device(&snapshot(&region), &uuid(1)).map(|d| d.1), Some(0));
}

#[test]
fn visible_devices_1_0_charge_each_ordinal_to_its_physical_gpu() {
    // Ordinal 0 is physical 1 (container index 1: _1 = 2g), ordinal 1 is physical 0 (_0 = 1g):
    // per-index limits number the container's devices (NVML's order), not the ordinals.
    let region = fresh_region();
    let p = Probe::new()
        .region(&region)
        .env("CUDA_VISIBLE_DEVICES", "1,0")
        .env("CUDA_DEVICE_MEMORY_LIMIT_0", "1g")
        .env("CUDA_DEVICE_MEMORY_LIMIT_1", "2g");
    let a = Holder::start(
        p.clone().arg("--device").arg("0"),
        &["init", "ctx", "meminfo", "alloc:100m"],
    );
    let b = Holder::start(
        p.arg("--device").arg("1"),
        &["init", "ctx", "meminfo", "alloc:200m"],
    );
    assert_eq!(a.value("meminfo", "total"), 2 * GIB);
    assert_eq!(b.value("meminfo", "total"), GIB);
    let s = snapshot(&region);
    assert_eq!(
        device(&s, &uuid(1)),
        Some((Some(2 * GIB), SIM_CTX + 100 * MIB))
    );
    assert_eq!(device(&s, &uuid(0)), Some((Some(GIB), SIM_CTX + 200 * MIB)));
    a.release();
    b.release();
}

#[test]
fn two_visible_devices_orders_in_one_container_get_the_same_limit_per_gpu() {
    // Issue 13 item 16: one container (one region) with _0 = 1g, _1 = 4g; its first process
    // sees the GPUs as 1,0, its second as 0,1. Whichever starts first, each physical GPU gets
    // one limit: physical 0 (container index 0) 1 GiB, physical 1 4 GiB (before: the first
    // process fixed each UUID's limit from its own ordinals, so GPU 1 got 1 GiB).
    for first in ["1,0", "0,1"] {
        let second = if first == "1,0" { "0,1" } else { "1,0" };
        let region = fresh_region();
        let p = |order: &str| {
            Probe::new()
                .region(&region)
                .env("CUDA_VISIBLE_DEVICES", order)
                .env("CUDA_DEVICE_MEMORY_LIMIT_0", "1g")
                .env("CUDA_DEVICE_MEMORY_LIMIT_1", "4g")
        };
        let a = Holder::start(p(first), &["init", "ctx", "meminfo"]);
        let b = Holder::start(p(second), &["init", "ctx", "meminfo"]);
        // Each process's device 0 is the first GPU of its own order.
        let expect = |order: &str| if order == "1,0" { 4 * GIB } else { GIB };
        assert_eq!(a.value("meminfo", "total"), expect(first), "{first}");
        assert_eq!(b.value("meminfo", "total"), expect(second), "{first}");
        let s = snapshot(&region);
        assert_eq!(
            device(&s, &uuid(0)).map(|d| d.0),
            Some(Some(GIB)),
            "{first}"
        );
        assert_eq!(
            device(&s, &uuid(1)).map(|d| d.0),
            Some(Some(4 * GIB)),
            "{first}"
        );
        a.release();
        b.release();
    }
}

#[test]
fn processes_on_different_devices_share_each_devices_budget() {
    // One container: _0=2g, _1=3g. A holds 512 MiB on device 0, B 1 GiB on device 1. A fill on
    // device 0 gets what A left of device 0's budget (B's use on device 1 does not count), a fill
    // on device 1 what B left of device 1's. A process of the same container that sees only
    // physical GPU 1 (CUDA_VISIBLE_DEVICES=1, its ordinal 0) shares physical GPU 1's budget:
    // the region's limit for that UUID applies, not its own `_0`.
    let region = fresh_region();
    let p = Probe::new()
        .region(&region)
        .env("CUDA_DEVICE_MEMORY_LIMIT_0", "2g")
        .env("CUDA_DEVICE_MEMORY_LIMIT_1", "3g");
    let a = Holder::start(
        p.clone().arg("--device").arg("0"),
        &["init", "ctx", "alloc:512m"],
    );
    let b = Holder::start(
        p.clone().arg("--device").arg("1"),
        &["init", "ctx", "alloc:1g"],
    );
    let fill = |p: Probe, dev: &str| {
        p.ops(&["--device", dev, "init", "ctx", "fill:alloc:64m"])
            .run()
            .success()
            .value("fill", "bytes")
    };
    let room = |limit: u64, held: u64| (limit - 2 * SIM_CTX - held) / (64 * MIB) * 64 * MIB;
    assert_eq!(fill(p.clone(), "0"), room(2 * GIB, 512 * MIB));
    assert_eq!(fill(p.clone(), "1"), room(3 * GIB, GIB));
    let other = p.env("CUDA_VISIBLE_DEVICES", "1");
    let r = other
        .ops(&["init", "ctx", "meminfo", "fill:alloc:64m"])
        .run()
        .success();
    assert_eq!(r.value("meminfo", "total"), 3 * GIB, "{}", r.stderr);
    assert_eq!(r.value("fill", "bytes"), room(3 * GIB, GIB));
    let s = snapshot(&region);
    assert_eq!(
        device(&s, &uuid(0)),
        Some((Some(2 * GIB), SIM_CTX + 512 * MIB))
    );
    assert_eq!(device(&s, &uuid(1)), Some((Some(3 * GIB), SIM_CTX + GIB)));
    a.release();
    b.release();
    let s = snapshot(&region);
    assert_eq!(device(&s, &uuid(0)).map(|d| d.1), Some(0));
    assert_eq!(device(&s, &uuid(1)).map(|d| d.1), Some(0));
}

#[test]
fn a_memory_and_compute_limited_pair_of_ranks_finishes_and_shares_the_budget() {
    // The shape of an NCCL job's two ranks (tests/gpu/multi/allreduce.py) on the simulator:
    // one container at CUDA_DEVICE_MEMORY_LIMIT=4g CUDA_DEVICE_SM_LIMIT=50, rank r on device r,
    // each holding memory while launching; both finish (no hang) and slow by about 2× (a
    // little less: a container may run up to the limiter's AHEAD, 50 ms, ahead of its share,
    // 25 ms of the 400 ms of work here).
    let region = fresh_region();
    let node = node_dir("ranks");
    let k = "kernels:spin_1000us:1:400:1";
    let p = Probe::new()
        .region(&region)
        .env("VGPU_NODE_DIR", &node)
        .limit("4g")
        .env("CUDA_DEVICE_SM_LIMIT", "50");
    let bare = Probe::bare()
        .ops(&["init", "ctx", k])
        .run()
        .success()
        .value("kernels", "wall_ns") as f64;
    let mut ranks: Vec<Holder> = (0..2)
        .map(|r| {
            Holder::spawn(
                p.clone().arg("--device").arg(&r.to_string()),
                &["init", "ctx", "alloc:1g", k],
            )
        })
        .collect();
    let t0 = Instant::now();
    for h in &mut ranks {
        h.wait_held();
    }
    let both = t0.elapsed().as_secs_f64() * 1e9;
    let s = snapshot(&region);
    for d in 0..2 {
        assert_eq!(device(&s, &uuid(d)), Some((Some(4 * GIB), SIM_CTX + GIB)));
        assert_eq!(
            s.devices
                .iter()
                .find(|x| x.uuid == uuid(d))
                .unwrap()
                .sm_limit,
            Some(50)
        );
    }
    for (r, h) in ranks.iter().enumerate() {
        let ratio = h.value("kernels", "wall_ns") as f64 / bare;
        assert!(
            (1.3..=3.2).contains(&ratio),
            "rank {r}: {ratio:.2}× (bare {bare:.0} ns)"
        );
    }
    // At once, each on its own device: together about as long as one.
    assert!(
        both / bare < 3.5,
        "both ranks took {:.2}× one bare run",
        both / bare
    );
    for h in ranks {
        h.release();
    }
}

/// A probe of one container with CUDA_DEVICE_MEMORY_LIMIT_0=1g and _1=3g whose context is on
/// its `--device ctx` and whose VMM memory (`cuMemCreate`) names `--vmm-device vmm`: NCCL's
/// shape, buffers made for a device by a thread whose current context may be another's.
fn vmm_probe(region: &Path, visible: Option<&str>, ctx: u32, vmm: u32) -> Probe {
    let p = Probe::new()
        .region(region)
        .env("CUDA_DEVICE_MEMORY_LIMIT_0", "1g")
        .env("CUDA_DEVICE_MEMORY_LIMIT_1", "3g")
        .arg("--device")
        .arg(&ctx.to_string())
        .arg("--vmm-device")
        .arg(&vmm.to_string());
    match visible {
        Some(v) => p.env("CUDA_VISIBLE_DEVICES", v),
        None => p,
    }
}

/// One case of [`vmm_probe`] in a container of its own: the context on the program's device
/// `ctx`, a fill of 64 MiB VMM chunks on its device `vmm`, which are the physical GPUs
/// `phys_ctx` and `phys_vmm`. The fill must get the whole of `phys_vmm`'s limit (`_0` = 1 GiB,
/// `_1` = 3 GiB by the container's index, the context's reservation being on the other GPU),
/// charged in the region to `phys_vmm`'s UUID, and `phys_ctx` must hold only the context.
fn vmm_case(visible: Option<&str>, ctx: u32, vmm: u32, phys_ctx: usize, phys_vmm: usize) {
    let limit = |p: usize| if p == 0 { GIB } else { 3 * GIB };
    let what = format!("CUDA_VISIBLE_DEVICES={visible:?} context on {ctx}, cuMemCreate on {vmm}");
    let region = fresh_region();
    let h = Holder::start(
        vmm_probe(&region, visible, ctx, vmm),
        &["init", "ctx", "fill:vmm:64m"],
    );
    let got = h.value("fill", "bytes");
    assert_eq!(got, limit(phys_vmm), "{what}: {:?}", h.lines);
    let s = snapshot(&region);
    assert_eq!(
        device(&s, &uuid(phys_vmm)),
        Some((Some(limit(phys_vmm)), got)),
        "{what}: {s:?}"
    );
    assert_eq!(
        device(&s, &uuid(phys_ctx)),
        Some((Some(limit(phys_ctx)), SIM_CTX)),
        "{what}: {s:?}"
    );
    h.release();
    let s = snapshot(&region);
    assert_eq!(device(&s, &uuid(phys_vmm)).map(|d| d.1), Some(0), "{what}");
}

#[test]
fn vmm_memory_is_charged_to_the_device_cumemcreate_names() {
    // Charged by the current context instead, the fill would stop at the context's GPU's limit.
    vmm_case(None, 0, 1, 0, 1);
    vmm_case(None, 1, 0, 1, 0);
}

#[test]
fn vmm_memory_under_visible_devices_1_0_is_charged_by_the_containers_index() {
    // Ordinal 0 is physical GPU 1 (`_1` = 3 GiB), ordinal 1 physical GPU 0 (`_0` = 1 GiB).
    // Were cuMemCreate's device taken as the container's index, or the limit read by ordinal,
    // each fill would get the other GPU's limit.
    vmm_case(Some("1,0"), 0, 1, 1, 0);
    vmm_case(Some("1,0"), 1, 0, 0, 1);
}

#[test]
fn graph_memory_on_a_device_other_than_the_current_one_is_charged_to_it() {
    // The context on device 0, a graph whose three memory nodes allocate 1.2 GiB each on device
    // 1 (limit 3 GiB there, 1 GiB on device 0): it does not fit and is not launched; a graph of
    // one does, and device 1 is charged for it (before: both ran and nothing was charged, vgpu
    // re-reading only the current device's graph pool: 3.6 GiB on a 3 GiB-limited device beside
    // nothing in its budget).
    let region = fresh_region();
    let h = Holder::start(
        vmm_probe(&region, None, 0, 1),
        &["init", "ctx", "graphallocs:3:1200m", "graphallocs:1:1200m"],
    );
    let line = |n: usize| {
        h.lines
            .iter()
            .filter(|l| l.starts_with("OK graphallocs"))
            .nth(n)
            .cloned()
            .unwrap_or_default()
    };
    assert!(line(0).contains("launch=2"), "{:?}", h.lines);
    assert!(line(1).contains("launch=0"), "{:?}", h.lines);
    // The graph pool keeps what it reserved (until trimmed): device 1 is charged for it.
    let s = snapshot(&region);
    let (limit, used) = device(&s, &uuid(1)).expect("device 1 in the region");
    assert_eq!(limit, Some(3 * GIB));
    assert!((1200 * MIB..=3 * GIB).contains(&used), "{s:?}");
    h.release();
}

/// A probe of one container whose device 0 is limited to 1 GiB and device 1 not, its context
/// on device 0 and its own pool made on device 1 (`--vmm-device 1`).
fn pools_on_device_1(region: &Path) -> Probe {
    Probe::new()
        .region(region)
        .env("CUDA_DEVICE_MEMORY_LIMIT_0", "1g")
        .arg("--device")
        .arg("0")
        .arg("--vmm-device")
        .arg("1")
}

#[test]
fn a_pool_on_an_unlimited_device_is_not_charged_to_the_current_one() {
    // Device 0 limited to 1 GiB, device 1 not; the context on device 0, a pool created on
    // device 1, 1.5 GiB from it: granted, and device 0 is charged nothing for it (before: a
    // pool on an unlimited device was unknown to vgpu and charged to the current device,
    // refused as past device 0's limit).
    let region = fresh_region();
    let h = Holder::start(
        pools_on_device_1(&region),
        &["init", "ctx", "poolasync:1500m"],
    );
    assert!(
        h.lines.iter().any(|l| l.starts_with("OK poolasync")),
        "{:?}",
        h.lines
    );
    let s = snapshot(&region);
    assert_eq!(device(&s, &uuid(0)), Some((Some(GIB), SIM_CTX)), "{s:?}");
    h.release();
}

#[test]
fn a_limit_set_on_a_device_after_its_pool_was_made_applies_to_the_pool() {
    // A pool made on device 1 while it had no limit; then a limit of 1 GiB is set on device 1
    // (`vgpu limit`, a live change): 1.5 GiB more from that pool is refused (before: the pool
    // was marked uncharged once and for all, an escape from the limit set later).
    use std::io::{BufRead, BufReader};
    let region = fresh_region();
    let mut child = Reaped(
        pools_on_device_1(&region)
            .ops(&["init", "ctx", "poolasync:100m", "hold", "poolasync:1500m"])
            .command()
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut out = BufReader::new(child.0.stdout.take().unwrap());
    let mut lines = Vec::new();
    loop {
        let mut l = String::new();
        assert!(out.read_line(&mut l).unwrap() > 0, "ended: {lines:?}");
        lines.push(l.trim_end().to_string());
        if l.starts_with("OK hold") {
            break;
        }
    }
    assert!(
        lines.iter().any(|l| l.starts_with("OK poolasync")),
        "{lines:?}"
    );
    Region::open_existing(&Location::shared(&region))
        .unwrap()
        .set_limit(&uuid(1), Some(GIB))
        .unwrap();
    terminate(child.0.id());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(
        rest.lines().any(|l| l.starts_with("ERR poolasync 2")),
        "{lines:?}\n{rest}"
    );
}

/// The probe's ops for `syncs` waits, each for 30 kernels of 1 ms on a stream of device 0,
/// synchronised once device 1 is made current; then the driver's count of `cuStreamGetDevice`
/// calls.
fn othersync_ops(syncs: usize) -> Vec<&'static str> {
    let mut ops = vec!["--device", "0", "init", "ctx"];
    ops.extend(std::iter::repeat_n("othersync:spin_1000us:30:1", syncs));
    ops.push("calls:cuStreamGetDevice");
    ops
}

/// A program that waits for a stream of device 0 while device 1 is current, both devices under
/// an SM limit (the synchronisation hook asks the driver which device the stream is of, and
/// counts the wait in device 0's gate): the synchronisation returns after that stream's 30
/// kernels of 1 ms, as without vgpu. (Which gate counts it:
/// `a_stream_of_device_0_synchronised_while_device_1_is_current_counts_in_device_0s_gate`.)
#[test]
fn a_stream_synchronised_while_another_device_is_current_waits_for_its_work() {
    let ops = othersync_ops(1);
    let bare = Probe::bare().ops(&ops).run().success();
    let r = Probe::new()
        .region(&fresh_region())
        .env("VGPU_NODE_DIR", &node_dir("othersync"))
        .env("CUDA_DEVICE_SM_LIMIT", "50")
        .ops(&ops)
        .run()
        .success();
    for (what, run) in [("bare", &bare), ("vgpu", &r)] {
        let wall = run.value("othersync", "wall_ns");
        assert!(wall >= 30_000_000, "{what}: {wall} ns for 30 ms of kernels");
    }
    // vgpu asked the driver which device the stream is of; the program never does.
    assert_eq!(bare.value("calls", "n"), 0);
    assert!(r.value("calls", "n") >= 1);
}

/// The same on a driver older than CUDA 12.8, which has no `cuStreamGetDevice` (here the
/// simulator with that export renamed, `sim_dir_without`): the wait counts in the current
/// device's gate, as before the lookup, and each of two synchronisations returns after the
/// stream's work; the driver's function is never entered.
#[test]
fn without_cu_stream_get_device_a_stream_synchronised_while_another_device_is_current_still_waits()
{
    let old = sim_dir_without("pre128", &["cuStreamGetDevice", "cuStreamGetDevice_ptsz"]);
    let ops = othersync_ops(2);
    let r = Probe::new()
        .region(&fresh_region())
        .env("VGPU_NODE_DIR", &node_dir("othersync-pre128"))
        .env("CUDA_DEVICE_SM_LIMIT", "50")
        .env("LD_LIBRARY_PATH", &old.display().to_string())
        .ops(&ops)
        .run()
        .success();
    for n in 0..2 {
        let wall = r.nth_value("othersync", n, "wall_ns");
        assert!(
            wall >= 30_000_000,
            "sync {n}: {wall} ns for 30 ms of kernels"
        );
    }
    assert_eq!(r.value("calls", "n"), 0, "{}", r.stdout);
    assert!(r.stderr.is_empty(), "{}", r.stderr);
}
