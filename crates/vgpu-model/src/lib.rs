//! A deterministic discrete-event model of the compute limiter on a shared GPU.
//!
//! Containers × processes run workloads (kernel loops with any sync pattern, open-loop request
//! services) on one modelled GPU, on a virtual clock (nanoseconds; no real time, no threads), so
//! a sweep that takes hours on a GPU runs in milliseconds and gives the same answer every time.
//!
//! What is modelled:
//! * **the GPU**: one context at a time; each process's kernels run in FIFO order; when several
//!   processes have work it time-slices between them ([`Params::timeslice`], preempting
//!   mid-kernel; a queue held on the GPU yields unless [`Params::held_slices`]), and every
//!   change of context costs [`Params::switch`] of GPU time (landing in
//!   the incoming process's time). A launch reaches the GPU [`Params::launch_latency`] after the
//!   host issued it, and a process's queue holds at most [`Params::queue_max`] kernels.
//! * **each process's host thread**: launches (costing [`Params::launch_cost`]), host work,
//!   synchronisations (returning [`Params::sync`] after its work ended), waits for the next
//!   request; blocked at the gate when its budget is spent.
//! * **each process's controller**, what the preload's controller thread does around
//!   `vgpu_policy::limiter::Limiter`: it reads the gate (launches, their keys, a launch held),
//!   the completed timing events, the peers' node slots, the token and its container's virtual
//!   time into a `Look`, and applies the `Decision` (the gate's budget, the charge to the
//!   container's virtual time, its slot, the token, a launch to time with two events, a drain,
//!   when to look next; a bracket of a kernel the gate knows holds its stream, so its events
//!   and kernel run back to back, [`Params::hold`]). Timing events are GPU queue items costing [`Params::event`]; waking a
//!   sleeping thread costs [`Params::wake`]; sleeping until a time wakes [`Params::jitter`]
//!   late. A process with a limit, or with a task priority, has one.
//! * **the node token** of the GPU (taken through `limiter::may_take_now`) and each
//!   container's virtual time.
//!
//! The decisions are not copies: the model calls the state machine the preload calls.
//! [`Policy::Vgpu`] runs it in every gated process; [`Policy::Plain`] runs without any limiter
//! (hardware time-slicing only). The virtual clock starts at 10 s, so that a container's virtual
//! time of 0 is long past, as under a real monotonic clock.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use vgpu_policy::limiter::MARKS_IN_FLIGHT;
use vgpu_policy::limiter::{
    Limiter, Look, Mark, MarkKind, Peer, Priority, SlotState, Token, Waited, may_take_now,
};

/// A microsecond in ns.
pub const US: u64 = 1_000;
/// A millisecond in ns.
pub const MS: u64 = 1_000_000;
/// A second in ns.
pub const S: u64 = 1_000_000_000;

/// Where the virtual clock starts: a run begins long after the clock's origin, as a process's
/// monotonic clock does (a container's virtual time of 0 is then far in the past, not now).
/// Every time a scenario gives (starts, request due times) counts from here.
const EPOCH: u64 = 10 * S;

/// The first second is warm-up: the throughputs are counted from its end, and the latencies of
/// the requests due after it (the GPU benchmarks measure their members after their warm-up).
/// (Counted from the start, a service's first requests beside a trainer, while its limiter had
/// no rhythm to announce, set the matmul service's p99 over a 4 s run.)
pub const WARM: u64 = S;

/// Which limiter runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// No limiter: processes share the GPU by hardware time-slicing.
    Plain,
    /// vgpu's limiter (`vgpu_policy::limiter`) in every process whose container is limited.
    Vgpu,
}

