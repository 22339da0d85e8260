//! The compute limiter: a gate per limited device, opened and closed by a controller thread
//! that runs [`vgpu_policy::compute::DutyCycle`] and shares the GPU with other processes and
//! containers by [`vgpu_policy::share`] (docs/COMPUTE.md).
//!
//! Launch path (every `cuLaunchKernel*`, `cuLaunchCooperativeKernel*`, `cuGraphLaunch*`): one
//! atomic load of the gate and one `fetch_add` on the window's launch counter; no syscall, no
//! lock, no allocation. Only when the window is closed, its launch budget is spent or its
//! paced budget reached does the launching thread sleep (futex) until it may go on.
//!
//! Synchronisation and query hooks (only while a gate exists): a synchronisation counts itself
//! in and out (`syncing`: the program waits for its GPU work, it is not idle), and one that
//! returns successfully, or a successful query, stores "the queue was seen empty at this time,
//! at this launch count" (`quiet`): the controller then ends the window early and charges it up
//! to that moment, not to its drain.
//!
//! Controller (one thread per limited device, started at the first launch), in the order of
//! docs/COMPUTE.md: wait for demand (a launch found the gate closed); take a turn (announce the
//! key = due time in the node file's slot table, sleep until the container's schedule, take the
//! node token in key order); open a window (paced and with a capped budget when contended);
//! close it when the program is quiet or idle, a fresh waiter is owed the GPU, the budget is
//! spent or the submission time is over; drain; charge the window's busy time; move the
//! container's schedule (A1) **before** handing the token on (A4).
use crate::driver::{Driver, REAL};
use crate::marks::{Keys, Marks, Seen};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;
use vgpu_policy::compute::{
    Costing, DEFAULT_PERIOD, DutyCycle, MEASURE_PERIOD, Pace, WindowPlan, WindowReport,
};
use vgpu_policy::config::CorePolicy;
use vgpu_policy::exclusion::Exclusion;
use vgpu_policy::plan::{GatePlan, Plan, SmShare};
use vgpu_policy::share::{self, Close, Waiter, WindowState};
use vgpu_region::sys::{futex_wait, futex_wake, monotonic_ns as now_ns};
use vgpu_region::{Region, RegionLedger};
use vgpu_sys::cuda::*;

const OPEN: u32 = 1;
const CLOSED: u32 = 0;
/// How long a window kept open by a stream capture holds the node token before it gives it
/// back to the node's other containers.
const CAPTURE_HOLD: Duration = Duration::from_millis(100);
/// How often a controller whose container HAMi's monitor blocks looks again.
const BLOCKED_POLL: Duration = Duration::from_millis(10);
/// The longest a waiter sleeps at once (it refreshes its slot's heartbeat between sleeps).
const WAIT_SLICE: Duration = Duration::from_millis(50);

/// What a gate's controller is handed when it starts (from the runtime, by the launch hook).
#[derive(Clone, Copy)]
pub struct Env {
    /// The resolved configuration.
    pub plan: &'static Plan,
    /// The container's region ledger (counters, live limit, schedule), if it has one.
    pub region: Option<&'static RegionLedger>,
    /// The device's UUID (names its node token).
    pub uuid: &'static str,
}

/// One limited device's gate, shared by the launching threads, the synchronisation hooks and
/// the controller.
pub struct Gate {
    percent: AtomicU32,
    open: AtomicU32,
    /// Launches admitted in the current window (attempts past the hard budget count too;
    /// attempts refused by the pace take themselves back).
    launches: AtomicU64,
    /// The launches admitted now: the paced budget of a contended window, else `hard`.
    budget: AtomicU64,
    /// The window's launch budget (its plan's).
    hard: AtomicU64,
    /// Bumped when the paced budget grows (launches past the pace wait on it).
    pace: AtomicU32,
    /// When a launch last began waiting for the pace in this window (0: none did): whether the
    /// pace, not the program, set the rate (`share::pace_limited`).
    pace_held_at: AtomicU64,
    /// When the window's first launch happened (0: none yet).
    first_ns: AtomicU64,
    /// Bumped to wake the controller (first launch, budget spent, demand, limit changed).
    signal: AtomicU32,
    /// When the first launch that found the gate closed tried (0: none waiting).
    demand: AtomicU64,
    /// Threads inside a synchronisation, or waiting for the pace: the program waits for its
    /// GPU work.
    syncing: AtomicU32,
    /// When a synchronisation or a query last showed the program's queue empty (0: never)...
    quiet_at: AtomicU64,
    /// ...and the launch count then: the quiet holds while it is unchanged.
    quiet_launches: AtomicU64,
    /// A context of this device, for draining.
    ctx: AtomicPtr<core::ffi::c_void>,
    started: AtomicBool,
    /// Measure GPU time even while the limit is 100 (`VGPU_MEASURE_GPU_TIME`).
    measuring: bool,
    /// Time launching threads spent waiting for a window since the controller last read it.
    throttled_ns: AtomicU64,
    /// The open window's launch keys, for pricing its launches (`crate::marks`).
    keys: Keys,
    /// The pace's marks (`crate::marks`).
    marks: Marks,
}

