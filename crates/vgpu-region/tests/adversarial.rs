//! The region against a hostile or unlucky neighbour (issue 13): files truncated, renamed or
//! replaced under a live process, read-only readers, limits of a finished run, tenants raising
//! their own limits, planted symlinks and restrictive umasks.
//!
//! Each test names the issue item it covers.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::sync::Arc;

use vgpu_policy::ledger::Ledger;
use vgpu_region::{DeviceInit, Location, Region};

mod common;
use common::{GIB, MIB, dev, run_child};

fn shared() -> (tempfile::TempDir, Location) {
    let dir = tempfile::tempdir().unwrap();
    let loc = Location::shared(dir.path().join("region.cache"));
    (dir, loc)
}

/// Item 4: truncating the region under a live process does not SIGBUS it (the test process
/// would die); the process is cut off and refuses every charge; readers read zeroes.
#[test]
fn a_region_truncated_in_use_faults_nobody_and_fails_closed() {
    let (_d, loc) = shared();
    let (r, _) = Region::open_or_create(&loc, &[dev("GPU-a", Some(GIB))]).unwrap();
    let r = Arc::new(r);
    let ledger = r.ledger(&["GPU-a".to_owned()]);
    ledger.try_charge(0, 100 * MIB).unwrap();
    let reader = Region::open_existing(&loc).unwrap();
    let ro = Region::open_read_only(&loc).unwrap();
    assert!(!r.is_broken());
    fs::OpenOptions::new()
        .write(true)
        .open(&loc.path)
        .unwrap()
        .set_len(0)
        .unwrap();
    // Each of these touches the truncated mapping.
    assert!(
        ledger.try_charge(0, MIB).is_err(),
        "a cut-off process charged"
    );
    assert!(r.is_broken());
    assert!(r.broken_reason().unwrap().contains("truncated"));
    let _ = reader.snapshot();
    assert!(reader.is_broken());
    let _ = ro.snapshot();
    assert!(ro.is_broken());
    ledger.release(0, 100 * MIB);
    r.reap_dead();
    drop(ledger);
    drop(r);
}

/// Item 7: a region renamed (or replaced) while in use is noticed at the next reap pass, and the
/// process then refuses charges instead of living on a budget nobody else sees.
#[test]
fn a_region_renamed_in_use_fails_closed() {
    let (d, loc) = shared();
    let (r, _) = Region::open_or_create(&loc, &[dev("GPU-a", Some(GIB))]).unwrap();
    let r = Arc::new(r);
    let ledger = r.ledger(&["GPU-a".to_owned()]);
    ledger.try_charge(0, 100 * MIB).unwrap();
    fs::rename(&loc.path, d.path().join("moved")).unwrap();
    // A newcomer creates a fresh file at the path: a second budget for it alone.
    let (other, _) = Region::open_or_create(&loc, &[dev("GPU-a", Some(GIB))]).unwrap();
    r.reap_dead();
    assert!(r.is_broken());
    assert!(r.broken_reason().unwrap().contains("no longer names"));
    assert!(ledger.try_charge(0, MIB).is_err());
    drop(other);
}

/// The exporter's opening: read-only file and mapping, no lock descriptor, nothing written.
#[test]
fn a_read_only_region_opens_from_a_read_only_file() {
    let (_d, loc) = shared();
    let (r, _) = Region::open_or_create(&loc, &[dev("GPU-a", Some(GIB))]).unwrap();
    let r = Arc::new(r);
    r.ledger(&["GPU-a".to_owned()])
        .try_charge(0, 10 * MIB)
        .unwrap();
    fs::set_permissions(&loc.path, fs::Permissions::from_mode(0o444)).unwrap();
    let before = fs::metadata(&loc.path).unwrap().mtime_nsec();
    let ro = Region::open_read_only(&loc).unwrap();
    assert_eq!(ro.reap_dead(), 0);
    assert!(ro.claim_slot().is_err());
    let s = ro.snapshot();
    assert_eq!(s.devices[0].limit, Some(GIB));
    assert_eq!(s.devices[0].used, 10 * MIB);
    drop(ro);
    assert_eq!(fs::metadata(&loc.path).unwrap().mtime_nsec(), before);
}

