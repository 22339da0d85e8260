//! A model of HAMi's vGPU node monitor, written from HAMi v2.x's `cmd/vGPUmonitor` (its v1
//! region reader and `Observe()` in `feedback.go`) and HAMi-core's region layout, with the same
//! byte offsets and the same decisions. It exists to test vgpu as a drop-in for HAMi-core
//! against the protocol HAMi's monitor speaks, without Kubernetes or HAMi's Go code.
//!
//! Every round (HAMi: every 5 s) the monitor, for every container region it watches:
//! 1. decrements `recentKernel` if it is positive; a container whose value is still positive
//!    afterwards is *active*: each of its device UUIDs counts one active task of its
//!    `priority` (0 high, 1 low) on that GPU;
//! 2. writes `recentKernel = -1` (*block*) into a container when a task of a higher priority is
//!    active on its GPU, and `0` (*unblock*) when that stops (only if it was negative);
//! 3. writes `utilizationSwitch = 1` when a higher-priority task, or more than one task of the
//!    same priority, is active on its GPU, else `0`.
//!
//! The model reads and writes the file with positioned reads and writes (no mapping), which is
//! what HAMi's plain, non-atomic stores amount to for a reader.
//!
//! Quirks kept on purpose because HAMi has them: `CheckBlocking` decides on the *first* of the
//! container's UUIDs that has any active task on it; a priority outside 0..=1 is refused (HAMi's
//! monitor would index out of range and crash).
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// HAMi-core's region magic (`initializedFlag`).
pub const MAGIC: i32 = 19_920_718;
/// The smallest v1 file HAMi's monitor accepts.
pub const MIN_V1_SIZE: u64 = 2_008_952;
/// Offsets of the v1 layout.
pub mod off {
    /// `initializedFlag`, i32.
    pub const MAGIC: u64 = 0;
    /// `majorVersion`, i32.
    pub const MAJOR: u64 = 4;
    /// `num` (devices), u64.
    pub const NUM: u64 = 56;
    /// `uuids[16][96]`.
    pub const UUIDS: u64 = 64;
    /// Bytes per UUID.
    pub const UUID_LEN: u64 = 96;
    /// `limit[16]`, u64 bytes.
    pub const LIMIT: u64 = 1600;
    /// `sm_limit[16]`, u64 percent.
    pub const SM_LIMIT: u64 = 1728;
    /// `procs[1024]`, 1960 bytes each.
    pub const PROCS: u64 = 1856;
    /// Bytes per process slot.
    pub const PROC_LEN: u64 = 1960;
    /// `procnum`, i32.
    pub const PROCNUM: u64 = 2_008_896;
    /// `utilizationSwitch`, i32.
    pub const UTILIZATION_SWITCH: u64 = 2_008_900;
    /// `recentKernel`, i32.
    pub const RECENT_KERNEL: u64 = 2_008_904;
    /// `priority`, i32.
    pub const PRIORITY: u64 = 2_008_908;
    /// `lastKernelTime`, i64 Unix seconds.
    pub const LAST_KERNEL_TIME: u64 = 2_008_912;
    /// Within a process slot: `pid` i32.
    pub const P_PID: u64 = 0;
    /// Within a process slot: `used[16]`, 64 bytes each (context, module, data, offset, total).
    pub const P_USED: u64 = 8;
    /// Within a process slot: `deviceUtil[16]`, 48 bytes each (dec, enc, sm).
    pub const P_UTIL: u64 = 1160;
    /// Within a process slot: `status` i32.
    pub const P_STATUS: u64 = 1928;
}

/// Why a region was not watched.
#[derive(Debug)]
pub enum ModelError {
    /// The file could not be opened or read.
    Io(PathBuf, io::Error),
    /// Not a v1 region HAMi's monitor would accept.
    NotARegion(PathBuf, String),
}

impl std::fmt::Display for ModelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelError::Io(p, e) => write!(f, "{}: {e}", p.display()),
            ModelError::NotARegion(p, why) => {
                write!(f, "{}: not a HAMi v1 region: {why}", p.display())
            }
        }
    }
}

impl std::error::Error for ModelError {}

/// One container's region, as the monitor holds it.
pub struct Container {
    path: PathBuf,
    file: File,
}

/// Per process, what HAMi's collector sums.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcUsage {
    /// `pid` as the region holds it.
    pub pid: i32,
    /// `used[dev].contextSize`.
    pub context: u64,
    /// `used[dev].moduleSize`.
    pub module: u64,
    /// `used[dev].bufferSize`.
    pub buffer: u64,
    /// `used[dev].total`.
    pub total: u64,
    /// `deviceUtil[dev].smUtil`.
    pub sm_util: u64,
}