impl Gate {
    /// A gate as the plan starts it: at its share, or at 100 % when only measuring.
    pub fn new(plan: GatePlan) -> Self {
        Gate {
            percent: AtomicU32::new(u32::from(SmShare::percent_or_full(plan.share))),
            open: AtomicU32::new(CLOSED),
            demand: AtomicU64::new(0),
            launches: AtomicU64::new(0),
            budget: AtomicU64::new(u64::MAX),
            hard: AtomicU64::new(u64::MAX),
            pace: AtomicU32::new(0),
            pace_held_at: AtomicU64::new(0),
            first_ns: AtomicU64::new(0),
            signal: AtomicU32::new(0),
            syncing: AtomicU32::new(0),
            quiet_at: AtomicU64::new(0),
            quiet_launches: AtomicU64::new(0),
            ctx: AtomicPtr::new(core::ptr::null_mut()),
            started: AtomicBool::new(false),
            measuring: plan.measuring,
            throttled_ns: AtomicU64::new(0),
            keys: Keys::new(),
            marks: Marks::new(),
        }
    }

    /// The percent in force (at most 100: it is only ever stored from a `u8`).
    fn percent(&self) -> u8 {
        u8::try_from(self.percent.load(Ordering::Acquire)).unwrap_or(100)
    }

    fn poke(&self) {
        self.signal.fetch_add(1, Ordering::AcqRel);
        futex_wake(&self.signal);
    }

