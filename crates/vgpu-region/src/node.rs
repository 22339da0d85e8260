//! Taking turns on a GPU across containers: the node token.
//!
//! Every vgpu process of every container on a node that has a compute limit on a GPU opens the
//! GPU's token file (the preload names it `<node dir>/<gpu uuid>.sched`). Only the holder of the
//! token has work on that GPU: it opens its window, drains, and hands the token on. So containers
//! never time-slice each other in hardware (which costs 10–19 % on an H200 by the project's
//! reference measurements, and makes CUDA events over-count), and each one's measured windows are its own.
//!
//! The file is a [`NodeFile`]: magic, holder (0 free, else the holder's id), heartbeat
//! (CLOCK_MONOTONIC ns, refreshed by the holder), a futex generation word, and the number of
//! waiters. The holder also holds an open-file-description lock on byte [`HOLDER_BYTE`], taken on
//! a descriptor of its own (not the one the file was mapped from, so a forked child's inherited
//! mapping cannot keep a dead holder's lock alive); the kernel drops it when the holder dies, in
//! any PID namespace, and a waiter that finds the token held but the byte free takes over at
//! once. A holder that hangs stops refreshing its heartbeat; after [`STALE`] anyone may take over.
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use vgpu_policy::limiter::{Peer, SlotState};
use vgpu_policy::share::Waiter;
use vgpu_policy::slots::{SLOTS, Slot, Table};

use crate::raw::Mapping;
use crate::sys;

const MAGIC: u64 = 0x5647_5055_4e4f_4431; // "VGPUNOD1"

/// The layout version of a file whose slot table is initialised.
pub const LAYOUT_VERSION: u32 = 2;

/// The byte whose lock marks the live holder.
pub const HOLDER_BYTE: i64 = 4096;

/// A token held without a heartbeat for this long is taken over.
pub const STALE: Duration = Duration::from_secs(2);

/// How long after taking the token a holder may still be without its lock.
const LOCK_GRACE_NS: u64 = 20_000_000;

/// The token file's layout (version 2; docs/COMPUTE.md). The first 64 bytes are those of
/// version 1 (an old library reads and writes only them: the holder word stays the mutex); the
/// waiter slot table follows.
#[repr(C)]
pub struct NodeFile {
    magic: AtomicU64,
    holder: AtomicU64,
    beat: AtomicU64,
    generation: AtomicU32,
    pad: AtomicU32,
    waiters: AtomicU64,
    /// When the token was last released (written by the releaser before it clears `holder`).
    freed_at: AtomicU64,
    /// The last releaser's id.
    last_holder: AtomicU64,
    /// [`LAYOUT_VERSION`] once the slots are initialised (0 before).
    version: AtomicU32,
    /// The number of slots ([`SLOTS`]).
    slot_count: AtomicU32,
    slots: [Slot<AtomicU64>; SLOTS],
}

/// One GPU's token, as this process holds it open.
pub struct NodeToken {
    map: Mapping<NodeFile>,
    /// The descriptor of the holder lock (its own open file description).
    lock: File,
    id: u64,
    /// The holder as this process last saw it.
    seen: Seen,
    /// This process's waiter slot ([`NO_SLOT`]: none; claimed at open, and again whenever
    /// another process took it over after this one's heartbeat went stale while idle).
    slot: AtomicUsize,
}

const NO_SLOT: usize = usize::MAX;

