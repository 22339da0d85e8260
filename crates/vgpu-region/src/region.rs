//! [`Region`]: opening, validating, initialising the file; process slots; reaping; status.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, IntoRawFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::error::{ErrorKind, RegionError};
use crate::layout::{self, Layout};
use crate::protocol::{self, NO_LIMIT};
use crate::raw::{Mapping, sys};

/// Environment variable naming a shared region file (set per container by HAMi).
pub const SHARED_CACHE_ENV: &str = "CUDA_DEVICE_MEMORY_SHARED_CACHE";

const NO_SLOT: u32 = u32::MAX;
const INIT_WAIT: Duration = Duration::from_secs(10);

/// Who may use the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sharing {
    /// One user's file (the default path): the file must be ours and not group/world-writable;
    /// created 0600 in a 0700 directory.
    Private,
    /// A file shared by the users of a container (`CUDA_DEVICE_MEMORY_SHARED_CACHE`): created
    /// 0666 whatever the umask, any owner accepted.
    Shared,
}

/// Where the region file is and how it is shared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// The file.
    pub path: PathBuf,
    /// Its sharing rule.
    pub sharing: Sharing,
}

impl Location {
    /// `$CUDA_DEVICE_MEMORY_SHARED_CACHE` (shared) when set and not empty, else
    /// [`Region::default_path`] (private).
    pub fn from_env() -> Location {
        match std::env::var_os(SHARED_CACHE_ENV) {
            Some(p) if !p.is_empty() => Location::shared(PathBuf::from(p)),
            _ => Location::private(Region::default_path()),
        }
    }
    /// A private file.
    pub fn private(path: impl Into<PathBuf>) -> Location {
        Location {
            path: path.into(),
            sharing: Sharing::Private,
        }
    }
    /// A shared file.
    pub fn shared(path: impl Into<PathBuf>) -> Location {
        Location {
            path: path.into(),
            sharing: Sharing::Shared,
        }
    }
}

/// A device as a process sees it when attaching.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInit {
    /// NVML UUID (`GPU-...`).
    pub uuid: String,
    /// Memory limit from the environment (`None`: none).
    pub limit: Option<u64>,
    /// SM limit in percent (`None`: none).
    pub sm_limit: Option<u8>,
}

/// Which limit differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitKind {
    /// Memory, bytes.
    Memory,
    /// SM, percent.
    Sm,
}

/// A limit from the attaching process's environment that differs from the region's (the
/// region's wins).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The device.
    pub uuid: String,
    /// Which limit.
    pub kind: LimitKind,
    /// The attaching process's value.
    pub requested: Option<u64>,
    /// The region's value, in force.
    pub region: Option<u64>,
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: Option<u64>| v.map_or_else(|| "none".to_owned(), |v| v.to_string());
        let (what, unit) = match self.kind {
            LimitKind::Memory => ("memory limit", " bytes"),
            LimitKind::Sm => ("SM limit", "%"),
        };
        write!(
            f,
            "{}: {what} {}{unit} from the environment ignored, the shared region's {}{unit} applies",
            self.uuid,
            show(self.requested),
            show(self.region)
        )
    }
}

/// Status of one device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceStatus {
    /// NVML UUID.
    pub uuid: String,
    /// Memory limit (`None`: none).
    pub limit: Option<u64>,
    /// SM limit in percent (`None`: none).
    pub sm_limit: Option<u8>,
    /// Σ used over live processes.
    pub used: u64,
    /// `limit - used` (0 when over), `None` without a limit.
    pub free: Option<u64>,
    /// High-water mark of `used` (the container's, since the region was created).
    pub peak: u64,
    /// GPU time consumed, ns: live processes plus those gone (never decreases).
    pub gpu_ns: u64,
    /// Time throttled by the compute limiter, ns: live plus gone.
    pub throttled_ns: u64,
    /// Allocations refused: live plus gone.
    pub denied: u64,
    /// Kernels launched: live plus gone.
    pub launches: u64,
}

/// Status of one live process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessStatus {
    /// Its slot.
    pub slot: usize,
    /// PID in its own namespace.
    pub pid: u32,
    /// Command line (truncated to 63 bytes).
    pub command: String,
    /// Unix seconds when it took its slot.
    pub start_time: u64,
    /// Bytes used per device (indexed like [`Snapshot::devices`]).
    pub used: Vec<u64>,
    /// High-water mark of `used` per device.
    pub peak: Vec<u64>,
    /// GPU time consumed per device, ns.
    pub gpu_ns: Vec<u64>,
    /// Time throttled per device, ns.
    pub throttled_ns: Vec<u64>,
    /// Allocations refused per device.
    pub denied: Vec<u64>,
    /// Kernels launched per device.
    pub launches: Vec<u64>,
}

/// A point-in-time copy of the region.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Devices, in region order.
    pub devices: Vec<DeviceStatus>,
    /// Live processes, by slot.
    pub processes: Vec<ProcessStatus>,
}

/// A mapped, validated region file, and this process's slot in it (taken by
/// [`open_or_create`](Region::open_or_create), or lazily on the first charge after a fork).
pub struct Region {
    path: PathBuf,
    map: Mapping<Layout>,
    /// The descriptor holding our slot lock (-1 after a fork until reopened).
    fd: AtomicI32,
    dev_ino: (u64, u64),
    slot: AtomicU32,
    /// Process-local guard serialising slot claims and reaping within this process.
    busy: AtomicBool,
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("path", &self.path)
            .field("slot", &self.slot())
            .finish()
    }
}