impl Container {
    /// Opens a region read-write and checks it as HAMi's loader does (magic, major version 1,
    /// size).
    pub fn open(path: &Path) -> Result<Container, ModelError> {
        let io = |e| ModelError::Io(path.to_path_buf(), e);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let c = Container {
            path: path.to_path_buf(),
            file,
        };
        if len < MIN_V1_SIZE {
            return Err(ModelError::NotARegion(c.path, format!("{len} bytes")));
        }
        let magic = c.i32_at(off::MAGIC).map_err(io)?;
        let major = c.i32_at(off::MAJOR).map_err(io)?;
        if magic != MAGIC || major != 1 {
            return Err(ModelError::NotARegion(
                c.path,
                format!("magic {magic}, major {major}"),
            ));
        }
        Ok(c)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn i32_at(&self, at: u64) -> io::Result<i32> {
        let mut b = [0u8; 4];
        self.file.read_exact_at(&mut b, at)?;
        Ok(i32::from_ne_bytes(b))
    }

    fn u64_at(&self, at: u64) -> io::Result<u64> {
        let mut b = [0u8; 8];
        self.file.read_exact_at(&mut b, at)?;
        Ok(u64::from_ne_bytes(b))
    }

    fn set_i32(&self, at: u64, v: i32) -> io::Result<()> {
        self.file.write_all_at(&v.to_ne_bytes(), at)
    }

    /// `recentKernel`.
    pub fn recent_kernel(&self) -> io::Result<i32> {
        self.i32_at(off::RECENT_KERNEL)
    }

    /// `utilizationSwitch`.
    pub fn utilization_switch(&self) -> io::Result<i32> {
        self.i32_at(off::UTILIZATION_SWITCH)
    }

    /// `priority`.
    pub fn priority(&self) -> io::Result<i32> {
        self.i32_at(off::PRIORITY)
    }

    /// `lastKernelTime`, Unix seconds.
    pub fn last_kernel_time(&self) -> io::Result<i64> {
        let mut b = [0u8; 8];
        self.file.read_exact_at(&mut b, off::LAST_KERNEL_TIME)?;
        Ok(i64::from_ne_bytes(b))
    }

    /// The non-empty device UUIDs, in index order (all 16 entries are scanned, as HAMi does).
    pub fn uuids(&self) -> io::Result<Vec<(usize, String)>> {
        let mut out = Vec::new();
        for (i, at) in (0..16usize).zip((0..16u64).map(|i| off::UUIDS + i * off::UUID_LEN)) {
            let mut b = [0u8; 96];
            self.file.read_exact_at(&mut b, at)?;
            if b[0] == 0 {
                continue;
            }
            let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
            out.push((i, String::from_utf8_lossy(&b[..end]).into_owned()));
        }
        Ok(out)
    }

    /// `limit[dev]` and `sm_limit[dev]`.
    pub fn limits(&self, dev: usize) -> io::Result<(u64, u64)> {
        let d = dev as u64;
        Ok((
            self.u64_at(off::LIMIT + 8 * d)?,
            self.u64_at(off::SM_LIMIT + 8 * d)?,
        ))
    }

    /// The `status` of process `pid`'s slot among the first `procnum` (what HAMi-core's
    /// `shrreg_tool` waits on: 2 suspended, 1 running), if it has one.
    pub fn status_of(&self, pid: i32) -> io::Result<Option<i32>> {
        let procnum = u64::try_from(self.i32_at(off::PROCNUM)?.clamp(0, 1024)).unwrap_or(0);
        for s in 0..procnum {
            let base = off::PROCS + s * off::PROC_LEN;
            if self.i32_at(base + off::P_PID)? == pid {
                return self.i32_at(base + off::P_STATUS).map(Some);
            }
        }
        Ok(None)
    }

    /// What HAMi's collector reads for device `dev`: the processes among the first `procnum`
    /// slots whose `status` is non-zero.
    pub fn processes(&self, dev: usize) -> io::Result<Vec<ProcUsage>> {
        let procnum = u64::try_from(self.i32_at(off::PROCNUM)?.clamp(0, 1024)).unwrap_or(0);
        let d = dev as u64;
        let mut out = Vec::new();
        for s in 0..procnum {
            let base = off::PROCS + s * off::PROC_LEN;
            if self.i32_at(base + off::P_STATUS)? == 0 {
                continue;
            }
            let used = base + off::P_USED + 64 * d;
            out.push(ProcUsage {
                pid: self.i32_at(base + off::P_PID)?,
                context: self.u64_at(used)?,
                module: self.u64_at(used + 8)?,
                buffer: self.u64_at(used + 16)?,
                total: self.u64_at(used + 32)?,
                sm_util: self.u64_at(base + off::P_UTIL + 48 * d + 16)?,
            });
        }
        Ok(out)
    }

    /// Every slot's non-zero bytes, as Volcano's monitor sums them (all 1024 slots, whatever
    /// `procnum` and `status` say): the total of `used[dev].total`.
    pub fn volcano_used_total(&self, dev: usize) -> io::Result<u64> {
        let mut sum = 0u64;
        for s in 0..1024u64 {
            let at = off::PROCS + s * off::PROC_LEN + off::P_USED + 64 * dev as u64 + 32;
            sum = sum.wrapping_add(self.u64_at(at)?);
        }
        Ok(sum)
    }
}

/// What one round decided for one container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The region.
    pub path: PathBuf,
    /// `recentKernel` after the round.
    pub recent_kernel: i32,
    /// `utilizationSwitch` after the round.
    pub utilization_switch: i32,
    /// Whether the round counted it active.
    pub active: bool,
}

