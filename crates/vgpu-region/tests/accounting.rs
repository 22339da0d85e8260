//! Accounting for the monitor: high-water marks, refusals, compute counters, and totals that
//! survive reaping; the live SM limit.

use std::sync::Arc;

use vgpu_policy::ledger::Ledger;
use vgpu_region::{DeviceInit, Location, Region};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn attach(loc: &Location) -> (Arc<Region>, vgpu_region::RegionLedger) {
    let dev = DeviceInit {
        uuid: "GPU-a".into(),
        limit: Some(GIB),
        sm_limit: None,
    };
    let (r, _) = Region::open_or_create(loc, &[dev]).unwrap();
    let r = Arc::new(r);
    let l = r.ledger(&["GPU-a".to_owned(), "GPU-unknown".to_owned()]);
    (r, l)
}

#[test]
fn peaks_refusals_and_compute_counters_survive_reaping() {
    let dir = tempfile::tempdir().unwrap();
    let loc = Location::private(dir.path().join("region"));
    let (r2, l2) = attach(&loc);
    l2.try_charge(0, 500 * MIB).unwrap();
    l2.release(0, 500 * MIB);
    l2.try_charge(0, 100 * MIB).unwrap();
    l2.add_compute(0, 10, 20, 1);

    // A child process charges, is refused twice, counts compute, and dies without detaching.
    // SAFETY: the child only uses the region (atomics, a few syscalls) and then `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let ok = std::panic::catch_unwind(|| {
            let (r1, l1) = attach(&loc);
            assert_ne!(r1.slot(), r2.slot());
            l1.try_charge(0, 300 * MIB).unwrap();
            assert!(l1.try_charge(0, 900 * MIB).is_err());
            assert!(l1.try_charge(0, 700 * MIB).is_err());
            l1.add_compute(0, 1_000, 200, 3);
            l1.add_compute(0, 500, 0, 1);
            l1.add_compute(1, 7, 7, 7); // no region device: ignored
            std::mem::forget(l1);
            std::mem::forget(r1);
        })
        .is_ok();
        // SAFETY: ends the child at once, as a crash would (no detach).
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert_eq!(status, 0, "child failed");

    let s = r2.snapshot();
    let d = &s.devices[0];
    assert_eq!(d.used, 400 * MIB);
    assert_eq!(d.peak, 500 * MIB);
    assert_eq!(
        (d.gpu_ns, d.throttled_ns, d.launches, d.denied),
        (1_510, 220, 5, 2)
    );
    let dead = s
        .processes
        .iter()
        .find(|p| p.pid == pid.cast_unsigned())
        .unwrap();
    assert_eq!(dead.used, [300 * MIB]);
    assert_eq!(dead.peak, [300 * MIB]);
    assert_eq!(dead.denied, [2]);
    assert_eq!(
        (dead.gpu_ns[0], dead.throttled_ns[0], dead.launches[0]),
        (1_500, 200, 4)
    );
    let me = s
        .processes
        .iter()
        .find(|p| Some(p.slot) == r2.slot())
        .unwrap();
    assert_eq!(me.peak, [500 * MIB]);
    assert_eq!(me.used, [100 * MIB]);
    assert_eq!(me.pid, std::process::id());

    // The dead child is reaped: its memory comes back, its counters stay in the totals.
    assert_eq!(r2.reap_dead(), 1);
    let s = r2.snapshot();
    assert_eq!(s.processes.len(), 1);
    let d = &s.devices[0];
    assert_eq!(d.used, 100 * MIB);
    assert_eq!(d.peak, 500 * MIB);
    assert_eq!(
        (d.gpu_ns, d.throttled_ns, d.launches, d.denied),
        (1_510, 220, 5, 2)
    );

    // r2 detaches: its counters are retired too.
    drop(l2);
    drop(r2);
    let monitor = Region::open_existing(&loc).unwrap();
    assert_eq!(monitor.slot(), None);
    let s = monitor.snapshot();
    assert!(s.processes.is_empty());
    let d = &s.devices[0];
    assert_eq!(d.used, 0);
    assert_eq!(d.peak, 500 * MIB);
    assert_eq!(
        (d.gpu_ns, d.throttled_ns, d.launches, d.denied),
        (1_510, 220, 5, 2)
    );

    // A new process starts from zero counters of its own.
    let (r3, l3) = attach(&loc);
    l3.try_charge(0, MIB).unwrap();
    let s = monitor.snapshot();
    let p = s
        .processes
        .iter()
        .find(|p| Some(p.slot) == r3.slot())
        .unwrap();
    assert_eq!((p.peak[0], p.denied[0], p.gpu_ns[0]), (MIB, 0, 0));
    assert_eq!(s.devices[0].gpu_ns, 1_510);
}

#[test]
fn sm_limit_changes_live() {
    let dir = tempfile::tempdir().unwrap();
    let loc = Location::private(dir.path().join("region"));
    let (r, l) = attach(&loc);
    assert_eq!(r.sm_limit_index(0), None);
    assert_eq!(l.sm_limit(0), None);
    let monitor = Region::open_existing(&loc).unwrap();
    monitor.set_sm_limit("GPU-a", Some(30)).unwrap();
    assert_eq!(r.sm_limit_index(0), Some(30));
    assert_eq!(l.sm_limit(0), Some(30));
    assert_eq!(l.device_index(0), Some(0));
    assert_eq!(l.device_index(1), None);
    assert_eq!(l.sm_limit(1), None);
    assert_eq!(r.snapshot().devices[0].sm_limit, Some(30));
    monitor.set_sm_limit("GPU-a", Some(100)).unwrap();
    assert_eq!(r.sm_limit_index(0), None);
    monitor.set_sm_limit("GPU-a", Some(0)).unwrap();
    assert_eq!(r.sm_limit_index(0), None);
    monitor.set_sm_limit_index(0, Some(55));
    assert_eq!(r.sm_limit_index(0), Some(55));
    monitor.set_sm_limit("GPU-a", None).unwrap();
    assert_eq!(r.sm_limit_index(0), None);
    assert!(monitor.set_sm_limit("GPU-x", Some(10)).is_err());
    assert_eq!(r.sm_limit_index(7), None);
}

