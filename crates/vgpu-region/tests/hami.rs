//! HAMi's monitor protocol on the region side (issue 12 part 1), adopting HAMi-core's own file,
//! allocating the file at creation, and a lock descriptor the program reuses (issue 13 items 3
//! and 5).
//!
//! The "monitor" here is what HAMi's node monitor does to a container's file: it maps the first
//! 2,008,952 bytes and reads or writes fields at fixed offsets (see `layout.rs`' reference
//! offsets); the tests do the same through plain `pread`/`pwrite` or a mapping of their own.

use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::Arc;

use vgpu_policy::ledger::Ledger;
use vgpu_region::layout::{FILE_SIZE, HAMI_FILE_SIZE, HAMI_MAGIC};
use vgpu_region::{ErrorKind, Location, Region, RegionLedger, sm_util_percent};

mod common;
use common::{GIB, MIB, dev};

// HAMi v1 offsets (HAMi-core's `shared_region_t`).
const SEM: u64 = 24;
const OWNER_PID: u64 = 16;
const UUIDS: u64 = 64;
const LIMIT: u64 = 1600;
const PROCS: u64 = 1856;
const PROC_SIZE: u64 = 1960;
const PROCNUM: u64 = 2_008_896;
const UTILIZATION_SWITCH: u64 = 2_008_900;
const RECENT_KERNEL: u64 = 2_008_904;
const PRIORITY: u64 = 2_008_908;
const LAST_KERNEL_TIME: u64 = 2_008_912;
/// HAMi-core's `sem_postinit` (1.2, commit e200da2), after `last_kernel_time`.
const SEM_POSTINIT: u64 = 2_008_920;
// Within a process slot.
const P_PID: u64 = 0;
const P_USED: u64 = 8; // used[dev]: context, module, data, offset, total (64 bytes each)
const P_UTIL: u64 = 1160; // deviceUtil[dev]: dec, enc, sm (48 bytes each)
const P_STATUS: u64 = 1928;

/// The tests that fork hold this, and so do the tests of what becomes of a slot's lock when its
/// descriptor is replaced: a forked child keeps a copy of every open file description (and so
/// every lock) of this test process while it lives, which those tests must control.
static FORKS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn no_other_forks() -> std::sync::MutexGuard<'static, ()> {
    FORKS.lock().unwrap_or_else(|e| e.into_inner())
}

fn attach(loc: &Location, limit: u64) -> (Arc<Region>, RegionLedger) {
    let (r, _) = Region::open_or_create(loc, &[dev("GPU-a", Some(limit))]).unwrap();
    let r = Arc::new(r);
    let l = r.ledger(&["GPU-a".to_owned()]);
    (r, l)
}

/// The monitor's view of a file: reads and writes at HAMi's offsets.
struct Monitor(File);

impl Monitor {
    fn new(path: &Path) -> Monitor {
        Monitor(
            OpenOptions::new()
                .read(true)
                .write(true)
                .open(path)
                .unwrap(),
        )
    }
    fn i32(&self, off: u64) -> i32 {
        let mut b = [0; 4];
        self.0.read_exact_at(&mut b, off).unwrap();
        i32::from_le_bytes(b)
    }
    fn i64(&self, off: u64) -> i64 {
        let mut b = [0; 8];
        self.0.read_exact_at(&mut b, off).unwrap();
        i64::from_le_bytes(b)
    }
    fn u64(&self, off: u64) -> u64 {
        let mut b = [0; 8];
        self.0.read_exact_at(&mut b, off).unwrap();
        u64::from_le_bytes(b)
    }
    fn set_i32(&self, off: u64, v: i32) {
        self.0.write_all_at(&v.to_le_bytes(), off).unwrap();
    }
    fn set_u64(&self, off: u64, v: u64) {
        self.0.write_all_at(&v.to_le_bytes(), off).unwrap();
    }
    fn proc(slot: usize) -> u64 {
        PROCS + slot as u64 * PROC_SIZE
    }
    fn used(&self, slot: usize, dev: u64) -> (u64, u64, u64) {
        let u = Self::proc(slot) + P_USED + dev * 64;
        (self.u64(u), self.u64(u + 16), self.u64(u + 32)) // context, data, total
    }
    fn sm_util(&self, slot: usize, dev: u64) -> u64 {
        self.u64(Self::proc(slot) + P_UTIL + dev * 48 + 16)
    }
}

