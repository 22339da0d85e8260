//! The compute limiter: a gate per limited device, opened and closed by a controller thread
//! that runs [`vgpu_policy::compute::DutyCycle`].
//!
//! Launch path (every `cuLaunchKernel*`, `cuLaunchCooperativeKernel*`, `cuGraphLaunch*`): one
//! atomic load of the gate and one `fetch_add` on the window's launch counter; no syscall, no
//! lock, no allocation. Only when the window is closed or its launch budget is spent does the
//! launching thread sleep (futex) until the next window.
//!
//! Controller (one thread per limited device, started at the first launch): opens a window,
//! waits for its first launch, lets launches through for the planned submission time (or until
//! the budget is spent), closes the gate, drains the device (`cuCtxSynchronize` in a context of
//! that device), and moves the container's schedule (in its region) forward by the window's busy
//! time divided by the share: no process of the container opens a window before that time.
use crate::driver::{Driver, REAL};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;
use vgpu_policy::compute::{DEFAULT_PERIOD, DutyCycle, MEASURE_PERIOD, WindowPlan, WindowReport};
use vgpu_policy::exclusion::Exclusion;
use vgpu_policy::plan::{GatePlan, Plan, SmShare};
use vgpu_region::RegionLedger;
use vgpu_region::sys::{futex_wait, futex_wake, monotonic_ns as now_ns};
use vgpu_sys::cuda::*;

const OPEN: u32 = 1;
const CLOSED: u32 = 0;
/// How long a window kept open by a stream capture holds the node token before it gives it
/// back to the node's other containers.
const CAPTURE_HOLD: Duration = Duration::from_millis(100);

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

/// One limited device's gate, shared by the launching threads and the controller.
pub struct Gate {
    percent: AtomicU32,
    open: AtomicU32,
    /// Launch attempts in the current window.
    launches: AtomicU64,
    budget: AtomicU64,
    /// When the window's first launch happened (0: none yet).
    first_ns: AtomicU64,
    /// Bumped to wake the controller (first launch, budget spent, limit changed).
    signal: AtomicU32,
    /// Set by a launch that found the gate closed: the controller should open a window.
    demand: AtomicU32,
    /// A context of this device, for draining.
    ctx: AtomicPtr<core::ffi::c_void>,
    started: AtomicBool,
    /// Measure GPU time even while the limit is 100 (`VGPU_MEASURE_GPU_TIME`).
    measuring: bool,
    /// Time launching threads spent waiting for a window since the controller last read it.
    throttled_ns: AtomicU64,
}

