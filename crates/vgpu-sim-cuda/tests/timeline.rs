//! The kernel timeline: kernels take simulated GPU time, streams/events/queries follow it,
//! one GPU runs one kernel at a time (also across processes sharing `VGPU_SIM_STATE`).
//!
//! Each scenario runs in a child process (this test binary re-run with
//! `VGPU_SIM_TEST_SCENARIO` set) so that every scenario has its own process-local GPUs and
//! timings do not interfere.
#![allow(clippy::missing_safety_doc)]

use std::ffi::c_void;
use std::process::{Command, Stdio};
use std::ptr::{null, null_mut};
use std::time::{Duration, Instant};

use vgpu_sim_cuda::api_device::*;
use vgpu_sim_cuda::api_graph::*;
use vgpu_sim_cuda::api_memory::*;
use vgpu_sim_cuda::introspect::*;
use vgpu_sim_cuda::timeline::{now_ns, sleep_until};
use vgpu_sys::cuda::*;

const MS: u64 = 1_000_000;
const VARS: &[&str] = &[
    "CUDA_VISIBLE_DEVICES",
    "VGPU_SIM_DEVICES",
    "VGPU_SIM_MEM",
    "VGPU_SIM_CTX_RESERVE",
    "VGPU_SIM_STATE",
    "VGPU_SIM_KERNEL_US",
    "VGPU_SIM_LAUNCH_NS",
    "VGPU_SIM_LAUNCH_LATENCY_NS",
    "VGPU_SIM_SWITCH_NS",
    "VGPU_SIM_EVENT_NS",
    "VGPU_SIM_TIMESLICE_US",
];

macro_rules! ok {
    ($e:expr) => {
        assert_eq!($e, CUDA_SUCCESS, "{}", stringify!($e))
    };
}

fn child(scenario: &str, env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "scenario_child",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ]);
    for v in VARS {
        c.env_remove(v);
    }
    c.env("VGPU_SIM_TEST_SCENARIO", scenario);
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

fn run(scenario: &str, env: &[(&str, &str)]) -> String {
    succeeded(scenario, child(scenario, env).output().unwrap())
}

/// The stdout of a finished `scenario` child, which must have succeeded.
fn succeeded(scenario: &str, out: std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "scenario {scenario} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn kernels_take_their_time() {
    run("durations", &[("VGPU_SIM_KERNEL_US", "2000")]);
}

#[test]
fn queries_and_events_follow_the_timeline() {
    run("events", &[]);
}

#[test]
fn a_timing_event_occupies_the_gpu() {
    run("event_cost", &[("VGPU_SIM_EVENT_NS", "1000000")]);
}

#[test]
fn streams_serialize_on_one_device() {
    run("serialize", &[]);
}

#[test]
fn capture_takes_time_only_at_launch() {
    run("capture", &[]);
}

#[test]
fn per_thread_default_streams() {
    run("per_thread", &[]);
}

#[test]
fn synchronous_copies_wait_for_the_stream() {
    run("copies", &[]);
}

#[test]
fn launch_overhead_spins_the_host() {
    run("launch_ns", &[("VGPU_SIM_LAUNCH_NS", "1000000")]);
}

/// One process alone runs its work in launch order whether the GPU time-slices or not: every
/// single-process scenario holds with `VGPU_SIM_TIMESLICE_US` too (the schedule is then
/// computed lazily, and synchronisations poll it).
#[test]
fn one_process_alone_is_the_same_when_time_slicing() {
    for (scenario, env) in [
        ("durations", ("VGPU_SIM_KERNEL_US", "2000")),
        ("events", ("VGPU_SIM_LAUNCH_NS", "0")),
        ("serialize", ("VGPU_SIM_LAUNCH_NS", "0")),
        ("capture", ("VGPU_SIM_LAUNCH_NS", "0")),
        ("per_thread", ("VGPU_SIM_LAUNCH_NS", "0")),
        ("copies", ("VGPU_SIM_LAUNCH_NS", "0")),
        ("launch_ns", ("VGPU_SIM_LAUNCH_NS", "1000000")),
        ("event_cost", ("VGPU_SIM_EVENT_NS", "1000000")),
    ] {
        run(scenario, &[env, ("VGPU_SIM_TIMESLICE_US", "2000")]);
    }
}