    /// Admits one launch of `key` (its function or graph) on this device: returns at once
    /// while the window is open and has budget left, else sleeps until a window admits it.
    #[inline]
    pub fn admit(
        &'static self,
        ordinal: CUdevice,
        stream: CUstream,
        key: u64,
        env: impl FnOnce() -> Env,
    ) {
        if !self.started.load(Ordering::Acquire) {
            self.start(ordinal, env());
            if !self.started.load(Ordering::Acquire) {
                // No current context (the driver will refuse this launch itself): nothing to
                // govern yet, and never wait for a controller that does not exist.
                return;
            }
        }
        // Whether this thread is counted in `syncing` while it waits for the pace: it stays
        // counted from its first wait until it is admitted or the window closes, so that the
        // controller never sees it idle between two waits.
        let mut pacing = false;
        loop {
            if self.open.load(Ordering::Acquire) == OPEN {
                let n = self.launches.fetch_add(1, Ordering::AcqRel);
                if n < self.budget.load(Ordering::Acquire) {
                    self.keys.put(n, key, stream);
                    if pacing {
                        self.syncing.fetch_sub(1, Ordering::AcqRel);
                    }
                    if n == 0 {
                        self.first_ns.store(now_ns(), Ordering::Release);
                        self.poke();
                    }
                    return;
                }
                if n < self.hard.load(Ordering::Acquire) {
                    // Past the pace, not past the budget: take the attempt back and wait for
                    // the controller to raise the pace (not counted: no drift).
                    self.launches.fetch_sub(1, Ordering::AcqRel);
                    if REAL.capturing(stream) {
                        if pacing {
                            self.syncing.fetch_sub(1, Ordering::AcqRel);
                        }
                        self.launches.fetch_add(1, Ordering::AcqRel);
                        return;
                    }
                    let p = self.pace.load(Ordering::Acquire);
                    if self.budget.load(Ordering::Acquire) > n
                        || self.open.load(Ordering::Acquire) != OPEN
                    {
                        continue;
                    }
                    if !pacing {
                        pacing = true;
                        self.syncing.fetch_add(1, Ordering::AcqRel);
                        // Held anyway: mark where the GPU's queue ends (`crate::marks`).
                        self.marks.record(stream, n);
                    }
                    let t0 = now_ns();
                    self.pace_held_at.store(t0, Ordering::Release);
                    futex_wait(&self.pace, p, Duration::from_millis(5));
                    self.throttled_ns
                        .fetch_add(now_ns().saturating_sub(t0), Ordering::Relaxed);
                    continue;
                }
                // The window's budget is spent: have it closed now rather than at its time; this
                // launch is the next window's demand.
            }
            if pacing {
                pacing = false;
                self.syncing.fetch_sub(1, Ordering::AcqRel);
            }
            let _ = self.demand.compare_exchange(
                0,
                now_ns().max(1),
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            self.poke();
            // A launch into a stream being captured runs nothing now (the graph's launch takes
            // the GPU time, and it is governed): it never waits for a window.
            if REAL.capturing(stream) {
                return;
            }
            let t0 = now_ns();
            futex_wait(&self.open, CLOSED, Duration::from_millis(100));
            self.throttled_ns
                .fetch_add(now_ns().saturating_sub(t0), Ordering::Relaxed);
        }
    }

    /// A synchronisation hook begins (`cuCtxSynchronize`, `cuStreamSynchronize*`,
    /// `cuEventSynchronize`): the program waits for its GPU work.
    #[inline]
    pub fn sync_begin(&self) {
        self.syncing.fetch_add(1, Ordering::AcqRel);
    }

    /// A synchronisation hook returned (`ok`: it succeeded, so the work it waited for is done).
    #[inline]
    pub fn sync_end(&self, ok: bool) {
        self.syncing.fetch_sub(1, Ordering::AcqRel);
        if ok {
            self.saw_empty();
        }
    }

    /// A synchronisation or a successful query showed the program's queue empty now.
    #[inline]
    pub fn saw_empty(&self) {
        if self.open.load(Ordering::Relaxed) != OPEN {
            return;
        }
        self.quiet_launches
            .store(self.launches.load(Ordering::Acquire), Ordering::Release);
        self.quiet_at.store(now_ns(), Ordering::Release);
    }

    #[cold]
    fn start(&'static self, ordinal: CUdevice, env: Env) {
        let Some(ctx) = REAL.current_context() else {
            return;
        };
        self.ctx.store(ctx, Ordering::Release);
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let spawned = std::thread::Builder::new()
            .name(format!("vgpu-sm{ordinal}"))
            .spawn(move || self.control(env, usize::try_from(ordinal).unwrap_or(0)));
        if spawned.is_err() {
            crate::log::error(format_args!(
                "could not start the compute controller for device {ordinal}; launches pass unthrottled"
            ));
            self.open_unbounded();
        }
    }

    fn open_unbounded(&self) {
        self.hard.store(u64::MAX, Ordering::Release);
        self.budget.store(u64::MAX, Ordering::Release);
        self.open.store(OPEN, Ordering::Release);
        futex_wake(&self.open);
        self.pace.fetch_add(1, Ordering::AcqRel);
        futex_wake(&self.pace);
    }

    /// In a forked child: no controller thread survived the fork; the first launch starts one.
    /// (The module's free function `after_fork` must run once as well.)
    pub fn after_fork(&self) {
        self.started.store(false, Ordering::Release);
        self.ctx.store(core::ptr::null_mut(), Ordering::Release);
        self.open.store(CLOSED, Ordering::Release);
        self.launches.store(0, Ordering::Release);
        self.demand.store(0, Ordering::Release);
        self.first_ns.store(0, Ordering::Release);
        self.syncing.store(0, Ordering::Release);
        self.quiet_at.store(0, Ordering::Release);
        self.marks.after_fork();
    }

    /// At process exit: the window in progress will never be drained and reported by the
    /// controller, so it is reported as it stands (busy from its first launch until now): a
    /// short program's last window is not lost. Whoever takes the window's start first (this
    /// or the controller) reports it, so it is never counted twice.
    pub fn report_at_exit(&self, ledger: Option<&RegionLedger>, device: usize) {
        let Some(l) = ledger else {
            return;
        };
        let launches = self
            .launches
            .load(Ordering::Acquire)
            .min(self.hard.load(Ordering::Acquire));
        let limited = self.percent.load(Ordering::Acquire) < 100;
        self.report(
            l,
            device,
            |first| now_ns().saturating_sub(first),
            launches,
            limited,
        );
    }

    /// Adds a window to the process's counters in the region, if this caller is the first to
    /// take the window's start (the controller at its drain, or `report_at_exit`): a window is
    /// reported once. `busy` gets the window's start. Time launchers waited counts as
    /// throttling only under a limit; at 100 % (measuring only) a launch waits at most for a
    /// drain, which bounds the queue and limits nothing.
    fn report(
        &self,
        l: &RegionLedger,
        device: usize,
        busy: impl FnOnce(u64) -> u64,
        launches: u64,
        limited: bool,
    ) {
        let first = self.first_ns.swap(0, Ordering::AcqRel);
        if first == 0 {
            return;
        }
        let waited = self.throttled_ns.swap(0, Ordering::AcqRel);
        l.add_compute(
            device,
            busy(first),
            if limited { waited } else { 0 },
            launches,
        );
    }

    fn control(&'static self, env: Env, device: usize) {
        REAL.set_current(self.ctx.load(Ordering::Acquire));
        Controller::new(self, env, device).run()
    }
}

/// A device's compute controller: the thread that opens and closes its gate. Each window
/// goes through the phases below, one method each: follow the live limit, wait for demand,
/// take a turn (schedule and node token, in key order), open the window, wait for its first
/// launch, run it until a close reason, drain it (outside any stream capture), and settle it
/// (report, move the schedule, then hand the token on). At 100 % a plain gate skips all of
/// them and stays open.
struct Controller {
    gate: &'static Gate,
    device: usize,
    plan: &'static Plan,
    /// The container's counters and live limit, in its shared region.
    ledger: Option<&'static RegionLedger>,
    /// The container's region (HAMi's monitor words).
    region: Option<Arc<Region>>,
    /// The node token of this GPU (`None`: no coordination with other containers).
    token: Option<vgpu_region::node::NodeToken>,
    /// The container's schedule without a region: this process's own.
    own_schedule: AtomicU64,
    dc: DutyCycle,
    percent: u8,
    /// Whether the last window ended with the program still busy (`share::backlogged`).
    backlogged: bool,
    /// Whether the next window opens armed, before any launch (`share::arm`).
    arm: bool,
    /// When another process last released the token, as seen when this one took it.
    other_freed: u64,
    /// The published waiters, read into this (no allocation per look).
    scratch: Vec<Waiter>,
    /// When `last_kernel_time` was last refreshed (Unix seconds).
    kernel_time_noted: u64,
    /// What the paced windows' launches cost (learned across windows).
    costing: Costing,
    /// The marks seen completed at a look (no allocation per look).
    seen: Vec<Seen>,
}

/// One window, from its opening to its drain.
struct Window {
    plan: WindowPlan,
    /// At 100 % (measuring): no schedule, no node token.
    free: bool,
    /// Contended at its opening: paced, with the capped budget.
    paced: bool,
    /// Its due time (the key it won the token with).
    due: u64,
    opened: u64,
    first: u64,
    closed: u64,
    drained: u64,
    close: Close,
    /// Whether the node token is still held.
    holding: bool,
    /// Opened armed, before any launch (`share::arm`): it waits for its first launch while
    /// nobody else wants the GPU, and counts from that launch.
    armed: bool,
    /// Its pace, when paced (`vgpu_policy::compute::Pace`).
    pace: Pace,
    /// The work its pace estimated queued at the close, when the pace, not the program, set its
    /// rate up to the close (`share::pace_limited`): what `DutyCycle::finish_paced` steers by.
    pace_queued: Option<Duration>,
    /// Its number among the gate's windows (its marks carry it).
    number: u64,
    /// Launches whose keys were copied into the costing.
    priced: u64,
    /// The slot of the last mark seen completed (the start of the next timed segment).
    last_mark: Option<u64>,
    /// Marks seen completed in it.
    marks: u64,
}

impl Controller {
    fn new(gate: &'static Gate, env: Env, device: usize) -> Self {
        let percent = gate.percent();
        Controller {
            gate,
            device,
            plan: env.plan,
            ledger: env.region,
            region: env.region.map(|l| Arc::clone(l.region())),
            token: crate::node::open_token(&env.plan.node_dir, env.uuid),
            own_schedule: AtomicU64::new(0),
            dc: DutyCycle::new(percent, DEFAULT_PERIOD),
            percent,
            backlogged: false,
            arm: false,
            other_freed: 0,
            scratch: Vec::with_capacity(vgpu_policy::slots::SLOTS + 1),
            kernel_time_noted: 0,
            costing: Costing::default(),
            seen: Vec::with_capacity(8),
        }
    }

