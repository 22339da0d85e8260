//! The file's `#[repr(C)]` layout: HAMi-core's v1 prefix, then vgpu's own section.
//!
//! Every field is an atomic (or a never-read gap of atomic bytes), so any bit pattern is a valid
//! value and other processes (other vgpu processes, HAMi's monitor) may write the bytes at any
//! time without undefined behaviour on our side (the contract of `raw::Shared`).

use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU8, AtomicU32, AtomicU64, Ordering};

/// Devices the file can describe (HAMi's `CUDA_DEVICE_MAX_COUNT`).
pub const MAX_DEVICES: usize = 16;
/// Process slots (HAMi's `SHARED_REGION_MAX_PROCESS_NUM`).
pub const MAX_PROCS: usize = 1024;
/// Bytes of a UUID string field, NUL included.
pub const UUID_LEN: usize = 96;

/// HAMi-core's magic (`initializedFlag`) at offset 0.
pub const HAMI_MAGIC: i32 = 19_920_718;
/// HAMi-core layout major version the monitor requires.
pub const HAMI_MAJOR: i32 = 1;
/// HAMi-core minor version written (ignored by the monitor).
pub const HAMI_MINOR: i32 = 2;
/// Size of the file HAMi-core writes; the prefix we keep compatible.
pub const HAMI_FILE_SIZE: usize = 2_008_953;

/// Magic of vgpu's section: "VGPUREG" then a NUL.
pub const VGPU_MAGIC: u64 = u64::from_le_bytes(*b"VGPUREG\0");
/// Version of vgpu's section layout. Bump on any change of [`Layout`] that moves a field or
/// gives bytes an earlier version wrote another meaning. A field carved out of bytes no earlier
/// version read or wrote (a `reserved` word, the gap before the section), which reads as zero,
/// "absent", in an earlier file and which an earlier library leaves alone, needs no bump: so
/// were [`Identity`], [`RefusalLog`] and [`Proc::library`] added in version 2.
pub const LAYOUT_VERSION: u32 = 2;
/// Offset of vgpu's section: the HAMi prefix rounded up to a page.
pub const VGPU_OFFSET: usize = HAMI_FILE_SIZE.next_multiple_of(PAGE);
/// Size of the file (and of the mapping).
pub const FILE_SIZE: usize = size_of::<Layout>().next_multiple_of(PAGE);
/// Offset, in the region file, of the first per-slot lock byte (far past the data: locks beyond
/// end of file are allowed and never touch the data or the file size).
pub const LOCK_BASE: i64 = 1 << 40;
/// The lock byte of the container's reaper lease, just past the slots' lock bytes: the one
/// process holding it reaps the slots of dead processes for all (a dead holder's lock goes
/// with it).
// MAX_PROCS (1024) fits an i64.
#[allow(clippy::cast_possible_wrap)]
pub const REAPER_LOCK: i64 = LOCK_BASE + MAX_PROCS as i64;

const PAGE: usize = 4096;

/// A slot nobody owns. Process slot states live in the low byte of [`Proc::state`]; the bits
/// above are a generation counter, incremented each time the slot is freed (no ABA).
pub const FREE: u32 = 0;
/// A process holds the slot's lock and is filling the slot in.
pub const CLAIMING: u32 = 1;
/// The slot belongs to a live process (as long as its lock is held).
pub const LIVE: u32 = 2;
/// A reaper is clearing the slot of a dead process.
pub const REAPING: u32 = 3;

/// State byte of a state word.
pub const fn state_of(word: u32) -> u32 {
    word & 0xff
}
/// State word with the same generation and another state.
pub const fn with_state(word: u32, state: u32) -> u32 {
    (word & !0xff) | state
}
/// Free state word of the next generation.
pub const fn next_free(word: u32) -> u32 {
    (word & !0xff).wrapping_add(0x100)
}

/// `used[i]` of a HAMi process slot.
#[repr(C)]
pub struct HamiUsed {
    pub context: AtomicU64,
    pub module: AtomicU64,
    pub data: AtomicU64,
    pub offset: AtomicU64,
    pub total: AtomicU64,
    pub unused: [AtomicU64; 3],
}

