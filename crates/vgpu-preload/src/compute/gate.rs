//! A limited device's launch gate: what the launch path, the synchronisation hooks and the
//! exit handler do (see the module above), and what the controller reads and raises.
use super::keyset::KeySet;
use super::waits::Waits;
use super::{Env, OPEN, controller};
use crate::driver::{Driver, REAL};
use crate::marks::{Bracket, Keys, Marks};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use vgpu_policy::limiter;
use vgpu_policy::plan::{GatePlan, SmShare};
use vgpu_region::RegionLedger;
use vgpu_region::node::NodeToken;
use vgpu_region::sys::{futex_wait, futex_wake, monotonic_ns as now_ns};
use vgpu_sys::cuda::*;

/// The longest a held launch sleeps before it looks at the budget again. A raise always wakes
/// it (the budget is stored before the pace word is bumped and woken, and the launch reads the
/// pace word before it checks the budget), so this bound only caps the cost of a lost wake-up;
/// dozens of processes waiting their turns each wake 20 times a second, not 200.
const HOLD_BOUND: Duration = Duration::from_millis(50);

/// One limited device's gate, shared by the launching threads, the synchronisation hooks and
/// the controller.
pub struct Gate {
    pub(super) percent: AtomicU32,
    /// Launches admitted (attempts past the budget take themselves back).
    pub(super) launches: AtomicU64,
    /// The gate admits launches while `launches` is below this.
    pub(super) budget: AtomicU64,
    /// The launch that wakes the controller on its way through (it prices what came before it
    /// while the program goes on).
    pub(super) poke_at: AtomicU64,
    /// The launch to bracket for a sample (`u64::MAX`: none).
    pub(super) sample_at: AtomicU64,
    /// Bumped when the budget grows (held launches wait on it).
    pub(super) pace: AtomicU32,
    /// Bumped to wake the controller.
    pub(super) signal: AtomicU32,
    /// Threads waiting at the gate.
    pub(super) held: AtomicU32,
    /// Threads inside a synchronisation.
    pub(super) syncing: AtomicU32,
    /// Synchronisations begun so far (`Look::syncs`).
    pub(super) syncs: AtomicU64,
    /// The synchronisations that returned since the controller last looked (`Look::waited`).
    pub(super) waits: Waits,
    /// The launch count when a synchronisation or a query last showed the queue empty, plus one
    /// (0: not since the controller last looked).
    pub(super) empty_at: AtomicU64,
    /// Other processes share the GPU: synchronisations wake the controller.
    pub(super) shared: AtomicBool,
    /// A context of this device, for draining (the controller's current context, and where
    /// the marks' objects are made).
    pub(super) ctx: AtomicPtr<core::ffi::c_void>,
    /// Bumped at each store of `ctx`: the controller binds to the new one at its next look.
    pub(super) ctx_gen: AtomicU64,
    /// The `ctx_gen` the controller is bound to (the context current in its thread, the marks
    /// re-armed there): a launch that names a context after the marks retired waits for it.
    pub(super) bound: AtomicU64,
    /// `ctx` is known (cleared when the marks retire: the next launch names the context).
    pub(super) started: AtomicBool,
    /// The controller thread was started.
    pub(super) spawned: AtomicBool,
    /// The controller thread could not be started, or stopped on a panic: launches are
    /// refused (no budget would ever be raised, and running them unlimited would escape the
    /// limit).
    pub(super) refused: AtomicBool,
    /// Measure GPU time even while the limit is 100 (`VGPU_MEASURE_GPU_TIME`).
    pub(super) measuring: bool,
    /// Time launching threads spent waiting since the controller last read it.
    pub(super) throttled_ns: AtomicU64,
    /// Launches counted in the region so far: a look and the exit handler each claim what
    /// they count ([`Gate::claim`]), so that none is counted twice.
    pub(super) reported: AtomicU64,
    /// What a launch costs on average, as the limiter priced the last ones (ns): the exit
    /// handler charges the launches no look saw at this.
    pub(super) mean_price: AtomicU64,
    /// The controller's node token, for the exit handler: a process that exits says so in its
    /// node slot at once (else its last state stood there, live to the others, until its
    /// heartbeat went stale: a phantom peer for up to `SLOT_STALE`). The controller stores it
    /// once; nobody else holds the lock for longer than a take.
    pub(super) node: Mutex<Option<Arc<NodeToken>>>,
    /// The exit handler has run: the controller governs the process alone from then on,
    /// without the node file (what the program still launches in its teardown is held to its
    /// share, and no peer sees it).
    pub(super) exiting: AtomicBool,
    pub(super) keys: Keys,
    /// The function (or graph) of each admitted launch that took the sampling path (a key
    /// without a price, or the launch picked for a sample), as `keys`; the other entries are
    /// stale, and the limiter reads a unit only for such launches: a new grid of a function
    /// timed before is priced at that function's last timing.
    pub(super) units: Keys,
    pub(super) marks: Marks,
    /// Keys the limiter has a price for: the first launch of any other key is timed, so that
    /// no kernel, and no graph, runs unpriced for long.
    pub(super) known: KeySet,
    /// Functions (and graphs) launched before: a sampled launch of one of them
    /// may have its stream held, its module being loaded. A key is a function over one grid,
    /// and a framework launches the same function over ever new grids (a decode step's
    /// attention and cache copies grow with the sequence): holding only keys with a price left
    /// all those brackets unheld, priced with the host's time (the H200's decode service at 50 %
    /// took p50 1.40× plain, run 59).
    pub(super) loaded: KeySet,
}

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
            syncs: AtomicU64::new(0),
            waits: Waits::new(),
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
            units: Keys::new(),
            marks: Marks::new(),
            known: KeySet::new(),
            loaded: KeySet::new(),
        }
    }

    /// After a launch of `unit` the gate timed or had no price for: its module is loaded.
    #[cold]
    pub fn launched(&self, unit: u64) {
        self.loaded.insert(unit);
    }

    /// The percent in force (at most 100: it is only ever stored from a `u8`).
    pub(super) fn percent(&self) -> u8 {
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
                let known = self.known.contains(key);
                let q = self.marks.queue_wanted();
                if q != 0 {
                    self.queue_wait(stream, q, known, unit);
                }
                let s = self.sample_at.load(Ordering::Relaxed);
                if n == s || !known {
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

    /// An admitted launch while the queue is held (`marks::queue`): its stream waits on the GPU,
    /// if its function (or graph) was launched before (a first launch may load its module).
    #[cold]
    #[inline(never)]
    fn queue_wait(&self, stream: CUstream, value: u32, known: bool, unit: u64) {
        self.marks
            .queue_wait(stream, value, known || self.loaded.contains(unit));
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
        // Its function, for the limiter: only the launches that come here need it (a key
        // without a price is priced by its function; a timed launch prices its function), so
        // the common path stores none.
        self.units.put(n, unit);
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
            return if self.known.contains(key) {
                Admitted::Go
            } else {
                Admitted::Unpriced
            };
        }
        // Only a function (or graph) launched before may have its stream held: a first launch
        // may load its module, and loading synchronises the context (CUDA's lazy loading),
        // which would wait for the held stream (a ResNet step under a limit hung on the H200:
        // run 57). A function's first launch call may be that load (`Bracket::first`).
        let loaded = self.loaded.contains(unit);
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
        let inside = self.syncing.fetch_add(1, Ordering::AcqRel);
        self.waits
            .begin(inside == 0, self.launches.load(Ordering::Acquire));
        self.syncs.fetch_add(1, Ordering::Relaxed);
        if self.shared.load(Ordering::Relaxed) {
            self.poke();
        }
    }

    /// A synchronisation hook returned (`ok`: it succeeded, so the work it waited for is done).
    #[inline]
    pub fn sync_end(&self, ok: bool) {
        let inside = self.syncing.fetch_sub(1, Ordering::AcqRel);
        self.waits.end(inside == 1, ok);
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
            .spawn(move || controller::control(self, env, usize::try_from(ordinal).unwrap_or(0)));
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
    pub(super) fn refuse(&self) {
        self.refused.store(true, Ordering::Release);
        self.pace.fetch_add(1, Ordering::AcqRel);
        futex_wake(&self.pace);
    }

    pub(super) fn raise(&self, budget: u64) {
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
        // The child's limiter starts with no price, and its functions are its own.
        self.known.clear();
        self.loaded.clear();
        self.waits.after_fork();
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
    pub(super) fn claim(&self, upto: u64) -> u64 {
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
        self.marks.lift_queue();
        let Some(t) = self.node.try_lock().ok().and_then(|mut n| n.take()) else {
            return;
        };
        if t.holding() {
            t.release();
        }
        t.unclaim();
    }
}

#[cfg(test)]
mod tests {
    //! The gate's contract with the launching threads, without a driver (the unit tests link
    //! no `libcuda.so.1`: every driver call answers "not found", so no stream captures and no
    //! mark is recorded) and without a controller: the test raises the budget itself.
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Instant;

    const KEY: u64 = 0x1234_5678;

    /// A gate at 50 % whose controller "runs" (the test plays it), with `KEY` priced.
    fn gate() -> &'static Gate {
        let g: &'static Gate = Box::leak(Box::new(Gate::new(GatePlan {
            share: SmShare::new(50),
            measuring: false,
        })));
        g.started.store(true, Ordering::Release);
        g.spawned.store(true, Ordering::Release);
        g.known.insert(KEY);
        g
    }

    fn admit(g: &'static Gate) -> Admitted {
        g.admit(0, core::ptr::null_mut(), KEY, 1, true, || {
            unreachable!("the gate has started")
        })
    }

    /// Waits (bounded) until `f` holds.
    fn until(f: impl Fn() -> bool) -> bool {
        let t = Instant::now();
        while !f() {
            if t.elapsed() > Duration::from_secs(10) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    #[test]
    fn launches_within_the_budget_pass_and_the_next_waits_until_the_budget_is_raised() {
        let g = gate();
        g.raise(2);
        assert!(matches!(admit(g), Admitted::Go));
        assert!(matches!(admit(g), Admitted::Go));
        let passed = Arc::new(AtomicUsize::new(0));
        let p = Arc::clone(&passed);
        let t = std::thread::spawn(move || {
            let a = admit(g);
            p.fetch_add(1, Ordering::AcqRel);
            matches!(a, Admitted::Go)
        });
        // Held: counted as waiting, its attempt taken back, the controller woken.
        assert!(until(|| g.held.load(Ordering::Acquire) == 1));
        let signal = g.signal.load(Ordering::Acquire);
        assert!(signal >= 1, "a held launch wakes the controller");
        std::thread::sleep(Duration::from_millis(120));
        assert_eq!(
            passed.load(Ordering::Acquire),
            0,
            "past the budget, it waits"
        );
        assert_eq!(g.launches.load(Ordering::Acquire), 2);
        g.raise(3);
        assert!(t.join().unwrap(), "admitted once the budget has room");
        assert_eq!(g.held.load(Ordering::Acquire), 0);
        assert_eq!(g.launches.load(Ordering::Acquire), 3);
    }

    #[test]
    fn a_refused_gate_sends_its_waiting_launches_back_refused() {
        let g = gate();
        let t = std::thread::spawn(move || matches!(admit(g), Admitted::Refused));
        assert!(until(|| g.held.load(Ordering::Acquire) == 1));
        // The controller could not start, or stopped: nothing would ever raise the budget.
        g.refuse();
        assert!(t.join().unwrap());
        assert_eq!(g.held.load(Ordering::Acquire), 0);
        assert!(matches!(admit(g), Admitted::Refused), "and every later one");
        assert_eq!(g.launches.load(Ordering::Acquire), 0, "none was admitted");
    }

    #[test]
    fn the_launch_at_the_poke_point_wakes_the_controller_once() {
        let g = gate();
        g.raise(10);
        g.poke_at.store(3, Ordering::Release);
        for _ in 0..3 {
            assert!(matches!(admit(g), Admitted::Go));
        }
        assert_eq!(g.signal.load(Ordering::Acquire), 0);
        assert!(matches!(admit(g), Admitted::Go));
        assert_eq!(g.signal.load(Ordering::Acquire), 1, "launch 3 pokes");
        for _ in 0..5 {
            assert!(matches!(admit(g), Admitted::Go));
        }
        assert_eq!(g.signal.load(Ordering::Acquire), 1);
    }

    #[test]
    fn a_key_without_a_price_is_reported_unpriced_when_no_mark_can_time_it() {
        let g = gate();
        g.raise(1);
        // Marks are off (no driver): the launch goes on, noted as launched without a price.
        let a = g.admit(0, core::ptr::null_mut(), KEY + 1, 2, true, || {
            unreachable!("the gate has started")
        });
        assert!(matches!(a, Admitted::Unpriced));
    }

    #[test]
    fn a_look_and_the_exit_handler_count_each_launch_once() {
        let g = gate();
        assert_eq!(g.claim(5), 5);
        assert_eq!(g.claim(3), 0, "an older count claims nothing");
        assert_eq!(g.claim(5), 0);
        assert_eq!(g.claim(8), 3);
    }

    #[test]
    fn synchronisations_show_the_queue_empty_at_the_launch_count() {
        let g = gate();
        g.raise(4);
        for _ in 0..4 {
            admit(g);
        }
        g.sync_begin();
        assert_eq!(g.syncing.load(Ordering::Acquire), 1);
        g.sync_end(false);
        assert_eq!(g.syncing.load(Ordering::Acquire), 0);
        assert_eq!(
            g.empty_at.load(Ordering::Acquire),
            0,
            "a failed sync shows nothing"
        );
        g.sync_begin();
        g.sync_end(true);
        assert_eq!(g.empty_at.load(Ordering::Acquire), 5, "the count, plus one");
        assert_eq!(
            g.syncs.load(Ordering::Relaxed),
            2,
            "each one begun is counted"
        );
    }

    #[test]
    fn a_forked_child_starts_with_a_fresh_gate() {
        let g = gate();
        g.raise(4);
        admit(g);
        g.refuse();
        g.after_fork();
        assert!(!g.started.load(Ordering::Acquire));
        assert!(!g.spawned.load(Ordering::Acquire));
        assert!(!g.refused.load(Ordering::Acquire));
        assert_eq!(g.launches.load(Ordering::Acquire), 0);
        assert_eq!(g.budget.load(Ordering::Acquire), 0);
        assert!(
            !g.known.contains(KEY),
            "the parent's prices are not the child's"
        );
    }
}