fn open_rw(path: &Path, create: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .mode(0o666)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Maps the node file: the one place its shared mapping is made (a guard against faults from a
/// file truncated by another process is to be registered here).
fn map_node_file(file: &File) -> io::Result<Mapping<NodeFile>> {
    Mapping::<NodeFile>::new(file)
}

/// What a waiter last saw of the holder: its id and heartbeat, and when (on the waiter's own
/// clock) that pair was first seen. Judging a holder by how long *this* process has seen its
/// heartbeat unchanged needs no clock shared with the holder: a beat written from a clock ahead
/// of this one (a time namespace, a corrupted file) neither keeps a dead holder alive forever
/// nor makes a live one look dead.
#[derive(Default)]
struct Seen {
    holder: AtomicU64,
    beat: AtomicU64,
    since: AtomicU64,
}

impl Seen {
    /// How long (ns, this process's clock) the holder `h` has had the heartbeat `beat`.
    fn unchanged_for(&self, h: u64, beat: u64, now: u64) -> u64 {
        if self.holder.load(Ordering::Relaxed) != h || self.beat.load(Ordering::Relaxed) != beat {
            self.holder.store(h, Ordering::Relaxed);
            self.beat.store(beat, Ordering::Relaxed);
            self.since.store(now, Ordering::Relaxed);
            return 0;
        }
        now.saturating_sub(self.since.load(Ordering::Relaxed))
    }
}

impl NodeToken {
    /// Opens (creating if missing, 0666 whatever the umask: containers of every user share it)
    /// the token file at `path`.
    pub fn open(path: &Path) -> io::Result<NodeToken> {
        let file = open_rw(path, true)?;
        let md = file.metadata()?;
        if md.uid() == sys::getuid() {
            file.set_permissions(std::fs::Permissions::from_mode(0o666))?;
        }
        let size = size_of::<NodeFile>() as u64;
        if md.len() < size {
            // Extends only (a version-1 file, or a new one); never shrinks.
            file.set_len(size)?;
        }
        let map = map_node_file(&file)?;
        let lock = open_rw(path, false)?;
        let lmd = lock.metadata()?;
        if (lmd.dev(), lmd.ino()) != (md.dev(), md.ino()) {
            return Err(io::Error::other(
                "the token file was replaced while opening",
            ));
        }
        let f = map.get();
        let _ = f
            .magic
            .compare_exchange(0, MAGIC, Ordering::AcqRel, Ordering::Acquire);
        if f.magic.load(Ordering::Acquire) != MAGIC {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not a vgpu node token file",
            ));
        }
        // The slots of a new or version-1 file are all zero (empty): initialising is only
        // publishing the version and the count.
        if f.version
            .compare_exchange(0, LAYOUT_VERSION, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            f.slot_count
                .store(u32::try_from(SLOTS).unwrap_or(0), Ordering::Release);
        }
        // A random non-zero id for this process.
        let mut id = 0u64;
        while id == 0 {
            id = (sys::monotonic_ns() ^ (u64::from(std::process::id()) << 32))
                .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
        let t = NodeToken {
            map,
            lock,
            id,
            slot: AtomicUsize::new(NO_SLOT),
            seen: Seen::default(),
        };
        t.slot(sys::monotonic_ns());
        Ok(t)
    }

    /// This process's id in the file.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Whether this process has a waiter slot.
    pub fn has_slot(&self) -> bool {
        self.slot.load(Ordering::Relaxed) != NO_SLOT
    }

    /// This process's slot, (re)claimed if it has none or lost it: a slot whose heartbeat went
    /// stale (the process was idle for a while) may have been taken over by another process.
    fn slot(&self, now: u64) -> Option<usize> {
        let f = self.map.get();
        let i = self.slot.load(Ordering::Relaxed);
        if i != NO_SLOT && f.slots[i].owner.load(Ordering::SeqCst) == self.id {
            return Some(i);
        }
        let got = self.table().claim(self.id, now);
        self.slot.store(got.unwrap_or(NO_SLOT), Ordering::Relaxed);
        got
    }

    /// This process's slot as it stands (no claim).
    fn current_slot(&self) -> Option<usize> {
        let i = self.slot.load(Ordering::Relaxed);
        (i != NO_SLOT && self.map.get().slots[i].owner.load(Ordering::SeqCst) == self.id)
            .then_some(i)
    }

    fn table(&self) -> Table<'_, AtomicU64> {
        let f = self.map.get();
        Table {
            holder: &f.holder,
            freed_at: &f.freed_at,
            last_holder: &f.last_holder,
            slots: &f.slots,
        }
    }

    /// Whether the holder's lock byte is held by another open file description (on an error,
    /// assume it is: the heartbeat then decides).
    fn holder_alive(&self) -> bool {
        let fd = self.lock.as_raw_fd();
        match sys::ofd_try_lock(fd, HOLDER_BYTE) {
            Ok(true) => {
                let _ = sys::ofd_unlock(fd, HOLDER_BYTE);
                false
            }
            Ok(false) | Err(_) => true,
        }
    }

    /// Whether the token held by `h` (non-zero, not this process) may be taken over:
    /// * its lock is gone (it died), whatever its heartbeat says, once the heartbeat is older
    ///   than the grace that covers a holder between its compare-exchange and taking the lock
    ///   (by the file's clock, or by how long this process has seen it unchanged: a beat in the
    ///   future must not keep a dead holder forever, issue 13);
    /// * or its heartbeat is older than [`STALE`] (a hung holder), by the file's clock or by how
    ///   long this process has seen it unchanged.
    fn holder_gone(&self, h: u64, beat: u64, now: u64) -> bool {
        let stale = u64::try_from(STALE.as_nanos()).unwrap_or(u64::MAX);
        let age = now.saturating_sub(beat);
        let unchanged = self.seen.unchanged_for(h, beat, now);
        age > stale
            || unchanged > stale
            || ((age > LOCK_GRACE_NS || unchanged > LOCK_GRACE_NS) && !self.holder_alive())
    }

    fn took(&self) {
        self.map
            .get()
            .beat
            .store(sys::monotonic_ns(), Ordering::Release);
        let _ = sys::ofd_try_lock(self.lock.as_raw_fd(), HOLDER_BYTE);
    }

    /// Waits until this process holds the token, first come (no key: what a version-1 library
    /// does; the compute controller uses [`Self::try_take`] with its announced key instead).
    pub fn acquire(&self) {
        let mut scratch = Vec::new();
        let mut waiting = false;
        loop {
            let g = self.generation();
            if self.try_take(sys::monotonic_ns(), &mut scratch) {
                if waiting {
                    self.map.get().waiters.fetch_sub(1, Ordering::AcqRel);
                }
                return;
            }
            if !waiting {
                waiting = true;
                self.map.get().waiters.fetch_add(1, Ordering::AcqRel);
            }
            self.wait(g, Duration::from_millis(50));
        }
    }

    /// The generation word (read before [`Self::try_take`], then [`Self::wait`] on it).
    pub fn generation(&self) -> u32 {
        self.map.get().generation.load(Ordering::Acquire)
    }

    /// Sleeps until the generation changes from `g` (a release) or `timeout` passes.
    pub fn wait(&self, g: u32, timeout: Duration) {
        sys::futex_wait_shared(&self.map.get().generation, g, timeout);
    }

    /// Counts this process in (or out of) the file's waiter count, which version-1 libraries
    /// read.
    pub fn count_waiting(&self, on: bool) {
        let w = &self.map.get().waiters;
        if on {
            w.fetch_add(1, Ordering::AcqRel);
        } else {
            w.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Tries to take the token now, under the slot protocol (A2: the eligible waiter with the
    /// smallest key first, see [`Table::try_take`]); a holder that died or whose heartbeat is
    /// stale is displaced first. Returns whether this process holds it.
    pub fn try_take(&self, now: u64, scratch: &mut Vec<Waiter>) -> bool {
        let f = self.map.get();
        let h = f.holder.load(Ordering::Acquire);
        if h == self.id {
            return true;
        }
        if h != 0 {
            if !self.holder_gone(h, f.beat.load(Ordering::Acquire), now) {
                return false;
            }
            // Displace it: the takeover goes straight to this process (rare: a dead or hung
            // holder), without the keys.
            if f.holder
                .compare_exchange(h, self.id, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                return false;
            }
            if let Some(i) = self.current_slot() {
                f.slots[i].served.store(now, Ordering::SeqCst);
                f.slots[i].key.store(0, Ordering::SeqCst);
            }
            self.took();
            return true;
        }
        if !self
            .table()
            .try_take(self.id, self.current_slot(), now, scratch)
        {
            return false;
        }
        self.took();
        true
    }

    /// When a waiter refused by [`Self::try_take`] should look again at the latest.
    pub fn retry_at(&self, now: u64, scratch: &mut Vec<Waiter>) -> u64 {
        self.table().waiters(scratch);
        vgpu_policy::share::retry_at(scratch, now, self.freed_at())
    }

    /// Publishes this process's key (A3) and refreshes its slot's heartbeat.
    pub fn announce(&self, key: u64, fresh: bool, now: u64) {
        if let Some(i) = self.slot(now) {
            self.table().announce(i, key, fresh, now);
        }
    }

    /// Withdraws this process's key (it no longer waits).
    pub fn withdraw(&self) {
        if let Some(i) = self.current_slot() {
            self.table().withdraw(i);
        }
    }

    /// The published waiters (other processes' and this one's), into `out`.
    pub fn waiters_into(&self, out: &mut Vec<Waiter>) {
        self.table().waiters(out);
    }

    /// When the token was last released, and by whom.
    pub fn freed_at(&self) -> u64 {
        self.map.get().freed_at.load(Ordering::Acquire)
    }

    /// The id of the last process that released the token (0: none yet).
    pub fn last_holder(&self) -> u64 {
        self.map.get().last_holder.load(Ordering::Acquire)
    }

    /// Refreshes the heartbeat while holding (and this process's slot's).
    pub fn heartbeat(&self) {
        let now = sys::monotonic_ns();
        let f = self.map.get();
        f.beat.store(now, Ordering::Release);
        if let Some(i) = self.current_slot() {
            f.slots[i].beat.store(now, Ordering::SeqCst);
        }
    }

    /// Hands the token on: records who released it and when, frees it, wakes the waiters.
    pub fn release(&self) {
        let f = self.map.get();
        let _ = sys::ofd_unlock(self.lock.as_raw_fd(), HOLDER_BYTE);
        self.table().release(self.id, sys::monotonic_ns());
        f.generation.fetch_add(1, Ordering::AcqRel);
        sys::futex_wake_shared(&f.generation);
    }

    /// How many processes wait for the token now, counted in the version-1 word (waiters of
    /// every library version count themselves there).
    pub fn waiters(&self) -> u64 {
        self.map.get().waiters.load(Ordering::Acquire)
    }

    /// Gives the slot back (at exit; a dead process's slot goes stale instead).
    pub fn unclaim(&self) {
        if let Some(i) = self.current_slot() {
            self.table().unclaim(i, self.id);
        }
    }
}

/// The third-generation limiter's view of the node file (`vgpu_policy::limiter`): each process
/// publishes its whole state in its slot's key word (`SlotState::word`), reads its peers', and
/// takes the free token by the limiter's rule.
impl NodeToken {
    /// Publishes this process's limiter state (and refreshes its slot's heartbeat).
    pub fn publish(&self, state: &SlotState, now: u64) {
        if let Some(i) = self.slot(now) {
            let s = &self.map.get().slots[i];
            s.beat.store(now, Ordering::SeqCst);
            s.key.store(state.word(), Ordering::SeqCst);
        }
    }

    /// The other processes whose slots are fresh and say something, into `out` (cleared
    /// first). A word that is not a limiter state (an older library's key) is left out.
    pub fn peers_into(&self, now: u64, out: &mut Vec<Peer>) {
        out.clear();
        let f = self.map.get();
        let holder = f.holder.load(Ordering::Acquire);
        for s in &f.slots {
            let id = s.owner.load(Ordering::SeqCst);
            if id == 0 || id == self.id {
                continue;
            }
            let beat = s.beat.load(Ordering::SeqCst);
            if !vgpu_policy::share::beat_fresh(beat, now) {
                continue;
            }
            if let Some(state) = SlotState::parse(s.key.load(Ordering::SeqCst)) {
                out.push(Peer {
                    id,
                    state,
                    served: s.served.load(Ordering::SeqCst),
                    beat,
                    holder: holder == id,
                });
            }
        }
    }

    /// Whether this process holds the token.
    pub fn holding(&self) -> bool {
        self.map.get().holder.load(Ordering::Acquire) == self.id
    }

    /// Tries to take the token by the limiter's rule: a holder that died or hung is displaced
    /// as by [`Self::try_take`]; a free token is taken when `limiter::may_take_now` allows it
    /// for this process's `key` among `peers` (read just before). Returns whether this process
    /// holds it.
    pub fn try_take_keyed(&self, key: u64, peers: &[Peer], now: u64) -> bool {
        let f = self.map.get();
        let h = f.holder.load(Ordering::Acquire);
        if h == self.id {
            return true;
        }
        if h != 0 && !self.holder_gone(h, f.beat.load(Ordering::Acquire), now) {
            return false;
        }
        let slot = self.current_slot();
        let served = slot.map_or(0, |i| f.slots[i].served.load(Ordering::SeqCst));
        if h == 0
            && !vgpu_policy::limiter::may_take_now(
                self.id,
                Some((key, served)),
                peers,
                now,
                f.freed_at.load(Ordering::Acquire),
            )
        {
            return false;
        }
        if f.holder
            .compare_exchange(h, self.id, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        if let Some(i) = slot {
            f.slots[i].served.store(now, Ordering::SeqCst);
        }
        self.took();
        true
    }
}

/// A token file as [`peek`] read it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenStatus {
    /// The holder's id (0: free).
    pub holder: u64,
    /// Whether another open file description holds the holder byte's lock (a live holder).
    pub holder_locked: bool,
    /// The holder's heartbeat, CLOCK_MONOTONIC ns.
    pub beat: u64,
    /// The version-1 waiter count.
    pub waiters: u64,
    /// When the token was last released, CLOCK_MONOTONIC ns, and by whom.
    pub freed_at: u64,
    pub last_holder: u64,
    /// The slots in use (owner not 0).
    pub slots: Vec<SlotStatus>,
}

/// One waiter slot as [`peek`] read it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotStatus {
    /// The owning process's id.
    pub owner: u64,
    /// Its announced key (0: not waiting).
    pub key: u64,
    /// When the owner last took the token, CLOCK_MONOTONIC ns.
    pub served: u64,
    /// The owner's heartbeat.
    pub beat: u64,
}

/// Reads the token file at `path` without taking part: opened `O_RDONLY`, mapped read-only,
/// no slot claimed, no lock taken, nothing written (for `vgpu status --node`). A file that is
/// not a vgpu token file, or too short for the waiter table, is an error.
pub fn peek(path: &Path) -> io::Result<TokenStatus> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    let map = Mapping::<NodeFile>::read_only(&file)?;
    let f = map.get();
    if f.magic.load(Ordering::Acquire) != MAGIC {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a vgpu node token file",
        ));
    }
    let n = usize::try_from(f.slot_count.load(Ordering::Acquire))
        .unwrap_or(0)
        .min(SLOTS);
    let slots = f.slots[..n]
        .iter()
        .map(|s| SlotStatus {
            owner: s.owner.load(Ordering::SeqCst),
            key: s.key.load(Ordering::SeqCst),
            served: s.served.load(Ordering::SeqCst),
            beat: s.beat.load(Ordering::SeqCst),
        })
        .filter(|s| s.owner != 0)
        .collect();
    let status = TokenStatus {
        holder: f.holder.load(Ordering::Acquire),
        holder_locked: sys::ofd_lock_held(file.as_raw_fd(), HOLDER_BYTE).unwrap_or(false),
        beat: f.beat.load(Ordering::Acquire),
        waiters: f.waiters.load(Ordering::Acquire),
        freed_at: f.freed_at.load(Ordering::Acquire),
        last_holder: f.last_holder.load(Ordering::Acquire),
        slots,
    };
    if map.broken() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the token file was truncated while read",
        ));
    }
    Ok(status)
}

