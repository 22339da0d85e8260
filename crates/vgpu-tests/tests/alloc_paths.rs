//! Every allocation path counts, with its real size, and frees give it back exactly.
use vgpu_tests::*;

/// Fills with `kind` under a 1 GiB limit; returns (bytes obtained, probe run).
fn fill(kind: &str, chunk: &str) -> Run {
    Probe::new()
        .limit("1g")
        .ops(&[
            "init",
            "ctx",
            &format!("fill:{kind}:{chunk}"),
            "meminfo",
            "freeall",
            "trim",
            "meminfo",
        ])
        .run()
        .success()
}

#[test]
fn each_path_gets_what_the_context_leaves_to_within_one_allocation() {
    let budget = GIB - SIM_CTX;
    for kind in [
        "alloc",
        "managed",
        "async",
        "poolasync",
        "vmm",
        // A VMM handle released while mapped: its memory stays until it is unmapped.
        "vmmrel",
        "graphalloc",
    ] {
        let r = fill(kind, "64m");
        let got = r.value("fill", "bytes");
        assert!(got <= budget, "{kind}: {got} > {budget}\n{}", r.stdout);
        assert!(
            got + 64 * MIB > budget,
            "{kind}: only {got} of {budget}\n{}",
            r.stdout
        );
        assert_eq!(r.value("fill", "err"), 2, "{kind}: {}", r.stdout);
        assert_eq!(
            r.nth_value("meminfo", 1, "free"),
            budget,
            "{kind}: freeing everything returns the budget\n{}\n{}",
            r.stdout,
            r.stderr
        );
    }
}

#[test]
fn the_device_never_holds_more_than_the_limit() {
    // The simulated driver's own count, not vgpu's: what is physically taken.
    for kind in [
        "alloc",
        "managed",
        "async",
        "poolasync",
        "vmm",
        "vmmrel",
        "graphalloc",
        "pitch",
    ] {
        let fill = if kind == "pitch" {
            "fill:pitch:64m".to_string()
        } else {
            format!("fill:{kind}:64m")
        };
        let r = Probe::new()
            .limit("1g")
            .ops(&["init", "ctx", &fill, "fill:alloc:2m", "simused"])
            .run()
            .success();
        let used = r.value("simused", "used");
        assert!(
            used <= GIB,
            "{kind}: {used} bytes on the device\n{}",
            r.stdout
        );
        assert!(
            used > GIB - 2 * MIB - 1,
            "{kind}: the budget is used to within 2 MiB: {used}"
        );
    }
}

#[test]
fn pitch_is_charged_as_pitch_times_height() {
    // 1000-byte rows are padded to a 1024-byte pitch by the simulated driver.
    let r = Probe::new()
        .limit("1g")
        .ops(&["init", "ctx", "meminfo", "pitch:1000:4096:4", "meminfo"])
        .run()
        .success();
    let pitch = r.value("pitch", "pitch");
    assert!(pitch >= 1000);
    let before = r.value("meminfo", "free");
    let after = r.nth_value("meminfo", 1, "free");
    assert_eq!(before - after, pitch * 4096);
}

#[test]
fn arrays_are_charged_what_the_driver_reports() {
    let r = Probe::new()
        .limit("1g")
        .ops(&[
            "init",
            "ctx",
            "meminfo",
            "array:1000:1000",
            "meminfo",
            "array3d:100:100:10",
            "meminfo",
            "mipmap:512:512:4",
            "meminfo",
            "freeall",
            "meminfo",
        ])
        .run()
        .success();
    let free = |n| r.nth_value("meminfo", n, "free");
    // Charged what the driver reports (cuArrayGetMemoryRequirements, with its padding), which
    // is more than the shape alone implies.
    for (i, op) in ["array", "array3d", "mipmap"].into_iter().enumerate() {
        assert_eq!(free(i) - free(i + 1), r.value(op, "real"), "{op}");
        assert!(r.value(op, "real") > r.value(op, "size"), "{op}");
    }
    assert_eq!(free(4), free(0));
}

