//! Single-process tests: creation, validation errors, limits, status, HAMi view.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::sync::Arc;

use vgpu_policy::ledger::Ledger;
use vgpu_region::layout::{FILE_SIZE, HAMI_MAGIC, VGPU_OFFSET};
use vgpu_region::{DeviceInit, ErrorKind, LimitKind, Location, Region, RegionError};

mod common;
use common::{GIB, MIB, dev};

fn fresh() -> (tempfile::TempDir, Location) {
    let dir = tempfile::tempdir().unwrap();
    let loc = Location::private(dir.path().join("region"));
    let (r, c) = Region::open_or_create(&loc, &[dev("GPU-a", Some(GIB))]).unwrap();
    assert!(c.is_empty());
    drop(r);
    (dir, loc)
}

fn reopen_err(loc: &Location) -> RegionError {
    let e = Region::open_existing(loc).unwrap_err();
    let again = Region::open_or_create(loc, &[dev("GPU-a", Some(GIB))]).unwrap_err();
    assert_eq!(e.to_string(), again.to_string());
    assert!(
        e.to_string().contains(&loc.path.display().to_string()),
        "{e}"
    );
    e
}

fn poke(loc: &Location, offset: usize, bytes: &[u8]) {
    let f = OpenOptions::new().write(true).open(&loc.path).unwrap();
    f.write_all_at(bytes, offset as u64).unwrap();
}

#[test]
fn creates_private_file_and_validates_on_reopen() {
    let (_d, loc) = fresh();
    let md = fs::metadata(&loc.path).unwrap();
    assert_eq!(md.len(), FILE_SIZE as u64);
    assert_eq!(md.mode() & 0o777, 0o600);
    let r = Region::open_existing(&loc).unwrap();
    assert_eq!(r.slot(), None);
    let s = r.snapshot();
    assert_eq!(s.devices.len(), 1);
    assert_eq!(s.devices[0].uuid, "GPU-a");
    assert_eq!(s.devices[0].limit, Some(GIB));
    assert_eq!(s.devices[0].free, Some(GIB));
    assert!(s.processes.is_empty());
}

#[test]
fn wrong_hami_magic() {
    let (_d, loc) = fresh();
    poke(&loc, 0, &1234i32.to_le_bytes());
    let e = reopen_err(&loc);
    assert!(
        matches!(e.kind, ErrorKind::NotHami { magic: 1234, .. }),
        "{e}"
    );
}

#[test]
fn wrong_hami_major() {
    let (_d, loc) = fresh();
    poke(&loc, 4, &2i32.to_le_bytes());
    let e = reopen_err(&loc);
    assert!(matches!(e.kind, ErrorKind::NotHami { major: 2, .. }), "{e}");
}

#[test]
fn wrong_vgpu_magic() {
    let (_d, loc) = fresh();
    poke(&loc, VGPU_OFFSET, b"NOTVGPU!");
    let e = reopen_err(&loc);
    assert!(matches!(e.kind, ErrorKind::BadMagic { .. }), "{e}");
    assert!(e.to_string().contains("not a vgpu region"), "{e}");
}

#[test]
fn wrong_layout_version() {
    let (_d, loc) = fresh();
    poke(&loc, VGPU_OFFSET + 8, &7u32.to_le_bytes());
    let e = reopen_err(&loc);
    assert!(
        matches!(
            e.kind,
            ErrorKind::WrongVersion {
                found: 7,
                expected: vgpu_region::layout::LAYOUT_VERSION
            }
        ),
        "{e}"
    );
}