impl Gate {
    /// A gate as the plan starts it: at its share, or at 100 % when only measuring.
    pub fn new(plan: GatePlan) -> Self {
        Gate {
            percent: AtomicU32::new(u32::from(SmShare::percent_or_full(plan.share))),
            open: AtomicU32::new(CLOSED),
            demand: AtomicU32::new(0),
            launches: AtomicU64::new(0),
            budget: AtomicU64::new(u64::MAX),
            first_ns: AtomicU64::new(0),
            signal: AtomicU32::new(0),
            ctx: AtomicPtr::new(core::ptr::null_mut()),
            started: AtomicBool::new(false),
            measuring: plan.measuring,
            throttled_ns: AtomicU64::new(0),
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

    /// Admits one launch on this device: returns at once while the window is open and has
    /// budget left, else sleeps until a window admits it.
    #[inline]
    pub fn admit(&'static self, ordinal: CUdevice, stream: CUstream, env: impl FnOnce() -> Env) {
        if !self.started.load(Ordering::Acquire) {
            self.start(ordinal, env());
            if !self.started.load(Ordering::Acquire) {
                // No current context (the driver will refuse this launch itself): nothing to
                // govern yet, and never wait for a controller that does not exist.
                return;
            }
        }
        loop {
            if self.open.load(Ordering::Acquire) == OPEN {
                let n = self.launches.fetch_add(1, Ordering::AcqRel);
                if n == 0 {
                    self.first_ns.store(now_ns(), Ordering::Release);
                    self.poke();
                }
                if n < self.budget.load(Ordering::Acquire) {
                    return;
                }
                // The window's budget is spent: have it closed now rather than at its time.
                self.poke();
            } else {
                self.demand.store(1, Ordering::Release);
                self.poke();
            }
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
            self.budget.store(u64::MAX, Ordering::Release);
            self.open.store(OPEN, Ordering::Release);
        }
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
    }

    /// At process exit: the window in progress will never be drained and reported by the
    /// controller, so it is reported as it stands (busy from its first launch until now): a
    /// short program's last window is not lost. Whoever takes the window's start first (this
    /// or the controller) reports it, so it is never counted twice.
    pub fn report_at_exit(&self, ledger: Option<&RegionLedger>, slot: usize) {
        let Some(l) = ledger else {
            return;
        };
        let launches = self
            .launches
            .load(Ordering::Acquire)
            .min(self.budget.load(Ordering::Acquire));
        let limited = self.percent.load(Ordering::Acquire) < 100;
        self.report(
            l,
            slot,
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
        slot: usize,
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
            slot,
            busy(first),
            if limited { waited } else { 0 },
            launches,
        );
    }

    /// Waits for the container's schedule, then takes the node token, re-checking the schedule
    /// after it (another process of the container may have run meanwhile and moved it); never
    /// sleeps holding the token.
    fn take_turn(&self, schedule: &AtomicU64, token: Option<&vgpu_region::node::NodeToken>) {
        loop {
            let next = schedule.load(Ordering::Acquire);
            let now = now_ns();
            if now < next {
                sleep_precise(Duration::from_nanos(next - now));
                continue;
            }
            if let Some(t) = token {
                t.acquire();
                if now_ns() < schedule.load(Ordering::Acquire) {
                    t.release();
                    continue;
                }
            }
            return;
        }
    }

    fn control(&'static self, env: Env, slot: usize) {
        REAL.set_current(self.ctx.load(Ordering::Acquire));
        Controller::new(self, env, slot).run()
    }
}

/// A device's compute controller: the thread that opens and closes its gate. Each window
/// goes through the phases below, one method each: follow the live limit, wait for demand,
/// take the GPU (schedule and node token), open the window, wait for its first launch, run it
/// for its submission time, drain it (outside any stream capture), and settle it (report and
/// advance the schedule). At 100 % a plain gate skips all of them and stays open.
struct Controller {
    gate: &'static Gate,
    slot: usize,
    plan: &'static Plan,
    /// The container's counters and live limit, in its shared region.
    ledger: Option<&'static RegionLedger>,
    /// The node token of this GPU (`None`: no coordination with other containers).
    token: Option<vgpu_region::node::NodeToken>,
    /// The container's schedule without a region: this process's own.
    own_schedule: AtomicU64,
    dc: DutyCycle,
    percent: u8,
}

/// One window, from its opening to its drain.
struct Window {
    plan: WindowPlan,
    /// At 100 % (measuring): no schedule, no node token.
    free: bool,
    opened: u64,
    first: u64,
    closed: u64,
    drained: u64,
    /// Whether the node token is still held.
    holding: bool,
}

impl Controller {
    fn new(gate: &'static Gate, env: Env, slot: usize) -> Self {
        let percent = gate.percent();
        Controller {
            gate,
            slot,
            plan: env.plan,
            ledger: env.region,
            token: crate::node::open_token(&env.plan.node_dir, env.uuid),
            own_schedule: AtomicU64::new(0),
            dc: DutyCycle::new(percent, DEFAULT_PERIOD),
            percent,
        }
    }

    /// The container's schedule: in the region, or this process's own without one.
    fn schedule(&self) -> &AtomicU64 {
        self.ledger
            .and_then(|l| l.sm_next_ns(self.slot))
            .unwrap_or(&self.own_schedule)
    }

    /// The node token while it governs this window (not at 100 %).
    fn token_for(&self, free: bool) -> Option<&vgpu_region::node::NodeToken> {
        self.token.as_ref().filter(|_| !free)
    }

    fn run(mut self) -> ! {
        loop {
            self.follow_limit();
            // At 100 % a measuring gate still runs windows (to measure GPU time) but never
            // waits for a schedule or the node token; a plain one just stays open.
            let free = self.percent >= 100;
            self.dc
                .set_period(if free { MEASURE_PERIOD } else { DEFAULT_PERIOD });
            if free && !self.gate.measuring {
                self.stay_open();
                continue;
            }
            self.wait_for_demand();
            if !free {
                self.gate.take_turn(self.schedule(), self.token.as_ref());
            }
            let mut w = self.open_window(free);
            if !self.wait_first_launch(&mut w) {
                continue;
            }
            self.run_window(&w);
            self.drain(&mut w);
            self.settle(&w);
        }
    }

    /// Phase 1: the live limit. `vgpu limit --sm` changes it for the whole container at once;
    /// the plan applies the policy to the live value as to the environment's.
    fn follow_limit(&mut self) {
        if let Some(l) = self.ledger {
            let live = SmShare::percent_or_full(self.plan.share(l.sm_limit(self.slot)));
            self.gate.percent.store(u32::from(live), Ordering::Release);
        }
        let p = self.gate.percent();
        if p != self.percent {
            self.percent = p;
            self.dc.set_percent(p);
        }
    }

    /// Phase 2 (unlimited, not measuring): leave the gate open and wait for a change.
    fn stay_open(&self) {
        let g = self.gate;
        g.budget.store(u64::MAX, Ordering::Release);
        g.open.store(OPEN, Ordering::Release);
        futex_wake(&g.open);
        let s = g.signal.load(Ordering::Acquire);
        futex_wait(&g.signal, s, Duration::from_millis(200));
    }

    /// Phase 3: wait for demand, a launch that found the gate closed (or a limit change).
    fn wait_for_demand(&self) {
        let g = self.gate;
        loop {
            let s = g.signal.load(Ordering::Acquire);
            if g.demand.swap(0, Ordering::AcqRel) != 0 || g.percent() != self.percent {
                return;
            }
            futex_wait(&g.signal, s, Duration::from_millis(200));
        }
    }

    /// Phase 5 (after phase 4, [`Gate::take_turn`]): open a window with the duty cycle's
    /// launch budget.
    fn open_window(&self, free: bool) -> Window {
        let g = self.gate;
        let plan = self.dc.plan();
        g.budget.store(plan.launches, Ordering::Release);
        g.first_ns.store(0, Ordering::Release);
        g.launches.store(0, Ordering::Release);
        g.open.store(OPEN, Ordering::Release);
        futex_wake(&g.open);
        Window {
            plan,
            free,
            opened: now_ns(),
            first: 0,
            closed: 0,
            drained: 0,
            holding: self.token.is_some() && !free,
        }
    }

    /// Phase 6: the window's first launch. A program that stays idle for a whole submission
    /// time gives the GPU back and costs nothing (returns false: the window is closed).
    fn wait_first_launch(&self, w: &mut Window) -> bool {
        let g = self.gate;
        let idle_until = now_ns() + nanos(w.plan.submit.max(Duration::from_millis(5)));
        w.first = loop {
            let s = g.signal.load(Ordering::Acquire);
            let f = g.first_ns.load(Ordering::Acquire);
            let now = now_ns();
            if f != 0 || now >= idle_until {
                break f;
            }
            futex_wait(&g.signal, s, Duration::from_nanos(idle_until - now));
        };
        if w.first == 0 {
            g.open.store(CLOSED, Ordering::Release);
            if let Some(t) = self.token_for(w.free) {
                t.release();
            }
            return false;
        }
        true
    }

    /// Phase 7: let launches through for the submission time, or until the budget is spent.
    fn run_window(&self, w: &Window) {
        let g = self.gate;
        let deadline = w.first + nanos(w.plan.submit);
        loop {
            let s = g.signal.load(Ordering::Acquire);
            let now = now_ns();
            if now >= deadline || g.launches.load(Ordering::Acquire) > w.plan.launches {
                return;
            }
            if let Some(t) = self.token_for(w.free) {
                t.heartbeat();
            }
            futex_wait(&g.signal, s, Duration::from_nanos(deadline - now));
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
            g.budget.store(u64::MAX, Ordering::Release);
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
        }
        g.open.store(CLOSED, Ordering::Release);
        w.closed = now_ns();
        REAL.synchronize();
        end_drain();
        w.drained = now_ns();
    }

    /// Phase 9: give the token back, report the window, and move the container's schedule
    /// forward by what the window was worth.
    fn settle(&mut self, w: &Window) {
        let g = self.gate;
        let others_waiting = self.token.as_ref().is_some_and(|t| t.waiters() > 0);
        if let Some(t) = self.token.as_ref().filter(|_| w.holding) {
            t.release();
        }
        let launches = g.launches.load(Ordering::Acquire).min(w.plan.launches);
        let busy = w.drained.saturating_sub(w.first);
        if let Some(l) = self.ledger {
            g.report(l, self.slot, |_| busy, launches, !w.free);
        }
        let credit = self.dc.finish(WindowReport {
            busy: Duration::from_nanos(busy),
            launches,
            drain: Duration::from_nanos(w.drained - w.closed),
        });
        crate::log::debug(format_args!(
            "sm window: wait {:.3} ms, busy {:.3} ms, {launches} launches (budget {}), drain {:.3} ms, worth {:.3} ms",
            w.first.saturating_sub(w.opened) as f64 / 1e6,
            busy as f64 / 1e6,
            w.plan.launches,
            (w.drained - w.closed) as f64 / 1e6,
            credit.as_secs_f64() * 1e3
        ));
        if !w.free && (!self.plan.work_conserving || others_waiting) {
            // The container may open its next window once the GPU time it just had is worth
            // its share of wall time. (Work-conserving with nobody waiting: run on, owing
            // nothing; the next window boundary gives the GPU back when asked.)
            let first = w.first;
            let _ = self
                .schedule()
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |next| {
                    Some(vgpu_policy::compute::schedule(next, first, credit))
                });
        }
        // Launches that arrived while closed are waiting: the next window is for them.
        g.demand.store(1, Ordering::Release);
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
