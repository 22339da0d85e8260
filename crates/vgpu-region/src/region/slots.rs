//! Process slots and reaping: claiming a slot under its lock, clearing the slots of dead
//! processes, giving one's own back, and the fork protocol.

use std::fs::File;
use std::io::Read;
use std::os::fd::{IntoRawFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::file::{insecure, reopen};
use super::{NO_SLOT, Region};
use crate::error::{ErrorKind, RegionError};
use crate::layout;
use crate::protocol;
use crate::sys;

/// How often a process that is not the reaper runs its housekeeping round (a wakeup costs
/// more than the round: on the loaded 2-core CI machine about 140 µs, so at 1,024 processes
/// once a second was 3-4 % of a core).
pub const TICK: Duration = Duration::from_secs(60);
/// How long a process sees the reaper's beat unchanged, on its own clock, before it tries the
/// lease: more than two of its rounds, and far more than the slowest pass (2 s), so a live
/// reaper is not doubted. (A thread blocked in [`Region::wait_for_lease`] takes the lease at
/// once when its holder goes; this is the fallback.)
pub const STALE_NS: u64 = 150_000_000_000;
/// One reaper pass in this many probes every slot's lock (the others only the slots whose
/// recorded PID is gone: see `reap_slots`).
const FULL_PASS: u64 = 8;
/// The shortest delay [`Region::housekeep`] asks for.
const MIN_DELAY: Duration = Duration::from_millis(100);

/// The lock byte of process slot `slot` (far past the data, see [`layout::LOCK_BASE`]).
fn lock_offset(slot: usize) -> i64 {
    // At most MAX_PROCS: fits.
    layout::LOCK_BASE + i64::try_from(slot).unwrap_or(0)
}

/// Bytes of a command line the slot keeps (its field, less the terminating NUL).
const COMMAND_BYTES: usize = 63;

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
    as_command(buf, n)
}

/// The first `n` bytes of `buf` (NUL-separated arguments) as the slot records them: cut to
/// [`COMMAND_BYTES`] first, then NULs as spaces and trailing spaces dropped (so a cut that
/// lands on a separator leaves no trailing space). Returns the length kept.
fn as_command(buf: &mut [u8], n: usize) -> usize {
    let mut n = n.min(COMMAND_BYTES).min(buf.len());
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

pub(super) struct BusyGuard<'a>(&'a AtomicBool);
impl Drop for BusyGuard<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Region {
    /// `sys::ofd_try_lock`, counted in [`Region::lock_calls`].
    fn probe_lock(&self, fd: RawFd, offset: i64) -> std::io::Result<bool> {
        self.lock_calls.fetch_add(1, Ordering::Relaxed);
        sys::ofd_try_lock(fd, offset)
    }

    /// `sys::ofd_lock_held`, counted in [`Region::lock_calls`].
    fn probe_held(&self, fd: RawFd, offset: i64) -> std::io::Result<bool> {
        self.lock_calls.fetch_add(1, Ordering::Relaxed);
        sys::ofd_lock_held(fd, offset)
    }

    /// How many slot-lock system calls (probes and takes) this attachment has made: what
    /// housekeeping costs, for tests and benchmarks.
    pub fn lock_calls(&self) -> u64 {
        self.lock_calls.load(Ordering::Relaxed)
    }

