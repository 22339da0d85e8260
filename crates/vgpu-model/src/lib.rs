//! A deterministic discrete-event model of the compute limiter on a shared GPU.
//!
//! Containers × processes run workloads (kernel loops with any sync pattern, open-loop request
//! services) on one modelled GPU, on a virtual clock (nanoseconds; no real time, no threads), so
//! a sweep that takes hours on a GPU runs in milliseconds and gives the same answer every time.
//!
//! What is modelled:
//! * **the GPU**: one context at a time; each process's kernels run in FIFO order; when several
//!   processes have work it time-slices between them ([`Params::timeslice`], preempting
//!   mid-kernel), and every change of context costs [`Params::switch`] of GPU time (landing in
//!   the incoming process's time). A launch reaches the GPU [`Params::launch_latency`] after the
//!   host issued it, and a process's queue holds at most [`Params::queue_max`] kernels.
//! * **each process's host thread**: launches (costing [`Params::launch_cost`]), host work,
//!   synchronisations (returning [`Params::sync`] after its work ended), waits for the next
//!   request; blocked at the gate when the window is closed or its budget is spent.
//! * **each process's controller**, a state machine that follows the preload's controller
//!   (`crates/vgpu-preload/src/compute.rs`) step by step: wait for demand, the container's
//!   schedule, the node token, the window (first launch, submission time, budget), the drain,
//!   the report. Waking a sleeping thread costs [`Params::wake`]; sleeping until a time wakes
//!   [`Params::jitter`] late.
//! * **the node token** of the GPU and each container's schedule.
//!
//! The decisions are not copies: the controller calls `vgpu_policy::compute` (the duty cycle,
//! `schedule`) and `vgpu_policy::share` (keys, winner, window ends, charged busy) — the functions
//! the preload calls. [`Policy::Old`] is the limiter as it was (first-come token, release before
//! the schedule moves, windows charged wall time); [`Policy::New`] is A1–A4, B and the quiet
//! window end (docs/COMPUTE.md); [`Policy::Plain`] runs without any limiter (hardware
//! time-slicing only).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;
use vgpu_policy::compute::{self, Costing, DEFAULT_PERIOD, DutyCycle, Pace, WindowReport};
use vgpu_policy::share::{self, Close, Waiter, WindowState};

/// A microsecond in ns.
pub const US: u64 = 1_000;
/// A millisecond in ns.
pub const MS: u64 = 1_000_000;
/// A second in ns.
pub const S: u64 = 1_000_000_000;

/// Which limiter runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// No limiter: processes share the GPU by hardware time-slicing.
    Plain,
    /// The limiter before issue 11: first-come token, release then move the schedule, windows
    /// charged their wall time.
    Old,
    /// A1–A4 + B + quiet window ends + fresh waiters preempt (vgpu_policy::share).
    New,
}

/// Timing constants of the host, the preload and the GPU.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// From a futex wake to the woken thread running.
    pub wake: u64,
    /// Host time of one launch.
    pub launch_cost: u64,
    /// From a launch to the kernel being runnable on the GPU.
    pub launch_latency: u64,
    /// From a process's last kernel ending to its synchronisation returning.
    pub sync: u64,
    /// GPU time lost when the GPU changes context.
    pub switch: u64,
    /// The hardware time slice between contexts with work.
    pub timeslice: u64,
    /// GPU time a timing event (the pace's mark) costs before the next kernel of its queue
    /// starts: the H200's run 39, two containers of 10 µs kernels whose pace recorded ~125
    /// marks per 26 ms window, ran a launch in 10.06–10.19 µs of window time against 9.92–9.97
    /// with no marks (alone: 9.84–9.94), about 2–4 µs a mark. (`sm_bench`'s own events are
    /// created without timing.)
    pub event: u64,
    /// How late a timed sleep wakes.
    pub jitter: u64,
    /// Kernels a process may have queued before a launch blocks.
    pub queue_max: usize,
    /// A tail on wake-ups: one futex wake in `wake_tail.0` (pseudo-random, the same every run)
    /// takes `wake_tail.1` longer (a virtual machine's vCPU scheduling; 0: no tail).
    pub wake_tail: (u64, u64),
}

impl Default for Params {
    fn default() -> Self {
        Params {
            wake: 30 * US,
            launch_cost: 4 * US,
            launch_latency: 5 * US,
            sync: 5 * US,
            switch: 100 * US,
            timeslice: 2 * MS,
            event: 3 * US,
            jitter: 50 * US,
            queue_max: 1024,
            wake_tail: (0, 0),
        }
    }
}

