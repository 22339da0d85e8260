//! What launches cost on the GPU, between the launch path and the controller: the transport of
//! `vgpu_policy::limiter`'s prices (docs/COMPUTE.md, "Pricing").
//!
//! - [`Keys`]: each admitted launch stores its key (its function and grid, or its graph) in a
//!   ring at its launch number — one relaxed store on the launch path; a launch of a key
//!   without a price, or one picked for a sample, stores its function (or graph) in a second
//!   one, off the common path. The controller copies those of the launches admitted since its
//!   last look.
//! - [`Marks`]: timing events in the program's own streams, recorded by launching threads
//!   that pay for them anyway or rarely:
//!   * a launch held at the budget records a *hold mark* after the work admitted before it (it
//!     waits anyway): when the GPU reaches it, everything before it is done, and when the mark
//!     recorded before it (a hold mark or a bracket's last event) was still queued as it was
//!     recorded, the launches between ran back to back and the two time them (a *segment*:
//!     what a bracket measures beyond a kernel, `vgpu_policy::limiter::Calibration`);
//!   * the launch the controller picked for a sample is *bracketed*: an event before it, a
//!     second one right after the first (what one event costs the GPU), and a third after the
//!     launch (what its kernel costs). The stream is *held* meanwhile where the driver can
//!     (a wait on a word of pinned host memory, written once the last event is recorded): the
//!     three events and the kernel then start back to back whatever the host did between them
//!     (on an idle stream each would start as the host submits it, and the bracket would time
//!     the host: the H200's decode service, 3 µs kernels by CUPTI, was priced at 5–12 µs a
//!     launch). Only a launch of a function launched before is held (a first launch may load
//!     its module, which synchronises the context). A hold left standing (a thread stopped
//!     inside its launch call) is lifted after `HOLD_MAX_NS` by a watchdog thread that makes
//!     no driver call ([`Marks::unstick`], `vgpu_policy::holdwatch`), and by the controller
//!     before it drains.
//! - The *restart probe* ([`Marks::probe_start`]): on a stream of vgpu's own, held the same
//!   way, an event, an empty kernel of vgpu's own, an event, the kernel twice, an event: what
//!   a bracket adds to any kernel, which a stream that never queues cannot teach otherwise.
//!
//! - *Retirement* ([`Marks::retire`]): all of these are driver objects of the context they were
//!   made in (the events, the probe's module and stream, the pinned word). A program that
//!   destroys that context (its last `cuDevicePrimaryCtxRelease`, a `cuDevicePrimaryCtxReset`,
//!   `cuCtxDestroy`) takes them with it, and the driver may crash on a later use of one (the
//!   word is unmapped: a store to it faults). Before such a call the hook retires the marks:
//!   no thread uses them again, a hold still standing is lifted while the word is mapped, and
//!   they are forgotten. The program's next launch names its new context and waits until the
//!   controller is bound to it (`compute::Gate::await_bound`), which re-arms the marks
//!   ([`Marks::rearm`]): their objects are made again there, as at the start. (Retired for
//!   good, kernels first seen afterwards were charged the mean of the earlier prices: a limit
//!   escaped.)
//!
//! Nothing here waits: a mark that cannot be recorded (another thread records, the ring is
//! full, the driver refuses) is skipped, and a driver error turns marks off for the process
//! (prices then stay where they are, and unpriced launches are charged the mean). Events are
//! created lazily, a few per device for the process's life.
use crate::driver::{Driver, HostWord, ProbeKit, REAL};
use core::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use vgpu_policy::holdwatch::{Atomics, HoldWatch, Step};
use vgpu_policy::limiter::MARKS_IN_FLIGHT;
use vgpu_policy::limiter::{Mark, MarkKind};
use vgpu_sys::cuda::{CUevent, CUstream};

mod queue;

/// Launch keys kept (a power of two): at least twice what one look admits
/// (`vgpu_policy::limiter::MAX_ROOM`).
const KEYS: usize = 4096;
const _: () = assert!(KEYS as u64 >= 2 * vgpu_policy::limiter::MAX_ROOM);

/// The ring's slots: a bracket's three events and hold marks in flight, with room to spare.
const SLOTS: usize = 8;
const _: () = assert!(MARKS_IN_FLIGHT + 3 < SLOTS);

/// The keys of admitted launches, by launch number.
pub struct Keys {
    ring: [AtomicU64; KEYS],
}

impl Keys {
    pub(crate) const fn new() -> Self {
        Keys {
            ring: [const { AtomicU64::new(0) }; KEYS],
        }
    }