/// The monitor: a set of container regions, observed round by round.
#[derive(Default)]
pub struct Monitor {
    containers: Vec<Container>,
}

impl Monitor {
    /// An empty monitor.
    pub fn new() -> Monitor {
        Monitor::default()
    }

    /// Watches one more region (HAMi: each `<pod>_<container>` directory's `.cache` file).
    pub fn watch(&mut self, path: &Path) -> Result<(), ModelError> {
        self.containers.push(Container::open(path)?);
        Ok(())
    }

    /// The watched regions.
    pub fn containers(&self) -> &[Container] {
        &self.containers
    }

    /// One round of HAMi's `Observe()`.
    pub fn observe(&self) -> Result<Vec<Decision>, ModelError> {
        let io = |c: &Container| {
            let p = c.path.clone();
            move |e| ModelError::Io(p, e)
        };
        // uuid -> active tasks per priority
        let mut on: BTreeMap<String, [u32; 2]> = BTreeMap::new();
        let mut active = vec![false; self.containers.len()];
        let mut prio = vec![0usize; self.containers.len()];
        for (i, c) in self.containers.iter().enumerate() {
            let p = c.priority().map_err(io(c))?;
            prio[i] = match p {
                0 => 0,
                1 => 1,
                _ => {
                    return Err(ModelError::NotARegion(
                        c.path.clone(),
                        format!("priority {p} (HAMi's monitor indexes [0, 1] with it)"),
                    ));
                }
            };
            let rk = c.recent_kernel().map_err(io(c))?;
            if rk > 0 {
                c.set_i32(off::RECENT_KERNEL, rk - 1).map_err(io(c))?;
                if rk - 1 > 0 {
                    active[i] = true;
                    for (_, u) in c.uuids().map_err(io(c))? {
                        on.entry(u).or_default()[prio[i]] += 1;
                    }
                }
            }
        }
        let mut out = Vec::with_capacity(self.containers.len());
        for (i, c) in self.containers.iter().enumerate() {
            let uuids = c.uuids().map_err(io(c))?;
            let p = prio[i];
            let blocking = check_blocking(&on, p, &uuids);
            let rk = c.recent_kernel().map_err(io(c))?;
            if blocking {
                if rk >= 0 {
                    c.set_i32(off::RECENT_KERNEL, -1).map_err(io(c))?;
                }
            } else if rk < 0 {
                c.set_i32(off::RECENT_KERNEL, 0).map_err(io(c))?;
            }
            let switch = i32::from(check_priority(&on, p, &uuids));
            if c.utilization_switch().map_err(io(c))? != switch {
                c.set_i32(off::UTILIZATION_SWITCH, switch).map_err(io(c))?;
            }
            out.push(Decision {
                path: c.path.clone(),
                recent_kernel: c.recent_kernel().map_err(io(c))?,
                utilization_switch: switch,
                active: active[i],
            });
        }
        Ok(out)
    }
}

/// HAMi's `CheckBlocking`: the first of the container's GPUs with any active task decides
/// whether a task of higher priority (a lower number) is active there.
fn check_blocking(on: &BTreeMap<String, [u32; 2]>, p: usize, uuids: &[(usize, String)]) -> bool {
    for (_, u) in uuids {
        if let Some(counts) = on.get(u) {
            return counts[..p].iter().any(|&n| n > 0);
        }
    }
    false
}

/// HAMi's `CheckPriority`: on any of the container's GPUs, a task of higher priority is active,
/// or more than one of the same priority.
fn check_priority(on: &BTreeMap<String, [u32; 2]>, p: usize, uuids: &[(usize, String)]) -> bool {
    uuids.iter().any(|(_, u)| {
        on.get(u)
            .is_some_and(|counts| counts[..p].iter().any(|&n| n > 0) || counts[p] > 1)
    })
}