fn now_secs() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap()
}

#[test]
fn a_new_region_starts_as_hami_core_initialises_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let loc = Location::shared(dir.path().join("c.cache"));
    let before = now_secs();
    let (r, _l) = attach(&loc, GIB);
    let after = now_secs();
    let m = Monitor::new(&loc.path);
    assert_eq!(m.i32(0), HAMI_MAGIC);
    assert_eq!(m.i32(UTILIZATION_SWITCH), 1);
    assert_eq!(r.utilization_switch(), 1);
    assert_eq!(m.i32(PRIORITY), 1);
    assert_eq!(m.i32(RECENT_KERNEL), 2);
    // The attach time, as HAMi-core's `time(NULL)` at attach.
    let t = m.i64(LAST_KERNEL_TIME);
    assert!(before <= t && t <= after, "{before} <= {t} <= {after}");
    // HAMi-core's creation lock is free: no owner, a process-shared semaphore of value 1.
    assert_eq!(m.u64(OWNER_PID), 0);
    assert_eq!(m.u64(SEM), 1);
    assert_eq!(m.u64(SEM + 8), 128);
    // And its post-init lock (before: zeroes, a semaphore of value 0, on which a HAMi-core
    // process opening the file waited 11 × 30 s in cuInit, then ran without its SM limit).
    assert_eq!(m.u64(SEM_POSTINIT), 1);
    assert_eq!(m.u64(SEM_POSTINIT + 8), 128);
}

#[test]
fn a_region_made_without_the_post_init_lock_gets_a_free_one_and_a_held_one_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let loc = Location::shared(dir.path().join("c.cache"));
    let (r, l) = attach(&loc, GIB);
    let m = Monitor::new(&loc.path);
    // As an older vgpu (or a HAMi-core before 1.2) left it: all zeroes.
    for w in 0..4 {
        m.set_u64(SEM_POSTINIT + 8 * w, 0);
    }
    drop((r, l));
    let (r, l) = attach(&loc, GIB);
    assert_eq!((m.u64(SEM_POSTINIT), m.u64(SEM_POSTINIT + 8)), (1, 128));
    // A HAMi-core process holding it (value 0, still process-shared): not touched.
    m.set_u64(SEM_POSTINIT, 0);
    drop((r, l));
    let _again = attach(&loc, GIB);
    assert_eq!((m.u64(SEM_POSTINIT), m.u64(SEM_POSTINIT + 8)), (0, 128));
}

#[test]
fn priority_is_published_and_clamped_to_what_monitors_accept() {
    let dir = tempfile::tempdir().unwrap();
    let loc = Location::shared(dir.path().join("c.cache"));
    let (r, _l) = attach(&loc, GIB);
    let m = Monitor::new(&loc.path);
    r.set_priority(0);
    assert_eq!(m.i32(PRIORITY), 0);
    r.set_priority(1);
    assert_eq!(m.i32(PRIORITY), 1);
    r.set_priority(7);
    assert_eq!(m.i32(PRIORITY), 1);
    r.set_priority(-3);
    assert_eq!(m.i32(PRIORITY), 0);
}

#[test]
fn launches_mark_recent_kernel_and_a_block_by_the_monitor_stands() {
    let dir = tempfile::tempdir().unwrap();
    let loc = Location::shared(dir.path().join("c.cache"));
    let (r, _l) = attach(&loc, GIB);
    let m = Monitor::new(&loc.path);
    // The monitor's rounds decrement it: the container went idle.
    m.set_i32(RECENT_KERNEL, 0);
    assert!(!r.launch_blocked());
    r.mark_launch();
    assert_eq!(m.i32(RECENT_KERNEL), 2);
    m.set_i32(RECENT_KERNEL, 1);
    r.mark_launch();
    assert_eq!(m.i32(RECENT_KERNEL), 2);
    // Blocked: a higher-priority container is active on the GPU. Launching must not unblock.
    m.set_i32(RECENT_KERNEL, -1);
    assert!(r.launch_blocked());
    assert_eq!(r.recent_kernel(), -1);
    r.mark_launch();
    assert_eq!(m.i32(RECENT_KERNEL), -1);
    assert!(r.launch_blocked());
    // Unblocked by the monitor: the next launch marks again.
    m.set_i32(RECENT_KERNEL, 0);
    assert!(!r.launch_blocked());
    r.mark_launch();
    assert_eq!(m.i32(RECENT_KERNEL), 2);
}

