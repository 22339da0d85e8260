//! The region as Volcano's vGPU monitor reads it (issue 26 item 4), the way `hami.rs` checks it
//! against HAMi's monitor.
//!
//! [`Volcano`] below is a transcription of what volcano-vgpu-device-plugin's monitor does
//! (`pkg/monitor/nvidia/cudevshr.go` `loadCache`, `pkg/monitor/nvidia/v1/spec.go`, and what
//! `cmd/vgpu-monitor/metrics.go` and `feedback.go` call), at its offsets, on the bytes of the
//! file. What it relies on, and where it differs from HAMi's reader:
//!
//! * `loadCache`: a container directory with more than 2 entries is refused ("cache num not
//!   matched"); the first entry (by name, `os.ReadDir` sorts) whose name contains `.cache` and
//!   not `libvgpu.so` is the file; it must be at least 12 bytes, hold the magic 19920718 at 0,
//!   and be either exactly 1,197,897 bytes (the v0 layout) or of `majorVersion` (offset 4) 1. The
//!   whole file is mapped read-write.
//! * Its v1 `sharedRegionT` types `ownerPid` as `uint32` (HAMi-core's is 8 bytes): Go places
//!   `sem` at 20 instead of 24 and pads before `num`, so every field it reads keeps HAMi-core's
//!   offset: `num` 56 (**not clamped**: more than 16 devices would index past `uuids`), `uuids`
//!   64 (96 bytes each; the metrics take the first 40 bytes, the feedback loop keys GPUs by all
//!   96, for `i` up to 16, valid or not), `limit` 1600, `procs` 1856 (1,960 bytes each),
//!   `utilizationSwitch` 2,008,900, `recentKernel` 2,008,904, `priority` 2,008,908 (an index
//!   into a 2-element array: anything but 0 and 1 panics the monitor), `lastKernelTime`
//!   2,008,912.
//! * Its sums (`DeviceMemoryTotal`, `...ContextSize`, `...ModuleSize`, `...BufferSize`,
//!   `...Offset`, `DeviceSmUtil`) run over **all 1,024 slots**, whatever `procnum` and each
//!   slot's `status` say (HAMi's stop at `procnum` and skip `status == 0`): a slot must read
//!   zeroes as soon as its process is gone.
//! * The feedback loop writes `recentKernel` (decrements it; -1 blocks, 0 unblocks) and
//!   `utilizationSwitch`.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use vgpu_policy::ledger::Ledger;
use vgpu_region::layout::{FILE_SIZE, HAMI_MAGIC};
use vgpu_region::{DeviceInit, Location, Region, RegionLedger};

mod common;
use common::{GIB, MIB};

const V0_SIZE: u64 = 1_197_897;
const NUM: usize = 56;
const UUIDS: usize = 64;
const UUID_LEN: usize = 96;
const LIMIT: usize = 1600;
const PROCS: usize = 1856;
const PROC_SIZE: usize = 1960;
const MAX_PROCS: usize = 1024;
const P_USED: usize = 8; // used[dev]: context, module, buffer, offset, total (64 bytes each)
const P_UTIL: usize = 1160; // deviceUtil[dev]: dec, enc, sm (48 bytes each)
const UTILIZATION_SWITCH: usize = 2_008_900;
const RECENT_KERNEL: usize = 2_008_904;
const PRIORITY: usize = 2_008_908;
const LAST_KERNEL_TIME: usize = 2_008_912;

const UUID_A: &str = "GPU-5a1e0000-0000-4000-8000-00000000000a";
const UUID_B: &str = "GPU-5a1e0000-0000-4000-8000-00000000000b";

/// Volcano's monitor's view of one container directory: the bytes of the file it maps.
struct Volcano {
    data: Vec<u8>,
}