struct FlockGuard(RawFd);
impl Drop for FlockGuard {
    fn drop(&mut self) {
        let _ = sys::flock(self.0, libc::LOCK_UN);
    }
}

fn flock_wait(path: &Path, fd: RawFd, op: libc::c_int) -> Result<FlockGuard, RegionError> {
    let deadline = Instant::now() + INIT_WAIT;
    loop {
        match sys::flock(fd, op | libc::LOCK_NB) {
            Ok(()) => return Ok(FlockGuard(fd)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    return Err(RegionError::new(path, ErrorKind::NotInitialised));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(RegionError::io(path, "flock", e)),
        }
    }
}

fn insecure(path: &Path, why: String) -> RegionError {
    RegionError::new(path, ErrorKind::Insecure(why))
}

fn check_private_dir(path: &Path, create: bool) -> Result<(), RegionError> {
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Ok(());
    };
    if create && !dir.exists() {
        match fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(RegionError::io(dir, "creating the directory", e)),
        }
    }
    let md = fs::symlink_metadata(dir).map_err(|e| RegionError::io(dir, "stat", e))?;
    if !md.is_dir() {
        return Err(insecure(
            path,
            format!("{} is not a directory", dir.display()),
        ));
    }
    let uid = sys::getuid();
    if md.uid() != uid {
        return Err(insecure(
            path,
            format!(
                "directory {} is owned by uid {}, not {uid}",
                dir.display(),
                md.uid()
            ),
        ));
    }
    if md.mode() & 0o022 != 0 {
        return Err(insecure(
            path,
            format!(
                "directory {} is writable by others (mode {:o})",
                dir.display(),
                md.mode() & 0o7777
            ),
        ));
    }
    Ok(())
}

fn open_file(loc: &Location, create: bool) -> Result<File, RegionError> {
    let path = &loc.path;
    let flags = libc::O_NOFOLLOW | libc::O_CLOEXEC;
    let file = match loc.sharing {
        Sharing::Private => {
            check_private_dir(path, create)?;
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(create)
                .mode(0o600)
                .custom_flags(flags)
                .open(path)
                .map_err(|e| RegionError::io(path, "open", e))?
        }
        Sharing::Shared => {
            let fresh = if create {
                match OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .mode(0o666)
                    .custom_flags(flags)
                    .open(path)
                {
                    Ok(f) => {
                        // Several users of the container share it: 0666 whatever the umask.
                        f.set_permissions(fs::Permissions::from_mode(0o666))
                            .map_err(|e| RegionError::io(path, "fchmod", e))?;
                        Some(f)
                    }
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => None,
                    Err(e) => return Err(RegionError::io(path, "create", e)),
                }
            } else {
                None
            };
            match fresh {
                Some(f) => f,
                None => OpenOptions::new()
                    .read(true)
                    .write(true)
                    .custom_flags(flags)
                    .open(path)
                    .map_err(|e| RegionError::io(path, "open", e))?,
            }
        }
    };
    let md = file
        .metadata()
        .map_err(|e| RegionError::io(path, "fstat", e))?;
    if !md.is_file() {
        return Err(insecure(path, "not a regular file".into()));
    }
    if loc.sharing == Sharing::Private {
        let uid = sys::getuid();
        if md.uid() != uid {
            return Err(insecure(
                path,
                format!("owned by uid {}, not {uid}", md.uid()),
            ));
        }
        if md.mode() & 0o022 != 0 {
            return Err(insecure(
                path,
                format!("writable by others (mode {:o})", md.mode() & 0o7777),
            ));
        }
    }
    Ok(file)
}

/// Checks everything about a mapped file's header. Never trusts a field before checking it.
fn validate(path: &Path, l: &Layout) -> Result<(), RegionError> {
    let err = |k| Err(RegionError::new(path, k));
    let magic = l.hami.initialized_flag.load(Ordering::Acquire);
    let major = l.hami.major_version.load(Ordering::Acquire);
    if magic != layout::HAMI_MAGIC || major != layout::HAMI_MAJOR {
        return err(ErrorKind::NotHami { magic, major });
    }
    let h = &l.header;
    let found = h.magic.load(Ordering::Acquire);
    if found != layout::VGPU_MAGIC {
        return err(ErrorKind::BadMagic { found });
    }
    let version = h.layout_version.load(Ordering::Acquire);
    if version != layout::LAYOUT_VERSION {
        return err(ErrorKind::WrongVersion {
            found: version,
            expected: layout::LAYOUT_VERSION,
        });
    }
    let stored = h.checksum.load(Ordering::Acquire);
    let computed = layout::checksum(h);
    if stored != computed {
        return err(ErrorKind::BadChecksum { stored, computed });
    }
    if h.total_size.load(Ordering::Acquire) != layout::FILE_SIZE as u64 {
        return err(ErrorKind::BadHeader("total size"));
    }
    if h.vgpu_offset.load(Ordering::Acquire) != layout::VGPU_OFFSET as u64
        || h.max_devices.load(Ordering::Acquire) != layout::MAX_DEVICES as u32
        || h.max_procs.load(Ordering::Acquire) != layout::MAX_PROCS as u32
    {
        return err(ErrorKind::BadHeader("geometry"));
    }
    if h.device_count.load(Ordering::Acquire) as usize > layout::MAX_DEVICES {
        return err(ErrorKind::BadHeader("device count"));
    }
    if h.high_water.load(Ordering::Acquire) as usize > layout::MAX_PROCS {
        return err(ErrorKind::BadHeader("slot high-water mark"));
    }
    if h.initialised.load(Ordering::Acquire) != 1 {
        return err(ErrorKind::NotInitialised);
    }
    Ok(())
}

