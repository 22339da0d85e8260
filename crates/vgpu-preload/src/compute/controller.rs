//! A limited device's controller thread: each look reads the gate, the marks, the node file
//! and the container's virtual time, hands them to the [`Limiter`], and applies its decision
//! (see the module above).
use super::gate::Gate;
use super::{EXCLUSION, Env, OPEN, end_drain};
use crate::driver::{Driver, REAL};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use vgpu_policy::config::CorePolicy;
use vgpu_policy::limiter::{self, Limiter, Look, Mark, MarkKind, Peer, Priority, Token};
use vgpu_policy::plan::{Plan, SmShare};
use vgpu_region::node::NodeToken;
use vgpu_region::sys::{futex_wait, futex_wake, monotonic_ns as now_ns};
use vgpu_region::{Region, RegionLedger};
use vgpu_sys::cuda::CU_STREAM_CAPTURE_MODE_RELAXED;

/// How long a drain kept out by a stream capture waits before it gives the token back anyway
/// (the others then share the GPU by time-slicing until the capture ends).
const CAPTURE_HOLD: Duration = Duration::from_millis(100);
/// The longest a controller sleeps at once.
const MAX_SLEEP: Duration = Duration::from_millis(50);
/// How long a controller waiting for the node token sleeps at least (a release wakes the next
/// in line at once).
const TOKEN_WAIT: Duration = Duration::from_millis(2);
/// A budget's room from which the controller is woken half-way through it.
const POKE_ROOM: u64 = 256;