    /// Launch `n`, of `key` (the launch path).
    #[inline]
    pub fn put(&self, n: u64, key: u64) {
        self.ring[index(n, KEYS)].store(key, Ordering::Relaxed);
    }

    /// The keys of launches `from..to`, oldest first, into `out` (cleared first); launches the
    /// ring no longer holds are left out (the limiter prices them at the mean).
    pub fn copy(&self, from: u64, to: u64, out: &mut Vec<u64>) {
        out.clear();
        let from = from.max(to.saturating_sub(KEYS as u64));
        out.extend((from..to).map(|n| self.ring[index(n, KEYS)].load(Ordering::Relaxed)));
    }
}

/// `n` modulo `len` (a power of two).
fn index(n: u64, len: usize) -> usize {
    // The mask keeps the value below `len`, a usize: the cast cannot truncate.
    #[allow(clippy::cast_possible_truncation)]
    let i = (n & (len as u64 - 1)) as usize;
    i
}

const HOLD: u8 = 1;
const START: u8 = 2;
const MID: u8 = 3;
const END: u8 = 4;

struct Slot {
    event: AtomicPtr<c_void>,
    kind: AtomicU8,
    /// Launches admitted before it.
    at: AtomicU64,
    /// (End) the bracketed launch's key.
    key: AtomicU64,
    /// (Hold) the mark before it (a hold mark or a bracket's end) was still queued when this
    /// one was recorded; (End) the stream was idle when the bracket began.
    back_to_back: AtomicBool,
    /// (End) how long the bracketed launch call took on the host (ns).
    gap: AtomicU64,
}

/// A device's marks: a ring of timing events, recorded by launching threads (`head`) and
/// consumed in order by the controller (`tail`).
pub struct Marks {
    slots: [Slot; SLOTS],
    head: AtomicU64,
    tail: AtomicU64,
    /// A thread is recording (the others skip theirs).
    recording: AtomicBool,
    /// Marks work in this process (off after any driver error).
    on: AtomicBool,
    /// Hold marks recorded and not yet consumed.
    holds: AtomicU64,
    /// The word a bracket's stream is held on ([`Marks::prepare`]), if the driver gave one.
    word: PerContext<HostWord>,
    /// Brackets hold their stream (off in a forked child, or after the driver refused a hold).
    holding: AtomicBool,
    /// The brackets' holds, on the allocation's first word.
    pub bracket_hold: Hold,
    /// The queue holds (`marks/queue.rs`), on its second word.
    pub queue_hold: Hold,
    /// The restart probe's kernel, stream and three events ([`Marks::probe_start`]), made
    /// with the word.
    probe: PerContext<(ProbeKit, [usize; 3])>,
    /// A probe was recorded and not yet read.
    probing: AtomicBool,
    /// The threads using the driver objects now ([`Marks::enter`]), and [`RETIRED`]: their
    /// context is going or gone, none is used again ([`Marks::retire`]). One word, so that a
    /// use and the retirement are ordered by its modification order alone.
    uses: AtomicU32,
    /// `on` and `holding` as they were when the marks were retired ([`Marks::rearm`]).
    was: AtomicU8,
    /// The queue hold ([`queue`]): the value launches wait for (0: none stands), and the
    /// streams already waiting.
    queue_want: AtomicU32,
    queue_seen: [AtomicU64; queue::SEEN],
}

/// One kind of hold on a word of the pinned allocation ([`Marks::bracket_hold`],
/// [`Marks::queue_hold`]): its value, its watchdog's watch and thread, and its counts.
pub struct Hold {
    /// On the allocation's second word (the queue's), else its first.
    second: bool,
    /// The value the current (or last) hold waits for; the word holds it once lifted. It only
    /// grows, and a hold waits for the word to reach its value (`GEQ`): the GPU reads the word
    /// only when the held stream gets to the wait, maybe after later holds were lifted, and a
    /// wait for exactly one value would then wait forever (the H200's ResNet loop hung so
    /// with `EQ`, run 57). Any write of the current value lifts every hold placed before it.
    seq: AtomicU32,
    /// When the standing hold was placed, and the watchdog's alarm
    /// (`vgpu_policy::holdwatch`, checked under loom).
    watch: HoldWatch<Atomics>,
    /// Its watchdog thread runs (one for the process's life).
    dog: AtomicBool,
    /// Holds placed (the debug line's count; swapped to 0 as it is printed).
    pub placed: AtomicU64,
    /// Holds lifted by the watchdog or before a drain, not by their own thread (likewise).
    pub unstuck: AtomicU64,
}

