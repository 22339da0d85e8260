//! The compute limiter's launch gate and its controller thread: the thin driver of
//! [`vgpu_policy::limiter::Limiter`], which decides everything (docs/COMPUTE.md).
//!
//! Launch path (every `cuLaunchKernel*`, `cuLaunchCooperativeKernel*`, `cuGraphLaunch*`): one
//! `fetch_add` on the gate's launch counter, a load of its budget, one relaxed store of the
//! launch's key, and two compares (the controller's poke point and its sample); no syscall, no
//! lock, no allocation, no clock read. A launch past the budget takes its count back, records
//! a hold mark (it waits anyway), wakes the controller and sleeps on a futex until the budget
//! grows. The one launch the controller picked for a sample is bracketed by timing events
//! (`crate::marks`).
//!
//! Synchronisation and query hooks (only while a gate exists): a synchronisation counts itself
//! in and out (`syncing`), and one that returns successfully, or a successful query, notes that
//! the queue was seen empty; while other processes share the GPU each wakes the controller, so
//! that its slot in the node file says at once that the program waits for its GPU work.
//!
//! Controller (one thread per limited device, started at the first launch): each *look* reads
//! the gate (launches, keys, whether a launch waits), the completed marks, the node file's slots
//! and the container's virtual time, hands them to `Limiter::look`, and applies the decision:
//! the charge (to the container's shared word, and the region's counters), the budget, the slot
//! state, the node token (take, keep, hand on), a drain before a hand-over, a sample; then it
//! sleeps until the decision's next look or a poke.
use crate::driver::{Driver, REAL};
use crate::marks::{Bracket, Keys, Marks};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use vgpu_policy::config::CorePolicy;
use vgpu_policy::exclusion::Exclusion;
use vgpu_policy::limiter::{self, Limiter, Look, Mark, MarkKind, Peer, Priority, Token};
use vgpu_policy::plan::{GatePlan, Plan, SmShare};
use vgpu_region::node::NodeToken;
use vgpu_region::sys::{futex_wait, futex_wake, monotonic_ns as now_ns};
use vgpu_region::{Region, RegionLedger};
use vgpu_sys::cuda::*;

/// How long a drain kept out by a stream capture waits before it gives the token back anyway
/// (the others then share the GPU by time-slicing until the capture ends).
const CAPTURE_HOLD: Duration = Duration::from_millis(100);
/// The longest a controller sleeps at once.
const MAX_SLEEP: Duration = Duration::from_millis(50);
/// A gate's budget when nothing limits it (measuring, or at 100 %).
const OPEN: u64 = u64::MAX;
/// How long a controller waiting for the node token sleeps at least (a release wakes the next
/// in line at once).
const TOKEN_WAIT: Duration = Duration::from_millis(2);
/// The longest a held launch sleeps before it looks at the budget again. A raise always wakes
/// it (the budget is stored before the pace word is bumped and woken, and the launch reads the
/// pace word before it checks the budget), so this bound only caps the cost of a lost wake-up;
/// dozens of processes waiting their turns each wake 20 times a second, not 200.
const HOLD_BOUND: Duration = Duration::from_millis(50);
/// A budget's room from which the controller is woken half-way through it.
const POKE_ROOM: u64 = 256;

/// What a gate's controller is handed when it starts (from the runtime, by the launch hook).
#[derive(Clone, Copy)]
pub struct Env {
    /// The resolved configuration.
    pub plan: &'static Plan,
    /// The container's region ledger (counters, live limit, virtual time), if it has one.
    pub region: Option<&'static RegionLedger>,
    /// The device's UUID (names its node token).
    pub uuid: &'static str,
}

/// One limited device's gate, shared by the launching threads, the synchronisation hooks and
/// the controller.
pub struct Gate {
    percent: AtomicU32,
    /// Launches admitted (attempts past the budget take themselves back).
    launches: AtomicU64,
    /// The gate admits launches while `launches` is below this.
    budget: AtomicU64,
    /// The launch that wakes the controller on its way through (it prices what came before it
    /// while the program goes on).
    poke_at: AtomicU64,
    /// The launch to bracket for a sample (`u64::MAX`: none).
    sample_at: AtomicU64,
    /// Bumped when the budget grows (held launches wait on it).
    pace: AtomicU32,
    /// Bumped to wake the controller.
    signal: AtomicU32,
    /// Threads waiting at the gate.
    held: AtomicU32,
    /// Threads inside a synchronisation.
    syncing: AtomicU32,
    /// The launch count when a synchronisation or a query last showed the queue empty, plus one
    /// (0: not since the controller last looked).
    empty_at: AtomicU64,
    /// Other processes share the GPU: synchronisations wake the controller.
    shared: AtomicBool,
    /// A context of this device, for draining (the controller's current context, and where
    /// the marks' objects are made).
    ctx: AtomicPtr<core::ffi::c_void>,
    /// Bumped at each store of `ctx`: the controller binds to the new one at its next look.
    ctx_gen: AtomicU64,
    /// The `ctx_gen` the controller is bound to (the context current in its thread, the marks
    /// re-armed there): a launch that names a context after the marks retired waits for it.
    bound: AtomicU64,
    /// `ctx` is known (cleared when the marks retire: the next launch names the context).
    started: AtomicBool,
    /// The controller thread was started.
    spawned: AtomicBool,
    /// The controller thread could not be started, or stopped on a panic: launches are
    /// refused (no budget would ever be raised, and running them unlimited would escape the
    /// limit).
    refused: AtomicBool,
    /// Measure GPU time even while the limit is 100 (`VGPU_MEASURE_GPU_TIME`).
    measuring: bool,
    /// Time launching threads spent waiting since the controller last read it.
    throttled_ns: AtomicU64,
    /// Launches counted in the region so far: a look and the exit handler each claim what
    /// they count ([`Gate::claim`]), so that none is counted twice.
    reported: AtomicU64,
    /// What a launch costs on average, as the limiter priced the last ones (ns): the exit
    /// handler charges the launches no look saw at this.
    mean_price: AtomicU64,
    /// The controller's node token, for the exit handler: a process that exits says so in its
    /// node slot at once (else its last state stood there, live to the others, until its
    /// heartbeat went stale: a phantom peer for up to `SLOT_STALE`). The controller stores it
    /// once; nobody else holds the lock for longer than a take.
    node: Mutex<Option<Arc<NodeToken>>>,
    /// The exit handler has run: the controller governs the process alone from then on,
    /// without the node file (what the program still launches in its teardown is held to its
    /// share, and no peer sees it).
    exiting: AtomicBool,
    keys: Keys,
    marks: Marks,
    /// Keys the limiter has a price for (direct-mapped): the first launch of any other key is
    /// timed, so that no kernel, and no graph, runs unpriced for long.
    known: [AtomicU64; KNOWN],
    /// Functions (and graphs) launched before (direct-mapped): a sampled launch of one of them
    /// may have its stream held, its module being loaded. A key is a function over one grid,
    /// and a framework launches the same function over ever new grids (a decode step's
    /// attention and cache copies grow with the sequence): holding only keys with a price left
    /// all those brackets unheld, priced with the host's time (the H200's decode service at 50 %
    /// took p50 1.40× plain, run 59).
    loaded: [AtomicU64; KNOWN],
}

