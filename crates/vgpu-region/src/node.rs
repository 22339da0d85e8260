//! Taking turns on a GPU across containers: the node token.
//!
//! Every vgpu process of every container on a node that has a compute limit on a GPU opens the
//! GPU's token file (the preload names it `<node dir>/<gpu uuid>.sched`). Only the holder of the
//! token has work on that GPU: it opens its window, drains, and hands the token on. So containers
//! never time-slice each other in hardware (which costs 10–19 % on an H200 by the project's
//! reference measurements, and makes CUDA events over-count), and each one's measured windows are its own.
//!
//! The file is a [`NodeFile`] (layout version 3, docs/COMPUTE.md): magic, holder (0 free, else
//! the holder's id), heartbeat, a futex generation word, the version-1 waiter count, the
//! release's time and author, and the waiter slot table ([`vgpu_policy::slots`]). The holder
//! also holds an open-file-description lock on byte [`HOLDER_BYTE`], and every process one on
//! the byte of its slot ([`SLOT_LOCK_BASE`] + index), taken on a descriptor of its own (not the
//! one the file was mapped from); the kernel drops them when the process dies, in any PID
//! namespace. A holder is judged by its lock and by how long *this* process has seen its
//! heartbeat unchanged, on this process's own clock: never by comparing the heartbeat with this
//! process's clock, which another time namespace (or a restored checkpoint) may put seconds
//! apart. A holder whose lock is gone is taken over once its heartbeat stood still for a short
//! grace; one whose heartbeat stood still for [`STALE`] (it hangs) whatever its lock says.
//!
//! Waiting costs little: a release wakes only the first two in line (futex wake bits, one per
//! slot modulo 31: [`vgpu_policy::slots::wake_bit`]); a waiter refused while the token is held
//! sleeps until that wake or [`vgpu_policy::token::HELD_POLL`] ([`NodeToken::retry_at`]).
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, IntoRawFd, RawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use vgpu_policy::limiter::{Peer, SlotState};
use vgpu_policy::slots::{self, SLOTS, Seat, Slot, SlotLocks, Table, V2_SLOTS};
use vgpu_policy::token;
use vgpu_policy::token::{Waiter, Watched};

use crate::raw::Mapping;
use crate::sys;

const MAGIC: u64 = 0x5647_5055_4e4f_4431; // "VGPUNOD1"

/// The layout version of a file whose slot table of [`SLOTS`] is initialised (2: the first
/// [`V2_SLOTS`] only, by an older library; such a file is extended and moved to 3 on opening).
pub const LAYOUT_VERSION: u32 = 3;

/// The byte whose lock marks the live holder.
pub const HOLDER_BYTE: i64 = 4096;

/// Slot `i`'s owner holds a lock on byte `SLOT_LOCK_BASE + i` (past the file's data: locks do
/// not need the bytes to exist).
pub const SLOT_LOCK_BASE: i64 = 1 << 20;

/// A token held by a process whose heartbeat this process has seen standing still for this
/// long is taken over, whatever its lock says (the holder hangs).
pub const STALE: Duration = Duration::from_secs(2);

/// How long a holder whose lock is gone must have kept its heartbeat still (as this process
/// saw it) before it is taken over: it covers a holder between its compare-exchange and taking
/// its lock.
const LOCK_GRACE_NS: u64 = 20_000_000;

/// Version 3's words after the slot table.
#[repr(C)]
struct Extension {
    /// Where the waiters without a slot publish the earliest of their keys.
    overflow: Slot<AtomicU64>,
    /// The scan bound: slots at and above it are unused.
    high: AtomicU64,
    reserved: [AtomicU64; 3],
}

/// The token file's layout (version 3; docs/COMPUTE.md). The first 64 bytes are those of
/// version 1 (an old library reads and writes only them: the holder word stays the mutex); the
/// first [`V2_SLOTS`] slots are those of version 2 (which uses only them); the rest of the slots
/// and the extension follow.
#[repr(C)]
pub struct NodeFile {
    magic: AtomicU64,
    holder: AtomicU64,
    beat: AtomicU64,
    generation: AtomicU32,
    pad: AtomicU32,
    /// The version-1 waiter count: written for older libraries, never read by this one (a
    /// waiter that died leaves it raised).
    waiters: AtomicU64,
    /// When the token was last released (written by the releaser before it clears `holder`).
    freed_at: AtomicU64,
    /// The last releaser's id.
    last_holder: AtomicU64,
    /// [`LAYOUT_VERSION`] once the slots are initialised (0 before).
    version: AtomicU32,
    /// The number of slots.
    slot_count: AtomicU32,
    slots: [Slot<AtomicU64>; SLOTS],
    ext: Extension,
}