    /// One round of this process's housekeeping at `now_ns` (its own monotonic clock, in ns);
    /// returns how long until the next round is due. Meant for one background thread per
    /// process, calling it again after the delay it returns.
    ///
    /// One process of the container is its **reaper**: it holds the lease, an
    /// open-file-description lock on [`layout::REAPER_LOCK`] (a dead or exited holder's lock
    /// goes with it: no lease outlives its process). Every `pass_period` the reaper checks
    /// that the path still names the file (if not, it flags the file orphaned: every process
    /// attached to it is cut off), probes the slots of the others whose PID is gone (every
    /// slot, every eighth pass) and reaps the dead,
    /// advances the reaper's beat, and (once a second at most) publishes every live process's
    /// SM utilisation to HAMi's monitor from the GPU time each reported to its slot. Every other process only checks its own lock descriptor
    /// (one `fstat`) and reads the beat once a `TICK`; when it has seen the beat unchanged
    /// for `STALE_NS` on its own clock (the reaper is gone, or stopped), it tries the lease
    /// (one lock call); a thread blocked in [`Region::wait_for_lease`] takes it sooner, as
    /// soon as its holder goes. So N idle processes cost O(N) system calls a second in all,
    /// not O(N²): a pass probes each live slot once, the pass period grows with the number of
    /// slots (2 s at 1,000), and the other processes make none.
    ///
    /// Read-only regions and processes without a slot do nothing.
    pub fn housekeep(&self, now_ns: u64) -> Duration {
        if self.read_only {
            return TICK;
        }
        if self.slot().is_none() {
            // Left the region (or not yet in it): a lease taken meanwhile is given back.
            if self.reaper.swap(false, Ordering::AcqRel)
                && let Some(fd) = self.verified_fd()
            {
                let _ = sys::ofd_unlock(fd, layout::REAPER_LOCK);
            }
            return TICK;
        }
        if self.reaper.load(Ordering::Acquire) {
            let period = self.pass_period();
            let since = now_ns.saturating_sub(self.last_pass.load(Ordering::Relaxed));
            let period_ns = u64::try_from(period.as_nanos()).unwrap_or(u64::MAX);
            if self.last_pass.load(Ordering::Relaxed) != 0 && since < period_ns {
                return Duration::from_nanos(period_ns - since).max(MIN_DELAY);
            }
            self.last_pass.store(now_ns.max(1), Ordering::Relaxed);
            if self.reaper_pass() {
                self.publish_utilisation(now_ns);
                return period;
            }
            self.reaper.store(false, Ordering::Release);
            return TICK;
        }
        self.keep_own_lock();
        let beat = self.layout().header.reaper_beat.load(Ordering::Acquire);
        let seen_at = self.seen_at.load(Ordering::Relaxed);
        if seen_at != 0 {
            if beat != self.seen_beat.load(Ordering::Relaxed) {
                self.seen_beat.store(beat, Ordering::Relaxed);
                self.seen_at.store(now_ns.max(1), Ordering::Relaxed);
                return TICK;
            }
            if now_ns.saturating_sub(seen_at) < STALE_NS {
                return TICK;
            }
        }
        // A first look, or a beat that has not moved for STALE_NS: the lease, if it is free.
        self.seen_beat.store(beat, Ordering::Relaxed);
        self.seen_at.store(now_ns.max(1), Ordering::Relaxed);
        if self.take_lease() {
            self.last_pass.store(0, Ordering::Relaxed);
            return self.housekeep(now_ns);
        }
        TICK
    }

    /// Whether this process is its container's reaper (see [`Region::housekeep`]).
    pub fn is_reaper(&self) -> bool {
        self.reaper.load(Ordering::Acquire)
    }

    /// How often the reaper makes a pass: 2 ms per slot a pass may probe, at least 250 ms and
    /// at most 2 s (about 500 lock calls a second at most, whatever the container).
    fn pass_period(&self) -> Duration {
        let hw = self.layout().header.high_water.load(Ordering::Relaxed);
        Duration::from_millis((2 * u64::from(hw)).clamp(250, 2000))
    }