/// `deviceUtil[i]` of a HAMi process slot.
#[repr(C)]
pub struct HamiUtil {
    pub dec: AtomicU64,
    pub enc: AtomicU64,
    pub sm: AtomicU64,
    pub unused: [AtomicU64; 3],
}

/// HAMi-core's `shrreg_proc_slot_t`.
#[repr(C)]
pub struct HamiProc {
    pub pid: AtomicI32,
    pub hostpid: AtomicI32,
    pub used: [HamiUsed; MAX_DEVICES],
    pub monitorused: [AtomicU64; MAX_DEVICES],
    pub device_util: [HamiUtil; MAX_DEVICES],
    pub status: AtomicI32,
    pub pad: AtomicI32,
    pub unused: [AtomicU64; 3],
}

/// HAMi-core's `shared_region_t` (v1).
#[repr(C)]
pub struct Hami {
    pub initialized_flag: AtomicI32,
    pub major_version: AtomicI32,
    pub minor_version: AtomicI32,
    pub sm_init_flag: AtomicI32,
    pub owner_pid: AtomicU64,
    pub sem: [AtomicU64; 4],
    pub num: AtomicU64,
    pub uuids: [[AtomicU64; UUID_LEN / 8]; MAX_DEVICES],
    pub limit: [AtomicU64; MAX_DEVICES],
    pub sm_limit: [AtomicU64; MAX_DEVICES],
    pub procs: [HamiProc; MAX_PROCS],
    pub procnum: AtomicI32,
    pub utilization_switch: AtomicI32,
    pub recent_kernel: AtomicI32,
    pub priority: AtomicI32,
    pub last_kernel_time: AtomicI64,
    /// HAMi-core's `sem_postinit` (a glibc `sem_t`, added within version 1.2: it serialises its
    /// `postInit`'s host-PID detection); `unused[4]` in older HAMi-core.
    pub sem_postinit: [AtomicU64; 4],
}

/// The container's Kubernetes identity (`POD_NAMESPACE`, `POD_NAME`, `CONTAINER_NAME` of the
/// process that created the region, see `vgpu_policy::plan::PodIdentity`), NUL-padded strings.
/// It sits at the end of the gap between HAMi's prefix and vgpu's section (bytes HAMi-core's
/// file never has and no vgpu version before it read or wrote: zeroes, "unknown"), so the
/// section's layout and version are unchanged. Not checksummed: a reader takes whatever
/// bytes it finds as untrusted text.
#[repr(C)]
pub struct Identity {
    /// Namespace (at most 63 bytes).
    pub namespace: [AtomicU64; 8],
    /// Pod name (at most 253 bytes).
    pub pod: [AtomicU64; 32],
    /// Container name (at most 63 bytes).
    pub container: [AtomicU64; 8],
    pub reserved: [AtomicU64; 16],
}

/// Refusals [`RefusalLog`] keeps: the last ones, all devices together.
pub const REFUSALS: usize = 16;

/// One refused charge, as the refusing process recorded it (see [`RefusalLog`]).
#[repr(C)]
pub struct Refusal {
    /// The refusal's number in the log plus one (0: never written), stored last; 0 while it is
    /// being written.
    pub seq: AtomicU64,
    /// When, Unix milliseconds.
    pub time_ms: AtomicU64,
    /// The refused process's PID (low 32 bits) and the region device index (the next 8 bits).
    pub who: AtomicU64,
    /// Bytes asked for.
    pub requested: AtomicU64,
    /// The device total in use when it was refused.
    pub used: AtomicU64,
    /// The limit in force.
    pub limit: AtomicU64,
    /// What the refused process itself held of the device.
    pub own: AtomicU64,
    /// PID of the live process holding the most of the device (0: none).
    pub holder_pid: AtomicU64,
    /// What that process held.
    pub holder_used: AtomicU64,
    /// [`refusal_check`] of the fields above: a torn or foreign entry does not match.
    pub check: AtomicU64,
}

