//! Mapping and validation: where the file is, opening it safely, creating and initialising it
//! under the creation lock, validating every field before trusting it, and adding devices.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, IntoRawFd, RawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::budget::{sm_opt, to_opt};
use super::hami::HamiMirror;
use super::{Conflict, DeviceInit, LimitKind, NO_SLOT, PodIdentity, Region};
use crate::error::{ErrorKind, RegionError};
use crate::layout::{self, Layout};
use crate::protocol::NO_LIMIT;
use crate::raw::Mapping;
use crate::sys;

/// Environment variable naming a shared region file (set per container by HAMi). Read by
/// `vgpu_policy::config`, never by this crate: see [`Location::new`].
pub const SHARED_CACHE_ENV: &str = "CUDA_DEVICE_MEMORY_SHARED_CACHE";

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
    /// The container's shared file `shared_cache` (the value of
    /// `CUDA_DEVICE_MEMORY_SHARED_CACHE`, as the caller's configuration read it) when given and
    /// not empty, else [`Region::default_path`] (private).
    pub fn new(shared_cache: Option<PathBuf>) -> Location {
        match shared_cache {
            Some(p) if !p.as_os_str().is_empty() => Location::shared(p),
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

pub(super) struct FlockGuard(RawFd);
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
                    return Err(RegionError::new(path, ErrorKind::LockHeld));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(RegionError::io(path, "flock", e)),
        }
    }
}

pub(super) fn insecure(path: &Path, why: String) -> RegionError {
    RegionError::new(path, ErrorKind::Insecure(why))
}

fn check_private_dir(path: &Path, create: bool) -> Result<(), RegionError> {
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Ok(());
    };
    if create {
        // 0700 set explicitly (a restrictive umask must not leave it unusable); a symlink
        // planted at the name is refused.
        sys::open_dir_nofollow(dir, 0o700, false)
            .map_err(|e| RegionError::io(dir, "creating the directory", e))?;
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

/// Opens (creating if `create`) the file at `loc` and checks it may be trusted.
fn open_file(loc: &Location, create: bool) -> Result<File, RegionError> {
    let path = &loc.path;
    let file = match loc.sharing {
        Sharing::Private => {
            check_private_dir(path, create)?;
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(create)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(path)
                .map_err(|e| RegionError::io(path, "open", e))?
        }
        Sharing::Shared => match create.then(|| create_shared(path)).transpose()? {
            Some(Some(f)) => f,
            _ => reopen(path, "open")?,
        },
    };
    check_file(loc, &file)?;
    Ok(file)
}

/// Creates the shared file at `path` if it does not exist (`None`: it does), 0666 whatever the
/// umask: several users of the container share it.
fn create_shared(path: &Path) -> Result<Option<File>, RegionError> {
    match OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o666)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => {
            f.set_permissions(fs::Permissions::from_mode(0o666))
                .map_err(|e| RegionError::io(path, "fchmod", e))?;
            Ok(Some(f))
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(None),
        Err(e) => Err(RegionError::io(path, "create", e)),
    }
}

/// A regular file; a private one ours and not writable by others.
fn check_file(loc: &Location, file: &File) -> Result<(), RegionError> {
    let path = &loc.path;
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
    Ok(())
}

/// Opens the existing file at `path` read-write (no symlink, close-on-exec).
pub(super) fn reopen(path: &Path, op: &'static str) -> Result<File, RegionError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| RegionError::io(path, op, e))
}

/// A layout constant as the `u32` header field that records it (all are small).
fn geometry(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
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
        || h.max_devices.load(Ordering::Acquire) != geometry(layout::MAX_DEVICES)
        || h.max_procs.load(Ordering::Acquire) != geometry(layout::MAX_PROCS)
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

/// How a file must be initialised under the creation lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Init {
    /// Initialised already (validation decides whether it is usable).
    No,
    /// A new file: all of it, HAMi's prefix included.
    Fresh,
    /// HAMi-core's own file: vgpu's section only, HAMi's prefix kept as it is.
    Adopt,
}