    /// The container's schedule: in the region, or this process's own without one.
    fn schedule(&self) -> &AtomicU64 {
        self.ledger
            .and_then(|l| l.sm_next_ns(self.device))
            .unwrap_or(&self.own_schedule)
    }

    /// The node token while it governs this window (not at 100 %).
    fn token_for(&self, free: bool) -> Option<&vgpu_region::node::NodeToken> {
        self.token.as_ref().filter(|_| !free)
    }

    /// Whether HAMi's monitor blocks this container now (a higher-priority container is
    /// active on the GPU): no window opens while it does.
    fn hami_blocked(&self) -> bool {
        self.region.as_ref().is_some_and(|r| r.launch_blocked())
    }

    /// Whether the container may run unthrottled now: `GPU_CORE_UTILIZATION_POLICY=default`
    /// and HAMi's monitor says it is alone on its GPU (`utilization_switch` 0).
    fn hami_alone(&self) -> bool {
        self.plan.core_policy == CorePolicy::Default
            && self
                .region
                .as_ref()
                .is_some_and(|r| r.utilization_switch() == 0)
    }

    /// HAMi's launch marks, once per window that had launches: `recent_kernel`, and
    /// `last_kernel_time` at most once per `RECORD_KERNEL_INTERVAL` (the plan's
    /// `record_kernel_interval`; 0: at every window).
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
            self.follow_limit();
            if self.hami_blocked() {
                self.gate.open.store(CLOSED, Ordering::Release);
                std::thread::sleep(BLOCKED_POLL);
                continue;
            }
            // At 100 % a measuring gate still runs windows (to measure GPU time) but never
            // waits for a schedule or the node token; a plain one just stays open.
            let free = self.percent >= 100;
            self.dc
                .set_period(if free { MEASURE_PERIOD } else { DEFAULT_PERIOD });
            if free && !self.gate.measuring {
                self.stay_open();
                continue;
            }
            // Under its share and alone: open the next window before the next launch, so that
            // launch passes at once (a light service's request waits for nobody).
            let armed = !free && std::mem::take(&mut self.arm) && {
                let now = now_ns();
                share::arm(self.backlogged, self.contended(now))
            };
            let demand = if armed {
                now_ns()
            } else {
                match self.wait_for_demand() {
                    Some(d) => d,
                    None => continue,
                }
            };
            if self.hami_blocked() {
                // Keep the demand for when the block ends.
                let _ = self.gate.demand.compare_exchange(
                    0,
                    demand,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
                continue;
            }
            let due = if free {
                demand
            } else {
                match self.take_turn(demand, armed) {
                    Some(due) => due,
                    None => continue,
                }
            };
            let mut w = self.open_window(free, due);
            w.armed = armed;
            if !self.wait_first_launch(&mut w) {
                continue;
            }
            self.run_window(&mut w);
            self.drain(&mut w);
            self.settle(&mut w);
        }
    }

