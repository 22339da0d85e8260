//! Unit tests of the model.
use super::*;
use crate::timeline::now_ns;

const MIB: u64 = 1 << 20;

fn model(devices: usize, mem: u64) -> Model {
    let counters: &'static [AtomicU64] =
        Box::leak((0..MAX_DEVICES).map(|_| AtomicU64::new(0)).collect());
    let timelines: &'static [DevTimeline] =
        Box::leak((0..MAX_DEVICES).map(|_| DevTimeline::new()).collect());
    let cfg = Config {
        devices,
        mem,
        ctx_reserve: 303 * MIB,
        visible: (0..devices).collect(),
        state_path: None,
        kernel_us: 10,
        launch_ns: 0,
        no_device_mempool: false,
        launch_latency_ns: 0,
        switch_ns: 0,
        ctx_create_us: 0,
        event_ns: 0,
        restart_ns: 0,
        timeslice_us: 0,
        launch_syncs: false,
        event_fails_after_ms: None,
    };
    Model::new(cfg, counters, timelines)
}

#[test]
fn timing_events_fail_to_record_once_the_configured_time_has_passed() {
    let mut m = model(1, 1 << 30);
    m.cfg.event_fails_after_ms = Some(0);
    let c = m.ctx_create(0).unwrap();
    let timing = m.event_create(Some(c), 0).unwrap();
    let plain = m.event_create(Some(c), CU_EVENT_DISABLE_TIMING).unwrap();
    assert_eq!(
        m.event_record(Some(c), timing, 0),
        Err(CUDA_ERROR_OUT_OF_MEMORY)
    );
    assert_eq!(m.event_record(Some(c), plain, 0), Ok(()));
    m.cfg.event_fails_after_ms = Some(60_000);
    assert_eq!(m.event_record(Some(c), timing, 0), Ok(()), "not yet");
}

#[test]
fn a_kernel_starts_no_earlier_than_the_launch_latency() {
    const MS: u64 = 1_000_000;
    let mut m = model(1, 1 << 30);
    m.cfg.launch_latency_ns = 50 * MS;
    let c = m.ctx_create(0).unwrap();
    let md = m.module_load(Some(c)).unwrap();
    let f = m.module_function(md, b"spin_1000us").unwrap();
    let t0 = now_ns();
    m.launch(Some(c), f, [1, 1, 1], [1, 1, 1], 0).unwrap();
    let end = m.stream_end(Some(c), 0).unwrap().at;
    let t1 = now_ns();
    assert!(
        end >= t0 + 51 * MS && end <= t1 + 51 * MS,
        "{t0} {end} {t1}"
    );
    // A second launch right behind queues after the first (the latency overlaps).
    m.launch(Some(c), f, [1, 1, 1], [1, 1, 1], 0).unwrap();
    assert_eq!(m.stream_end(Some(c), 0), Ok(Tail::at(end + MS)));
    // One process: no context switch.
    assert_eq!(m.timelines[0].switches(), (0, 0));
}

#[test]
fn array_sizes() {
    // 100 × 1 channel × 4 bytes = 400 → 512 per row, × 10 rows = 5120 → 64 KiB.
    assert_eq!(array_bytes(100, 10, 0, CU_AD_FORMAT_FLOAT, 1), Ok(64 << 10));
    assert_eq!(
        array_bytes(1024, 1024, 0, CU_AD_FORMAT_UNSIGNED_INT8, 4),
        Ok(4096 * 1024)
    );
    assert_eq!(
        array_bytes(10, 0, 0, 0x77, 1),
        Err(CUDA_ERROR_INVALID_VALUE)
    );
    assert_eq!(
        array_bytes(10, 0, 0, CU_AD_FORMAT_FLOAT, 3),
        Err(CUDA_ERROR_INVALID_VALUE)
    );
    // Levels 1024² (4 MiB), 512² (1 MiB), 256² (256 KiB).
    assert_eq!(
        mipmap_bytes(1024, 1024, 0, CU_AD_FORMAT_FLOAT, 1, 3),
        Ok((4 << 20) + (1 << 20) + (256 << 10))
    );
}