/// Entries of [`Gate::known`] and [`Gate::loaded`] (a power of two).
const KNOWN: usize = 1024;

/// What the launch path does around one admitted launch.
pub enum Admitted {
    /// Nothing more.
    Go,
    /// Time it: the caller records the bracket's end after the launch.
    Sample(Bracket),
    /// A key without a price, not timed: the caller notes its function launched after the
    /// launch ([`Gate::launched`]).
    Unpriced,
    /// Refused: the launch is not made, and the caller returns
    /// `CUDA_ERROR_OPERATING_SYSTEM` (no controller governs the gate).
    Refused,
}

impl Gate {
    /// A gate as the plan starts it: at its share, or at 100 % when only measuring.
    pub fn new(plan: GatePlan) -> Self {
        Gate {
            percent: AtomicU32::new(u32::from(SmShare::percent_or_full(plan.share))),
            launches: AtomicU64::new(0),
            budget: AtomicU64::new(0),
            poke_at: AtomicU64::new(u64::MAX),
            sample_at: AtomicU64::new(u64::MAX),
            pace: AtomicU32::new(0),
            signal: AtomicU32::new(0),
            held: AtomicU32::new(0),
            syncing: AtomicU32::new(0),
            empty_at: AtomicU64::new(0),
            shared: AtomicBool::new(false),
            ctx: AtomicPtr::new(core::ptr::null_mut()),
            ctx_gen: AtomicU64::new(0),
            bound: AtomicU64::new(0),
            started: AtomicBool::new(false),
            spawned: AtomicBool::new(false),
            refused: AtomicBool::new(false),
            measuring: plan.measuring,
            throttled_ns: AtomicU64::new(0),
            reported: AtomicU64::new(0),
            mean_price: AtomicU64::new(0),
            node: Mutex::new(None),
            exiting: AtomicBool::new(false),
            keys: Keys::new(),
            marks: Marks::new(),
            known: [const { AtomicU64::new(0) }; KNOWN],
            loaded: [const { AtomicU64::new(0) }; KNOWN],
        }
    }

    /// Whether the limiter has a price for `key` (or another key sharing its entry).
    #[inline]
    fn known(&self, key: u64) -> bool {
        self.known[known_index(key)].load(Ordering::Relaxed) == key
    }

    /// Whether `unit` (a function or a graph) was launched before (or another sharing its
    /// entry: then a hold may wait for a module load, which the watchdog lifts).
    fn loaded(&self, unit: u64) -> bool {
        self.loaded[unit_index(unit)].load(Ordering::Relaxed) == unit
    }

    /// After a launch of `unit` the gate timed or had no price for: its module is loaded.
    #[cold]
    pub fn launched(&self, unit: u64) {
        self.loaded[unit_index(unit)].store(unit, Ordering::Relaxed);
    }

    /// The percent in force (at most 100: it is only ever stored from a `u8`).
    fn percent(&self) -> u8 {
        u8::try_from(self.percent.load(Ordering::Acquire)).unwrap_or(100)
    }

    fn poke(&self) {
        self.signal.fetch_add(1, Ordering::AcqRel);
        futex_wake(&self.signal);
    }

