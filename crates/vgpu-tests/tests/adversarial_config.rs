//! Configuration corner cases that once went wrong (issue 13 items 15 and 16).
use vgpu_tests::*;

#[test]
fn a_per_device_zero_means_no_limit_on_that_device() {
    // README: `0` means no limit. A per-device 0 is no limit on that device, not the global.
    let run = |dev: u32| {
        Probe::new()
            .limit("3g")
            .env("CUDA_DEVICE_MEMORY_LIMIT_1", "0")
            .ops(&["--device", &dev.to_string(), "init", "ctx", "meminfo"])
            .run()
            .success()
            .value("meminfo", "total")
    };
    assert_eq!(run(0), 3 * GIB);
    assert_eq!(run(1), 16 * GIB);
}

#[test]
fn nvml_views_and_cuda_processes_number_devices_as_the_container_does() {
    // Per-index limits number the container's devices as NVML does (issue 13 item 16),
    // whatever CUDA_VISIBLE_DEVICES says; the driver ends "1,bogus,0" at its first invalid
    // entry, so the CUDA process sees physical GPU 1 alone, as its device 0, with `_1`'s
    // limit. A process that never initialised CUDA (nvidia-smi) shows the same per GPU.
    let p = Probe::new()
        .env("CUDA_VISIBLE_DEVICES", "1,bogus,0")
        .env("CUDA_DEVICE_MEMORY_LIMIT_0", "2g")
        .env("CUDA_DEVICE_MEMORY_LIMIT_1", "1g");
    let r = p.clone().ops(&["--device", "0", "nvml"]).run().success();
    assert_eq!(r.value("nvml", "total"), 2 * GIB, "{}", r.stdout);
    let r = p.clone().ops(&["--device", "1", "nvml"]).run().success();
    assert_eq!(r.value("nvml", "total"), GIB, "{}", r.stdout);
    let r = p.ops(&["init", "ctx", "meminfo"]).run().success();
    assert_eq!(r.value("meminfo", "total"), GIB, "{}", r.stdout);
}

#[test]
fn the_resolved_plan_is_logged_once_at_info_level() {
    let r = Probe::new()
        .limit("2g")
        .env("LIBCUDA_LOG_LEVEL", "3")
        .env("CUDA_DEVICE_SM_LIMIT_1", "0")
        .env("VGPU_NODE_DIR", "/nonexistent/vgpu-node")
        .ops(&["init", "ctx", "meminfo"])
        .run()
        .success();
    let plans: Vec<&str> = r.stderr.lines().filter(|l| l.contains("plan: ")).collect();
    assert_eq!(plans.len(), 1, "{}", r.stderr);
    for part in [
        "Enforce",
        "memory limit all 2 GiB",
        "device 1 none",
        "node dir /nonexistent/vgpu-node",
    ] {
        assert!(plans[0].contains(part), "{part}: {}", plans[0]);
    }
    // At the default level nothing is printed.
    let r = Probe::new()
        .limit("2g")
        .ops(&["init", "ctx"])
        .run()
        .success();
    assert!(!r.stderr.contains("plan: "), "{}", r.stderr);
}