#[test]
fn contexts_and_plain_memory() {
    let mut m = model(2, 1 << 30);
    assert_eq!(
        m.mem_alloc(None, 10, false),
        Err(CUDA_ERROR_INVALID_CONTEXT)
    );
    let c = m.ctx_create(1).unwrap();
    assert_eq!(m.device_used(1), 303 * MIB);
    let a = m.mem_alloc(Some(c), 1000, false).unwrap();
    assert_eq!(a % 256, 0);
    assert_eq!(m.device_used(1), 303 * MIB + 1000);
    assert_eq!(m.address_range(a + 10), Ok((a, 1000)));
    assert_eq!(
        m.mem_alloc(Some(c), 0, false),
        Err(CUDA_ERROR_INVALID_VALUE)
    );
    assert_eq!(
        m.mem_alloc(Some(c), 1 << 30, false),
        Err(CUDA_ERROR_OUT_OF_MEMORY)
    );
    assert_eq!(m.device_used(1), 303 * MIB + 1000);
    let low = m.mem_alloc(Some(c), 4096, true).unwrap();
    assert!(low < 1 << 32);
    let low2 = m.mem_alloc(Some(c), 4096, true).unwrap();
    assert!(low2 >= low + 4096);
    m.mem_free(a).unwrap();
    assert_eq!(m.mem_free(a), Err(CUDA_ERROR_INVALID_VALUE));
    m.ctx_destroy(c).unwrap();
    assert_eq!(m.device_used(1), 0);
    assert_eq!(m.process_used(1), 0);
}

#[test]
fn primary_context() {
    let mut m = model(1, 1 << 30);
    let p1 = m.primary_retain(0).unwrap();
    let p2 = m.primary_retain(0).unwrap();
    assert_eq!(p1, p2);
    assert_eq!(m.device_used(0), 303 * MIB);
    m.mem_alloc(Some(p1), MIB, false).unwrap();
    m.primary_release(0).unwrap();
    assert_eq!(m.device_used(0), 303 * MIB + MIB);
    m.primary_release(0).unwrap();
    assert_eq!(m.device_used(0), 0);
    assert_eq!(m.primary_release(0), Err(CUDA_ERROR_INVALID_CONTEXT));
    assert_eq!(m.primary_retain(0), Ok(p1));
}

#[test]
fn pools() {
    let mut m = model(1, 1 << 30);
    let c = m.ctx_create(0).unwrap();
    let base = m.device_used(0);
    let pool = m.current_pool(0).unwrap();
    let a = m.alloc_async(Some(c), 3 * MIB, None, 0).unwrap();
    assert_eq!(m.device_used(0) - base, 4 * MIB);
    let b = m.alloc_async(Some(c), MIB, None, 0).unwrap();
    assert_eq!(m.device_used(0) - base, 4 * MIB);
    m.free_async(Some(c), a, 0).unwrap();
    assert_eq!(m.pool(pool).unwrap().used, MIB);
    assert_eq!(m.device_used(0) - base, 4 * MIB);
    m.stream_sync(Some(c), 0).unwrap();
    assert_eq!(m.device_used(0) - base, 2 * MIB);
    m.pool_set_attr(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, 64 * MIB)
        .unwrap();
    let d = m.alloc_async(Some(c), 10 * MIB, None, 0).unwrap();
    m.mem_free(d).unwrap();
    m.ctx_sync(Some(c)).unwrap();
    assert_eq!(m.pool(pool).unwrap().reserved, 12 * MIB);
    m.pool_trim_to(pool, 0).unwrap();
    assert_eq!(m.pool(pool).unwrap().reserved, 2 * MIB);
    assert_eq!(
        m.pool_get_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH),
        Ok(11 * MIB)
    );
    m.mem_free(b).unwrap();
    m.pool_trim_to(pool, 0).unwrap();
    assert_eq!(m.device_used(0), base);
    // Out of memory changes nothing.
    assert_eq!(
        m.alloc_async(Some(c), 1 << 30, None, 0),
        Err(CUDA_ERROR_OUT_OF_MEMORY)
    );
    assert_eq!(m.pool(pool).unwrap().reserved, 0);
    // A created pool, destroyed with an allocation outstanding.
    let p2 = m
        .pool_create(CUmemLocation {
            type_: CU_MEM_LOCATION_TYPE_DEVICE,
            id: 0,
        })
        .unwrap();
    let e = m.alloc_async(Some(c), MIB, Some(p2), 0).unwrap();
    m.alloc_async(Some(c), MIB, Some(p2), 0).unwrap();
    m.pool_destroy(p2).unwrap();
    assert_eq!(m.device_used(0) - base, 2 * MIB);
    m.mem_free(e).unwrap();
    assert_eq!(m.device_used(0) - base, 2 * MIB);
    assert_eq!(
        m.pool_destroy(m.default_pool(0).unwrap()),
        Err(CUDA_ERROR_INVALID_VALUE)
    );
}

