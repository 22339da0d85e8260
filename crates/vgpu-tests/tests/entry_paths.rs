//! Every way a program reaches the driver gets the limit: direct linking, dlopen+dlsym,
//! cuGetProcAddress (v1 and v2, several versions, per-thread-stream flag), and libcudart's way
//! (fetching cuGetProcAddress through itself).
use vgpu_tests::*;

const MODES: &[&[&str]] = &[
    &["--via", "link"],
    &["--via", "dlsym"],
    &["--via", "gpa:12000:0"],
    &["--via", "gpa:13000:0"],
    &["--via", "gpa:11040:0", "--ptds"],
    &["--via", "gpa1:11030:0"],
    &["--via", "gpa1:12000:0", "--ptds"],
    &["--via", "cudart"],
    &["--via", "cudart", "--ptds"],
    &["--via", "dlsym", "--ptds"],
];

fn probe_in(mode: &[&str]) -> Probe {
    mode.iter().fold(Probe::new(), |p, a| p.arg(a))
}

#[test]
fn every_entry_path_holds_the_limit() {
    for mode in MODES {
        let r = probe_in(mode)
            .limit("1g")
            .ops(&[
                "init",
                "ctx",
                "meminfo",
                "fill:alloc:64m",
                "meminfo",
                "freeall",
                "meminfo",
            ])
            .run()
            .success();
        // The context's own reservation is charged: 1 GiB - 303 MiB is left, 11 × 64 MiB fit.
        assert_eq!(r.value("meminfo", "total"), GIB, "{mode:?}");
        assert_eq!(r.value("meminfo", "free"), GIB - SIM_CTX, "{mode:?}");
        assert_eq!(r.value("fill", "count"), 11, "{mode:?}: {}", r.stdout);
        assert_eq!(
            r.value("fill", "err"),
            2,
            "{mode:?}: denial is CUDA_ERROR_OUT_OF_MEMORY"
        );
        assert_eq!(
            r.nth_value("meminfo", 1, "free"),
            GIB - SIM_CTX - 11 * 64 * MIB,
            "{mode:?}"
        );
        assert_eq!(
            r.nth_value("meminfo", 2, "free"),
            GIB - SIM_CTX,
            "{mode:?}: frees released"
        );
    }
}

#[test]
fn stream_ordered_paths_hold_the_limit_through_every_lookup() {
    for mode in MODES {
        let r = probe_in(mode)
            .limit("1g")
            .ops(&["init", "ctx", "fill:async:64m", "meminfo"])
            .run()
            .success();
        assert_eq!(r.value("fill", "count"), 11, "{mode:?}: {}", r.stdout);
        assert_eq!(r.value("fill", "err"), 2, "{mode:?}");
    }
}

#[test]
fn without_vgpu_the_same_program_gets_the_whole_device() {
    let r = Probe::bare()
        .limit("1g")
        .ops(&["init", "ctx", "meminfo", "fill:alloc:1g"])
        .run()
        .success();
    assert_eq!(r.value("meminfo", "total"), 16 * GIB);
    assert_eq!(r.value("fill", "count"), 15, "{}", r.stdout);
}

#[test]
fn lookups_hand_back_the_variant_the_driver_would_have() {
    // Through cuGetProcAddress with the per-thread-stream flag the driver hands out
    // cuMemAllocAsync_ptsz; vgpu's hook must be that variant too (it forwards to it).
    for (mode, ptds, want, not) in [
        (
            "gpa:12000:0",
            false,
            "cuMemAllocAsync",
            "cuMemAllocAsync_ptsz",
        ),
        (
            "gpa:12000:2",
            true,
            "cuMemAllocAsync_ptsz",
            "cuMemAllocAsync",
        ),
        ("cudart", true, "cuMemAllocAsync_ptsz", "cuMemAllocAsync"),
        ("cudart", false, "cuMemAllocAsync", "cuMemAllocAsync_ptsz"),
    ] {
        let mut p = Probe::new().limit("1g").via(mode);
        if ptds {
            p = p.arg("--ptds");
        }
        let r = p
            .ops(&[
                "init",
                "ctx",
                "async:64m",
                "async:4g",
                &format!("calls:{want}"),
                &format!("calls:{not}"),
            ])
            .run()
            .success();
        assert_eq!(
            r.nth("async", 1)[..3],
            ["ERR", "async", "2"],
            "{mode}: denied"
        );
        // One call reached the driver (the denied one never did), through the right variant.
        assert_eq!(
            r.nth_value("calls", 0, "n"),
            1,
            "{mode} {want}: {}",
            r.stdout
        );
        assert_eq!(r.nth_value("calls", 1, "n"), 0, "{mode} {not}");
    }
    // The legacy ABI at an old version: cuMemAlloc (32-bit) through cuGetProcAddress.
    let r = Probe::new()
        .limit("1g")
        .via("gpa:3010:0")
        .ops(&[
            "init",
            "ctx",
            "alloc_v1:64m",
            "calls:cuMemAlloc",
            "calls:cuMemAlloc_v2",
            "alloc_v1:2000m",
        ])
        .run()
        .success();
    assert_eq!(r.nth_value("calls", 0, "n"), 1, "{}", r.stdout);
    assert_eq!(r.nth_value("calls", 1, "n"), 0);
    assert_eq!(r.nth("alloc_v1", 1)[..3], ["ERR", "alloc_v1", "2"]);
}

#[test]
fn rtld_next_lookups_of_the_program_are_not_disturbed() {
    // From the executable, RTLD_NEXT must start after the executable: at the first preloaded
    // object (libvgpu.so). If vgpu's dlsym called the real one itself, the search would start
    // after libvgpu.so and find the driver's cuInit instead.
    let r = Probe::new()
        .limit("1g")
        .via("dlsym")
        .ops(&["rtldnext"])
        .run()
        .success();
    let line = r.line("rtldnext");
    assert_eq!(line[2], "same=1", "{line:?}");
    assert!(line[3].ends_with("libvgpu.so"), "{line:?}");
}

#[test]
fn non_cuda_programs_are_untouched() {
    let out = dies_with_parent(&mut std::process::Command::new("sh"))
        .args(["-c", "echo hello; ls / > /dev/null"])
        .env("LD_PRELOAD", libvgpu())
        .env("CUDA_DEVICE_MEMORY_LIMIT", "1g")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
