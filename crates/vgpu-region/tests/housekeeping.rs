//! Housekeeping at scale (issue 24 item 6): what N processes of one container cost, counted in
//! slot-lock system calls on a virtual clock. Every attachment here is its own open file
//! description and slot, as a process is.

use std::time::Duration;

use vgpu_region::{Location, Region};

mod common;
use common::{GIB, dev, run_child};

const MS: u64 = 1_000_000;
/// A virtual monotonic clock's start (any value far from 0).
const T0: u64 = 1_000_000 * 1_000 * MS;

fn shared() -> (tempfile::TempDir, Location) {
    let dir = tempfile::tempdir().unwrap();
    let loc = Location::shared(dir.path().join("region.cache"));
    (dir, loc)
}

fn attach(loc: &Location, n: usize) -> Vec<Region> {
    (0..n)
        .map(|_| {
            Region::open_or_create(loc, &[dev("GPU-a", Some(GIB))])
                .unwrap()
                .0
        })
        .collect()
}

fn calls(rs: &[Region]) -> u64 {
    rs.iter().map(Region::lock_calls).sum()
}

/// Runs every attachment's housekeeping as its thread would, each on its own schedule (the
/// delay each round returns), for `secs` virtual seconds from `start`; returns the end time.
fn run(rs: &[Region], start: u64, secs: u64) -> u64 {
    let end = start + secs * 1000 * MS;
    let mut due = vec![start; rs.len()];
    loop {
        let (i, &t) = due.iter().enumerate().min_by_key(|&(_, &t)| t).unwrap();
        if t >= end {
            return end;
        }
        let next = rs[i].housekeep(t);
        assert!(next >= Duration::from_millis(100), "{next:?}");
        due[i] = t + u64::try_from(next.as_nanos()).unwrap();
    }
}

/// 64 idle processes for 10 s: one reaper probes the others' slots once per pass (at most
/// 4 passes a second), every other process makes no lock call once it has seen the reaper.
/// Before: every process probed every live slot every 250 ms, 64 × 63 × 40 calls.
#[test]
fn housekeeping_is_one_reaper_pass_per_period_not_one_per_process() {
    const N: usize = 64;
    let (_d, loc) = shared();
    let rs = attach(&loc, N);
    let before = calls(&rs);
    let end = run(&rs, T0, 10);
    let made = calls(&rs) - before;
    // 40 passes of 63 probes, and each process's first try of the lease.
    let bound = 41 * (N as u64 - 1) + 2 * N as u64;
    println!("{N} processes, 10 virtual s: {made} lock calls (bound {bound}; before: 161,280)");
    assert!(made <= bound, "{made} lock calls in 10 s (bound {bound})");
    assert_eq!(rs.iter().filter(|r| r.is_reaper()).count(), 1);
    // Steady state: another 10 s costs the reaper's passes alone.
    let before = calls(&rs);
    run(&rs, end, 10);
    let made = calls(&rs) - before;
    assert!(
        made <= 41 * (N as u64 - 1),
        "{made} lock calls in the next 10 s"
    );
}

/// The pass's period grows with the slots it probes: a container of 1,024 processes is
/// probed about once a second, so its housekeeping stays O(N) calls a second.
#[test]
fn a_larger_container_is_probed_less_often() {
    const N: usize = 512;
    let (_d, loc) = shared();
    let rs = attach(&loc, N);
    let end = run(&rs, T0, 2);
    let before = calls(&rs);
    run(&rs, end, 10);
    let made = calls(&rs) - before;
    println!("{N} processes, 10 virtual s in steady state: {made} lock calls");
    // At most 1 pass a second at 512 slots (and each process's first try of the lease).
    assert!(made <= 11 * N as u64, "{made} lock calls in 10 s");
}

/// When the reaper goes (exits, killed: its lease is its lock and dies with it), another
/// process takes over (within its rounds, at the latest once it has seen the beat stop for
/// STALE_NS), and the dead are still reaped.
#[test]
fn another_process_takes_over_when_the_reaper_goes() {
    let (_d, loc) = shared();
    let mut rs = attach(&loc, 4);
    let t = run(&rs, T0, 2);
    let reaper = rs.iter().position(Region::is_reaper).expect("a reaper");
    rs.remove(reaper);
    // A process that dies without leaving: its slot must be reaped.
    run_child("dying_child", "VGPU_HOUSEKEEPING_CHILD", &loc.path);
    let live = |r: &Region| r.snapshot().processes.len();
    assert_eq!(live(&rs[0]), 4, "the dead child is not attached");
    run(&rs, t, 200);
    assert_eq!(rs.iter().filter(|r| r.is_reaper()).count(), 1);
    assert_eq!(live(&rs[0]), 3, "the dead child was not reaped");
}

/// A process blocked in `wait_for_lease` takes the lease as soon as the reaper goes, with no
/// round of its own: idle processes need not wake to watch the reaper.
#[test]
fn a_blocked_waiter_takes_the_lease_when_the_reaper_goes() {
    let (_d, loc) = shared();
    let mut rs = attach(&loc, 2);
    rs[0].housekeep(T0);
    assert!(rs[0].is_reaper());
    let waiter = rs.pop().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        let got = waiter.wait_for_lease();
        tx.send(got).unwrap();
        waiter
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "took a held lease"
    );
    drop(rs);
    assert_eq!(rx.recv_timeout(Duration::from_secs(20)), Ok(true));
    assert!(t.join().unwrap().is_reaper());
}

/// The child of `another_process_takes_over_when_the_reaper_goes` (a no-op otherwise).
#[test]
fn dying_child() {
    let Some(path) = std::env::var_os("VGPU_HOUSEKEEPING_CHILD") else {
        return;
    };
    let loc = Location::shared(std::path::PathBuf::from(path));
    let (r, _) = Region::open_or_create(&loc, &[dev("GPU-a", Some(GIB))]).unwrap();
    std::mem::forget(r);
    std::process::exit(0);
}

/// The reaper publishes every live process's SM utilisation (HAMi's `deviceUtil[].sm`), from
/// the GPU time each reported to its slot: no process wakes to publish its own.
#[test]
fn the_reaper_publishes_every_processs_sm_utilisation() {
    use std::os::unix::fs::FileExt;
    use std::sync::Arc;
    use vgpu_region::layout::{Hami, HamiProc, HamiUtil, Layout};
    let (_d, loc) = shared();
    let rs: Vec<Arc<Region>> = attach(&loc, 2).into_iter().map(Arc::new).collect();
    let other = rs[1].ledger(&["GPU-a".to_owned()]);
    let slot = rs[1].slot().unwrap();
    let sm_util = || {
        let off = std::mem::offset_of!(Layout, hami)
            + std::mem::offset_of!(Hami, procs)
            + slot * size_of::<HamiProc>()
            + std::mem::offset_of!(HamiProc, device_util)
            + std::mem::offset_of!(HamiUtil, sm);
        let mut b = [0u8; 8];
        std::fs::File::open(&loc.path)
            .unwrap()
            .read_exact_at(&mut b, off as u64)
            .unwrap();
        u64::from_ne_bytes(b)
    };
    let mut t = T0;
    rs[0].housekeep(t);
    assert!(rs[0].is_reaper());
    // 300 ms of GPU time in each second: 30 %.
    for _ in 0..3 {
        t += 1000 * MS;
        other.add_compute(0, 300 * MS, 0, 10);
        rs[0].housekeep(t);
    }
    assert_eq!(sm_util(), 30);
    // Idle: 0.
    t += 1000 * MS;
    rs[0].housekeep(t);
    assert_eq!(sm_util(), 0);
}