fn initialise(l: &Layout) {
    let h = &l.header;
    h.magic.store(layout::VGPU_MAGIC, Ordering::Release);
    h.layout_version
        .store(layout::LAYOUT_VERSION, Ordering::Release);
    h.total_size
        .store(layout::FILE_SIZE as u64, Ordering::Release);
    h.vgpu_offset
        .store(layout::VGPU_OFFSET as u64, Ordering::Release);
    h.max_devices
        .store(layout::MAX_DEVICES as u32, Ordering::Release);
    h.max_procs
        .store(layout::MAX_PROCS as u32, Ordering::Release);
    h.device_count.store(0, Ordering::Release);
    h.high_water.store(0, Ordering::Release);
    h.checksum.store(layout::checksum(h), Ordering::Release);
    let hm = &l.hami;
    hm.major_version
        .store(layout::HAMI_MAJOR, Ordering::Release);
    hm.minor_version
        .store(layout::HAMI_MINOR, Ordering::Release);
    hm.owner_pid
        .store(u64::from(std::process::id()), Ordering::Release);
    hm.priority.store(1, Ordering::Release);
    h.initialised.store(1, Ordering::Release);
    // Last: HAMi's monitor takes the magic as "initialised".
    hm.initialized_flag
        .store(layout::HAMI_MAGIC, Ordering::Release);
}

fn to_opt(limit: u64) -> Option<u64> {
    (limit != NO_LIMIT).then_some(limit)
}

fn sm_opt(sm: u64) -> Option<u64> {
    (sm != 0).then_some(sm)
}

/// Adds missing devices and lists limit conflicts. Called with the initialisation lock held.
fn reconcile(
    path: &Path,
    l: &Layout,
    devices: &[DeviceInit],
) -> Result<Vec<Conflict>, RegionError> {
    let mut conflicts = Vec::new();
    for d in devices {
        let count =
            (l.header.device_count.load(Ordering::Acquire) as usize).min(layout::MAX_DEVICES);
        let uuid = d.uuid.as_bytes();
        let want_sm = d.sm_limit.map(u64::from).filter(|&s| s != 0 && s < 100);
        if let Some(i) = (0..count).find(|&i| layout::str_eq(&l.devices[i].uuid, uuid)) {
            let dev = &l.devices[i];
            let region = to_opt(dev.limit.load(Ordering::Acquire));
            if region != d.limit {
                conflicts.push(Conflict {
                    uuid: d.uuid.clone(),
                    kind: LimitKind::Memory,
                    requested: d.limit,
                    region,
                });
            }
            let region_sm = sm_opt(dev.sm_limit.load(Ordering::Acquire));
            if region_sm != want_sm {
                conflicts.push(Conflict {
                    uuid: d.uuid.clone(),
                    kind: LimitKind::Sm,
                    requested: want_sm,
                    region: region_sm,
                });
            }
            continue;
        }
        if count >= layout::MAX_DEVICES {
            return Err(RegionError::new(path, ErrorKind::TooManyDevices));
        }
        let dev = &l.devices[count];
        layout::write_str(&dev.uuid, uuid);
        dev.limit
            .store(d.limit.unwrap_or(NO_LIMIT), Ordering::Release);
        dev.sm_limit.store(want_sm.unwrap_or(0), Ordering::Release);
        layout::write_str(&l.hami.uuids[count], uuid);
        l.hami.limit[count].store(d.limit.unwrap_or(0), Ordering::Release);
        l.hami.sm_limit[count].store(want_sm.unwrap_or(0), Ordering::Release);
        l.header
            .device_count
            .store(count as u32 + 1, Ordering::Release);
        l.hami.num.store(count as u64 + 1, Ordering::Release);
        l.header
            .checksum
            .store(layout::checksum(&l.header), Ordering::Release);
    }
    Ok(conflicts)
}