    /// Phase 1: the live limit. `vgpu limit --sm` changes it for the whole container at once;
    /// the plan applies the policy to the live value as to the environment's.
    fn follow_limit(&mut self) {
        if let Some(l) = self.ledger {
            let live = SmShare::percent_or_full(self.plan.share(l.sm_limit(self.device)));
            self.gate.percent.store(u32::from(live), Ordering::Release);
        }
        let p = self.gate.percent();
        if p != self.percent {
            self.percent = p;
            self.dc.set_percent(p);
        }
    }

    /// Phase 2 (unlimited, not measuring): leave the gate open and wait for a change; mark
    /// the launches for HAMi's monitor.
    fn stay_open(&mut self) {
        let g = self.gate;
        g.open_unbounded();
        let before = g.launches.load(Ordering::Acquire);
        let s = g.signal.load(Ordering::Acquire);
        let wait = if self.region.is_some() {
            BLOCKED_POLL
        } else {
            Duration::from_millis(200)
        };
        futex_wait(&g.signal, s, wait);
        let after = g.launches.load(Ordering::Acquire);
        self.mark_launches(after.wrapping_sub(before));
    }

    /// Phase 3: wait for demand, a launch that found the gate closed; returns its time
    /// (`None`: the limit changed, or HAMi's monitor blocks the container: look again).
    fn wait_for_demand(&self) -> Option<u64> {
        let g = self.gate;
        loop {
            let s = g.signal.load(Ordering::Acquire);
            let d = g.demand.swap(0, Ordering::AcqRel);
            if d != 0 {
                return Some(d);
            }
            if g.percent() != self.percent {
                return None;
            }
            let wait = if self.region.is_some() {
                if self.hami_blocked() {
                    return None;
                }
                Duration::from_millis(50)
            } else {
                Duration::from_millis(200)
            };
            futex_wait(&g.signal, s, wait);
        }
    }

    /// Phase 4: the turn (A2, A3). Announces the key (the due time) in the node file, sleeps
    /// until the container's schedule, then takes the node token when this process is the
    /// eligible waiter with the smallest key (or the grace has run out), re-checking the
    /// schedule after (another process of the container may have run meanwhile and moved it);
    /// never sleeps holding the token. Returns the due time; `None` if the limit changed, or
    /// if an `armed` turn (no launch waiting yet) finds another process waiting.
    fn take_turn(&mut self, demand: u64, armed: bool) -> Option<u64> {
        // Whether a take was refused (another process holds the token, or is first in line):
        // an armed turn then gives up, as it does when another process waits.
        let mut refused = false;
        let due = loop {
            if self.gate.percent() != self.percent || armed && (refused || self.contended(now_ns()))
            {
                if let Some(t) = self.token.as_ref() {
                    t.withdraw();
                }
                // A launch's demand still stands (an armed turn had none: a launch that came
                // meanwhile recorded its own).
                if !armed {
                    let _ = self.gate.demand.compare_exchange(
                        0,
                        demand,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    );
                }
                return None;
            }
            let next = self.schedule().load(Ordering::Acquire);
            let key = share::due(next, demand);
            // An armed turn has no launch waiting: it is never fresh (it preempts nobody).
            let fresh = !armed && !self.backlogged && share::is_fresh(next, demand);
            let now = now_ns();
            if let Some(t) = self.token.as_ref() {
                t.announce(key, fresh, now);
            }
            if now < next {
                sleep_precise(Duration::from_nanos(next - now).min(WAIT_SLICE));
                continue;
            }
            let Some(t) = self.token.as_ref() else {
                break key;
            };
            let g = t.generation();
            if t.try_take(now_ns(), &mut self.scratch) {
                if now_ns() < self.schedule().load(Ordering::Acquire) {
                    t.release();
                    continue;
                }
                break key;
            }
            refused = true;
            let now = now_ns();
            let retry = t
                .retry_at(now, &mut self.scratch)
                .clamp(now + 50_000, now + share::ns(WAIT_SLICE));
            t.wait(g, Duration::from_nanos(retry - now));
        };
        if let Some(t) = self.token.as_ref() {
            let last = t.last_holder();
            if last != 0 && last != t.id() {
                self.other_freed = t.freed_at().max(1);
            }
        }
        Some(due)
    }

    /// Whether another process waits for the token now (or lately ran).
    fn contended(&mut self, now: u64) -> bool {
        let Some(t) = self.token.as_ref() else {
            return false;
        };
        t.waiters_into(&mut self.scratch);
        share::contended(&self.scratch, t.id(), now, self.other_freed)
    }