#[test]
fn truncated_file() {
    let (_d, loc) = fresh();
    OpenOptions::new()
        .write(true)
        .open(&loc.path)
        .unwrap()
        .set_len(2_500_000)
        .unwrap();
    let e = reopen_err(&loc);
    assert!(
        matches!(
            e.kind,
            ErrorKind::WrongSize {
                found: 2_500_000,
                ..
            }
        ),
        "{e}"
    );
    // Cut to HAMi-core's size, it reads as HAMi-core's file: a monitor-only opener refuses it
    // (a process adopts it, see `tests/hami.rs`).
    OpenOptions::new()
        .write(true)
        .open(&loc.path)
        .unwrap()
        .set_len(2_008_953)
        .unwrap();
    let e = Region::open_existing(&loc).unwrap_err();
    assert!(
        matches!(
            e.kind,
            ErrorKind::WrongSize {
                found: 2_008_953,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn corrupted_header_fails_checksum() {
    let (_d, loc) = fresh();
    poke(&loc, VGPU_OFFSET + 16, &1u64.to_le_bytes()); // total_size
    let e = reopen_err(&loc);
    assert!(matches!(e.kind, ErrorKind::BadChecksum { .. }), "{e}");
    assert!(e.to_string().contains("corrupted"), "{e}");
}

#[test]
fn world_writable_private_file_is_refused() {
    let (_d, loc) = fresh();
    fs::set_permissions(&loc.path, fs::Permissions::from_mode(0o666)).unwrap();
    let e = reopen_err(&loc);
    assert!(matches!(e.kind, ErrorKind::Insecure(_)), "{e}");
    assert!(e.to_string().contains("writable by others"), "{e}");
}

#[test]
fn group_writable_private_directory_is_refused() {
    let (d, loc) = fresh();
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o770)).unwrap();
    let e = reopen_err(&loc);
    assert!(e.to_string().contains("directory"), "{e}");
}

#[test]
fn foreign_owner_private_file_is_refused() {
    let (_d, loc) = fresh();
    // Only root can give a file away; elsewhere this case cannot be set up.
    if std::os::unix::fs::chown(&loc.path, Some(54321), None).is_err() {
        eprintln!("skipped: not root");
        return;
    }
    let e = reopen_err(&loc);
    assert!(e.to_string().contains("owned by uid 54321"), "{e}");
}

#[test]
fn missing_file_for_open_existing() {
    let dir = tempfile::tempdir().unwrap();
    let e = Region::open_existing(&Location::private(dir.path().join("none"))).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Io { .. }), "{e}");
}

#[test]
fn shared_file_is_0666_despite_umask() {
    let dir = tempfile::tempdir().unwrap();
    let loc = Location::shared(dir.path().join("x.cache"));
    let (r, _) = Region::open_or_create(&loc, &[dev("GPU-a", None)]).unwrap();
    assert_eq!(fs::metadata(&loc.path).unwrap().mode() & 0o777, 0o666);
    drop(r);
    // The directory must hold only the file (HAMi's monitor checks).
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn first_creator_sets_limits_and_later_conflicts_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let loc = Location::private(dir.path().join("region"));
    let (a, c) = Region::open_or_create(&loc, &[dev("GPU-a", Some(GIB))]).unwrap();
    assert!(c.is_empty());
    let (b, c) = Region::open_or_create(
        &loc,
        &[
            DeviceInit {
                uuid: "GPU-a".into(),
                limit: Some(2 * GIB),
                sm_limit: Some(50),
            },
            dev("GPU-b", None),
        ],
    )
    .unwrap();
    assert_eq!(c.len(), 2);
    assert_eq!(c[0].kind, LimitKind::Memory);
    assert_eq!((c[0].requested, c[0].region), (Some(2 * GIB), Some(GIB)));
    assert_eq!(c[1].kind, LimitKind::Sm);
    assert!(c[0].to_string().contains("GPU-a"), "{}", c[0]);
    assert_ne!(a.slot(), b.slot());
    let s = a.snapshot();
    assert_eq!(s.devices.len(), 2);
    assert_eq!(s.devices[1].limit, None);
    assert_eq!(s.processes.len(), 2);
    assert_eq!(s.processes[0].pid, std::process::id());
}

#[test]
fn two_attachments_share_one_budget_and_limits_change_live() {
    let dir = tempfile::tempdir().unwrap();
    let loc = Location::private(dir.path().join("region"));
    let devs = [dev("GPU-a", Some(GIB)), dev("GPU-b", None)];
    let a = Arc::new(Region::open_or_create(&loc, &devs).unwrap().0);
    let b = Arc::new(Region::open_or_create(&loc, &devs).unwrap().0);
    // Process b sees the devices in the other order.
    let la = a.ledger(&["GPU-a".into(), "GPU-b".into(), "GPU-zzz".into()]);
    let lb = b.ledger(&["GPU-b".into(), "GPU-a".into()]);
    assert_eq!(la.try_charge(0, 600 * MIB), Ok(()));
    let d = lb.try_charge(1, 600 * MIB).unwrap_err();
    assert_eq!((d.used, d.limit, d.requested), (600 * MIB, GIB, 600 * MIB));
    assert_eq!(lb.try_charge(1, 424 * MIB), Ok(()));
    assert_eq!(la.used(0), GIB);
    assert_eq!(lb.process_used(1), 424 * MIB);
    assert_eq!(la.process_used(0), 600 * MIB);
    // Unlimited device and unknown device.
    assert_eq!(lb.try_charge(0, 100 * GIB), Ok(()));
    assert_eq!(la.used(1), 100 * GIB);
    assert_eq!(la.limit(2), None);
    assert_eq!(la.try_charge(2, u64::MAX), Ok(()));
    // Lower the limit below use: nothing revoked, charges refused until usage falls.
    a.set_limit("GPU-a", Some(512 * MIB)).unwrap();
    assert_eq!(lb.limit(1), Some(512 * MIB));
    assert!(la.try_charge(0, 1).is_err());
    la.release(0, 600 * MIB);
    assert_eq!(la.try_charge(0, 88 * MIB), Ok(()));
    assert!(la.try_charge(0, 1).is_err());
    lb.set_limit(1, None);
    assert_eq!(la.try_charge(0, 10 * GIB), Ok(()));
    la.force_charge(0, 5);
    assert!(a.set_limit("GPU-nope", None).is_err());
    // Detaching b releases what it held.
    let before = la.used(0);
    drop(lb);
    Arc::try_unwrap(b).unwrap().detach();
    assert_eq!(la.used(0), before - 424 * MIB);
    assert_eq!(la.used(1), 0);
}