impl Hold {
    const fn new(second: bool) -> Self {
        Hold {
            second,
            seq: AtomicU32::new(0),
            watch: HoldWatch::new(),
            dog: AtomicBool::new(false),
            placed: AtomicU64::new(0),
            unstuck: AtomicU64::new(0),
        }
    }

    /// Its word in the allocation whose first word is `w`.
    fn word(&self, w: HostWord) -> HostWord {
        if self.second { w.next() } else { w }
    }

    /// The next value of its counter, taken (0 skipped: a word starts there).
    fn take(&self) -> u32 {
        let mut v = self.seq.load(Ordering::SeqCst).wrapping_add(1);
        if v == 0 {
            v = 1;
        }
        self.seq.store(v, Ordering::SeqCst);
        v
    }

    /// A hold was placed now: noted, counted, then the watchdog woken
    /// (`vgpu_policy::holdwatch`).
    fn placed_now(&self) {
        self.watch.placed(vgpu_region::sys::monotonic_ns());
        self.placed.fetch_add(1, Ordering::Relaxed);
        vgpu_region::sys::futex_wake(&self.watch.words.alarm);
    }

    /// Renews the standing hold now, if it still stands (not taken over by the watchdog):
    /// true if so, and the watchdog woken to look again (`vgpu_policy::holdwatch`).
    fn renewed_now(&self) -> bool {
        let since = self.watch.since();
        if !self.watch.renewed(since, vgpu_region::sys::monotonic_ns()) {
            return false;
        }
        vgpu_region::sys::futex_wake(&self.watch.words.alarm);
        true
    }

    /// Lifts whatever stands on its word in the allocation `w` (its counter's value).
    fn lift_all(&self, w: HostWord) {
        REAL.set_word(self.word(w), self.seq.load(Ordering::SeqCst));
        self.watch.lifted();
    }
}

/// A driver object of the current context, made once per context: `None` not yet made,
/// `Some(None)` the driver gave none, `Some(Some(_))` made. Forgotten when the context goes
/// ([`Marks::retire`]). Read on the cold paths only (brackets, the watchdog, the controller).
struct PerContext<T: Copy>(Mutex<Option<Option<T>>>);

impl<T: Copy> PerContext<T> {
    const fn new() -> Self {
        PerContext(Mutex::new(None))
    }
    fn lock(&self) -> MutexGuard<'_, Option<Option<T>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
    fn get(&self) -> Option<Option<T>> {
        *self.lock()
    }
    fn made(&self) -> Option<T> {
        self.get().flatten()
    }
    fn set(&self, v: Option<T>) {
        *self.lock() = Some(v);
    }
    fn forget(&self) {
        *self.lock() = None;
    }
}

/// In [`Marks::uses`]: retired.
const RETIRED: u32 = 1 << 31;

/// A thread's use of the marks' driver objects ([`Marks::enter`]); ends when dropped.
struct Using<'a>(&'a Marks);