/// A clock: nanoseconds of `CLOCK_MONOTONIC` in production ([`NodeToken::open`]); tests give a
/// process one that runs ahead or behind ([`NodeToken::open_with_clock`]).
pub type Clock = fn() -> u64;

/// One GPU's token, as this process holds it open.
pub struct NodeToken {
    map: Mapping<NodeFile>,
    /// The descriptor of the holder lock and of this process's slot lock (its own open file
    /// description), owned; -1 once [`NodeToken::on_fork_child`] closed it.
    lock: AtomicI32,
    id: u64,
    clock: Clock,
    /// The holder as this process last saw it.
    seen: Seen,
    /// This process's waiter slot ([`NO_SLOT`]: none; claimed at open, and again whenever
    /// another process took it over after this one's heartbeat went stale while idle).
    slot: AtomicUsize,
    /// The slot whose lock this process holds ([`NO_SLOT`]: none).
    locked: AtomicUsize,
    /// The key word this process published in the overflow slot (0: none).
    overflow: AtomicU64,
    /// Whether this process counts itself in the version-1 waiter word.
    counted: AtomicBool,
    /// The waiters as read at a release (kept, so that a release does not allocate).
    scratch: Mutex<Vec<Waiter>>,
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

/// Maps the node file: the one place its shared mapping is made. The mapping is guarded
/// ([`Mapping::new`]): a file truncated by another process reads as zeroes instead of faulting.
fn map_node_file(file: &File) -> io::Result<Mapping<NodeFile>> {
    Mapping::<NodeFile>::new(file)
}

/// What a waiter last saw of the holder ([`Watched`]: its id and heartbeat, and since when on
/// the waiter's own clock), in atomics: any thread of the process may check the holder.
#[derive(Default)]
struct Seen {
    holder: AtomicU64,
    beat: AtomicU64,
    since: AtomicU64,
}

impl Seen {
    /// How long (ns, this process's clock) the holder `h` has had the heartbeat `beat`.
    fn unchanged_for(&self, h: u64, beat: u64, now: u64) -> u64 {
        let before = Watched {
            id: self.holder.load(Ordering::Relaxed),
            beat: self.beat.load(Ordering::Relaxed),
            since: self.since.load(Ordering::Relaxed),
        };
        let w = Watched::seen(Some(before), h, beat, now);
        if w != before {
            self.holder.store(w.id, Ordering::Relaxed);
            self.beat.store(w.beat, Ordering::Relaxed);
            self.since.store(w.since, Ordering::Relaxed);
        }
        w.still_for(now)
    }
}

/// The slot locks, on this process's lock descriptor.
struct Locks(RawFd);

impl SlotLocks for Locks {
    fn try_lock(&self, i: usize) -> bool {
        // On an error (a filesystem without OFD locks) a claim goes by the heartbeats alone.
        sys::ofd_try_lock(self.0, slot_byte(i)).unwrap_or(true)
    }
    fn unlock(&self, i: usize) {
        let _ = sys::ofd_unlock(self.0, slot_byte(i));
    }
}

fn slot_byte(i: usize) -> i64 {
    SLOT_LOCK_BASE + i64::try_from(i).unwrap_or(0)
}

impl NodeToken {
    /// Opens (creating if missing, 0666 whatever the umask: containers of every user share it)
    /// the token file at `path`, for a process that is a container of its own.
    pub fn open(path: &Path) -> io::Result<NodeToken> {
        Self::open_as(path, None, sys::monotonic_ns)
    }

    /// [`Self::open`] for a process of the container tagged `container`
    /// ([`crate::Region::container_tag`]): the high 32 bits of its token id are the tag, so
    /// that its peers of one container know each other ([`Peer::kin`]).
    pub fn open_for(path: &Path, container: u32) -> io::Result<NodeToken> {
        Self::open_as(path, Some(container), sys::monotonic_ns)
    }

    /// [`Self::open`] with this process's clock given (tests: a process whose clock runs ahead
    /// or behind the others'). Every time the token reads or writes is this clock's; the times
    /// passed to its methods should be too.
    pub fn open_with_clock(path: &Path, clock: Clock) -> io::Result<NodeToken> {
        Self::open_as(path, None, clock)
    }