    /// Admits one launch of `key` (of `unit`, its function or graph) on `stream` of this
    /// device: returns at once while the budget has room, else sleeps until the controller
    /// raises it.
    #[inline]
    pub fn admit(
        &'static self,
        ordinal: CUdevice,
        stream: CUstream,
        key: u64,
        unit: u64,
        kernel: bool,
        env: impl FnOnce() -> Env,
    ) -> Admitted {
        if !self.started.load(Ordering::Acquire) {
            self.start(ordinal, env());
            if self.refused.load(Ordering::Acquire) {
                return Admitted::Refused;
            }
            if !self.started.load(Ordering::Acquire) {
                // No current context (the driver will refuse this launch itself): nothing to
                // govern yet, and never wait for a controller that does not exist.
                return Admitted::Go;
            }
        }
        let mut waited = false;
        loop {
            let n = self.launches.fetch_add(1, Ordering::AcqRel);
            if n < self.budget.load(Ordering::Acquire) {
                self.keys.put(n, key);
                if waited {
                    self.held.fetch_sub(1, Ordering::AcqRel);
                }
                if n == self.poke_at.load(Ordering::Relaxed) {
                    self.poke();
                }
                let s = self.sample_at.load(Ordering::Relaxed);
                if n == s || !self.known(key) {
                    return self.sample(stream, n, s, key, unit, kernel);
                }
                return Admitted::Go;
            }
            self.launches.fetch_sub(1, Ordering::AcqRel);
            if self.capture_passes(stream, &mut waited) {
                return Admitted::Go;
            }
            if self.refused.load(Ordering::Acquire) {
                if waited {
                    self.held.fetch_sub(1, Ordering::AcqRel);
                }
                return Admitted::Refused;
            }
            self.hold(stream, n, &mut waited);
        }
    }

    /// A launch past the budget (its count taken back): marks the queue and waits (bounded:
    /// it looks again at least every [`HOLD_BOUND`]).
    #[cold]
    #[inline(never)]
    fn hold(&self, stream: CUstream, n: u64, waited: &mut bool) {
        let p = self.pace.load(Ordering::Acquire);
        if self.budget.load(Ordering::Acquire) > n {
            return;
        }
        if !*waited {
            *waited = true;
            self.held.fetch_add(1, Ordering::AcqRel);
            self.marks.hold(stream, n);
            self.poke();
        }
        let t0 = now_ns();
        futex_wait(&self.pace, p, HOLD_BOUND);
        self.throttled_ns
            .fetch_add(now_ns().saturating_sub(t0), Ordering::Relaxed);
    }

    /// A launch into a stream being captured runs nothing now (the graph's launch is governed
    /// and priced): it never waits.
    #[cold]
    fn capture_passes(&self, stream: CUstream, waited: &mut bool) -> bool {
        if !REAL.capturing(stream) {
            return false;
        }
        if *waited {
            *waited = false;
            self.held.fetch_sub(1, Ordering::AcqRel);
        }
        true
    }