    /// Waits, without using the CPU, until this process holds the reaper lease (its holder
    /// exited, died, or gave it up), and returns `true`; `false` at once if it cannot wait
    /// (read-only, no slot, no descriptor). For a thread of its own: the caller then runs
    /// [`Region::housekeep`], which makes the passes. A blocked waiter costs nothing, so a
    /// container's idle processes need not wake to watch the reaper's beat.
    pub fn wait_for_lease(&self) -> bool {
        if self.read_only || self.slot().is_none() {
            return false;
        }
        if self.reaper.load(Ordering::Acquire) {
            return true;
        }
        let fd = match self.verified_fd() {
            Some(fd) => fd,
            None => {
                let Some(_busy) = self.lock_busy(true) else {
                    return false;
                };
                match self.ensure_fd() {
                    Ok(fd) => fd,
                    Err(_) => return false,
                }
            }
        };
        self.lock_calls.fetch_add(1, Ordering::Relaxed);
        if sys::ofd_lock_wait(fd, layout::REAPER_LOCK).is_err() {
            return false;
        }
        // The descriptor may have been closed (and its number reused) meanwhile: the next pass
        // checks it (`ensure_fd`) and takes the lease again on a new one if need be.
        self.last_pass.store(0, Ordering::Relaxed);
        self.reaper.store(true, Ordering::Release);
        true
    }

    /// Takes the reaper lease on our lock descriptor if nobody holds it.
    fn take_lease(&self) -> bool {
        let Some(_busy) = self.lock_busy(false) else {
            return false;
        };
        let Ok(fd) = self.ensure_fd() else {
            return false;
        };
        let got = matches!(self.probe_lock(fd, layout::REAPER_LOCK), Ok(true));
        self.reaper.store(got, Ordering::Release);
        got
    }

    /// The reaper's pass; `false` when this process no longer holds the lease (its lock
    /// descriptor was lost, and another process took the lease meanwhile).
    fn reaper_pass(&self) -> bool {
        if self.is_broken() {
            return true;
        }
        if !self.path_is_ours() {
            self.orphan();
            return true;
        }
        let Some(_busy) = self.lock_busy(false) else {
            return true;
        };
        let Ok(fd) = self.ensure_fd() else {
            return false;
        };
        // A new descriptor (ours was closed by the program) holds no lease yet.
        if !self.reaper.load(Ordering::Acquire)
            && !matches!(self.probe_lock(fd, layout::REAPER_LOCK), Ok(true))
        {
            return false;
        }
        self.reaper.store(true, Ordering::Release);
        if self.relock.load(Ordering::Acquire) {
            self.hold_own_slot(fd);
        }
        // Every FULL_PASS-th pass probes every slot; the others only the slots whose PID is
        // gone.
        let beat = self
            .layout()
            .header
            .reaper_beat
            .fetch_add(1, Ordering::AcqRel);
        self.reap_slots(fd, !beat.is_multiple_of(FULL_PASS));
        true
    }

    /// A process that is not the reaper keeps its own slot lock: if the program closed our
    /// descriptor (one `fstat` tells), the file is reopened and the slot relocked.
    fn keep_own_lock(&self) {
        if self.verified_fd().is_some() && !self.relock.load(Ordering::Acquire) {
            return;
        }
        let Some(_busy) = self.lock_busy(false) else {
            return;
        };
        if let Ok(fd) = self.ensure_fd()
            && self.relock.load(Ordering::Acquire)
        {
            self.hold_own_slot(fd);
        }
    }

    /// The path no longer names our file: this process, and (through the file) every process
    /// attached to it, is cut off.
    fn orphan(&self) {
        self.lost.store(true, Ordering::Relaxed);
        self.layout().header.orphaned.store(1, Ordering::Relaxed);
    }

    /// At attach, under the creation lock: whether a process is attached and alive. The slots
    /// not free are probed in order, and the probing stops at the first live one (the dead ones
    /// found before it are reaped; the reaper reaps the rest): an attach costs a few lock
    /// calls, not one per slot. A HAMi-core process's slot counts as attached.
    pub(super) fn reap_until_live(&self) -> bool {
        if self.read_only {
            return self.any_attached();
        }
        let Some(_busy) = self.lock_busy(true) else {
            return self.any_attached();
        };
        let Ok(fd) = self.ensure_fd() else {
            return self.any_attached();
        };
        let foreign = self.reap_foreign();
        let l = self.layout();
        let hw = (l.header.high_water.load(Ordering::SeqCst) as usize).min(layout::MAX_PROCS);
        let me = self.slot();
        let mut reaped = 0;
        let mut live = false;
        for i in 0..hw {
            let s = l.procs[i].state.load(Ordering::Acquire);
            if Some(i) == me || layout::state_of(s) == layout::FREE {
                continue;
            }
            if !matches!(self.probe_lock(fd, lock_offset(i)), Ok(true)) {
                live = true;
                break;
            }
            if self.retire(i, s) {
                reaped += 1;
            }
            let _ = sys::ofd_unlock(fd, lock_offset(i));
        }
        if reaped + foreign > 0 {
            self.shrink_procnum();
        }
        live || self.any_attached()
    }