    fn open_as(path: &Path, container: Option<u32>, clock: Clock) -> io::Result<NodeToken> {
        let file = open_rw(path, true)?;
        let md = file.metadata()?;
        if md.uid() == sys::getuid() {
            file.set_permissions(std::fs::Permissions::from_mode(0o666))?;
        }
        let size = size_of::<NodeFile>() as u64;
        if md.len() < size {
            // Extends only (a version-1 or -2 file, or a new one); never shrinks.
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
        // The slots past a new, version-1 or version-2 file's are all zero (empty):
        // initialising is only publishing the version and the count. A version-2 library keeps
        // using the first V2_SLOTS (every scan reads them) and never reads the version again.
        for from in [0, 2] {
            if f.version
                .compare_exchange(from, LAYOUT_VERSION, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                break;
            }
        }
        f.slot_count
            .store(u32::try_from(SLOTS).unwrap_or(0), Ordering::Release);
        // A random id for this process whose high half is its container's tag (random too
        // for a container of its own), the low half non-zero (never the overflow's).
        let mut id = 0u64;
        let mut salt = 0u64;
        while id & 0xffff_ffff == 0 || id == token::OVERFLOW {
            id = (sys::monotonic_ns() ^ (u64::from(std::process::id()) << 32) ^ salt)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15);
            if let Some(tag) = container {
                id = (u64::from(tag) << 32) | (id & 0xffff_ffff);
            }
            salt += 1;
        }
        let t = NodeToken {
            map,
            lock: AtomicI32::new(lock.into_raw_fd()),
            id,
            clock,
            slot: AtomicUsize::new(NO_SLOT),
            locked: AtomicUsize::new(NO_SLOT),
            overflow: AtomicU64::new(0),
            counted: AtomicBool::new(false),
            seen: Seen::default(),
            scratch: Mutex::new(Vec::with_capacity(SLOTS + 1)),
        };
        t.slot(clock());
        Ok(t)
    }

    /// This process's id in the file.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Whether this process has a waiter slot.
    pub fn has_slot(&self) -> bool {
        self.current_slot().is_some()
    }

    /// This process's slot, (re)claimed if it has none or lost it: a slot whose heartbeat went
    /// stale while its owner was idle may have been taken over by a version-2 library (which
    /// knows no slot locks).
    fn slot(&self, now: u64) -> Option<usize> {
        if let Some(i) = self.current_slot() {
            return Some(i);
        }
        let locks = Locks(self.lock_fd());
        let old = self.locked.load(Ordering::Relaxed);
        let got = self.table().claim_locked(self.id, now, &locks);
        if old != NO_SLOT && got != Some(old) {
            locks.unlock(old);
        }
        self.slot.store(got.unwrap_or(NO_SLOT), Ordering::Relaxed);
        self.locked.store(got.unwrap_or(NO_SLOT), Ordering::Relaxed);
        got
    }

    /// This process's slot as it stands (no claim).
    fn current_slot(&self) -> Option<usize> {
        let i = self.slot.load(Ordering::Relaxed);
        (i < SLOTS && self.map.get().slots[i].owner.load(Ordering::SeqCst) == self.id).then_some(i)
    }

    /// Where this process's key is published.
    fn seat(&self) -> Option<Seat> {
        if let Some(i) = self.current_slot() {
            return Some(Seat::Slot(i));
        }
        let w = self.overflow.load(Ordering::Relaxed);
        (w != 0).then_some(Seat::Overflow(w))
    }

    fn table(&self) -> Table<'_, AtomicU64> {
        let f = self.map.get();
        Table {
            holder: &f.holder,
            freed_at: &f.freed_at,
            last_holder: &f.last_holder,
            slots: &f.slots,
            high: &f.ext.high,
            always: V2_SLOTS,
            overflow: &f.ext.overflow,
        }
    }

