//! The region under corruption and scale (issue 24): stale words left by an earlier run, a
//! commit that never finishes, and the cost of housekeeping with many processes.
//!
//! Each test names the issue item it covers.

use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use vgpu_policy::ledger::{Denied, DenyReason, Ledger};
use vgpu_region::layout::{self, Device, Layout, Proc};
use vgpu_region::protocol::SLOT_BITS;
use vgpu_region::{Location, Region};

mod common;
use common::{GIB, MIB, dev};

fn shared() -> (tempfile::TempDir, Location) {
    let dir = tempfile::tempdir().unwrap();
    let loc = Location::shared(dir.path().join("region.cache"));
    (dir, loc)
}

/// Writes `value` at `offset` of the region file (what a stray write, a fuzzer or a tenant does).
fn poke(loc: &Location, offset: usize, value: u64) {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&loc.path)
        .unwrap();
    f.write_all_at(&value.to_ne_bytes(), offset as u64).unwrap();
}

fn device_offset(d: usize) -> usize {
    std::mem::offset_of!(Layout, devices) + d * size_of::<Device>()
}

fn version_offset(d: usize) -> usize {
    device_offset(d) + std::mem::offset_of!(Device, version)
}

fn proc_offset(slot: usize) -> usize {
    std::mem::offset_of!(Layout, procs) + slot * size_of::<Proc>()
}

fn pending_offset(slot: usize, d: usize) -> usize {
    proc_offset(slot) + std::mem::offset_of!(Proc, pending) + 8 * d
}

fn used_offset(slot: usize, d: usize) -> usize {
    proc_offset(slot) + std::mem::offset_of!(Proc, used) + 8 * d
}

/// A version word whose last committer is `slot`.
fn naming(slot: usize) -> u64 {
    (7 << SLOT_BITS) | (slot as u64 + 1)
}

/// Runs `f` on a thread and waits for it at most `secs` seconds: a charge that hangs fails the
/// test instead of hanging it (the spinning thread ends with the test binary).
fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs)).ok()
}

/// Item 1: a region whose version word names a FREE slot with a non-zero `pending` (one stray
/// byte in a file left by an earlier run) used to make the next run's first charge spin for
/// ever. The next run, and a live run beside it, charge at once.
#[test]
fn a_stale_pending_word_of_a_free_slot_does_not_hang_a_charge() {
    let (_d, loc) = shared();
    let (r, _) = Region::open_or_create(&loc, &[dev("GPU-a", Some(GIB))]).unwrap();
    drop(r);
    poke(&loc, version_offset(0), naming(7));
    poke(&loc, pending_offset(7, 0), 1);
    // A fresh run (nobody attached).
    let l2 = loc.clone();
    let fresh = within(30, move || {
        let (r, _) = Region::open_or_create(&l2, &[dev("GPU-a", Some(GIB))]).unwrap();
        let r = Arc::new(r);
        let l = r.ledger(&["GPU-a".to_owned()]);
        let got = l.try_charge(0, 100 * MIB);
        (got, r)
    });
    let (got, live) = fresh.expect("the fresh run's first charge hung");
    assert_eq!(got, Ok(()));
    // A live run: the stray word appears while a process is attached (no scrub can help).
    poke(&loc, version_offset(0), naming(9));
    poke(&loc, pending_offset(9, 0), 3);
    let l3 = loc.clone();
    let joined = within(30, move || {
        let (r, _) = Region::open_or_create(&l3, &[dev("GPU-a", Some(GIB))]).unwrap();
        let r = Arc::new(r);
        r.ledger(&["GPU-a".to_owned()]).try_charge(0, 100 * MIB)
    });
    assert_eq!(
        joined.expect("a live run's charge hung on a FREE slot's pending"),
        Ok(())
    );
    drop(live);
}

/// Item 1: usage left in FREE slots by an earlier run (a stray write, a process that raced its
/// own exit) is scrubbed when a new run starts, so it cannot shrink the new run's budget.
#[test]
fn a_fresh_run_scrubs_what_free_slots_still_hold() {
    let (_d, loc) = shared();
    let (r, _) = Region::open_or_create(&loc, &[dev("GPU-a", Some(GIB))]).unwrap();
    drop(r);
    poke(&loc, used_offset(11, 0), 600 * MIB);
    poke(&loc, pending_offset(12, 0), 5);
    // The stale slots are past the high-water mark no more: make the scan reach them.
    let hw =
        std::mem::offset_of!(Layout, header) + std::mem::offset_of!(layout::Header, high_water);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&loc.path)
        .unwrap();
    f.write_all_at(&13u32.to_ne_bytes(), hw as u64).unwrap();
    let (r, _) = Region::open_or_create(&loc, &[dev("GPU-a", Some(GIB))]).unwrap();
    let r = Arc::new(r);
    assert_eq!(r.used_index(0), 0, "a FREE slot's stale usage was counted");
    assert_eq!(r.ledger(&["GPU-a".to_owned()]).try_charge(0, GIB), Ok(()));
}

/// Item 1: a commit that never finishes (its process stopped between its two stores, or a
/// corrupt `pending` of a live slot) makes charges fail closed within a bound, saying why,
/// instead of spinning for ever; once the word clears, charges go through again.
#[test]
fn a_commit_that_stays_pending_fails_closed_within_a_bound() {
    let (_d, loc) = shared();
    let (a, _) = Region::open_or_create(&loc, &[dev("GPU-a", Some(GIB))]).unwrap();
    let a_slot = a.slot().unwrap();
    poke(&loc, version_offset(0), naming(a_slot));
    poke(&loc, pending_offset(a_slot, 0), 1);
    let l2 = loc.clone();
    let t0 = std::time::Instant::now();
    let got = within(60, move || {
        let (b, _) = Region::open_or_create(&l2, &[dev("GPU-a", Some(GIB))]).unwrap();
        let b = Arc::new(b);
        let l = b.ledger(&["GPU-a".to_owned()]);
        (l.try_charge(0, 10 * MIB), l)
    });
    let (got, l) = got.expect("the charge waited without bound");
    let waited = t0.elapsed();
    match got {
        Err(Denied {
            reason: DenyReason::Stalled,
            requested,
            ..
        }) => assert_eq!(requested, 10 * MIB),
        other => panic!("expected a stalled refusal, got {other:?}"),
    }
    assert!(
        waited >= Duration::from_millis(500),
        "gave up after {waited:?}"
    );
    poke(&loc, pending_offset(a_slot, 0), 0);
    assert_eq!(l.try_charge(0, 10 * MIB), Ok(()));
    drop(a);
}