/// Writes a minimal v1 region as HAMi-core would create it (magic, version 1.2, one device,
/// `utilizationSwitch` 1, `recentKernel` 2, the given priority), for tests of the model and of
/// the mixed-node case (a HAMi-core region beside a vgpu one).
pub fn write_hami_core_region(path: &Path, uuid: &str, priority: i32) -> io::Result<()> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    f.set_len(2_008_953)?;
    f.write_all_at(&1i32.to_ne_bytes(), off::MAJOR)?;
    f.write_all_at(&2i32.to_ne_bytes(), 8)?;
    f.write_all_at(&1u64.to_ne_bytes(), off::NUM)?;
    f.write_all_at(uuid.as_bytes(), off::UUIDS)?;
    f.write_all_at(&1i32.to_ne_bytes(), off::UTILIZATION_SWITCH)?;
    f.write_all_at(&2i32.to_ne_bytes(), off::RECENT_KERNEL)?;
    f.write_all_at(&priority.to_ne_bytes(), off::PRIORITY)?;
    f.write_all_at(&MAGIC.to_ne_bytes(), off::MAGIC)?;
    Ok(())
}

/// Sets `recentKernel` to 2, as HAMi-core's launch path does at every rate-limited launch.
pub fn mark_launch(path: &Path) -> io::Result<()> {
    let f = OpenOptions::new().write(true).open(path)?;
    f.write_all_at(&2i32.to_ne_bytes(), off::RECENT_KERNEL)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GPU: &str = "GPU-00000000-0000-0000-0000-000000000001";

    fn two(dir: &Path) -> (PathBuf, PathBuf, Monitor) {
        let hi = dir.join("hi.cache");
        let lo = dir.join("lo.cache");
        write_hami_core_region(&hi, GPU, 0).unwrap();
        write_hami_core_region(&lo, GPU, 1).unwrap();
        let mut m = Monitor::new();
        m.watch(&hi).unwrap();
        m.watch(&lo).unwrap();
        (hi, lo, m)
    }

    #[test]
    fn the_low_priority_container_is_blocked_while_the_high_one_launches_and_resumes_after() {
        let d = tempfile::tempdir().unwrap();
        let (hi, lo, m) = two(d.path());
        // Round 1: both were created with recentKernel 2 -> both active after the decrement.
        let r = m.observe().unwrap();
        assert_eq!(
            r[0].recent_kernel, 1,
            "high priority: decremented, not blocked"
        );
        assert_eq!(r[1].recent_kernel, -1, "low priority: blocked");
        assert_eq!((r[0].utilization_switch, r[1].utilization_switch), (0, 1));
        // The high one keeps launching.
        mark_launch(&hi).unwrap();
        let r = m.observe().unwrap();
        assert_eq!(
            r[1].recent_kernel, -1,
            "still blocked while the high one is active"
        );
        // The high one stops: 2 -> 1 (still active) ... then 1 -> 0 (inactive): unblocked.
        let r = m.observe().unwrap();
        assert!(!r[0].active);
        assert_eq!(r[1].recent_kernel, 0, "unblocked once the high one is idle");
        assert_eq!(r[1].utilization_switch, 0);
        let _ = lo;
    }

    #[test]
    fn two_equal_priorities_turn_the_switch_on_and_block_nobody() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a.cache");
        let b = d.path().join("b.cache");
        write_hami_core_region(&a, GPU, 1).unwrap();
        write_hami_core_region(&b, GPU, 1).unwrap();
        let mut m = Monitor::new();
        m.watch(&a).unwrap();
        m.watch(&b).unwrap();
        let r = m.observe().unwrap();
        assert_eq!((r[0].recent_kernel, r[1].recent_kernel), (1, 1));
        assert_eq!((r[0].utilization_switch, r[1].utilization_switch), (1, 1));
    }

    #[test]
    fn a_container_alone_gets_the_switch_off() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a.cache");
        write_hami_core_region(&a, GPU, 1).unwrap();
        let mut m = Monitor::new();
        m.watch(&a).unwrap();
        assert_eq!(m.observe().unwrap()[0].utilization_switch, 0);
        assert_eq!(
            Container::open(&a).unwrap().utilization_switch().unwrap(),
            0
        );
    }

    #[test]
    fn bad_files_and_priorities_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let small = d.path().join("small.cache");
        std::fs::write(&small, [0u8; 100]).unwrap();
        assert!(matches!(
            Container::open(&small),
            Err(ModelError::NotARegion(..))
        ));
        let p2 = d.path().join("p2.cache");
        write_hami_core_region(&p2, GPU, 2).unwrap();
        let mut m = Monitor::new();
        m.watch(&p2).unwrap();
        assert!(m.observe().is_err());
    }
}