    #[cold]
    #[inline(never)]
    fn sample(
        &self,
        stream: CUstream,
        n: u64,
        asked: u64,
        key: u64,
        unit: u64,
        kernel: bool,
    ) -> Admitted {
        // The controller's pick (`asked` is `n`), or a key without a price while none is
        // pending: either way the request is taken by this launch alone. A key without a price
        // while a pick is pending is only noted launched.
        if (n != asked && asked != u64::MAX)
            || self
                .sample_at
                .compare_exchange(asked, u64::MAX, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            || REAL.capturing(stream)
        {
            return if self.known(key) {
                Admitted::Go
            } else {
                Admitted::Unpriced
            };
        }
        // Only a function (or graph) launched before may have its stream held: a first launch
        // may load its module, and loading synchronises the context (CUDA's lazy loading),
        // which would wait for the held stream (a ResNet step under a limit hung on the H200:
        // run 57). A function's first launch call may be that load (`Bracket::first`).
        let loaded = self.loaded(unit);
        match self
            .marks
            .bracket_start(stream, n, loaded, kernel && !loaded)
        {
            Some(b) => Admitted::Sample(b),
            None => Admitted::Unpriced,
        }
    }

    /// After a sampled launch (of `key`, on `stream`, whose call took `call_ns`): the
    /// bracket's end.
    #[cold]
    pub fn sampled(&self, b: Bracket, stream: CUstream, key: u64, unit: u64, call_ns: u64) {
        self.marks.bracket_end(b, stream, key, call_ns);
        self.launched(unit);
    }

    /// A synchronisation hook begins (`cuCtxSynchronize`, `cuStreamSynchronize*`,
    /// `cuEventSynchronize`): the program waits for its GPU work.
    #[inline]
    pub fn sync_begin(&self) {
        self.syncing.fetch_add(1, Ordering::AcqRel);
        if self.shared.load(Ordering::Relaxed) {
            self.poke();
        }
    }

    /// A synchronisation hook returned (`ok`: it succeeded, so the work it waited for is done).
    #[inline]
    pub fn sync_end(&self, ok: bool) {
        self.syncing.fetch_sub(1, Ordering::AcqRel);
        if ok {
            self.saw_empty();
        }
        if self.shared.load(Ordering::Relaxed) {
            self.poke();
        }
    }

    /// A synchronisation or a successful query showed the program's queue empty now.
    #[inline]
    pub fn saw_empty(&self) {
        self.empty_at.store(
            self.launches.load(Ordering::Acquire).saturating_add(1),
            Ordering::Release,
        );
    }

    #[cold]
    fn start(&'static self, ordinal: CUdevice, env: Env) {
        let Some(ctx) = REAL.current_context() else {
            return;
        };
        self.ctx.store(ctx, Ordering::Release);
        let generation = self.ctx_gen.fetch_add(1, Ordering::AcqRel) + 1;
        if self.spawned.swap(true, Ordering::AcqRel) {
            // A context named after the marks retired (or a second first launch): the
            // controller runs, and binds to it at its next look.
            self.await_bound(generation);
            self.started.store(true, Ordering::Release);
            return;
        }
        self.started.store(true, Ordering::Release);
        let spawned = std::thread::Builder::new()
            .name(format!("vgpu-sm{ordinal}"))
            .spawn(move || self.control(env, usize::try_from(ordinal).unwrap_or(0)));
        if let Err(e) = spawned {
            crate::log::error(format_args!(
                "could not start the compute controller for device {ordinal} ({e}); its kernel \
                 launches are refused with CUDA_ERROR_OPERATING_SYSTEM (a process under a \
                 compute limit needs one thread more than the program's: a pids or thread \
                 limit?)"
            ));
            self.refuse();
        }
    }

    /// A launch that named the context of `generation` after the marks retired waits until the
    /// controller is bound to it and has re-armed them (woken now, it does so at once; bounded
    /// as a held launch is). The budget the controller's last look left still has room, and
    /// launches it admitted meanwhile went unbracketed: the first launches of new kernels, priced
    /// at the mean of the old ones, queued the GPU deep before any sample could time them, and
    /// the bracket that finally did came back behind them, after every launch had passed (20
    /// launches of 1 ms charged 20 µs each, then 1.5 s of GPU work at 50 % ran in 1.50 s).
    #[cold]
    fn await_bound(&self, generation: u64) {
        self.poke();
        loop {
            let p = self.pace.load(Ordering::Acquire);
            if self.bound.load(Ordering::Acquire) >= generation
                || self.refused.load(Ordering::Acquire)
            {
                return;
            }
            futex_wait(&self.pace, p, HOLD_BOUND);
        }
    }

    /// Without a controller nobody raises the budget: waiting would hang the program, and
    /// passing the launches would run them unlimited. From now on they are refused (those
    /// waiting at the gate too).
    fn refuse(&self) {
        self.refused.store(true, Ordering::Release);
        self.pace.fetch_add(1, Ordering::AcqRel);
        futex_wake(&self.pace);
    }

    fn raise(&self, budget: u64) {
        if budget > self.budget.load(Ordering::Acquire) {
            self.budget.store(budget, Ordering::Release);
            self.pace.fetch_add(1, Ordering::AcqRel);
            futex_wake(&self.pace);
        } else {
            self.budget.store(budget, Ordering::Release);
        }
    }

    /// Before context `ctx` (`None`: any context, a primary's) of this device is destroyed:
    /// where it is the controller's, the marks are retired; another one takes only the timing
    /// events launching threads may have made in it ([`Marks::flush`]).
    pub fn retire_marks_of(&self, ctx: Option<CUcontext>) {
        if ctx.is_some_and(|c| c != self.ctx.load(Ordering::Acquire)) {
            self.marks.flush();
            return;
        }
        if self.marks.retire() {
            // The next launch names the program's context, and the controller binds to it
            // and re-arms the marks ([`Controller::look`]).
            self.started.store(false, Ordering::Release);
        }
    }

    /// In a forked child: no controller thread survived the fork; the first launch starts one.
    /// (The module's free function `after_fork` must run once as well.)
    pub fn after_fork(&self) {
        self.started.store(false, Ordering::Release);
        self.spawned.store(false, Ordering::Release);
        self.refused.store(false, Ordering::Release);
        self.ctx.store(core::ptr::null_mut(), Ordering::Release);
        self.launches.store(0, Ordering::Release);
        self.budget.store(0, Ordering::Release);
        self.poke_at.store(u64::MAX, Ordering::Release);
        self.sample_at.store(u64::MAX, Ordering::Release);
        self.held.store(0, Ordering::Release);
        self.syncing.store(0, Ordering::Release);
        self.empty_at.store(0, Ordering::Release);
        self.reported.store(0, Ordering::Release);
        self.mean_price.store(0, Ordering::Release);
        self.exiting.store(false, Ordering::Release);
        self.throttled_ns.store(0, Ordering::Release);
        // The parent's token is the parent's: the child closes its copy of the token's lock
        // descriptor (else the parent's locks outlive it while the child lives) and forgets
        // the parent's slot; its controller opens a token of its own.
        if let Ok(mut n) = self.node.try_lock()
            && let Some(t) = n.take()
        {
            t.on_fork_child();
        }
        self.marks.after_fork();
    }

    /// Claims the launches admitted up to `upto` for the region's counters: returns how many
    /// no earlier claim took.
    fn claim(&self, upto: u64) -> u64 {
        upto.saturating_sub(self.reported.fetch_max(upto, Ordering::AcqRel))
    }

    /// At process exit: the launches admitted since the controller's last look (a program
    /// that synchronises and exits right after its last launches) are counted in the
    /// region and charged to the container's virtual time at the last mean price, and the
    /// time launches waited goes into its counters, so that a short program's last work is
    /// neither lost nor free. (Were the controller looking at this moment too, the launches
    /// it prices are counted once, their GPU time at worst twice.)
    pub fn report_at_exit(&self, ledger: Option<&RegionLedger>, device: usize) {
        let Some(l) = ledger else {
            return;
        };
        let limited = self.percent() < 100;
        let waited = self.throttled_ns.swap(0, Ordering::AcqRel);
        let budget = self.budget.load(Ordering::Acquire);
        // Counted as the looks count them: not while the gate is open with nothing to measure
        // (the look that opened it claimed what came before).
        let (new, busy) = if self.measuring || budget != OPEN {
            let admitted = self.launches.load(Ordering::Acquire).min(budget);
            let new = self.claim(admitted);
            (
                new,
                new.saturating_mul(self.mean_price.load(Ordering::Relaxed)),
            )
        } else {
            (0, 0)
        };
        if new > 0 || waited > 0 {
            l.add_compute(device, busy, if limited { waited } else { 0 }, new);
        }
        if limited
            && busy > 0
            && let Some(vt) = l.sm_next_ns(device)
        {
            let (now, percent) = (now_ns(), self.percent());
            let _ = vt.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                Some(limiter::charge_vt(v, now, busy, percent))
            });
        }
    }

    /// At process exit, or when the controller stopped: the process leaves the node file (its
    /// slot given back, the token handed on if it holds it), and its controller stops using
    /// it. (Never waits: with the lock held elsewhere, the slot is left to go stale.)
    pub fn leave_node(&self) {
        self.exiting.store(true, Ordering::Release);
        let Some(t) = self.node.try_lock().ok().and_then(|mut n| n.take()) else {
            return;
        };
        if t.holding() {
            t.release();
        }
        t.unclaim();
    }

    fn control(&'static self, env: Env, device: usize) {
        REAL.set_current(self.ctx.load(Ordering::Acquire));
        // The controller captures nothing, and its event queries must never invalidate a
        // program's capture (`driver::relaxed`): RELAXED for good.
        REAL.exchange_capture_mode(CU_STREAM_CAPTURE_MODE_RELAXED);
        // Its timed looks (a queue half run down, a chunk of credit due) must not come up to
        // 50 µs late: a low-priority process's whole queue is 200 µs.
        vgpu_region::sys::precise_timers();
        let controller = Controller::new(self, env, device);
        // A panic (a vgpu bug) ends the controller, and drops it (it hands the token on). The
        // process leaves the node file, and its launches are refused from then on, never left
        // waiting for ever.
        let Err(_) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| controller.run()));
        crate::log::error(format_args!(
            "the compute controller for device {device} stopped (internal error); its kernel \
             launches are refused with CUDA_ERROR_OPERATING_SYSTEM"
        ));
        self.leave_node();
        self.refuse();
    }
}