    /// Phase 5 (after phase 4): open a window with the duty cycle's launch budget, capped and
    /// paced when contended (B).
    fn open_window(&mut self, free: bool, due: u64) -> Window {
        let g = self.gate;
        let now = now_ns();
        let paced = !free && self.contended(now);
        let plan = if free {
            self.dc.plan()
        } else {
            self.dc.plan_contended(paced)
        };
        g.hard.store(plan.launches, Ordering::Release);
        let mut pace = Pace::new(now);
        self.costing.open();
        g.keys.open();
        let number = g.marks.open();
        g.budget.store(
            if paced {
                plan.launches.min(
                    self.dc
                        .pace_costed(&mut pace, &mut self.costing, now, 0, []),
                )
            } else {
                plan.launches
            },
            Ordering::Release,
        );
        g.first_ns.store(0, Ordering::Release);
        g.launches.store(0, Ordering::Release);
        g.quiet_at.store(0, Ordering::Release);
        g.pace_held_at.store(0, Ordering::Release);
        // This window serves the launches waiting now: a demand recorded while the turn was
        // taken (a launcher that timed out and looked again) is not a new one.
        g.demand.store(0, Ordering::Release);
        g.open.store(OPEN, Ordering::Release);
        futex_wake(&g.open);
        g.pace.fetch_add(1, Ordering::AcqRel);
        futex_wake(&g.pace);
        Window {
            plan,
            free,
            paced,
            due,
            opened: now,
            first: 0,
            closed: 0,
            drained: 0,
            close: Close::Deadline,
            holding: self.token.is_some() && !free,
            armed: false,
            pace,
            pace_queued: None,
            number,
            priced: 0,
            last_mark: None,
            marks: 0,
        }
    }

    /// A paced window's look: prices the launches admitted since the last (`admitted` in all),
    /// takes in the marks the GPU has reached, and returns the paced budget
    /// (`DutyCycle::pace_costed`).
    fn pace_look(&mut self, w: &mut Window, now: u64, admitted: u64) -> u64 {
        let g = self.gate;
        let costing = &mut self.costing;
        g.keys.copy(w.priced, admitted, |k| costing.admitted(k));
        w.priced = w.priced.max(admitted);
        self.seen.clear();
        g.marks
            .collect(w.number, now, &mut w.last_mark, &mut self.seen);
        w.marks += self.seen.len() as u64;
        if g.keys.mixed() {
            // Launches on several streams: a mark shows one stream's queue done, not the others'.
            self.seen.clear();
        }
        self.dc.pace_costed(
            &mut w.pace,
            &mut self.costing,
            now,
            admitted,
            self.seen.drain(..),
        )
    }

    /// Phase 6: the window's first launch. A program that stays idle for a whole submission
    /// time gives the GPU back and costs nothing (returns false: the window is closed); so
    /// does one idle for [`share::IDLE_GAP`] while another process waits. An armed window
    /// waits up to [`share::ARMED_HOLD`] instead, keeps its hold on the token fresh, and gives
    /// it back as soon as another process waits, the limit changes or HAMi's monitor blocks the
    /// container; its due time becomes its first launch (idle time is not banked).
    fn wait_first_launch(&mut self, w: &mut Window) -> bool {
        let g = self.gate;
        let idle_until = if w.armed {
            w.opened + share::ns(share::ARMED_HOLD)
        } else {
            w.opened + nanos(w.plan.submit.max(Duration::from_millis(5)))
        };
        w.first = loop {
            let s = g.signal.load(Ordering::Acquire);
            let f = g.first_ns.load(Ordering::Acquire);
            let now = now_ns();
            if f != 0 || now >= idle_until {
                break f;
            }
            if w.armed && (g.percent() != self.percent || self.hami_blocked()) {
                break 0;
            }
            if !w.free
                && (w.armed || now >= w.opened + share::ns(share::IDLE_GAP))
                && let Some(t) = self.token.as_ref()
            {
                if w.armed {
                    t.heartbeat();
                }
                t.waiters_into(&mut self.scratch);
                if share::contended(&self.scratch, t.id(), now, 0) {
                    break 0;
                }
            }
            let wake = if w.free {
                idle_until
            } else if w.armed {
                idle_until.min(now + share::ns(share::ARMED_POLL))
            } else {
                idle_until.min(now + share::ns(share::POLL).max(1_000_000))
            };
            futex_wait(&g.signal, s, Duration::from_nanos(wake.saturating_sub(now)));
        };
        if w.first == 0 {
            crate::log::debug(format_args!(
                "sm window at {:.3}: opened {:.3} ms after due{}, no launch: given back",
                (w.opened % 100_000_000_000) as f64 / 1e6,
                w.opened.saturating_sub(w.due) as f64 / 1e6,
                if w.armed { " (armed)" } else { "" },
            ));
            g.open.store(CLOSED, Ordering::Release);
            // A launch that raced the close counted itself: the window is empty all the same.
            if g.first_ns.swap(0, Ordering::AcqRel) != 0 {
                g.demand
                    .compare_exchange(0, now_ns(), Ordering::AcqRel, Ordering::Acquire)
                    .ok();
            }
            if let Some(t) = self.token_for(w.free) {
                t.release();
            }
            self.backlogged = false;
            return false;
        }
        if w.armed {
            w.due = w.due.max(w.first);
        }
        true
    }