/// The last [`REFUSALS`] refused charges of the container, a ring written lock-free by the
/// refusing processes (never on a granted charge): a writer takes a number with one
/// `fetch_add` on `head` and fills entry `number % REFUSALS`. It sits in the gap before vgpu's
/// section, right before [`Identity`] (bytes HAMi-core's file never has and no earlier vgpu read
/// or wrote: an empty log in their files). Readers check every entry ([`Refusal::check`]) and
/// take its values as untrusted numbers.
#[repr(C)]
pub struct RefusalLog {
    /// Refusals ever recorded.
    pub head: AtomicU64,
    pub reserved: [AtomicU64; 7],
    pub entries: [Refusal; REFUSALS],
}

/// The check word of a refusal entry: FNV-1a 64 over its sequence number and fields.
pub fn refusal_check(seq: u64, fields: &[u64; 8]) -> u64 {
    let mut x: u64 = 0xcbf2_9ce4_8422_2325;
    for v in std::iter::once(seq).chain(fields.iter().copied()) {
        for b in v.to_le_bytes() {
            x ^= u64::from(b);
            x = x.wrapping_mul(0x0100_0000_01b3);
        }
    }
    x
}

/// Header of vgpu's section. The fixed fields are covered by [`Header::checksum`].
#[repr(C)]
pub struct Header {
    /// [`VGPU_MAGIC`] (fixed).
    pub magic: AtomicU64,
    /// [`LAYOUT_VERSION`] (fixed).
    pub layout_version: AtomicU32,
    /// 1 once the file is initialised (not checksummed).
    pub initialised: AtomicU32,
    /// [`FILE_SIZE`] (fixed).
    pub total_size: AtomicU64,
    /// [`VGPU_OFFSET`] (fixed).
    pub vgpu_offset: AtomicU64,
    /// [`MAX_DEVICES`] (fixed).
    pub max_devices: AtomicU32,
    /// [`MAX_PROCS`] (fixed).
    pub max_procs: AtomicU32,
    /// Devices in use (checksummed; only grows, under the initialisation `flock`).
    pub device_count: AtomicU32,
    /// One past the highest slot ever claimed (scans stop there; only grows).
    pub high_water: AtomicU32,
    /// FNV-1a over the fixed fields and `device_count`, see [`checksum`].
    pub checksum: AtomicU64,
    /// Slot clears (reaps and detaches) begun: each moves a slot's counters into the devices'
    /// `retired_*` totals. A reader that sees `reaps_begun == reaps_done` before and the same
    /// `reaps_begun` after its scan read a consistent set of totals.
    pub reaps_begun: AtomicU64,
    /// Slot clears finished.
    pub reaps_done: AtomicU64,
    /// Passes of the container's reaper (the process holding [`REAPER_LOCK`]), a counter: a
    /// process that sees it unchanged for a while on its own clock tries to take the lease.
    /// Was reserved (zero) in earlier files: no version change.
    pub reaper_beat: AtomicU64,
    /// Non-zero once a reaper found that the region's path no longer names this file (renamed,
    /// removed or replaced): every process attached to it is cut off. Was reserved (zero).
    pub orphaned: AtomicU64,
    pub reserved: [AtomicU64; 21],
}

/// A device entry of vgpu's section.
#[repr(C)]
pub struct Device {
    /// NVML UUID string, NUL-padded.
    pub uuid: [AtomicU64; UUID_LEN / 8],
    /// Bytes (`u64::MAX`: none).
    pub limit: AtomicU64,
    /// Percent (0: none).
    pub sm_limit: AtomicU64,
    /// Commit sequence (high bits) and last committer (low bits), see [`crate::protocol`].
    pub version: AtomicU64,
    /// High-water mark of the device total (Σ used), raised at each grant.
    pub peak: AtomicU64,
    /// Σ `gpu_ns` of the processes whose slots were cleared (dead or detached).
    pub retired_gpu_ns: AtomicU64,
    /// Σ `throttled_ns` of cleared slots.
    pub retired_throttled_ns: AtomicU64,
    /// Σ `denied` of cleared slots.
    pub retired_denied: AtomicU64,
    /// Σ `launches` of cleared slots.
    pub retired_launches: AtomicU64,
    /// The container's compute schedule: CLOCK_MONOTONIC nanoseconds before which no process
    /// of the container opens its next window on this device (0: none yet). See
    /// `vgpu_policy::compute::schedule`.
    pub sm_next_ns: AtomicU64,
    /// The platform's memory limit, a ceiling for [`crate::Region::set_limit`]: the limit from
    /// the environment of the process that created the entry (or of the first process of a run
    /// that found no live process). 0: not recorded (a file of an earlier vgpu: the limit in
    /// force is taken as the ceiling at the next attach); `u64::MAX`: none.
    pub ceiling: AtomicU64,
    /// The platform's SM limit, a ceiling for [`crate::Region::set_sm_limit`]: 0 not recorded,
    /// 1..=99 percent, 100 none.
    pub sm_ceiling: AtomicU64,
    pub reserved: [AtomicU64; 1],
}