#[test]
fn two_processes_contend_for_one_gpu() {
    let p = std::env::temp_dir().join(format!("vgpu-sim-tl-{}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    let path = p.to_str().unwrap().to_string();
    // Both children start launching at the same instant (the clock is shared).
    let start = (now_ns() + 500 * MS).to_string();
    let env = [
        ("VGPU_SIM_STATE", path.as_str()),
        ("VGPU_SIM_TEST_START", start.as_str()),
    ];
    let ends = two_contenders(&env);
    let start: u64 = start.parse().unwrap();
    // 2 × 50 × 2 ms serialized: ~200 ms together (each alone would take 100 ms).
    let wall = ends.iter().max().unwrap() - start;
    assert!((200 * MS..300 * MS).contains(&wall), "wall {wall}");
    // Each process's own work alone takes 100 ms; whoever queued second waited for the other.
    for e in &ends {
        assert!(e - start >= 100 * MS, "{}", e - start);
    }
    run("device_total", &[("VGPU_SIM_STATE", path.as_str())]);
    let _ = std::fs::remove_file(&p);
}

#[test]
fn processes_alternating_on_one_gpu_pay_a_context_switch() {
    let p = std::env::temp_dir().join(format!("vgpu-sim-sw-{}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    let path = p.to_str().unwrap().to_string();
    let start = (now_ns() + 500 * MS).to_string();
    let env = [
        ("VGPU_SIM_STATE", path.as_str()),
        ("VGPU_SIM_TEST_START", start.as_str()),
        ("VGPU_SIM_SWITCH_NS", "1000000"),
    ];
    let last = two_contenders(&env).into_iter().max().unwrap_or(0);
    let out = run("switches", &[("VGPU_SIM_STATE", path.as_str())]);
    let switches: u64 = out
        .lines()
        .find_map(|l| l.split_once("SWITCHES ").map(|(_, v)| v))
        .expect("SWITCHES line")
        .trim()
        .parse()
        .unwrap();
    // The second process's first kernel at least was another context's.
    assert!(switches >= 1, "{out}");
    // Each switch kept the GPU 1 ms from work: 200 ms of kernels plus the switches.
    let start: u64 = start.parse().unwrap();
    assert!(
        last - start >= 200 * MS + switches * MS,
        "{} ms for {switches} switches",
        (last - start) / MS
    );
    let _ = std::fs::remove_file(&p);
}

/// A fresh state file path for a test, with a start instant `lead_ms` from now that its
/// children wait for (the clock is shared), and the time-slicing variables.
struct Sliced {
    path: std::path::PathBuf,
    start: u64,
}

impl Sliced {
    fn new(tag: &str, lead_ms: u64) -> Sliced {
        let path = std::env::temp_dir().join(format!("vgpu-sim-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        Sliced {
            path,
            start: now_ns() + lead_ms * MS,
        }
    }

    /// Runs `scenarios` (each with extra variables) at once, time-slicing in 2 ms slices with
    /// a 50 µs context switch; returns each one's stdout.
    fn run(&self, scenarios: &[(&str, &[(&str, &str)])]) -> Vec<String> {
        let (path, start) = (self.path.to_str().unwrap(), self.start.to_string());
        let kids: Vec<_> = scenarios
            .iter()
            .map(|(name, extra)| {
                let mut c = child(name, extra);
                c.envs([
                    ("VGPU_SIM_STATE", path),
                    ("VGPU_SIM_TEST_START", start.as_str()),
                    ("VGPU_SIM_TIMESLICE_US", "2000"),
                    ("VGPU_SIM_SWITCH_NS", "50000"),
                ]);
                c.stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        kids.into_iter()
            .zip(scenarios)
            .map(|(k, (name, _))| succeeded(name, k.wait_with_output().unwrap()))
            .collect()
    }
}

impl Drop for Sliced {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The numbers of the line `KEY a b ...` of `out`.
fn numbers(out: &str, key: &str) -> Vec<u64> {
    out.lines()
        .find_map(|l| l.split_once(&format!("{key} ")).map(|(_, v)| v))
        .unwrap_or_else(|| panic!("no {key} line in {out}"))
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect()
}

#[test]
fn time_slicing_a_late_short_kernel_waits_about_one_slice() {
    let t = Sliced::new("ts-late", 500);
    // A queues 150 × 2 ms at the start; B one 0.5 ms kernel once A's work has run 20 ms.
    let out = t.run(&[("ts_queue", &[]), ("ts_late", &[])]);
    let a_end = numbers(&out[0], "END")[0];
    let [launch, start, end] = numbers(&out[1], "LATE")[..] else {
        panic!("{}", out[1])
    };
    // On the GPU's timeline: B waits for A's slice to end (2 ms) and a switch, not for A's
    // 300 ms queue; a kernel shorter than the slice is not preempted.
    assert!(
        start - launch <= 3 * MS,
        "B waited {} µs",
        (start - launch) / 1000
    );
    assert_eq!(end - start, 500_000);
    assert!(
        end + 100 * MS < a_end,
        "B ended {} ms before A",
        (a_end - end) / MS
    );
}

#[test]
fn time_slicing_two_saturating_processes_each_get_half() {
    let t = Sliced::new("ts-half", 700);
    let out = t.run(&[("ts_saturate", &[]), ("ts_saturate", &[])]);
    for o in &out {
        // GPU ns this process ran over a 150 ms window of wall time (while both had work).
        let [gpu, wall] = numbers(o, "SHARE")[..] else {
            panic!("{o}")
        };
        let share = gpu as f64 / wall as f64;
        assert!((0.35..0.65).contains(&share), "share {share:.3}\n{out:?}");
    }
}

#[test]
fn time_slicing_an_idle_context_gives_way_at_once() {
    let t = Sliced::new("ts-idle", 500);
    // A: 200 × (a 0.1 ms kernel, 1 ms of host work), a sync every 10; B: 400 ms of 1 ms
    // kernels queued at once.
    let out = t.run(&[("ts_hostbound", &[]), ("ts_saturate", &[])]);
    // A's kernels waited at most for B's slice and B's kernel under way, not for B's queue.
    let [max_wait] = numbers(&out[0], "HOST")[..] else {
        panic!("{}", out[0])
    };
    assert!(
        max_wait <= 3 * MS + 200_000,
        "A waited {} µs",
        max_wait / 1000
    );
    // B got the GPU whenever A's queue was empty: nearly all of it.
    let [gpu, wall] = numbers(&out[1], "SHARE")[..] else {
        panic!("{}", out[1])
    };
    assert!(gpu as f64 >= 0.75 * wall as f64, "B ran {gpu} ns of {wall}");
}

#[test]
fn time_slicing_a_preempted_kernels_events_include_the_other() {
    let t = Sliced::new("ts-long", 500);
    let out = t.run(&[("ts_long", &[]), ("ts_short", &[])]);
    let [span, elapsed_us, own] = numbers(&out[0], "LONG")[..] else {
        panic!("{}", out[0])
    };
    // A's 20 ms kernel ran in 2 ms slices between B's: its span and its events hold B's time
    // too, while its own GPU time is 20 ms.
    assert!(span >= 30 * MS, "span {} ms", span / MS);
    assert!(
        elapsed_us * 1000 >= span - 1000,
        "{elapsed_us} µs < span {span}"
    );
    assert_eq!(own, 20 * MS);
    // B's 1 ms kernels were never preempted.
    assert_eq!(numbers(&out[1], "SHORT"), vec![MS, MS]);
}

// ----- the child side ----------------------------------------------------------------------

/// Initializes, retains device 0's primary context and makes it current.
unsafe fn setup() -> CUcontext {
    let mut ctx: CUcontext = null_mut();
    // SAFETY: valid locals.
    unsafe {
        ok!(cuInit(0));
        ok!(cuDevicePrimaryCtxRetain(&mut ctx, 0));
        ok!(cuCtxSetCurrent(ctx));
    }
    ctx
}

/// Function `name` of a freshly loaded module.
unsafe fn function(name: &std::ffi::CStr) -> CUfunction {
    let image = [0u8; 16];
    let mut m: CUmodule = null_mut();
    let mut f: CUfunction = null_mut();
    // SAFETY: valid locals.
    unsafe {
        ok!(cuModuleLoadData(&mut m, image.as_ptr().cast()));
        ok!(cuModuleGetFunction(&mut f, m, name.as_ptr()));
    }
    f
}

unsafe fn launch(f: CUfunction, blocks: u32, s: CUstream) {
    // SAFETY: plain values; no kernel parameters.
    unsafe {
        ok!(cuLaunchKernel(
            f,
            blocks,
            1,
            1,
            128,
            1,
            1,
            0,
            s,
            null_mut(),
            null_mut()
        ))
    }
}

unsafe fn launch_ptsz(f: CUfunction, s: CUstream) {
    // SAFETY: plain values; no kernel parameters.
    unsafe {
        ok!(cuLaunchKernel_ptsz(
            f,
            1,
            1,
            1,
            32,
            1,
            1,
            0,
            s,
            null_mut(),
            null_mut()
        ))
    }
}

fn assert_between(d: Duration, lo_ms: u64, hi_ms: u64, what: &str) {
    assert!(
        d >= Duration::from_millis(lo_ms) && d < Duration::from_millis(hi_ms),
        "{what}: {d:?} not in [{lo_ms}, {hi_ms}) ms"
    );
}

unsafe fn durations() {
    // SAFETY: the simulator\'s own entry points, called as cuda.h documents them,
    // with pointers to live locals; the test runs in a child process of its own.
    unsafe {
        setup();
        let spin = function(c"spin_1000us");
        let mut s: CUstream = null_mut();
        ok!(cuStreamCreate(&mut s, 0));
        // 10 × 1 ms, 1 block: launches return at once, the synchronize waits ~10 ms.
        let t = Instant::now();
        for _ in 0..10 {
            launch(spin, 1, s);
        }
        assert!(t.elapsed() < Duration::from_millis(9), "launches blocked");
        ok!(cuStreamSynchronize(s));
        assert_between(t.elapsed(), 10, 30, "10 × 1 wave");
        assert_eq!(vgpuSimKernelNs(0), 10 * MS);
        assert_eq!(vgpuSimKernelsLaunched(0), 10);
        // Each kernel's place on the timeline: back to back, after its launch.
        let [launch0, start0, end0] = kernel_times(0);
        assert!(launch0 <= start0 && end0 - start0 == MS);
        assert_eq!(kernel_times(9)[1], kernel_times(8)[2]);
        assert_eq!(
            vgpuSimKernelTimes(0, 10, null_mut(), null_mut(), null_mut()),
            -1
        );
        assert_eq!(
            vgpuSimKernelTimes(1, 0, null_mut(), null_mut(), null_mut()),
            -1
        );
        // 264 blocks = 2 waves of 132 SMs: twice as long.
        let t = Instant::now();
        for _ in 0..10 {
            launch(spin, 264, s);
        }
        ok!(cuStreamSynchronize(s));
        assert_between(t.elapsed(), 20, 40, "10 × 2 waves");
        assert_eq!(vgpuSimKernelNs(0), 30 * MS);
        // 133 blocks through cuLaunchKernelEx: 2 waves as well.
        let cfg = CUlaunchConfig {
            gridDimX: 133,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: 64,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: 0,
            hStream: s,
            attrs: null_mut(),
            numAttrs: 0,
        };
        ok!(cuLaunchKernelEx(&cfg, spin, null_mut(), null_mut()));
        // Other names: VGPU_SIM_KERNEL_US (2000 here) per wave; a 2-D grid of 12 × 11 = 132
        // blocks is one wave.
        let other = function(c"gemm");
        ok!(cuLaunchCooperativeKernel(
            other,
            12,
            11,
            1,
            64,
            1,
            1,
            0,
            s,
            null_mut()
        ));
        ok!(cuCtxSynchronize());
        assert_eq!(vgpuSimKernelNs(0), 34 * MS);
        assert_eq!(vgpuSimDeviceKernelNs(0), 34 * MS);
        assert_eq!(vgpuSimKernelsLaunched(0), 22);
        assert_eq!(vgpuSimKernelNs(1), 0);
        // Libraries: kernels and their functions take time too.
        let mut lib: CUlibrary = null_mut();
        let code = [0u8; 8];
        ok!(cuLibraryLoadData(
            &mut lib,
            code.as_ptr().cast(),
            null_mut(),
            null_mut(),
            0,
            null_mut(),
            null_mut(),
            0
        ));
        let mut k: CUkernel = null_mut();
        ok!(cuLibraryGetKernel(&mut k, lib, c"spin_3000us".as_ptr()));
        let mut kf: CUfunction = null_mut();
        ok!(cuKernelGetFunction(&mut kf, k));
        launch(kf, 1, s);
        ok!(cuStreamSynchronize(s));
        assert_eq!(vgpuSimKernelNs(0), 37 * MS);
        ok!(cuLibraryUnload(lib));
        assert_eq!(cuKernelGetFunction(&mut kf, k), CUDA_ERROR_INVALID_HANDLE);
    }
}

/// A non-blocking stream, two timing events and one created with `CU_EVENT_DISABLE_TIMING`.
unsafe fn stream_and_events() -> (CUstream, [CUevent; 3]) {
    let mut s: CUstream = null_mut();
    let mut e: [CUevent; 3] = [null_mut(); 3];
    // SAFETY: the simulator's own entry points, with pointers to live locals.
    unsafe {
        ok!(cuStreamCreate(&mut s, CU_STREAM_NON_BLOCKING));
        ok!(cuEventCreate(&mut e[0], CU_EVENT_DEFAULT));
        ok!(cuEventCreate(&mut e[1], CU_EVENT_DEFAULT));
        ok!(cuEventCreate(&mut e[2], CU_EVENT_DISABLE_TIMING));
    }
    (s, e)
}

unsafe fn events() {
    // SAFETY: the simulator\'s own entry points, called as cuda.h documents them,
    // with pointers to live locals; the test runs in a child process of its own.
    unsafe {
        setup();
        let spin = function(c"spin_50000us");
        let (s, [a, b, nt]) = stream_and_events();
        let mut ms = 0f32;
        // Never recorded: complete, but no time.
        ok!(cuEventQuery(b));
        assert_eq!(cuEventElapsedTime(&mut ms, a, b), CUDA_ERROR_INVALID_HANDLE);
        ok!(cuEventRecord(a, s));
        launch(spin, 1, s);
        ok!(cuEventRecordWithFlags(b, s, 0));
        ok!(cuEventRecord(nt, s));
        assert_eq!(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
        assert_eq!(cuEventQuery(b), CUDA_ERROR_NOT_READY);
        ok!(cuEventQuery(a));
        assert_eq!(cuEventElapsedTime(&mut ms, a, b), CUDA_ERROR_NOT_READY);
        // Partly executed kernels count partly.
        std::thread::sleep(Duration::from_millis(5));
        let part = vgpuSimKernelNs(0);
        assert!(part > 0 && part < 50 * MS, "partial {part}");
        assert!(vgpuSimDeviceKernelNs(0) >= part);
        let t = Instant::now();
        ok!(cuEventSynchronize(b));
        assert!(t.elapsed() < Duration::from_millis(50), "event synchronize");
        ok!(cuEventQuery(b));
        ok!(cuStreamQuery(s));
        ok!(cuEventElapsedTime(&mut ms, a, b));
        assert!((50.0..52.0).contains(&ms), "elapsed {ms} ms");
        assert_eq!(
            cuEventElapsedTime(&mut ms, a, nt),
            CUDA_ERROR_INVALID_HANDLE
        );
        assert_eq!(vgpuSimKernelNs(0), 50 * MS);
        // An event recorded on an idle stream completes at once.
        ok!(cuEventRecord(a, s));
        ok!(cuEventQuery(a));
        ok!(cuEventDestroy_v2(a));
        ok!(cuEventDestroy(b));
        ok!(cuEventDestroy_v2(nt));
        assert_eq!(cuEventQuery(a), CUDA_ERROR_INVALID_HANDLE);
    }
}

/// With `VGPU_SIM_EVENT_NS` = 1 ms: each record of a timing event takes 1 ms of GPU time in
/// its stream's order; events created with `CU_EVENT_DISABLE_TIMING` take none.
unsafe fn event_cost() {
    // SAFETY: the simulator\'s own entry points, called as cuda.h documents them,
    // with pointers to live locals; the test runs in a child process of its own.
    unsafe {
        setup();
        let spin = function(c"spin_5000us");
        let (s, [a, b, nt]) = stream_and_events();
        // a (1 ms), nt (nothing), the kernel (5 ms, after a), b (1 ms): from a's completion to
        // b's, the kernel and b's own cost.
        ok!(cuEventRecord(a, s));
        ok!(cuEventRecord(nt, s));
        launch(spin, 1, s);
        ok!(cuEventRecordWithFlags(b, s, 0));
        ok!(cuEventSynchronize(b));
        let mut ms = 0f32;
        ok!(cuEventElapsedTime(&mut ms, a, b));
        assert!((5.999..30.0).contains(&ms), "elapsed {ms} ms");
        // The GPU worked 5 ms on the kernel and 1 ms on each timing event.
        assert_eq!(vgpuSimKernelNs(0), 7 * MS);
        assert_eq!(vgpuSimKernelsLaunched(0), 1);
        // Timing events on an idle stream still occupy the GPU: 20 of them take 20 ms.
        let t = Instant::now();
        for _ in 0..20 {
            ok!(cuEventRecord(a, s));
        }
        ok!(cuStreamSynchronize(s));
        assert!(
            t.elapsed() >= Duration::from_millis(20),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(vgpuSimKernelNs(0), 27 * MS);
        // Events without timing cost nothing.
        for _ in 0..20 {
            ok!(cuEventRecord(nt, s));
        }
        ok!(cuEventSynchronize(nt));
        ok!(cuStreamSynchronize(s));
        assert_eq!(vgpuSimKernelNs(0), 27 * MS);
        assert_eq!(vgpuSimKernelsLaunched(0), 1);
    }
}

unsafe fn serialize() {
    // SAFETY: the simulator\'s own entry points, called as cuda.h documents them,
    // with pointers to live locals; the test runs in a child process of its own.
    unsafe {
        setup();
        let spin = function(c"spin_2000us");
        let (mut s1, mut s2): (CUstream, CUstream) = (null_mut(), null_mut());
        ok!(cuStreamCreate(&mut s1, CU_STREAM_NON_BLOCKING));
        ok!(cuStreamCreateWithPriority(
            &mut s2,
            CU_STREAM_NON_BLOCKING,
            -1
        ));
        let (mut e0, mut e1, mut e2): (CUevent, CUevent, CUevent) =
            (null_mut(), null_mut(), null_mut());
        ok!(cuEventCreate(&mut e0, 0));
        ok!(cuEventCreate(&mut e1, 0));
        ok!(cuEventCreate(&mut e2, 0));
        let t = Instant::now();
        ok!(cuEventRecord(e0, s1));
        for _ in 0..5 {
            launch(spin, 1, s1);
            launch(spin, 1, s2);
        }
        ok!(cuEventRecord(e1, s1));
        ok!(cuEventRecord(e2, s2));
        ok!(cuStreamSynchronize(s1));
        assert!(t.elapsed() >= Duration::from_millis(18), "s1 too early");
        ok!(cuStreamSynchronize(s2));
        assert_between(t.elapsed(), 20, 35, "two streams, one device");
        // s1's last kernel is the 9th of 10 on the device: ~18 ms, not 10; s2's 2 ms later.
        let mut ms = 0f32;
        ok!(cuEventElapsedTime(&mut ms, e0, e1));
        assert!((18.0..22.0).contains(&ms), "s1 end {ms}");
        ok!(cuEventElapsedTime(&mut ms, e1, e2));
        assert!((ms - 2.0).abs() < 1e-3, "s2 end - s1 end {ms}");

        // cuStreamWaitEvent: s2 waits for s1's 10 ms.
        let big = function(c"spin_10000us");
        let small = function(c"spin_1000us");
        let mut e: CUevent = null_mut();
        ok!(cuEventCreate(&mut e, 0));
        let t = Instant::now();
        launch(big, 1, s1);
        ok!(cuEventRecord(e, s1));
        ok!(cuStreamWaitEvent(s2, e, 0));
        ok!(cuStreamSynchronize(s2));
        assert_between(t.elapsed(), 9, 25, "wait event, nothing queued");
        launch(small, 1, s2);
        ok!(cuStreamSynchronize(s2));
        assert_between(t.elapsed(), 11, 30, "after the waited event");

        // Legacy semantics: the NULL stream waits for blocking streams (not for
        // non-blocking ones), and a blocking stream for the NULL stream.
        let mut sb: CUstream = null_mut();
        ok!(cuStreamCreate(&mut sb, 0));
        launch(big, 1, sb);
        assert_eq!(cuStreamQuery(null_mut()), CUDA_ERROR_NOT_READY);
        assert_eq!(
            cuStreamQuery(CU_STREAM_LEGACY as CUstream),
            CUDA_ERROR_NOT_READY
        );
        ok!(cuStreamQuery(s1));
        ok!(cuStreamSynchronize(null_mut()));
        ok!(cuStreamQuery(sb));
        launch(big, 1, null_mut());
        assert_eq!(cuStreamQuery(sb), CUDA_ERROR_NOT_READY);
        ok!(cuStreamQuery(s1));
        ok!(cuCtxSynchronize());
        ok!(cuStreamQuery(sb));
        ok!(cuStreamQuery(null_mut()));
        ok!(cuStreamDestroy_v2(sb));
        ok!(cuStreamDestroy_v2(s1));
        ok!(cuStreamDestroy_v2(s2));
    }
}

unsafe fn capture() {
    // SAFETY: the simulator\'s own entry points, called as cuda.h documents them,
    // with pointers to live locals; the test runs in a child process of its own.
    unsafe {
        setup();
        let spin = function(c"spin_2000us");
        let mut s: CUstream = null_mut();
        ok!(cuStreamCreate(&mut s, CU_STREAM_NON_BLOCKING));
        let mut st: CUstreamCaptureStatus = 9;
        ok!(cuStreamIsCapturing(s, &mut st));
        assert_eq!(st, CU_STREAM_CAPTURE_STATUS_NONE);
        assert_eq!(
            cuStreamBeginCapture_v2(null_mut(), CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
        );
        let t = Instant::now();
        ok!(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
        assert_eq!(
            cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_ILLEGAL_STATE
        );
        ok!(cuStreamIsCapturing(s, &mut st));
        assert_eq!(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
        let (mut id, mut cg, mut n): (u64, CUgraph, usize) = (0, null_mut(), 7);
        let mut deps: *const CUgraphNode = std::ptr::dangling();
        ok!(cuStreamGetCaptureInfo_v2(
            s, &mut st, &mut id, &mut cg, &mut deps, &mut n
        ));
        assert!(id != 0 && !cg.is_null() && n == 0);
        for _ in 0..10 {
            launch(spin, 1, s);
        }
        let mut p: CUdeviceptr = 0;
        ok!(cuMemAllocAsync(&mut p, 1 << 20, s));
        assert!(p != 0);
        ok!(cuMemFreeAsync(p, s));
        let mut g: CUgraph = null_mut();
        ok!(cuStreamEndCapture(s, &mut g));
        assert_eq!(g, cg);
        assert_eq!(cuStreamEndCapture(s, &mut g), CUDA_ERROR_ILLEGAL_STATE);
        // Capture ran nothing.
        assert_eq!(vgpuSimKernelsLaunched(0), 0);
        ok!(cuStreamQuery(s));
        ok!(cuStreamSynchronize(s));
        assert!(t.elapsed() < Duration::from_millis(8), "capture took time");
        // A node added by hand (CUDA 12 ABI), 264 blocks of spin_1000us: 2 ms.
        let one = function(c"spin_1000us");
        let params = CUDA_KERNEL_NODE_PARAMS_v2 {
            func: one,
            gridDimX: 264,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: 32,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: 0,
            kernelParams: null_mut(),
            extra: null_mut(),
            kern: null_mut(),
            ctx: null_mut(),
        };
        let mut node: CUgraphNode = null_mut();
        ok!(cuGraphAddKernelNode_v2(
            &mut node,
            g,
            null_mut(),
            0,
            &params
        ));
        // The v1 ABI too: 1 ms.
        let p1 = CUDA_KERNEL_NODE_PARAMS_v1 {
            func: one,
            gridDimX: 1,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: 32,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: 0,
            kernelParams: null_mut(),
            extra: null_mut(),
        };
        let mut node1: CUgraphNode = null_mut();
        ok!(cuGraphAddKernelNode(&mut node1, g, &node, 1, &p1));
        let mut exec: CUgraphExec = null_mut();
        ok!(cuGraphInstantiateWithFlags(&mut exec, g, 0));
        // Instantiation copied the nodes.
        ok!(cuGraphDestroy(g));
        let t = Instant::now();
        ok!(cuGraphLaunch(exec, s));
        assert!(
            t.elapsed() < Duration::from_millis(8),
            "graph launch blocked"
        );
        assert_eq!(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
        ok!(cuStreamSynchronize(s));
        assert_between(t.elapsed(), 23, 40, "graph of 10 × 2 ms + 2 ms + 1 ms");
        assert_eq!(vgpuSimKernelsLaunched(0), 12);
        assert_eq!(vgpuSimKernelNs(0), 23 * MS);
        // The graph's memory nodes ran as before.
        let mut used: u64 = 1;
        ok!(cuDeviceGetGraphMemAttribute(
            0,
            CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT,
            (&raw mut used).cast::<c_void>()
        ));
        assert_eq!(used, 0);
        ok!(cuGraphExecDestroy(exec));
    }
}

unsafe fn per_thread() {
    // SAFETY: the simulator\'s own entry points, called as cuda.h documents them,
    // with pointers to live locals; the test runs in a child process of its own.
    unsafe {
        let ctx = setup();
        let spin = function(c"spin_20000us");
        let small = function(c"spin_1000us");
        let (fs, c) = (small as usize, ctx as usize);
        // Thread A queues 20 ms on its per-thread stream.
        launch_ptsz(spin, null_mut());
        assert_eq!(cuStreamQuery_ptsz(null_mut()), CUDA_ERROR_NOT_READY);
        assert_eq!(
            cuStreamQuery(CU_STREAM_PER_THREAD as CUstream),
            CUDA_ERROR_NOT_READY
        );
        // The legacy stream waits for per-thread streams.
        assert_eq!(cuStreamQuery(null_mut()), CUDA_ERROR_NOT_READY);
        let t = Instant::now();
        std::thread::spawn(move || thread_b(c, fs)).join().unwrap();
        assert_between(t.elapsed(), 15, 40, "thread B behind thread A's kernel");
        // A's stream completed before B's kernel.
        ok!(cuStreamQuery_ptsz(null_mut()));
        assert_eq!(vgpuSimKernelNs(0), 21 * MS);
        ok!(cuCtxSynchronize());
    }
}

unsafe fn copies() {
    // SAFETY: the simulator\'s own entry points, called as cuda.h documents them,
    // with pointers to live locals; the test runs in a child process of its own.
    unsafe {
        setup();
        let spin = function(c"spin_10000us");
        let mut d: CUdeviceptr = 0;
        ok!(cuMemAlloc_v2(&mut d, 64));
        let mut host = [0u8; 64];
        let h = host.as_mut_ptr();
        // Queues a 10 ms kernel (on the per-thread stream with `ptds`), then times `copy`
        // behind it.
        let behind = |ptds: bool, copy: &dyn Fn() -> CUresult, what: &str| {
            if ptds {
                launch_ptsz(spin, null_mut());
            } else {
                launch(spin, 1, null_mut());
            }
            let t = Instant::now();
            ok!(copy());
            assert_between(t.elapsed(), 8, 30, what);
        };
        // A copy to the host waits for the legacy stream's kernel (10 ms).
        behind(
            false,
            &|| cuMemcpyDtoH_v2(h.cast(), d, 64),
            "DtoH behind a 10 ms kernel",
        );
        ok!(cuStreamQuery(null_mut()));
        // So do a copy from the host and cuMemcpy with either end on the device.
        behind(
            false,
            &|| cuMemcpyHtoD_v2(d, h.cast_const().cast(), 64),
            "HtoD behind it",
        );
        behind(
            false,
            &|| cuMemcpy(h as CUdeviceptr, d, 64),
            "cuMemcpy behind it",
        );
        // Between two device ranges cuMemcpy does not wait.
        let mut d2: CUdeviceptr = 0;
        ok!(cuMemAlloc_v2(&mut d2, 64));
        launch(spin, 1, null_mut());
        let t = Instant::now();
        ok!(cuMemcpy(d2, d, 64));
        assert!(
            t.elapsed() < Duration::from_millis(8),
            "a DtoD cuMemcpy waited"
        );
        ok!(cuStreamSynchronize(null_mut()));
        ok!(cuMemFree_v2(d2));
        // The per-thread variants wait for the per-thread stream.
        behind(
            true,
            &|| cuMemcpyDtoH_v2_ptds(h.cast(), d, 64),
            "DtoH_ptds behind it",
        );
        ok!(cuStreamQuery_ptsz(null_mut()));
        // 2D and 3D copies with an end in host memory wait too: 4 rows of 16 bytes out of
        // the allocation into the host buffer, and back in 2 slices of 2 rows.
        let d2h = CUDA_MEMCPY2D {
            srcMemoryType: CU_MEMORYTYPE_DEVICE,
            srcDevice: d,
            srcPitch: 16,
            dstMemoryType: CU_MEMORYTYPE_HOST,
            dstHost: h.cast(),
            dstPitch: 16,
            WidthInBytes: 16,
            Height: 4,
            ..Default::default()
        };
        behind(false, &|| cuMemcpy2D_v2(&d2h), "2D DtoH behind it");
        behind(
            true,
            &|| cuMemcpy2DUnaligned_v2_ptds(&d2h),
            "2D DtoH_ptds behind it",
        );
        let h2d = CUDA_MEMCPY3D {
            srcMemoryType: CU_MEMORYTYPE_HOST,
            srcHost: h.cast_const().cast(),
            srcPitch: 16,
            srcHeight: 2,
            dstMemoryType: CU_MEMORYTYPE_DEVICE,
            dstDevice: d,
            dstPitch: 16,
            dstHeight: 2,
            WidthInBytes: 16,
            Height: 2,
            Depth: 2,
            ..Default::default()
        };
        behind(false, &|| cuMemcpy3D_v2(&h2d), "3D HtoD behind it");
        let peer = CUDA_MEMCPY3D_PEER {
            srcMemoryType: h2d.srcMemoryType,
            srcHost: h2d.srcHost,
            srcPitch: h2d.srcPitch,
            srcHeight: h2d.srcHeight,
            dstMemoryType: h2d.dstMemoryType,
            dstDevice: h2d.dstDevice,
            dstPitch: h2d.dstPitch,
            dstHeight: h2d.dstHeight,
            WidthInBytes: h2d.WidthInBytes,
            Height: h2d.Height,
            Depth: h2d.Depth,
            ..Default::default()
        };
        behind(
            true,
            &|| cuMemcpy3DPeer_ptds(&peer),
            "3D peer HtoD_ptds behind it",
        );
        // Between two device ranges they return at once; so does one past the allocation
        // (a fifth row), refused.
        let mut d2: CUdeviceptr = 0;
        ok!(cuMemAlloc_v2(&mut d2, 64));
        launch(spin, 1, null_mut());
        let t = Instant::now();
        let d2d = CUDA_MEMCPY2D {
            dstMemoryType: CU_MEMORYTYPE_DEVICE,
            dstHost: null_mut(),
            dstDevice: d2,
            ..d2h
        };
        ok!(cuMemcpy2D_v2(&d2d));
        assert_eq!(
            cuMemcpy2D_v2(&CUDA_MEMCPY2D { Height: 5, ..d2h }),
            CUDA_ERROR_INVALID_VALUE
        );
        // So are rows closer than their width, and an array end that is no array.
        assert_eq!(
            cuMemcpy2D_v2(&CUDA_MEMCPY2D { srcPitch: 8, ..d2h }),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(
            cuMemcpy2D_v2(&CUDA_MEMCPY2D {
                srcMemoryType: CU_MEMORYTYPE_ARRAY,
                srcArray: 0x1234 as CUarray,
                ..d2h
            }),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(cuMemcpy3D_v2(null()), CUDA_ERROR_INVALID_VALUE);
        assert!(
            t.elapsed() < Duration::from_millis(8),
            "a device-to-device or refused 2D copy waited"
        );
        ok!(cuStreamSynchronize(null_mut()));
        ok!(cuMemFree_v2(d2));
        // So do copies between an array (64 one-byte elements) and the host; one past the
        // array's elements is refused at once.
        let mut a: CUarray = null_mut();
        let desc = CUDA_ARRAY_DESCRIPTOR {
            Width: 64,
            Height: 0,
            Format: CU_AD_FORMAT_UNSIGNED_INT8,
            NumChannels: 1,
        };
        ok!(cuArrayCreate_v2(&mut a, &desc));
        behind(
            false,
            &|| cuMemcpyAtoH_v2(h.cast(), a, 0, 64),
            "AtoH behind it",
        );
        behind(
            true,
            &|| cuMemcpyHtoA_v2_ptds(a, 0, h.cast_const().cast(), 64),
            "HtoA_ptds behind it",
        );
        launch(spin, 1, null_mut());
        let t = Instant::now();
        assert_eq!(
            cuMemcpyAtoH_v2(h.cast(), a, 32, 64),
            CUDA_ERROR_INVALID_VALUE
        );
        assert!(
            t.elapsed() < Duration::from_millis(8),
            "a refused array copy waited"
        );
        ok!(cuStreamSynchronize(null_mut()));
        ok!(cuArrayDestroy(a));
        // Bad arguments: a range past the allocation, a pointer that is not one, a null host
        // pointer; none of them waits.
        launch(spin, 1, null_mut());
        let t = Instant::now();
        assert_eq!(
            cuMemcpyDtoH_v2(h.cast(), d + 32, 64),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(
            cuMemcpyHtoD_v2(d + (1 << 40), h.cast_const().cast(), 1),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(cuMemcpyDtoH_v2(null_mut(), d, 1), CUDA_ERROR_INVALID_VALUE);
        assert!(
            t.elapsed() < Duration::from_millis(8),
            "a refused copy waited"
        );
        // Nothing to copy: no wait either.
        ok!(cuMemcpyDtoH_v2(null_mut(), 0, 0));
        ok!(cuCtxSynchronize());
        ok!(cuMemFree_v2(d));
    }
}

/// Thread B of [`per_thread`]: context `c`, function `fs` (as addresses).
fn thread_b(c: usize, fs: usize) {
    // SAFETY: valid handles from the parent thread; valid locals.
    unsafe {
        ok!(cuCtxSetCurrent(c as CUcontext));
        // Thread B's own per-thread stream is idle...
        ok!(cuStreamQuery_ptsz(null_mut()));
        ok!(cuStreamQuery(CU_STREAM_PER_THREAD as CUstream));
        // ...but the device is busy: its kernel runs after A's.
        launch_ptsz(fs as CUfunction, null_mut());
        ok!(cuStreamSynchronize_ptsz(null_mut()));
    }
}

unsafe fn launch_ns() {
    // SAFETY: the simulator\'s own entry points, called as cuda.h documents them,
    // with pointers to live locals; the test runs in a child process of its own.
    unsafe {
        setup();
        let f = function(c"spin_0us");
        let t = Instant::now();
        for _ in 0..5 {
            launch(f, 1, null_mut());
        }
        assert!(
            t.elapsed() >= Duration::from_millis(5),
            "no launch overhead"
        );
        ok!(cuStreamSynchronize(null_mut()));
        assert_eq!(vgpuSimKernelNs(0), 0);
        assert_eq!(vgpuSimKernelsLaunched(0), 5);
    }
}

unsafe fn contend() {
    // SAFETY: the simulator\'s own entry points, called as cuda.h documents them,
    // with pointers to live locals; the test runs in a child process of its own.
    unsafe {
        setup();
        let spin = function(c"spin_2000us");
        let start: u64 = std::env::var("VGPU_SIM_TEST_START")
            .unwrap()
            .parse()
            .unwrap();
        sleep_until(start);
        let mut s: CUstream = null_mut();
        ok!(cuStreamCreate(&mut s, 0));
        for _ in 0..50 {
            launch(spin, 1, s);
        }
        ok!(cuStreamSynchronize(s));
        println!("END {}", vgpuSimNowNs());
        assert_eq!(vgpuSimKernelNs(0), 100 * MS);
        assert!(vgpuSimDeviceKernelNs(0) >= 100 * MS);
    }
}

fn test_start() -> u64 {
    std::env::var("VGPU_SIM_TEST_START")
        .unwrap()
        .parse()
        .unwrap()
}

/// A stream and a function `name` of a fresh context, at the test's start.
unsafe fn sliced_setup(name: &std::ffi::CStr) -> (CUstream, CUfunction) {
    // SAFETY: the simulator's own entry points, called as cuda.h documents them.
    unsafe {
        setup();
        let f = function(name);
        let mut s: CUstream = null_mut();
        ok!(cuStreamCreate(&mut s, CU_STREAM_NON_BLOCKING));
        sleep_until(test_start());
        (s, f)
    }
}

/// Time-slicing, process A: 150 × 2 ms queued at once.
unsafe fn ts_queue() {
    // SAFETY: the simulator's own entry points, called as cuda.h documents them.
    unsafe {
        let (s, f) = sliced_setup(c"spin_2000us");
        for _ in 0..150 {
            launch(f, 1, s);
        }
        ok!(cuStreamSynchronize(s));
        println!("END {}", vgpuSimNowNs());
        assert_eq!(vgpuSimKernelNs(0), 300 * MS);
    }
}

/// Time-slicing, process B: one 0.5 ms kernel once the GPU has run 20 ms of work.
unsafe fn ts_late() {
    // SAFETY: the simulator's own entry points, called as cuda.h documents them.
    unsafe {
        let (s, f) = sliced_setup(c"spin_500us");
        wait_for("20 ms of A's work", || vgpuSimDeviceKernelNs(0) >= 20 * MS);
        launch(f, 1, s);
        ok!(cuStreamSynchronize(s));
        let [launch_at, start, end] = kernel_times(0);
        assert_eq!(
            vgpuSimKernelTimes(0, 1, null_mut(), null_mut(), null_mut()),
            -1
        );
        println!("LATE {launch_at} {start} {end}");
    }
}

/// Launch, start and end of this process's `i`-th kernel on GPU 0, which has completed.
fn kernel_times(i: u64) -> [u64; 3] {
    let mut t = [0u64; 3];
    let [a, b, c] = &mut t;
    // SAFETY: three valid out-pointers.
    let r = unsafe { vgpuSimKernelTimes(0, i, a, b, c) };
    assert_eq!(r, 1, "kernel {i}");
    t
}

/// Polls `cond` (every 0.2 ms, for at most 10 s, then goes on: the test's checks then fail
/// with their own message).
fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let t = Instant::now();
    while !cond() {
        if t.elapsed() > Duration::from_secs(10) {
            eprintln!("gave up waiting for {what}");
            return;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Time-slicing: 400 × 1 ms queued at once; then, once the GPU has switched between
/// processes twice (the other has work too), the GPU time this process got over 150 ms of
/// wall time.
unsafe fn ts_saturate() {
    // SAFETY: the simulator's own entry points, called as cuda.h documents them.
    unsafe {
        let (s, f) = sliced_setup(c"spin_1000us");
        for _ in 0..400 {
            launch(f, 1, s);
        }
        wait_for("the other's work", || vgpuSimDeviceSwitches(0) >= 2);
        let (k0, t0) = (vgpuSimKernelNs(0), vgpuSimNowNs());
        sleep_until(t0 + 150 * MS);
        let (k1, t1) = (vgpuSimKernelNs(0), vgpuSimNowNs());
        println!("SHARE {} {}", k1 - k0, t1 - t0);
        ok!(cuStreamSynchronize(s));
        assert_eq!(vgpuSimKernelNs(0), 400 * MS);
    }
}

/// Time-slicing: a host-bound stream, 200 × (a 0.1 ms kernel, 1 ms of host work), a sync
/// every 10, once the GPU runs the other's work; prints the longest a kernel waited from its
/// launch to its start.
unsafe fn ts_hostbound() {
    // SAFETY: the simulator's own entry points, called as cuda.h documents them.
    unsafe {
        let (s, f) = sliced_setup(c"spin_100us");
        wait_for("the other's work", || vgpuSimDeviceKernelNs(0) > 0);
        for i in 0..200 {
            launch(f, 1, s);
            std::thread::sleep(Duration::from_millis(1));
            if i % 10 == 9 {
                ok!(cuStreamSynchronize(s));
            }
        }
        ok!(cuStreamSynchronize(s));
        let max_wait = (0..200)
            .map(|i| {
                let [launch_at, start, end] = kernel_times(i);
                assert_eq!(end - start, 100_000);
                start - launch_at
            })
            .max();
        println!("HOST {}", max_wait.unwrap());
    }
}

/// Time-slicing: one 20 ms kernel between two events; prints its span on the GPU's timeline,
/// the events' elapsed time (µs) and its own GPU time.
unsafe fn ts_long() {
    // SAFETY: the simulator's own entry points, called as cuda.h documents them.
    unsafe {
        let (s, f) = sliced_setup(c"spin_20000us");
        wait_for("the other's work", || vgpuSimDeviceKernelNs(0) > 0);
        let (mut a, mut b): (CUevent, CUevent) = (null_mut(), null_mut());
        ok!(cuEventCreate(&mut a, 0));
        ok!(cuEventCreate(&mut b, 0));
        ok!(cuEventRecord(a, s));
        launch(f, 1, s);
        ok!(cuEventRecord(b, s));
        ok!(cuEventSynchronize(b));
        let mut ms = 0f32;
        ok!(cuEventElapsedTime(&mut ms, a, b));
        let [_, start, end] = kernel_times(0);
        println!(
            "LONG {} {} {}",
            end - start,
            (ms * 1000.0) as u64,
            vgpuSimKernelNs(0)
        );
    }
}

/// Time-slicing: 200 × 1 ms queued at once; prints the shortest and longest span of them.
unsafe fn ts_short() {
    // SAFETY: the simulator's own entry points, called as cuda.h documents them.
    unsafe {
        let (s, f) = sliced_setup(c"spin_1000us");
        for _ in 0..200 {
            launch(f, 1, s);
        }
        ok!(cuCtxSynchronize());
        let spans: Vec<u64> = (0..200)
            .map(|i| {
                let [_, start, end] = kernel_times(i);
                end - start
            })
            .collect();
        let (lo, hi) = (spans.iter().min().unwrap(), spans.iter().max().unwrap());
        println!("SHORT {lo} {hi}");
    }
}

unsafe fn device_total() {
    // Device-wide: both processes' kernels; this process ran none.
    assert_eq!(vgpuSimDeviceKernelNs(0), 200 * MS);
    assert_eq!(vgpuSimKernelNs(0), 0);
    assert_eq!(vgpuSimDeviceKernelNs(1), 0);
    // All of it within the last second or two.
    let busy = vgpuSimDeviceBusyNs(0, vgpuSimNowNs() - 5_000 * MS);
    assert_eq!(busy, 200 * MS);
}

unsafe fn switches() {
    // The switches are neither kernel time nor busy time.
    assert_eq!(vgpuSimDeviceKernelNs(0), 200 * MS);
    println!("SWITCHES {}", vgpuSimDeviceSwitches(0));
}

/// The child side: does nothing unless run as a scenario.
#[test]
fn scenario_child() {
    let Ok(scenario) = std::env::var("VGPU_SIM_TEST_SCENARIO") else {
        return;
    };
    // SAFETY: every pointer passed is a valid local or handle.
    unsafe {
        match scenario.as_str() {
            "durations" => durations(),
            "events" => events(),
            "serialize" => serialize(),
            "event_cost" => event_cost(),
            "capture" => capture(),
            "per_thread" => per_thread(),
            "launch_ns" => launch_ns(),
            "copies" => copies(),
            "contend" => contend(),
            "device_total" => device_total(),
            "switches" => switches(),
            "ts_queue" => ts_queue(),
            "ts_late" => ts_late(),
            "ts_saturate" => ts_saturate(),
            "ts_hostbound" => ts_hostbound(),
            "ts_long" => ts_long(),
            "ts_short" => ts_short(),
            other => panic!("unknown scenario {other}"),
        }
    }
}

/// Runs two `contend` children at once with `env`; returns the time (ns) each finished (its
/// `END` line).
fn two_contenders(env: &[(&str, &str)]) -> Vec<u64> {
    let kids: Vec<_> = (0..2)
        .map(|_| {
            child("contend", env)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    kids.into_iter()
        .map(|k| {
            succeeded("contend", k.wait_with_output().unwrap())
                .lines()
                .find_map(|l| l.split_once("END ").map(|(_, v)| v))
                .expect("END line")
                .trim()
                .parse()
                .unwrap()
        })
        .collect()
}
