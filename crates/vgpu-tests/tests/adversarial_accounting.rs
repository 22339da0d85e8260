//! Accounting corner cases that once went wrong (issue 13 items 8 and 9).
use vgpu_tests::*;

#[test]
fn stream_ordered_allocations_are_charged_when_the_driver_cannot_name_the_pool() {
    // cuDeviceGetMemPool fails: vgpu cannot learn what the pool reserves, so it charges the
    // requested size (fail closed), and gives it back when the memory is freed.
    let r = Probe::new()
        .limit("1g")
        .env("VGPU_SIM_NO_DEVICE_MEMPOOL", "1")
        .ops(&[
            "init",
            "ctx",
            "fill:async:64m",
            "meminfo",
            "freeall",
            "meminfo",
            "alloc:512m",
        ])
        .run()
        .success();
    let room = GIB - SIM_CTX;
    assert_eq!(
        r.value("fill", "bytes"),
        room / (64 * MIB) * 64 * MIB,
        "{}",
        r.stdout
    );
    assert_eq!(r.nth_value("meminfo", 1, "free"), room, "{}", r.stdout);
}

#[test]
fn memory_of_a_destroyed_context_is_released_while_another_context_lives() {
    // The primary context and a created one on the device; 1 GiB allocated in the created one,
    // which is destroyed: the driver freed that memory, the budget gets it back (before:
    // records did not say which context they were made in, so with the primary alive they
    // stayed charged for good, and a later cuMemFree of the dead pointer failed).
    let r = Probe::new()
        .limit("3g")
        .ops(&[
            "init",
            "ctx",
            "ctxcreate",
            "alloc:1g",
            "ctxdestroy",
            "ctx",
            "meminfo",
        ])
        .run()
        .success();
    assert_eq!(
        r.value("meminfo", "free"),
        3 * GIB - SIM_CTX,
        "{}\n{}",
        r.stdout,
        r.stderr
    );
}

#[test]
fn memory_freed_with_a_dead_context_is_no_longer_charged() {
    // The driver frees a context's allocations with it (cuCtxDestroy, the last primary release,
    // cudaDeviceReset): a service that starts over per job must get its budget back.
    for (make, kill) in [("ctxcreate", "ctxdestroy"), ("ctx", "ctxdestroy")] {
        let r = Probe::new()
            .limit("1g")
            .ops(&[
                "init",
                make,
                "alloc:512m",
                "pitch:1024:1024:4",
                kill,
                make,
                "meminfo",
                "alloc:512m",
            ])
            .run()
            .success();
        assert_eq!(
            r.value("meminfo", "free"),
            GIB - SIM_CTX,
            "{make}: {}",
            r.stdout
        );
    }
}
