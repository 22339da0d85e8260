//! Which regions a monitor command reads, and what it knows about each.
//!
//! [`RegionArgs`] is the one `--region PATH` / `--dir DIR` pair of `status`, `top` and
//! `metrics`; resolved once into a [`RegionSet`]. Without either: the workload's region
//! (`CUDA_DEVICE_MEMORY_SHARED_CACHE`) when set, else every region of this user (the directory
//! of the default region, where each `vgpu run` creates its own).
//!
//! A [`RegionSet`] rescans at each [`refresh`](RegionSet::refresh) (at most
//! [`MAX_REGIONS_PER_CONTAINER_DIR`] regions from one container directory), opens each region,
//! reaps dead processes, takes one [`Snapshot`] and closes it again (no descriptor or mapping is
//! kept between refreshes), and tracks when each was last active: a region with no live process
//! is *stale* (its container finished or is idle; its totals are final) and, after the grace
//! period, *dropped* (not shown) until a process attaches again. [`Identity`] is the container
//! a region belongs to: its platform path (HAMi's and Volcano's
//! `.../containers/<podUID>_<container>/...`) where it has one, with the names its creator
//! recorded (the downward-API variables `POD_NAMESPACE`, `POD_NAME`, `CONTAINER_NAME` of its
//! environment) only where they agree with it; else what the creator recorded.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use clap::Args;
use vgpu_region::{Region, Snapshot, layout};

use super::locate::{default_location, location, run_pid, user_dir};
use crate::error::{Error, Result};

/// Where the regions are.
#[derive(Clone, Debug, Default, Args)]
pub struct RegionArgs {
    // The doc comments are clap's help text, where `<uid>` is plain text, not HTML.
    #[allow(rustdoc::invalid_html_tags)]
    /// A region file (repeatable). Default: $CUDA_DEVICE_MEMORY_SHARED_CACHE, else every region
    /// of this user (/tmp/vgpu-<uid>/: the default region and one per `vgpu run`).
    #[arg(long, value_name = "PATH")]
    pub region: Vec<PathBuf>,
    /// A directory of region files (repeatable; one level of subdirectories is searched, files
    /// appearing later are picked up), e.g. HAMi's /usr/local/vgpu/containers on a node.
    #[arg(long, value_name = "DIR")]
    pub dir: Vec<PathBuf>,
}

impl RegionArgs {
    /// The files and directories to watch. A `--dir` that does not exist is an error.
    pub fn resolve(&self) -> Result<(Vec<PathBuf>, Vec<PathBuf>)> {
        for d in &self.dir {
            match std::fs::metadata(d) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return Err(Error::Dir {
                        path: d.clone(),
                        source: std::io::Error::other("not a directory"),
                    });
                }
                Err(source) => {
                    return Err(Error::Dir {
                        path: d.clone(),
                        source,
                    });
                }
            }
        }
        if !self.region.is_empty() || !self.dir.is_empty() {
            return Ok((self.region.clone(), self.dir.clone()));
        }
        Ok(default_sources())
    }
}

/// The default: the workload's shared region, else the user's directory when it exists, else
/// the default region file (so that the error names it).
pub fn default_sources() -> (Vec<PathBuf>, Vec<PathBuf>) {
    let loc = default_location();
    if loc.path != Region::default_path() {
        return (vec![loc.path], Vec::new());
    }
    match user_dir() {
        Some(d) if d.is_dir() => (Vec::new(), vec![d]),
        _ => (vec![loc.path], Vec::new()),
    }
}

/// The container a region belongs to.
///
/// Where the path is the platform's, HAMi's and Volcano's
/// `.../containers/<podUID>_<container>/` (the device plugin makes that directory and mounts it
/// into that container only), the path **is** the identity: the pod UID and the container name
/// come from it. What the region's creator recorded (the downward-API variables `POD_NAMESPACE`,
/// `POD_NAME`, `CONTAINER_NAME` of its environment, see [`vgpu_region::PodIdentity`]: values any
/// process of the container can set) adds the namespace and pod name only when it agrees with
/// the path; a recorded container name that differs from the path's is a claim to be someone
/// else, and the whole record is dropped into [`Identity::claimed`] (exported as
/// `vgpu_region_identity_mismatch`). [`RegionSet`] also drops the names a record gives when
/// another pod UID's region claims the same pod ([`resolve_claims`]). Elsewhere (no platform
/// path: `vgpu run`, a file passed by hand) the record is all there is and is taken as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// Kubernetes namespace (recorded in the region only).
    pub namespace: Option<String>,
    /// Pod name (recorded in the region only).
    pub pod: Option<String>,
    /// Pod UID, from the directory name.
    pub pod_uid: Option<String>,
    /// Container name, from the directory name (recorded, without one).
    pub container: Option<String>,
    /// A record that contradicts the path, and why: not used for any label.
    pub claimed: Option<(vgpu_region::PodIdentity, &'static str)>,
}