#[test]
fn an_array_larger_than_the_budget_is_denied() {
    let r = Probe::new()
        .limit("512m")
        .ops(&["init", "ctx", "array:16384:16384", "meminfo"])
        .run()
        .success();
    assert_eq!(r.line("array")[..3], ["ERR", "array", "2"]);
    assert_eq!(r.value("meminfo", "free"), 512 * MIB - SIM_CTX);
}

#[test]
fn a_denial_changes_nothing_and_later_allocations_still_work() {
    let r = Probe::new()
        .limit("1g")
        .ops(&[
            "init",
            "ctx",
            "alloc:512m",
            "alloc:512m",
            "meminfo",
            "free",
            "alloc:512m",
            "meminfo",
        ])
        .run()
        .success();
    assert_eq!(r.nth("alloc", 1)[..3], ["ERR", "alloc", "2"]);
    assert_eq!(r.value("meminfo", "free"), GIB - SIM_CTX - 512 * MIB);
    // The probe's `free` pops the newest successful allocation.
    assert_eq!(r.nth("alloc", 2)[0], "OK");
    assert_eq!(r.nth_value("meminfo", 1, "free"), GIB - SIM_CTX - 512 * MIB);
}

#[test]
fn unknown_pointers_are_passed_to_the_driver_unchanged() {
    let ops = ["init", "ctx", "free_bogus"];
    let with = Probe::new().limit("1g").ops(&ops).run().success();
    let without = Probe::bare().ops(&ops).run().success();
    assert_eq!(with.line("free_bogus"), without.line("free_bogus"));
    assert_ne!(with.value("free_bogus", "code"), 0);
}

#[test]
fn pool_memory_is_counted_while_the_pool_holds_it_and_released_by_trim() {
    // A pool told to keep 1 GiB at synchronisations (its release threshold) keeps what was
    // freed into it: counted while held (not ignored), released by the trim (not stale).
    let r = Probe::new()
        .limit("1g")
        .ops(&[
            "init",
            "ctx",
            "keep:1g",
            "poolasync:256m",
            "free",
            "meminfo",
            "trim",
            "meminfo",
        ])
        .run()
        .success();
    let held = r.value("meminfo", "free");
    let trimmed = r.nth_value("meminfo", 1, "free");
    // Exact values (issue 13 item 18).
    assert_eq!(held, GIB - SIM_CTX - 256 * MIB, "{}", r.stdout);
    assert_eq!(trimmed, GIB - SIM_CTX, "{}", r.stdout);
}

#[test]
fn pool_memory_a_synchronisation_gives_back_is_free_again_at_once() {
    // The default release threshold (0): a pool gives what was freed into it back to the
    // device at the next synchronisation. Its charge goes with it, for this process and for the
    // container's others (before: it stayed until a trim, or a refusal in this same process,
    // so another process of the container was refused 1.2 GiB the GPU had free).
    let region = fresh_region();
    let a = Probe::new()
        .region(&region)
        .limit("2560m")
        .ops(&[
            "init",
            "ctx",
            "async:1200m",
            "poolasync:300m",
            "freeall",
            "meminfo",
        ])
        .run()
        .success();
    assert_eq!(
        a.value("meminfo", "free"),
        2560 * MIB - SIM_CTX,
        "{}",
        a.stdout
    );
    let _holder = Reaped(
        holding(
            Probe::new().region(&region).limit("2560m"),
            &["init", "ctx", "async:1200m", "free"],
        )
        .0,
    );
    let b = Probe::new()
        .region(&region)
        .limit("2560m")
        .ops(&["init", "ctx", "alloc:1200m"])
        .run()
        .success();
    assert!(b.ok("alloc"), "{}\n{}", b.stdout, b.stderr);
}