/// The controller's once-a-second debug line (`LIBCUDA_LOG_LEVEL=4`).
#[derive(Default)]
struct Report {
    since: u64,
    looks: u64,
    turns: u64,
    charged: u64,
    held: [u64; 5],
    /// Time launching threads waited at the gate.
    waited: u64,
    /// The limiter's counters at the last line.
    stats: limiter::Stats,
}

/// A device's compute controller: the thread that drives the device's [`Limiter`].
struct Controller {
    gate: &'static Gate,
    device: usize,
    plan: &'static Plan,
    /// The container's counters, live limit and virtual time, in its shared region.
    ledger: Option<&'static RegionLedger>,
    /// The container's region (HAMi's monitor words).
    region: Option<Arc<Region>>,
    /// The node token of this GPU (`None`: no coordination with other containers).
    token: Option<Arc<NodeToken>>,
    /// The container's virtual time without a region: this process's own.
    own_vt: AtomicU64,
    limiter: Limiter,
    /// Launches the limiter has seen.
    looked_at: u64,
    /// The last hold mark or bracket end consumed, and the first launch after it (where the
    /// next segment may start).
    prev_mark: Option<(u64, u64)>,
    /// Another process was on the GPU at some look since the marks in flight were recorded.
    was_shared: bool,
    /// The last look drained the context.
    drained: bool,
    /// It waits for the node token with nothing to admit (the generation it read first).
    waiting_for_token: Option<u32>,
    /// When `last_kernel_time` was last refreshed (Unix seconds).
    kernel_time_noted: u64,
    /// What the debug line once a second reports: since when, looks, turns, charged work.
    report: Report,
    /// Scratch vectors (no allocation per look).
    keys: Vec<u64>,
    marks: Vec<Mark>,
    peers: Vec<Peer>,
}

/// A controller ends only by a panic (its loop never returns): it hands the node token on if
/// it holds it (its slot: [`Gate::leave_node`]).
impl Drop for Controller {
    fn drop(&mut self) {
        if let Some(t) = self.token.as_ref().filter(|t| t.holding()) {
            t.release();
        }
    }
}

impl Controller {
    fn new(gate: &'static Gate, env: Env, device: usize) -> Self {
        let now = now_ns();
        Controller {
            gate,
            device,
            plan: env.plan,
            ledger: env.region,
            region: env.region.map(|l| Arc::clone(l.region())),
            token: crate::node::open_token(
                &env.plan.node_dir,
                env.uuid,
                env.region.map(|l| l.region().container_tag()),
            )
            .map(Arc::new)
            .inspect(|t| {
                if let Ok(mut n) = gate.node.lock() {
                    *n = Some(Arc::clone(t));
                }
            }),
            own_vt: AtomicU64::new(0),
            limiter: Limiter::new(Priority::from_task_priority(env.plan.task_priority), now),
            looked_at: 0,
            prev_mark: None,
            was_shared: false,
            drained: false,
            waiting_for_token: None,
            kernel_time_noted: 0,
            report: Report {
                since: now,
                ..Report::default()
            },
            keys: Vec::with_capacity(usize::try_from(limiter::MAX_ROOM).unwrap_or(0) * 2),
            marks: Vec::with_capacity(16),
            peers: Vec::with_capacity(vgpu_policy::slots::SLOTS),
        }
    }

    /// The node token, while the process has not begun to exit ([`Gate::leave_node`]).
    fn token(&self) -> Option<&NodeToken> {
        self.token
            .as_deref()
            .filter(|_| !self.gate.exiting.load(Ordering::Acquire))
    }

    /// The container's virtual time: in the region, or this process's own without one.
    fn vt(&self) -> &AtomicU64 {
        self.ledger
            .and_then(|l| l.sm_next_ns(self.device))
            .unwrap_or(&self.own_vt)
    }