fn lock_offset(slot: usize) -> i64 {
    layout::LOCK_BASE + slot as i64
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Our command line, NUL-separated arguments joined by spaces, in a stack buffer.
fn command_line(buf: &mut [u8; 64]) -> usize {
    let Ok(mut f) = File::open("/proc/self/cmdline") else {
        return 0;
    };
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    for b in &mut buf[..n] {
        if *b == 0 {
            *b = b' ';
        }
    }
    while n > 0 && buf[n - 1] == b' ' {
        n -= 1;
    }
    n
}

impl Region {
    /// The per-user default path: `/tmp/vgpu-<uid>/region`.
    pub fn default_path() -> PathBuf {
        PathBuf::from(format!("/tmp/vgpu-{}/region", sys::getuid()))
    }

    /// Opens the region at `loc`, creating and initialising it if absent, adds the devices it
    /// lacks (with their limits from `devices`), and takes a process slot.
    ///
    /// For a device already in the region, the region's limits win; each difference is returned
    /// as a [`Conflict`] for the caller to report.
    pub fn open_or_create(
        loc: &Location,
        devices: &[DeviceInit],
    ) -> Result<(Region, Vec<Conflict>), RegionError> {
        let (region, conflicts) = Self::open(loc, Some(devices))?;
        region.reap_dead();
        region.claim_slot()?;
        Ok((region, conflicts))
    }

    /// Opens an existing, initialised region without taking a slot (for status and limit
    /// commands). The mapping is read-write (limits can be changed).
    pub fn open_existing(loc: &Location) -> Result<Region, RegionError> {
        Self::open(loc, None).map(|(r, _)| r)
    }

    fn open(
        loc: &Location,
        devices: Option<&[DeviceInit]>,
    ) -> Result<(Region, Vec<Conflict>), RegionError> {
        let path = &loc.path;
        let create = devices.is_some();
        let file = open_file(loc, create)?;
        let fd = file.as_raw_fd();
        let op = if create { libc::LOCK_EX } else { libc::LOCK_SH };
        let guard = flock_wait(path, fd, op)?;
        let md = file
            .metadata()
            .map_err(|e| RegionError::io(path, "fstat", e))?;
        let size = md.len();
        let expected = layout::FILE_SIZE as u64;
        let mut fresh = false;
        if size == 0 && create {
            file.set_len(expected)
                .map_err(|e| RegionError::io(path, "ftruncate", e))?;
            fresh = true;
        } else if size != expected {
            return Err(RegionError::new(
                path,
                ErrorKind::WrongSize {
                    found: size,
                    expected,
                },
            ));
        }
        let needs_init = create && {
            let map =
                Mapping::<Layout>::new(&file).map_err(|e| RegionError::io(path, "mmap", e))?;
            let l = map.get();
            fresh
                || (l.header.initialised.load(Ordering::Acquire) == 0
                    && l.hami.initialized_flag.load(Ordering::Acquire) == 0
                    && l.header.magic.load(Ordering::Acquire) == 0)
        };
        if needs_init && !fresh {
            // We hold the lock and nobody attaches before `initialised` is set: an initialiser
            // that died left a file no one uses. Start again from zeroes.
            file.set_len(0)
                .and_then(|()| file.set_len(expected))
                .map_err(|e| RegionError::io(path, "ftruncate", e))?;
        }
        Self::open_initialised(loc, file, guard, devices, needs_init)
    }

    fn open_initialised(
        loc: &Location,
        file: File,
        guard: FlockGuard,
        devices: Option<&[DeviceInit]>,
        needs_init: bool,
    ) -> Result<(Region, Vec<Conflict>), RegionError> {
        let path = &loc.path;
        let map = Mapping::<Layout>::new(&file).map_err(|e| RegionError::io(path, "mmap", e))?;
        let l = map.get();
        if needs_init {
            initialise(l);
        }
        validate(path, l)?;
        let conflicts = match devices {
            Some(d) => reconcile(path, l, d)?,
            None => Vec::new(),
        };
        drop(guard);
        let md = file
            .metadata()
            .map_err(|e| RegionError::io(path, "fstat", e))?;
        // Slot locks go on a descriptor of their own. An open-file-description lock lives as
        // long as its description, and a mapping keeps the description it was made from alive:
        // locks on the mapped description would survive their owner's death for as long as a
        // forked child keeps the inherited mapping. The mapping's description holds no lock.
        let lock_file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| RegionError::io(path, "open for locks", e))?;
        let lmd = lock_file
            .metadata()
            .map_err(|e| RegionError::io(path, "fstat", e))?;
        if (lmd.dev(), lmd.ino()) != (md.dev(), md.ino()) {
            return Err(insecure(
                path,
                "replaced by another file while opening".into(),
            ));
        }
        drop(file);
        Ok((
            Region {
                path: path.clone(),
                map,
                fd: AtomicI32::new(lock_file.into_raw_fd()),
                dev_ino: (md.dev(), md.ino()),
                slot: AtomicU32::new(NO_SLOT),
                busy: AtomicBool::new(false),
            },
            conflicts,
        ))
    }

    pub(crate) fn layout(&self) -> &Layout {
        self.map.get()
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// This process's slot, if it holds one.
    pub fn slot(&self) -> Option<usize> {
        let s = self.slot.load(Ordering::Acquire);
        (s != NO_SLOT).then_some(s as usize)
    }

    /// Number of devices in the region.
    pub fn device_count(&self) -> usize {
        (self.layout().header.device_count.load(Ordering::Acquire) as usize)
            .min(layout::MAX_DEVICES)
    }

    /// Index of the device with this UUID.
    pub fn device_index(&self, uuid: &str) -> Option<usize> {
        let l = self.layout();
        (0..self.device_count()).find(|&i| layout::str_eq(&l.devices[i].uuid, uuid.as_bytes()))
    }

    fn lock_busy(&self, wait: bool) -> Option<BusyGuard<'_>> {
        let mut spins = 0u32;
        loop {
            if self
                .busy
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Some(BusyGuard(&self.busy));
            }
            if !wait {
                return None;
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// The descriptor for slot locks, reopening the file after a fork. Call with `busy` held.
    fn ensure_fd(&self) -> Result<RawFd, RegionError> {
        let fd = self.fd.load(Ordering::Acquire);
        if fd >= 0 {
            return Ok(fd);
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&self.path)
            .map_err(|e| RegionError::io(&self.path, "reopen after fork", e))?;
        let md = file
            .metadata()
            .map_err(|e| RegionError::io(&self.path, "fstat", e))?;
        if (md.dev(), md.ino()) != self.dev_ino {
            return Err(insecure(
                &self.path,
                "replaced by another file since it was mapped".into(),
            ));
        }
        let fd = file.into_raw_fd();
        self.fd.store(fd, Ordering::Release);
        Ok(fd)
    }

    /// Takes a process slot if this process has none yet (after a fork: a new one, and a new
    /// descriptor). Returns the slot.
    pub fn claim_slot(&self) -> Result<usize, RegionError> {
        if let Some(s) = self.slot() {
            return Ok(s);
        }
        let Some(_busy) = self.lock_busy(true) else {
            return Err(RegionError::new(&self.path, ErrorKind::NoFreeSlot));
        };
        if let Some(s) = self.slot() {
            return Ok(s);
        }
        let fd = self.ensure_fd()?;
        for attempt in 0..2 {
            if let Some(s) = self.claim_free(fd)? {
                return Ok(s);
            }
            if attempt == 0 {
                self.reap_locked(fd);
            }
        }
        Err(RegionError::new(&self.path, ErrorKind::NoFreeSlot))
    }

    fn claim_free(&self, fd: RawFd) -> Result<Option<usize>, RegionError> {
        let l = self.layout();
        for (i, p) in l.procs.iter().enumerate() {
            let s = p.state.load(Ordering::Acquire);
            if layout::state_of(s) != layout::FREE {
                continue;
            }
            // The lock first: a slot is CLAIMING or LIVE only while its owner holds the lock.
            match sys::ofd_try_lock(fd, lock_offset(i)) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => return Err(RegionError::io(&self.path, "fcntl(F_OFD_SETLK)", e)),
            }
            if p.state
                .compare_exchange(
                    s,
                    layout::with_state(s, layout::CLAIMING),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_err()
            {
                let _ = sys::ofd_unlock(fd, lock_offset(i));
                continue;
            }
            let pid = std::process::id();
            p.pid.store(pid, Ordering::Release);
            p.start_time.store(now_secs(), Ordering::Release);
            let mut cmd = [0u8; 64];
            let n = command_line(&mut cmd);
            layout::write_str(&p.command, &cmd[..n]);
            for d in 0..layout::MAX_DEVICES {
                p.used[d].store(0, Ordering::SeqCst);
                p.pending[d].store(0, Ordering::SeqCst);
                for c in [
                    &p.peak[d],
                    &p.denied[d],
                    &p.gpu_ns[d],
                    &p.throttled_ns[d],
                    &p.launches[d],
                ] {
                    c.store(0, Ordering::Relaxed);
                }
            }
            let h = &l.hami.procs[i];
            clear_hami_slot(h);
            h.pid.store(pid as i32, Ordering::Release);
            h.status.store(1, Ordering::Release);
            l.header
                .high_water
                .fetch_max(i as u32 + 1, Ordering::SeqCst);
            p.state
                .store(layout::with_state(s, layout::LIVE), Ordering::Release);
            l.hami.procnum.fetch_max(i as i32 + 1, Ordering::AcqRel);
            self.slot.store(i as u32, Ordering::Release);
            return Ok(Some(i));
        }
        Ok(None)
    }

    /// Frees the slots of dead processes (those whose lock is not held): their usage is released
    /// and their HAMi slot zeroed. Returns how many were freed. Cheap enough to call every few
    /// hundred milliseconds; a slot whose owner is alive is never touched (the test is the
    /// kernel's lock, not the PID).
    pub fn reap_dead(&self) -> usize {
        let Some(_busy) = self.lock_busy(false) else {
            return 0;
        };
        match self.ensure_fd() {
            Ok(fd) => self.reap_locked(fd),
            Err(_) => 0,
        }
    }

    fn reap_locked(&self, fd: RawFd) -> usize {
        let l = self.layout();
        let me = self.slot();
        let hw = (l.header.high_water.load(Ordering::SeqCst) as usize).min(layout::MAX_PROCS);
        let mut reaped = 0;
        for i in 0..hw {
            if Some(i) == me {
                continue;
            }
            let p = &l.procs[i];
            let s = p.state.load(Ordering::Acquire);
            if layout::state_of(s) == layout::FREE {
                continue;
            }
            // Taking the lock proves the owner (or a reaper that died midway) is gone, and keeps
            // other reapers and claimants off the slot while we clear it.
            if !matches!(sys::ofd_try_lock(fd, lock_offset(i)), Ok(true)) {
                continue;
            }
            if p.state
                .compare_exchange(
                    s,
                    layout::with_state(s, layout::REAPING),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
            {
                self.clear_slot(i);
                p.state.store(layout::next_free(s), Ordering::Release);
                reaped += 1;
            }
            let _ = sys::ofd_unlock(fd, lock_offset(i));
        }
        if reaped > 0 {
            self.shrink_procnum();
        }
        reaped
    }

    fn clear_slot(&self, i: usize) {
        let l = self.layout();
        let p = &l.procs[i];
        // Move the slot's counters into the devices' retired totals, so that container totals
        // never go backwards; readers see the move as one step (see `Header::reaps_begun`).
        l.header.reaps_begun.fetch_add(1, Ordering::SeqCst);
        for (d, dev) in l.devices.iter().enumerate() {
            for (from, to) in [
                (&p.gpu_ns[d], &dev.retired_gpu_ns),
                (&p.throttled_ns[d], &dev.retired_throttled_ns),
                (&p.denied[d], &dev.retired_denied),
                (&p.launches[d], &dev.retired_launches),
            ] {
                let v = from.swap(0, Ordering::SeqCst);
                if v != 0 {
                    to.fetch_add(v, Ordering::SeqCst);
                }
            }
            p.peak[d].store(0, Ordering::Relaxed);
        }
        l.header.reaps_done.fetch_add(1, Ordering::SeqCst);
        for d in 0..layout::MAX_DEVICES {
            protocol::clear(&self.budget(d), i);
        }
        p.pid.store(0, Ordering::Release);
        p.start_time.store(0, Ordering::Release);
        layout::write_str(&p.command, b"");
        clear_hami_slot(&l.hami.procs[i]);
    }

    fn shrink_procnum(&self) {
        let l = self.layout();
        loop {
            let cur = l.hami.procnum.load(Ordering::Acquire);
            let hw = (l.header.high_water.load(Ordering::Acquire) as usize).min(layout::MAX_PROCS);
            let top = (0..hw)
                .rev()
                .find(|&i| {
                    let st = layout::state_of(l.procs[i].state.load(Ordering::Acquire));
                    st == layout::LIVE || st == layout::CLAIMING
                })
                .map_or(0, |i| i as i32 + 1);
            if top >= cur
                || l.hami
                    .procnum
                    .compare_exchange(cur, top, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                return;
            }
        }
    }

    /// Gives this process's slot back (its usage is released). Also done on drop.
    pub fn detach(&self) {
        let Some(_busy) = self.lock_busy(true) else {
            return;
        };
        let Some(i) = self.slot() else {
            return;
        };
        let p = &self.layout().procs[i];
        let s = p.state.load(Ordering::Acquire);
        if p.state
            .compare_exchange(
                s,
                layout::with_state(s, layout::REAPING),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
        {
            self.clear_slot(i);
            p.state.store(layout::next_free(s), Ordering::Release);
        }
        self.slot.store(NO_SLOT, Ordering::Release);
        let fd = self.fd.load(Ordering::Acquire);
        if fd >= 0 {
            let _ = sys::ofd_unlock(fd, lock_offset(i));
        }
        self.shrink_procnum();
    }

    /// To be called in the child after `fork` (from a `pthread_atfork` child handler; it is
    /// async-signal-safe: atomics and `close` only). The child drops the inherited descriptor
    /// (whose open file description, and so whose slot lock, is the parent's) and its claim on
    /// the parent's slot; it reopens the file and takes a slot of its own on its first charge.
    pub fn on_fork_child(&self) {
        self.slot.store(NO_SLOT, Ordering::Release);
        let fd = self.fd.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            // SAFETY: the region owns `fd` (the inherited copy of the parent's descriptor), it was
            // just swapped out so nothing in this process uses it again.
            unsafe { sys::close(fd) };
        }
        // A thread of the parent may have held it: in the child that thread does not exist.
        self.busy.store(false, Ordering::Release);
    }

    /// Sets or clears a device's limit, effective at once for every process. Lowering it below
    /// current use revokes nothing; charges are refused until usage falls below it.
    pub fn set_limit(&self, uuid: &str, limit: Option<u64>) -> Result<(), RegionError> {
        let i = self.device_index(uuid).ok_or_else(|| {
            RegionError::new(&self.path, ErrorKind::UnknownDevice(uuid.to_owned()))
        })?;
        self.set_limit_index(i, limit);
        Ok(())
    }

    pub(crate) fn set_limit_index(&self, i: usize, limit: Option<u64>) {
        let l = self.layout();
        if i >= self.device_count() {
            return;
        }
        l.devices[i]
            .limit
            .store(limit.unwrap_or(NO_LIMIT), Ordering::SeqCst);
        l.hami.limit[i].store(limit.unwrap_or(0), Ordering::Release);
        protocol::bump(&self.budget(i));
    }

    /// Sets or clears a device's SM (compute) limit in percent, effective for every process at
    /// its next poll of [`sm_limit_index`](Region::sm_limit_index). `None`, 0 and 100 or more
    /// mean no limit.
    pub fn set_sm_limit(&self, uuid: &str, sm: Option<u8>) -> Result<(), RegionError> {
        let i = self.device_index(uuid).ok_or_else(|| {
            RegionError::new(&self.path, ErrorKind::UnknownDevice(uuid.to_owned()))
        })?;
        self.set_sm_limit_index(i, sm);
        Ok(())
    }

    /// [`set_sm_limit`](Region::set_sm_limit) by region device index (ignored if out of range).
    pub fn set_sm_limit_index(&self, i: usize, sm: Option<u8>) {
        if i >= self.device_count() {
            return;
        }
        let v = sm
            .map(u64::from)
            .filter(|&s| s != 0 && s < 100)
            .unwrap_or(0);
        let l = self.layout();
        l.devices[i].sm_limit.store(v, Ordering::SeqCst);
        l.hami.sm_limit[i].store(v, Ordering::Release);
    }

    /// A device's SM limit in percent (1..=99; `None`: none). One relaxed atomic load: cheap
    /// enough for the compute limiter to poll every window.
    #[inline]
    pub fn sm_limit_index(&self, i: usize) -> Option<u8> {
        let d = self.layout().devices.get(i)?;
        match d.sm_limit.load(Ordering::Relaxed) {
            0 => None,
            v => Some(v.min(100) as u8),
        }
    }

    /// A device's limit.
    pub fn limit_index(&self, i: usize) -> Option<u64> {
        if i >= self.device_count() {
            return None;
        }
        to_opt(self.layout().devices[i].limit.load(Ordering::SeqCst))
    }

    /// Σ used of a device over all live processes.
    pub fn used_index(&self, i: usize) -> u64 {
        if i >= layout::MAX_DEVICES {
            return 0;
        }
        protocol::total(&self.budget(i))
    }

    /// A copy of the region's state for display. Reads atomics only (no lock, no slot): safe to
    /// call from a monitor at any rate without slowing the workload. Counter totals include the
    /// processes already gone; a scan that raced with a reap is retried (a few times) so that
    /// totals read never go backwards.
    pub fn snapshot(&self) -> Snapshot {
        let h = &self.layout().header;
        let mut snap = self.snapshot_once();
        for _ in 0..64 {
            let done = h.reaps_done.load(Ordering::SeqCst);
            let begun = h.reaps_begun.load(Ordering::SeqCst);
            if begun == done {
                snap = self.snapshot_once();
                if h.reaps_begun.load(Ordering::SeqCst) == begun {
                    return snap;
                }
            }
            std::thread::yield_now();
        }
        snap
    }

    fn snapshot_once(&self) -> Snapshot {
        let l = self.layout();
        let n = self.device_count();
        let hw = (l.header.high_water.load(Ordering::Acquire) as usize).min(layout::MAX_PROCS);
        let per_dev = |a: &[std::sync::atomic::AtomicU64; layout::MAX_DEVICES]| -> Vec<u64> {
            a[..n].iter().map(|c| c.load(Ordering::Relaxed)).collect()
        };
        let processes: Vec<ProcessStatus> = (0..hw)
            .filter_map(|i| {
                let p = &l.procs[i];
                if layout::state_of(p.state.load(Ordering::Acquire)) != layout::LIVE {
                    return None;
                }
                Some(ProcessStatus {
                    slot: i,
                    pid: p.pid.load(Ordering::Acquire),
                    command: layout::read_string(&p.command),
                    start_time: p.start_time.load(Ordering::Acquire),
                    used: (0..n).map(|d| p.used[d].load(Ordering::SeqCst)).collect(),
                    peak: per_dev(&p.peak),
                    gpu_ns: per_dev(&p.gpu_ns),
                    throttled_ns: per_dev(&p.throttled_ns),
                    denied: per_dev(&p.denied),
                    launches: per_dev(&p.launches),
                })
            })
            .collect();
        // Counters of live slots that are not LIVE right now (claiming, reaping) are counted
        // too: a slot being cleared still holds them until the move (bracketed by reaps_begun).
        let live_sum = |d: usize, f: fn(&layout::Proc) -> &[std::sync::atomic::AtomicU64; 16]| {
            (0..hw)
                .filter(|&i| {
                    layout::state_of(l.procs[i].state.load(Ordering::Acquire)) != layout::FREE
                })
                .map(|i| f(&l.procs[i])[d].load(Ordering::Relaxed))
                .fold(0u64, u64::wrapping_add)
        };
        let devices = (0..n)
            .map(|i| {
                let d = &l.devices[i];
                let limit = to_opt(d.limit.load(Ordering::Acquire));
                let used = self.used_index(i);
                let retired = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::SeqCst);
                DeviceStatus {
                    uuid: layout::read_string(&d.uuid),
                    limit,
                    sm_limit: sm_opt(d.sm_limit.load(Ordering::Acquire)).map(|s| s.min(100) as u8),
                    used,
                    free: limit.map(|lim| lim.saturating_sub(used)),
                    peak: d.peak.load(Ordering::Relaxed).max(used),
                    gpu_ns: retired(&d.retired_gpu_ns).wrapping_add(live_sum(i, |p| &p.gpu_ns)),
                    throttled_ns: retired(&d.retired_throttled_ns)
                        .wrapping_add(live_sum(i, |p| &p.throttled_ns)),
                    denied: retired(&d.retired_denied).wrapping_add(live_sum(i, |p| &p.denied)),
                    launches: retired(&d.retired_launches)
                        .wrapping_add(live_sum(i, |p| &p.launches)),
                }
            })
            .collect();
        Snapshot { devices, processes }
    }

    /// A [`vgpu_policy::ledger::Ledger`] for this process: its dense device slot `k` is the
    /// region device whose UUID is `uuids_by_slot[k]` (an unknown UUID: unlimited, untracked).
    pub fn ledger(self: &Arc<Self>, uuids_by_slot: &[String]) -> crate::RegionLedger {
        crate::ledger::RegionLedger::new(
            Arc::clone(self),
            uuids_by_slot.iter().map(|u| self.device_index(u)).collect(),
        )
    }

    pub(crate) fn budget(&self, dev: usize) -> DevBudget<'_> {
        DevBudget { region: self, dev }
    }

    /// After a grant to slot `me` on `dev`, `total` being the device total right after it:
    /// raises the process's and the device's high-water marks (a load, and a `fetch_max` only
    /// when a mark is passed).
    #[inline]
    pub(crate) fn note_grant(&self, me: usize, dev: usize, total: u64) {
        let l = self.layout();
        if let (Some(p), Some(d)) = (l.procs.get(me), l.devices.get(dev)) {
            let used = p.used[dev].load(Ordering::Relaxed);
            if p.peak[dev].load(Ordering::Relaxed) < used {
                p.peak[dev].fetch_max(used, Ordering::Relaxed);
            }
            if d.peak.load(Ordering::Relaxed) < total {
                d.peak.fetch_max(total, Ordering::Relaxed);
            }
        }
    }

    /// Counts a refused charge of slot `me` on `dev`.
    #[inline]
    pub(crate) fn note_denied(&self, me: usize, dev: usize) {
        if let Some(c) = self.layout().procs.get(me).and_then(|p| p.denied.get(dev)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Adds compute counters to slot `me`, device `dev` (relaxed; the owner only).
    #[inline]
    pub(crate) fn add_compute(
        &self,
        me: usize,
        dev: usize,
        gpu_ns: u64,
        throttled_ns: u64,
        launches: u64,
    ) {
        let Some(p) = self.layout().procs.get(me) else {
            return;
        };
        if dev >= layout::MAX_DEVICES {
            return;
        }
        for (c, v) in [
            (&p.gpu_ns[dev], gpu_ns),
            (&p.throttled_ns[dev], throttled_ns),
            (&p.launches[dev], launches),
        ] {
            if v != 0 {
                c.fetch_add(v, Ordering::Relaxed);
            }
        }
    }

    /// Copies this process's usage of `dev` into its HAMi slot (a published view only).
    pub(crate) fn publish_hami(&self, slot: usize, dev: usize) {
        let l = self.layout();
        let (Some(p), Some(h)) = (l.procs.get(slot), l.hami.procs.get(slot)) else {
            return;
        };
        let (Some(used), Some(hu)) = (p.used.get(dev), h.used.get(dev)) else {
            return;
        };
        // Re-store until stable so that a racing thread's older value does not stay behind.
        for _ in 0..4 {
            let v = used.load(Ordering::SeqCst);
            hu.total.store(v, Ordering::Relaxed);
            hu.data.store(v, Ordering::Relaxed);
            if used.load(Ordering::SeqCst) == v {
                break;
            }
        }
    }
}

fn clear_hami_slot(h: &layout::HamiProc) {
    h.status.store(0, Ordering::Release);
    h.pid.store(0, Ordering::Relaxed);
    h.hostpid.store(0, Ordering::Relaxed);
    for u in &h.used {
        for w in [&u.context, &u.module, &u.data, &u.offset, &u.total] {
            w.store(0, Ordering::Relaxed);
        }
    }
    for w in &h.monitorused {
        w.store(0, Ordering::Relaxed);
    }
    for u in &h.device_util {
        for w in [&u.dec, &u.enc, &u.sm] {
            w.store(0, Ordering::Relaxed);
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        self.detach();
        let fd = self.fd.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            // SAFETY: the region owns `fd` and is going away.
            unsafe { sys::close(fd) };
        }
    }
}

struct BusyGuard<'a>(&'a AtomicBool);
impl Drop for BusyGuard<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Stands in for an out-of-range slot or device (never written: only one's own, valid, slot is).
static ZERO: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static NONE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(NO_LIMIT);

/// One device of a region as the protocol sees it.
pub(crate) struct DevBudget<'a> {
    region: &'a Region,
    dev: usize,
}

impl protocol::Budget for DevBudget<'_> {
    type A = std::sync::atomic::AtomicU64;
    fn version(&self) -> &Self::A {
        let l = self.region.layout();
        l.devices.get(self.dev).map_or(&ZERO, |d| &d.version)
    }
    fn limit(&self) -> &Self::A {
        let l = self.region.layout();
        l.devices.get(self.dev).map_or(&NONE, |d| &d.limit)
    }
    fn slots(&self) -> usize {
        (self
            .region
            .layout()
            .header
            .high_water
            .load(Ordering::SeqCst) as usize)
            .min(layout::MAX_PROCS)
    }
    fn used(&self, slot: usize) -> &Self::A {
        let l = self.region.layout();
        l.procs
            .get(slot)
            .and_then(|p| p.used.get(self.dev))
            .unwrap_or(&ZERO)
    }
    fn pending(&self, slot: usize) -> &Self::A {
        // `slot` may come from the shared version word: never index with it unchecked.
        let l = self.region.layout();
        l.procs
            .get(slot)
            .and_then(|p| p.pending.get(self.dev))
            .unwrap_or(&ZERO)
    }
    fn pause(&self, round: u32) {
        if round < 64 {
            std::hint::spin_loop();
        } else if round < 1024 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
            if round.is_multiple_of(1024) {
                // A process died between its commit and its apply: free its slot.
                self.region.reap_dead();
            }
        }
    }
}