    /// This process's slot, if it holds one.
    pub fn slot(&self) -> Option<usize> {
        let s = self.slot.load(Ordering::Acquire);
        (s != NO_SLOT).then_some(s as usize)
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

    /// Our lock descriptor if it still names our file. A program may close descriptors it did
    /// not open (daemons do) and open another file that gets the same number: the number is
    /// then forgotten, never used or closed again (it is the program's now), and our slot lock
    /// went with the closed description. One `fstat`.
    /// Whether any process is attached: a vgpu slot not free (live, claiming or being reaped)
    /// or a HAMi-core process's slot.
    pub(super) fn any_attached(&self) -> bool {
        let l = self.layout();
        let hami = self.hami();
        let hw = (l.header.high_water.load(Ordering::SeqCst) as usize).min(layout::MAX_PROCS);
        (0..hw).any(|i| layout::state_of(l.procs[i].state.load(Ordering::Acquire)) != layout::FREE)
            || (0..hami.procnum().min(layout::MAX_PROCS)).any(|i| hami.foreign(i).is_some())
    }

    /// Whether a process is attached and alive now: a slot not free whose lock is held (tested
    /// with `F_OFD_GETLK`: nothing is taken or changed, nothing reaped), or a HAMi-core
    /// process's slot. Stops at the first live one. For views beside a region that may be
    /// left over from a finished run (its limits bind nobody then).
    pub fn any_live(&self) -> bool {
        let l = self.layout();
        if self.slot().is_some() {
            return true;
        }
        let hami = self.hami();
        if (0..hami.procnum().min(layout::MAX_PROCS)).any(|i| hami.foreign(i).is_some()) {
            return true;
        }
        let fd = self.fd.load(Ordering::Acquire);
        let hw = (l.header.high_water.load(Ordering::SeqCst) as usize).min(layout::MAX_PROCS);
        (0..hw).any(|i| {
            layout::state_of(l.procs[i].state.load(Ordering::Acquire)) != layout::FREE
                // A test that cannot be made counts as live (the region's limits then bind).
                && (fd < 0 || self.probe_held(fd, lock_offset(i)).unwrap_or(true))
        })
    }

    /// For a read-only region: whether slot `i`'s owner died without its slot being reaped
    /// (its lock byte is free). Always `false` for a read-write region (it reaps instead) or
    /// when the test cannot be made.
    pub(super) fn dead_unreaped(&self, i: usize) -> bool {
        if !self.read_only {
            return false;
        }
        let fd = self.fd.load(Ordering::Acquire);
        fd >= 0 && self.probe_held(fd, lock_offset(i)).is_ok_and(|held| !held)
    }

    /// Whether the path still names the mapped file (no symlink followed).
    fn path_is_ours(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.dev_ino)
    }

    fn verified_fd(&self) -> Option<RawFd> {
        let fd = self.fd.load(Ordering::Acquire);
        if fd < 0 {
            return None;
        }
        if sys::fd_identity(fd).is_ok_and(|id| id == self.dev_ino) {
            return Some(fd);
        }
        let _ = self
            .fd
            .compare_exchange(fd, -1, Ordering::AcqRel, Ordering::Acquire);
        None
    }

    /// The descriptor for slot locks: ours if it still names the file, else a new one (after a
    /// fork, or after the program closed ours), on which our slot's lock is taken again if the
    /// slot is still ours; if it is not (another process reaped it meanwhile), we hold none
    /// and the next charge claims a new one. Call with `busy` held.
    fn ensure_fd(&self) -> Result<RawFd, RegionError> {
        if let Some(fd) = self.verified_fd() {
            return Ok(fd);
        }
        let file = reopen(&self.path, "reopen")?;
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
        // The reaper lease was a lock of the lost description.
        self.reaper.store(false, Ordering::Release);
        self.hold_own_slot(fd);
        Ok(fd)
    }