    /// Phase 7: let launches through until a close reason (`share::close_reason`): the program
    /// showed its queue empty and stayed quiet, a fresh waiter is owed the GPU, the budget is
    /// spent, the submission time is over, or the program is idle. At 100 % (measuring) only
    /// the budget and the submission time end a window.
    fn run_window(&mut self, w: &mut Window) {
        let g = self.gate;
        let deadline = w.first + nanos(w.plan.submit);
        let mut seen = u64::MAX;
        // The last look that saw the launch counter move (`share::pace_limited` reads it);
        // `last_launch` moves then too, and also when a pace raise lets a held launch go on
        // (the program is not idle).
        let mut last_admitted = w.first;
        let mut last_launch = w.first;
        let me = self.token.as_ref().map_or(0, |t| t.id());
        loop {
            let s = g.signal.load(Ordering::Acquire);
            let now = now_ns();
            let n = g.launches.load(Ordering::Acquire);
            if n != seen {
                seen = n;
                last_launch = now;
                last_admitted = now;
            }
            let budget_spent = n > w.plan.launches;
            if w.free {
                if now >= deadline || budget_spent {
                    w.close = if budget_spent {
                        Close::Budget
                    } else {
                        Close::Deadline
                    };
                    return;
                }
                futex_wait(&g.signal, s, Duration::from_nanos(deadline - now));
                continue;
            }
            let qn = g.quiet_launches.load(Ordering::Acquire);
            let qa = g.quiet_at.load(Ordering::Acquire);
            let quiet =
                (qa >= w.first && qn == n && g.quiet_launches.load(Ordering::Acquire) == qn)
                    .then_some(qa);
            let fresh = match self.token.as_ref() {
                Some(t) => {
                    t.heartbeat();
                    t.waiters_into(&mut self.scratch);
                    share::fresh_waiter(&self.scratch, me, now)
                }
                None => false,
            };
            let state = WindowState {
                first: w.first,
                deadline,
                budget_spent,
                last_launch,
                quiet,
                syncing: g.syncing.load(Ordering::Acquire) > 0,
                fresh_waiter: fresh,
            };
            let held_at = g.pace_held_at.load(Ordering::Acquire);
            // What was admitted (not the attempts past the pace, which took themselves back).
            let admitted = n.min(g.budget.load(Ordering::Acquire));
            if let Some(r) = share::close_reason(&state, now) {
                w.close = r;
                if w.paced {
                    self.pace_look(w, now, admitted);
                    let depth = self.costing.depth();
                    w.pace_queued = self.dc.queued_at_close(
                        &mut w.pace,
                        held_at,
                        last_admitted,
                        now,
                        admitted,
                        depth,
                    );
                }
                return;
            }
            if w.paced {
                let paced = self.pace_look(w, now, admitted).min(w.plan.launches);
                if paced > g.budget.load(Ordering::Acquire) {
                    g.budget.store(paced, Ordering::Release);
                    g.pace.fetch_add(1, Ordering::AcqRel);
                    futex_wake(&g.pace);
                    if held_at != 0 && held_at >= last_admitted {
                        // A launch held by the pace goes on now: the program is not idle.
                        last_launch = now;
                    }
                }
            }
            let wake = share::next_check(&state).min(now + share::ns(share::poll(w.paced)));
            futex_wait(
                &g.signal,
                s,
                Duration::from_nanos(wake.saturating_sub(now).max(1)),
            );
        }
    }

    /// Phase 8: close the gate and drain the device. A drain must not fall inside a stream
    /// capture (it would invalidate it): while one runs, the window stays open, with no launch
    /// bound, until it ends. A capture that lasts gives the node token back after
    /// CAPTURE_HOLD, so that other containers are not shut out by it (they then share the GPU
    /// by time-slicing until it ends).
    fn drain(&self, w: &mut Window) {
        let g = self.gate;
        if !EXCLUSION.try_begin_drain() {
            g.hard.store(u64::MAX, Ordering::Release);
            g.budget.store(u64::MAX, Ordering::Release);
            g.pace.fetch_add(1, Ordering::AcqRel);
            futex_wake(&g.pace);
            let since = now_ns();
            while !EXCLUSION.try_begin_drain() {
                let c = EXCLUSION.captures.load(Ordering::Acquire);
                if c != 0 {
                    futex_wait(&EXCLUSION.captures, c, Duration::from_millis(5));
                }
                if let Some(t) = self.token.as_ref().filter(|_| w.holding) {
                    if now_ns().saturating_sub(since) > nanos(CAPTURE_HOLD) {
                        t.release();
                        w.holding = false;
                    } else {
                        t.heartbeat();
                    }
                }
            }
            // The window ran on: charged to its drain.
            w.close = Close::Deadline;
        }
        g.open.store(CLOSED, Ordering::Release);
        // Launches waiting for the pace see the gate closed and wait for the next window.
        g.pace.fetch_add(1, Ordering::AcqRel);
        futex_wake(&g.pace);
        w.closed = now_ns();
        REAL.synchronize();
        end_drain();
        w.drained = now_ns();
    }