/// What a process runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// Kernels of `kernel` ns, `host` ns of host work after each launch, a synchronisation after
    /// every `sync_every` launches (0: never; the queue bound then holds it back).
    Loop {
        /// GPU time of a kernel.
        kernel: u64,
        /// Launches between synchronisations (0: none).
        sync_every: u32,
        /// Host time after each launch.
        host: u64,
    },
    /// An asynchronous loop watched through events, as `sm_bench`'s async shapes and most
    /// pipelined frameworks do: kernels of `kernel` ns launched without synchronising (the queue
    /// bound holds the launcher back), an event recorded after every `mark_every`-th, and a
    /// second thread that waits on each event in turn. Each such event synchronisation returns
    /// successfully when its kernel ends, **while later kernels are still queued**, and the
    /// watcher is back inside the next one at once: the preload's hooks see a successful
    /// synchronisation (quiet) and a thread synchronising (busy).
    Ring {
        /// GPU time of a kernel.
        kernel: u64,
        /// Launches between events (1: after each).
        mark_every: u32,
        /// Host time after each launch (beside [`Params::launch_cost`]).
        host: u64,
    },
    /// A training step: `kernels` launches of `kernel` ns, every `long_every`-th (0: none) of
    /// `long` ns instead (a step's few matrix products among many short kernels), with `host`
    /// ns of host work after each, then the program waits for its GPU work: through a
    /// synchronisation the preload hooks (`seen`: PyTorch's `torch.cuda.synchronize()`, which
    /// the H200's run 31 showed seen), or without one (a synchronous copy, or an entry point it
    /// does not hook: nothing shows the queue empty and nothing counts as synchronising, and
    /// its windows end idle, 2 ms after a step's last launch).
    Steps {
        /// Launches per step.
        kernels: u32,
        /// GPU time of a kernel.
        kernel: u64,
        /// GPU time of every `long_every`-th kernel.
        long: u64,
        /// Which kernels are long (0: none).
        long_every: u32,
        /// Host time after each launch.
        host: u64,
        /// Whether the step's wait is a synchronisation the preload sees.
        seen: bool,
    },
    /// A recorded training step, launch by launch ([`Launch`]), then a wait for the GPU the
    /// preload sees or not (as in [`Workload::Steps`]).
    Trace {
        /// The step's launches, in order.
        launches: &'static [Launch],
        /// Whether the step's wait is a synchronisation the preload sees.
        seen: bool,
    },
    /// An open-loop service: a request every `period` from `offset`, each `kernels` kernels of
    /// `kernel` ns then a synchronisation; a request's latency runs from its due time to the
    /// synchronisation's return (a late request starts as soon as the previous one ends).
    Requests {
        /// Time between requests.
        period: u64,
        /// The first request's time.
        offset: u64,
        /// Kernels per request.
        kernels: u32,
        /// GPU time of each kernel.
        kernel: u64,
    },
}

/// One launch of a [`Workload::Trace`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    /// Host time before it (µs).
    pub host_us: u32,
    /// Its kernel's GPU time (µs).
    pub gpu_us: u32,
    /// Which kernel (function) it runs: launches of one key take about the same time.
    pub key: u32,
}

/// One process.
#[derive(Clone, Copy, Debug)]
pub struct Proc {
    /// Its container (index into [`Scenario::limits`]).
    pub container: usize,
    /// What it runs.
    pub workload: Workload,
    /// When it starts.
    pub start: u64,
}

/// A run of the model.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Each container's limit in percent (100: unlimited).
    pub limits: Vec<u8>,
    /// The processes.
    pub procs: Vec<Proc>,
    /// How long to run (virtual ns).
    pub duration: u64,
    /// Which limiter.
    pub policy: Policy,
    /// Timing constants.
    pub params: Params,
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Kernel ns each process executed (context switches excluded).
    pub work: Vec<u64>,
    /// The same, per second of virtual time.
    pub per_second: Vec<Vec<u64>>,
    /// Each process's request latencies (ns), for [`Workload::Requests`].
    pub latencies: Vec<Vec<u64>>,
    /// Synchronisations each process completed (iterations of a sync-every-N loop).
    pub syncs: Vec<u64>,
    /// How often the GPU changed context.
    pub switches: u64,
    /// Windows each process ran.
    pub windows: Vec<u64>,
}

impl Outcome {
    /// Kernel ns process `p` executed in seconds `from..to` of the run.
    pub fn work_between(&self, p: usize, from: usize, to: usize) -> u64 {
        self.per_second[p][from.min(self.per_second[p].len())..to.min(self.per_second[p].len())]
            .iter()
            .sum()
    }
}

/// The `q` quantile (0..=1, nearest rank) of `v`, in ns.
pub fn quantile(v: &[u64], q: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    let i = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1;
    s[i]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    /// A launch of a kernel of this many ns; `true`: an event is recorded after it; its key
    /// (which kernel).
    Launch(u64, bool, u64),
    Sync,
    /// A wait for the queue to empty that the preload does not see (`Workload::Steps`).
    Wait,
    Host(u64),
    Until(u64),
    /// A request due at this time ends here: record its latency.
    Done(u64),
}

struct Program {
    w: Workload,
    launched: u64,
    request: u64,
}