/// Why a record is not the identity.
pub const CONTRADICTS_PATH: &str = "the recorded container name is not the path's";
/// [`Identity::claimed`]'s reason when pods of several UIDs claim one pod name.
pub const CLAIMED_BY_SEVERAL: &str = "another pod UID's region claims the same pod";

impl Identity {
    /// From HAMi's/Volcano's directory naming: the component after `containers` that reads
    /// `<podUID>_<container>` with a UUID-shaped pod UID.
    pub fn from_path(path: &Path) -> Identity {
        let parts: Vec<&str> = path.iter().filter_map(|c| c.to_str()).collect();
        for w in parts.windows(2) {
            if w[0] != "containers" {
                continue;
            }
            if let Some((uid, ctr)) = w[1].split_once('_')
                && is_uuid(uid)
                && !ctr.is_empty()
            {
                return Identity {
                    pod_uid: Some(uid.to_owned()),
                    container: Some(ctr.to_owned()),
                    ..Identity::default()
                };
            }
        }
        Identity::default()
    }

    /// This identity (from [`from_path`](Self::from_path)) with what the region's creator
    /// recorded: under a platform path, its namespace and pod name if its container name (when
    /// it has one) is the path's, else nothing of it ([`Identity::claimed`]); without one, all
    /// of it.
    pub fn with_recorded(mut self, rec: &vgpu_region::PodIdentity) -> Identity {
        if rec.is_empty() {
            return self;
        }
        if self.pod_uid.is_some() {
            if rec.container.is_some() && rec.container != self.container {
                self.claimed = Some((rec.clone(), CONTRADICTS_PATH));
                return self;
            }
        } else if rec.container.is_some() {
            self.container.clone_from(&rec.container);
        }
        self.namespace.clone_from(&rec.namespace);
        self.pod.clone_from(&rec.pod);
        self
    }

    /// Drops the namespace and pod name (taken from `rec`), keeping `rec` as the claim.
    fn revoke(&mut self, rec: vgpu_region::PodIdentity, why: &'static str) {
        self.namespace = None;
        self.pod = None;
        self.claimed = Some((rec, why));
    }

    /// A short title: `namespace/pod/container` (or `pod/container`), `pod <uid8>/container`, `vgpu run <pid>` for a
    /// `vgpu run` region, else the path.
    pub fn title(&self, path: &Path) -> String {
        match (&self.pod, &self.pod_uid, &self.container) {
            (Some(p), _, Some(c)) => match &self.namespace {
                Some(ns) => format!("{ns}/{p}/{c}"),
                None => format!("{p}/{c}"),
            },
            (None, Some(u), Some(c)) => format!("pod {}/{c}", &u[..8.min(u.len())]),
            _ => match run_pid(path) {
                Some(pid) => format!("vgpu run {pid}"),
                None => path.display().to_string(),
            },
        }
    }
}

fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, &c)| match i {
            8 | 13 | 18 | 23 => c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// Region files read from one container directory (a subdirectory of a `--dir`) at most: HAMi
/// and Volcano give a container one. The tenant owns its directory and can fill it; what is
/// past this is skipped (and counted, [`RegionSet::skipped`]).
pub const MAX_REGIONS_PER_CONTAINER_DIR: usize = 4;
/// Entries of one container directory looked at, at most (HAMi's monitor refuses a directory
/// of more than 2): a directory of a million files costs no more than this to scan.
pub const MAX_ENTRIES_PER_CONTAINER_DIR: usize = 64;

/// One watched region: what the last refresh read from it. No descriptor and no mapping is
/// kept between refreshes (each refresh opens, reads and closes the file), so the number of
/// regions is bounded neither by `RLIMIT_NOFILE` nor by memory.
pub struct Watched {
    /// The file.
    pub path: PathBuf,
    /// Its container.
    pub identity: Identity,
    /// The latest snapshot (after reaping).
    pub snap: Snapshot,
    /// When a live process or a change was last seen (at first: the file's modification time).
    pub last_active: SystemTime,
    /// No live process is attached.
    pub stale: bool,
    file_id: (u64, u64),
}

/// The regions to watch: the given files, plus every file of the given directories (and their
/// subdirectories, one level down) that has a region's size.
pub struct RegionSet {
    files: Vec<PathBuf>,
    dirs: Vec<PathBuf>,
    open: BTreeMap<PathBuf, Watched>,
    /// Stale regions are hidden this long after their last activity (`None`: never).
    pub drop_after: Option<Duration>,
    /// Errors of the last refresh, per path (explicit files only; directory entries that are
    /// not regions are skipped silently).
    pub errors: Vec<String>,
    /// Files of a directory, of a region's size, that could not be read at the last refresh
    /// (no permission, bad contents, truncated while watched), with the reason.
    pub unreadable: Vec<(PathBuf, String)>,
    /// Container directories over [`MAX_REGIONS_PER_CONTAINER_DIR`] or
    /// [`MAX_ENTRIES_PER_CONTAINER_DIR`] at the last refresh, with the number of entries
    /// left unread (at least 1).
    pub skipped: Vec<(PathBuf, usize)>,
    /// Open regions read-only (`O_RDONLY`, `PROT_READ`, no lock descriptor, no reaping): the
    /// exporter, which runs on read-only host mounts. Otherwise regions are opened read-write
    /// (to reap dead processes' slots) and read-only where that is refused.
    pub read_only: bool,
}

impl RegionSet {
    /// Watches `files` and `dirs`; nothing is dropped until [`drop_after`](Self::drop_after)
    /// is set.
    pub fn new(files: Vec<PathBuf>, dirs: Vec<PathBuf>) -> Self {
        RegionSet {
            files,
            dirs,
            open: BTreeMap::new(),
            drop_after: None,
            errors: Vec::new(),
            unreadable: Vec::new(),
            skipped: Vec::new(),
            read_only: false,
        }
    }

    fn candidates(&mut self) -> Vec<(PathBuf, bool)> {
        let mut out: Vec<(PathBuf, bool)> = self.files.iter().map(|f| (f.clone(), true)).collect();
        for d in &self.dirs {
            scan_dir(d, &mut out, &mut self.skipped);
        }
        out.sort();
        out.dedup_by(|a, b| a.0 == b.0);
        out
    }

    /// Re-scans the directories, reads every region (opened, reaped, snapshotted, closed),
    /// drops vanished ones, at `now`.
    pub fn refresh_at(&mut self, now: SystemTime) {
        self.errors.clear();
        self.unreadable.clear();
        self.skipped.clear();
        let mut keep = BTreeMap::new();
        for (path, explicit) in self.candidates() {
            let md = match std::fs::metadata(&path) {
                Ok(md) if md.is_file() => md,
                Ok(_) => continue,
                Err(e) => {
                    if explicit {
                        self.errors.push(format!("{}: {e}", path.display()));
                    }
                    continue;
                }
            };
            let id = (md.dev(), md.ino());
            let region = match self.open_region(&path) {
                Ok(region) => region,
                Err(e) => {
                    if explicit {
                        self.errors.push(e.to_string());
                    } else {
                        self.unreadable.push((path.clone(), e.to_string()));
                    }
                    continue;
                }
            };
            // Clear the slots of processes that died since the last vgpu process looked (a
            // non-blocking try-lock per slot), so a stopped container does not show stale use.
            region.reap_dead();
            let snap = region.snapshot();
            // Truncated while read: the mapping now reads zeroes (no fault, see
            // `vgpu_region::fault`); report it.
            let broken = region.broken_reason();
            // Unmapped and closed: nothing of the region is kept but the snapshot.
            drop(region);
            if let Some(why) = broken {
                if explicit {
                    self.errors.push(why);
                } else {
                    self.unreadable.push((path, why));
                }
                continue;
            }
            let mut w = match self.open.remove(&path) {
                Some(w) if w.file_id == id => w,
                _ => Watched {
                    identity: Identity::default(),
                    path: path.clone(),
                    snap: Snapshot::default(),
                    last_active: md.modified().unwrap_or(now),
                    stale: false,
                    file_id: id,
                },
            };
            if !snap.processes.is_empty() || (snap != w.snap && w.snap != Snapshot::default()) {
                w.last_active = now;
            }
            w.stale = snap.processes.is_empty();
            w.identity = Identity::from_path(&w.path).with_recorded(&snap.identity);
            w.snap = snap;
            keep.insert(path, w);
        }
        resolve_claims(keep.values_mut());
        self.open = keep;
    }

    fn open_region(&self, path: &Path) -> Result<Region, vgpu_region::RegionError> {
        let loc = location(Some(path));
        if self.read_only {
            return Region::open_read_only(&loc);
        }
        Region::open_existing(&loc).or_else(|e| Region::open_read_only(&loc).map_err(|_| e))
    }

    /// [`refresh_at`](Self::refresh_at) now.
    pub fn refresh(&mut self) {
        self.refresh_at(SystemTime::now());
    }

    /// The regions shown at `now`: every open one but those stale for longer than the grace
    /// period.
    pub fn shown_at(&self, now: SystemTime) -> impl Iterator<Item = &Watched> {
        let drop_after = self.drop_after;
        self.open.values().filter(move |w| {
            let idle = now.duration_since(w.last_active).unwrap_or_default();
            !(w.stale && drop_after.is_some_and(|d| idle > d))
        })
    }

    /// [`shown_at`](Self::shown_at) now.
    pub fn shown(&self) -> impl Iterator<Item = &Watched> {
        self.shown_at(SystemTime::now())
    }
}

/// A pod name belongs to one pod UID: where regions under platform paths of different pod UIDs
/// record the same namespace and pod, the path cannot tell which is that pod, so none of them
/// keeps the names (each keeps its pod UID and container, and the record as its claim).
pub fn resolve_claims<'a>(watched: impl Iterator<Item = &'a mut Watched>) {
    let mut all: Vec<&mut Watched> = watched.collect();
    let mut uids: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for w in &all {
        let id = &w.identity;
        if let (Some(ns), Some(pod), Some(uid)) = (&id.namespace, &id.pod, &id.pod_uid) {
            let e = uids.entry((ns.clone(), pod.clone())).or_default();
            if !e.contains(uid) {
                e.push(uid.clone());
            }
        }
    }
    for w in &mut all {
        let id = &w.identity;
        let (Some(ns), Some(pod), Some(_)) = (&id.namespace, &id.pod, &id.pod_uid) else {
            continue;
        };
        if uids
            .get(&(ns.clone(), pod.clone()))
            .is_some_and(|u| u.len() > 1)
        {
            let rec = w.snap.identity.clone();
            w.identity.revoke(rec, CLAIMED_BY_SEVERAL);
        }
    }
}