#[test]
fn hami_view_is_published() {
    let dir = tempfile::tempdir().unwrap();
    let loc = Location::shared(dir.path().join("c.cache"));
    let r = Arc::new(
        Region::open_or_create(&loc, &[dev("GPU-a", Some(GIB)), dev("GPU-b", None)])
            .unwrap()
            .0,
    );
    let l = r.ledger(&["GPU-b".into()]);
    l.try_charge(0, 300 * MIB).unwrap();
    l.release(0, 100 * MIB);
    let slot = r.slot().unwrap();
    let bytes = fs::read(&loc.path).unwrap();
    let i32_at = |o: usize| i32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap());
    assert_eq!(i32_at(0), HAMI_MAGIC);
    assert_eq!(i32_at(4), 1);
    assert_eq!(i32_at(8), 2);
    assert_eq!(u64_at(56), 2);
    assert_eq!(&bytes[64..70], b"GPU-a\0");
    assert_eq!(&bytes[64 + 96..64 + 96 + 6], b"GPU-b\0");
    assert_eq!(u64_at(1600), GIB);
    assert_eq!(u64_at(1608), 0);
    let p = 1856 + slot * 1960;
    assert_eq!(i32_at(p), std::process::id().cast_signed());
    assert_eq!(i32_at(p + 1928), 1);
    let used_b = p + 8 + 64; // used[1]
    assert_eq!(u64_at(used_b + 16), 200 * MIB); // data
    assert_eq!(u64_at(used_b + 32), 200 * MIB); // total
    assert_eq!(i32_at(2_008_896), i32::try_from(slot + 1).unwrap()); // procnum
    drop(l);
    Arc::try_unwrap(r).unwrap().detach();
    let bytes = fs::read(&loc.path).unwrap();
    let i32_at = |o: usize| i32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
    assert_eq!(i32_at(p + 1928), 0);
    assert_eq!(i32_at(p), 0);
    assert!(bytes[p..p + 1960].iter().all(|&b| b == 0));
    assert_eq!(i32_at(2_008_896), 0);
}

/// `cargo test -p vgpu-region --release --test region -- --ignored --nocapture cost`
#[test]
#[ignore = "timing, prints ns per operation"]
fn cost_of_try_charge_and_release() {
    let dir = tempfile::tempdir().unwrap();
    let loc = Location::private(dir.path().join("region"));
    let r = Arc::new(
        Region::open_or_create(&loc, &[dev("GPU-a", Some(GIB))])
            .unwrap()
            .0,
    );
    // A few other attached processes' worth of slots to scan.
    let others: Vec<_> = (0..7)
        .map(|_| {
            Region::open_or_create(&loc, &[dev("GPU-a", Some(GIB))])
                .unwrap()
                .0
        })
        .collect();
    let l = r.ledger(&["GPU-a".into()]);
    const N: u32 = 1_000_000;
    for _ in 0..1000 {
        l.try_charge(0, MIB).unwrap();
        l.release(0, MIB);
    }
    let t = std::time::Instant::now();
    for _ in 0..N {
        l.try_charge(0, 1024).unwrap();
    }
    let charge = t.elapsed() / N;
    let t = std::time::Instant::now();
    for _ in 0..N {
        l.release(0, 1024);
    }
    let release = t.elapsed() / N;
    let t = std::time::Instant::now();
    for _ in 0..N / 100 {
        assert!(l.try_charge(0, 2 * GIB).is_err());
    }
    let deny = t.elapsed() / (N / 100);
    // The launch path's HAMi marks: marked already (the common case), and a read of the block.
    let t = std::time::Instant::now();
    let mut blocked = 0u32;
    for _ in 0..N {
        r.mark_launch();
        blocked += u32::from(r.launch_blocked());
    }
    let mark = t.elapsed() / N;
    assert_eq!(blocked, 0);
    eprintln!(
        "try_charge {charge:?}, release {release:?}, refused try_charge {deny:?} (includes a reap pass) ({} slots scanned), mark_launch + launch_blocked {mark:?}",
        others.len() + 1
    );
}