#[test]
fn vmm() {
    let mut m = model(1, 1 << 30);
    let loc = CUmemLocation {
        type_: CU_MEM_LOCATION_TYPE_DEVICE,
        id: 0,
    };
    assert_eq!(m.vmm_create(MIB, loc), Err(CUDA_ERROR_INVALID_VALUE));
    let h = m.vmm_create(4 * MIB, loc).unwrap();
    assert_eq!(m.device_used(0), 4 * MIB);
    let va = m.vmm_reserve(8 * MIB, 0).unwrap();
    m.vmm_map(va, 4 * MIB, 0, h).unwrap();
    assert_eq!(m.vmm_map(va, 2 * MIB, 0, h), Err(CUDA_ERROR_INVALID_VALUE));
    m.vmm_map(va + 4 * MIB, 2 * MIB, 2 * MIB, h).unwrap();
    m.vmm_release(h).unwrap();
    assert_eq!(m.device_used(0), 4 * MIB);
    m.vmm_unmap(va, 4 * MIB).unwrap();
    assert_eq!(m.device_used(0), 4 * MIB);
    m.vmm_address_free(va, 8 * MIB).unwrap();
    assert_eq!(m.device_used(0), 0);
}

#[test]
fn graphs() {
    let mut m = model(1, 1 << 30);
    let c = m.ctx_create(0).unwrap();
    let base = m.device_used(0);
    let loc = CUmemLocation {
        type_: CU_MEM_LOCATION_TYPE_DEVICE,
        id: 0,
    };
    let g = m.graph_create();
    let (n1, p1) = m.graph_add_alloc(g, &[], loc, 3 * MIB).unwrap();
    let (_, p2) = m.graph_add_alloc(g, &[n1], loc, MIB).unwrap();
    m.graph_add_free(g, &[n1], p1).unwrap();
    let e = m.graph_instantiate(g).unwrap();
    m.graph_launch(Some(c), e, 0).unwrap();
    assert_eq!(m.device_used(0) - base, 4 * MIB);
    let gp = m.graph_pool(0).unwrap();
    assert_eq!(
        (gp.used, gp.reserved, gp.used_high),
        (MIB, 4 * MIB, 4 * MIB)
    );
    // p2 is still outstanding: relaunching fails.
    assert_eq!(m.graph_launch(Some(c), e, 0), Err(CUDA_ERROR_INVALID_VALUE));
    m.free_async(Some(c), p2, 0).unwrap();
    m.graph_launch(Some(c), e, 0).unwrap();
    assert_eq!(m.device_used(0) - base, 4 * MIB);
    m.mem_free(p2).unwrap();
    m.graph_mem_trim(0).unwrap();
    assert_eq!(m.device_used(0), base);
    // OOM: nothing happens.
    let g2 = m.graph_create();
    m.graph_add_alloc(g2, &[], loc, 1 << 30).unwrap();
    let e2 = m.graph_instantiate(g2).unwrap();
    assert_eq!(
        m.graph_launch(Some(c), e2, 0),
        Err(CUDA_ERROR_OUT_OF_MEMORY)
    );
    assert_eq!(m.graph_pool(0).unwrap().reserved, 0);
}