/// Writes vgpu's header (the section is all zeroes) and flags it initialised.
fn initialise_section(l: &Layout) {
    let h = &l.header;
    h.magic.store(layout::VGPU_MAGIC, Ordering::Release);
    h.layout_version
        .store(layout::LAYOUT_VERSION, Ordering::Release);
    h.total_size
        .store(layout::FILE_SIZE as u64, Ordering::Release);
    h.vgpu_offset
        .store(layout::VGPU_OFFSET as u64, Ordering::Release);
    h.max_devices
        .store(geometry(layout::MAX_DEVICES), Ordering::Release);
    h.max_procs
        .store(geometry(layout::MAX_PROCS), Ordering::Release);
    h.device_count.store(0, Ordering::Release);
    h.high_water.store(0, Ordering::Release);
    h.checksum.store(layout::checksum(h), Ordering::Release);
    h.initialised.store(1, Ordering::Release);
}

fn initialise(l: &Layout, how: Init) {
    match how {
        Init::No => {}
        Init::Adopt => initialise_section(l),
        Init::Fresh => {
            let hami = HamiMirror::new(&l.hami);
            hami.initialise();
            initialise_section(l);
            // Last: HAMi's monitor takes the magic as "initialised".
            hami.publish_magic();
        }
    }
}

/// Whether a file of `size` bytes may be HAMi-core's own region (its v1 struct and the byte
/// HAMi-core writes after it, and no room for vgpu's section).
fn hami_core_size(size: u64) -> bool {
    (size_of::<layout::Hami>() as u64..=layout::VGPU_OFFSET as u64).contains(&size)
}

/// Whether the file starts with HAMi-core's v1 magic and major version.
fn hami_prefix(file: &File) -> bool {
    use std::os::unix::fs::FileExt;
    let mut b = [0u8; 8];
    file.read_exact_at(&mut b, 0).is_ok()
        && i32::from_le_bytes([b[0], b[1], b[2], b[3]]) == layout::HAMI_MAGIC
        && i32::from_le_bytes([b[4], b[5], b[6], b[7]]) == layout::HAMI_MAJOR
}

/// The ceiling words for a memory and an SM limit (see [`layout::Device::ceiling`]).
fn ceiling_words(limit: Option<u64>, sm: Option<u64>) -> (u64, u64) {
    (limit.unwrap_or(NO_LIMIT).max(1), sm.unwrap_or(100))
}

