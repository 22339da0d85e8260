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
            .ops(&["init", "ctx", "meminfo", "fill:alloc:64m", "meminfo", "freeall", "meminfo"])
            .run()
            .success();
        // The context's own reservation is charged: 1 GiB - 303 MiB is left, 11 × 64 MiB fit.
        assert_eq!(r.value("meminfo", "total"), GIB, "{mode:?}");
        assert_eq!(r.value("meminfo", "free"), GIB - SIM_CTX, "{mode:?}");
        assert_eq!(r.value("fill", "count"), 11, "{mode:?}: {}", r.stdout);
        assert_eq!(r.value("fill", "err"), 2, "{mode:?}: denial is CUDA_ERROR_OUT_OF_MEMORY");
        assert_eq!(r.nth_value("meminfo", 1, "free"), GIB - SIM_CTX - 11 * 64 * MIB, "{mode:?}");
        assert_eq!(r.nth_value("meminfo", 2, "free"), GIB - SIM_CTX, "{mode:?}: frees released");
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