#[test]
fn the_switch_is_read_as_the_monitor_writes_it() {
    let dir = tempfile::tempdir().unwrap();
    let loc = Location::shared(dir.path().join("c.cache"));
    let (r, _l) = attach(&loc, GIB);
    let m = Monitor::new(&loc.path);
    m.set_i32(UTILIZATION_SWITCH, 0);
    assert_eq!(r.utilization_switch(), 0);
    m.set_i32(UTILIZATION_SWITCH, 1);
    assert_eq!(r.utilization_switch(), 1);
}

#[test]
fn last_kernel_time_only_moves_forward() {
    let dir = tempfile::tempdir().unwrap();
    let loc = Location::shared(dir.path().join("c.cache"));
    let (r, _l) = attach(&loc, GIB);
    let m = Monitor::new(&loc.path);
    let t0 = m.i64(LAST_KERNEL_TIME);
    r.note_kernel_time(u64::try_from(t0).unwrap() + 100);
    assert_eq!(m.i64(LAST_KERNEL_TIME), t0 + 100);
    r.note_kernel_time(u64::try_from(t0).unwrap() + 50);
    assert_eq!(m.i64(LAST_KERNEL_TIME), t0 + 100);
}

#[test]
fn sm_utilisation_is_published_per_process_and_device() {
    assert_eq!(sm_util_percent(0, 0), 0);
    assert_eq!(sm_util_percent(250, 1000), 25);
    assert_eq!(sm_util_percent(2000, 1000), 100);
    assert_eq!(sm_util_percent(u64::MAX, 1), 100);

    let dir = tempfile::tempdir().unwrap();
    let loc = Location::shared(dir.path().join("c.cache"));
    let (r, _) =
        Region::open_or_create(&loc, &[dev("GPU-a", None), dev("GPU-b", Some(GIB))]).unwrap();
    let r = Arc::new(r);
    // The process sees GPU-b as its device 0 and GPU-a as its device 1.
    let l = r.ledger(&["GPU-b".to_owned(), "GPU-a".to_owned(), "GPU-x".to_owned()]);
    let me = r.slot().unwrap();
    l.publish_sm_util(0, 37);
    l.publish_sm_util(1, 250); // clamped
    l.publish_sm_util(2, 50); // not in the region: nothing
    let m = Monitor::new(&loc.path);
    assert_eq!(m.sm_util(me, 1), 37); // region device 1 is GPU-b
    assert_eq!(m.sm_util(me, 0), 100);
    assert_eq!(m.sm_util(me, 2), 0);
}

#[test]
fn context_memory_is_published_apart_and_counted_in_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let loc = Location::shared(dir.path().join("c.cache"));
    let (r, l) = attach(&loc, GIB);
    let me = r.slot().unwrap();
    let m = Monitor::new(&loc.path);
    l.charge_context(0, 300 * MIB, true).unwrap();
    l.try_charge(0, 200 * MIB).unwrap();
    assert_eq!(m.used(me, 0), (300 * MIB, 200 * MIB, 500 * MIB));
    assert_eq!(l.used(0), 500 * MIB);
    // The budget counts the context: 600 MiB more does not fit under 1 GiB.
    assert!(l.try_charge(0, 600 * MIB).is_err());
    // A refused context charge leaves the published context as it was.
    assert!(l.charge_context(0, 600 * MIB, true).is_err());
    assert_eq!(m.used(me, 0), (300 * MIB, 200 * MIB, 500 * MIB));
    l.release_context(0, 300 * MIB);
    assert_eq!(m.used(me, 0), (0, 200 * MIB, 200 * MIB));
    assert_eq!(l.used(0), 200 * MIB);
    // A forced context charge over the limit is counted and published as context.
    l.charge_context(0, 900 * MIB, false).unwrap();
    assert_eq!(m.used(me, 0), (900 * MIB, 200 * MIB, 1100 * MIB));
}