/// Item 10: the limits of a run whose processes have all exited do not bind the next run; while
/// a process is attached, the region's (possibly changed) limits still win.
#[test]
fn a_new_run_takes_its_own_limits_a_live_one_keeps_the_regions() {
    let (_d, loc) = shared();
    let (first, c) = Region::open_or_create(&loc, &[dev("GPU-a", Some(GIB))]).unwrap();
    assert!(c.is_empty());
    // A second process of the same run: the region's limit wins (a conflict is reported).
    let (second, c) = Region::open_or_create(&loc, &[dev("GPU-a", Some(4 * GIB))]).unwrap();
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(second.limit_index(0), Some(GIB));
    drop(second);
    drop(first);
    // Everyone has gone: a new run with 4 GiB gets 4 GiB, no conflict.
    let (third, c) = Region::open_or_create(&loc, &[dev("GPU-a", Some(4 * GIB))]).unwrap();
    assert!(c.is_empty(), "{c:?}");
    assert_eq!(third.limit_index(0), Some(4 * GIB));
    assert_eq!(third.ceiling_index(0), Some(4 * GIB));
    // A live change (lowering) still wins for the processes that join this run.
    third.set_limit("GPU-a", Some(2 * GIB)).unwrap();
    let (fourth, _) = Region::open_or_create(&loc, &[dev("GPU-a", Some(4 * GIB))]).unwrap();
    assert_eq!(fourth.limit_index(0), Some(2 * GIB));
}

/// Item 11: the platform's limit at creation is a ceiling: a tenant may lower and restore it,
/// not raise it or remove it.
#[test]
fn a_tenant_cannot_raise_limits_above_the_platforms() {
    let (_d, loc) = shared();
    let init = [DeviceInit {
        uuid: "GPU-a".into(),
        limit: Some(GIB),
        sm_limit: Some(30),
    }];
    let (_live, _) = Region::open_or_create(&loc, &init).unwrap();
    let tenant = Region::open_existing(&loc).unwrap();
    let e = tenant.set_limit("GPU-a", Some(2 * GIB)).unwrap_err();
    assert!(e.to_string().contains("ceiling"), "{e}");
    assert!(
        e.to_string()
            .contains("2 GiB is above the platform's limit 1 GiB"),
        "{e}"
    );
    assert!(tenant.set_limit("GPU-a", None).is_err());
    assert!(tenant.set_sm_limit("GPU-a", Some(60)).is_err());
    assert!(tenant.set_sm_limit("GPU-a", None).is_err());
    assert_eq!(tenant.limit_index(0), Some(GIB));
    assert_eq!(tenant.sm_limit_index(0), Some(30));
    tenant.set_limit("GPU-a", Some(512 * MIB)).unwrap();
    tenant.set_sm_limit("GPU-a", Some(10)).unwrap();
    assert_eq!(tenant.limit_index(0), Some(512 * MIB));
    tenant.set_limit("GPU-a", Some(GIB)).unwrap();
    tenant.set_sm_limit("GPU-a", Some(30)).unwrap();
    assert_eq!(tenant.limit_index(0), Some(GIB));
    assert_eq!(tenant.sm_limit_index(0), Some(30));
}

/// A read-only reader (the exporter) cannot reap, but leaves out a process that died without
/// detaching: its slot lock is free (tested with `F_OFD_GETLK` on the read-only descriptor).
#[test]
fn a_read_only_reader_leaves_out_the_unreaped_dead() {
    let (_d, loc) = shared();
    let (live, _) = Region::open_or_create(&loc, &[dev("GPU-a", Some(GIB))]).unwrap();
    let live = Arc::new(live);
    live.ledger(&["GPU-a".to_owned()])
        .try_charge(0, 10 * MIB)
        .unwrap();
    // A child (this binary re-executed) that charges 20 MiB and exits without detaching.
    run_child("dying_child", "VGPU_ADVERSARIAL_CHILD", &loc.path);
    let ro = Region::open_read_only(&loc).unwrap();
    let s = ro.snapshot();
    assert_eq!(s.devices[0].used, 10 * MIB, "{s:?}");
    assert_eq!(s.processes.len(), 1, "{s:?}");
}

/// The child of `a_read_only_reader_leaves_out_the_unreaped_dead` (a no-op otherwise).
#[test]
fn dying_child() {
    let Some(path) = std::env::var_os("VGPU_ADVERSARIAL_CHILD") else {
        return;
    };
    let loc = Location::shared(std::path::PathBuf::from(path));
    let (r, _) = Region::open_or_create(&loc, &[dev("GPU-a", Some(GIB))]).unwrap();
    let r = Arc::new(r);
    r.ledger(&["GPU-a".to_owned()])
        .try_charge(0, 20 * MIB)
        .unwrap();
    // Exit without detaching: the slot stays until someone reaps it.
    std::mem::forget(r);
    std::process::exit(0);
}

/// Item 1 (the mechanism): a node token file truncated by anyone (it is 0666) does not SIGBUS
/// the processes that map it: its mapping is guarded like the region's.
#[test]
fn a_truncated_node_token_faults_nobody() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("GPU-a.sched");
    let t = vgpu_region::node::NodeToken::open(&path).unwrap();
    t.acquire();
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(0)
        .unwrap();
    t.heartbeat();
    t.release();
    t.acquire();
    let now = vgpu_region::sys::monotonic_ns();
    assert_eq!(t.others_waiting(now, &mut Vec::new()), 0);
    t.release();
}