    /// Takes our slot's lock on `fd` (a new descriptor). Taken and the slot still ours: done.
    /// The slot no longer ours (another process reaped it meanwhile): forgotten, the next
    /// charge claims a new one. The lock held elsewhere while the slot is still ours — by a
    /// copy of our old open file description (a child forked before it exec'ed or exited), or
    /// for a moment by a reaper looking at it — the slot stays ours (it is still locked, so
    /// nobody reaps it) and the lock is taken again at the next reap pass (`relock`).
    fn hold_own_slot(&self, fd: RawFd) {
        let Some(me) = self.slot() else {
            self.relock.store(false, Ordering::Release);
            return;
        };
        let p = &self.layout().procs[me];
        let ours = || p.state.load(Ordering::Acquire) == self.claimed.load(Ordering::Acquire);
        match self.probe_lock(fd, lock_offset(me)) {
            Ok(true) if ours() => self.relock.store(false, Ordering::Release),
            Ok(true) => {
                let _ = sys::ofd_unlock(fd, lock_offset(me));
                self.relock.store(false, Ordering::Release);
                self.forget_slot();
            }
            _ if ours() => self.relock.store(true, Ordering::Release),
            _ => {
                self.relock.store(false, Ordering::Release);
                self.forget_slot();
            }
        }
    }

    /// Drops our claim on our slot without touching it (it is not, or no longer, ours).
    fn forget_slot(&self) {
        self.slot.store(NO_SLOT, Ordering::Release);
        for c in &self.context {
            c.store(0, Ordering::Relaxed);
        }
    }

    /// Takes a process slot if this process has none yet (after a fork: a new one, and a new
    /// descriptor). Returns the slot.
    pub fn claim_slot(&self) -> Result<usize, RegionError> {
        if let Some(s) = self.slot() {
            return Ok(s);
        }
        if self.read_only {
            return Err(RegionError::new(&self.path, ErrorKind::NoFreeSlot));
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
            if layout::state_of(s) != layout::FREE || self.hami().foreign(i).is_some() {
                continue;
            }
            // The lock first: a slot is CLAIMING or LIVE only while its owner holds the lock.
            match self.probe_lock(fd, lock_offset(i)) {
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
            p.start_time.store(sys::realtime_secs(), Ordering::Release);
            let mut cmd = [0u8; 64];
            let n = command_line(&mut cmd);
            layout::write_str(&p.command, &cmd[..n]);
            self.reset_counters(i);
            self.hami().open_slot(i, pid);
            // `i` < MAX_PROCS: fits.
            let next = u32::try_from(i + 1).unwrap_or(u32::MAX);
            l.header.high_water.fetch_max(next, Ordering::SeqCst);
            let live = layout::with_state(s, layout::LIVE);
            for c in &self.context {
                c.store(0, Ordering::Relaxed);
            }
            self.claimed.store(live, Ordering::Release);
            self.write_stamp(i, live);
            p.state.store(live, Ordering::Release);
            self.slot.store(next - 1, Ordering::Release);
            return Ok(Some(i));
        }
        Ok(None)
    }

    /// Frees the slots of dead processes (those whose lock is not held): their usage is released
    /// and their HAMi slot zeroed. Returns how many were freed. Cheap enough to call every few
    /// hundred milliseconds; a slot whose owner is alive is never touched (the test is the
    /// kernel's lock, not the PID).
    ///
    /// It also checks that the path still names the mapped file: if not, the region is flagged
    /// [`broken`](Region::is_broken) (and nothing is reaped).
    pub fn reap_dead(&self) -> usize {
        if self.read_only || self.is_broken() {
            return 0;
        }
        if !self.path_is_ours() {
            self.orphan();
            return 0;
        }
        let Some(_busy) = self.lock_busy(false) else {
            return 0;
        };
        match self.ensure_fd() {
            Ok(fd) => {
                if self.relock.load(Ordering::Acquire) {
                    self.hold_own_slot(fd);
                }
                self.reap_locked(fd)
            }
            Err(_) => 0,
        }
    }

    fn reap_locked(&self, fd: RawFd) -> usize {
        self.reap_slots(fd, false)
    }

    /// Reaps the dead among the slots not free: each one's lock is probed (`suspects_only ==
    /// false`), or only those whose recorded PID names no process in our PID namespace
    /// (`kill(pid, 0)`, a constant-time test; the lock probe walks the file's whole lock list in
    /// the kernel, so probing every slot is O(N²) work at N processes). A PID is only a hint:
    /// a slot is reaped only when its lock proves its owner gone, and a dead owner whose PID
    /// was reused is caught by the next full pass.
    fn reap_slots(&self, fd: RawFd, suspects_only: bool) -> usize {
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
            if suspects_only
                && i32::try_from(p.pid.load(Ordering::Acquire)).is_ok_and(sys::pid_exists)
            {
                continue;
            }
            // Taking the lock proves the owner (or a reaper that died midway) is gone, and keeps
            // other reapers and claimants off the slot while we clear it.
            if !matches!(self.probe_lock(fd, lock_offset(i)), Ok(true)) {
                continue;
            }
            if self.retire(i, s) {
                reaped += 1;
            }
            let _ = sys::ofd_unlock(fd, lock_offset(i));
        }
        let foreign = self.reap_foreign();
        if reaped + foreign > 0 {
            self.shrink_procnum();
        }
        reaped
    }