    /// Phase 9: report the window, move the container's schedule forward by what the window
    /// was worth (A1), **then** give the token back (A4).
    fn settle(&mut self, w: &mut Window) {
        let g = self.gate;
        let launches = g.launches.load(Ordering::Acquire).min(w.plan.launches);
        let busy = if w.free {
            Duration::from_nanos(w.drained.saturating_sub(w.first))
        } else {
            share::charged_busy(w.first, w.closed, w.drained, w.close)
        };
        if let Some(l) = self.ledger {
            g.report(l, self.device, |_| nanos(busy), launches, !w.free);
        }
        self.mark_launches(launches);
        let report = WindowReport {
            busy,
            launches,
            drain: Duration::from_nanos(w.drained - w.closed),
        };
        let credit = if w.paced {
            // The drain reached every mark: what the window's last segments cost.
            let admitted = launches;
            let now = now_ns();
            self.pace_look(w, now, admitted);
            self.dc.finish_costed(report, &self.costing, w.pace_queued)
        } else {
            self.dc.finish(report)
        };
        if !w.free {
            let now = now_ns();
            let others = self
                .token
                .as_ref()
                .is_some_and(|t| t.others_waiting(now, &mut self.scratch) > 0);
            // Work-conserving with nobody waiting, or HAMi's monitor saying the container is
            // alone under the `default` policy: run on, owing nothing; the next window
            // boundary gives the GPU back when asked.
            let owe = (!self.plan.work_conserving || others) && !self.hami_alone();
            if owe {
                let (due, first) = (w.due, w.first);
                let _ = self
                    .schedule()
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |next| {
                        Some(share::advance(next, due, first, credit))
                    });
            }
        }
        let was_backlogged = self.backlogged;
        crate::log::debug(format_args!(
            "sm window at {:.3}: opened {:.3} ms after due (backlogged {}, paced {}), wait {:.3} ms, busy {:.3} ms, {launches} launches (budget {}), {:?}, drain {:.3} ms (paced: {:.3} ms estimated, depth {:.2} ms, {} marks, {} kernels priced), worth {:.3} ms, next in {:.3} ms, {:.1} µs a launch",
            (w.opened % 100_000_000_000) as f64 / 1e6,
            w.opened.saturating_sub(w.due) as f64 / 1e6,
            was_backlogged,
            w.paced,
            w.first.saturating_sub(w.opened) as f64 / 1e6,
            busy.as_secs_f64() * 1e3,
            w.plan.launches,
            w.close,
            (w.drained - w.closed) as f64 / 1e6,
            w.pace_queued.map_or(f64::NAN, |q| q.as_secs_f64() * 1e3),
            self.costing.depth().as_secs_f64() * 1e3,
            w.marks,
            self.costing.costs().len(),
            credit.as_secs_f64() * 1e3,
            self.schedule()
                .load(Ordering::Acquire)
                .saturating_sub(now_ns()) as f64
                / 1e6,
            self.dc
                .per_launch()
                .map_or(f64::NAN, |p| p.as_secs_f64() * 1e6),
        ));
        if let Some(t) = self.token.as_ref().filter(|_| w.holding) {
            t.release();
        }
        // A launch that arrived during the close and the drain is already waiting: the program
        // was not done.
        let waiting = g.demand.load(Ordering::Acquire) != 0;
        self.backlogged = !w.free && share::backlogged_at_settle(w.close, waiting);
        self.arm = !w.free && !self.backlogged;
        if self.backlogged {
            // Launches that waited meanwhile count from the close at the latest (A1).
            let closed = w.closed.max(1);
            let _ = g
                .demand
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| {
                    (d != 0).then(|| d.min(closed))
                });
        }
    }
}

/// This process's stream captures and drains, which must not overlap (counted only while a
/// gate exists): see [`vgpu_policy::exclusion`].
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

/// In a forked child: no drain runs there, and no capture of the parent's threads continues.
pub fn after_fork() {
    EXCLUSION.reset();
}

fn end_drain() {
    EXCLUSION.end_drain();
    futex_wake(&EXCLUSION.draining);
}

/// `d` in nanoseconds (saturating: about 584 years).
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Sleeps `d`, finishing the last stretch with short sleeps so a window does not overshoot by
/// the scheduler's granularity.
fn sleep_precise(d: Duration) {
    let end = now_ns() + nanos(d);
    loop {
        let now = now_ns();
        if now >= end {
            return;
        }
        let left = end - now;
        std::thread::sleep(Duration::from_nanos(if left > 2_000_000 {
            left - 1_000_000
        } else {
            left.min(200_000)
        }));
    }
}