#[test]
fn detach_at_exit_zeroes_the_whole_hami_slot() {
    let dir = tempfile::tempdir().unwrap();
    let loc = Location::shared(dir.path().join("c.cache"));
    let (r, l) = attach(&loc, GIB);
    let me = r.slot().unwrap();
    l.charge_context(0, 100 * MIB, true).unwrap();
    l.try_charge(0, 100 * MIB).unwrap();
    l.publish_sm_util(0, 40);
    let m = Monitor::new(&loc.path);
    assert_eq!(m.i32(Monitor::proc(me) + P_STATUS), 1);
    // What the preload's exit handler does (the region itself is static and never dropped).
    r.detach();
    let mut slot = vec![0u8; usize::try_from(PROC_SIZE).unwrap()];
    m.0.read_exact_at(&mut slot, Monitor::proc(me)).unwrap();
    assert!(slot.iter().all(|&b| b == 0), "HAMi slot not zeroed");
    assert_eq!(m.i32(PROCNUM), 0);
    assert_eq!(r.snapshot().devices[0].used, 0);
}

/// A file as HAMi-core 1.2 leaves it: 2,008,953 bytes, its v1 header, one device and (if
/// `proc` is given) one process slot `(pid, total bytes)`.
fn hami_core_file(path: &Path, limit: u64, procs: &[(i32, u64)]) {
    let f = File::create(path).unwrap();
    f.set_len(HAMI_FILE_SIZE as u64).unwrap();
    let m = Monitor(f);
    m.set_i32(4, 1);
    m.set_i32(8, 2);
    m.set_u64(56, 1);
    m.0.write_all_at(b"GPU-a\0", UUIDS).unwrap();
    m.set_u64(LIMIT, limit);
    m.set_i32(UTILIZATION_SWITCH, 1);
    m.set_i32(PRIORITY, 0);
    for (i, &(pid, total)) in procs.iter().enumerate() {
        let p = Monitor::proc(i);
        m.set_i32(p + P_PID, pid);
        m.set_i32(p + P_STATUS, 1);
        m.set_u64(p + P_USED + 16, total);
        m.set_u64(p + P_USED + 32, total);
    }
    m.set_i32(PROCNUM, i32::try_from(procs.len()).unwrap());
    m.set_i32(0, HAMI_MAGIC);
}

fn wait_child(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    status
}

#[test]
fn hami_core_file_is_adopted_in_place_and_its_processes_share_one_budget() {
    let _forks = no_other_forks();
    let dir = tempfile::tempdir().unwrap();
    let loc = Location::shared(dir.path().join("c.cache"));
    hami_core_file(&loc.path, 2 * GIB, &[]);
    let ino = fs::metadata(&loc.path).unwrap().ino();
    // HAMi's monitor maps the prefix and keeps the mapping.
    let monitor_file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&loc.path)
        .unwrap();
    // SAFETY: a test mapping of a file nobody truncates while it is mapped.
    let monitor_map = unsafe {
        memmap2::MmapOptions::new()
            .len(2_008_952)
            .map_mut(&monitor_file)
            .unwrap()
    };

    let (r1, l1) = attach(&loc, 2 * GIB);
    let md = fs::metadata(&loc.path).unwrap();
    assert_eq!(md.ino(), ino, "recreated instead of extended in place");
    assert_eq!(md.len(), FILE_SIZE as u64);
    l1.try_charge(0, 1536 * MIB).unwrap();

    // A second process of the container: one budget, so 1.5 GiB more is refused.
    // SAFETY: the child only uses the region (atomics, a few syscalls) and `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let code = std::panic::catch_unwind(|| {
            let (r2, l2) = attach(&loc, 2 * GIB);
            let refused = l2.try_charge(0, 1536 * MIB).is_err();
            let granted = l2.try_charge(0, 400 * MIB).is_ok();
            let total = l2.used(0);
            drop(l2);
            drop(r2);
            match (refused, granted, total == 1936 * MIB) {
                (true, true, true) => 0,
                (false, _, _) => 2,
                (_, false, _) => 3,
                _ => 4,
            }
        })
        .unwrap_or(1);
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(code) };
    }
    assert_eq!(
        wait_child(pid),
        0,
        "the second process got a budget of its own"
    );

    // HAMi's prefix is still valid, read through the monitor's own old mapping.
    let at = |o: u64| usize::try_from(o).unwrap();
    let m32 = |o: u64| i32::from_le_bytes(monitor_map[at(o)..at(o) + 4].try_into().unwrap());
    let m64 = |o: u64| u64::from_le_bytes(monitor_map[at(o)..at(o) + 8].try_into().unwrap());
    assert_eq!(m32(0), HAMI_MAGIC);
    assert_eq!(m32(4), 1);
    assert_eq!(&monitor_map[64..70], b"GPU-a\0");
    assert_eq!(m64(LIMIT), 2 * GIB);
    assert_eq!(m32(PRIORITY), 0, "HAMi-core's priority was overwritten");
    let me = r1.slot().unwrap();
    assert_eq!(m64(Monitor::proc(me) + P_USED + 32), 1536 * MIB);
    assert!(m32(PROCNUM) > 0);
    // And later openers validate it as a vgpu region.
    assert!(Region::open_existing(&loc).is_ok());
}