#[test]
fn threads_racing_never_overshoot() {
    // 16 threads each take 100 MiB once; the budget after the context is exactly 10 × 100 MiB.
    let limit = format!("{}", SIM_CTX + 1000 * MIB);
    for _ in 0..5 {
        let r = Probe::new()
            .limit(&limit)
            .ops(&["init", "ctx", "threads:16:alloc:100m:1", "meminfo"])
            .run()
            .success();
        assert_eq!(r.value("threads", "ok"), 10, "{}", r.stdout);
        assert_eq!(r.value("threads", "fail"), 6);
        assert_eq!(r.value("meminfo", "free"), 0);
    }
}

#[test]
fn a_graph_whose_allocations_do_not_fit_together_is_not_launched() {
    // Three 600 MiB memory nodes of one graph under a 1.5 GiB limit: each fits beside the
    // context alone, the three do not. The launch is refused with OUT_OF_MEMORY and the device
    // never holds more than the limit (before: each node passed, the launch ran and the graph
    // pool's growth was charged afterwards, past the limit: 2.1 GiB on the device).
    let r = Probe::new()
        .limit("1536m")
        .ops(&[
            "init",
            "ctx",
            "graphallocs:3:600m",
            "meminfo",
            "graphallocs:2:500m",
        ])
        .run()
        .success();
    refused_whole_then_two_fit(&r);
    assert_eq!(
        r.value("meminfo", "free"),
        1536 * MIB - SIM_CTX,
        "{}",
        r.stdout
    );
}

/// The first `graphallocs` of `r` (three nodes under a 1.5 GiB limit) was added but refused
/// at its launch, the device holding no more than the limit; the second (two that fit) ran.
fn refused_whole_then_two_fit(r: &Run) {
    assert_eq!(r.nth_value("graphallocs", 0, "add"), 0, "{}", r.stdout);
    assert_eq!(r.nth_value("graphallocs", 0, "launch"), 2, "{}", r.stdout);
    let used = r.nth_value("graphallocs", 0, "simused");
    assert!(
        used <= 1536 * MIB,
        "{used} bytes on the device\n{}",
        r.stdout
    );
    assert_eq!(r.nth_value("graphallocs", 1, "launch"), 0, "{}", r.stdout);
}

#[test]
fn memory_nodes_in_a_child_graph_are_charged_before_the_launch() {
    // CUDA 13 lets a child graph whose ownership moved to its parent hold memory nodes. Three
    // 600 MiB nodes in a child graph under a 1.5 GiB limit: the launch is refused as for the
    // same nodes in the graph itself, and the device never holds more than the limit (before:
    // a child graph made the cost unknown, the launch ran and was charged after the fact).
    let r = Probe::new()
        .limit("1536m")
        .ops(&[
            "init",
            "ctx",
            "graphallocs:3:600m:child",
            "graphallocs:2:500m:child",
        ])
        .run()
        .success();
    // Added as a real driver takes them: moved into the parent with cuGraphAddNode.
    assert!(
        r.nth("graphallocs-child", 0).contains(&"via=move"),
        "{}",
        r.stdout
    );
    assert_eq!(
        r.nth_value("graphallocs-child", 0, "add"),
        0,
        "{}",
        r.stdout
    );
    refused_whole_then_two_fit(&r);
}

#[test]
fn memory_nodes_beside_a_conditional_node_are_charged_before_the_launch() {
    // A conditional node's bodies may hold no memory nodes (CUDA: kernels, empty nodes, child
    // graphs, memsets, memcopies and conditionals, recursively), so the graph's cost is its
    // own memory nodes': three 600 MiB nodes beside an IF node under a 1.5 GiB limit are
    // refused at the launch (before: a conditional node made the cost unknown, the launch ran
    // and was charged after the fact). The simulator refuses a memory node in a body, as
    // CUDA documents.
    let r = Probe::new()
        .limit("1536m")
        .ops(&[
            "init",
            "ctx",
            "graphallocs:3:600m:cond",
            "graphallocs:2:500m:cond",
        ])
        .run()
        .success();
    assert_eq!(r.nth_value("graphallocs-cond", 0, "add"), 0, "{}", r.stdout);
    refused_whole_then_two_fit(&r);
}