impl Volcano {
    /// `loadCache(dir)`: `Ok(None)` where Volcano finds no cache file (no `cuInit` yet).
    fn load_cache(dir: &Path) -> Result<Option<Volcano>, String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .map_err(|e| e.to_string())?
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort(); // os.ReadDir's order
        if names.len() > 2 {
            return Err("cache num not matched".into());
        }
        let Some(name) = names
            .iter()
            .find(|n| !n.contains("libvgpu.so") && n.contains(".cache"))
        else {
            return Ok(None);
        };
        let path = dir.join(name);
        let data = fs::read(&path).map_err(|e| e.to_string())?;
        if data.len() < 12 {
            return Err(format!("cache file size {} too small", data.len()));
        }
        let v = Volcano { data };
        if v.i32(0) != HAMI_MAGIC {
            return Err("cache file magic flag not matched".into());
        }
        if v.data.len() as u64 == V0_SIZE {
            return Err("read as the v0 layout".into());
        }
        if v.i32(4) != 1 {
            return Err(format!("unknown cache file version {}", v.i32(4)));
        }
        Ok(Some(v))
    }
    fn i32(&self, off: usize) -> i32 {
        i32::from_le_bytes(self.data[off..off + 4].try_into().unwrap())
    }
    fn i64(&self, off: usize) -> i64 {
        i64::from_le_bytes(self.data[off..off + 8].try_into().unwrap())
    }
    fn u64(&self, off: usize) -> u64 {
        u64::from_le_bytes(self.data[off..off + 8].try_into().unwrap())
    }
    /// `DeviceNum()`: `num`, unclamped.
    fn device_num(&self) -> u64 {
        self.u64(NUM)
    }
    /// `DeviceUUID(i)`: all 96 bytes (the feedback loop's key).
    fn uuid_field(&self, i: usize) -> &[u8] {
        &self.data[UUIDS + i * UUID_LEN..UUIDS + (i + 1) * UUID_LEN]
    }
    /// `DeviceUUID(i)[0:40]`, which the metrics need to be valid UTF-8.
    fn uuid40(&self, i: usize) -> Option<&str> {
        std::str::from_utf8(&self.uuid_field(i)[..40]).ok()
    }
    fn limit(&self, i: usize) -> u64 {
        self.u64(LIMIT + 8 * i)
    }
    /// The sum over all 1,024 slots of `used[i]`'s word `word` (0 context, 1 module, 2 buffer,
    /// 3 offset, 4 total).
    fn used_sum(&self, i: usize, word: usize) -> u64 {
        (0..MAX_PROCS)
            .map(|s| self.u64(PROCS + s * PROC_SIZE + P_USED + i * 64 + word * 8))
            .sum()
    }
    /// `DeviceSmUtil(i)`: the sum over all slots of `deviceUtil[i].smUtil`.
    fn sm_util(&self, i: usize) -> u64 {
        (0..MAX_PROCS)
            .map(|s| self.u64(PROCS + s * PROC_SIZE + P_UTIL + i * 48 + 16))
            .sum()
    }
}

/// What Volcano's feedback loop writes: `SetRecentKernel`, `SetUtilizationSwitch`.
fn volcano_write_i32(path: &Path, off: usize, v: i32) {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    f.write_all_at(&v.to_le_bytes(), off as u64).unwrap();
}

fn devices() -> [DeviceInit; 2] {
    [
        DeviceInit {
            uuid: UUID_A.into(),
            limit: Some(2 * GIB),
            sm_limit: Some(50),
        },
        DeviceInit {
            uuid: UUID_B.into(),
            limit: Some(GIB),
            sm_limit: None,
        },
    ]
}

/// One process's attachment (a separate open file description, as another process's).
fn attach(loc: &Location) -> (Arc<Region>, RegionLedger) {
    let (r, _) = Region::open_or_create(loc, &devices()).unwrap();
    let r = Arc::new(r);
    let l = r.ledger(&[UUID_A.to_owned(), UUID_B.to_owned()]);
    (r, l)
}

/// A Volcano container directory (`/tmp/vgpu/containers/<podUID>_<ctr>` on the node): the
/// `libvgpu.so` mount point and the region vgpu creates and uses, and nothing else.
fn container_dir() -> (tempfile::TempDir, Location) {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("libvgpu.so"), b"").unwrap();
    let loc = Location::shared(
        dir.path()
            .join("3f0c9a52-1b2c-4d5e-8f90-a1b2c3d4e5f6.cache"),
    );
    (dir, loc)
}

#[test]
fn volcanos_loader_takes_the_container_directory_as_vgpu_leaves_it() {
    let (dir, loc) = container_dir();
    // No cuInit yet: no file, nothing to read.
    assert!(Volcano::load_cache(dir.path()).unwrap().is_none());
    let (r, l) = attach(&loc);
    l.try_charge(0, 100 * MIB).unwrap();
    let (r2, _l2) = attach(&loc);
    r.reap_dead();
    r2.detach();
    // vgpu adds no file beside the region (its locks are byte ranges of the region itself).
    let mut names: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names.len(), 2, "{names:?}");
    let v = Volcano::load_cache(dir.path())
        .unwrap()
        .expect("the .cache file is found");
    assert_eq!(v.data.len(), FILE_SIZE);
    assert_ne!(v.data.len() as u64, V0_SIZE);
}