    /// Whether HAMi's monitor blocks this container now (a higher-priority container is
    /// active on the GPU). As HAMi-core obeys the block: only under an SM limit of 1–99 %
    /// (`percent`, the share in force) and with the utilisation switch on (`force`: on;
    /// `disable`: off; `default`: the region's switch). A container without a compute limit,
    /// which HAMi-core never holds back, is not held back for the monitor either (vgpu's own
    /// priority still applies, through the node's slots).
    fn hami_blocked(&self, percent: u8) -> bool {
        let switch_on = match self.plan.core_policy {
            CorePolicy::Force => true,
            CorePolicy::Disable => false,
            CorePolicy::Default => self
                .region
                .as_ref()
                .is_some_and(|r| r.utilization_switch() != 0),
        };
        (1..100).contains(&percent)
            && switch_on
            && self.region.as_ref().is_some_and(|r| r.launch_blocked())
    }

    /// Whether HAMi's monitor says the container is alone on its GPU under
    /// `GPU_CORE_UTILIZATION_POLICY=default` (`utilization_switch` 0): it owes nothing.
    fn monitor_alone(&self) -> bool {
        self.plan.core_policy == CorePolicy::Default
            && self
                .region
                .as_ref()
                .is_some_and(|r| r.utilization_switch() == 0)
    }

    /// The live limit: `vgpu limit --sm` changes it for the whole container at once; the plan
    /// applies the policy to the live value as to the environment's.
    fn follow_limit(&self) -> u8 {
        if let Some(l) = self.ledger {
            let live = SmShare::percent_or_full(self.plan.share(l.sm_limit(self.device)));
            self.gate.percent.store(u32::from(live), Ordering::Release);
        }
        self.gate.percent()
    }

    /// HAMi's launch marks, once per look that saw launches: `recent_kernel`, and
    /// `last_kernel_time` at most once per `record_kernel_interval`.
    fn mark_launches(&mut self, launches: u64) {
        let Some(r) = self.region.as_ref() else {
            return;
        };
        if launches == 0 {
            return;
        }
        r.mark_launch();
        let now = vgpu_region::sys::realtime_secs();
        if now
            >= self
                .kernel_time_noted
                .saturating_add(self.plan.record_kernel_interval.as_secs())
        {
            r.note_kernel_time(now);
            self.kernel_time_noted = now;
        }
    }

    fn run(mut self) -> ! {
        loop {
            let s = self.gate.signal.load(Ordering::Acquire);
            let next = self.look();
            let now = now_ns();
            if next <= now {
                continue;
            }
            let wait = Duration::from_nanos(next - now).min(MAX_SLEEP);
            match (self.waiting_for_token, self.token()) {
                // Waiting for its turn, nothing to admit: sleep on the node file (a release
                // wakes the next in line), a little longer than a look; many waiters then cost
                // little CPU.
                (Some(g), Some(t)) => t.wait(g, wait.max(TOKEN_WAIT).min(MAX_SLEEP)),
                _ => futex_wait(&self.gate.signal, s, wait),
            }
        }
    }