/// A process slot of vgpu's section.
#[repr(C)]
pub struct Proc {
    /// State byte ([`FREE`] ...) and generation.
    pub state: AtomicU32,
    /// PID in the process's own namespace.
    pub pid: AtomicU32,
    /// Unix seconds when the process took the slot.
    pub start_time: AtomicU64,
    /// Command line (argv joined by spaces), NUL-padded.
    pub command: [AtomicU64; 8],
    /// Committed bytes per device.
    pub used: [AtomicU64; MAX_DEVICES],
    /// Bytes of charges in flight per device.
    pub pending: [AtomicU64; MAX_DEVICES],
    /// High-water mark of `used` per device (raised by the owner at each grant).
    pub peak: [AtomicU64; MAX_DEVICES],
    /// Charges refused per device (owner only).
    pub denied: [AtomicU64; MAX_DEVICES],
    /// GPU time consumed per device, ns, as the compute limiter measures it (owner only).
    pub gpu_ns: [AtomicU64; MAX_DEVICES],
    /// Time spent throttled by the compute limiter per device, ns (owner only).
    pub throttled_ns: [AtomicU64; MAX_DEVICES],
    /// Kernels launched per device (owner only).
    pub launches: [AtomicU64; MAX_DEVICES],
    /// The owner's library, "`<version> <commit>`", NUL-padded (owner only; valid while
    /// [`Proc::about`] names the owner's claim).
    pub library: [AtomicU64; 4],
    /// The state word of the claim [`Proc::library`] was written for (low 32 bits) and the
    /// owner's flags ([`OBSERVING`], bits 32..): stored after `library`. A slot claimed again
    /// by a library that does not write them (an earlier vgpu) has another state word, so
    /// they read as absent.
    pub about: AtomicU64,
    pub reserved: [AtomicU64; 1],
}

/// [`Proc::about`] flag: the process accounts without limiting (`VGPU_OBSERVE`).
pub const OBSERVING: u32 = 1;

/// The whole file.
#[repr(C)]
pub struct Layout {
    pub hami: Hami,
    pub gap: [AtomicU8;
        VGPU_OFFSET - size_of::<Hami>() - size_of::<RefusalLog>() - size_of::<Identity>()],
    pub refusals: RefusalLog,
    pub identity: Identity,
    pub header: Header,
    pub devices: [Device; MAX_DEVICES],
    pub procs: [Proc; MAX_PROCS],
}

const _: () = {
    assert!(size_of::<Hami>() == 2_008_952);
    assert!(size_of::<HamiProc>() == 1960);
    assert!(size_of::<Header>() == 256);
    assert!(size_of::<Identity>() == 512);
    assert!(std::mem::offset_of!(Layout, identity) >= HAMI_FILE_SIZE);
    assert!(std::mem::offset_of!(Layout, identity).is_multiple_of(8));
    assert!(size_of::<Refusal>() == 80);
    assert!(size_of::<RefusalLog>() == 64 + REFUSALS * 80);
    // Clear of every byte HAMi-core's file has (its struct and the byte after it).
    assert!(std::mem::offset_of!(Layout, refusals) >= HAMI_FILE_SIZE.next_multiple_of(64));
    assert!(size_of::<Device>() == 192);
    assert!(size_of::<Proc>() == 1024);
    assert!(VGPU_OFFSET.is_multiple_of(PAGE) && VGPU_OFFSET >= HAMI_FILE_SIZE);
    assert!(std::mem::offset_of!(Layout, header) == VGPU_OFFSET);
    assert!(align_of::<Layout>() <= PAGE);
    assert!(MAX_PROCS < (1 << crate::protocol::SLOT_BITS));
};