#[test]
fn a_graph_upload_is_charged_as_a_launch_is() {
    // cuGraphUpload grows the graph pools as a launch would, without running anything: three
    // 600 MiB nodes under a 1.5 GiB limit are refused at the upload and at the launch, and the
    // device never holds more than the limit (before: the upload grew the pool unchecked, and
    // the launch after it, finding the pool grown, was charged nothing).
    let r = Probe::new()
        .limit("1536m")
        .ops(&["init", "ctx", "graphallocs:3:600m:upload", "simused"])
        .run()
        .success();
    assert_eq!(r.value("graphallocs", "upload"), 2, "{}", r.stdout);
    assert_eq!(r.value("graphallocs", "launch"), 2, "{}", r.stdout);
    assert!(r.value("simused", "used") <= 1536 * MIB, "{}", r.stdout);
}

#[test]
fn a_captured_stream_ordered_allocation_is_charged_once_when_the_graph_runs() {
    // Two 400 MiB cuMemAllocAsync captured into a graph under a 1.5 GiB limit: the capture
    // allocates nothing and charges nothing; the launch charges the graph pool's 800 MiB
    // once (before: the pool's growth was charged at the capture, then the graph pool's at the
    // launch, 1.6 GiB for 800 MiB on the device).
    let r = Probe::new()
        .limit("1536m")
        .ops(&["init", "ctx", "capalloc:2:400m", "simused"])
        .run()
        .success();
    let before = r.value("capalloc", "before");
    assert_eq!(before, 1536 * MIB - SIM_CTX, "{}", r.stdout);
    assert_eq!(r.value("capalloc", "captured"), before, "{}", r.stdout);
    assert_eq!(r.value("capalloc", "launch"), 0, "{}", r.stdout);
    assert_eq!(
        r.value("capalloc", "launched"),
        before - 800 * MIB,
        "{}",
        r.stdout
    );
}

#[test]
fn a_refused_call_with_bad_arguments_gets_the_drivers_code_for_them() {
    // Arguments the driver refuses whatever the size (a NULL out-pointer, an array's too, bad
    // flags, a size off the granularity, a bad stream, a bad element size), with a size past
    // the limit: the program gets what the driver says of the arguments, as without vgpu
    // (before: OUT_OF_MEMORY, which allocators that free their cache and retry take for a
    // full GPU).
    let ops = ["init", "ctx", "badargs"];
    let bare = Probe::bare().ops(&ops).run().success();
    let limited = Probe::new().limit("2g").ops(&ops).run().success();
    let codes = |r: &Run| r.line("badargs")[2..].join(" ");
    assert_eq!(codes(&limited), codes(&bare), "{}", limited.stdout);
    assert!(
        !codes(&bare).contains("=2 ") && !codes(&bare).ends_with("=2"),
        "{}",
        bare.stdout
    );
}

#[test]
fn a_pool_destroyed_with_live_allocations_stays_charged_until_they_are_freed() {
    // The driver keeps a destroyed pool's memory until its allocations are freed. 1.2 GiB from
    // a pool, the pool destroyed, 1.2 GiB more from a new one under a 2 GiB limit: refused
    // (before: the destroy released the pool's whole charge, and three rounds put 3.6 GiB on
    // the device). Once the first allocation is freed, the same request fits.
    let r = Probe::new()
        .limit("2g")
        .ops(&[
            "init",
            "ctx",
            "poolasync:1200m",
            "pooldestroy",
            "poolasync:1200m",
            "simused",
            "freeall",
            "poolasync:1200m",
        ])
        .run()
        .success();
    assert_eq!(
        r.nth("poolasync", 1)[..3],
        ["ERR", "poolasync", "2"],
        "{}",
        r.stdout
    );
    assert!(r.value("simused", "used") <= 2 * GIB, "{}", r.stdout);
    assert_eq!(r.nth("poolasync", 2)[0], "OK", "{}", r.stdout);
}