impl Program {
    /// The next few operations.
    fn refill(&mut self, out: &mut VecDeque<Op>) {
        match self.w {
            Workload::Loop {
                kernel,
                sync_every,
                host,
            } => {
                out.push_back(Op::Launch(kernel, false, 0));
                self.launched += 1;
                if sync_every > 0 && self.launched.is_multiple_of(u64::from(sync_every)) {
                    out.push_back(Op::Sync);
                }
                if host > 0 {
                    out.push_back(Op::Host(host));
                }
            }
            Workload::Steps {
                kernels,
                kernel,
                long,
                long_every,
                host,
                seen,
            } => {
                for i in 1..=kernels {
                    let k = if long_every > 0 && i.is_multiple_of(long_every) {
                        long
                    } else {
                        kernel
                    };
                    out.push_back(Op::Launch(k, false, u64::from(k == long)));
                    if host > 0 {
                        out.push_back(Op::Host(host));
                    }
                }
                self.launched += u64::from(kernels);
                out.push_back(if seen { Op::Sync } else { Op::Wait });
            }
            Workload::Trace { launches, seen } => {
                for l in launches {
                    if l.host_us > 0 {
                        out.push_back(Op::Host(u64::from(l.host_us) * US));
                    }
                    out.push_back(Op::Launch(
                        u64::from(l.gpu_us) * US,
                        false,
                        u64::from(l.key),
                    ));
                }
                self.launched += launches.len() as u64;
                out.push_back(if seen { Op::Sync } else { Op::Wait });
            }
            Workload::Ring {
                kernel,
                mark_every,
                host,
            } => {
                self.launched += 1;
                let mark = self.launched.is_multiple_of(u64::from(mark_every.max(1)));
                out.push_back(Op::Launch(kernel, mark, 0));
                if host > 0 {
                    out.push_back(Op::Host(host));
                }
            }
            Workload::Requests {
                period,
                offset,
                kernels,
                kernel,
            } => {
                let due = offset + self.request * period;
                self.request += 1;
                out.push_back(Op::Until(due));
                for _ in 0..kernels {
                    out.push_back(Op::Launch(kernel, false, 0));
                }
                out.push_back(Op::Sync);
                out.push_back(Op::Done(due));
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AppState {
    Run,
    /// Waiting for a window (gate closed or budget spent).
    Gate,
    /// Waiting for room in its queue.
    Full,
    /// In a synchronisation.
    Sync,
    /// Waiting for its queue to empty, unseen by the preload (`Op::Wait`).
    Wait,
    /// Waiting for the paced budget to grow (the gate counts such launches: the program is
    /// waiting for the GPU, not idle).
    Paced,
}

struct App {
    prog: Program,
    ops: VecDeque<Op>,
    state: AppState,
    /// When the launch now blocked at the gate first tried.
    blocked_since: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cs {
    WaitDemand,
    Sched,
    Acquire,
    WaitFirst,
    Window,
    Drain,
}

struct Ctrl {
    dc: DutyCycle,
    state: Cs,
    open: bool,
    budget: u64,
    launches: u64,
    submit: u64,
    first: Option<u64>,
    last_launch: u64,
    quiet: Option<u64>,
    demand: Option<u64>,
    opened: u64,
    idle_until: u64,
    due: u64,
    close: Close,
    closed: u64,
    drained: bool,
    /// The published waiter slot: (key, fresh).
    slot: Option<(u64, bool)>,
    served: u64,
    /// When another process last released the token, as seen at taking it.
    other_freed: u64,
    /// Whether this window is paced (contended at its opening).
    paced: bool,
    /// Whether the last window ended with the program still busy (see `share::backlogged`).
    backlogged: bool,
    /// Whether the window being taken or open is armed (`share::arm`).
    armed: bool,
    /// When the pace last held a launch in the open window (0: never).
    held_at: u64,
    /// The work the pace estimated queued at the close, when the pace, not the program, set
    /// the closed window's rate (`share::pace_limited`).
    pace_queued: Option<Duration>,
    /// The open window's pace (when paced).
    pace: Pace,
    /// What the window's launches cost (the pace's marks).
    costing: Costing,
    /// The window's marks not yet seen completed, oldest first.
    ticks: VecDeque<Tick>,
    /// When the GPU reached the last mark seen completed.
    last_tick: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ent {
    Gpu,
    App(usize),
    Ctrl(usize),
}

struct Kernel {
    ready: u64,
    left: u64,
    /// An event was recorded after it (a watcher waits for it).
    mark: bool,
    /// The preload's pace recorded a mark after it ([`Costing`]).
    tick: bool,
}

/// A mark the pace recorded (`Gate::mark` in the preload).
#[derive(Clone, Copy, Debug)]
struct Tick {
    /// Launches admitted in the window before it.
    at: u64,
    /// Whether the previous mark was still queued when it was recorded.
    back_to_back: bool,
    /// When the GPU reached it.
    done: Option<u64>,
}

struct World {
    sc: Scenario,
    p: Params,
    now: u64,
    seq: u64,
    heap: BinaryHeap<Reverse<(u64, u64, Ent)>>,
    armed_gpu: Option<u64>,
    armed_app: Vec<Option<u64>>,
    armed_ctrl: Vec<Option<u64>>,
    apps: Vec<App>,
    ctrls: Vec<Option<Ctrl>>,
    kq: Vec<VecDeque<Kernel>>,
    next: Vec<u64>,
    holder: Option<usize>,
    /// The last holder (the node file's last-holder word).
    last_holder: Option<usize>,
    freed_at: u64,
    run: Option<usize>,
    since: u64,
    switch_until: u64,
    /// The wake-up tail's pseudo-random state (0: not started).
    wakes: u64,
    last_ctx: Option<usize>,
    slice_start: u64,
    /// Whether another context than the running one had work at the last look (the hardware
    /// slice timer runs only while contexts contend).
    had_others: bool,
    out: Outcome,
}

/// Runs a scenario.
pub fn run(sc: &Scenario) -> Outcome {
    let n = sc.procs.len();
    let secs = sc.duration.div_ceil(S) as usize;
    let mut w = World {
        sc: sc.clone(),
        p: sc.params,
        now: 0,
        seq: 0,
        heap: BinaryHeap::new(),
        armed_gpu: None,
        armed_app: vec![None; n],
        armed_ctrl: vec![None; n],
        apps: sc
            .procs
            .iter()
            .map(|pr| App {
                prog: Program {
                    w: pr.workload,
                    launched: 0,
                    request: 0,
                },
                ops: VecDeque::new(),
                state: AppState::Run,
                blocked_since: 0,
            })
            .collect(),
        ctrls: sc
            .procs
            .iter()
            .map(|pr| {
                let limit = sc.limits[pr.container];
                (sc.policy != Policy::Plain && limit < 100).then(|| Ctrl {
                    dc: DutyCycle::new(limit, DEFAULT_PERIOD),
                    state: Cs::WaitDemand,
                    open: false,
                    budget: 0,
                    launches: 0,
                    submit: 0,
                    first: None,
                    last_launch: 0,
                    quiet: None,
                    demand: None,
                    opened: 0,
                    idle_until: 0,
                    due: 0,
                    close: Close::Deadline,
                    closed: 0,
                    drained: false,
                    slot: None,
                    served: 0,
                    other_freed: 0,
                    paced: false,
                    backlogged: false,
                    armed: false,
                    held_at: 0,
                    pace_queued: None,
                    pace: Pace::default(),
                    costing: Costing::default(),
                    ticks: VecDeque::new(),
                    last_tick: None,
                })
            })
            .collect(),
        kq: (0..n).map(|_| VecDeque::new()).collect(),
        next: vec![0; sc.limits.len()],
        holder: None,
        last_holder: None,
        freed_at: 0,
        run: None,
        since: 0,
        switch_until: 0,
        wakes: 0,
        last_ctx: None,
        slice_start: 0,
        had_others: false,
        out: Outcome {
            work: vec![0; n],
            per_second: vec![vec![0; secs]; n],
            latencies: vec![Vec::new(); n],
            syncs: vec![0; n],
            switches: 0,
            windows: vec![0; n],
        },
    };
    for (i, pr) in sc.procs.iter().enumerate() {
        w.arm(Ent::App(i), pr.start);
    }
    while let Some(Reverse((t, _, e))) = w.heap.pop() {
        if t > sc.duration {
            break;
        }
        let slot = match e {
            Ent::Gpu => &mut w.armed_gpu,
            Ent::App(i) => &mut w.armed_app[i],
            Ent::Ctrl(i) => &mut w.armed_ctrl[i],
        };
        if *slot != Some(t) {
            continue;
        }
        *slot = None;
        w.now = t;
        match e {
            Ent::Gpu => w.gpu_step(),
            Ent::App(i) => w.app_step(i),
            Ent::Ctrl(i) => w.ctrl_step(i),
        }
    }
    // Account the kernel running at the end.
    w.now = sc.duration;
    w.settle();
    w.out
}

thread_local! {
    static TRACE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Prints one line per window to stderr (for studying a scenario; off by default).
pub fn set_trace(on: bool) {
    TRACE.with(|t| t.set(on));
}

fn id(p: usize) -> u64 {
    p as u64 + 1
}

impl World {
    /// Wakes `e` at `t` (or earlier if it is already due earlier).
    fn arm(&mut self, e: Ent, t: u64) {
        let t = t.max(self.now);
        let slot = match e {
            Ent::Gpu => &mut self.armed_gpu,
            Ent::App(i) => &mut self.armed_app[i],
            Ent::Ctrl(i) => &mut self.armed_ctrl[i],
        };
        if slot.is_some_and(|a| a <= t) {
            return;
        }
        *slot = Some(t);
        self.seq += 1;
        self.heap.push(Reverse((t, self.seq, e)));
    }

    /// How long the next futex wake-up takes ([`Params::wake`], with its tail: one in
    /// `wake_tail.0`, drawn from a fixed pseudo-random sequence, so every run is the same).
    fn wake(&mut self) -> u64 {
        let (one_in, extra) = self.p.wake_tail;
        if one_in == 0 {
            return self.p.wake;
        }
        // xorshift64, seeded once.
        let mut x = if self.wakes == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            self.wakes
        };
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.wakes = x;
        if x.is_multiple_of(one_in) {
            self.p.wake + extra
        } else {
            self.p.wake
        }
    }

    fn ctrl(&mut self, p: usize) -> &mut Ctrl {
        self.ctrls[p].as_mut().expect("a limited process")
    }

    fn container(&self, p: usize) -> usize {
        self.sc.procs[p].container
    }

    // ----- the GPU --------------------------------------------------------------------------

    fn add_work(&mut self, p: usize, from: u64, to: u64) {
        self.out.work[p] += to - from;
        let mut t = from;
        while t < to {
            let s = (t / S) as usize;
            let end = to.min((s as u64 + 1) * S);
            if let Some(b) = self.out.per_second[p].get_mut(s) {
                *b += end - t;
            }
            t = end;
        }
    }

    /// Accounts the running kernel's progress up to now; handles its completion.
    fn settle(&mut self) {
        let Some(q) = self.run else { return };
        let from = self.since.max(self.switch_until);
        let now = self.now;
        self.since = now;
        if now <= from {
            return;
        }
        let Some(k) = self.kq[q].front_mut() else {
            return;
        };
        let d = (now - from).min(k.left);
        k.left -= d;
        let done = k.left == 0;
        self.add_work(q, from, from + d);
        if done {
            let k = self.kq[q].pop_front().expect("the running kernel");
            self.kernel_done(q, k.mark, k.tick);
        }
    }

    fn kernel_done(&mut self, q: usize, mark: bool, tick: bool) {
        let now = self.now;
        if tick {
            // The mark's timestamp: the queue's next kernel starts after it.
            self.switch_until = self.switch_until.max(now + self.p.event);
            self.tick_done(q, now);
        }
        if mark {
            // The watcher's event synchronisation returns (the preload's hook: a successful
            // synchronisation), though later kernels may still be queued.
            self.saw_empty(q, now + self.p.sync);
        }
        if self.apps[q].state == AppState::Full {
            self.arm(Ent::App(q), now);
        }
        if !self.kq[q].is_empty() {
            return;
        }
        if matches!(self.apps[q].state, AppState::Sync | AppState::Wait) {
            self.arm(Ent::App(q), now + self.p.sync);
        }
        if let Some(c) = self.ctrls[q].as_mut()
            && c.state == Cs::Drain
        {
            c.drained = true;
            let t = now + self.p.sync;
            self.arm(Ent::Ctrl(q), t);
        }
    }

    fn gpu_step(&mut self) {
        self.settle();
        let now = self.now;
        let n = self.kq.len();
        let ready = |w: &World, q: usize| w.kq[q].front().is_some_and(|k| k.ready <= now);
        let cur = self.run.filter(|&q| ready(self, q));
        let others = (0..n).any(|q| Some(q) != cur && ready(self, q));
        if others && !self.had_others {
            // Contention begins: the running context gets a full slice from now.
            self.slice_start = now;
        }
        self.had_others = others;
        let pick = match cur {
            Some(q) if !others || now < self.slice_start + self.p.timeslice => Some(q),
            _ => {
                let after = self.run.or(self.last_ctx).map_or(0, |r| r + 1);
                (0..n)
                    .map(|i| (after + i) % n)
                    .find(|&q| Some(q) != cur && ready(self, q))
                    .or(cur)
            }
        };
        if pick != self.run || pick.is_some() && self.run.is_none() {
            if let Some(q) = pick {
                self.switch_until = if self.last_ctx != Some(q) {
                    if self.last_ctx.is_some() {
                        self.out.switches += 1;
                    }
                    now + self.p.switch
                } else {
                    now
                };
                self.slice_start = now;
                self.last_ctx = Some(q);
                self.since = now;
            }
            self.run = pick;
        }
        // When to look again: the running kernel's end, a slice's end while others have
        // work, a queued kernel becoming runnable.
        let mut t = u64::MAX;
        if let Some(q) = self.run {
            let k = &self.kq[q][0];
            t = t.min(self.switch_until.max(now) + k.left);
            if others {
                t = t.min(self.slice_start + self.p.timeslice);
            }
        }
        for q in 0..n {
            if let Some(k) = self.kq[q].front()
                && k.ready > now
            {
                t = t.min(k.ready);
            }
        }
        if t != u64::MAX {
            self.arm(Ent::Gpu, t.max(now + 1));
        }
    }

    fn enqueue(&mut self, p: usize, dur: u64, mark: bool, key: u64) {
        if let Some(c) = self.ctrls[p].as_mut()
            && c.open
        {
            c.costing.admitted(key);
        }
        let ready = self.now + self.p.launch_latency;
        self.kq[p].push_back(Kernel {
            ready,
            left: dur.max(1),
            mark,
            tick: false,
        });
        self.arm(Ent::Gpu, ready);
    }

    // ----- the program ----------------------------------------------------------------------

    fn app_step(&mut self, p: usize) {
        let now = self.now;
        loop {
            if self.apps[p].ops.is_empty() {
                let a = &mut self.apps[p];
                a.prog.refill(&mut a.ops);
            }
            let op = self.apps[p].ops[0];
            match op {
                Op::Until(t) => {
                    self.apps[p].ops.pop_front();
                    if t > now {
                        self.arm(Ent::App(p), t);
                        return;
                    }
                }
                Op::Host(d) => {
                    self.apps[p].ops.pop_front();
                    self.arm(Ent::App(p), now + d);
                    return;
                }
                Op::Done(due) => {
                    self.apps[p].ops.pop_front();
                    self.out.latencies[p].push(now - due);
                }
                Op::Sync | Op::Wait => {
                    let seen = op == Op::Sync;
                    if !self.kq[p].is_empty() {
                        self.apps[p].state = if seen { AppState::Sync } else { AppState::Wait };
                        return;
                    }
                    self.apps[p].state = AppState::Run;
                    self.apps[p].ops.pop_front();
                    self.out.syncs[p] += 1;
                    if seen {
                        // The preload's synchronisation hook: the program saw its queue empty.
                        self.saw_empty(p, now);
                    }
                }
                Op::Launch(d, mark, key) => {
                    if self.kq[p].len() >= self.p.queue_max {
                        self.apps[p].state = AppState::Full;
                        return;
                    }
                    if !self.admit(p) {
                        return;
                    }
                    self.apps[p].state = AppState::Run;
                    self.apps[p].ops.pop_front();
                    self.enqueue(p, d, mark, key);
                    self.arm(Ent::App(p), now + self.p.launch_cost);
                    return;
                }
            }
        }
    }

    /// The pace holds a launch of `p`: a mark goes after its queued work (`Gate::mark`).
    fn tick(&mut self, p: usize) {
        let now = self.now;
        let Some(c) = self.ctrls[p].as_mut() else {
            return;
        };
        let at = c.costing.launches();
        if c.ticks.back().is_some_and(|t| t.at == at) || c.ticks.len() >= share::MARKS_IN_FLIGHT {
            return;
        }
        let back_to_back = c.ticks.back().is_some_and(|t| t.done.is_none());
        match self.kq[p].back_mut() {
            Some(k) => {
                k.tick = true;
                c.ticks.push_back(Tick {
                    at,
                    back_to_back,
                    done: None,
                });
            }
            None => c.ticks.push_back(Tick {
                at,
                back_to_back: false,
                done: Some(now),
            }),
        }
    }

    /// The GPU reached `p`'s oldest pending mark at `at`: the controller sees it at its next
    /// look and lets a held launch go on if the pace has room then.
    fn tick_done(&mut self, p: usize, at: u64) {
        let Some(c) = self.ctrls[p].as_mut() else {
            return;
        };
        if let Some(t) = c.ticks.iter_mut().find(|t| t.done.is_none()) {
            t.done = Some(at);
        }
        if self.apps[p].state == AppState::Paced {
            let poll = share::PACED_POLL.as_nanos() as u64;
            self.arm(Ent::App(p), at + poll);
        }
    }

    /// A synchronisation of process `p` returned successfully at `at` (`Gate::saw_empty`).
    fn saw_empty(&mut self, p: usize, at: u64) {
        let wake = self.wake();
        let new = self.sc.policy == Policy::New;
        if let Some(c) = self.ctrls[p].as_mut()
            && c.open
            && c.first.is_some()
        {
            c.quiet = Some(at);
            if new {
                self.arm(Ent::Ctrl(p), at + wake);
            }
        }
    }

    /// Whether a thread of process `p` is inside a synchronisation, or waits for the pace (the
    /// gate's `syncing`): an event watcher is whenever a marked kernel is still to finish.
    fn syncing(&self, p: usize) -> bool {
        matches!(self.apps[p].state, AppState::Sync | AppState::Paced)
            || matches!(self.sc.procs[p].workload, Workload::Ring { .. })
                && self.kq[p].iter().any(|k| k.mark)
    }

    /// The gate (`Gate::admit`): whether this launch passes now; if not, the app blocks.
    fn admit(&mut self, p: usize) -> bool {
        let now = self.now;
        let Some(c) = self.ctrls[p].as_mut() else {
            return true;
        };
        if c.open {
            let n = c.launches;
            // Pacing: a launch more than PACE_DEPTH ahead of the GPU waits (uncounted) until
            // the controller raises the paced budget (it looks every PACED_POLL).
            if c.paced && c.first.is_some() {
                let poll = share::PACED_POLL.as_nanos() as u64;
                // The marks the controller has seen completed by now (it looks every poll).
                let mut seen = Vec::new();
                while let Some(t) = c.ticks.front().copied()
                    && let Some(done) = t.done
                    && done + poll <= now
                {
                    c.ticks.pop_front();
                    let elapsed = c.last_tick.filter(|_| t.back_to_back).map(|l| done - l);
                    c.last_tick = Some(done);
                    seen.push((t.at, elapsed, done + poll));
                }
                let n_admitted = c.costing.launches();
                let allowed =
                    c.dc.pace_costed(&mut c.pace, &mut c.costing, now, n_admitted, seen);
                let depth = c.costing.depth();
                if n_admitted >= allowed && n < c.budget {
                    // The paced budget exceeds n from the depth before the GPU runs dry.
                    let t = c.pace.next_room(depth);
                    self.arm(Ent::App(p), t.max(now) + poll);
                    if self.apps[p].state != AppState::Paced {
                        self.tick(p);
                    }
                    self.apps[p].state = AppState::Paced;
                    self.ctrl(p).held_at = now;
                    return false;
                }
            }
            let c = self.ctrl(p);
            c.launches += 1;
            if n == 0 {
                c.first = Some(now);
                let w = self.wake();
                self.arm(Ent::Ctrl(p), now + w);
            }
            let c = self.ctrl(p);
            if n < c.budget {
                c.last_launch = now;
                c.quiet = None;
                return true;
            }
            // The budget is spent: the controller closes the window now.
            let w = self.wake();
            self.arm(Ent::Ctrl(p), now + w);
        } else {
            if c.armed {
                // The launch came while an armed turn was being taken: it is the demand.
                c.demand = Some(now);
            }
            c.demand.get_or_insert(now);
            let w = self.wake();
            self.arm(Ent::Ctrl(p), now + w);
        }
        let a = &mut self.apps[p];
        if a.state != AppState::Gate {
            a.state = AppState::Gate;
            a.blocked_since = now;
        }
        false
    }

    // ----- the node token -------------------------------------------------------------------

    fn waiters(&self) -> Vec<Waiter> {
        let now = self.now;
        self.ctrls
            .iter()
            .enumerate()
            .filter_map(|(p, c)| {
                let c = c.as_ref()?;
                let (key, fresh) = c.slot?;
                Some(Waiter {
                    id: id(p),
                    key,
                    fresh,
                    served: c.served,
                    beat: now,
                })
            })
            .collect()
    }

    fn take(&mut self, p: usize) {
        self.holder = Some(p);
        let now = self.now;
        let (last, freed) = (self.last_holder, self.freed_at);
        let c = self.ctrl(p);
        c.slot = None;
        c.served = now;
        if last.is_some_and(|l| l != p) {
            c.other_freed = freed.max(1);
        }
    }

    fn release(&mut self, p: usize) {
        if self.holder != Some(p) {
            return;
        }
        self.holder = None;
        self.last_holder = Some(p);
        self.freed_at = self.now;
        let t = self.now + self.wake();
        for q in 0..self.ctrls.len() {
            if q != p
                && self.ctrls[q]
                    .as_ref()
                    .is_some_and(|c| c.state == Cs::Acquire)
            {
                self.arm(Ent::Ctrl(q), t);
            }
        }
    }

    // ----- the controller -------------------------------------------------------------------

    /// Publishes (or updates) `p`'s waiter slot for schedule `next`; returns its key. A holder
    /// sees a changed slot at its next look ([`share::poll`]).
    fn announce(&mut self, p: usize, next: u64, now: u64) -> u64 {
        let demand = self.ctrl(p).demand.unwrap_or(now);
        let key = share::due(next, demand);
        // An armed turn has no launch waiting: never fresh (it preempts nobody).
        let fresh =
            !self.ctrl(p).backlogged && !self.ctrl(p).armed && share::is_fresh(next, demand);
        let changed = self.ctrl(p).slot != Some((key, fresh));
        self.ctrl(p).slot = Some((key, fresh));
        if let Some(h) = self.holder
            && changed
            && h != p
        {
            let t = now.max(key) + share::poll(self.ctrl(h).paced).as_nanos() as u64;
            self.arm(Ent::Ctrl(h), t);
        }
        key
    }

    /// Whether another process waits for the token (an armed turn then gives up).
    fn armed_contended(&self, p: usize) -> bool {
        share::contended(&self.waiters(), id(p), self.now, 0)
    }

    fn open_window(&mut self, p: usize) {
        let now = self.now;
        let new = self.sc.policy == Policy::New;
        let other = self.ctrl(p).other_freed;
        let contended = new && share::contended(&self.waiters(), id(p), now, other);
        let wake = self.wake();
        let c = self.ctrl(p);
        let plan = if new {
            c.dc.plan_contended(contended)
        } else {
            c.dc.plan()
        };
        c.budget = plan.launches;
        c.paced = contended;
        c.pace = Pace::new(now);
        c.costing.open();
        c.ticks.clear();
        c.last_tick = None;
        c.submit = plan.submit.as_nanos() as u64;
        c.launches = 0;
        c.first = None;
        c.quiet = None;
        c.open = true;
        c.opened = now;
        c.demand = None;
        c.held_at = 0;
        c.idle_until = now
            + if c.armed {
                share::ARMED_HOLD
            } else {
                plan.submit.max(Duration::from_millis(5))
            }
            .as_nanos() as u64;
        c.state = Cs::WaitFirst;
        if self.apps[p].state == AppState::Gate {
            self.arm(Ent::App(p), now + wake);
        }
    }

    fn ctrl_step(&mut self, p: usize) {
        let now = self.now;
        let new = self.sc.policy == Policy::New;
        let cont = self.container(p);
        loop {
            let state = self.ctrl(p).state;
            match state {
                Cs::WaitDemand => {
                    if self.ctrl(p).demand.is_none() {
                        return;
                    }
                    self.ctrl(p).state = Cs::Sched;
                }
                Cs::Sched | Cs::Acquire
                    if self.ctrls[p].as_ref().is_some_and(|c| c.armed)
                        && self.armed_contended(p) =>
                {
                    // Another process wants the GPU: no window is opened ahead of a launch.
                    let blocked = self.apps[p].state == AppState::Gate;
                    let c = self.ctrl(p);
                    c.armed = false;
                    c.slot = None;
                    if !blocked {
                        c.demand = None;
                        c.state = Cs::WaitDemand;
                    }
                    continue;
                }
                Cs::Sched => {
                    let next = self.next[cont];
                    if new {
                        // A3: announce before sleeping, with the key it will have when due (not
                        // eligible before then), so a sibling waking at the same time sees it.
                        self.announce(p, next, now);
                    }
                    if now < next {
                        let t = next + self.p.jitter;
                        self.arm(Ent::Ctrl(p), t);
                        return;
                    }
                    self.ctrl(p).state = Cs::Acquire;
                }
                Cs::Acquire if !new => {
                    if self.holder.is_some() {
                        return;
                    }
                    self.take(p);
                    if now < self.next[cont] {
                        self.release(p);
                        self.ctrl(p).state = Cs::Sched;
                        continue;
                    }
                    self.open_window(p);
                }
                Cs::Acquire => {
                    let next = self.next[cont];
                    if now < next {
                        self.ctrl(p).state = Cs::Sched;
                        continue;
                    }
                    // A3: announce before looking at the token (and before sleeping).
                    let key = self.announce(p, next, now);
                    if self.holder.is_some() {
                        return;
                    }
                    if share::may_take(id(p), &self.waiters(), now, self.freed_at) {
                        self.take(p);
                        self.ctrl(p).due = key;
                        self.open_window(p);
                        continue;
                    }
                    let t = share::retry_at(&self.waiters(), now, self.freed_at);
                    self.arm(Ent::Ctrl(p), t);
                    return;
                }
                Cs::WaitFirst => {
                    let armed = self.ctrl(p).armed;
                    if let Some(first) = self.ctrl(p).first {
                        let c = self.ctrl(p);
                        if armed {
                            // An armed window counts from its first launch.
                            c.due = c.due.max(first);
                            c.armed = false;
                        }
                        c.state = Cs::Window;
                        continue;
                    }
                    let idle_gap = share::IDLE_GAP.as_nanos() as u64;
                    let give_back = new
                        && (armed || now >= self.ctrl(p).opened + idle_gap)
                        && share::contended(&self.waiters(), id(p), now, 0);
                    if now >= self.ctrl(p).idle_until || give_back {
                        let c = self.ctrl(p);
                        c.open = false;
                        c.armed = false;
                        c.backlogged = false;
                        self.release(p);
                        self.ctrl(p).state = Cs::WaitDemand;
                        continue;
                    }
                    let mut t = self.ctrl(p).idle_until;
                    if armed {
                        t = t.min(now + share::ARMED_POLL.as_nanos() as u64);
                    } else if new {
                        t = t.min(self.ctrl(p).opened + idle_gap);
                    }
                    self.arm(Ent::Ctrl(p), t);
                    return;
                }
                Cs::Window => {
                    let fresh = new && share::fresh_waiter(&self.waiters(), id(p), now);
                    let syncing = self.syncing(p);
                    let c = self.ctrl(p);
                    let first = c.first.expect("a window with a first launch");
                    let s = WindowState {
                        first,
                        deadline: first + c.submit,
                        budget_spent: c.launches > c.budget,
                        last_launch: c.last_launch,
                        quiet: c.quiet,
                        syncing,
                        fresh_waiter: fresh,
                    };
                    let reason = if new {
                        share::close_reason(&s, now)
                    } else if s.budget_spent {
                        Some(Close::Budget)
                    } else if now >= s.deadline {
                        Some(Close::Deadline)
                    } else {
                        None
                    };
                    let Some(r) = reason else {
                        let t = if new {
                            share::next_check(&s)
                        } else {
                            s.deadline
                        };
                        self.arm(Ent::Ctrl(p), t);
                        return;
                    };
                    let empty = self.kq[p].is_empty();
                    let c = self.ctrl(p);
                    let admitted = c.launches.min(c.budget);
                    c.pace_queued = if c.paced {
                        let (held, last) = (c.held_at, c.last_launch);
                        let n = c.costing.launches();
                        c.dc.pace_costed(&mut c.pace, &mut c.costing, now, n, []);
                        let depth = c.costing.depth();
                        c.dc.queued_at_close(&mut c.pace, held, last, now, admitted, depth)
                    } else {
                        None
                    };
                    c.open = false;
                    c.close = r;
                    c.closed = now;
                    c.state = Cs::Drain;
                    c.drained = empty;
                    if empty {
                        let t = now + self.p.sync;
                        self.arm(Ent::Ctrl(p), t);
                    }
                    return;
                }
                Cs::Drain => {
                    if !self.ctrl(p).drained {
                        return;
                    }
                    self.finish_window(p);
                }
            }
        }
    }

    /// The drain returned: report the window, move the schedule, hand the token on.
    fn finish_window(&mut self, p: usize) {
        let now = self.now;
        let cont = self.container(p);
        let new = self.sc.policy == Policy::New;
        let blocked = self.apps[p].state == AppState::Gate;
        let blocked_since = self.apps[p].blocked_since;
        self.out.windows[p] += 1;
        let c = self.ctrl(p);
        let first = c.first.expect("a drained window had a first launch");
        let launches = c.launches.min(c.budget);
        let busy = if new {
            share::charged_busy(first, c.closed, now, c.close)
        } else {
            Duration::from_nanos(now - first)
        };
        let report = WindowReport {
            busy,
            launches,
            drain: Duration::from_nanos(now - c.closed),
        };
        let credit = if c.paced {
            let queued = c.pace_queued;
            // The window's marks all completed in the drain: what they teach.
            let per = c.dc.per_launch().map_or(0.0, |d| d.as_secs_f64());
            while let Some(t) = c.ticks.pop_front() {
                let done = t.done.unwrap_or(now);
                let elapsed = c.last_tick.filter(|_| t.back_to_back).map(|l| done - l);
                c.last_tick = Some(done);
                c.costing.mark_done(t.at, elapsed, per);
            }
            c.dc.finish_costed(report, &c.costing, queued)
        } else {
            c.dc.finish(report)
        };
        let due = c.due;
        let (budget, close, closed) = (c.budget, c.close, c.closed);
        if TRACE.with(|t| t.get()) {
            eprintln!(
                "{:.3} ms: p{p} window first {:.3} busy {:.3} launches {launches}/{} close {:?} drain {:.3} credit {:.3} due {:.3} next {:.3} per {:?} paced {} queued {:?}",
                now as f64 / 1e6,
                first as f64 / 1e6,
                busy.as_secs_f64() * 1e3,
                budget,
                close,
                (now - closed) as f64 / 1e6,
                credit.as_secs_f64() * 1e3,
                due as f64 / 1e6,
                self.next[cont] as f64 / 1e6,
                self.ctrls[p].as_ref().and_then(|c| c.dc.per_launch()),
                self.ctrls[p].as_ref().is_some_and(|c| c.paced),
                self.ctrls[p].as_ref().and_then(|c| c.pace_queued),
            );
        }
        if new {
            // A4: the schedule moves before the token is handed on.
            self.next[cont] = share::advance(self.next[cont], due, first, credit);
            self.release(p);
            let other = self.ctrl(p).other_freed;
            let contended = share::contended(&self.waiters(), id(p), now, other);
            let c = self.ctrl(p);
            c.backlogged = share::backlogged_at_settle(close, blocked);
            let since = if c.backlogged {
                blocked_since.min(c.closed)
            } else {
                blocked_since
            };
            c.demand = blocked.then_some(since);
            c.state = if blocked { Cs::Sched } else { Cs::WaitDemand };
            if !blocked && share::arm(c.backlogged, contended) {
                c.armed = true;
                c.demand = Some(now);
                c.state = Cs::Sched;
                self.arm(Ent::Ctrl(p), now);
            }
        } else {
            self.release(p);
            self.next[cont] = compute::schedule(self.next[cont], first, credit);
            let c = self.ctrl(p);
            c.demand = Some(now);
            c.state = Cs::Sched;
        }
    }
}

/// Kernel ns per second `w` does alone, without a limiter (measured over `secs` seconds after
/// the first).
pub fn alone_rate(w: Workload, params: Params, secs: u64) -> f64 {
    let o = run(&Scenario {
        limits: vec![100],
        procs: vec![Proc {
            container: 0,
            workload: w,
            start: 0,
        }],
        duration: (secs + 1) * S,
        policy: Policy::Plain,
        params,
    });
    o.work_between(0, 1, secs as usize + 1) as f64 / secs as f64
}

pub mod targets;