impl Drop for Using<'_> {
    fn drop(&mut self) {
        self.0.uses.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How long [`Marks::retire`] waits for the threads using the marks to be done with them (each
/// use is a few driver calls; a bracket spans its launch call).
const RETIRE_WAIT_NS: u64 = 100_000_000;

// A hold is lifted by the watchdog after HOLD_MAX_NS (a launching thread stopped inside its
// launch call: the stream would wait for it forever).
use vgpu_policy::holdwatch::HOLD_MAX_NS;

/// A bracket being recorded: its start was, the launch and its end follow
/// ([`Marks::bracket_end`]).
pub struct Bracket {
    at: u64,
    /// The stream had nothing queued when the bracket began (never so when held: its events
    /// and kernel start back to back as on a busy stream).
    idle: bool,
    /// The stream is held on the word until the bracket's end.
    held: Option<(HostWord, u32)>,
    /// Its function's first launch in this process: the call may load its module (CUDA's lazy
    /// loading; the kernel is queued at the call's end), so its whole time is reported.
    first: bool,
}

impl Marks {
    pub(crate) const fn new() -> Self {
        Marks {
            slots: [const {
                Slot {
                    event: AtomicPtr::new(core::ptr::null_mut()),
                    kind: AtomicU8::new(0),
                    at: AtomicU64::new(0),
                    key: AtomicU64::new(0),
                    back_to_back: AtomicBool::new(false),
                    gap: AtomicU64::new(0),
                }
            }; SLOTS],
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            recording: AtomicBool::new(false),
            on: AtomicBool::new(true),
            holds: AtomicU64::new(0),
            word: PerContext::new(),
            holding: AtomicBool::new(true),
            bracket_hold: Hold::new(false),
            queue_hold: Hold::new(true),
            probe: PerContext::new(),
            probing: AtomicBool::new(false),
            uses: AtomicU32::new(0),
            was: AtomicU8::new(0),
            queue_want: AtomicU32::new(0),
            queue_seen: queue::no_streams(),
        }
    }

    /// Claims the driver objects for one use (`None`: retired). The use is counted in the
    /// word that [`Self::retire`] marks: whichever comes first in its modification order, the
    /// use sees the mark and backs out, or the retirement sees the use and waits for it.
    fn enter(&self) -> Option<Using<'_>> {
        if self.uses.fetch_add(1, Ordering::AcqRel) & RETIRED != 0 {
            self.uses.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Using(self))
    }

    fn retired(&self) -> bool {
        self.uses.load(Ordering::Acquire) & RETIRED != 0
    }

    /// Before the context the marks' driver objects live in is destroyed (the hooks of the
    /// calls that destroy one, before the driver's): no thread uses them again. Waits up to
    /// `RETIRE_WAIT_NS` for the uses in progress, lifts a hold still standing while the word
    /// is still mapped, and forgets them (the driver destroys them with the context). Returns
    /// whether any was made: then the marks stay off until [`Self::rearm`] (the controller,
    /// bound to the program's next context); with none made yet (a program that resets its
    /// device before its first launch) they carry on.
    pub fn retire(&self) -> bool {
        self.retire_objects(true)
    }

    /// Before another context of the device than the controller's is destroyed: the timing
    /// events a launching thread made in it go with it, while the word and the probe live in
    /// the controller's context. The events are forgotten (uses in progress waited for as by
    /// [`Self::retire`]) and the marks carry on at once, made again as launches need them.
    pub fn flush(&self) {
        self.retire_objects(false);
    }

    fn retire_objects(&self, all: bool) -> bool {
        if self.uses.fetch_or(RETIRED, Ordering::AcqRel) & RETIRED != 0 {
            return false;
        }
        let (on, holding) = (
            self.on.swap(false, Ordering::AcqRel),
            self.holding.swap(false, Ordering::AcqRel),
        );
        self.was
            .store(u8::from(on) | u8::from(holding) << 1, Ordering::Release);
        let since = vgpu_region::sys::monotonic_ns();
        while self.uses.load(Ordering::Acquire) & !RETIRED != 0
            && vgpu_region::sys::monotonic_ns().saturating_sub(since) < RETIRE_WAIT_NS
        {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
        let made = self.word.get().is_some()
            || self.probe.get().is_some()
            || self
                .slots
                .iter()
                .any(|s| !s.event.load(Ordering::Acquire).is_null());
        if !made && self.uses.load(Ordering::Acquire) == RETIRED {
            self.rearm();
            return false;
        }
        if let Some(w) = self.word.made() {
            self.bracket_hold.lift_all(w);
            self.queue_want.store(0, Ordering::Release);
            self.queue_hold.lift_all(w);
        }
        self.forget_queue_streams();
        if all {
            self.word.forget();
            self.probe.forget();
        }
        for s in &self.slots {
            s.event.store(core::ptr::null_mut(), Ordering::Release);
        }
        // The marks in flight are never read (their events are gone): the ring starts after
        // them, where the controller's indices still hold.
        self.tail
            .store(self.head.load(Ordering::Acquire), Ordering::Release);
        self.holds.store(0, Ordering::Release);
        self.recording.store(false, Ordering::Release);
        if !all {
            self.rearm();
            return false;
        }
        self.probing.store(false, Ordering::Release);
        true
    }

    /// After [`Self::retire`], once the controller is bound to the program's new context: the
    /// marks work again, their objects made anew in that context as at the start.
    pub fn rearm(&self) {
        if !self.retired() {
            return;
        }
        let was = self.was.load(Ordering::Acquire);
        self.on.store(was & 1 != 0, Ordering::Release);
        self.holding.store(was & 2 != 0, Ordering::Release);
        self.uses.fetch_and(!RETIRED, Ordering::AcqRel);
    }

    /// Allocates the word brackets hold their stream on, in the calling thread's (current)
    /// context, once, and starts the watchdog (the controller thread, while no capture is in
    /// progress). Without them, brackets time their stream unheld.
    pub fn prepare(&'static self, device: usize) {
        let Some(_using) = self.enter() else {
            return;
        };
        if self.word.get().is_some() {
            return;
        }
        let w = REAL.host_word().filter(|&w| {
            // Each kind of hold has its watchdog (one for the process's life; only the
            // controller thread prepares); without the brackets' no hold is placed.
            for (h, name) in [(&self.bracket_hold, "hold"), (&self.queue_hold, "queue")] {
                REAL.set_word(h.word(w), h.seq.load(Ordering::SeqCst));
                if !h.dog.load(Ordering::Acquire)
                    && (!h.second || self.bracket_hold.dog.load(Ordering::Acquire))
                {
                    let spawned = std::thread::Builder::new()
                        .name(format!("vgpu-{name}{device}"))
                        .spawn(move || self.watch(h));
                    h.dog.store(spawned.is_ok(), Ordering::Release);
                }
            }
            self.bracket_hold.dog.load(Ordering::Acquire)
        });
        self.word.set(w);
    }

    /// Whether [`Self::prepare`] ran (or never will: retired).
    pub fn prepared(&self) -> bool {
        self.word.get().is_some() || self.retired()
    }

    /// Makes the restart probe's kit in the calling thread's (current) context, once, where
    /// streams can be held (the controller thread, while no capture is in progress: loading
    /// a module may synchronise the context).
    pub fn prepare_probe(&self) {
        let Some(_using) = self.enter() else {
            return;
        };
        if self.probe.get().is_some() {
            return;
        }
        let made = (|| {
            self.word.made()?;
            let kit = REAL.probe_kit()?;
            let mut events = [0usize; 3];
            for e in &mut events {
                *e = REAL.event_create()? as usize;
            }
            Some((kit, events))
        })();
        self.probe.set(made);
    }

    /// Whether [`Self::prepare_probe`] ran (or never will: retired).
    pub fn probe_prepared(&self) -> bool {
        self.probe.get().is_some() || self.retired()
    }

    /// The restart probe (`vgpu_policy::limiter::MarkKind::Probe`): on the probe's stream,
    /// held until all is queued so that it runs back to back, an event, the empty kernel, an
    /// event, the empty kernel twice, an event. Skipped while a launching thread records, a
    /// probe is unread, or holds are off.
    pub fn probe_start(&self) {
        let Some((kit, e)) = self.probe.made() else {
            return;
        };
        let Some(_using) = self.enter() else {
            return;
        };
        if self.probing.load(Ordering::Acquire) || self.recording.swap(true, Ordering::Acquire) {
            return;
        }
        let stream = kit.stream as CUstream;
        if let Some(held) = self.hold_stream(stream) {
            let ev = |i: usize| e[i] as CUevent;
            let ok = REAL.event_record(ev(0), stream) == vgpu_sys::cuda::CUDA_SUCCESS
                && REAL.probe_launch(kit)
                && REAL.event_record(ev(1), stream) == vgpu_sys::cuda::CUDA_SUCCESS
                && REAL.probe_launch(kit)
                && REAL.probe_launch(kit)
                && REAL.event_record(ev(2), stream) == vgpu_sys::cuda::CUDA_SUCCESS;
            self.lift(Some(held));
            self.probing.store(ok, Ordering::Release);
        }
        self.recording.store(false, Ordering::Release);
    }

    /// The probe's two spans (ns), once the GPU has run it (`None` before, or if a read failed).
    pub fn probe_collect(&self) -> Option<(u64, u64)> {
        let (_, e) = self.probe.made()?;
        let _using = self.enter()?;
        if !self.probing.load(Ordering::Acquire) {
            return None;
        }
        let ev = |i: usize| e[i] as CUevent;
        match REAL.event_done(ev(2)) {
            Some(false) => None,
            done => {
                self.probing.store(false, Ordering::Release);
                done?;
                Some((
                    REAL.event_elapsed(ev(0), ev(1))?,
                    REAL.event_elapsed(ev(1), ev(2))?,
                ))
            }
        }
    }

    /// The watchdog of `h`: sleeps while no hold stands; while one does, lifts it once it has
    /// stood for [`HOLD_MAX_NS`] since it was placed or last renewed. No driver call (a driver
    /// lock its thread waits for cannot stop it).
    fn watch(&self, h: &Hold) -> ! {
        let mut seen = 0;
        loop {
            match h.watch.step(&mut seen) {
                Step::Sleep(count) => vgpu_region::sys::futex_wait(
                    &h.watch.words.alarm,
                    count,
                    std::time::Duration::from_secs(1),
                ),
                Step::Again => {}
                Step::Standing(since) => {
                    let due = since.saturating_add(HOLD_MAX_NS);
                    let now = vgpu_region::sys::monotonic_ns();
                    if now < due {
                        std::thread::sleep(std::time::Duration::from_nanos(due - now));
                    }
                    self.take_over(h, vgpu_region::sys::monotonic_ns(), false);
                }
            }
        }
    }

    /// Lifts a bracket's hold that has stood for `HOLD_MAX_NS` (`now`: the monotonic clock), or
    /// any standing hold with `all` (before the controller drains the context: the drain would
    /// wait for it). No driver call: a store to the word.
    pub fn unstick(&self, now: u64, all: bool) {
        self.take_over(&self.bracket_hold, now, all);
    }

    /// Lifts the hold of `h` standing, where it has stood for `HOLD_MAX_NS` since it was placed
    /// or last renewed, or with `all`
    /// (the queue's stays published until the controller lifts it: a wait put in meanwhile
    /// passes at once, and no new one starts).
    fn take_over(&self, h: &Hold, now: u64, all: bool) {
        let since = h.watch.since();
        if since == 0 || !(all || now.saturating_sub(since) >= HOLD_MAX_NS) {
            return;
        }
        // The value of that hold or a later one; the hold is taken over only if no other was
        // placed since it was read (else its own thread lifts it).
        let seq = h.seq.load(Ordering::SeqCst);
        let Some(_using) = self.enter() else {
            return;
        };
        if h.watch.take_over(since)
            && let Some(w) = self.word.made()
        {
            REAL.set_word(h.word(w), seq);
            h.unstuck.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Holds `stream` on the word until [`Self::lift`] (the caller holds `recording`).
    fn hold_stream(&self, stream: CUstream) -> Option<(HostWord, u32)> {
        if !self.holding.load(Ordering::Acquire) {
            return None;
        }
        let w = self.word.made()?;
        let seq = self.bracket_hold.take();
        if !REAL.hold(stream, w, seq) {
            // The word still holds the previous value: nothing waits.
            self.holding.store(false, Ordering::Release);
            crate::log::debug(format_args!(
                "cuStreamWaitValue32 refused: brackets are no longer held"
            ));
            return None;
        }
        self.bracket_hold.placed_now();
        Some((w, seq))
    }

    /// Lets a stream held by [`Self::hold_stream`] go.
    fn lift(&self, held: Option<(HostWord, u32)>) {
        if let Some((w, seq)) = held {
            REAL.set_word(w, seq);
            self.bracket_hold.watch.lifted();
        }
    }

    /// Records one event of `kind` on `stream` (the caller holds `recording`); false if the
    /// ring is full or the driver refused (then marks are off).
    fn push(&self, stream: CUstream, kind: u8, at: u64, key: u64, back_to_back: bool) -> bool {
        let head = self.head.load(Ordering::Acquire);
        let tail = self.tail.load(Ordering::Acquire);
        if head.saturating_sub(tail) >= SLOTS as u64 {
            return false;
        }
        let slot = &self.slots[index(head, SLOTS)];
        let mut event = slot.event.load(Ordering::Acquire);
        if event.is_null() {
            let Some(e) = REAL.event_create() else {
                self.on.store(false, Ordering::Release);
                return false;
            };
            slot.event.store(e, Ordering::Release);
            event = e;
        }
        if REAL.event_record(event, stream) != vgpu_sys::cuda::CUDA_SUCCESS {
            self.on.store(false, Ordering::Release);
            return false;
        }
        slot.kind.store(kind, Ordering::Release);
        slot.at.store(at, Ordering::Release);
        slot.key.store(key, Ordering::Release);
        slot.back_to_back.store(back_to_back, Ordering::Release);
        self.head.store(head + 1, Ordering::Release);
        true
    }

    /// A launch held at the budget, `at` launches in, records a hold mark on `stream` (skipped
    /// while another thread records, `MARKS_IN_FLIGHT` hold marks are unread, or marks are off).
    #[cold]
    #[inline(never)]
    pub fn hold(&self, stream: CUstream, at: u64) {
        if !self.on.load(Ordering::Acquire) {
            return;
        }
        let Some(_using) = self.enter() else {
            return;
        };
        if self.recording.swap(true, Ordering::Acquire) {
            return;
        }
        if self.holds.load(Ordering::Acquire) < MARKS_IN_FLIGHT as u64 {
            // The previous mark, if it is a hold mark or a bracket's end not yet reached: the
            // launches between it and this one run back to back.
            let head = self.head.load(Ordering::Acquire);
            let back_to_back = head > self.tail.load(Ordering::Acquire) && {
                let prev = &self.slots[index(head - 1, SLOTS)];
                matches!(prev.kind.load(Ordering::Acquire), HOLD | END) && {
                    // A program's thread: its query must not invalidate a capture.
                    let _relaxed = crate::driver::relaxed();
                    REAL.event_done(prev.event.load(Ordering::Acquire)) == Some(false)
                }
            };
            if self.push(stream, HOLD, at, 0, back_to_back) {
                self.holds.fetch_add(1, Ordering::AcqRel);
            }
        }
        self.recording.store(false, Ordering::Release);
    }

    /// Before the sampled launch `at` on `stream`: its first two events (`None`: not
    /// recorded, the launch goes unsampled); `may_hold`: its kernel was launched before, so
    /// the stream may be held until [`Self::bracket_end`]. The recorder stays claimed until
    /// [`Self::bracket_end`], so no other mark falls inside the bracket.
    #[cold]
    #[inline(never)]
    pub fn bracket_start(
        &self,
        stream: CUstream,
        at: u64,
        may_hold: bool,
        first: bool,
    ) -> Option<Bracket> {
        if !self.on.load(Ordering::Acquire) {
            return None;
        }
        // Used until the bracket's end (`bracket_end` counts the use out).
        let using = self.enter()?;
        if self.recording.swap(true, Ordering::Acquire) {
            return None;
        }
        let head = self.head.load(Ordering::Acquire);
        let room = SLOTS as u64 - head.saturating_sub(self.tail.load(Ordering::Acquire));
        if room < 3 {
            self.recording.store(false, Ordering::Release);
            return None;
        }
        let held = if may_hold {
            self.hold_stream(stream)
        } else {
            None
        };
        let idle = held.is_none() && {
            // A program's thread: its query must not invalidate a capture.
            let _relaxed = crate::driver::relaxed();
            REAL.stream_idle(stream)
        };
        if !self.push(stream, START, at, 0, false) {
            self.lift(held);
            self.recording.store(false, Ordering::Release);
            return None;
        }
        if !self.push(stream, MID, at, 0, false) {
            // The start stays in the ring alone: the controller drops it.
            self.lift(held);
            self.recording.store(false, Ordering::Release);
            return None;
        }
        core::mem::forget(using);
        Some(Bracket {
            at,
            idle,
            held,
            first,
        })
    }

    /// After the sampled launch (of `key`, whose call took `call_ns` on the host): the
    /// bracket's last event.
    #[cold]
    #[inline(never)]
    pub fn bracket_end(&self, b: Bracket, stream: CUstream, key: u64, call_ns: u64) {
        let head = self.head.load(Ordering::Acquire);
        if self.push(stream, END, b.at, key, b.idle) {
            // What the call's time says (`MarkKind::Bracket::gap`): nothing where the stream was
            // held (its kernel starts back to back with the events once lifted); where it was
            // not, at most LONG_CALL of it, unless it was the function's first launch (a
            // module load: the kernel was queued at its end). A longer call otherwise was
            // preempted, perhaps after it handed the kernel over (or it is a graph's, which
            // hands its work over as it goes).
            let call = match b.held {
                Some(_) => 0,
                None if b.first => call_ns,
                None => call_ns.min(vgpu_policy::limiter::LONG_CALL),
            };
            self.slots[index(head, SLOTS)]
                .gap
                .store(call, Ordering::Release);
        }
        self.lift(b.held);
        self.recording.store(false, Ordering::Release);
        // The use `bracket_start` began.
        drop(Using(self));
    }

    /// The controller's look: consumes the marks the GPU has reached, in order, into `out`
    /// (`prev`: the last hold mark or bracket end consumed, where the next segment may start,
    /// with the first launch after it; kept by the controller). Stops at the first mark not
    /// reached. `shared`: whether another process ran on the GPU lately (its time may be in
    /// these marks).
    ///
    /// Returns the oldest mark still in flight, which the GPU has not reached (the launches
    /// admitted before it: `Look::unreached`), if any.
    pub fn collect(
        &self,
        prev: &mut Option<(u64, u64)>,
        shared: bool,
        out: &mut Vec<Mark>,
    ) -> Option<u64> {
        out.clear();
        let _using = self.enter()?;
        let head = self.head.load(Ordering::Acquire);
        let mut tail = self.tail.load(Ordering::Acquire);
        while tail < head {
            let slot = &self.slots[index(tail, SLOTS)];
            let event = slot.event.load(Ordering::Acquire);
            let kind = slot.kind.load(Ordering::Acquire);
            if kind == START {
                // A bracket: all three events, or wait for them.
                if tail + 3 > head {
                    if tail + 1 < head
                        && self.slots[index(tail + 1, SLOTS)]
                            .kind
                            .load(Ordering::Acquire)
                            != MID
                    {
                        tail += 1;
                        continue;
                    }
                    break;
                }
                let mid = &self.slots[index(tail + 1, SLOTS)];
                let end = &self.slots[index(tail + 2, SLOTS)];
                if mid.kind.load(Ordering::Acquire) != MID
                    || end.kind.load(Ordering::Acquire) != END
                {
                    // A bracket whose end was never recorded: drop its start.
                    tail += 1;
                    continue;
                }
                let end_event = end.event.load(Ordering::Acquire);
                match REAL.event_done(end_event) {
                    Some(true) => {}
                    Some(false) => break,
                    None => {
                        self.on.store(false, Ordering::Release);
                        *prev = None;
                        tail += 3;
                        continue;
                    }
                }
                let at = slot.at.load(Ordering::Acquire);
                *prev = Some((tail + 2, at + 1));
                let mid_event = mid.event.load(Ordering::Acquire);
                if let (Some(o), Some(k)) = (
                    REAL.event_elapsed(event, mid_event),
                    REAL.event_elapsed(mid_event, end_event),
                ) {
                    let idle = end.back_to_back.load(Ordering::Acquire);
                    if !idle {
                        // Two events back to back on a busy stream: what stamping one costs
                        // (on an idle one they are stamped as the host records them).
                        out.push(Mark {
                            kind: MarkKind::Overhead { elapsed: o },
                            shared,
                        });
                    }
                    out.push(Mark {
                        kind: MarkKind::Bracket {
                            at,
                            key: end.key.load(Ordering::Acquire),
                            elapsed: k,
                            gap: match end.gap.load(Ordering::Acquire) {
                                call if idle => call.max(1),
                                // Unheld on a busy stream: only a first launch's call too long
                                // to be a launch's (a module load) matters.
                                call if call > vgpu_policy::limiter::LONG_CALL => call,
                                _ => 0,
                            },
                        },
                        shared,
                    });
                }
                tail += 3;
                continue;
            }
            match REAL.event_done(event) {
                Some(true) => {}
                Some(false) => break,
                None => {
                    self.on.store(false, Ordering::Release);
                    *prev = None;
                    tail += 1;
                    continue;
                }
            }
            if kind == HOLD {
                let segment = match *prev {
                    Some((p, first))
                        if p + 1 == tail && slot.back_to_back.load(Ordering::Acquire) =>
                    {
                        let from = self.slots[index(p, SLOTS)].event.load(Ordering::Acquire);
                        REAL.event_elapsed(from, event).map(|e| (first, e))
                    }
                    _ => None,
                };
                let at = slot.at.load(Ordering::Acquire);
                out.push(Mark {
                    kind: MarkKind::Hold { at, segment },
                    shared,
                });
                *prev = Some((tail, at));
                let _ = self
                    .holds
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| h.checked_sub(1));
            }
            tail += 1;
        }
        // Never backwards: a retirement that stopped waiting for this look (it waits at most
        // RETIRE_WAIT_NS) moved the ring past the marks it forgot.
        let tail = self.tail.fetch_max(tail, Ordering::AcqRel).max(tail);
        (tail < head).then(|| self.slots[index(tail, SLOTS)].at.load(Ordering::Acquire))
    }

    /// Whether no mark is in flight (none is, once retired: those left are never read).
    pub fn is_empty(&self) -> bool {
        self.head.load(Ordering::Acquire) == self.tail.load(Ordering::Acquire) || self.retired()
    }

    /// In a forked child: the parent's events mean nothing there, and a thread that was
    /// recording did not survive.
    pub fn after_fork(&self) {
        for s in &self.slots {
            s.event.store(core::ptr::null_mut(), Ordering::Release);
        }
        self.head.store(0, Ordering::Release);
        self.tail.store(0, Ordering::Release);
        self.holds.store(0, Ordering::Release);
        self.recording.store(false, Ordering::Release);
        // Threads that were using them did not survive either (a retirement stays).
        self.uses.fetch_and(RETIRED, Ordering::AcqRel);
        // The parent's pinned word is not the child's to use.
        self.holding.store(false, Ordering::Release);
        self.bracket_hold.watch.lifted();
        self.queue_want.store(0, Ordering::Release);
        self.queue_hold.watch.lifted();
        self.forget_queue_streams();
    }
}