    /// Zeroes the HAMi slots of HAMi-core processes that are gone (in a file adopted from
    /// HAMi-core, its processes' slots stay until they exit; a killed one never clears its own).
    /// Their PID is all there is to go by: tested with `kill(pid, 0)` in our PID namespace, the
    /// container's. A slot vgpu owns is never touched. Returns how many were cleared.
    fn reap_foreign(&self) -> usize {
        let l = self.layout();
        let hami = self.hami();
        let mut cleared = 0;
        for i in 0..hami.procnum() {
            if layout::state_of(l.procs[i].state.load(Ordering::Acquire)) != layout::FREE {
                continue;
            }
            if let Some(pid) = hami.foreign(i)
                && !sys::pid_exists(pid)
                && layout::state_of(l.procs[i].state.load(Ordering::Acquire)) == layout::FREE
            {
                hami.close_slot(i);
                cleared += 1;
            }
        }
        cleared
    }

    /// Zeroes the counters of every FREE slot (vgpu's and HAMi's view of it), and bumps every
    /// device's version. For a new run, with the creation lock held and no process attached:
    /// a FREE slot holds nothing, so anything found there (a stray write, a file left by a
    /// process that raced its own exit) is stale. A stale `used` would shrink the run's budget,
    /// and a stale `pending` of the slot a version word names was once waited for without end.
    pub(super) fn scrub_free_slots(&self) {
        let l = self.layout();
        let hami = self.hami();
        for (i, p) in l.procs.iter().enumerate() {
            if layout::state_of(p.state.load(Ordering::Acquire)) != layout::FREE
                || hami.foreign(i).is_some()
            {
                continue;
            }
            for d in 0..layout::MAX_DEVICES {
                p.used[d].store(0, Ordering::SeqCst);
                p.pending[d].store(0, Ordering::SeqCst);
            }
        }
        for d in 0..layout::MAX_DEVICES {
            protocol::bump(&self.budget(d));
        }
    }