/// Adds missing devices and lists limit conflicts. Called with the initialisation lock held.
/// `fresh_run`: no process is attached (every earlier one has exited): the attaching process's
/// limits replace the region's (and become the ceilings), without conflicts.
fn reconcile(
    path: &Path,
    l: &Layout,
    devices: &[DeviceInit],
    fresh_run: bool,
) -> Result<Vec<Conflict>, RegionError> {
    let mut conflicts = Vec::new();
    for d in devices {
        let count =
            (l.header.device_count.load(Ordering::Acquire) as usize).min(layout::MAX_DEVICES);
        let uuid = d.uuid.as_bytes();
        let want_sm = d.sm_limit.map(u64::from).filter(|&s| s != 0 && s < 100);
        if let Some(i) = (0..count).find(|&i| layout::str_eq(&l.devices[i].uuid, uuid)) {
            let dev = &l.devices[i];
            if fresh_run {
                // A new run of the container: its environment (the platform's limits) applies.
                dev.limit
                    .store(d.limit.unwrap_or(NO_LIMIT), Ordering::SeqCst);
                dev.sm_limit.store(want_sm.unwrap_or(0), Ordering::SeqCst);
                let (c, sc) = ceiling_words(d.limit, want_sm);
                dev.ceiling.store(c, Ordering::SeqCst);
                dev.sm_ceiling.store(sc, Ordering::SeqCst);
                let hami = HamiMirror::new(&l.hami);
                hami.set_limit(i, d.limit);
                hami.set_sm_limit(i, want_sm.unwrap_or(0));
                continue;
            }
            if dev.ceiling.load(Ordering::Acquire) == 0 {
                // A file of an earlier vgpu: the limits in force are the ceiling.
                let (c, sc) = ceiling_words(
                    to_opt(dev.limit.load(Ordering::Acquire)),
                    sm_opt(dev.sm_limit.load(Ordering::Acquire)),
                );
                dev.ceiling.store(c, Ordering::SeqCst);
                dev.sm_ceiling.store(sc, Ordering::SeqCst);
            }
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
        let (c, sc) = ceiling_words(d.limit, want_sm);
        dev.ceiling.store(c, Ordering::Release);
        dev.sm_ceiling.store(sc, Ordering::Release);
        HamiMirror::new(&l.hami).add_device(count, uuid, d.limit, want_sm.unwrap_or(0));
        l.header
            .device_count
            .store(geometry(count + 1), Ordering::Release);
        l.header
            .checksum
            .store(layout::checksum(&l.header), Ordering::Release);
    }
    Ok(conflicts)
}

/// Records the container's identity (each field rewritten: an unknown one is cleared).
fn record_identity(id: &layout::Identity, pod: &PodIdentity) {
    for (words, v) in [
        (&id.namespace[..], &pod.namespace),
        (&id.pod[..], &pod.pod),
        (&id.container[..], &pod.container),
    ] {
        layout::write_str(words, v.as_deref().unwrap_or("").as_bytes());
    }
}

/// Allocates `[from, FILE_SIZE)` of the file.
fn allocate(path: &Path, file: &File, from: u64) -> Result<(), RegionError> {
    let to = layout::FILE_SIZE as u64;
    sys::allocate(file.as_raw_fd(), from, to.saturating_sub(from))
        .map_err(|e| RegionError::io(path, "posix_fallocate", e))
}

/// Decides, with the creation lock held, how the file of `size` bytes must be initialised, and
/// allocates and sizes it for that.
fn prepare(path: &Path, file: &File, size: u64) -> Result<Init, RegionError> {
    if size == 0 {
        // Every block now: a full filesystem later must not SIGBUS the container.
        allocate(path, file, 0)?;
        return Ok(Init::Fresh);
    }
    if hami_core_size(size) && hami_prefix(file) {
        // HAMi-core's own file (the node switched to vgpu while the container lived): extend it
        // in place, never recreate it (HAMi's monitor keeps its mapping of the prefix).
        allocate(path, file, size)?;
        return Ok(Init::Adopt);
    }
    if size != layout::FILE_SIZE as u64 {
        return Ok(Init::No); // refused by the caller
    }
    let map = Mapping::<Layout>::new(file).map_err(|e| RegionError::io(path, "mmap", e))?;
    let l = map.get();
    // An initialiser that died before its first store into vgpu's header (nobody attaches
    // before `initialised` is set, and we hold the lock).
    if l.header.initialised.load(Ordering::Acquire) != 0
        || l.header.magic.load(Ordering::Acquire) != 0
    {
        return Ok(Init::No);
    }
    if l.hami.initialized_flag.load(Ordering::Acquire) == 0 {
        // Nothing of it was published: start again from zeroes.
        drop(map);
        file.set_len(0)
            .map_err(|e| RegionError::io(path, "ftruncate", e))?;
        allocate(path, file, 0)?;
        return Ok(Init::Fresh);
    }
    // An adoption that died midway (vgpu's section is still zeroes), or garbage that
    // validation refuses.
    Ok(if hami_prefix(file) {
        Init::Adopt
    } else {
        Init::No
    })
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
        Self::open_or_create_as(loc, devices, &PodIdentity::default())
    }

    /// [`open_or_create`](Region::open_or_create) by a process of the container `pod`: the
    /// first process of a run (the one that creates the region, or finds no process attached)
    /// records `pod` in the region, for the monitor's labels ([`Snapshot::identity`]).
    ///
    /// [`Snapshot::identity`]: crate::Snapshot::identity
    pub fn open_or_create_as(
        loc: &Location,
        devices: &[DeviceInit],
        pod: &PodIdentity,
    ) -> Result<(Region, Vec<Conflict>), RegionError> {
        let (region, conflicts) = Self::open(loc, Some((devices, pod)))?;
        // HAMi-core stamps `time()` at attach.
        region.hami().note_kernel_time(sys::realtime_secs());
        Ok((region, conflicts))
    }

    /// Joins the region at `loc` only if it is in use: it exists and, after the dead are
    /// reaped under the creation lock, some process is attached. Then, as for
    /// [`open_or_create_as`](Region::open_or_create_as), missing devices are added, the
    /// region's limits win over `devices`' (each difference is a [`Conflict`]) and a slot is
    /// taken. `Ok(None)`: no such file, or nobody attached (the file is left as it is).
    ///
    /// For a process whose own environment sets no limit: beside a live region it must take
    /// the container's limits, not run unlimited; a region nobody uses binds nobody.
    pub fn open_if_live(
        loc: &Location,
        devices: &[DeviceInit],
        pod: &PodIdentity,
    ) -> Result<Option<(Region, Vec<Conflict>)>, RegionError> {
        let file = match open_file(loc, false) {
            Err(e) if e.is_not_found() => return Ok(None),
            r => r?,
        };
        let guard = flock_wait(&loc.path, file.as_raw_fd(), libc::LOCK_EX)?;
        let size = file
            .metadata()
            .map_err(|e| RegionError::io(&loc.path, "fstat", e))?
            .len();
        if size != layout::FILE_SIZE as u64 {
            return Err(RegionError::new(
                &loc.path,
                ErrorKind::WrongSize {
                    found: size,
                    expected: layout::FILE_SIZE as u64,
                },
            ));
        }
        let joined =
            Self::open_initialised(loc, file, guard, Some((devices, pod)), Init::No, true)?;
        if let Some((region, _)) = &joined {
            region.hami().note_kernel_time(sys::realtime_secs());
        }
        Ok(joined)
    }

    /// Opens an existing, initialised region without taking a slot (for status and limit
    /// commands). The mapping is read-write (limits can be changed).
    pub fn open_existing(loc: &Location) -> Result<Region, RegionError> {
        Self::open(loc, None).map(|(r, _)| r)
    }

    /// Opens an existing, initialised region for reading only: `O_RDONLY`, a `PROT_READ`
    /// mapping, no lock taken (the read-only descriptor only tests slot locks, so that
    /// [`Region::snapshot`] leaves out processes that died without being reaped), no creation
    /// lock (a held one cannot stall the reader), no slot, no reaping. What a node's exporter needs on the read-only host mounts of its
    /// DaemonSet. Validation is the same as [`open_existing`](Region::open_existing)'s.
    pub fn open_read_only(loc: &Location) -> Result<Region, RegionError> {
        let path = &loc.path;
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| RegionError::io(path, "open", e))?;
        check_file(loc, &file)?;
        let md = file
            .metadata()
            .map_err(|e| RegionError::io(path, "fstat", e))?;
        if md.len() != layout::FILE_SIZE as u64 {
            return Err(RegionError::new(
                path,
                ErrorKind::WrongSize {
                    found: md.len(),
                    expected: layout::FILE_SIZE as u64,
                },
            ));
        }
        let map =
            Mapping::<Layout>::read_only(&file).map_err(|e| RegionError::io(path, "mmap", e))?;
        validate(path, map.get())?;
        if map.broken() {
            return Err(RegionError::new(
                path,
                ErrorKind::WrongSize {
                    found: 0,
                    expected: layout::FILE_SIZE as u64,
                },
            ));
        }
        // Read-only, never locked: the descriptor only tests which slot owners are alive
        // (`F_OFD_GETLK`), so that a snapshot leaves the dead out without reaping.
        Ok(Region::mapped(
            path,
            map,
            file.into_raw_fd(),
            (md.dev(), md.ino()),
            true,
        ))
    }

    /// A region over `map` (the file `dev_ino` at `path`), with `fd` its lock descriptor, and
    /// no slot yet.
    fn mapped(
        path: &Path,
        map: Mapping<Layout>,
        fd: RawFd,
        dev_ino: (u64, u64),
        read_only: bool,
    ) -> Region {
        Region {
            path: path.to_path_buf(),
            map,
            fd: AtomicI32::new(fd),
            dev_ino,
            slot: AtomicU32::new(NO_SLOT),
            claimed: AtomicU32::new(0),
            busy: AtomicBool::new(false),
            context: Default::default(),
            read_only,
            lost: AtomicBool::new(false),
            relock: AtomicBool::new(false),
            reaper: AtomicBool::new(false),
            seen_beat: AtomicU64::new(0),
            seen_at: AtomicU64::new(0),
            last_pass: AtomicU64::new(0),
            util: Default::default(),
            util_at: AtomicU64::new(0),
            lock_calls: AtomicU64::new(0),
            stamp: Default::default(),
        }
    }

    fn open(
        loc: &Location,
        devices: Option<(&[DeviceInit], &PodIdentity)>,
    ) -> Result<(Region, Vec<Conflict>), RegionError> {
        let path = &loc.path;
        let create = devices.is_some();
        let file = open_file(loc, create)?;
        let fd = file.as_raw_fd();
        let op = if create { libc::LOCK_EX } else { libc::LOCK_SH };
        let guard = flock_wait(path, fd, op)?;
        let size = file
            .metadata()
            .map_err(|e| RegionError::io(path, "fstat", e))?
            .len();
        let init = if create {
            prepare(path, &file, size)?
        } else {
            Init::No
        };
        if init == Init::No && size != layout::FILE_SIZE as u64 {
            return Err(RegionError::new(
                path,
                ErrorKind::WrongSize {
                    found: size,
                    expected: layout::FILE_SIZE as u64,
                },
            ));
        }
        Self::open_initialised(loc, file, guard, devices, init, false)
            .map(|r| r.unwrap_or_else(|| unreachable!("only a join of a live region is None")))
    }

    /// Maps and validates the file, then (with `devices`) reaps, reconciles and claims a slot
    /// under the creation lock. `only_live`: if nobody is attached, `Ok(None)` and nothing is
    /// changed.
    fn open_initialised(
        loc: &Location,
        file: File,
        guard: FlockGuard,
        devices: Option<(&[DeviceInit], &PodIdentity)>,
        init: Init,
        only_live: bool,
    ) -> Result<Option<(Region, Vec<Conflict>)>, RegionError> {
        let path = &loc.path;
        let map = Mapping::<Layout>::new(&file).map_err(|e| RegionError::io(path, "mmap", e))?;
        let l = map.get();
        initialise(l, init);
        validate(path, l)?;
        // A file made before HAMi-core's `sem_postinit` was known (once validated as a region).
        HamiMirror::new(&l.hami).repair_postinit();
        let md = file
            .metadata()
            .map_err(|e| RegionError::io(path, "fstat", e))?;
        // Slot locks go on a descriptor of their own. An open-file-description lock lives as
        // long as its description, and a mapping keeps the description it was made from alive:
        // locks on the mapped description would survive their owner's death for as long as a
        // forked child keeps the inherited mapping. The mapping's description holds no lock.
        let lock_file = reopen(path, "open for locks")?;
        let lmd = lock_file
            .metadata()
            .map_err(|e| RegionError::io(path, "fstat", e))?;
        if (lmd.dev(), lmd.ino()) != (md.dev(), md.ino()) {
            return Err(insecure(
                path,
                "replaced by another file while opening".into(),
            ));
        }
        let region = Region::mapped(
            path,
            map,
            lock_file.into_raw_fd(),
            (md.dev(), md.ino()),
            false,
        );
        let Some((devices, pod)) = devices else {
            drop(guard);
            drop(file);
            return Ok(Some((region, Vec::new())));
        };
        // Still under the creation lock: reap, decide whether this is a new run (nobody
        // attached), reconcile, and take our slot, so that a second newcomer sees us as live.
        let fresh_run = !region.reap_until_live();
        if only_live && fresh_run {
            return Ok(None);
        }
        let conflicts = reconcile(path, region.layout(), devices, fresh_run)?;
        if fresh_run {
            record_identity(&region.layout().identity, pod);
            // Nobody holds a slot: whatever a FREE slot still holds is stale.
            region.scrub_free_slots();
        }
        region.claim_slot()?;
        drop(guard);
        drop(file);
        Ok(Some((region, conflicts)))
    }
}
