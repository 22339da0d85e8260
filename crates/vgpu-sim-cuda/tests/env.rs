//! Environment configuration and cross-process shared state. Each scenario runs in a child
//! process (this test binary re-run with `VGPU_SIM_TEST_SCENARIO` set), because the
//! simulator reads its configuration once per process.
use std::os::raw::c_uint;
use std::process::{Command, Stdio};
use std::ptr::null_mut;

use vgpu_sim_cuda::api_device::*;
use vgpu_sim_cuda::api_memory::*;
use vgpu_sim_cuda::introspect::*;
use vgpu_sys::cuda::*;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const RESERVE: u64 = 317_718_528;
const VARS: &[&str] = &[
    "CUDA_VISIBLE_DEVICES",
    "VGPU_SIM_DEVICES",
    "VGPU_SIM_MEM",
    "VGPU_SIM_CTX_RESERVE",
    "VGPU_SIM_STATE",
];

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

fn run(scenario: &str, env: &[(&str, &str)]) {
    let out = child(scenario, env).output().unwrap();
    assert!(
        out.status.success(),
        "scenario {scenario} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn state_path(tag: &str) -> String {
    let p = std::env::temp_dir().join(format!("vgpu-sim-state-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p.to_str().unwrap().to_string()
}

#[test]
fn visible_devices() {
    run(
        "visible",
        &[
            ("VGPU_SIM_DEVICES", "3"),
            (
                "CUDA_VISIBLE_DEVICES",
                "2,GPU-5a1e0000-0000-4000-8000-000000000000,7,1",
            ),
        ],
    );
    run("no_devices", &[("CUDA_VISIBLE_DEVICES", "")]);
}

#[test]
fn sizes_from_env() {
    run(
        "config",
        &[
            ("VGPU_SIM_DEVICES", "4"),
            ("VGPU_SIM_MEM", "1g"),
            ("VGPU_SIM_CTX_RESERVE", "1m"),
        ],
    );
}

#[test]
fn shared_state_across_processes() {
    let path = state_path("seq");
    let env = [("VGPU_SIM_STATE", path.as_str())];
    run("leak_one_gib", &env);
    run("sees_leak", &env);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn shared_state_concurrent_processes() {
    let path = state_path("conc");
    let env = [("VGPU_SIM_STATE", path.as_str())];
    let kids: Vec<_> = (0..4)
        .map(|_| {
            child("churn", &env)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for k in kids {
        let out = k.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    run("after_churn", &env);
    let _ = std::fs::remove_file(&path);
}

/// Retains device `dev`'s primary context and makes it current.
unsafe fn use_device(dev: i32) {
    let mut ctx: CUcontext = null_mut();
    // SAFETY: valid locals.
    unsafe {
        assert_eq!(cuDevicePrimaryCtxRetain(&mut ctx, dev), CUDA_SUCCESS);
        assert_eq!(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    }
}

/// The child side: does nothing unless run as a scenario.
#[test]
fn scenario_child() {
    let Ok(scenario) = std::env::var("VGPU_SIM_TEST_SCENARIO") else {
        return;
    };
    // SAFETY: every pointer passed is a valid local.
    unsafe {
        if scenario == "no_devices" {
            assert_eq!(cuInit(0), CUDA_ERROR_NO_DEVICE);
            let mut n = 0;
            assert_eq!(cuDeviceGetCount(&mut n), CUDA_ERROR_NOT_INITIALIZED);
            return;
        }
        assert_eq!(cuInit(0), CUDA_SUCCESS);
        let mut n = 0;
        assert_eq!(cuDeviceGetCount(&mut n), CUDA_SUCCESS);
        match scenario.as_str() {
            "visible" => {
                // "7" is invalid: the list stops there.
                assert_eq!(n, 2);
                assert_eq!((vgpuSimPhysicalIndex(0), vgpuSimPhysicalIndex(1)), (2, 0));
                let mut u = CUuuid::default();
                assert_eq!(cuDeviceGetUuid(&mut u, 0), CUDA_SUCCESS);
                assert_eq!(u.bytes[15], 2);
                use_device(0);
                let mut p: CUdeviceptr = 0;
                assert_eq!(cuMemAlloc_v2(&mut p, MIB as usize), CUDA_SUCCESS);
                assert_eq!(vgpuSimDeviceUsed(2), RESERVE + MIB);
                assert_eq!(vgpuSimDeviceUsed(0), 0);
            }
            "config" => {
                assert_eq!(n, 4);
                let mut t: usize = 0;
                assert_eq!(cuDeviceTotalMem_v2(&mut t, 3), CUDA_SUCCESS);
                assert_eq!(t as u64, GIB);
                use_device(3);
                assert_eq!(vgpuSimDeviceUsed(3), MIB);
                let mut p: CUdeviceptr = 0;
                assert_eq!(
                    cuMemAlloc_v2(&mut p, (GIB - MIB + 1) as usize),
                    CUDA_ERROR_OUT_OF_MEMORY
                );
                assert_eq!(cuMemAlloc_v2(&mut p, (GIB - MIB) as usize), CUDA_SUCCESS);
                let (mut f, mut t): (c_uint, c_uint) = (1, 1);
                assert_eq!(cuMemGetInfo(&mut f, &mut t), CUDA_SUCCESS);
                assert_eq!((f as u64, t as u64), (0, GIB));
            }
            "leak_one_gib" => {
                use_device(1);
                let mut p: CUdeviceptr = 0;
                assert_eq!(cuMemAlloc_v2(&mut p, GIB as usize), CUDA_SUCCESS);
                // Exits without freeing: the simulator keeps the bytes charged.
            }
            "sees_leak" => {
                assert_eq!(vgpuSimDeviceUsed(1), RESERVE + GIB);
                assert_eq!(vgpuSimProcessUsed(1), 0);
                use_device(1);
                let (mut f, mut t) = (0usize, 0usize);
                assert_eq!(cuMemGetInfo_v2(&mut f, &mut t), CUDA_SUCCESS);
                assert_eq!(f as u64, 16 * GIB - 2 * RESERVE - GIB);
                let mut p: CUdeviceptr = 0;
                assert_eq!(cuMemAlloc_v2(&mut p, f + 1), CUDA_ERROR_OUT_OF_MEMORY);
                assert_eq!(cuMemAlloc_v2(&mut p, f), CUDA_SUCCESS);
                assert_eq!(vgpuSimDeviceUsed(1), 16 * GIB);
            }
            "churn" => {
                use_device(0);
                let mut ptrs = Vec::new();
                for _ in 0..200 {
                    let mut p: CUdeviceptr = 0;
                    assert_eq!(cuMemAlloc_v2(&mut p, MIB as usize), CUDA_SUCCESS);
                    ptrs.push(p);
                }
                for p in ptrs.drain(..100) {
                    assert_eq!(cuMemFree_v2(p), CUDA_SUCCESS);
                }
                assert_eq!(vgpuSimProcessUsed(0), RESERVE + 100 * MIB);
            }
            "after_churn" => {
                assert_eq!(vgpuSimDeviceUsed(0), 4 * (RESERVE + 100 * MIB));
            }
            other => panic!("unknown scenario {other}"),
        }
    }
}