    /// Moves slot `i` from state `s` to reaping, clears it and frees it (the next generation);
    /// false when its state had moved on (someone else reaped or claimed it).
    fn retire(&self, i: usize, s: u32) -> bool {
        let p = &self.layout().procs[i];
        let reaping = layout::with_state(s, layout::REAPING);
        if p.state
            .compare_exchange(s, reaping, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        self.clear_slot(i);
        p.state.store(layout::next_free(s), Ordering::Release);
        true
    }

    fn clear_slot(&self, i: usize) {
        self.retire_counters(i);
        for d in 0..layout::MAX_DEVICES {
            protocol::clear(&self.budget(d), i);
        }
        let p = &self.layout().procs[i];
        p.pid.store(0, Ordering::Release);
        p.start_time.store(0, Ordering::Release);
        layout::write_str(&p.command, b"");
        self.hami().close_slot(i);
    }

    fn shrink_procnum(&self) {
        let l = self.layout();
        let hami = self.hami();
        hami.shrink_procnum(|| {
            let hw = (l.header.high_water.load(Ordering::Acquire) as usize).min(layout::MAX_PROCS);
            let top = hw.max(hami.procnum());
            (0..top)
                .rev()
                .find(|&i| {
                    let st = layout::state_of(l.procs[i].state.load(Ordering::Acquire));
                    st == layout::LIVE || st == layout::CLAIMING || hami.foreign(i).is_some()
                })
                .map_or(0, |i| i + 1)
        });
    }

    /// Gives this process's slot back (its usage is released). Also done on drop.
    pub fn detach(&self) {
        let Some(_busy) = self.lock_busy(true) else {
            return;
        };
        let Some(i) = self.slot() else {
            return;
        };
        let s = self.layout().procs[i].state.load(Ordering::Acquire);
        self.retire(i, s);
        self.forget_slot();
        if let Some(fd) = self.verified_fd() {
            let _ = sys::ofd_unlock(fd, lock_offset(i));
            if self.reaper.swap(false, Ordering::AcqRel) {
                // Another process takes the lease once it sees the beat stop.
                let _ = sys::ofd_unlock(fd, layout::REAPER_LOCK);
            }
        }
        self.shrink_procnum();
    }

    /// To be called in the child after `fork` (from a `pthread_atfork` child handler; it is
    /// async-signal-safe: atomics and `close` only). The child drops the inherited descriptor
    /// (whose open file description, and so whose slot lock, is the parent's) and its claim on
    /// the parent's slot; it reopens the file and takes a slot of its own on its first charge.
    pub fn on_fork_child(&self) {
        self.forget_slot();
        // The lease is the parent's (its lock lives on the parent's description).
        self.reaper.store(false, Ordering::Release);
        self.seen_at.store(0, Ordering::Relaxed);
        if let Some(fd) = self.verified_fd() {
            self.fd.store(-1, Ordering::Release);
            // SAFETY: `fd` still names the region file, so it is the region's descriptor (the
            // inherited copy of the parent's), not one the program reused; it was just
            // forgotten, so nothing in this process uses it again.
            unsafe { sys::close(fd) };
        }
        // A thread of the parent may have held it: in the child that thread does not exist.
        self.busy.store(false, Ordering::Release);
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        self.detach();
        if let Some(fd) = self.verified_fd() {
            self.fd.store(-1, Ordering::Release);
            // SAFETY: `fd` still names the region file, so it is the region's own descriptor
            // (not a number the program reused), and the region is going away.
            unsafe { sys::close(fd) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::as_command;

    #[test]
    fn a_command_cut_on_a_separator_keeps_no_trailing_space() {
        // 63 bytes of path, then the separator at byte 63 (what a long checkout path gives):
        // the recorded line was the path and a space.
        let mut buf = [b'p'; 64];
        buf[63] = 0;
        let n = as_command(&mut buf, 64);
        assert_eq!(n, 63);
        assert!(!buf[..n].ends_with(b" "));
        // The separator at byte 62: cut to 63, then the trailing space dropped.
        let mut buf = [b'p'; 64];
        buf[62] = 0;
        assert_eq!(as_command(&mut buf, 64), 62);
        // A short line: arguments joined by spaces.
        let mut buf = *b"probe\0init\0ctx\0";
        let n = as_command(&mut buf, 15);
        assert_eq!(&buf[..n], b"probe init ctx");
    }
}
