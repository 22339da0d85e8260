//! Device-wide state (memory counters and kernel timelines), process-local or shared between
//! processes through a file.
//!
//! With `VGPU_SIM_STATE=<path>` the state lives in that file, mapped `MAP_SHARED`, so that
//! every process using the same path sees one set of GPUs. Layout (native endian,
//! [`FILE_SIZE`] bytes):
//!
//! | offset            | field                                            |
//! |-------------------|--------------------------------------------------|
//! | 0                 | magic `u64` ([`MAGIC`])                          |
//! | 8                 | layout version `u32` ([`VERSION`])               |
//! | 12                | slot count `u32` ([`MAX_DEVICES`])               |
//! | 16                | timeslice `u64`, ns (0: FIFO; see below)         |
//! | 64                | `[AtomicU64; MAX_DEVICES]` bytes in use          |
//! | 192               | `[AtomicU64; MAX_DEVICES]` peak bytes in use     |
//! | 4096 × (1 + p)    | [`DevTimeline`] of physical GPU `p` (4096 bytes) |
//! | [`SLICED_OFFSET`] + [`slicer::BYTES`] × p | [`SlicedDev`] of physical GPU `p` |
//!
//! The file is created (and sized) if missing, under an exclusive `flock`. The simulator never
//! reclaims the bytes of a process that died without freeing them: delete the file (or use a
//! fresh path) between test runs.
//!
//! The timeslice is the creating process's `VGPU_SIM_TIMESLICE_US`: every process sharing the
//! file schedules the same way (a process whose own setting differs says so on stderr, once,
//! and follows the file).
use std::ffi::CString;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::MAX_DEVICES;
use crate::slicer::{self, SlicedDev, Slicing};
use crate::timeline::{self, DevTimeline};

/// File magic: "VGPUSIM1".
pub const MAGIC: u64 = u64::from_le_bytes(*b"VGPUSIM1");
/// Layout version (2: timelines added; 3: timelines record context switches; 4: the
/// timeslice and the time-slicing queues).
pub const VERSION: u32 = 4;
/// Size of the header page and of each timeline.
const PAGE: usize = 4096;
/// Where the time-slicing devices start.
pub const SLICED_OFFSET: usize = PAGE * (1 + MAX_DEVICES);
/// File size (sparse: the time-slicing queues take disk only once used).
pub const FILE_SIZE: usize = SLICED_OFFSET + slicer::BYTES * MAX_DEVICES;
const TIMESLICE_OFFSET: usize = 16;
const COUNTERS_OFFSET: usize = 64;
const PEAKS_OFFSET: usize = COUNTERS_OFFSET + 8 * MAX_DEVICES;

/// Process-local counters.
static LOCAL: [AtomicU64; MAX_DEVICES] = [const { AtomicU64::new(0) }; MAX_DEVICES];
/// Process-local peaks.
static LOCAL_PEAKS: [AtomicU64; MAX_DEVICES] = [const { AtomicU64::new(0) }; MAX_DEVICES];

/// The device-wide state: per physical GPU, bytes in use and the kernel timeline.
#[derive(Clone, Copy)]
pub struct Shared {
    pub counters: &'static [AtomicU64],
    /// The highest value each counter has had (device-wide physical peak).
    pub peaks: &'static [AtomicU64],
    pub timelines: &'static [DevTimeline],
    /// Time-slicing, if on.
    pub slicing: Option<Slicing>,
}

/// Process-local state, time-slicing with `slice_ns` (0: off).
pub fn local(slice_ns: u64) -> Shared {
    Shared {
        counters: &LOCAL,
        peaks: &LOCAL_PEAKS,
        timelines: &timeline::LOCAL,
        slicing: (slice_ns > 0).then(|| Slicing {
            devs: SlicedDev::leak_zeroed(MAX_DEVICES),
            slice_ns,
        }),
    }
}

/// The state to use: the shared file's if `path` is set and usable, else process-local
/// (a warning goes to stderr when the file cannot be used). `slice_ns`: this process's
/// timeslice (`VGPU_SIM_TIMESLICE_US`; a file keeps its creator's).
pub fn state(path: Option<&str>, slice_ns: u64) -> Shared {
    match path {
        None => local(slice_ns),
        Some(p) => match map_file(p, slice_ns) {
            Ok(c) => {
                let file = c.slicing.map_or(0, |s| s.slice_ns);
                if file != slice_ns {
                    eprintln!(
                        "vgpu-sim-cuda: VGPU_SIM_TIMESLICE_US={} differs from VGPU_SIM_STATE={p}'s \
                         {} (its creator's); following the file",
                        slice_ns / 1000,
                        file / 1000
                    );
                }
                c
            }
            Err(e) => {
                eprintln!(
                    "vgpu-sim-cuda: cannot use VGPU_SIM_STATE={p}: {e}; using process-local state"
                );
                local(slice_ns)
            }
        },
    }
}

