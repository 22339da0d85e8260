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

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn dev(uuid: &str, limit: Option<u64>) -> DeviceInit {
    DeviceInit {
        uuid: uuid.into(),
        limit,
        sm_limit: None,
    }
}

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
    assert!(ledger.try_charge(0, MIB).is_err(), "a cut-off process charged");
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