    /// Counts this process in (or out of) the version-1 waiter word, for older libraries
    /// (this one never reads it). Saturating: a word another process zeroed is not wrapped.
    fn count(&self, on: bool) {
        if self.counted.swap(on, Ordering::Relaxed) == on {
            return;
        }
        let w = &self.map.get().waiters;
        let _ = w.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            Some(if on {
                n.saturating_add(1)
            } else {
                n.saturating_sub(1)
            })
        });
    }

    /// Whether the holder's lock byte is held by another open file description (on an error,
    /// assume it is: the heartbeat then decides).
    fn holder_alive(&self) -> bool {
        let fd = self.lock_fd();
        match sys::ofd_try_lock(fd, HOLDER_BYTE) {
            Ok(true) => {
                let _ = sys::ofd_unlock(fd, HOLDER_BYTE);
                false
            }
            Ok(false) | Err(_) => true,
        }
    }

    /// Whether the token held by `h` (non-zero, not this process) may be taken over, judged by
    /// how long this process has seen its heartbeat `beat` unchanged on its own clock (never by
    /// the beat's value against this clock: issue 13, and a clock seconds ahead of the holder's
    /// must not make a live holder look dead):
    /// * its lock is gone (it died), once its heartbeat stood still for the grace that covers a
    ///   holder between its compare-exchange and taking the lock;
    /// * or its heartbeat stood still for [`STALE`] (a hung holder).
    fn holder_gone(&self, h: u64, beat: u64, now: u64) -> bool {
        let stale = u64::try_from(STALE.as_nanos()).unwrap_or(u64::MAX);
        let unchanged = self.seen.unchanged_for(h, beat, now);
        unchanged > stale || (unchanged > LOCK_GRACE_NS && !self.holder_alive())
    }

    fn took(&self) {
        self.map.get().beat.store((self.clock)(), Ordering::Release);
        let _ = sys::ofd_try_lock(self.lock_fd(), HOLDER_BYTE);
        self.count(false);
        self.withdraw_overflow();
    }

    /// Waits until this process holds the token, in the order it started waiting (its key is
    /// the time it called this; the compute controller announces its due time instead and uses
    /// [`Self::try_take`]).
    pub fn acquire(&self) {
        let key = (self.clock)();
        let mut scratch = Vec::new();
        loop {
            let now = (self.clock)();
            self.announce(key, false, now);
            let g = self.generation();
            if self.try_take(now, &mut scratch) {
                return;
            }
            let now = (self.clock)();
            let at = self.retry_at(now, &mut scratch);
            self.wait(g, Duration::from_nanos(at.saturating_sub(now)));
        }
    }

    /// The generation word (read before [`Self::try_take`], then [`Self::wait`] on it).
    pub fn generation(&self) -> u32 {
        self.map.get().generation.load(Ordering::Acquire)
    }

    /// Sleeps until a release wakes this process (it is one of the first two in line), the
    /// generation changed from `g` (a release happened since it was read), or `timeout` passes.
    /// A release by an older library wakes every waiter.
    pub fn wait(&self, g: u32, timeout: Duration) {
        sys::futex_wait_shared_bits(
            &self.map.get().generation,
            g,
            timeout,
            slots::wake_bit(self.seat()),
        );
    }

    /// Tries to take the token now, under the slot protocol (A2: the eligible waiter with the
    /// smallest key first, see [`Table::try_take`]); a holder that died or hangs is displaced
    /// first. Returns whether this process holds it. A refusal counts this process in the
    /// version-1 waiter word (for older libraries) until it takes the token or withdraws.
    pub fn try_take(&self, now: u64, scratch: &mut Vec<Waiter>) -> bool {
        let took = self.take(now, scratch);
        if took {
            self.took();
        } else {
            self.count(true);
        }
        took
    }

    fn take(&self, now: u64, scratch: &mut Vec<Waiter>) -> bool {
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
            match self.seat() {
                Some(Seat::Slot(i)) => {
                    f.slots[i].served.store(now, Ordering::SeqCst);
                    f.slots[i].key.store(0, Ordering::SeqCst);
                }
                Some(Seat::Overflow(w)) => self.table().withdraw_overflow(w),
                None => {}
            }
            return true;
        }
        self.table().try_take(self.id, self.seat(), now, scratch)
    }

    /// When a waiter refused by [`Self::try_take`] should look again at the latest: after
    /// [`token::HELD_POLL`] while another process holds the token (its release wakes the next
    /// in line before that), else at the winner's grace's end; never sooner than
    /// [`token::MIN_LOOK`] (see [`token::look_again_at`]).
    pub fn retry_at(&self, now: u64, scratch: &mut Vec<Waiter>) -> u64 {
        let h = self.map.get().holder.load(Ordering::Acquire);
        self.table().waiters(scratch);
        token::look_again_at(h != 0 && h != self.id, scratch, now, self.freed_at())
    }

    /// Publishes this process's key (A3) and refreshes its slot's heartbeat; without a slot
    /// (the table is full), in the overflow slot.
    pub fn announce(&self, key: u64, fresh: bool, now: u64) {
        let t = self.table();
        if let Some(i) = self.slot(now) {
            self.withdraw_overflow();
            t.announce(i, key, fresh, now);
            return;
        }
        let word = token::key_word(key, fresh);
        let old = self.overflow.swap(word, Ordering::Relaxed);
        if old != 0 && old != word {
            t.withdraw_overflow(old);
        }
        t.announce_overflow(key, fresh, now);
    }

    fn withdraw_overflow(&self) {
        let w = self.overflow.swap(0, Ordering::Relaxed);
        if w != 0 {
            self.table().withdraw_overflow(w);
        }
    }

    /// Withdraws this process's key (it no longer waits).
    pub fn withdraw(&self) {
        if let Some(i) = self.current_slot() {
            self.table().withdraw(i);
        }
        self.withdraw_overflow();
        self.count(false);
    }

    /// The published waiters (other processes' and this one's), into `out`; the waiters without
    /// a slot appear as one, with the id [`token::OVERFLOW`].
    pub fn waiters_into(&self, out: &mut Vec<Waiter>) {
        self.table().waiters(out);
    }

    /// How many other processes wait for the token now, by the slots: a published key (due or
    /// not) with a fresh heartbeat ([`token::beat_fresh`]); the waiters without a slot count
    /// once. Never the version-1 count word: a waiter killed while waiting leaves that raised,
    /// but its slot's heartbeat goes stale within [`token::SLOT_STALE`].
    pub fn others_waiting(&self, now: u64, scratch: &mut Vec<Waiter>) -> usize {
        self.table().waiters(scratch);
        scratch
            .iter()
            .filter(|w| w.id != self.id && token::beat_fresh(w.beat, now))
            .count()
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
        let now = (self.clock)();
        let f = self.map.get();
        f.beat.store(now, Ordering::Release);
        if let Some(i) = self.current_slot() {
            f.slots[i].beat.store(now, Ordering::SeqCst);
        }
    }

    /// Hands the token on: records who released it and when, frees it, and wakes the first two
    /// in line (and every waiter of an older library).
    pub fn release(&self) {
        let f = self.map.get();
        let _ = sys::ofd_unlock(self.lock_fd(), HOLDER_BYTE);
        let now = (self.clock)();
        let t = self.table();
        t.release(self.id, now);
        f.generation.fetch_add(1, Ordering::AcqRel);
        let bits = match self.scratch.lock() {
            Ok(mut s) => t.wake_bits(now, &mut s),
            Err(_) => u32::MAX,
        };
        sys::futex_wake_shared_bits(&f.generation, bits);
    }

    /// Gives the slot back (at exit; a dead process's slot goes stale instead) and stops
    /// waiting.
    pub fn unclaim(&self) {
        self.withdraw();
        if let Some(i) = self.current_slot() {
            self.table().unclaim(i, self.id);
        }
        let i = self.locked.swap(NO_SLOT, Ordering::Relaxed);
        if i != NO_SLOT {
            Locks(self.lock_fd()).unlock(i);
        }
        self.slot.store(NO_SLOT, Ordering::Relaxed);
    }
}