/// The GPU time of the restart probe's empty kernel on the model's GPU.
const PROBE_KERNEL: u64 = 1_000;
/// Where the keys of [`Workload::Decode::fresh`] launches start (above any workload's own).
const FRESH_KEYS: u64 = 1 << 40;

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
    /// A context whose queue is held on the GPU (a stream wait not yet satisfied at its front)
    /// still counts as having work: it takes its time slices and runs nothing in them. (Off:
    /// a held queue yields the GPU, as the model assumed until now; which the H100 does is
    /// `tests/gpu/holdwait`'s question.) With it on, the time a lone held context waits counts
    /// as the GPU running, not idle ([`Outcome::idle`]).
    pub held_slices: bool,
    /// GPU time a timing event (the pace's mark) costs before the next kernel of its queue
    /// starts: the H200's run 39, two containers of 10 µs kernels whose pace recorded ~125
    /// marks per 26 ms window, ran a launch in 10.06–10.19 µs of window time against 9.92–9.97
    /// with no marks (alone: 9.84–9.94), about 2–4 µs a mark. (`sm_bench`'s own events are
    /// created without timing.)
    pub event: u64,
    /// GPU time a kernel loses when it starts right after a timing event of its queue: a
    /// kernel queued behind another starts as that one drains, but one behind an event starts
    /// only once the event has been written. So a bracket measures a kernel this much longer
    /// than it runs among its neighbours. Not the process's work. (The H200's run 54: the
    /// ResNet step's back-to-back segments put it at about 1 µs.)
    pub restart: u64,
    /// How much later a kernel launched into an empty queue becomes runnable than one queued
    /// behind others (the GPU has to fetch it): idle GPU time, nobody's work. A bracket on an
    /// idle stream subtracts the launch call's time from what its events saw, not this, so it
    /// measures the kernel this much longer. (On the H200 the limiter learned 0–5 µs, a
    /// median of 0 at 50 %: run 55; the robust sweep runs 10 µs.)
    pub idle_lag: u64,
    /// How late a timed sleep wakes. The controller thread asks for a timer slack of 1 ns: on
    /// the H200 a 100 µs timed wait then wakes 4.4 µs late at the median (14.7 at p99), and
    /// 56 µs late with Linux's default slack of 50 µs (run 85; this was 50 µs before).
    pub jitter: u64,
    /// Kernels a process may have queued before a launch blocks.
    pub queue_max: usize,
    /// A tail on wake-ups: one futex wake in `wake_tail.0` (pseudo-random, the same every run)
    /// takes `wake_tail.1` longer (a virtual machine's vCPU scheduling; 0: no tail).
    pub wake_tail: (u64, u64),
    /// Brackets of kernels the gate knows hold their stream (the driver has stream waits).
    pub hold: bool,
    /// Host time a kernel's first launch in a process takes beyond [`Params::launch_cost`]
    /// (CUDA's lazy loading: the call loads its module; the H200's decode service's first
    /// calls took 0.8–21 ms, run 66); its kernel is queued at the call's end.
    pub lazy_load: u64,
    /// A controller starved of CPU (a host whose cores busy threads keep full): once it sleeps,
    /// it runs again only at a multiple of this (virtual time), however early it is woken or
    /// asked to look (0: when it is due); one that looks again at once is still running. The
    /// program's thread is not starved: the worst case, it launches at once.
    pub ctl_quantum: u64,
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
            held_slices: false,
            event: 3 * US,
            restart: US,
            idle_lag: 2 * US,
            jitter: 5 * US,
            queue_max: 1024,
            wake_tail: (0, 0),
            hold: true,
            lazy_load: 0,
            ctl_quantum: 0,
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
    /// An open-loop, host-bound decode service (eager LLM decode at batch 1): a request every
    /// `period` from `offset`, each `tokens` tokens of `kernels` launches of `kernel` ns with
    /// `host` ns of host work before each, and a synchronisation at each token's end (the
    /// sampled token goes back to the host); a request's latency runs from its due time.
    Decode {
        /// Time between requests.
        period: u64,
        /// The first request's time.
        offset: u64,
        /// Tokens per request.
        tokens: u32,
        /// Launches per token.
        kernels: u32,
        /// GPU time of each kernel.
        kernel: u64,
        /// Host time before each launch.
        host: u64,
        /// Distinct kernels (keys) among a token's launches, in turn (1: one key).
        keys: u32,
        /// How many of a token's launches (its first) have a key never seen before, at every
        /// token: kernels over a cache that grows by a token each step, each grid new (an eager
        /// KV-cache decode's concatenations and attention).
        fresh: u32,
        /// GPU time of each of those (0: `kernel`).
        fresh_kernel: u64,
        /// Each token's host work differs from `host` by up to this many percent either way,
        /// drawn anew for each token (a fixed pseudo-random sequence, the same every run): an
        /// eager framework's host time moves from step to step (0: every token the same).
        jitter: u32,
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
    /// A program whose kernels change: `cheap_n` launches of `cheap` ns (one key) and a
    /// synchronisation, then for good launches of `kernel` ns, never timed before, in turn
    /// among `keys` new keys, without synchronising (the queue bound holds it back).
    Shift {
        /// GPU time of a first-phase kernel.
        cheap: u64,
        /// First-phase launches.
        cheap_n: u32,
        /// GPU time of a second-phase kernel.
        kernel: u64,
        /// Distinct keys of the second phase.
        keys: u32,
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
    /// Each container's task priority (missing: normal).
    pub priorities: Vec<Priority>,
    /// Which containers are work-conserving (`VGPU_SM_WORK_CONSERVING`; missing: not).
    pub work_conserving: Vec<bool>,
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
    /// Each process's request latencies (ns), for [`Workload::Requests`], of the requests due
    /// after [`WARM`].
    pub latencies: Vec<Vec<u64>>,
    /// Synchronisations each process completed (iterations of a sync-every-N loop).
    pub syncs: Vec<u64>,
    /// How often the GPU changed context.
    pub switches: u64,
    /// Turns each process took with the node token.
    pub windows: Vec<u64>,
    /// GPU ns each limited process's limiter charged its container (0: no limiter).
    pub charged: Vec<u64>,
    /// Each limited process's limiter at the end: what it learned of its brackets (restart,
    /// idle lag, ns) and its sample counters.
    pub learned: Vec<Option<(f64, f64, vgpu_policy::limiter::Stats)>>,
    /// GPU ns with no runnable kernel (after the first kernel).
    pub idle: u64,
    /// The part of it that began while a process waited at its gate.
    pub idle_gated: u64,
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

/// The next number of a fixed pseudo-random sequence (xorshift64) whose state is `state`,
/// started from `seed` where it is 0.
fn xorshift(state: &mut u64, seed: u64) -> u64 {
    let mut x = if *state == 0 { seed } else { *state };
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    x
}

struct Program {
    w: Workload,
    launched: u64,
    request: u64,
    /// Keys handed out as new ([`Workload::Decode::fresh`]).
    fresh: u64,
    /// The pseudo-random state of [`Workload::Decode::jitter`] (0: not started).
    rng: u64,
}

impl Program {
    /// `host` moved by up to `percent` % either way, uniformly, by a fixed pseudo-random
    /// sequence.
    fn jittered(&mut self, host: u64, percent: u32) -> u64 {
        if percent == 0 {
            return host;
        }
        let x = xorshift(&mut self.rng, 0x2545_F491_4F6C_DD1D);
        let span = 2 * u64::from(percent) + 1;
        let pct = 100 + x % span - u64::from(percent);
        host * pct / 100
    }

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
            Workload::Decode {
                period,
                offset,
                tokens,
                kernels,
                kernel,
                host,
                keys,
                fresh,
                fresh_kernel,
                jitter,
            } => {
                let due = EPOCH + offset + self.request * period;
                self.request += 1;
                out.push_back(Op::Until(due));
                for _ in 0..tokens {
                    let host = self.jittered(host, jitter);
                    for i in 0..kernels {
                        out.push_back(Op::Host(host));
                        let (gpu, key) = if i < fresh {
                            self.fresh += 1;
                            let gpu = if fresh_kernel > 0 {
                                fresh_kernel
                            } else {
                                kernel
                            };
                            (gpu, FRESH_KEYS + self.fresh)
                        } else {
                            (kernel, u64::from(i % keys.max(1)))
                        };
                        out.push_back(Op::Launch(gpu, false, key));
                    }
                    out.push_back(Op::Sync);
                }
                out.push_back(Op::Done(due));
            }
            Workload::Shift {
                cheap,
                cheap_n,
                kernel,
                keys,
            } => {
                if self.launched == 0 {
                    for _ in 0..cheap_n {
                        out.push_back(Op::Launch(cheap, false, 0));
                    }
                    out.push_back(Op::Sync);
                    self.launched = u64::from(cheap_n);
                }
                self.launched += 1;
                let key = 1 + self.launched % u64::from(keys.max(1));
                out.push_back(Op::Launch(kernel, false, key));
            }
            Workload::Requests {
                period,
                offset,
                kernels,
                kernel,
            } => {
                let due = EPOCH + offset + self.request * period;
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
    /// Waiting at the gate (its budget is spent).
    Gate,
    /// Waiting for room in its queue.
    Full,
    /// In a synchronisation.
    Sync,
    /// Waiting for its queue to empty, unseen by the preload (`Op::Wait`).
    Wait,
}

struct App {
    prog: Program,
    ops: VecDeque<Op>,
    state: AppState,
    /// Keys launched before (their module is loaded: [`Params::lazy_load`]).
    loaded: std::collections::HashSet<u64>,
    /// Synchronisations the hooks saw end (`Op::Sync`; the preload's count of those begun is
    /// this, and one more while it waits in one).
    synced: u64,
    /// The synchronisation it waits in began at this time, with this many launches admitted
    /// (the hooks' record, `Look::waited`).
    sync_from: Option<(u64, u64)>,
}

/// What a mark (a timing event in the process's queue) stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MKind {
    /// Recorded by a held launch after `at` admitted launches.
    Hold { at: u64 },
    /// The first event of a bracket around launch `at` of `key`; `gap`: on an idle stream, the
    /// launch call's time (the driver's measure), else 0.
    Start { at: u64, key: u64, gap: u64 },
    /// The second event of a bracket.
    End,
    /// The first of two events with nothing between them.
    OverStart,
    /// The second.
    OverEnd,
}

#[derive(Clone, Copy, Debug)]
struct MMark {
    kind: MKind,
    id: u64,
    /// When the GPU reached it.
    done: Option<u64>,
    /// (Hold) the mark before it (a hold mark or a bracket's end) was still queued when it was
    /// recorded.
    b2b: bool,
}

/// A limited process's controller: what the preload's controller thread does around
/// `vgpu_policy::limiter::Limiter`, with the gate, the marks and the node slot.
struct Ctl {
    lim: Limiter,
    budget: u64,
    launched: u64,
    /// Keys admitted since the last look.
    keys: Vec<u64>,
    /// Their functions.
    units: Vec<u64>,
    holding: bool,
    slot: SlotState,
    served: u64,
    /// The launch (its number) to bracket.
    sample: Option<u64>,
    /// The keys the gate brackets no more (`Limiter::settled` when seen; the preload's
    /// `Gate::known`): with no sample pending, a launch of any other key is bracketed.
    known: std::collections::HashSet<u64>,
    marks: VecDeque<MMark>,
    /// The last hold mark or bracket end consumed: when the GPU reached it, and the first
    /// launch after it (where a segment may start).
    seg_start: Option<(u64, u64)>,
    /// The current hold has recorded its mark.
    held_marked: bool,
    /// Its next look is armed for this time.
    next: u64,
    /// A drain is in progress (the controller waits for the queue to empty).
    draining: bool,
    /// The last look's decision asked for a drain, now done.
    drained: bool,
    /// A synchronisation returned since the last look with the queue empty.
    empty: bool,
    /// The synchronisations that returned since the last look (`Look::waited`).
    waited: Vec<Waited>,
    /// Another process was on the GPU at a look since the marks in flight were recorded.
    was_shared: bool,
    /// The restart probe asked for at the last look, read at the next: its two spans.
    probe: Option<(u64, u64)>,
    /// Its queue is held on the GPU ([`Decision::hold_queue`]) since this time; the next launch
    /// of a kernel launched before puts the wait in (`true`: it is in).
    queue_hold: Option<(u64, bool)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ent {
    Gpu,
    App(usize),
    Ctrl(usize),
}

struct Kernel {
    ready: u64,
    /// GPU time it loses before it runs ([`Params::restart`]), not the process's work.
    lead: u64,
    left: u64,
    /// An event was recorded after it (a watcher waits for it).
    watch: bool,
    /// A timing event of the limiter (`Some(id)`): costs [`Params::event`] of GPU time and is
    /// not the process's work.
    stamp: Option<u64>,
    /// A stream wait of a queue hold: ready once the hold is lifted (by the controller, or by
    /// the preload's watchdog `HOLD_MAX_NS` after it began); not work.
    wait: bool,
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
    ctls: Vec<Option<Ctl>>,
    kq: Vec<VecDeque<Kernel>>,
    /// Each container's virtual time (its region word).
    vt: Vec<u64>,
    holder: Option<usize>,
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
    marks: u64,
    /// Since when the GPU has had no runnable kernel, and whether a process waited at its gate
    /// then.
    idle_since: u64,
    idle_gated: bool,
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
                    fresh: 0,
                    rng: 0,
                },
                ops: VecDeque::new(),
                state: AppState::Run,
                loaded: std::collections::HashSet::new(),
                synced: 0,
                sync_from: None,
            })
            .collect(),
        ctls: sc
            .procs
            .iter()
            .map(|pr| {
                let limit = sc.limits[pr.container];
                let priority = sc.priorities.get(pr.container).copied().unwrap_or_default();
                // The preload gates a process with a limit, or with a task priority (then at
                // 100 %: measuring, and keeping out of a high-priority peer's way).
                let gated = limit < 100 || priority != Priority::Normal;
                (sc.policy == Policy::Vgpu && gated).then(|| Ctl {
                    lim: Limiter::new(priority, EPOCH + pr.start),
                    budget: 0,
                    launched: 0,
                    keys: Vec::new(),
                    units: Vec::new(),
                    holding: false,
                    slot: SlotState::default(),
                    served: 0,
                    sample: None,
                    known: std::collections::HashSet::new(),
                    marks: VecDeque::new(),
                    seg_start: None,
                    held_marked: false,
                    next: u64::MAX,
                    draining: false,
                    drained: false,
                    empty: false,
                    waited: Vec::new(),
                    was_shared: false,
                    probe: None,
                    queue_hold: None,
                })
            })
            .collect(),
        kq: (0..n).map(|_| VecDeque::new()).collect(),
        vt: vec![0; sc.limits.len()],
        holder: None,
        freed_at: 0,
        run: None,
        since: 0,
        switch_until: 0,
        wakes: 0,
        last_ctx: None,
        slice_start: 0,
        had_others: false,
        marks: 0,
        idle_since: EPOCH,
        idle_gated: false,
        out: Outcome {
            work: vec![0; n],
            per_second: vec![vec![0; secs]; n],
            latencies: vec![Vec::new(); n],
            syncs: vec![0; n],
            switches: 0,
            windows: vec![0; n],
            charged: vec![0; n],
            learned: vec![None; n],
            idle: 0,
            idle_gated: 0,
        },
    };
    for (i, pr) in sc.procs.iter().enumerate() {
        w.arm(Ent::App(i), EPOCH + pr.start);
        if w.ctls[i].is_some() {
            w.arm(Ent::Ctrl(i), EPOCH + pr.start);
        }
    }
    while let Some(Reverse((t, _, e))) = w.heap.pop() {
        if t > EPOCH + sc.duration {
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
    w.now = EPOCH + sc.duration;
    w.settle();
    for (i, c) in w.ctls.iter().enumerate() {
        if let Some(c) = c {
            w.out.charged[i] = c.lim.charged();
            w.out.learned[i] = Some((c.lim.restart(), c.lim.idle_lag(), c.lim.stats()));
        }
    }
    w.out
}

thread_local! {
    static TRACE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Prints one line per look to stderr (for studying a scenario; off by default).
pub fn set_trace(on: bool) {
    TRACE.with(|t| t.set(on));
}

fn id(p: usize) -> u64 {
    p as u64 + 1
}

/// The process whose token id is `id` ([`id`]'s inverse).
fn proc_of(id: u64) -> usize {
    usize::try_from(id - 1).unwrap_or(usize::MAX)
}

impl World {
    /// Wakes `e` at `t` (or earlier if it is already due earlier).
    fn arm(&mut self, e: Ent, t: u64) {
        let mut t = t.max(self.now);
        let q = self.p.ctl_quantum;
        if q > 0 && matches!(e, Ent::Ctrl(_)) && t > self.now.saturating_add(1) {
            // A starved controller that sleeps runs again at the next of its quanta (one that
            // looks again at once is still running).
            t = t.div_ceil(q).saturating_mul(q);
        }
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
        let x = xorshift(&mut self.wakes, 0x9E37_79B9_7F4A_7C15);
        if x.is_multiple_of(one_in) {
            self.p.wake + extra
        } else {
            self.p.wake
        }
    }

    fn ctl(&mut self, p: usize) -> &mut Ctl {
        self.ctls[p].as_mut().expect("a limited process")
    }

    fn container(&self, p: usize) -> usize {
        self.sc.procs[p].container
    }

    /// Wakes `p`'s controller after a futex wake-up (a launch held, a synchronisation begun or
    /// ended, the token freed).
    fn poke(&mut self, p: usize) {
        if self.ctls[p].is_some() {
            let t = self.now + self.wake();
            self.arm(Ent::Ctrl(p), t);
        }
    }

    // ----- the GPU --------------------------------------------------------------------------

    fn add_work(&mut self, p: usize, from: u64, to: u64) {
        self.out.work[p] += to - from;
        let mut t = from;
        while t < to {
            let s = ((t - EPOCH) / S) as usize;
            let end = to.min(EPOCH + (s as u64 + 1) * S);
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
        // A held queue's wait (run only where held contexts take slices) makes no progress
        // before the word is written.
        let from = if k.wait { from.max(k.ready) } else { from };
        if now <= from {
            return;
        }
        let lead = (now - from).min(k.lead);
        k.lead -= lead;
        let from = from + lead;
        let d = (now - from).min(k.left);
        k.left -= d;
        let done = k.left == 0;
        let stamp = k.stamp;
        if stamp.is_none() && !k.wait {
            self.add_work(q, from, from + d);
        }
        if done {
            let k = self.kq[q].pop_front().expect("the running kernel");
            self.kernel_done(q, k.watch, k.stamp, from + d);
        }
    }

    fn kernel_done(&mut self, q: usize, watch: bool, stamp: Option<u64>, at: u64) {
        let now = self.now;
        if let Some(id) = stamp
            && let Some(c) = self.ctls[q].as_mut()
            && let Some(m) = c.marks.iter_mut().find(|m| m.id == id)
        {
            m.done = Some(at);
        }
        if watch {
            // The watcher's event synchronisation returns, though later kernels may still be
            // queued.
            self.arm(Ent::App(q), now + self.p.sync);
        }
        if self.apps[q].state == AppState::Full {
            self.arm(Ent::App(q), now);
        }
        if !self.kq[q].iter().any(|k| k.stamp.is_none())
            && matches!(self.apps[q].state, AppState::Sync | AppState::Wait)
        {
            self.arm(Ent::App(q), now + self.p.sync);
        }
        if self.kq[q].is_empty()
            && let Some(c) = self.ctls[q].as_mut()
            && c.draining
        {
            c.draining = false;
            c.drained = true;
            let t = now + self.p.sync;
            self.arm(Ent::Ctrl(q), t);
        }
    }

    fn gpu_step(&mut self) {
        self.settle();
        let now = self.now;
        let n = self.kq.len();
        let ready = |w: &World, q: usize| {
            w.kq[q]
                .front()
                .is_some_and(|k| k.ready <= now || (w.p.held_slices && k.wait))
        };
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
            if self.run.is_none() && pick.is_some() {
                let idle = now - self.idle_since;
                self.out.idle += idle;
                if self.idle_gated {
                    self.out.idle_gated += idle;
                }
                if TRACE.with(|t| t.get()) && idle > 20 * US {
                    eprintln!(
                        "{:.3} ms GPU idle {:.1} us (from {:.3})",
                        now as f64 / 1e6,
                        idle as f64 / 1e3,
                        self.idle_since as f64 / 1e6
                    );
                }
            } else if pick.is_none() {
                self.idle_since = now;
                self.idle_gated = self.apps.iter().any(|a| a.state == AppState::Gate);
            }
            self.run = pick;
        }
        // When to look again: the running kernel's end, a slice's end while others have
        // work, a queued kernel becoming runnable.
        let mut t = u64::MAX;
        if let Some(q) = self.run {
            let k = &self.kq[q][0];
            let start = self.switch_until.max(now);
            let start = if k.wait { start.max(k.ready) } else { start };
            t = t.min(start + k.lead + k.left);
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

    fn enqueue(&mut self, p: usize, dur: u64, watch: bool, lag: u64) {
        let ready = self.now + self.p.launch_latency + lag;
        let after_event = self.kq[p].back().is_some_and(|k| k.stamp.is_some());
        self.kq[p].push_back(Kernel {
            ready,
            lead: if after_event { self.p.restart } else { 0 },
            left: dur.max(1),
            watch,
            stamp: None,
            wait: false,
        });
        self.arm(Ent::Gpu, ready);
    }

    /// Records a timing event of `p`'s limiter in its queue.
    fn stamp(&mut self, p: usize, kind: MKind, b2b: bool) {
        self.marks += 1;
        let id = self.marks;
        let ready = self.now + self.p.launch_latency;
        let cost = self.p.event.max(1);
        self.ctl(p).marks.push_back(MMark {
            kind,
            id,
            done: None,
            b2b,
        });
        self.kq[p].push_back(Kernel {
            ready,
            lead: 0,
            left: cost,
            watch: false,
            stamp: Some(id),
            wait: false,
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
                    if due >= EPOCH + WARM {
                        self.out.latencies[p].push(now - due);
                    }
                }
                Op::Sync | Op::Wait => {
                    let seen = op == Op::Sync;
                    if self.kq[p].iter().any(|k| k.stamp.is_none()) {
                        let was = self.apps[p].state;
                        self.apps[p].state = if seen { AppState::Sync } else { AppState::Wait };
                        if seen && was != AppState::Sync {
                            // The synchronisation hook: the controller publishes it.
                            let launched = self.ctls[p].as_ref().map_or(0, |c| c.launched);
                            self.apps[p].sync_from = Some((now, launched));
                            self.poke(p);
                        }
                        return;
                    }
                    let was = self.apps[p].state;
                    self.apps[p].state = AppState::Run;
                    self.apps[p].ops.pop_front();
                    self.out.syncs[p] += 1;
                    if seen {
                        self.apps[p].synced += 1;
                    }
                    let from = self.apps[p].sync_from.take();
                    if seen && let Some(c) = self.ctls[p].as_mut() {
                        c.empty = true;
                        let (from, after) = from.unwrap_or((now, c.launched));
                        c.waited.push(Waited {
                            after,
                            from,
                            ns: now - from,
                        });
                    }
                    if was == AppState::Sync {
                        self.poke(p);
                    }
                }
                Op::Launch(d, watch, key) => {
                    if self.kq[p].len() >= self.p.queue_max {
                        self.apps[p].state = AppState::Full;
                        return;
                    }
                    let Some(bracket) = self.admit(p, key) else {
                        return;
                    };
                    self.apps[p].state = AppState::Run;
                    self.apps[p].ops.pop_front();
                    // An idle stream: the kernel comes after the launch call (the events, recorded
                    // before it, were reached at once), and later than a queued one would. A
                    // bracket of a kernel the gate knows holds its stream until its last event
                    // is recorded (`marks.rs`): events and kernel start back to back, as queued.
                    let held = bracket.is_some()
                        && self.ctls[p]
                            .as_ref()
                            .is_some_and(|c| c.known.contains(&key) && self.p.hold);
                    let idle = self.kq[p].is_empty() && !held;
                    // A kernel's first launch loads its module: the call takes longer, and its
                    // kernel is queued at the call's end.
                    let load = if self.p.lazy_load > 0 && self.apps[p].loaded.insert(key) {
                        self.p.lazy_load
                    } else {
                        0
                    };
                    // As the preload reports it (`marks.rs`): a first launch's whole call where
                    // the stream was not held; another's on an idle stream, at most LONG_CALL.
                    let call = self.p.launch_cost + load;
                    let gap = if bracket.is_none() || held {
                        0
                    } else if load > 0 {
                        call
                    } else if idle {
                        call.min(vgpu_policy::limiter::LONG_CALL)
                    } else {
                        0
                    };
                    // A queue hold: the wait goes in before a kernel launched before (a first
                    // launch may load its module), once.
                    let mut waits = false;
                    if let Some(c) = self.ctls[p].as_mut()
                        && let Some((since, false)) = c.queue_hold
                        && (self.p.lazy_load == 0 || self.apps[p].loaded.contains(&key))
                    {
                        c.queue_hold = Some((since, true));
                        self.kq[p].push_back(Kernel {
                            ready: since + vgpu_policy::holdwatch::HOLD_MAX_NS,
                            lead: 0,
                            left: 1,
                            watch: false,
                            stamp: None,
                            wait: true,
                        });
                        waits = true;
                    }
                    if let Some(at) = bracket {
                        self.stamp(p, MKind::Start { at, key, gap }, false);
                    }
                    // On an idle stream a bracket's events were reached before the call handed
                    // the kernel over; any kernel queued there comes after its fetch. (Behind a
                    // queue hold's wait the stream is not idle: the kernel waits for the lift.)
                    let lag = match (idle && !waits, bracket.is_some()) {
                        (true, true) => call + self.p.idle_lag,
                        (true, false) => load + self.p.idle_lag,
                        (false, _) => load,
                    };
                    self.enqueue(p, d, watch, lag);
                    if bracket.is_some() {
                        self.stamp(p, MKind::End, false);
                    }
                    self.arm(Ent::App(p), now + self.p.launch_cost + load);
                    return;
                }
            }
        }
    }

    /// The gate (`Gate::admit`): `Some(bracket)` if this launch passes now (`bracket`: its
    /// number, when it is timed on its own); `None`: the app waits at the gate.
    fn admit(&mut self, p: usize, key: u64) -> Option<Option<u64>> {
        let Some(c) = self.ctls[p].as_mut() else {
            return Some(None);
        };
        if c.launched < c.budget {
            let n = c.launched;
            c.launched += 1;
            c.keys.push(key);
            // Its function: one for the new-grid launches of a decode step
            // (`Workload::Decode::fresh`), else a function per key.
            c.units
                .push(if key > FRESH_KEYS { FRESH_KEYS } else { key });
            c.held_marked = false;
            c.empty = false;
            // As the preload's gate: the controller's pick, or, none pending, a key it does not
            // know yet, while the marks' ring (8 slots) has room for a bracket.
            let unknown = c.sample.is_none() && !c.known.contains(&key) && c.marks.len() + 3 <= 8;
            let bracket = (c.sample == Some(n) || unknown).then_some(n);
            if c.sample == Some(n) {
                c.sample = None;
            }
            return Some(bracket);
        }
        // Held: a mark after the queued work (at most two hold marks unread), and the
        // controller is woken.
        let at = c.launched;
        let first_hold = !c.held_marked;
        c.held_marked = true;
        let in_flight = c
            .marks
            .iter()
            .filter(|m| matches!(m.kind, MKind::Hold { .. }) && m.done.is_none())
            .count();
        // As the preload: the mark recorded last, if a hold mark or a bracket's end not yet
        // reached.
        let b2b = c
            .marks
            .back()
            .is_some_and(|m| matches!(m.kind, MKind::Hold { .. } | MKind::End) && m.done.is_none());
        let last_at = c.marks.iter().rev().find_map(|m| match m.kind {
            MKind::Hold { at } => Some(at),
            _ => None,
        });
        if first_hold && in_flight < MARKS_IN_FLIGHT && last_at != Some(at) {
            self.stamp(p, MKind::Hold { at }, b2b);
        }
        if self.apps[p].state != AppState::Gate {
            self.apps[p].state = AppState::Gate;
            self.poke(p);
        }
        None
    }

    // ----- the node token -------------------------------------------------------------------

    fn peers(&self, p: usize) -> Vec<Peer> {
        let now = self.now;
        self.ctls
            .iter()
            .enumerate()
            .filter(|(q, _)| *q != p)
            .filter_map(|(q, c)| {
                let c = c.as_ref()?;
                Some(Peer {
                    id: id(q),
                    state: c.slot,
                    served: c.served,
                    beat: now,
                    holder: self.holder == Some(q),
                    kin: self.container(q) == self.container(p),
                })
            })
            .collect()
    }

    fn release(&mut self, p: usize) {
        if self.holder != Some(p) {
            return;
        }
        self.holder = None;
        self.freed_at = self.now;
        self.ctl(p).holding = false;
        // As the node file's release: the first two in line are woken, nobody else.
        let peers = self.peers(p);
        for id in vgpu_policy::limiter::next_in_line(&peers, self.now)
            .into_iter()
            .flatten()
        {
            self.poke(proc_of(id));
        }
    }

    // ----- the controller -------------------------------------------------------------------

    /// The completed marks, oldest first, as the limiter takes them; consumes them.
    fn collect_marks(&mut self, p: usize, shared: bool) -> Vec<Mark> {
        let c = self.ctl(p);
        let mut out = Vec::new();
        while let Some(m) = c.marks.front().copied() {
            let Some(done) = m.done else { break };
            match m.kind {
                MKind::Hold { at } => {
                    let segment = c
                        .seg_start
                        .filter(|_| m.b2b)
                        .map(|(t, first)| (first, done - t));
                    c.seg_start = Some((done, at));
                    out.push(Mark {
                        kind: MarkKind::Hold { at, segment },
                        shared,
                    });
                    c.marks.pop_front();
                }
                MKind::Start { .. } | MKind::OverStart => {
                    let Some(end) = c.marks.get(1).copied() else {
                        break;
                    };
                    let Some(end_done) = end.done else { break };
                    let elapsed = end_done - done;
                    let kind = match m.kind {
                        MKind::Start { at, key, gap } => {
                            c.seg_start = Some((end_done, at + 1));
                            MarkKind::Bracket {
                                at,
                                key,
                                elapsed,
                                gap,
                            }
                        }
                        _ => MarkKind::Overhead { elapsed },
                    };
                    out.push(Mark { kind, shared });
                    c.marks.pop_front();
                    c.marks.pop_front();
                }
                MKind::End | MKind::OverEnd => {
                    c.marks.pop_front();
                }
            }
        }
        out
    }

    fn ctrl_step(&mut self, p: usize) {
        let now = self.now;
        if self.ctl(p).draining {
            // The controller is inside its synchronisation.
            return;
        }
        let cont = self.container(p);
        let percent = self.sc.limits[cont];
        let peers = self.peers(p);
        // As the preload: a mark is shared if another process was on the GPU (launched,
        // synchronising or holding the token, by its slot) at any look while it was in flight.
        let shared_now = peers
            .iter()
            .any(|q| q.state.launched || q.state.syncing || q.holder);
        self.ctl(p).was_shared |= shared_now;
        let was_shared = self.ctl(p).was_shared;
        let mut marks = self.collect_marks(p, was_shared);
        // As the preload: the oldest mark in flight, which the GPU has not reached.
        let unreached = self.ctl(p).marks.iter().find_map(|m| match m.kind {
            MKind::Hold { at } | MKind::Start { at, .. } => Some(at),
            _ => None,
        });
        if let Some((one, two)) = self.ctl(p).probe.take() {
            marks.push(Mark {
                kind: MarkKind::Probe { one, two },
                shared: was_shared,
            });
        }
        if self.ctl(p).marks.is_empty() {
            self.ctl(p).was_shared = shared_now;
        }
        let state = self.apps[p].state;
        let syncing = state == AppState::Sync
            || matches!(self.sc.procs[p].workload, Workload::Ring { .. })
                && self.kq[p].iter().any(|k| k.watch);
        let vt = self.vt[cont];
        let holding = self.holder == Some(p);
        let c = self.ctls[p].as_mut().expect("a limited process");
        let keys = std::mem::take(&mut c.keys);
        let units = std::mem::take(&mut c.units);
        let drained = std::mem::take(&mut c.drained);
        let empty = std::mem::take(&mut c.empty);
        let waited = std::mem::take(&mut c.waited);
        let look = Look {
            now,
            launched: c.launched,
            keys: &keys,
            units: &units,
            held: state == AppState::Gate,
            marks: &marks,
            unreached,
            peers: &peers,
            holding,
            vt,
            syncing,
            syncs: self.apps[p].synced + u64::from(state == AppState::Sync),
            empty,
            drained,
            waited: &waited,
            percent,
            blocked: false,
            work_conserving: self.sc.work_conserving.get(cont).copied().unwrap_or(false),
            monitor_alone: false,
            queue_hold: self.p.hold,
        };
        let d = c.lim.look(&look);
        // As the preload: kept off the GPU for a peer, its marks in flight span the peer's work.
        c.was_shared |= d.peer_runs();
        if TRACE.with(|t| t.get()) && !marks.is_empty() {
            eprintln!(
                "{:.3} ms p{p}: marks {marks:?} pending {}",
                now as f64 / 1e6,
                c.marks.len()
            );
        }
        c.budget = d.budget;
        c.slot = d.slot;
        if d.hold_queue {
            let max = vgpu_policy::holdwatch::HOLD_MAX_NS;
            match c.queue_hold {
                // Standing: the look renews it, so the watchdog lifts it `HOLD_MAX_NS` after
                // the controller's last look that wanted it.
                Some((since, placed)) if since + max > now => {
                    c.queue_hold = Some((now, placed));
                    for k in self.kq[p].iter_mut().filter(|k| k.wait && k.ready > now) {
                        k.ready = now + max;
                    }
                }
                // Lifted by the watchdog: it stays so until a decision lifts it.
                Some(_) => {}
                None => c.queue_hold = Some((now, false)),
            }
        } else if c.queue_hold.take().is_some() {
            // Lifted: the GPU sees the word at once.
            for k in self.kq[p].iter_mut().filter(|k| k.wait && k.ready > now) {
                k.ready = now;
            }
            self.arm(Ent::Gpu, now);
        }
        let c = self.ctl(p);
        for &k in &keys {
            if c.lim.settled(k) {
                c.known.insert(k);
            } else {
                c.known.remove(&k);
            }
        }
        if d.sample.is_some() {
            c.sample = d.sample;
        }
        self.vt[cont] = d.charge_vt(vt, now, percent);
        if TRACE.with(|t| t.get()) {
            eprintln!(
                "{:.3} ms p{p}: launched {} budget {} held {:?} token {:?} holding {holding} heavy {} queue held {} app {:?} vt {:+.3} ms charge {:.1} us queued {:.1} us mean {:.1} us prices {:?}",
                now as f64 / 1e6,
                look.launched,
                d.budget,
                d.held,
                d.token,
                d.slot.heavy,
                d.hold_queue,
                state,
                (self.vt[cont] as f64 - now as f64) / 1e6,
                d.charge as f64 / 1e3,
                self.ctl(p).lim.queued(now) as f64 / 1e3,
                self.ctl(p).lim.mean_price() / 1e3,
                (0..64)
                    .filter_map(|k| self
                        .ctl(p)
                        .lim
                        .prices()
                        .get(k)
                        .map(|x| (k, (x / 1e2).round() / 10.0)))
                    .collect::<Vec<_>>(),
            );
        }
        let mut relook = false;
        match d.token {
            Token::Free => self.release(p),
            // Left to a waiter due before it: its want is published, and the release that
            // makes it next pokes it.
            Token::Hold | Token::Wait(_) => {}
            Token::Want(k) => {
                let served = self.ctl(p).served;
                if self.holder.is_none()
                    && may_take_now(
                        id(p),
                        Some((k, served)),
                        &peers,
                        now,
                        (self.freed_at, self.ctl(p).lim.handoff_grace()),
                    )
                {
                    self.holder = Some(p);
                    let c = self.ctl(p);
                    c.holding = true;
                    c.served = now;
                    self.out.windows[p] += 1;
                    relook = true;
                }
            }
        }
        if d.overhead {
            self.stamp(p, MKind::OverStart, false);
            self.stamp(p, MKind::OverEnd, false);
        }
        if d.probe && self.p.hold {
            // The preload's probe runs on a stream of its own, held until queued: an event, an
            // empty kernel (restarting behind it), an event, two empty kernels, an event. Its
            // spans as the model's GPU has them (its own context's other stream: nothing of
            // the time-slicer in it; a neighbour's time marks it shared, as any mark).
            let (r, e) = (self.p.restart, self.p.event);
            self.ctl(p).probe = Some((r + PROBE_KERNEL + e, r + 2 * PROBE_KERNEL + e));
        }
        let c = self.ctl(p);
        if state == AppState::Gate && c.launched < c.budget {
            let t = now + self.wake();
            self.arm(Ent::App(p), t);
        }
        if d.drain {
            if self.kq[p].is_empty() {
                let c = self.ctl(p);
                c.drained = true;
                let t = now + self.p.sync;
                self.arm(Ent::Ctrl(p), t);
            } else {
                self.ctl(p).draining = true;
            }
            return;
        }
        let next = if relook {
            now + 1
        } else {
            d.next + self.p.jitter
        };
        self.ctl(p).next = next;
        self.arm(Ent::Ctrl(p), next);
    }
}

/// Kernel ns per second `w` does alone, without a limiter (measured over `secs` seconds after
/// the first).
pub fn alone_rate(w: Workload, params: Params, secs: u64) -> f64 {
    let o = targets::alone(params, Policy::Plain, w, 100, secs + 1);
    o.work_between(0, 1, secs as usize + 1) as f64 / secs as f64
}

pub mod targets;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tokens_host_work_moves_within_its_jitter_the_same_every_run() {
        let program = || Program {
            w: targets::h200_decode(),
            launched: 0,
            request: 0,
            fresh: 0,
            rng: 0,
        };
        let (mut a, mut b) = (program(), program());
        let draws: Vec<u64> = (0..1000).map(|_| a.jittered(1000, 30)).collect();
        assert!(draws.iter().all(|&h| (700..=1300).contains(&h)));
        assert!(draws.iter().any(|&h| h < 750) && draws.iter().any(|&h| h > 1250));
        assert_eq!(
            draws,
            (0..1000).map(|_| b.jittered(1000, 30)).collect::<Vec<_>>()
        );
        assert_eq!(a.jittered(1000, 0), 1000, "no jitter: as given");
    }
}