/// Adds the region-sized files of `dir` to `out`, and those of its subdirectories (container
/// directories, each capped: see [`MAX_REGIONS_PER_CONTAINER_DIR`]); a container directory
/// over its caps goes to `skipped`.
fn scan_dir(dir: &Path, out: &mut Vec<(PathBuf, bool)>, skipped: &mut Vec<(PathBuf, usize)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let Ok(ft) = e.file_type() else { continue };
        let p = e.path();
        if ft.is_dir() {
            scan_container_dir(&p, out, skipped);
        } else if ft.is_file() && is_region_sized(&e) {
            out.push((p, false));
        }
    }
}

fn is_region_sized(e: &std::fs::DirEntry) -> bool {
    e.metadata()
        .is_ok_and(|m| m.len() == layout::FILE_SIZE as u64)
}

fn scan_container_dir(
    dir: &Path,
    out: &mut Vec<(PathBuf, bool)>,
    skipped: &mut Vec<(PathBuf, usize)>,
) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut found = Vec::new();
    let mut over = 0;
    for (n, e) in entries.enumerate() {
        if n >= MAX_ENTRIES_PER_CONTAINER_DIR {
            // The rest is not read: counted as one.
            over += 1;
            break;
        }
        let Ok(e) = e else { continue };
        if e.file_type().is_ok_and(|t| t.is_file()) && is_region_sized(&e) {
            found.push(e.path());
        }
    }
    // The same regions at every refresh whatever order the directory lists them in.
    found.sort();
    if found.len() > MAX_REGIONS_PER_CONTAINER_DIR {
        over += found.len() - MAX_REGIONS_PER_CONTAINER_DIR;
        found.truncate(MAX_REGIONS_PER_CONTAINER_DIR);
    }
    if over > 0 {
        skipped.push((dir.to_owned(), over));
    }
    out.extend(found.into_iter().map(|p| (p, false)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_from_hami_and_volcano_paths() {
        let uid = "0f8c2c8e-8c0e-4a5b-9d1e-2f3a4b5c6d7e";
        let p = PathBuf::from(format!("/usr/local/vgpu/containers/{uid}_trainer/x.cache"));
        let id = Identity::from_path(&p);
        assert_eq!(id.pod_uid.as_deref(), Some(uid));
        assert_eq!(id.container.as_deref(), Some("trainer"));
        assert_eq!(id.pod, None);
        assert_eq!(id.namespace, None);
        assert_eq!(id.title(&p), "pod 0f8c2c8e/trainer");
        // A container name with underscores keeps them.
        let p = PathBuf::from(format!("/host/containers/{uid}_my_ctr/a/b.cache"));
        assert_eq!(Identity::from_path(&p).container.as_deref(), Some("my_ctr"));
        // Not HAMi's naming: nothing derived.
        for p in [
            "/tmp/vgpu-0/region",
            "/x/containers/notauid_ctr/r.cache",
            "/x/containers/r.cache",
        ] {
            assert_eq!(
                Identity::from_path(Path::new(p)),
                Identity::default(),
                "{p}"
            );
        }
        assert_eq!(
            Identity::default().title(Path::new("/tmp/vgpu-0/run-42.cache")),
            "vgpu run 42"
        );
        assert_eq!(
            Identity::default().title(Path::new("/tmp/vgpu-0/region")),
            "/tmp/vgpu-0/region"
        );
    }

    /// Issue 26 item 7: under a platform path the path is the identity; a record adds names
    /// only when its container is the path's; without a platform path the record is taken.
    #[test]
    fn a_record_that_contradicts_the_path_is_a_claim_not_the_identity() {
        let uid = "0f8c2c8e-8c0e-4a5b-9d1e-2f3a4b5c6d7e";
        let p = PathBuf::from(format!("/n/containers/{uid}_trainer/x.cache"));
        let rec = |c: Option<&str>| vgpu_region::PodIdentity::new(Some("ml"), Some("job-0"), c);
        let ok = Identity::from_path(&p).with_recorded(&rec(Some("trainer")));
        assert_eq!(ok.pod.as_deref(), Some("job-0"));
        assert_eq!(ok.claimed, None);
        let no_ctr = Identity::from_path(&p).with_recorded(&rec(None));
        assert_eq!(no_ctr.container.as_deref(), Some("trainer"));
        assert_eq!(no_ctr.pod.as_deref(), Some("job-0"));
        let liar = Identity::from_path(&p).with_recorded(&rec(Some("main")));
        assert_eq!((liar.namespace, liar.pod), (None, None));
        assert_eq!(liar.container.as_deref(), Some("trainer"));
        assert_eq!(liar.pod_uid.as_deref(), Some(uid));
        assert_eq!(liar.claimed, Some((rec(Some("main")), CONTRADICTS_PATH)));
        // No platform path: the record is all there is.
        let run = Identity::from_path(Path::new("/tmp/vgpu-0/run-7.cache"))
            .with_recorded(&rec(Some("main")));
        assert_eq!(run.container.as_deref(), Some("main"));
        assert_eq!(run.pod.as_deref(), Some("job-0"));
    }

    /// Issue 13 item 4: a region truncated between two refreshes (the exporter's and `top`'s
    /// loop) is reported, never a SIGBUS; read-only and read-write sets alike.
    #[test]
    fn a_region_truncated_while_watched_is_reported_not_faulted() {
        for read_only in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let loc = vgpu_region::Location::shared(dir.path().join("r.cache"));
            let init = [vgpu_region::DeviceInit {
                uuid: "GPU-a".into(),
                limit: Some(1 << 30),
                sm_limit: None,
            }];
            let (_live, _) = Region::open_or_create(&loc, &init).unwrap();
            let mut set = RegionSet::new(vec![loc.path.clone()], vec![dir.path().to_owned()]);
            set.read_only = read_only;
            set.refresh();
            assert!(set.errors.is_empty(), "{:?}", set.errors);
            assert_eq!(set.open.len(), 1);
            std::fs::OpenOptions::new()
                .write(true)
                .open(&loc.path)
                .unwrap()
                .set_len(0)
                .unwrap();
            set.refresh();
            assert!(set.open.is_empty());
            assert!(
                set.errors.iter().any(|e| e.contains("r.cache")),
                "{:?}",
                set.errors
            );
        }
    }
}