/// Issue 26 item 9: a refused charge is logged in the region with what was asked, the device's
/// use and limit, what the refused process held, which process holds the most, and when;
/// newest first, the last 16 kept; a read-only monitor reads it.
#[test]
fn refusals_are_logged_with_who_holds_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let loc = Location::private(dir.path().join("region"));
    let (_big, lbig) = attach(&loc);
    let (small, lsmall) = attach(&loc);
    lbig.try_charge(0, 700 * MIB).unwrap();
    lsmall.try_charge(0, 100 * MIB).unwrap();
    let before = vgpu_region::sys::realtime_ms();
    let d = lsmall.try_charge(0, 400 * MIB).unwrap_err();
    lsmall.record_refusal(0, &d);
    // A device the region does not have is never logged.
    lsmall.record_refusal(1, &d);
    let ro = Region::open_read_only(&loc).unwrap();
    let log = ro.snapshot().refusals;
    assert_eq!(log.len(), 1, "{log:?}");
    let r = &log[0];
    assert_eq!(r.seq, 1);
    assert_eq!(r.device, 0);
    assert_eq!(r.pid, std::process::id());
    assert_eq!(
        (r.requested, r.used, r.limit, r.own),
        (400 * MIB, 800 * MIB, GIB, 100 * MIB)
    );
    assert_eq!(r.holder_pid, Some(std::process::id()));
    assert_eq!(r.holder_used, 700 * MIB);
    assert!(r.time_ms >= before && r.time_ms <= vgpu_region::sys::realtime_ms());
    // Many more: the last 16 are kept, newest first.
    for k in 1..=20u64 {
        let d = vgpu_policy::ledger::Denied::over_limit(k, 800 * MIB, GIB);
        lsmall.record_refusal(0, &d);
    }
    let log = ro.refusals();
    assert_eq!(log.len(), vgpu_region::layout::REFUSALS);
    let asked: Vec<u64> = log.iter().map(|r| r.requested).collect();
    assert_eq!(asked, (5..=20).rev().collect::<Vec<u64>>());
    assert_eq!(log[0].seq, 21);
    assert_eq!(ro.refusals_recorded(), 21);
    drop(small);
}

/// Issue 26 item 9: a neighbour that scribbles over the refusal log (any bytes, a huge head)
/// makes its entries drop out, never a crash or an out-of-bounds index, and the next refusal
/// is logged again.
#[test]
fn a_scribbled_refusal_log_is_skipped_and_written_again() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let loc = Location::private(dir.path().join("region"));
    let (_r, l) = attach(&loc);
    l.try_charge(0, 900 * MIB).unwrap();
    for _ in 0..3 {
        let d = l.try_charge(0, 200 * MIB).unwrap_err();
        l.record_refusal(0, &d);
    }
    let at = std::mem::offset_of!(vgpu_region::layout::Layout, refusals);
    let size = size_of::<vgpu_region::layout::RefusalLog>();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&loc.path)
        .unwrap();
    // Pseudo-random bytes over the whole log, head included.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let junk: Vec<u8> = (0..size)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect();
    f.write_all_at(&junk, at as u64).unwrap();
    f.write_all_at(&u64::MAX.to_le_bytes(), at as u64).unwrap();
    assert_eq!(l.region().refusals(), vec![]);
    let d = l.try_charge(0, 300 * MIB).unwrap_err();
    l.record_refusal(0, &d);
    let log = l.region().refusals();
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0].requested, 300 * MIB);
}

/// Issue 26 item 11: each process's slot names the library it runs (version and commit) and
/// whether it only observes; a later owner of the slot that stamps nothing (an earlier vgpu)
/// is not taken for it.
#[test]
fn each_process_names_its_library_for_its_own_claim_only() {
    let dir = tempfile::tempdir().unwrap();
    let loc = Location::private(dir.path().join("region"));
    let (r, _l) = attach(&loc);
    let (other, _lo) = attach(&loc);
    r.stamp_library("9.8.7 0123456789ab", true);
    let s = other.snapshot();
    let me = s
        .processes
        .iter()
        .find(|p| Some(p.slot) == r.slot())
        .unwrap();
    assert_eq!(me.library.as_deref(), Some("9.8.7 0123456789ab"));
    assert!(me.observing);
    let them = s
        .processes
        .iter()
        .find(|p| Some(p.slot) == other.slot())
        .unwrap();
    assert_eq!((them.library.as_deref(), them.observing), (None, false));
    let slot = r.slot();
    drop(_l);
    Arc::try_unwrap(r).unwrap().detach();
    // The slot's next owner stamps nothing: no library is shown for it.
    let (again, _la) = attach(&loc);
    assert_eq!(again.slot(), slot);
    let s = other.snapshot();
    let p = s
        .processes
        .iter()
        .find(|p| p.slot == slot.unwrap())
        .unwrap();
    assert_eq!((p.library.as_deref(), p.observing), (None, false));
}
