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
fn nvml_views_map_devices_to_ordinals_as_the_driver_reads_visible_devices() {
    // The driver ends CUDA_VISIBLE_DEVICES at its first invalid entry: "1,bogus,0" makes
    // physical GPU 1 ordinal 0 and nothing else visible. A process that never initialised CUDA
    // (nvidia-smi) must resolve the per-ordinal limits the same way: `_2` is no device of
    // this process, so physical GPU 0 shows its own memory, and `_0` is physical GPU 1's.
    let p = Probe::new()
        .env("CUDA_VISIBLE_DEVICES", "1,bogus,0")
        .env("CUDA_DEVICE_MEMORY_LIMIT_0", "1g")
        .env("CUDA_DEVICE_MEMORY_LIMIT_2", "2g");
    let r = p.clone().ops(&["--device", "0", "nvml"]).run().success();
    assert_eq!(r.value("nvml", "total"), 16 * GIB, "{}", r.stdout);
    let r = p.clone().ops(&["--device", "1", "nvml"]).run().success();
    assert_eq!(r.value("nvml", "total"), GIB, "{}", r.stdout);
    // A process that did initialise CUDA agrees (it sees one device, limited to 1 GiB).
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