/// Maps (creating if needed, with timeslice `slice_ns`) the state file and returns its state.
pub fn map_file(path: &str, slice_ns: u64) -> Result<Shared, String> {
    let cpath = CString::new(path).map_err(|_| "path contains NUL".to_string())?;
    // SAFETY: `cpath` is a valid NUL-terminated string; the flags and mode are plain values.
    let fd = unsafe {
        libc::open(
            cpath.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC,
            0o666,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    let result = map_fd(fd, slice_ns);
    // SAFETY: `fd` is our open descriptor; the mapping (if any) stays valid after close.
    unsafe { libc::close(fd) };
    result
}

fn map_fd(fd: libc::c_int, slice_ns: u64) -> Result<Shared, String> {
    let err = || std::io::Error::last_os_error().to_string();
    // SAFETY: `fd` is an open descriptor; LOCK_EX blocks until we hold the lock.
    if unsafe { libc::flock(fd, libc::LOCK_EX) } != 0 {
        return Err(err());
    }
    let result = (|| {
        // SAFETY: an all-zero `stat` is a valid value for fstat to overwrite.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is open and `st` is a valid out-pointer.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            return Err(err());
        }
        let size = st.st_size as usize;
        if size < FILE_SIZE {
            if size != 0 {
                return Err(format!("file is {size} bytes, not a simulator state file"));
            }
            // SAFETY: `fd` is open for writing; the file grows zero-filled.
            if unsafe { libc::ftruncate(fd, FILE_SIZE as libc::off_t) } != 0 {
                return Err(err());
            }
        }
        // SAFETY: mapping FILE_SIZE bytes of a file at least that large, shared, read-write.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                FILE_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(err());
        }
        let base = p.cast::<u8>();
        // SAFETY: offset 0 is inside the page-aligned mapping and 8-byte aligned; the mapping
        // is never unmapped, so the reference lives for 'static.
        let magic = unsafe { &*base.cast::<AtomicU64>() };
        // SAFETY: offsets 8 and 12 are inside the mapping and 4-byte aligned.
        let (version, slots) = unsafe {
            (
                &*base.add(8).cast::<std::sync::atomic::AtomicU32>(),
                &*base.add(12).cast::<std::sync::atomic::AtomicU32>(),
            )
        };
        // SAFETY: offset 16 is inside the header page and 8-byte aligned; never unmapped.
        let timeslice = unsafe { &*base.add(TIMESLICE_OFFSET).cast::<AtomicU64>() };
        match magic.load(Ordering::SeqCst) {
            0 => {
                timeslice.store(slice_ns, Ordering::SeqCst);
                version.store(VERSION, Ordering::SeqCst);
                slots.store(MAX_DEVICES as u32, Ordering::SeqCst);
                magic.store(MAGIC, Ordering::SeqCst);
            }
            MAGIC
                if version.load(Ordering::SeqCst) == VERSION
                    && slots.load(Ordering::SeqCst) == MAX_DEVICES as u32 => {}
            _ => {
                // SAFETY: unmapping the mapping made above, which nothing references yet.
                unsafe { libc::munmap(p, FILE_SIZE) };
                return Err("bad magic or layout version".to_string());
            }
        }
        // SAFETY: COUNTERS_OFFSET + 16 × 8 bytes lie inside the mapping, 8-byte aligned;
        // AtomicU64 has the layout of u64; the mapping is never unmapped.
        let counters = unsafe {
            std::slice::from_raw_parts(base.add(COUNTERS_OFFSET).cast::<AtomicU64>(), MAX_DEVICES)
        };
        // SAFETY: PEAKS_OFFSET + 16 × 8 bytes lie inside the header page, 8-byte aligned; as
        // above (a file created before the peaks existed has zeros there: peaks start at 0).
        let peaks = unsafe {
            std::slice::from_raw_parts(base.add(PEAKS_OFFSET).cast::<AtomicU64>(), MAX_DEVICES)
        };
        // SAFETY: pages 1..=MAX_DEVICES of the mapping hold MAX_DEVICES DevTimelines (4096
        // bytes each, page-aligned, all atomics, all-zero is the idle state); never unmapped.
        let timelines = unsafe {
            std::slice::from_raw_parts(base.add(PAGE).cast::<DevTimeline>(), MAX_DEVICES)
        };
        // SAFETY: from SLICED_OFFSET (page-aligned) to the end of the mapping lie MAX_DEVICES
        // SlicedDevs (`repr(C)`, all atomics, 8-byte aligned, all-zero is the idle state); the
        // mapping is never unmapped.
        let devs = unsafe {
            std::slice::from_raw_parts(base.add(SLICED_OFFSET).cast::<SlicedDev>(), MAX_DEVICES)
        };
        let slice_ns = timeslice.load(Ordering::SeqCst);
        Ok(Shared {
            counters,
            peaks,
            timelines,
            slicing: (slice_ns > 0).then_some(Slicing { devs, slice_ns }),
        })
    })();
    // SAFETY: `fd` is open and we hold its lock.
    unsafe { libc::flock(fd, libc::LOCK_UN) };
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_mappings_share_counters() {
        let dir = std::env::temp_dir().join(format!("vgpu-sim-shared-{}", std::process::id()));
        let path = dir.to_str().unwrap().to_string();
        let _ = std::fs::remove_file(&dir);
        let a = map_file(&path, 0).unwrap();
        let b = map_file(&path, 2_000_000).unwrap();
        assert!(
            a.slicing.is_none() && b.slicing.is_none(),
            "the creator's timeslice"
        );
        a.counters[3].fetch_add(42, Ordering::SeqCst);
        assert_eq!(b.counters[3].load(Ordering::SeqCst), 42);
        a.timelines[2].schedule(1000, 10);
        assert_eq!(b.timelines[2].busy_until(), 1010);
        assert_eq!(b.timelines[1].busy_until(), 0);
        assert_eq!(std::fs::metadata(&dir).unwrap().len(), FILE_SIZE as u64);
        std::fs::write(&dir, b"junk").unwrap();
        assert!(map_file(&path, 0).is_err());
        let _ = std::fs::remove_file(&dir);
    }
}