#[test]
fn an_adoption_that_died_midway_is_finished_by_the_next_process() {
    let dir = tempfile::tempdir().unwrap();
    let loc = Location::shared(dir.path().join("c.cache"));
    hami_core_file(&loc.path, 2 * GIB, &[]);
    // Extended, and its adopter died before writing vgpu's header.
    OpenOptions::new()
        .write(true)
        .open(&loc.path)
        .unwrap()
        .set_len(FILE_SIZE as u64)
        .unwrap();
    let (r, l) = attach(&loc, 2 * GIB);
    l.try_charge(0, GIB).unwrap();
    let m = Monitor::new(&loc.path);
    assert_eq!(m.i32(PRIORITY), 0, "HAMi-core's prefix was reinitialised");
    assert_eq!(m.used(r.slot().unwrap(), 0).2, GIB);
}

#[test]
fn adoption_leaves_live_hami_core_processes_alone_and_clears_dead_ones() {
    let _forks = no_other_forks();
    // A PID that existed and is gone: a reaped child's.
    // SAFETY: the child `_exit`s at once.
    let dead = unsafe { libc::fork() };
    if dead == 0 {
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(0) };
    }
    wait_child(dead);
    let alive = i32::try_from(std::process::id()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let loc = Location::shared(dir.path().join("c.cache"));
    hami_core_file(&loc.path, 2 * GIB, &[(alive, 100 * MIB), (dead, 200 * MIB)]);
    let (r, l) = attach(&loc, 2 * GIB);
    l.try_charge(0, 10 * MIB).unwrap();
    let me = r.slot().unwrap();
    let m = Monitor::new(&loc.path);
    assert_ne!(me, 0, "took a live HAMi-core process's slot");
    // The live HAMi-core process's slot is intact; the dead one's was cleared by the reap at
    // attach (and so was free for us to take).
    assert_eq!(m.i32(Monitor::proc(0) + P_PID), alive);
    assert_eq!(m.used(0, 0).2, 100 * MIB);
    for i in 0..4 {
        assert_ne!(m.i32(Monitor::proc(i) + P_PID), dead, "slot {i}");
    }
    assert_eq!(m.i32(Monitor::proc(me) + P_PID), alive);
    assert_eq!(m.used(me, 0).2, 10 * MIB);
    let published: u64 = (0..4).map(|i| m.used(i, 0).2).sum();
    assert_eq!(published, 110 * MIB);
    assert!(m.i32(PROCNUM) > i32::try_from(me).unwrap());
    // Detaching keeps procnum covering the live HAMi-core process.
    r.detach();
    assert_eq!(m.i32(PROCNUM), 1);
}

#[test]
fn the_whole_file_is_allocated_at_creation() {
    let dir = tempfile::tempdir().unwrap();
    let loc = Location::shared(dir.path().join("c.cache"));
    let (_r, _l) = attach(&loc, GIB);
    let md = fs::metadata(&loc.path).unwrap();
    assert_eq!(md.len(), FILE_SIZE as u64);
    // A sparse file would have only the pages written so far.
    assert!(
        md.blocks() * 512 >= FILE_SIZE as u64,
        "{} bytes allocated of {}",
        md.blocks() * 512,
        FILE_SIZE
    );
}