impl NodeToken {
    /// The lock descriptor (-1 after [`Self::on_fork_child`]: every lock call then fails with
    /// `EBADF`, which a slot claim reads as "no lock to go by"; the child never uses the token
    /// after that, it only drops it).
    fn lock_fd(&self) -> RawFd {
        self.lock.load(Ordering::Acquire)
    }

    /// To be called in the child after `fork`, on a token the parent had open: closes the
    /// child's copy of the lock descriptor. Its open file description is the parent's, so while
    /// the child kept it, the parent's holder and slot locks outlived the parent (a killed
    /// process's token stayed held while a worker it forked lived). The slot, its key, the
    /// overflow word and the waiter count are the parent's: the child forgets them, so that
    /// nothing it does with this token (dropping it included) touches them; it opens a token of
    /// its own.
    pub fn on_fork_child(&self) {
        self.slot.store(NO_SLOT, Ordering::Relaxed);
        self.locked.store(NO_SLOT, Ordering::Relaxed);
        self.overflow.store(0, Ordering::Relaxed);
        self.counted.store(false, Ordering::Relaxed);
        let fd = self.lock.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            // SAFETY: `fd` was this token's own descriptor (the inherited copy), just taken out
            // of it, so nothing in this process uses it again.
            unsafe { sys::close(fd) };
        }
    }
}