// The version-1 prefix must keep its size and offsets.
const _: () = assert!(core::mem::offset_of!(NodeFile, freed_at) == 40);
// The version-1 part of the file (what an old library creates) is 64 bytes.
const _: () = assert!(core::mem::offset_of!(NodeFile, slots) == 64);
const _: () = assert!(size_of::<NodeFile>() == 1088);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_a_released_token_passes_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpu.sched");
        let a = NodeToken::open(&path).unwrap();
        let b = NodeToken::open(&path).unwrap();
        a.acquire();
        assert_eq!(a.map.get().holder.load(Ordering::Acquire), a.id);
        // B's descriptor sees A's holder lock.
        assert!(b.holder_alive());
        a.release();
        assert!(!b.holder_alive());
        b.acquire();
        assert_eq!(b.map.get().holder.load(Ordering::Acquire), b.id);
        b.release();
        assert_eq!(b.waiters(), 0);
    }

    #[test]
    fn a_heartbeat_in_the_future_does_not_keep_the_token_forever() {
        // Issue 13: a holder id with a heartbeat far ahead of now (a wrong clock, a corrupted
        // file) and no live lock: the token is taken over once the grace has passed on this
        // process's own clock, not never.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpu.sched");
        let a = NodeToken::open(&path).unwrap();
        let f = a.map.get();
        f.holder.store(0xdead, Ordering::Release);
        let future = sys::monotonic_ns() + 3_600_000_000_000;
        f.beat.store(future, Ordering::Release);
        let mut scratch = Vec::new();
        let now = sys::monotonic_ns();
        assert!(!a.try_take(now, &mut scratch), "within the grace");
        assert!(a.try_take(now + LOCK_GRACE_NS + 1, &mut scratch));
        a.release();
        // A live holder (its lock held) with a beat in the future (another clock) keeps the
        // token while its beat changes; once its beat stands still for STALE it is hung.
        let b = NodeToken::open(&path).unwrap();
        b.acquire();
        f.beat.store(future, Ordering::Release);
        let now = sys::monotonic_ns();
        assert!(!a.try_take(now, &mut scratch));
        assert!(!a.try_take(now + LOCK_GRACE_NS + 1, &mut scratch), "alive");
        f.beat.store(future + 1, Ordering::Release);
        let stale = u64::try_from(STALE.as_nanos()).unwrap();
        assert!(!a.try_take(now + stale, &mut scratch), "its beat moved");
        assert!(a.try_take(now + 2 * stale + 1, &mut scratch), "hung");
    }

    #[test]
    fn the_file_is_version_2_with_a_slot_each_and_keys_order_the_handoff() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpu.sched");
        // A version-1 file (64 bytes, made by an old library) is extended, never shrunk.
        std::fs::write(
            &path,
            MAGIC
                .to_ne_bytes()
                .iter()
                .chain(&[0u8; 56])
                .copied()
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let a = NodeToken::open(&path).unwrap();
        let b = NodeToken::open(&path).unwrap();
        let c = NodeToken::open(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 1088);
        assert_eq!(a.map.get().version.load(Ordering::Acquire), LAYOUT_VERSION);
        assert!(a.has_slot() && b.has_slot() && c.has_slot());
        let mut s = Vec::new();
        a.acquire();
        let now = sys::monotonic_ns();
        b.announce(now - 10_000_000, false, now);
        c.announce(now - 20_000_000, false, now);
        a.release();
        let now = sys::monotonic_ns();
        assert!(!b.try_take(now, &mut s), "C is due earlier");
        assert!(c.try_take(now, &mut s));
        assert_eq!(c.last_holder(), a.id());
        c.release();
        assert!(b.try_take(sys::monotonic_ns(), &mut s));
        b.release();
        c.unclaim();
        // A slot taken over while its owner was idle (stale) is claimed anew at the next
        // announcement, never written while another process owns it.
        let bi = b.current_slot().unwrap();
        let f = b.map.get();
        f.slots[bi].owner.store(0xbeef, Ordering::SeqCst);
        let now = sys::monotonic_ns();
        b.announce(now, false, now);
        assert_eq!(
            f.slots[bi].key.load(Ordering::SeqCst),
            0,
            "not B's slot any more"
        );
        assert_ne!(b.current_slot(), Some(bi));
        assert!(b.has_slot());
    }

    #[test]
    fn a_file_of_something_else_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("other");
        std::fs::write(&path, [0xffu8; 64]).unwrap();
        assert!(NodeToken::open(&path).is_err());
    }

    /// Issue 26 item 11: `peek` reads the holder, its lock and the waiters' slots without
    /// taking part (read-only: a 0444 file works) and refuses what is not a token file.
    #[test]
    fn peek_reads_the_holder_and_the_waiters_without_taking_part() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpu.sched");
        let a = NodeToken::open(&path).unwrap();
        let b = NodeToken::open(&path).unwrap();
        let mut scratch = Vec::new();
        assert!(a.try_take(sys::monotonic_ns(), &mut scratch));
        b.announce(6, true, sys::monotonic_ns());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
        let s = peek(&path).unwrap();
        assert_eq!(s.holder, a.id());
        assert!(s.holder_locked);
        assert_eq!(s.slots.len(), 2, "{s:?}");
        let waiting: Vec<u64> = s
            .slots
            .iter()
            .filter(|x| x.key != 0)
            .map(|x| x.owner)
            .collect();
        assert_eq!(waiting, vec![b.id()]);
        a.release();
        let s = peek(&path).unwrap();
        assert_eq!(
            (s.holder, s.holder_locked, s.last_holder),
            (0, false, a.id())
        );
        let other = dir.path().join("other");
        std::fs::write(&other, [0xffu8; 2048]).unwrap();
        assert!(peek(&other).is_err());
        std::fs::write(&other, [0u8; 16]).unwrap();
        assert!(peek(&other).is_err());
    }
}