pub(super) fn control(gate: &'static Gate, env: Env, device: usize) {
    REAL.set_current(gate.ctx.load(Ordering::Acquire));
    // The controller captures nothing, and its event queries must never invalidate a
    // program's capture (`driver::relaxed`): RELAXED for good.
    REAL.exchange_capture_mode(CU_STREAM_CAPTURE_MODE_RELAXED);
    // Its timed looks (a queue half run down, a chunk of credit due) must not come up to
    // 50 µs late: a low-priority process's whole queue is 200 µs.
    vgpu_region::sys::precise_timers();
    let controller = Controller::new(gate, env, device);
    // A panic (a vgpu bug) ends the controller, and drops it (it hands the token on). The
    // process leaves the node file, and its launches are refused from then on, never left
    // waiting for ever.
    let Err(_) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| controller.run()));
    crate::log::error(format_args!(
        "the compute controller for device {device} stopped (internal error); its kernel \
         launches are refused with CUDA_ERROR_OPERATING_SYSTEM"
    ));
    gate.leave_node();
    gate.refuse();
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
    /// Refunds (`Decision::refund`) the counters have not yet taken off a charge (they never
    /// go down: what a look takes back beyond its own charge comes off the next ones).
    refund_owed: u64,
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
    units: Vec<u64>,
    /// The synchronisations that returned since the last look (`Look::waited`).
    waited: Vec<limiter::Waited>,
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
            refund_owed: 0,
            drained: false,
            waiting_for_token: None,
            kernel_time_noted: 0,
            report: Report {
                since: now,
                ..Report::default()
            },
            keys: Vec::with_capacity(usize::try_from(limiter::MAX_ROOM).unwrap_or(0) * 2),
            units: Vec::with_capacity(usize::try_from(limiter::MAX_ROOM).unwrap_or(0) * 2),
            waited: Vec::with_capacity(16),
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
            // Nor are its synchronisations: a limit set later charges none of theirs.
            g.waits.take(&mut self.waited);
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
        // The synchronisations first, then the launches: each began after launches this look
        // prices (one that began after them is charged nothing, `Limiter::charge_waits`).
        g.waits.take(&mut self.waited);
        let launched = g
            .launches
            .load(Ordering::Acquire)
            .min(g.budget.load(Ordering::Acquire));
        g.keys.copy(self.looked_at, launched, &mut self.keys);
        g.units.copy(self.looked_at, launched, &mut self.units);
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
            units: &self.units,
            held: g.held.load(Ordering::Acquire) > 0,
            marks: &self.marks,
            unreached,
            peers: &self.peers,
            holding,
            vt,
            syncing: g.syncing.load(Ordering::Acquire) > 0,
            syncs: g.syncs.load(Ordering::Relaxed),
            empty: empty != 0 && empty > launched,
            drained: std::mem::take(&mut self.drained),
            waited: &self.waited,
            percent,
            blocked: self.hami_blocked(percent),
            work_conserving: self.plan.work_conserving,
            monitor_alone: self.monitor_alone(),
            queue_hold: g.marks.can_hold_queue(),
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
            if self.limiter.settled(k) {
                g.known.insert(k);
            } else {
                g.known.remove(k);
            }
        }
        // The charge: the container's virtual time, and the region's counters. A container
        // never charged (0) gets its start written at once, as the model does: else it would
        // count from `AHEAD` before each look's now for as long as it waits for its first turn,
        // forever behind the waiters that fell a whole bank back, and never served.
        if (d.charge > 0 || d.refund > 0 || vt == 0) && percent < 100 {
            let _ = self
                .vt()
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                    Some(d.charge_vt(v, now, percent))
                });
        }
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        g.mean_price
            .store(self.limiter.mean_price().max(0.0) as u64, Ordering::Relaxed);
        // The GPU time the counters are charged: net of what was refunded.
        let owed = self.refund_owed.saturating_add(d.refund);
        let charged = d.charge.saturating_sub(owed);
        self.refund_owed = owed.saturating_sub(d.charge);
        if let Some(l) = self.ledger {
            let waited = g.throttled_ns.swap(0, Ordering::AcqRel);
            let limited = percent < 100;
            self.report.waited = self.report.waited.saturating_add(waited);
            l.add_compute(
                self.device,
                charged,
                if limited { waited } else { 0 },
                g.claim(launched),
            );
        }
        self.mark_launches(new);
        self.report_look(now, &d, vt, charged);
        // The node token and the slot.
        if let Some(t) = self.token() {
            t.publish(&d.slot, now);
            match d.token {
                Token::Free => {
                    if holding {
                        t.release();
                    }
                }
                // It leaves the token to a waiter a turn behind it, its own want published:
                // it sleeps on the node file as a waiter does, and the release that makes it
                // next wakes it.
                // (Never returned to a holder.)
                Token::Wait(_) => self.waiting_for_token = Some(t.generation()),
                Token::Hold => t.heartbeat(),
                Token::Want(key) => {
                    let gen_before = t.generation();
                    if !holding
                        && t.try_take_keyed(key, &self.peers, now, self.limiter.handoff_grace())
                    {
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
        // Kept off the GPU on the GPU (its streams wait there), or not.
        if d.hold_queue {
            g.marks.hold_queue();
        } else {
            g.marks.lift_queue();
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

    /// Counts a look for the debug line (`charged`: GPU ns, net of refunds), and prints it once
    /// a second.
    fn report_look(&mut self, now: u64, d: &limiter::Decision, vt: u64, charged: u64) {
        let r = &mut self.report;
        r.looks += 1;
        r.charged = r.charged.saturating_add(charged);
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
                "look at {:.3} ms: held {:?}, token {:?}, charge {} ns, refund {} ns, budget {}, sample {:?}, vt {:+.3} ms, {} peers, next in {:.3} ms, slot {:?}",
                now as f64 / 1e6,
                d.held,
                d.token,
                d.charge,
                d.refund,
                d.budget,
                d.sample,
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
            "sm device {}: {:.1} % of the GPU charged over {:.2} s, {} looks (held: credit {} queue {} peer {} blocked {}; launches waited {:.1} ms), {} turns, {} peers, {} kernels priced, mean {:.1} us, vt {:+.1} ms; {} brackets ({} idle, {} long calls, {} held, {} lifted late) measured {:.1} ms charged {:.1} ms, {} segments, {} probes, restart {:.2} us, idle lag {:.2} us, corrected {:.2} ms ({:.2} ms by waits), refunded {:.2} ms, deferred {:.2} ms; {} syncs ({} foretold); held {:.1} ms in a peer's syncs, {:.1} ms for its announced ones, {:.1} ms of them passed over behind share ({:.1} ms far behind, {:.1} ms held so), {:.1} ms past the hold limit; {} queue holds ({} lifted late); sync waits: {} foretold {:.1} ms, {} not {:.1} ms",
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
            self.gate
                .marks
                .bracket_hold
                .placed
                .swap(0, Ordering::Relaxed),
            self.gate
                .marks
                .bracket_hold
                .unstuck
                .swap(0, Ordering::Relaxed),
            s.sampled_ns.saturating_sub(was.sampled_ns) as f64 / 1e6,
            s.sampled_charged_ns.saturating_sub(was.sampled_charged_ns) as f64 / 1e6,
            s.segments.saturating_sub(was.segments),
            s.probes.saturating_sub(was.probes),
            l.restart() / 1e3,
            l.idle_lag() / 1e3,
            s.corrected_ns.saturating_sub(was.corrected_ns) as f64 / 1e6,
            s.waited_ns.saturating_sub(was.waited_ns) as f64 / 1e6,
            s.refunded_ns.saturating_sub(was.refunded_ns) as f64 / 1e6,
            s.deferred_ns.saturating_sub(was.deferred_ns) as f64 / 1e6,
            s.syncs.saturating_sub(was.syncs),
            s.syncs_foretold.saturating_sub(was.syncs_foretold),
            s.held_peer_sync_ns.saturating_sub(was.held_peer_sync_ns) as f64 / 1e6,
            s.held_announced_ns.saturating_sub(was.held_announced_ns) as f64 / 1e6,
            s.announced_behind_ns
                .saturating_sub(was.announced_behind_ns) as f64
                / 1e6,
            s.announced_far_ns.saturating_sub(was.announced_far_ns) as f64 / 1e6,
            s.held_far_ns.saturating_sub(was.held_far_ns) as f64 / 1e6,
            s.peer_hold_cut_ns.saturating_sub(was.peer_hold_cut_ns) as f64 / 1e6,
            self.gate.marks.queue_hold.placed.swap(0, Ordering::Relaxed),
            self.gate
                .marks
                .queue_hold
                .unstuck
                .swap(0, Ordering::Relaxed),
            s.foretold_waits.0.saturating_sub(was.foretold_waits.0),
            s.foretold_waits.1.saturating_sub(was.foretold_waits.1) as f64 / 1e6,
            s.other_waits.0.saturating_sub(was.other_waits.0),
            s.other_waits.1.saturating_sub(was.other_waits.1) as f64 / 1e6,
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
        self.gate.marks.lift_queue();
        REAL.synchronize();
        end_drain();
        self.drained = true;
    }
}
