//! Per-device limits, device identity under CUDA_VISIBLE_DEVICES, and every view of memory.
use vgpu_tests::*;

#[test]
fn per_device_limits_apply_to_their_own_device() {
    for (dev, want) in [(0, GIB), (1, 2 * GIB)] {
        let r = Probe::new()
            .env("CUDA_DEVICE_MEMORY_LIMIT_0", "1g")
            .env("CUDA_DEVICE_MEMORY_LIMIT_1", "2g")
            .ops(&[
                "--device",
                &dev.to_string(),
                "init",
                "ctx",
                "meminfo",
                "totalmem",
                "fill:alloc:64m",
            ])
            .run()
            .success();
        assert_eq!(r.value("meminfo", "total"), want, "device {dev}");
        assert_eq!(r.line("totalmem")[2], want.to_string());
        assert_eq!(
            r.value("fill", "bytes"),
            (want - SIM_CTX) / (64 * MIB) * 64 * MIB
        );
    }
}

#[test]
fn a_per_device_limit_overrides_the_global_one_and_other_devices_keep_the_global() {
    let run = |dev: u32| {
        Probe::new()
            .limit("3g")
            .env("CUDA_DEVICE_MEMORY_LIMIT_1", "1g")
            .ops(&["--device", &dev.to_string(), "init", "ctx", "meminfo"])
            .run()
            .success()
            .value("meminfo", "total")
    };
    assert_eq!(run(0), 3 * GIB);
    assert_eq!(run(1), GIB);
}

#[test]
fn a_limit_on_one_device_leaves_the_other_untouched() {
    let r = Probe::new()
        .env("CUDA_DEVICE_MEMORY_LIMIT_1", "1g")
        .ops(&["--device", "0", "init", "ctx", "meminfo", "fill:alloc:4g"])
        .run()
        .success();
    assert_eq!(r.value("meminfo", "total"), 16 * GIB);
    assert_eq!(r.value("fill", "count"), 3);
}

#[test]
fn limits_follow_the_containers_device_index_under_visible_devices() {
    // Issue 13 item 16: `_<i>` numbers the container's devices as NVML does, whatever
    // CUDA_VISIBLE_DEVICES says. The program sees physical GPU 1 as its device 0:
    // CUDA_DEVICE_MEMORY_LIMIT_1 applies to it (and _0 would not).
    let p = Probe::new()
        .env("CUDA_VISIBLE_DEVICES", "1")
        .env("CUDA_DEVICE_MEMORY_LIMIT_1", "1g");
    // Ordinal 0 (physical 1) is limited; NVML's device 0 is physical 0, untouched.
    let r = p
        .clone()
        .ops(&["init", "ctx", "meminfo", "alloc:100m", "nvml"])
        .run()
        .success();
    assert_eq!(r.value("meminfo", "total"), GIB, "{}", r.stdout);
    assert_eq!(r.value("nvml", "total"), 16 * GIB, "{}", r.stdout);
    // NVML's device 1 is physical 1: it shows the limit.
    let r = p
        .clone()
        .ops(&["--device", "1", "init", "nvml"])
        .run()
        .success();
    assert_eq!(r.value("nvml", "total"), GIB, "{}", r.stdout);
    // A process that never initialised CUDA (nvidia-smi) numbers them the same way.
    let r = p.clone().ops(&["--device", "1", "nvml"]).run().success();
    assert_eq!(r.value("nvml", "total"), GIB, "{}", r.stdout);
    let r = p.ops(&["--device", "0", "nvml"]).run().success();
    assert_eq!(r.value("nvml", "total"), 16 * GIB, "{}", r.stdout);
    // _0 names physical GPU 0, which this program does not see: its device is unlimited.
    let r = Probe::new()
        .env("CUDA_VISIBLE_DEVICES", "1")
        .env("CUDA_DEVICE_MEMORY_LIMIT_0", "1g")
        .ops(&["init", "ctx", "meminfo"])
        .run()
        .success();
    assert_eq!(r.value("meminfo", "total"), 16 * GIB, "{}", r.stdout);
}

#[test]
fn nvml_shows_the_limit_and_what_vgpu_counts() {
    let r = Probe::new()
        .limit("4g")
        .ops(&["init", "ctx", "alloc:1g", "nvml", "nvml2", "totalmem"])
        .run()
        .success();
    for op in ["nvml", "nvml2"] {
        assert_eq!(r.value(op, "total"), 4 * GIB, "{op}");
        assert_eq!(r.value(op, "used"), SIM_CTX + GIB, "{op}");
        assert_eq!(r.value(op, "free"), 4 * GIB - SIM_CTX - GIB, "{op}");
    }
    assert_eq!(r.line("totalmem")[2], (4 * GIB).to_string());
}

#[test]
fn a_limit_above_the_physical_memory_shows_the_physical_memory() {
    let r = Probe::new()
        .limit("64g")
        .ops(&["init", "ctx", "meminfo", "totalmem"])
        .run()
        .success();
    assert_eq!(r.value("meminfo", "total"), 16 * GIB);
    assert_eq!(r.line("totalmem")[2], (16 * GIB).to_string());
}