#[test]
fn volcanos_v1_reader_reads_what_vgpu_publishes() {
    let (dir, loc) = container_dir();
    let (r1, l1) = attach(&loc);
    let (r2, l2) = attach(&loc);
    r1.set_priority(0);
    l1.charge_context(0, 300 * MIB, true).unwrap();
    l1.try_charge(0, 200 * MIB).unwrap();
    l2.charge_context(0, 300 * MIB, true).unwrap();
    l2.try_charge(0, 400 * MIB).unwrap();
    l2.try_charge(1, 64 * MIB).unwrap();
    l1.publish_sm_util(0, 30);
    l2.publish_sm_util(0, 15);
    r1.note_kernel_time(1_900_000_000);

    let v = Volcano::load_cache(dir.path()).unwrap().unwrap();
    let snap = r1.snapshot();
    // The device count: at most 16, so the unclamped loop stays inside `uuids`.
    assert_eq!(v.device_num(), 2);
    for (i, uuid) in [UUID_A, UUID_B].iter().enumerate() {
        // The metrics' 40 bytes, and the feedback loop's 96: the UUID, then zeroes only, so
        // two containers on one GPU give the same key.
        assert_eq!(v.uuid40(i), Some(*uuid));
        let mut want = uuid.as_bytes().to_vec();
        want.resize(UUID_LEN, 0);
        assert_eq!(v.uuid_field(i), &want[..]);
        let d = &snap.devices[i];
        assert_eq!(v.limit(i), d.limit.unwrap());
        // vGPU_device_memory_usage_in_bytes and Device_memory_desc_of_container's labels.
        assert_eq!(v.used_sum(i, 4), d.used, "device {i} total");
        assert_eq!(v.used_sum(i, 0), d.context, "device {i} context");
        assert_eq!(v.used_sum(i, 1), 0, "device {i} module");
        assert_eq!(v.used_sum(i, 2), d.used - d.context, "device {i} buffer");
        assert_eq!(v.used_sum(i, 3), 0, "device {i} offset");
    }
    assert_eq!(v.used_sum(0, 4), 1200 * MIB);
    assert_eq!(v.used_sum(0, 0), 600 * MIB);
    // The 14 device entries past `num`, which the feedback loop also keys: all zeroes.
    for i in 2..16 {
        assert!(v.uuid_field(i).iter().all(|&b| b == 0), "uuid {i}");
    }
    // Device_utilization_desc_of_container: the processes' percents, summed.
    assert_eq!(v.sm_util(0), 45);
    assert_eq!(v.sm_util(1), 0);
    // Device_last_kernel_of_container is sent when lastKernelTime > 0.
    assert_eq!(v.i64(LAST_KERNEL_TIME), 1_900_000_000);
    // The feedback loop indexes a 2-element array by the priority.
    assert!(matches!(v.i32(PRIORITY), 0 | 1), "{}", v.i32(PRIORITY));
    drop((r2, l2));
}

#[test]
fn volcanos_all_slot_sums_drop_a_process_that_left_or_died() {
    let (dir, loc) = container_dir();
    let (r1, l1) = attach(&loc);
    l1.try_charge(0, 100 * MIB).unwrap();
    l1.publish_sm_util(0, 20);
    // A second process that leaves normally (the preload's exit handler detaches).
    let (r2, l2) = attach(&loc);
    l2.try_charge(0, 300 * MIB).unwrap();
    l2.publish_sm_util(0, 40);
    let v = Volcano::load_cache(dir.path()).unwrap().unwrap();
    assert_eq!(v.used_sum(0, 4), 400 * MIB);
    assert_eq!(v.sm_util(0), 60);
    r2.detach();
    let v = Volcano::load_cache(dir.path()).unwrap().unwrap();
    assert_eq!(v.used_sum(0, 4), 100 * MIB);
    assert_eq!(v.sm_util(0), 20);

    // A process that dies without detaching: its slot is cleared by the next reap (every live
    // process runs one every 250 ms; `vgpu status` and `top` too).
    // SAFETY: the child only uses the region (atomics, a few syscalls) and `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let code = std::panic::catch_unwind(|| {
            let (r3, l3) = attach(&loc);
            let ok = l3.try_charge(0, 500 * MIB).is_ok();
            l3.publish_sm_util(0, 70);
            // Killed: no exit handler, no detach.
            std::mem::forget((r3, l3));
            i32::from(!ok)
        })
        .unwrap_or(2);
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert_eq!(status, 0, "the child could not charge");
    let v = Volcano::load_cache(dir.path()).unwrap().unwrap();
    assert_eq!(
        v.used_sum(0, 4),
        600 * MIB,
        "the dead process's slot before a reap"
    );
    r1.reap_dead();
    let v = Volcano::load_cache(dir.path()).unwrap().unwrap();
    assert_eq!(v.used_sum(0, 4), 100 * MIB);
    assert_eq!(v.sm_util(0), 20);
    assert_eq!(r1.snapshot().devices[0].used, 100 * MIB);
}

#[test]
fn volcanos_feedback_writes_are_obeyed() {
    let (_dir, loc) = container_dir();
    let (r, _l) = attach(&loc);
    r.mark_launch();
    let v = Volcano::load_cache(loc.path.parent().unwrap())
        .unwrap()
        .unwrap();
    assert!(v.i32(RECENT_KERNEL) > 0);
    // Blocked by a higher-priority container on the same GPU, then released.
    volcano_write_i32(&loc.path, RECENT_KERNEL, -1);
    assert!(r.launch_blocked());
    r.mark_launch();
    assert!(r.launch_blocked(), "a launch lifted the monitor's block");
    volcano_write_i32(&loc.path, RECENT_KERNEL, 0);
    assert!(!r.launch_blocked());
    volcano_write_i32(&loc.path, UTILIZATION_SWITCH, 0);
    assert_eq!(r.utilization_switch(), 0);
    volcano_write_i32(&loc.path, UTILIZATION_SWITCH, 1);
    assert_eq!(r.utilization_switch(), 1);
}