#[test]
fn kernel_names() {
    assert_eq!(spin_us(b"spin_50us"), Some(50));
    assert_eq!(spin_us(b"spin_0us"), Some(0));
    assert_eq!(spin_us(b"spin_us"), None);
    assert_eq!(spin_us(b"spin_5ms"), None);
    assert_eq!(spin_us(b"spin_-5us"), None);
    assert_eq!(spin_us(b"kern"), None);
}

#[test]
fn a_capture_prohibits_the_unsafe_calls_its_mode_rules_out() {
    let mut m = model(1, 1 << 30);
    let c = m.ctx_create(0).unwrap();
    let s = m.stream_create(Some(c), CU_STREAM_NON_BLOCKING, 0).unwrap();
    let other = m.stream_create(Some(c), CU_STREAM_NON_BLOCKING, 0).unwrap();
    let e = m.event_create(Some(c), 0).unwrap();
    m.event_record(Some(c), e, other).unwrap();
    let (capturing, watchdog) = (1, 2);
    // A GLOBAL capture: another thread in GLOBAL mode (the default) may not query an event, and
    // its query invalidates the capture; the same thread in RELAXED mode may.
    m.thread = capturing;
    m.capture_begin(Some(c), s, CU_STREAM_CAPTURE_MODE_GLOBAL)
        .unwrap();
    m.thread = watchdog;
    assert_eq!(m.event_query(e), Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED));
    m.thread = capturing;
    assert_eq!(
        m.capture_end(Some(c), s),
        Err(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
    );
    m.capture_begin(Some(c), s, CU_STREAM_CAPTURE_MODE_GLOBAL)
        .unwrap();
    m.thread = watchdog;
    assert_eq!(
        m.exchange_capture_mode(CU_STREAM_CAPTURE_MODE_RELAXED),
        Ok(CU_STREAM_CAPTURE_MODE_GLOBAL)
    );
    assert_eq!(m.event_query(e), Ok(()));
    assert_eq!(m.stream_query(Some(c), other), Ok(()));
    assert_eq!(
        m.exchange_capture_mode(CU_STREAM_CAPTURE_MODE_GLOBAL),
        Ok(CU_STREAM_CAPTURE_MODE_RELAXED)
    );
    m.thread = capturing;
    assert!(m.capture_end(Some(c), s).is_ok());
    // A THREAD_LOCAL capture ignores other threads, but prohibits its own thread's queries
    // unless that thread is RELAXED.
    m.capture_begin(Some(c), s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .unwrap();
    m.thread = watchdog;
    assert_eq!(m.event_query(e), Ok(()));
    m.thread = capturing;
    assert_eq!(
        m.stream_query(Some(c), other),
        Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
    );
    assert_eq!(
        m.capture_end(Some(c), s),
        Err(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
    );
    m.capture_begin(Some(c), s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .unwrap();
    m.exchange_capture_mode(CU_STREAM_CAPTURE_MODE_RELAXED)
        .unwrap();
    assert_eq!(m.event_query(e), Ok(()));
    assert!(m.capture_end(Some(c), s).is_ok());
    assert_eq!(
        m.exchange_capture_mode(3),
        Err(CUDA_ERROR_INVALID_VALUE),
        "no such mode"
    );
}

#[test]
fn timeline_streams() {
    const MS: u64 = 1_000_000;
    let mut m = model(1, 1 << 30);
    let c = m.ctx_create(0).unwrap();
    let md = m.module_load(Some(c)).unwrap();
    let f = m.module_function(md, b"spin_100000us").unwrap();
    let g = m.module_function(md, b"other").unwrap();
    assert_eq!(m.kernel_ns(f, [1, 1, 1]), 100 * MS);
    assert_eq!(m.kernel_ns(f, [133, 1, 1]), 200 * MS);
    assert_eq!(m.kernel_ns(g, [2, 2, 33]), 10_000);
    let blocking = m.stream_create(Some(c), 0, 0).unwrap();
    let nb = m.stream_create(Some(c), CU_STREAM_NON_BLOCKING, 0).unwrap();
    let t0 = now_ns();
    m.launch(Some(c), f, [1, 1, 1], [1, 1, 1], blocking)
        .unwrap();
    let end1 = m.stream_end(Some(c), blocking).unwrap().at;
    assert!(end1 >= t0 + 100 * MS);
    // The legacy stream waits for the blocking stream, not the non-blocking one.
    assert_eq!(m.stream_end(Some(c), 0), Ok(Tail::at(end1)));
    assert!(m.stream_end(Some(c), nb).unwrap().at < end1);
    // Another stream queues behind on the device.
    m.launch(Some(c), f, [1, 1, 1], [1, 1, 1], nb).unwrap();
    assert_eq!(m.stream_end(Some(c), nb), Ok(Tail::at(end1 + 100 * MS)));
    assert_eq!(m.stream_query(Some(c), nb), Err(CUDA_ERROR_NOT_READY));
    // A capturing stream queues nothing.
    m.capture_begin(Some(c), blocking, CU_STREAM_CAPTURE_MODE_GLOBAL)
        .unwrap();
    m.launch(Some(c), f, [1, 1, 1], [1, 1, 1], blocking)
        .unwrap();
    assert_eq!(m.kernels_launched(0), 2);
    let graph = m.capture_end(Some(c), blocking).unwrap();
    assert_eq!(m.graphs[&graph].nodes.len(), 1);
    // A context sync during a capture fails and invalidates it; after it, syncs work.
    assert_eq!(m.ctx_sync_begin(Some(c)), Ok(()));
    m.capture_begin(Some(c), blocking, CU_STREAM_CAPTURE_MODE_GLOBAL)
        .unwrap();
    assert_eq!(
        m.ctx_sync_begin(Some(c)),
        Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
    );
    assert_eq!(
        m.capture_end(Some(c), blocking),
        Err(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
    );
    assert_eq!(m.ctx_sync_begin(Some(c)), Ok(()));
    m.capture_begin(Some(c), blocking, CU_STREAM_CAPTURE_MODE_GLOBAL)
        .unwrap();
    assert!(
        m.capture_end(Some(c), blocking).is_ok(),
        "a new capture starts clean"
    );
    // Destroyed streams still count for the context.
    m.stream_destroy(nb).unwrap();
    assert_eq!(m.ctx_end(Some(c)), Ok(Tail::at(end1 + 100 * MS)));
    assert!(m.process_kernel_ns(0) < 100 * MS);
}

#[test]
fn arrays_and_teardown() {
    let mut m = model(1, 1 << 30);
    let c = m.ctx_create(0).unwrap();
    let base = m.device_used(0);
    let a = m
        .array_create(Some(c), 100, 10, 0, CU_AD_FORMAT_FLOAT, 1, None)
        .unwrap();
    assert_eq!(m.array_requirements(a, false, 0), Ok(64 << 10));
    assert_eq!(m.device_used(0) - base, 64 << 10);
    assert_eq!(m.array_destroy(a, true), Err(CUDA_ERROR_INVALID_HANDLE));
    m.array_create(Some(c), 100, 10, 0, CU_AD_FORMAT_FLOAT, 1, Some(2))
        .unwrap();
    m.ctx_destroy(c).unwrap();
    assert_eq!(m.device_used(0), 0);
}

#[test]
fn time_slicing_tails_resolve_across_a_long_run() {
    use crate::slicer::{SlicedDev, Slicing};
    use crate::timeline::sleep_until;
    let mut m = model(1, 1 << 30);
    m.slicing = Some(Slicing {
        devs: SlicedDev::leak_zeroed(1),
        slice_ns: 2_000_000,
    });
    let c = m.ctx_create(0).unwrap();
    let md = m.module_load(Some(c)).unwrap();
    let (long, short) = (
        m.module_function(md, b"spin_100us").unwrap(),
        m.module_function(md, b"spin_1us").unwrap(),
    );
    let (a, b) = (
        m.event_create(Some(c), 0).unwrap(),
        m.event_create(Some(c), 0).unwrap(),
    );
    m.event_record(Some(c), a, 0).unwrap();
    for _ in 0..10 {
        m.launch(Some(c), long, [1, 1, 1], [1, 1, 1], 0).unwrap();
    }
    m.event_record(Some(c), b, 0).unwrap();
    // More pieces than the model keeps ends of (and than a queue holds: launches wait).
    for _ in 0..5000 {
        m.launch(Some(c), short, [1, 1, 1], [1, 1, 1], 0).unwrap();
    }
    loop {
        match m.ctx_due(Some(c)).unwrap() {
            Due::At(t) => break sleep_until(t),
            Due::Pending(t) => sleep_until(t.max(now_ns() + 20_000)),
        }
    }
    m.ts_tidy();
    assert!(m.ts_base(0) > 4096, "the ends were resolved and dropped");
    // b still completes when the 10th kernel did: 1 ms after a at least.
    let ms = m.event_elapsed(a, b).unwrap();
    assert!(ms >= 1.0, "{ms} ms");
    assert_eq!(m.stream_query(Some(c), 0), Ok(()));
    assert_eq!(m.process_kernel_ns(0), 10 * 100_000 + 5000 * 1000);
    assert_eq!(m.kernels_launched(0), 5010);
    // The last 4096 kernels' times are remembered, older ones not.
    let span = |m: &mut Model, i| m.kernel_times(0, i).flatten().map(|t| t.end - t.start);
    assert_eq!(span(&mut m, 5009), Some(1000));
    assert_eq!(span(&mut m, 5010 - 4096), Some(1000));
    assert_eq!(m.kernel_times(0, 9), None);
}

/// A stream held on a host word runs nothing queued after the wait until the GPU reaches the
/// wait and finds the word satisfying it; an `EQ` wait whose word was written and then moved
/// on before the stream reached it never ends (what hung the H200's ResNet loop under held
/// brackets, run 57), a `GEQ` wait does.
#[test]
fn a_stream_wait_ends_once_reached_and_satisfied_and_an_eq_wait_passed_by_never_does() {
    use std::sync::atomic::AtomicU32;
    const MS: u64 = 1_000_000;
    for (flags, ends) in [
        (CU_STREAM_WAIT_VALUE_EQ, false),
        (CU_STREAM_WAIT_VALUE_GEQ, true),
    ] {
        let mut m = model(1, 1 << 30);
        let c = m.ctx_create(0).unwrap();
        let md = m.module_load(Some(c)).unwrap();
        let f = m.module_function(md, b"spin_20000us").unwrap();
        let word_at = m.host_alloc(None, 64).unwrap();
        // SAFETY: the model owns the allocation at `word_at` (64 bytes, word-aligned) until
        // it is freed, which this test never does; it holds `AtomicU32`s.
        let word = unsafe { &*(word_at as *const AtomicU32) };
        // 20 ms of work queued, then the wait, then a kernel behind it.
        m.launch(Some(c), f, [1, 1, 1], [1, 1, 1], 0).unwrap();
        m.stream_wait_value(Some(c), 0, word_at, 1, flags).unwrap();
        m.launch(Some(c), f, [1, 1, 1], [1, 1, 1], 0).unwrap();
        // Released at once, then moved on (a later hold's release), long before the stream
        // reaches the wait.
        word.store(1, Ordering::SeqCst);
        m.release_waits();
        word.store(2, Ordering::SeqCst);
        assert_eq!(m.stream_query(Some(c), 0), Err(CUDA_ERROR_NOT_READY));
        crate::timeline::sleep_until(now_ns() + 25 * MS);
        m.release_waits();
        let end = m.stream_end(Some(c), 0).unwrap().at;
        if ends {
            assert!(
                end > now_ns(),
                "the kernel behind the wait was queued when it ended"
            );
        } else {
            assert!(
                matches!(m.stream_due(Some(c), 0), Ok(Due::Pending(_))),
                "an EQ wait passed by still holds the stream"
            );
        }
    }
}
