//! Configuration: HAMi-compatible variables, bad values, pass-through.
use vgpu_tests::*;

#[test]
fn size_forms_all_mean_the_same() {
    for v in ["1g", "1024m", "1048576k", "1073741824", "1G", "1Gi", "1GiB"] {
        let r = Probe::new()
            .limit(v)
            .ops(&["init", "ctx", "meminfo"])
            .run()
            .success();
        assert_eq!(r.value("meminfo", "total"), GIB, "{v}");
    }
}

#[test]
fn a_bad_value_fails_cuda_initialisation_with_one_clear_line() {
    for (var, v) in [
        ("CUDA_DEVICE_MEMORY_LIMIT", "12zz"),
        ("CUDA_DEVICE_MEMORY_LIMIT", "-5g"),
        ("CUDA_DEVICE_MEMORY_LIMIT", "abc"),
        ("CUDA_DEVICE_MEMORY_LIMIT", "1.5.g"),
        ("CUDA_DEVICE_MEMORY_LIMIT", "99999999999999999999999"),
        ("CUDA_DEVICE_MEMORY_LIMIT_1", "4x"),
        ("CUDA_DISABLE_CONTROL", "maybe"),
    ] {
        let r = Probe::new()
            .env(var, v)
            .ops(&["init", "ctx", "alloc:1m"])
            .run()
            .success();
        assert_eq!(r.line("init")[0], "ERR", "{var}={v}: {}", r.stdout);
        let lines: Vec<&str> = r.stderr.lines().filter(|l| l.contains(var)).collect();
        assert_eq!(lines.len(), 1, "{var}={v}: stderr was:\n{}", r.stderr);
        assert!(lines[0].contains(v), "{}", lines[0]);
        assert_eq!(r.line("ctx")[0], "ERR");
        assert_eq!(r.line("alloc")[0], "ERR");
    }
}

#[test]
fn a_bad_value_of_a_setting_that_is_no_limit_is_ignored_with_one_line() {
    // HAMi-core reads what it can of these and goes on; so does vgpu, with one warning: a typo
    // in the log level HAMi passes through must not stop every CUDA program of a pod (before:
    // cuInit failed). The limit holds.
    for (var, v) in [
        ("LIBCUDA_LOG_LEVEL", "debug"),
        ("GPU_CORE_UTILIZATION_POLICY", "none"),
        ("CUDA_TASK_PRIORITY", "high"),
        ("ACTIVE_OOM_KILLER", "enable"),
    ] {
        let r = Probe::new()
            .limit("1g")
            .env(var, v)
            .ops(&["init", "ctx", "alloc:2g", "alloc:1m"])
            .run()
            .success();
        assert_eq!(r.line("init")[0], "OK", "{var}={v}: {}", r.stdout);
        assert_eq!(r.line("alloc")[..3], ["ERR", "alloc", "2"], "{var}={v}");
        assert_eq!(r.nth("alloc", 1)[0], "OK", "{var}={v}");
        let lines: Vec<&str> = r.stderr.lines().filter(|l| l.contains(var)).collect();
        assert_eq!(lines.len(), 1, "{var}={v}: stderr was:\n{}", r.stderr);
        assert!(lines[0].contains("ignored"), "{}", lines[0]);
    }
}

#[test]
fn without_a_limit_every_value_is_the_drivers() {
    let ops = [
        "init", "ctx", "meminfo", "totalmem", "nvml", "alloc:1g", "meminfo", "nvml",
    ];
    let with = Probe::new().ops(&ops).run().success();
    let without = Probe::bare().ops(&ops).run().success();
    assert_eq!(
        with.lines()
            .iter()
            .filter(|l| !l.contains("ptr="))
            .collect::<Vec<_>>(),
        without
            .lines()
            .iter()
            .filter(|l| !l.contains("ptr="))
            .collect::<Vec<_>>()
    );
    assert!(with.stderr.is_empty(), "{}", with.stderr);
}

#[test]
fn disable_control_passes_everything_through() {
    let r = Probe::new()
        .limit("1g")
        .env("CUDA_DISABLE_CONTROL", "true")
        .ops(&["init", "ctx", "meminfo", "fill:alloc:1g"])
        .run()
        .success();
    assert_eq!(r.value("meminfo", "total"), 16 * GIB);
    assert_eq!(r.value("fill", "count"), 15);
}

#[test]
fn zero_means_no_limit_as_in_hami() {
    let r = Probe::new()
        .limit("0")
        .ops(&["init", "ctx", "meminfo"])
        .run()
        .success();
    assert_eq!(r.value("meminfo", "total"), 16 * GIB);
}

#[test]
fn the_first_denial_prints_one_line_with_the_figures() {
    let r = Probe::new()
        .limit("2g")
        .ops(&[
            "init",
            "ctx",
            "alloc:800m",
            "alloc:800m",
            "alloc:900m",
            "alloc:900m",
        ])
        .run()
        .success();
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", r.stderr);
    let l = lines[0];
    assert_eq!(r.nth("alloc", 2)[..3], ["ERR", "alloc", "2"]);
    assert!(l.contains("900 MiB") && l.contains("2 GiB"), "{l}");
    assert!(
        l.contains("1.86 GiB"),
        "what is in use (303 MiB context + 1600 MiB): {l}"
    );
    assert!(l.contains("CUDA_DEVICE_MEMORY_LIMIT"), "{l}");
}

#[test]
fn log_level_zero_silences_the_denial_but_not_a_config_error() {
    let r = Probe::new()
        .limit("1g")
        .env("LIBCUDA_LOG_LEVEL", "0")
        .ops(&["init", "ctx", "alloc:2g"])
        .run()
        .success();
    assert_eq!(r.line("alloc")[..3], ["ERR", "alloc", "2"]);
    assert!(r.stderr.is_empty(), "{}", r.stderr);
    let r = Probe::new()
        .limit("zz")
        .env("LIBCUDA_LOG_LEVEL", "0")
        .ops(&["init"])
        .run();
    assert!(
        r.stderr.contains("CUDA_DEVICE_MEMORY_LIMIT"),
        "{}",
        r.stderr
    );
}