    /// One look (see the module's documentation); returns when to look again.
    fn look(&mut self) -> u64 {
        let g = self.gate;
        // `Gate::bound`: the generation of the context this thread has current (only this
        // thread writes it; 0: none yet).
        let generation = g.ctx_gen.load(Ordering::Acquire);
        if generation != g.bound.load(Ordering::Acquire) {
            // The program's context, named by a launch (at the start, or after a context that
            // held the marks' objects was destroyed): current here, and the marks re-armed to
            // make theirs in it.
            REAL.set_current(g.ctx.load(Ordering::Acquire));
            g.marks.rearm();
            // The launches waiting for it go on (`Gate::await_bound`).
            g.bound.store(generation, Ordering::Release);
            g.pace.fetch_add(1, Ordering::AcqRel);
            futex_wake(&g.pace);
        }
        let percent = self.follow_limit();
        let now = now_ns();
        if self.plan.hold_brackets
            && !(g.marks.prepared() && g.marks.probe_prepared())
            && EXCLUSION.try_begin_drain()
        {
            // Pinned memory is allocated, and the restart probe's module loaded, while no
            // capture is in progress (either during one would invalidate it), as a drain is.
            g.marks.prepare(self.device);
            g.marks.prepare_probe();
            end_drain();
        }
        if percent >= 100 && !g.measuring && self.plan.task_priority.is_none() {
            // Unlimited and without a priority: the gate stays open; only HAMi's marks are
            // kept. (With a priority the limiter runs at 100 %: a low-priority process keeps
            // out of a high-priority one's way, which it sees by its slot.)
            g.raise(OPEN);
            let n = g.launches.load(Ordering::Acquire);
            let new = n.saturating_sub(self.looked_at);
            self.looked_at = n;
            // Not counted in the region (nothing is measured), and not at exit either.
            g.claim(n);
            self.mark_launches(new);
            if let Some(t) = self.token().filter(|t| t.holding()) {
                t.release();
            }
            return now
                + vgpu_policy::limiter::ns(if self.region.is_some() {
                    Duration::from_millis(10)
                } else {
                    Duration::from_millis(200)
                });
        }
        let launched = g
            .launches
            .load(Ordering::Acquire)
            .min(g.budget.load(Ordering::Acquire));
        g.keys.copy(self.looked_at, launched, &mut self.keys);
        let new = launched.saturating_sub(self.looked_at);
        // (The field itself: `token()` would borrow all of `self`.)
        let exiting = self.gate.exiting.load(Ordering::Acquire);
        if let Some(t) = self.token.as_deref().filter(|_| !exiting) {
            t.peers_into(now, &mut self.peers);
        } else {
            self.peers.clear();
        }
        let shared_now = self
            .peers
            .iter()
            .any(|p| p.state.launched || p.state.syncing || p.holder);
        g.shared.store(!self.peers.is_empty(), Ordering::Relaxed);
        // A mark is shared if another process was on the GPU at any look while it was in
        // flight (conservative: a shared sample never raises a clean price).
        self.was_shared |= shared_now;
        let unreached = g
            .marks
            .collect(&mut self.prev_mark, self.was_shared, &mut self.marks);
        if let Some((one, two)) = g.marks.probe_collect() {
            self.marks.push(Mark {
                kind: MarkKind::Probe { one, two },
                shared: self.was_shared,
            });
        }
        if g.marks.is_empty() {
            self.was_shared = shared_now;
        }
        let empty = g.empty_at.swap(0, Ordering::AcqRel);
        let vt = self.vt().load(Ordering::Acquire);
        let holding = self.token().is_some_and(|t| t.holding());
        self.waiting_for_token = None;
        let d = self.limiter.look(&Look {
            now,
            launched,
            keys: &self.keys,
            held: g.held.load(Ordering::Acquire) > 0,
            marks: &self.marks,
            unreached,
            peers: &self.peers,
            holding,
            vt,
            syncing: g.syncing.load(Ordering::Acquire) > 0,
            empty: empty != 0 && empty > launched,
            drained: std::mem::take(&mut self.drained),
            percent,
            blocked: self.hami_blocked(percent),
            work_conserving: self.plan.work_conserving,
            monitor_alone: self.monitor_alone(),
        });
        self.looked_at = launched;
        // Kept off the GPU for a peer, its marks in flight span the peer's work.
        self.was_shared |= d.peer_runs();
        if crate::log::enabled(crate::log::TRACE) {
            for x in self.limiter.samples() {
                crate::log::trace(format_args!(
                    "sample key {:016x} elapsed {} gap {} price {:.0} -> {:.0}{}",
                    x.key,
                    x.elapsed,
                    x.gap,
                    x.before.unwrap_or(0.0),
                    x.after.unwrap_or(0.0),
                    if x.shared { " shared" } else { "" }
                ));
            }
        }
        // The keys the gate brackets no more, and those it brackets again (a price only a
        // neighbour's time set, once this process runs alone in its turns).
        for &k in &self.keys {
            let slot = &g.known[known_index(k)];
            if k != 0 && self.limiter.settled(k) {
                slot.store(k, Ordering::Relaxed);
            } else if slot.load(Ordering::Relaxed) == k {
                slot.store(0, Ordering::Relaxed);
            }
        }
        // The charge: the container's virtual time, and the region's counters. A container
        // never charged (0) gets its start written at once, as the model does: else it would
        // count from `AHEAD` before each look's now for as long as it waits for its first turn,
        // forever behind the waiters that fell a whole bank back, and never served.
        if (d.charge > 0 || vt == 0) && percent < 100 {
            let _ = self
                .vt()
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                    Some(d.charge_vt(v, now, percent))
                });
        }
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        g.mean_price
            .store(self.limiter.mean_price().max(0.0) as u64, Ordering::Relaxed);
        if let Some(l) = self.ledger {
            let waited = g.throttled_ns.swap(0, Ordering::AcqRel);
            let limited = percent < 100;
            self.report.waited = self.report.waited.saturating_add(waited);
            l.add_compute(
                self.device,
                d.charge,
                if limited { waited } else { 0 },
                g.claim(launched),
            );
        }
        self.mark_launches(new);
        self.report_look(now, &d, vt);
        // The node token and the slot.
        if let Some(t) = self.token() {
            t.publish(&d.slot, now);
            match d.token {
                Token::Free => {
                    if holding {
                        t.release();
                    }
                }
                Token::Hold => t.heartbeat(),
                Token::Want(key) => {
                    let gen_before = t.generation();
                    if !holding && t.try_take_keyed(key, &self.peers, now) {
                        self.report.turns += 1;
                        // Taken: look again at once (this look assumed it had not).
                        g.raise(d.budget);
                        return now;
                    }
                    if d.held == limiter::Held::Peer {
                        self.waiting_for_token = Some(gen_before);
                    }
                }
            }
        }
        if d.drain {
            self.drain();
            return now;
        }
        // The restart probe, on a stream of its own, outside any capture (its launches would
        // be refused during a global one).
        if d.probe && EXCLUSION.try_begin_drain() {
            g.marks.probe_start();
            end_drain();
        }
        // The budget, where the controller is poked on the way (half the room), and the sample.
        if let Some(n) = d.sample {
            g.sample_at.store(n, Ordering::Release);
        }
        let room = d.budget.saturating_sub(launched);
        // A large room is priced on the way (the keys ring holds twice the most a look admits);
        // a small one is simply used up, and the launch it holds wakes the controller.
        g.poke_at.store(
            if room >= POKE_ROOM {
                launched + room / 2
            } else {
                u64::MAX
            },
            Ordering::Release,
        );
        // Unlimited, the gate stays open, unless the limiter says otherwise (a low-priority
        // process keeps its budget, out of a high-priority peer's way). Opened at 100 %
        // whatever the limiter decided, `CUDA_TASK_PRIORITY=1` without a limit did nothing
        // (the H200's decode service at 0 beside training at 1: p99 446 ms, run 70).
        g.raise(if d.open { OPEN } else { d.budget });
        d.next
    }

    /// Counts a look for the debug line, and prints it once a second.
    fn report_look(&mut self, now: u64, d: &limiter::Decision, vt: u64) {
        let r = &mut self.report;
        r.looks += 1;
        r.charged = r.charged.saturating_add(d.charge);
        let i = match d.held {
            limiter::Held::No => 0,
            limiter::Held::Credit => 1,
            limiter::Held::Queue => 2,
            limiter::Held::Peer => 3,
            limiter::Held::Blocked => 4,
        };
        r.held[i] += 1;
        if crate::log::enabled(crate::log::TRACE) {
            // Every look's decision (the trace level only: a look every 125 µs beside others).
            crate::log::trace(format_args!(
                "look at {:.3} ms: held {:?}, token {:?}, charge {} ns, budget {}, vt {:+.3} ms, {} peers, next in {:.3} ms, slot {:?}",
                now as f64 / 1e6,
                d.held,
                d.token,
                d.charge,
                d.budget,
                (vt as f64 - now as f64) / 1e6,
                self.peers.len(),
                d.next.saturating_sub(now) as f64 / 1e6,
                d.slot
            ));
        }
        let span = now.saturating_sub(r.since);
        if span < 1_000_000_000 {
            return;
        }
        let l = &self.limiter;
        let (s, was) = (l.stats(), r.stats);
        crate::log::debug(format_args!(
            "sm device {}: {:.1} % of the GPU charged over {:.2} s, {} looks (held: credit {} queue {} peer {} blocked {}; launches waited {:.1} ms), {} turns, {} peers, {} kernels priced, mean {:.1} us, vt {:+.1} ms; {} brackets ({} idle, {} long calls, {} held, {} lifted late) measured {:.1} ms charged {:.1} ms, {} segments, {} probes, restart {:.2} us, idle lag {:.2} us, corrected {:.2} ms",
            self.device,
            100.0 * r.charged as f64 / span as f64,
            span as f64 / 1e9,
            r.looks,
            r.held[1],
            r.held[2],
            r.held[3],
            r.held[4],
            r.waited as f64 / 1e6,
            r.turns,
            self.peers.len(),
            l.prices().len(),
            l.mean_price() / 1e3,
            (vt as f64 - now as f64) / 1e6,
            s.brackets.saturating_sub(was.brackets),
            s.idle_brackets.saturating_sub(was.idle_brackets),
            s.long_calls.saturating_sub(was.long_calls),
            self.gate.marks.placed.swap(0, Ordering::Relaxed),
            self.gate.marks.unstuck.swap(0, Ordering::Relaxed),
            s.sampled_ns.saturating_sub(was.sampled_ns) as f64 / 1e6,
            s.sampled_charged_ns.saturating_sub(was.sampled_charged_ns) as f64 / 1e6,
            s.segments.saturating_sub(was.segments),
            s.probes.saturating_sub(was.probes),
            l.restart() / 1e3,
            l.idle_lag() / 1e3,
            s.corrected_ns.saturating_sub(was.corrected_ns) as f64 / 1e6,
        ));
        *r = Report {
            since: now,
            stats: s,
            ..Report::default()
        };
    }

    /// Waits for the context's work (before the token is handed on). A drain must not fall
    /// inside a stream capture (it would invalidate it): while one runs, the drain waits, and
    /// after CAPTURE_HOLD gives the token back without draining.
    fn drain(&mut self) {
        let since = now_ns();
        while !EXCLUSION.try_begin_drain() {
            let c = EXCLUSION.captures.load(Ordering::Acquire);
            if c != 0 {
                futex_wait(&EXCLUSION.captures, c, Duration::from_millis(5));
            }
            if now_ns().saturating_sub(since) > vgpu_policy::limiter::ns(CAPTURE_HOLD) {
                if let Some(t) = self.token().filter(|t| t.holding()) {
                    t.release();
                }
                self.drained = true;
                return;
            }
            if let Some(t) = self.token() {
                t.heartbeat();
            }
        }
        // A bracket's hold still standing would keep the drain waiting for its launching thread.
        self.gate.marks.unstick(now_ns(), true);
        REAL.synchronize();
        end_drain();
        self.drained = true;
    }
}