impl Drop for NodeToken {
    fn drop(&mut self) {
        self.unclaim();
        let fd = *self.lock.get_mut();
        if fd >= 0 {
            // SAFETY: the token owns `fd` and is being dropped: nothing uses it again.
            unsafe { sys::close(fd) };
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
        for s in self.table().in_use() {
            let id = s.owner.load(Ordering::SeqCst);
            if id == 0 || id == self.id {
                continue;
            }
            let beat = s.beat.load(Ordering::SeqCst);
            if !vgpu_policy::token::beat_fresh(beat, now) {
                continue;
            }
            if let Some(state) = SlotState::parse(s.key.load(Ordering::SeqCst)) {
                out.push(Peer {
                    id,
                    state,
                    served: s.served.load(Ordering::SeqCst),
                    beat,
                    holder: holder == id,
                    kin: id >> 32 == self.id >> 32,
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
    /// for this process's `key` among `peers` (read just before), the first in line having it to
    /// itself for `grace` ns (`Limiter::handoff_grace`). Returns whether this process holds it.
    pub fn try_take_keyed(&self, key: u64, peers: &[Peer], now: u64, grace: u64) -> bool {
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
                (f.freed_at.load(Ordering::Acquire), grace),
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
const _: () = assert!(core::mem::offset_of!(NodeFile, waiters) == 32);
const _: () = assert!(core::mem::offset_of!(NodeFile, freed_at) == 40);
// The version-1 part of the file (what an old library creates) is 64 bytes; the version-2
// slots follow, as version 2 placed them (32 bytes each from offset 64).
const _: () = assert!(core::mem::offset_of!(NodeFile, slots) == 64);
const _: () = assert!(size_of::<Slot<AtomicU64>>() == 32);
const _: () = assert!(core::mem::offset_of!(NodeFile, ext) == 64 + 32 * SLOTS);
const _: () = assert!(size_of::<NodeFile>() == 64 + 32 * SLOTS + 64);

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn file() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpu.sched");
        (dir, path)
    }

    #[test]
    fn one_holder_at_a_time_and_a_released_token_passes_on() {
        let (_d, path) = file();
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
        let mut s = Vec::new();
        assert_eq!(b.others_waiting(sys::monotonic_ns(), &mut s), 0);
        assert_eq!(b.map.get().waiters.load(Ordering::Acquire), 0);
    }

    #[test]
    fn processes_of_one_container_know_each_other_by_their_ids() {
        let (_d, path) = file();
        let a = NodeToken::open_for(&path, 7).unwrap();
        let b = NodeToken::open_for(&path, 7).unwrap();
        let c = NodeToken::open_for(&path, 8).unwrap();
        let d = NodeToken::open(&path).unwrap();
        assert_ne!(a.id, b.id);
        let now = sys::monotonic_ns();
        let state = SlotState {
            heavy: true,
            ..SlotState::default()
        };
        for t in [&b, &c, &d] {
            t.publish(&state, now);
        }
        let mut peers = Vec::new();
        a.peers_into(now, &mut peers);
        let kin = |t: &NodeToken| peers.iter().find(|p| p.id == t.id).map(|p| p.kin);
        assert_eq!(kin(&b), Some(true));
        assert_eq!(kin(&c), Some(false));
        assert_eq!(kin(&d), Some(false));
    }

    #[test]
    fn a_heartbeat_in_the_future_does_not_keep_the_token_forever() {
        // Issue 13: a holder id with a heartbeat far ahead of now (a wrong clock, a corrupted
        // file) and no live lock: the token is taken over once the grace has passed on this
        // process's own clock, not never.
        let (_d, path) = file();
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

    /// A process whose `CLOCK_MONOTONIC` reads 5 s ahead of the others' (a time namespace, a
    /// restored checkpoint).
    fn five_seconds_ahead() -> u64 {
        sys::monotonic_ns() + 5_000 * MS
    }

    #[test]
    fn a_clock_seconds_ahead_never_takes_a_live_holders_token() {
        // Before, a holder was also judged by its beat's age on the taker's clock: a taker 5 s
        // ahead saw every live holder's beat 5 s old (> STALE) and took the token at once, so
        // two windows ran at the same time.
        let (_d, path) = file();
        let holder = NodeToken::open(&path).unwrap();
        let ahead = NodeToken::open_with_clock(&path, five_seconds_ahead).unwrap();
        assert!(holder.has_slot() && ahead.has_slot());
        assert_ne!(
            holder.current_slot(),
            ahead.current_slot(),
            "the live holder's slot, whose beat looks 5 s old to it, was not taken over"
        );
        holder.acquire();
        let mut s = Vec::new();
        // Ten seconds of the taker's clock while the holder's beat keeps moving.
        let t0 = five_seconds_ahead();
        for k in 0..10 {
            holder.heartbeat();
            std::thread::sleep(Duration::from_millis(1));
            assert!(
                !ahead.try_take(t0 + k * 1_000 * MS, &mut s),
                "took the token from a live holder"
            );
        }
        assert_eq!(holder.map.get().holder.load(Ordering::Acquire), holder.id);
        // A holder that hangs (lock held, beat still) is taken over after STALE on the taker's
        // clock; one that died (lock gone) after the grace.
        let stale = u64::try_from(STALE.as_nanos()).unwrap();
        assert!(!ahead.try_take(t0 + 10_000 * MS, &mut s));
        assert!(ahead.try_take(t0 + 10_000 * MS + stale + 1, &mut s), "hung");
        ahead.release();
        holder.acquire();
        drop(holder);
        let t1 = five_seconds_ahead();
        assert!(!ahead.try_take(t1, &mut s));
        assert!(ahead.try_take(t1 + LOCK_GRACE_NS + 1, &mut s), "died");
    }

    #[test]
    fn a_dead_waiter_is_not_waiting_whatever_the_old_count_says() {
        // Before, "someone waits" included the version-1 count word, which a waiter killed while
        // waiting leaves raised forever: every later window counted as contended.
        let (_d, path) = file();
        let a = NodeToken::open(&path).unwrap();
        let f = a.map.get();
        let now = sys::monotonic_ns();
        f.waiters.store(1, Ordering::Release);
        f.slots[7].owner.store(0xdead, Ordering::SeqCst);
        f.slots[7]
            .key
            .store(token::key_word(now, false), Ordering::SeqCst);
        f.slots[7].beat.store(now, Ordering::SeqCst);
        let mut s = Vec::new();
        assert_eq!(a.others_waiting(now, &mut s), 1, "alive a moment ago");
        let stale = vgpu_policy::limiter::ns(token::SLOT_STALE);
        assert_eq!(a.others_waiting(now + stale + 1, &mut s), 0);
        f.slots[7].beat.store(0, Ordering::SeqCst);
        // The token's own waits keep the old word right for older libraries.
        let b = NodeToken::open(&path).unwrap();
        a.acquire();
        let now = sys::monotonic_ns();
        b.announce(now, false, now);
        assert!(!b.try_take(now, &mut s));
        assert_eq!(f.waiters.load(Ordering::Acquire), 2);
        assert!(!b.try_take(now, &mut s));
        assert_eq!(f.waiters.load(Ordering::Acquire), 2, "counted once");
        a.release();
        assert!(b.try_take(sys::monotonic_ns(), &mut s));
        assert_eq!(f.waiters.load(Ordering::Acquire), 1);
    }

    #[test]
    fn the_file_is_version_3_with_a_slot_each_and_keys_order_the_handoff() {
        let (_d, path) = file();
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
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            size_of::<NodeFile>() as u64
        );
        assert_eq!(a.map.get().version.load(Ordering::Acquire), LAYOUT_VERSION);
        assert!(a.has_slot() && b.has_slot() && c.has_slot());
        let mut s = Vec::new();
        a.acquire();
        let now = sys::monotonic_ns();
        b.announce(now - 10 * MS, false, now);
        c.announce(now - 20 * MS, false, now);
        a.release();
        let now = sys::monotonic_ns();
        assert!(!b.try_take(now, &mut s), "C is due earlier");
        assert!(c.try_take(now, &mut s));
        assert_eq!(c.last_holder(), a.id());
        c.release();
        assert!(b.try_take(sys::monotonic_ns(), &mut s));
        b.release();
        c.unclaim();
        // A slot taken over while its owner was idle (by a version-2 library, which knows no
        // slot locks) is claimed anew at the next announcement, never written while another
        // process owns it.
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
    fn a_version_2_file_is_moved_to_3_and_its_waiters_keep_their_turn() {
        let (_d, path) = file();
        // What a version-2 library leaves: 1088 bytes, version 2, 32 slots; a waiter of that
        // library (it never raises the scan bound) in slot 5, due 1 ms ago (within the grace).
        let now = sys::monotonic_ns();
        let mut bytes = vec![0u8; 1088];
        bytes[..8].copy_from_slice(&MAGIC.to_ne_bytes());
        bytes[56..60].copy_from_slice(&2u32.to_ne_bytes());
        bytes[60..64].copy_from_slice(&32u32.to_ne_bytes());
        let slot5 = 64 + 32 * 5;
        bytes[slot5..slot5 + 8].copy_from_slice(&0x01d_u64.to_ne_bytes());
        bytes[slot5 + 8..slot5 + 16]
            .copy_from_slice(&token::key_word(now - MS, false).to_ne_bytes());
        bytes[slot5 + 24..slot5 + 32].copy_from_slice(&now.to_ne_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let a = NodeToken::open(&path).unwrap();
        let f = a.map.get();
        assert_eq!(f.version.load(Ordering::Acquire), LAYOUT_VERSION);
        assert_eq!(
            f.slot_count.load(Ordering::Acquire),
            u32::try_from(SLOTS).unwrap()
        );
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            size_of::<NodeFile>() as u64
        );
        assert_ne!(a.current_slot(), Some(5), "the old library's slot is kept");
        let mut s = Vec::new();
        a.announce(now - MS / 2, false, now);
        assert!(!a.try_take(now, &mut s), "the older waiter is due first");
        a.withdraw();
    }

    #[test]
    fn more_processes_than_the_old_table_all_get_a_slot() {
        let (_d, path) = file();
        let tokens: Vec<NodeToken> = (0..2 * V2_SLOTS)
            .map(|_| NodeToken::open(&path).unwrap())
            .collect();
        assert!(tokens.iter().all(NodeToken::has_slot));
        let f = tokens[0].map.get();
        assert_eq!(f.ext.high.load(Ordering::SeqCst), 2 * V2_SLOTS as u64);
        drop(tokens);
        // Their slots were given back: the next one takes the first.
        let t = NodeToken::open(&path).unwrap();
        assert_eq!(t.current_slot(), Some(0));
    }

    #[test]
    fn a_process_past_the_table_still_takes_its_turn() {
        // Before, a process that found the table full waited without a key and got the token
        // only when no slotted waiter was eligible: beside busy waiters, never.
        let (_d, path) = file();
        let holder = NodeToken::open(&path).unwrap();
        let f = holder.map.get();
        // Every other slot held by a live process (a fresh beat; held locks are not needed: a
        // fresh beat alone keeps a claim off).
        let now = sys::monotonic_ns();
        for (i, slot) in f.slots.iter().enumerate() {
            if slot.owner.load(Ordering::SeqCst) == 0 {
                slot.owner.store(1000 + i as u64, Ordering::SeqCst);
                slot.beat.store(now, Ordering::SeqCst);
            }
        }
        let late = NodeToken::open(&path).unwrap();
        assert!(!late.has_slot(), "the table is full");
        holder.acquire();
        // A slotted waiter due 1 ms after the slotless one.
        let now = sys::monotonic_ns();
        f.slots[5]
            .key
            .store(token::key_word(now - MS, false), Ordering::SeqCst);
        late.announce(now - 2 * MS, false, now);
        let mut s = Vec::new();
        assert!(!late.try_take(now, &mut s), "held");
        holder.release();
        let now = sys::monotonic_ns();
        assert!(
            late.try_take(now, &mut s),
            "the slotless waiter is due first"
        );
        late.release();
        // And it stops counting as waiting once it took the token.
        assert_eq!(
            holder.others_waiting(now, &mut s),
            1,
            "slot 5 only: the slotless waiter's key was withdrawn"
        );
    }

    #[test]
    fn a_release_wakes_the_next_in_line_and_lets_the_others_sleep() {
        // Before, every release woke every waiter (and a waiter whose holder held the token past
        // the grace looked again every 50 µs). Now a release wakes the first two in line only.
        let (_d, path) = file();
        let path = std::sync::Arc::new(path);
        let holder = NodeToken::open(&path).unwrap();
        holder.acquire();
        let now = sys::monotonic_ns();
        // Three waiters due in this order, each sleeping up to 2 s on its own bits.
        let ready = std::sync::Arc::new(AtomicU32::new(0));
        let threads: Vec<_> = (0..3u64)
            .map(|k| {
                let (path, ready) = (std::sync::Arc::clone(&path), std::sync::Arc::clone(&ready));
                std::thread::spawn(move || {
                    let t = NodeToken::open(&path).unwrap();
                    // Consecutive slots: no two share a wake bit.
                    t.announce(now - (30 - k) * MS, false, now);
                    let g = t.generation();
                    assert!(!t.try_take(sys::monotonic_ns(), &mut Vec::new()));
                    ready.fetch_add(1, Ordering::AcqRel);
                    let t0 = std::time::Instant::now();
                    t.wait(g, Duration::from_secs(2));
                    let waited = t0.elapsed();
                    t.withdraw();
                    (t.current_slot(), waited)
                })
            })
            .collect();
        while ready.load(Ordering::Acquire) < 3 {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(100));
        let t0 = std::time::Instant::now();
        holder.release();
        let woke: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let slots: Vec<_> = woke.iter().map(|w| w.0.unwrap()).collect();
        let bits: Vec<u32> = slots
            .iter()
            .map(|&i| slots::wake_bit(Some(Seat::Slot(i))))
            .collect();
        assert!(bits[0] != bits[2] && bits[1] != bits[2], "{slots:?}");
        let since = t0.elapsed();
        assert!(
            woke[0].1 < Duration::from_millis(1500),
            "the first waited {:?}",
            woke[0].1
        );
        assert!(
            woke[1].1 < Duration::from_millis(1500),
            "the second waited {:?}",
            woke[1].1
        );
        assert!(
            woke[2].1 >= Duration::from_millis(1900),
            "the third was woken too ({:?}, {since:?} after the release)",
            woke[2].1
        );
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