/// The header checksum: FNV-1a 64 over the little-endian bytes of the fixed fields and
/// `device_count`.
pub fn checksum(h: &Header) -> u64 {
    let mut x: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            x ^= u64::from(b);
            x = x.wrapping_mul(0x0100_0000_01b3);
        }
    };
    eat(&h.magic.load(Ordering::Acquire).to_le_bytes());
    eat(&h.layout_version.load(Ordering::Acquire).to_le_bytes());
    eat(&h.total_size.load(Ordering::Acquire).to_le_bytes());
    eat(&h.vgpu_offset.load(Ordering::Acquire).to_le_bytes());
    eat(&h.max_devices.load(Ordering::Acquire).to_le_bytes());
    eat(&h.max_procs.load(Ordering::Acquire).to_le_bytes());
    eat(&h.device_count.load(Ordering::Acquire).to_le_bytes());
    x
}

/// Stores `s` into `words` as NUL-padded bytes (truncated so that a NUL always ends it).
pub fn write_str(words: &[AtomicU64], s: &[u8]) {
    let cap = (words.len() * 8).saturating_sub(1);
    let s = &s[..s.len().min(cap)];
    for (i, w) in words.iter().enumerate() {
        let mut b = [0u8; 8];
        for (j, byte) in b.iter_mut().enumerate() {
            if let Some(&c) = s.get(i * 8 + j) {
                *byte = c;
            }
        }
        w.store(u64::from_le_bytes(b), Ordering::Release);
    }
}

/// Reads NUL-padded bytes from `words` into `out`; returns the length before the first NUL.
pub fn read_bytes(words: &[AtomicU64], out: &mut [u8]) -> usize {
    let mut n = 0;
    for w in words {
        for c in w.load(Ordering::Acquire).to_le_bytes() {
            if c == 0 || n == out.len() {
                return n;
            }
            out[n] = c;
            n += 1;
        }
    }
    n
}