/// `unit`'s entry in [`Gate::loaded`]: the handle's bits mixed (a driver's handles are
/// pointers into its own tables, alike in their low bits), the top ten taken.
fn unit_index(unit: u64) -> usize {
    // Shifted down to ten bits (KNOWN is 1024): the cast cannot truncate.
    #[allow(clippy::cast_possible_truncation)]
    let i = (unit.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - KNOWN.trailing_zeros())) as usize;
    i
}

/// `key`'s entry in [`Gate::known`].
fn known_index(key: u64) -> usize {
    // Masked below KNOWN (a usize): the cast cannot truncate.
    #[allow(clippy::cast_possible_truncation)]
    let i = (key ^ (key >> 29)) as usize & (KNOWN - 1);
    i
}

/// This process's stream captures and drains, which must not overlap (counted while a gate or
/// a memory limit exists): see [`vgpu_policy::exclusion`].
static EXCLUSION: Exclusion<AtomicU32> = Exclusion::new();

/// Before a stream capture begins: waits for any drain in progress, then counts the capture.
pub fn capture_begin() {
    while let Err(d) = EXCLUSION.try_begin_capture() {
        futex_wait(&EXCLUSION.draining, d, Duration::from_millis(5));
    }
}

/// A counted stream capture ended (or never began).
pub fn capture_end() {
    EXCLUSION.end_capture();
    futex_wake(&EXCLUSION.captures);
}

/// Whether some stream capture of this process is counted now (a cheap filter before asking
/// the driver whether a given stream captures).
pub fn captures_counted() -> bool {
    EXCLUSION.captures.load(Ordering::Acquire) > 0
}

/// In a forked child: no drain runs there, and no capture of the parent's threads continues.
pub fn after_fork() {
    EXCLUSION.reset();
}

fn end_drain() {
    EXCLUSION.end_drain();
    futex_wake(&EXCLUSION.draining);
}