#[test]
fn a_region_that_cannot_be_allocated_is_refused() {
    let _forks = no_other_forks();
    let dir = tempfile::tempdir().unwrap();
    let loc = Location::shared(dir.path().join("c.cache"));
    // A child whose files may not grow past 1 MiB: the region (3 MiB) cannot be allocated.
    // SAFETY: the child sets a limit, opens the region and `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let code = std::panic::catch_unwind(|| {
            let lim = libc::rlimit {
                rlim_cur: MIB,
                rlim_max: MIB,
            };
            // SAFETY: plain system calls on values on our stack; SIGXFSZ ignored so that the
            // refused allocation is an error, not the end of the child.
            unsafe {
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &lim), 0);
            }
            match Region::open_or_create(&loc, &[dev("GPU-a", Some(GIB))]) {
                Err(e) => match e.kind {
                    ErrorKind::Io {
                        op: "posix_fallocate",
                        ..
                    } => 0,
                    _ => 2,
                },
                Ok(_) => 3,
            }
        })
        .unwrap_or(1);
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(code) };
    }
    assert_eq!(
        wait_child(pid),
        0,
        "an unallocatable region was not refused"
    );
    // Nothing half-made is left behind: the next process creates it.
    let (r, l) = attach(&loc, GIB);
    l.try_charge(0, MIB).unwrap();
    assert_eq!(r.snapshot().devices[0].used, MIB);
}

/// The descriptors of this process open on `path`.
fn fds_on(path: &Path) -> Vec<i32> {
    let path = fs::canonicalize(path).unwrap();
    fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let fd: i32 = e.file_name().to_str()?.parse().ok()?;
            (fs::read_link(e.path()).ok()? == path).then_some(fd)
        })
        .collect()
}

type Attached = (Arc<Region>, RegionLedger);

/// Two attachments of one shared region at `dir`, as two processes' (each its own open file
/// description), charged 100 and 300 MiB on device 0; and the number of the first one's lock
/// descriptor.
fn two_charged(dir: &Path) -> (Attached, Attached, i32) {
    let loc = Location::shared(dir.join("c.cache"));
    let (r1, l1) = attach(&loc, GIB);
    let fds = fds_on(&loc.path);
    assert_eq!(fds.len(), 1, "{fds:?}");
    let (r2, l2) = attach(&loc, GIB);
    l1.try_charge(0, 100 * MIB).unwrap();
    l2.try_charge(0, 300 * MIB).unwrap();
    ((r1, l1), (r2, l2), fds[0])
}

#[test]
fn a_lock_kept_by_a_copy_of_the_old_descriptor_keeps_the_slot() {
    // The program closes our lock descriptor while a child it forked (and that has not exec'ed
    // or exited yet) still holds a copy of it: our slot's lock stays with that copy, so the new
    // descriptor cannot take it. The slot is still ours and still locked: we keep it (before:
    // we forgot it, and it was reaped with our usage once the child's copy went), and take the
    // lock again at the next pass.
    let _forks = no_other_forks();
    let dir = tempfile::tempdir().unwrap();
    let ((r1, l1), (r2, _l2), lock_fd) = two_charged(dir.path());
    // SAFETY: dup(2) makes a second descriptor of the same open file description, as a
    // forked child's copy is.
    let copy = unsafe { libc::dup(lock_fd) };
    assert!(copy >= 0);
    let log = File::create(dir.path().join("log")).unwrap();
    // SAFETY: replaces descriptor `lock_fd` with a copy of the log file's, as close + open would.
    assert_eq!(unsafe { libc::dup2(log.as_raw_fd(), lock_fd) }, lock_fd);

    r1.reap_dead();
    assert_eq!(l1.process_used(0), 100 * MIB, "the slot was given up");
    r2.reap_dead();
    assert_eq!(r1.snapshot().devices[0].used, 400 * MIB);
    // The child's copy goes; our next pass takes the lock, and a reaper leaves the slot alone.
    // SAFETY: closes the copy made above.
    unsafe { libc::close(copy) };
    r1.reap_dead();
    r2.reap_dead();
    assert_eq!(
        r1.snapshot().devices[0].used,
        400 * MIB,
        "a live process was reaped"
    );
    assert_eq!(l1.process_used(0), 100 * MIB);
    drop(l1);
    drop(r1);
    // SAFETY: closes our duplicate of the log file (ours since dup2).
    unsafe { libc::close(lock_fd) };
}