/// Reads a NUL-padded string (lossy UTF-8; at most 256 bytes).
pub fn read_string(words: &[AtomicU64]) -> String {
    let mut buf = [0u8; 256];
    let n = read_bytes(words, &mut buf);
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// Whether `words` hold exactly `s`.
pub fn str_eq(words: &[AtomicU64], s: &[u8]) -> bool {
    let mut buf = [0u8; 128];
    let n = read_bytes(words, &mut buf);
    &buf[..n] == s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    #[test]
    fn hami_offsets_match_reference_table() {
        assert_eq!(offset_of!(Hami, initialized_flag), 0);
        assert_eq!(offset_of!(Hami, major_version), 4);
        assert_eq!(offset_of!(Hami, minor_version), 8);
        assert_eq!(offset_of!(Hami, sm_init_flag), 12);
        assert_eq!(offset_of!(Hami, owner_pid), 16);
        assert_eq!(offset_of!(Hami, sem), 24);
        assert_eq!(size_of::<[AtomicU64; 4]>(), 32);
        assert_eq!(offset_of!(Hami, num), 56);
        assert_eq!(offset_of!(Hami, uuids), 64);
        assert_eq!(size_of::<[[AtomicU64; 12]; 16]>(), 16 * 96);
        assert_eq!(offset_of!(Hami, limit), 1600);
        assert_eq!(offset_of!(Hami, sm_limit), 1728);
        assert_eq!(offset_of!(Hami, procs), 1856);
        assert_eq!(offset_of!(Hami, procnum), 2_008_896);
        assert_eq!(offset_of!(Hami, utilization_switch), 2_008_900);
        assert_eq!(offset_of!(Hami, recent_kernel), 2_008_904);
        assert_eq!(offset_of!(Hami, priority), 2_008_908);
        assert_eq!(offset_of!(Hami, last_kernel_time), 2_008_912);
        assert_eq!(offset_of!(Hami, sem_postinit), 2_008_920);
        assert_eq!(size_of::<Hami>(), 2_008_952);
    }

    #[test]
    fn hami_proc_slot_offsets_match_reference_table() {
        assert_eq!(size_of::<HamiProc>(), 1960);
        assert_eq!(offset_of!(HamiProc, pid), 0);
        assert_eq!(offset_of!(HamiProc, hostpid), 4);
        assert_eq!(offset_of!(HamiProc, used), 8);
        assert_eq!(size_of::<HamiUsed>(), 64);
        assert_eq!(offset_of!(HamiUsed, context), 0);
        assert_eq!(offset_of!(HamiUsed, module), 8);
        assert_eq!(offset_of!(HamiUsed, data), 16);
        assert_eq!(offset_of!(HamiUsed, offset), 24);
        assert_eq!(offset_of!(HamiUsed, total), 32);
        assert_eq!(offset_of!(HamiProc, monitorused), 1032);
        assert_eq!(offset_of!(HamiProc, device_util), 1160);
        assert_eq!(size_of::<HamiUtil>(), 48);
        assert_eq!(offset_of!(HamiUtil, sm), 16);
        assert_eq!(offset_of!(HamiProc, status), 1928);
        assert_eq!(offset_of!(HamiProc, unused), 1936);
    }

    #[test]
    fn vgpu_section_is_page_aligned_after_the_prefix() {
        assert_eq!(VGPU_OFFSET, 2_011_136);
        assert_eq!(offset_of!(Layout, header), VGPU_OFFSET);
        assert_eq!(offset_of!(Layout, identity), VGPU_OFFSET - 512);
        assert_eq!(offset_of!(Layout, refusals), VGPU_OFFSET - 512 - 1344);
        assert_eq!(offset_of!(Layout, devices), VGPU_OFFSET + 256);
        assert_eq!(offset_of!(Layout, procs), VGPU_OFFSET + 256 + 16 * 192);
        assert_eq!(FILE_SIZE, 3_063_808);
        assert_eq!(offset_of!(Header, reaps_begun), 56);
        assert_eq!(offset_of!(Header, reaps_done), 64);
        assert_eq!(offset_of!(Device, limit), 96);
        assert_eq!(offset_of!(Device, sm_limit), 104);
        assert_eq!(offset_of!(Device, version), 112);
        assert_eq!(offset_of!(Device, peak), 120);
        assert_eq!(offset_of!(Device, retired_gpu_ns), 128);
        assert_eq!(offset_of!(Device, retired_launches), 152);
        assert_eq!(offset_of!(Proc, used), 80);
        assert_eq!(offset_of!(Proc, pending), 208);
        assert_eq!(offset_of!(Proc, peak), 336);
        assert_eq!(offset_of!(Proc, denied), 464);
        assert_eq!(offset_of!(Proc, gpu_ns), 592);
        assert_eq!(offset_of!(Proc, throttled_ns), 720);
        assert_eq!(offset_of!(Proc, launches), 848);
        assert_eq!(offset_of!(Proc, library), 976);
        assert_eq!(offset_of!(Proc, about), 1008);
    }

    #[test]
    fn strings_round_trip_and_truncate() {
        let w: [AtomicU64; 12] = Default::default();
        write_str(&w, b"GPU-1234");
        assert_eq!(read_string(&w), "GPU-1234");
        assert!(str_eq(&w, b"GPU-1234"));
        assert!(!str_eq(&w, b"GPU-123"));
        let long = [b'x'; 200];
        write_str(&w, &long);
        assert_eq!(read_string(&w).len(), 95);
        write_str(&w, b"");
        assert_eq!(read_string(&w), "");
    }

    #[test]
    fn state_words() {
        let w = with_state(next_free(with_state(0, LIVE)), CLAIMING);
        assert_eq!(state_of(w), CLAIMING);
        assert_eq!(w >> 8, 1);
        assert_eq!(state_of(next_free(w)), FREE);
    }
}