#[test]
fn a_reused_lock_descriptor_never_reaps_live_processes() {
    let _forks = no_other_forks();
    let dir = tempfile::tempdir().unwrap();
    // Two attachments: each its own open file description, as two processes would have.
    let ((r1, l1), (r2, l2), lock_fd) = two_charged(dir.path());

    // The program closes the descriptors it did not open and opens a log file, which gets the
    // same number (dup2 does both at once, so no other test thread takes the number between).
    let log = File::create(dir.path().join("log")).unwrap();
    // SAFETY: replaces descriptor `lock_fd` with a copy of the log file's, as close + open would.
    assert_eq!(unsafe { libc::dup2(log.as_raw_fd(), lock_fd) }, lock_fd);

    r1.reap_dead();
    assert_eq!(r2.slot().map(|_| l2.process_used(0)), Some(300 * MIB));
    assert_eq!(
        r1.snapshot().devices[0].used,
        400 * MIB,
        "a live process was reaped"
    );
    // r1 holds its slot's lock again: r2's reaper leaves it alone.
    r2.reap_dead();
    assert_eq!(r1.snapshot().devices[0].used, 400 * MIB);
    assert_eq!(l1.process_used(0), 100 * MIB);

    // The reused number is the program's: the region neither uses nor closes it.
    drop(l1);
    drop(r1);
    // SAFETY: F_GETFD only queries the descriptor.
    let flags = unsafe { libc::fcntl(lock_fd, libc::F_GETFD) };
    assert!(flags >= 0, "closed the log file");
    // SAFETY: closes our duplicate of the log file (ours since dup2).
    unsafe { libc::close(lock_fd) };
    assert_eq!(r2.snapshot().devices[0].used, 300 * MIB);
}

/// The snapshot keeps context memory apart from buffer memory, per process and per device, as
/// `charge_context` charged it (what `vgpu metrics --names hami` serves).
#[test]
fn the_snapshot_splits_context_from_buffer_memory() {
    let dir = tempfile::tempdir().unwrap();
    let loc = vgpu_region::Location::shared(dir.path().join("r.cache"));
    let init = [vgpu_region::DeviceInit {
        uuid: "GPU-a".into(),
        limit: Some(1 << 30),
        sm_limit: None,
    }];
    let (region, _) = vgpu_region::Region::open_or_create(&loc, &init).unwrap();
    let region = std::sync::Arc::new(region);
    let ledger = region.ledger(&["GPU-a".to_owned()]);
    ledger.charge_context(0, 300 << 20, true).unwrap();
    ledger.try_charge(0, 100 << 20).unwrap();
    let s = region.snapshot();
    assert_eq!(s.devices[0].used, 400 << 20);
    assert_eq!(s.devices[0].context, 300 << 20);
    assert_eq!(s.processes[0].context, vec![300 << 20]);
    ledger.release_context(0, 300 << 20);
    let s = region.snapshot();
    assert_eq!(s.devices[0].used, 100 << 20);
    assert_eq!(s.devices[0].context, 0);
}

/// The container's identity is recorded by the first process of a run and read back by any
/// reader; later processes of the run do not change it; a region without one reads as empty.
#[test]
fn the_creators_pod_identity_is_recorded_in_the_region() {
    let dir = tempfile::tempdir().unwrap();
    let loc = vgpu_region::Location::shared(dir.path().join("r.cache"));
    let init = [vgpu_region::DeviceInit {
        uuid: "GPU-a".into(),
        limit: Some(1 << 30),
        sm_limit: None,
    }];
    let pod = vgpu_region::PodIdentity::new(
        Some("ml"),
        Some(&format!("trainer-{}", "x".repeat(240))),
        Some("pytorch"),
    );
    assert!(pod.pod.as_ref().unwrap().len() == 248);
    let (first, _) = vgpu_region::Region::open_or_create_as(&loc, &init, &pod).unwrap();
    // A second process of the run, without the variables: the creator's identity stays.
    let (_second, _) = vgpu_region::Region::open_or_create(&loc, &init).unwrap();
    let reader = vgpu_region::Region::open_read_only(&loc).unwrap();
    assert_eq!(reader.snapshot().identity, pod);
    assert_eq!(first.snapshot().identity, pod);
    let other = tempfile::tempdir().unwrap();
    let loc = vgpu_region::Location::shared(other.path().join("r.cache"));
    let (r, _) = vgpu_region::Region::open_or_create(&loc, &init).unwrap();
    assert!(r.snapshot().identity.is_empty());
}
