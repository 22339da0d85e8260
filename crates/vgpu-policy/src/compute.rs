//! The compute limiter's controller: a measured duty cycle.
//!
//! A container limited to N % of a GPU runs its work in *windows*. While a window is open its
//! launches go straight to the driver; when it closes, launches wait on the host, the work
//! already queued on the GPU drains, and the container stays off the GPU for as long as the
//! window lasted times (100 − N) / N. The window's length is *measured* (from the first
//! launch to the moment the GPU has finished everything submitted in it), never estimated from
//! grid sizes, so whatever the kernels are — long, short, few blocks or many, queued deep or
//! synchronised after each one — the container's work occupies the GPU N % of the time, which
//! is N % of its unlimited throughput.
//!
//! The off time is kept as a *schedule* shared by all processes of the container (in its
//! region): [`schedule`] moves the container's "next window may open at" time forward by
//! busy / share from the window's start. Processes of one container thus share one duty cycle,
//! and a window that opens a little late (a sleep's jitter, up to [`SLACK`]) is repaid rather
//! than lost.
//!
//! Two refinements keep every one-second window accurate, not only the average:
//! - **the shared schedule** above, which carries lateness forward;
//! - **bounded queues**: a program can queue seconds of work in microseconds. The controller
//!   learns how much GPU time a launch takes from past windows and gives each window a launch
//!   budget that fills about its nominal length; a launch past the budget waits for the next
//!   window. So the drain at a window's end stays short and no window overshoots by much.
//!
//! This module is plain, clock-free logic: the caller passes durations in. The preload drives it
//! from one controller thread per device; the unit tests drive it with a simulated GPU.
use std::time::Duration;

/// The nominal window period: one on-window and its off-window take about this long.
pub const DEFAULT_PERIOD: Duration = Duration::from_millis(50);

/// The window period of a device that is measured but not limited (`VGPU_MEASURE_GPU_TIME`):
/// nothing waits for a schedule there, so each window costs only its drain's refill bubble;
/// longer windows make that four times rarer, and still report GPU time several times a second.
pub const MEASURE_PERIOD: Duration = Duration::from_millis(200);

/// Launches admitted in the first window, before anything is learned; the budget then grows
/// (fourfold while nothing is queued) each window the budget rather than the clock closed.
const INITIAL_BUDGET: u64 = 8;

/// How far one paced window may move the learned GPU time per launch: by the square root of
/// (measured drain / estimated queue), that ratio first bounded to `[1 / PACE_STEP, PACE_STEP]`
/// ([`DutyCycle::finish_paced`]).
pub const PACE_STEP: f64 = 2.0;

/// A window's shortest submission time.
const MIN_SUBMIT: Duration = Duration::from_micros(500);

/// What the controller allows in the next window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowPlan {
    /// How long launches may be submitted before the window closes.
    pub submit: Duration,
    /// How many launches the window admits (`u64::MAX`: no bound yet).
    pub launches: u64,
}

/// The pace of one contended window ([`crate::share::PACE_DEPTH`]): how far its admitted launches
/// are estimated to run ahead of the GPU. Each launch admitted adds the learned GPU time per
/// launch to an estimate of when the GPU will have finished what it was given, an estimate
/// that never runs behind real time: while the program pauses inside the window (host work, or
/// a wait for its own GPU work), the GPU runs dry and nothing is banked. (A pace counted from
/// the window's first launch, `⌊(elapsed + depth) / per⌋ + 1`, let every launch a pause had
/// "earned" through at once after it: beside a training loop that waits for its GPU work every
/// step, a request then waited for a whole step's queue.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pace {
    /// When the GPU is estimated to finish the launches counted so far (ns).
    done: u64,
    /// The launches counted so far.
    counted: u64,
    /// The previous look (ns): launches counted since are taken as admitted then.
    looked: u64,
}

impl Pace {
    /// A window's pace, opened at `now` with nothing admitted.
    pub fn new(now: u64) -> Self {
        Pace {
            done: now,
            counted: 0,
            looked: now,
        }
    }

    /// The launch budget at `now` with `launched` launches admitted so far, at `per` seconds of
    /// GPU time a launch: every launch the estimated queue leaves room for within `depth`, and
    /// the next (admitted `depth` before the GPU would run dry).
    // Float to integer casts saturate (and map NaN to 0); values are clamped first.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    pub fn budget(&mut self, per: f64, now: u64, launched: u64, depth: Duration) -> u64 {
        let per_ns = (per * 1e9).clamp(1.0, 1e15);
        let new = launched.saturating_sub(self.counted) as f64;
        let work = (new * per_ns).clamp(0.0, 1e18) as u64;
        self.budget_work(work, per, now, launched, depth)
    }

    /// [`Self::budget`] with the GPU time of the launches admitted since the last look given
    /// (`work`, ns: the sum of their learned [`Costs`]); `per` (seconds) sizes the room for the
    /// launches to come, whose kernels are not known yet.
    // Float to integer casts saturate (and map NaN to 0); values are clamped first.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    pub fn budget_work(
        &mut self,
        work: u64,
        per: f64,
        now: u64,
        launched: u64,
        depth: Duration,
    ) -> u64 {
        let per_ns = (per * 1e9).clamp(1.0, 1e15);
        self.done = self.done.max(self.looked).saturating_add(work);
        self.counted = self.counted.max(launched);
        self.looked = self.looked.max(now);
        let queued = self.done.saturating_sub(now);
        let depth = u64::try_from(depth.as_nanos()).unwrap_or(u64::MAX);
        if queued > depth {
            return self.counted;
        }
        let room = ((depth - queued) as f64 / per_ns).floor().clamp(0.0, 1e15) as u64;
        self.counted.saturating_add(room).saturating_add(1)
    }

    /// When the budget next grows past the launches counted (ns): `depth` before the GPU is
    /// estimated to run dry.
    pub fn next_room(&self, depth: Duration) -> u64 {
        let depth = u64::try_from(depth.as_nanos()).unwrap_or(u64::MAX);
        self.done.max(self.looked).saturating_sub(depth)
    }

    /// The work estimated still queued at `now` (ns): what the GPU should take to finish the
    /// launches counted, if the time per launch is right.
    pub fn queued(&self, now: u64) -> u64 {
        self.done.saturating_sub(now)
    }

    /// The GPU was seen at `now` to have finished every launch before a mark, and the launches
    /// counted after it are estimated at `queued` ns: the estimate starts again from that,
    /// forward or back, so an error in the learned times never outlives the queue it was in.
    pub fn anchor(&mut self, now: u64, queued: u64) {
        self.done = now.saturating_add(queued);
        self.looked = self.looked.max(now);
    }
}

/// At most this many kernels have a learned GPU time each ([`Costs`]); later ones count at the
/// mean time per launch.
pub const COSTS_KEPT: usize = 4096;

/// How far one timed segment may move the times of its kernels: its measured / estimated time
/// is first bounded to `[1 / COST_STEP, COST_STEP]` (a segment the GPU's time slicer stretched,
/// or one that began with a context switch, teaches little).
const COST_STEP: f64 = 4.0;

/// The GPU time of each kernel (launch key: a function, or a graph), learned from *timed
/// segments*: the GPU time between two marks a paced program's queue held back to back, and
/// the keys of the launches between them. A pace that adds each admitted launch's own time
/// ([`Pace::budget_work`]) knows what its queue holds whatever the mix of long and short
/// kernels, where one counted in launches of the mean time lets a queue of matrix products run
/// three times its depth and starves the GPU in a run of short kernels.
#[derive(Clone, Debug, Default)]
pub struct Costs {
    /// Learned GPU time per key (ns).
    ns: std::collections::HashMap<u64, f64>,
}

impl Costs {
    /// The learned GPU time of a launch of `key` (ns), if any.
    pub fn get(&self, key: u64) -> Option<f64> {
        self.ns.get(&key).copied()
    }

    /// Kernels with a learned time.
    pub fn len(&self) -> usize {
        self.ns.len()
    }

    /// Whether nothing is learned.
    pub fn is_empty(&self) -> bool {
        self.ns.is_empty()
    }

    /// The GPU time of launches of `keys` (ns), each unknown one at `per_ns`; and how many
    /// were unknown.
    // The sum is of finite values clamped to [0, 1e18] before the saturating cast.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    pub fn work(&self, keys: impl IntoIterator<Item = u64>, per_ns: f64) -> (u64, u64) {
        let mut sum = 0.0;
        let mut unknown = 0;
        for k in keys {
            sum += self.get(k).unwrap_or_else(|| {
                unknown += 1;
                per_ns
            });
        }
        (sum.clamp(0.0, 1e18) as u64, unknown)
    }

    /// A timed segment: the launches of `keys` ran back to back in `elapsed_ns` of GPU time.
    /// A segment of one kernel moves that kernel's time halfway to what it took; a longer one
    /// scales the time of each kernel in it by the square root of measured / estimated (unknown
    /// kernels start at `per_ns`), so that a step whose segments cut it at different places
    /// settles on each kernel's time.
    pub fn learn(&mut self, keys: &[u64], elapsed_ns: u64, per_ns: f64) {
        if keys.is_empty() || !per_ns.is_finite() || per_ns <= 0.0 {
            return;
        }
        #[allow(clippy::cast_precision_loss)]
        let elapsed = elapsed_ns as f64;
        if let [k] = keys {
            if let Some(t) = self.ns.get_mut(k) {
                *t = 0.5 * (*t + elapsed.clamp(*t / COST_STEP, *t * COST_STEP));
            } else if self.ns.len() < COSTS_KEPT {
                self.ns.insert(*k, elapsed.max(1.0));
            }
            return;
        }
        let (est, _) = self.work(keys.iter().copied(), per_ns);
        #[allow(clippy::cast_precision_loss)]
        let est = est as f64;
        if est <= 0.0 {
            return;
        }
        let ratio = (elapsed / est).clamp(1.0 / COST_STEP, COST_STEP).sqrt();
        let mut seen: Vec<u64> = Vec::with_capacity(keys.len());
        for &k in keys {
            if seen.contains(&k) {
                continue;
            }
            seen.push(k);
            let known = self.ns.len() < COSTS_KEPT || self.ns.contains_key(&k);
            if known {
                let t = self.ns.entry(k).or_insert(per_ns);
                *t = (*t * ratio).max(1.0);
            }
        }
    }
}

/// What a paced window's launches cost, for its pace: the keys of the launches admitted in the
/// window, in order, priced by the process's [`Costs`], and what timed segments (*marks*) teach.
///
/// The preload records a mark (a CUDA event) on a launch's stream when the pace holds it (the
/// launch waits anyway) and its controller looks at the marks as it raises the pace; the model
/// does the same on its virtual GPU. A mark that completes tells two things: the GPU has
/// finished every launch before it, so the pace restarts from the learned cost of those after
/// it ([`Pace::anchor`]); and, when it was recorded while the previous mark was still queued
/// (the launches between ran back to back), the GPU time between the two marks is the cost of
/// the launches between ([`Costs::learn`]).
#[derive(Clone, Debug, Default)]
pub struct Costing {
    costs: Costs,
    /// The window's admitted launch keys, in order.
    keys: Vec<u64>,
    /// Keys already added to the pace.
    priced: usize,
    /// Admitted launches priced at the mean (no learned cost).
    unknown: u64,
    /// How many of the priced launches were of each key (ordered: the mean is summed the same
    /// way every run, and the model stays deterministic).
    counts: std::collections::BTreeMap<u64, u64>,
    /// The launch count at the last completed mark of the window.
    last: Option<usize>,
}

impl Costing {
    /// A new window: nothing admitted, no mark (what was learned stays).
    pub fn open(&mut self) {
        self.keys.clear();
        self.priced = 0;
        self.unknown = 0;
        self.counts.clear();
        self.last = None;
    }

    /// A launch of `key` was admitted.
    pub fn admitted(&mut self, key: u64) {
        self.keys.push(key);
    }

    /// Launches admitted in the window.
    pub fn launches(&self) -> u64 {
        self.keys.len() as u64
    }

    /// The GPU time (ns) of the launches admitted since the last call, at `per` seconds for
    /// a kernel with no learned time: what [`DutyCycle::pace_work`] adds to the pace.
    pub fn new_work(&mut self, per: f64) -> u64 {
        let from = self.priced.min(self.keys.len());
        let (work, unknown) = self
            .costs
            .work(self.keys[from..].iter().copied(), per * 1e9);
        for &k in &self.keys[from..] {
            *self.counts.entry(k).or_insert(0) += 1;
        }
        self.priced = self.keys.len();
        self.unknown += unknown;
        work
    }

    /// The pace's depth: [`crate::share::COSTED_PACE_DEPTH`] while three launches in four of
    /// the window have a learned time, else [`crate::share::PACE_DEPTH`] (a queue counted in
    /// launches of the mean time must stay shallower: its long kernels overrun it).
    pub fn depth(&self) -> Duration {
        if self.costed() {
            crate::share::COSTED_PACE_DEPTH
        } else {
            crate::share::PACE_DEPTH
        }
    }

    /// The mark recorded after the window's first `at` launches completed; `elapsed` (ns) is
    /// the GPU time since the previous completed mark when the launches between ran back to
    /// back. Learns from that segment and returns the learned GPU time of the launches after
    /// the mark (ns), what the pace restarts from ([`Pace::anchor`]), at `per` seconds for a
    /// kernel with no learned time. A mark of an earlier window, or one at or before the last,
    /// returns `None`.
    pub fn mark_done(&mut self, at: u64, elapsed: Option<u64>, per: f64) -> Option<u64> {
        let at = usize::try_from(at).ok()?;
        if at > self.keys.len() || self.last.is_some_and(|l| at <= l) {
            return None;
        }
        if let (Some(from), Some(e)) = (self.last, elapsed) {
            self.costs.learn(&self.keys[from..at], e, per * 1e9);
        }
        self.last = Some(at);
        Some(
            self.costs
                .work(self.keys[at..].iter().copied(), per * 1e9)
                .0,
        )
    }

    /// Whether three launches in four of the window have a learned time.
    fn costed(&self) -> bool {
        !self.costs.is_empty() && self.unknown * 4 <= self.keys.len() as u64
    }

    /// The learned mean GPU time of the window's priced launches (seconds), when they are
    /// priced ([`Self::depth`]), at `per` for those with no learned time. From the count of
    /// each kernel, so that a window's close, which gives the GPU to the next container after
    /// it, does not price thousands of launches again (2 600 hash lookups in a window of 10 µs
    /// kernels; run 39's gap between two containers' windows was 0.06 ms longer than the count
    /// pace's, and run 40's, with this and `MARKS_IN_FLIGHT`, was back to it).
    pub fn mean(&self, per: f64) -> Option<f64> {
        if !self.costed() || self.priced == 0 {
            return None;
        }
        let work: f64 = self
            .counts
            .iter()
            .map(|(k, &n)| self.costs.get(*k).unwrap_or(per * 1e9) * n as f64)
            .sum();
        #[allow(clippy::cast_precision_loss)]
        Some(work / 1e9 / self.priced as f64)
    }

    /// What was learned.
    pub fn costs(&self) -> &Costs {
        &self.costs
    }
}

/// A fed paced window teaches the GPU time per launch busy / launches (a first one, or a longer
/// one) only if it lasted this many pace depths (see [`DutyCycle::finish_paced`]).
const FIRST_PACE_WINDOWS: f64 = 4.0;

/// What happened in a window that just ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowReport {
    /// From the window's first launch to the moment the GPU had finished all its work.
    pub busy: Duration,
    /// Launches admitted in the window.
    pub launches: u64,
    /// The time the drain took (from closing to finished).
    pub drain: Duration,
}

/// How late a window may open and still be counted from the schedule rather than from its
/// actual start: covers sleep jitter, but never banks idle time as credit.
pub const SLACK: Duration = Duration::from_millis(2);

/// The container's next opening time after a window that started at `first` and earned
/// `credit` (its busy time / share), given the previous next opening time `next`; all in
/// nanoseconds of one monotonic clock.
pub fn schedule(next: u64, first: u64, credit: Duration) -> u64 {
    let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    let from = next.max(first.saturating_sub(nanos(SLACK)));
    from.saturating_add(nanos(credit))
}

/// The duty-cycle controller of one device in one process: plans windows and learns the launch
/// budget. The off time itself is the container's [`schedule`].
#[derive(Clone, Debug)]
pub struct DutyCycle {
    share: f64,
    period: Duration,
    budget: u64,
    /// GPU time per launch, learned (seconds), when known.
    per_launch: Option<f64>,
}

impl DutyCycle {
    /// A controller for `percent` (1..=99) of the GPU, with windows of about `period`.
    pub fn new(percent: u8, period: Duration) -> Self {
        let share = f64::from(percent.clamp(1, 99)) / 100.0;
        DutyCycle {
            share,
            period,
            budget: INITIAL_BUDGET,
            per_launch: None,
        }
    }

    /// The share, 0..1.
    pub fn share(&self) -> f64 {
        self.share
    }

    /// Changes the share (live limit changes); keeps what was learned.
    pub fn set_percent(&mut self, percent: u8) {
        self.share = f64::from(percent.clamp(1, 99)) / 100.0;
    }

    /// Changes the window period (a device going from limited to measured only, or back);
    /// keeps what was learned: the launch budget follows from the GPU time per launch.
    pub fn set_period(&mut self, period: Duration) {
        self.period = period;
    }

    /// The target on-time of a window.
    fn target_on(&self) -> f64 {
        self.period.as_secs_f64() * self.share
    }

    /// The plan for the next window.
    pub fn plan(&self) -> WindowPlan {
        let submit = Duration::from_secs_f64(self.target_on()).max(MIN_SUBMIT);
        WindowPlan {
            submit,
            launches: self.budget,
        }
    }

    /// The plan for the next window when other processes wait for the token (B): the launch
    /// budget is capped at [`crate::share::CONTENDED_BUDGET`] × what fills the target on-time at
    /// the learned GPU time per launch, so that a budget grown while alone (or misled by the
    /// program's own synchronisations) does not run a window several times its target while
    /// others wait. Uncontended, or before anything is learned, it is [`Self::plan`].
    pub fn plan_contended(&self, contended: bool) -> WindowPlan {
        let mut plan = self.plan();
        if let (true, Some(per)) = (contended, self.per_launch)
            && per > 0.0
        {
            // Saturating float-to-integer cast of a value clamped to [1, 1e15].
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let cap = (crate::share::CONTENDED_BUDGET * self.target_on() / per)
                .ceil()
                .clamp(1.0, 1e15) as u64;
            plan.launches = plan.launches.min(cap);
        }
        plan
    }

    /// The GPU time per launch learned so far.
    pub fn per_launch(&self) -> Option<Duration> {
        self.per_launch
            .filter(|p| *p > 0.0)
            .map(Duration::from_secs_f64)
    }

    /// The paced launch budget of a contended window at `now`, `launched` launches in (see
    /// [`crate::share::PACE_DEPTH`] and [`Pace`]): launches may run about `depth` ahead of the
    /// GPU at the learned GPU time per launch, whatever the kernels' length. Before anything is
    /// learned, no pacing (`u64::MAX`).
    pub fn pace(&self, pace: &mut Pace, now: u64, launched: u64, depth: Duration) -> u64 {
        match self.per_launch {
            Some(per) if per > 0.0 => pace.budget(per, now, launched, depth),
            _ => u64::MAX,
        }
    }

    /// [`Self::pace`] with the GPU time of the launches admitted since the last look given
    /// (`work`, ns: their [`Costs`]).
    pub fn pace_work(
        &self,
        pace: &mut Pace,
        now: u64,
        launched: u64,
        work: u64,
        depth: Duration,
    ) -> u64 {
        match self.per_launch {
            Some(per) if per > 0.0 => pace.budget_work(work, per, now, launched, depth),
            _ => u64::MAX,
        }
    }

    /// One look of a paced window whose launches are priced ([`Costing`]): adds the launches
    /// admitted since the last look at their learned GPU time, restarts the estimate from each
    /// mark seen completed (`marks`: the launch count it was recorded at, the GPU time since the
    /// previous completed mark when the launches between ran back to back, and when the
    /// completion was seen), and returns the paced launch budget at `now`, `launched` launches
    /// in, at the window's depth ([`Costing::depth`]). Before a time per launch is learned, no
    /// pacing (`u64::MAX`).
    pub fn pace_costed(
        &self,
        pace: &mut Pace,
        costing: &mut Costing,
        now: u64,
        launched: u64,
        marks: impl IntoIterator<Item = (u64, Option<u64>, u64)>,
    ) -> u64 {
        let Some(per) = self.per_launch.filter(|p| *p > 0.0) else {
            return u64::MAX;
        };
        let depth = costing.depth();
        let work = costing.new_work(per);
        pace.budget_work(work, per, now, launched, depth);
        for (at, elapsed, seen) in marks {
            if let Some(queued) = costing.mark_done(at, elapsed, per) {
                pace.anchor(seen, queued);
            }
        }
        pace.budget_work(0, per, now, launched, depth)
    }

    /// At a paced window's close: the work its pace estimates still queued, counting the
    /// `admitted` launches, when the pace, not the program, set the rate up to the close
    /// ([`crate::share::pace_limited`] of the last time the pace held a launch, `held_at`, and
    /// of the last launch, `last_launch`); `None` otherwise. What [`Self::finish_paced`] steers
    /// by.
    pub fn queued_at_close(
        &self,
        pace: &mut Pace,
        held_at: u64,
        last_launch: u64,
        now: u64,
        admitted: u64,
        depth: Duration,
    ) -> Option<Duration> {
        if !crate::share::pace_limited(held_at, last_launch, now) {
            return None;
        }
        self.pace(pace, now, admitted, depth);
        Some(Duration::from_nanos(pace.queued(now)))
    }

    /// Records a finished window and returns the wall time it is worth at this share
    /// (busy / share): the container's schedule moves forward by that much from the window's
    /// start. A window in which nothing was launched is worth nothing.
    pub fn finish(&mut self, r: WindowReport) -> Duration {
        if r.launches == 0 {
            return Duration::ZERO;
        }
        self.learn(r, true);
        Duration::from_secs_f64(r.busy.as_secs_f64() / self.share)
    }

    /// [`Self::finish`] for a window that was paced ([`Self::pace`]) with `depth`.
    ///
    /// The pace needs the GPU time per launch that keeps the real queue about `depth` deep.
    /// Two measurements steer it, one each way:
    /// - **shorter, by the drain**: `queued` is the work the pace estimated still queued at the
    ///   close, given when the pace (not the program) set the rate up to the close
    ///   ([`crate::share::pace_limited`]); a drain shorter than that shows the pace slower than
    ///   the GPU (it starved the GPU, and the container is charged for the gaps), and the time
    ///   per launch is multiplied by the square root of drain / estimate (at least
    ///   1 / [`PACE_STEP`]). Only from a window at least two depths long with an estimated
    ///   queue of a quarter depth or more. A *longer* drain does not lengthen it: the context
    ///   switch a window begins with lies in its queue as long as the GPU never runs dry, and
    ///   lengthening by it every window starved the GPU (the model's robustness sweep, 7.7
    ///   points off at a 100 µs switch).
    /// - **longer, by the mean**: a fed window (drain at least half of `depth`: the GPU had
    ///   work at the close) at least [`FIRST_PACE_WINDOWS`] depths long whose busy / launches,
    ///   an upper bound of the time per launch, is longer moves it halfway there. (Before:
    ///   only a starved window taught anything, by 10 % at a time, so a PyTorch training step's
    ///   short kernels ratcheted it down from 61 to 36 µs against a mean of 54, and the queue
    ///   a waiter found grew to 2 ms: the H200's run 31.)
    ///
    /// A program paced from its start has no time per launch yet: the first is busy / launches
    /// of such a fed, long window.
    pub fn finish_paced(
        &mut self,
        r: WindowReport,
        depth: Duration,
        queued: Option<Duration>,
    ) -> Duration {
        if r.launches == 0 {
            return Duration::ZERO;
        }
        let drain = r.drain.as_secs_f64();
        let depth = depth.as_secs_f64();
        let busy = r.busy.as_secs_f64();
        let fed_long = drain >= 0.5 * depth && busy >= FIRST_PACE_WINDOWS * depth;
        let mean = busy / r.launches as f64;
        match (self.per_launch, queued.map(|q| q.as_secs_f64())) {
            (Some(per), Some(q)) if q >= 0.25 * depth && busy >= 2.0 * depth && drain < q => {
                let ratio = (drain / q).max(1.0 / PACE_STEP);
                self.per_launch = Some(per * ratio.sqrt());
            }
            (Some(per), _) if fed_long && mean > per => {
                self.per_launch = Some(0.5 * (per + mean));
            }
            (None, _) if fed_long => {
                // Only from a window several depths long: its busy time includes the context
                // switch it began with, and 8 launches of 10 µs after a 1 ms switch would teach
                // 136 µs a launch (the model's robustness sweep).
                self.per_launch = Some(mean);
            }
            _ => {}
        }
        self.learn(r, self.per_launch.is_none());
        Duration::from_secs_f64(busy / self.share)
    }

    /// [`Self::finish_paced`] for a window whose launches were priced ([`Costing`]): the time
    /// per launch (what sizes the pace's room and the contended budget, and prices a kernel not
    /// learned yet) becomes the learned mean of the window's launches — the drain no longer
    /// steers it, since the pace did not count in it. A window not priced is
    /// [`Self::finish_paced`]'s.
    pub fn finish_costed(
        &mut self,
        r: WindowReport,
        costing: &Costing,
        queued: Option<Duration>,
    ) -> Duration {
        let per = self.per_launch.unwrap_or(0.0);
        match costing.mean(per) {
            Some(mean) if r.launches > 0 && per > 0.0 => {
                self.per_launch = Some(mean);
                self.learn(r, false);
                Duration::from_secs_f64(r.busy.as_secs_f64() / self.share)
            }
            _ => self.finish_paced(r, costing.depth(), queued),
        }
    }

    /// Learns the GPU time per launch and sets the next window's launch budget so that the
    /// work admitted fills about the target on-time, keeping the drain short.
    // Float to integer casts saturate (and map NaN to 0); the budget is clamped to 1e15 first.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    fn learn(&mut self, r: WindowReport, per_launch: bool) {
        let target = self.target_on();
        let busy = r.busy.as_secs_f64();
        let drain = r.drain.as_secs_f64();
        // The drain shows queued work; when there was some, the GPU was the bottleneck and
        // busy / launches is the GPU time per launch. Otherwise the host was (launches were
        // spread out or synchronised), and the budget is not what limits the window.
        if per_launch && drain > 0.1 * target && r.launches > 0 {
            let per = busy / r.launches as f64;
            self.per_launch = Some(match self.per_launch {
                Some(old) => 0.5 * old + 0.5 * per,
                None => per,
            });
        }
        let fit = match self.per_launch {
            Some(per) if per > 0.0 => (target / per).floor().max(1.0),
            _ => 1.0,
        };
        if drain > 0.25 * target {
            // Too much was queued: admit what fills the target.
            self.budget = fit as u64;
        } else if r.launches >= self.budget {
            // The budget, not the clock, closed the window and little was queued: allow more,
            // fast (a program of 20 µs kernels needs over a thousand launches a window).
            let grow = if drain < 0.1 * target { 4.0 } else { 1.5 };
            self.budget = ((self.budget as f64) * grow).ceil().max(fit).min(1e15) as u64;
        }
    }
}

#[cfg(test)]
// A simulation in floating point: its casts to whole nanoseconds and steps saturate.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
mod tests {
    use super::*;

    /// A simulated GPU running one program: the program launches kernels of `kernel` GPU time,
    /// `host` apart, optionally synchronising after each; the controller gates it. Returns the
    /// GPU time the program got per simulated second, for each second of `seconds`.
    fn simulate(percent: u8, kernel: f64, host: f64, sync_each: bool, seconds: usize) -> Vec<f64> {
        let mut c = DutyCycle::new(percent, DEFAULT_PERIOD);
        let mut now = 0.0f64;
        let mut gpu_free_at = 0.0f64;
        let mut per_second = vec![0.0; seconds];
        let add_busy = |from: f64, to: f64, per_second: &mut Vec<f64>| {
            let mut t = from;
            while t < to {
                let s = t.floor() as usize;
                let end = to.min(s as f64 + 1.0);
                if s < per_second.len() {
                    per_second[s] += end - t;
                }
                t = end;
            }
        };
        let mut next = 0u64;
        let ns = |t: f64| (t * 1e9) as u64;
        while now < seconds as f64 {
            // Wait for the container's schedule; a sleep wakes up to 0.3 ms late.
            now = now.max(next as f64 / 1e9) + 0.0003;
            let plan = c.plan();
            let close = now + plan.submit.as_secs_f64();
            let mut launches = 0u64;
            let mut first: Option<f64> = None;
            // Submit until the window closes or the budget is spent.
            while now < close && launches < plan.launches {
                let start = now.max(gpu_free_at);
                let end = start + kernel;
                add_busy(start, end, &mut per_second);
                gpu_free_at = end;
                first.get_or_insert(now);
                launches += 1;
                if sync_each {
                    // Wait for the kernel, then do host work before the next launch.
                    now = now.max(end);
                }
                now += host;
            }
            // Close and drain.
            let closed = now;
            let drained = closed.max(gpu_free_at);
            let report = WindowReport {
                busy: Duration::from_secs_f64(drained - first.unwrap_or(drained)),
                launches,
                drain: Duration::from_secs_f64(drained - closed),
            };
            let credit = c.finish(report);
            if let Some(f) = first {
                next = schedule(next, ns(f), credit);
            }
            now = drained;
        }
        per_second
    }

    fn assert_share(percent: u8, got: &[f64], tolerance: f64, what: &str) {
        let want = f64::from(percent) / 100.0;
        for (i, g) in got.iter().enumerate().skip(1) {
            assert!(
                (g - want).abs() <= tolerance,
                "{what}: second {i}: {g:.3} of the GPU, want {want:.2} ± {tolerance}: {got:?}"
            );
        }
    }

    #[test]
    fn deep_async_queues_of_large_kernels() {
        for p in [10, 25, 50, 75] {
            let got = simulate(p, 0.003, 0.000_005, false, 6);
            assert_share(p, &got, 0.03, "3 ms kernels queued");
        }
    }

    #[test]
    fn sync_after_every_kernel() {
        for p in [10, 25, 50, 75] {
            // The GPU alone is busy kernel/(kernel+host) of the time: the share is of that.
            let alone = 0.0008 / (0.0008 + 0.0002);
            let got: Vec<f64> = simulate(p, 0.0008, 0.0002, true, 6)
                .iter()
                .map(|g| g / alone)
                .collect();
            assert_share(p, &got, 0.03, "sync each");
        }
    }

    #[test]
    fn many_short_kernels() {
        for p in [10, 25, 50, 75] {
            let got = simulate(p, 0.000_02, 0.000_004, false, 6);
            assert_share(p, &got, 0.03, "20 µs kernels");
        }
    }

    #[test]
    fn an_idle_window_is_worth_nothing() {
        let mut c = DutyCycle::new(25, DEFAULT_PERIOD);
        let credit = c.finish(WindowReport {
            busy: Duration::ZERO,
            launches: 0,
            drain: Duration::ZERO,
        });
        assert_eq!(credit, Duration::ZERO);
        assert_eq!(c.plan().launches, INITIAL_BUDGET);
    }

    #[test]
    fn a_window_is_worth_its_busy_time_over_the_share() {
        let mut c = DutyCycle::new(25, DEFAULT_PERIOD);
        let r = WindowReport {
            busy: Duration::from_millis(10),
            launches: 5,
            drain: Duration::ZERO,
        };
        assert_eq!(c.finish(r), Duration::from_millis(40));
    }

    #[test]
    fn the_schedule_repays_jitter_but_banks_no_idle_time() {
        let ms = 1_000_000u64;
        let credit = Duration::from_millis(40);
        // On time: from the schedule.
        assert_eq!(schedule(100 * ms, 100 * ms, credit), 140 * ms);
        // Opened 1 ms late (a sleep's jitter): still counted from the schedule.
        assert_eq!(schedule(100 * ms, 101 * ms, credit), 140 * ms);
        // Opened long after (the container was idle): counted from (start − slack), so idle
        // time is never a credit.
        assert_eq!(schedule(100 * ms, 500 * ms, credit), 538 * ms);
        // Two processes of one container, one after the other, share the schedule.
        let a = schedule(0, 10 * ms, credit);
        let b = schedule(a, a, credit);
        assert_eq!(b, a + 40 * ms);
    }

    #[test]
    fn the_budget_bounds_the_queue() {
        let mut c = DutyCycle::new(10, DEFAULT_PERIOD);
        // 1000 launches of 1 ms were queued in a 5 ms window: a 1 s drain.
        c.finish(WindowReport {
            busy: Duration::from_secs(1),
            launches: 1000,
            drain: Duration::from_millis(995),
        });
        assert_eq!(c.plan().launches, 5);
    }

    #[test]
    fn contention_caps_a_grown_budget() {
        let mut c = DutyCycle::new(30, DEFAULT_PERIOD);
        // 1 ms a launch, learned; then the budget grows fourfold in windows the program's own
        // syncs emptied.
        c.finish(WindowReport {
            busy: Duration::from_millis(15),
            launches: 15,
            drain: Duration::from_millis(10),
        });
        for _ in 0..3 {
            let b = c.plan().launches;
            c.finish(WindowReport {
                busy: Duration::from_millis(15),
                launches: b,
                drain: Duration::ZERO,
            });
        }
        assert!(c.plan().launches > 100, "{:?}", c.plan());
        assert_eq!(c.plan_contended(false), c.plan());
        assert_eq!(c.plan_contended(true).launches, 19, "1.25 × 15 ms / 1 ms");
        // Nothing learned yet: no cap.
        let fresh = DutyCycle::new(30, DEFAULT_PERIOD);
        assert_eq!(fresh.plan_contended(true), fresh.plan());
    }

    /// A controller at `percent` that has learned `per` a launch (from one window of 1000
    /// launches that queued half its work).
    fn learned(percent: u8, per: Duration) -> DutyCycle {
        let mut c = DutyCycle::new(percent, DEFAULT_PERIOD);
        c.finish(WindowReport {
            busy: per * 1000,
            launches: 1000,
            drain: per * 500,
        });
        assert_eq!(c.per_launch(), Some(per));
        c
    }

    #[test]
    fn a_paced_window_steers_the_time_per_launch_by_its_drain() {
        let depth = Duration::from_millis(1);
        // Learned 11.5 µs a launch (while the GPU was shared, say); the GPU does 10.
        let mut c = learned(20, Duration::from_nanos(11_500));
        // Paced windows: the pace estimates 1 ms queued at the close; at the time per launch
        // in use the GPU really holds 1 ms × 10 / estimate, less: the pace starves the GPU,
        // and the ratio shortens the estimate.
        let window = |c: &DutyCycle| {
            let per = c.per_launch().unwrap().as_secs_f64();
            WindowReport {
                busy: Duration::from_millis(10),
                launches: 1000,
                drain: Duration::from_secs_f64(1e-3 * 10e-6 / per),
            }
        };
        let mut seen = vec![];
        for _ in 0..8 {
            let r = window(&c);
            c.finish_paced(r, depth, Some(depth));
            seen.push(c.per_launch().unwrap().as_nanos());
        }
        let per = c.per_launch().unwrap().as_secs_f64();
        assert!(
            (per - 10e-6).abs() < 0.05e-6,
            "converges on 10 µs: {seen:?}"
        );
        // More queued than estimated (long kernels among short ones, or the context switch the
        // window began with) does not lengthen it by itself: the switch would then lengthen it
        // every window, and the pace would starve the GPU (the model's robustness sweep).
        c.finish_paced(
            WindowReport {
                busy: Duration::from_millis(10),
                launches: 1000,
                drain: Duration::from_millis(2),
            },
            depth,
            Some(depth),
        );
        assert_eq!(c.per_launch().unwrap().as_secs_f64(), per);
        // A fed window at least four depths long whose launches took longer on average (its
        // busy time / launches, an upper bound) moves it halfway there.
        c.finish_paced(
            WindowReport {
                busy: Duration::from_millis(15),
                launches: 1000,
                drain: Duration::from_micros(600),
            },
            depth,
            None,
        );
        let longer = c.per_launch().unwrap().as_secs_f64();
        assert!(
            (longer - 0.5 * (per + 15e-6)).abs() < 1e-9,
            "{longer} {per}"
        );
        // The program stopped launching by itself (no estimate given), or the window was too
        // short to measure (its drain may hold a context switch): nothing is learned.
        let empty = WindowReport {
            busy: Duration::from_millis(10),
            launches: 870,
            drain: Duration::from_micros(20),
        };
        c.finish_paced(empty, depth, None);
        let short = WindowReport {
            busy: Duration::from_micros(1_500),
            ..empty
        };
        c.finish_paced(short, depth, Some(depth));
        assert_eq!(c.per_launch().unwrap().as_secs_f64(), longer);
    }

    #[test]
    fn the_queue_at_a_close_is_estimated_only_when_the_pace_set_the_rate() {
        let depth = Duration::from_millis(1);
        let us = 1_000;
        let c = learned(50, Duration::from_micros(50));
        let mut p = Pace::new(0);
        // Held at 900 µs, 30 launches admitted by 1 ms (1.5 ms of work): 0.5 ms still queued.
        assert_eq!(
            c.queued_at_close(&mut p, 900 * us, 950 * us, 1_000 * us, 30, depth),
            Some(Duration::from_micros(500))
        );
        // The program stopped launching 1 ms before the close, unheld since: no estimate.
        let mut q = Pace::new(0);
        assert_eq!(
            c.queued_at_close(&mut q, 100 * us, 200 * us, 1_200 * us, 30, depth),
            None
        );
    }

    #[test]
    fn a_program_paced_from_its_start_learns_from_a_long_fed_window() {
        let depth = Duration::from_millis(1);
        let mut c = DutyCycle::new(50, DEFAULT_PERIOD);
        // A short window, and one whose drain shows the GPU ran dry: nothing to learn from.
        for (busy, drain) in [(2_000, 900), (8_000, 100)] {
            c.finish_paced(
                WindowReport {
                    busy: Duration::from_micros(busy),
                    launches: 100,
                    drain: Duration::from_micros(drain),
                },
                depth,
                None,
            );
            assert_eq!(c.per_launch(), None);
        }
        c.finish_paced(
            WindowReport {
                busy: Duration::from_micros(4_700),
                launches: 88,
                drain: Duration::from_micros(900),
            },
            depth,
            None,
        );
        assert_eq!(c.per_launch(), Some(Duration::from_nanos(53_409)));
    }

    #[test]
    fn a_pause_inside_a_paced_window_banks_nothing() {
        let depth = Duration::from_millis(1);
        let per = 50e-6; // 50 µs a launch
        let ms = 1_000_000;
        let mut p = Pace::new(0);
        // At the opening: 1 ms ahead (20 launches) and the next.
        assert_eq!(p.budget(per, 0, 0, depth), 21);
        // 21 launches in, 0.5 ms later the GPU has done 10 of them: room for 10 more.
        assert_eq!(p.budget(per, ms / 2, 21, depth), 31);
        // The program pauses 3 ms (it waits for its own GPU work) and the GPU runs dry. When it
        // launches again it has 1 ms of room, as at the opening, not the 60 launches more that
        // the time since the window's first launch would allow.
        assert_eq!(p.budget(per, 4 * ms, 31, depth), 31 + 21);
        // Given more than `depth` (a burst admitted before anything was learned, say): nothing
        // more until the GPU is estimated `depth` from running dry, then one.
        let mut q = Pace::new(0);
        assert_eq!(q.budget(per, 0, 40, depth), 40);
        assert_eq!(q.next_room(depth), ms);
        assert_eq!(q.budget(per, ms, 40, depth), 41);
    }

    #[test]
    fn a_paced_budget_keeps_the_queue_short() {
        let ms = 1_000_000;
        let mut c = DutyCycle::new(70, DEFAULT_PERIOD);
        let depth = Duration::from_millis(2);
        let mut p = Pace::new(0);
        assert_eq!(c.pace(&mut p, 0, 0, depth), u64::MAX, "nothing learned");
        // 0.5 ms a launch, learned.
        c.finish(WindowReport {
            busy: Duration::from_millis(40),
            launches: 80,
            drain: Duration::from_millis(30),
        });
        assert_eq!(c.per_launch(), Some(Duration::from_micros(500)));
        let mut p = Pace::new(0);
        assert_eq!(c.pace(&mut p, 0, 0, depth), 5, "2 ms ahead, and the next");
        // All 5 admitted; 10 ms later (the GPU ran dry at 2.5 ms): 2 ms ahead again.
        assert_eq!(c.pace(&mut p, 10 * ms, 5, depth), 10);
        // Kernels longer than the depth: one at a time, the next about 2 ms before it ends.
        let mut long = DutyCycle::new(70, DEFAULT_PERIOD);
        long.finish(WindowReport {
            busy: Duration::from_millis(88),
            launches: 8,
            drain: Duration::from_millis(80),
        });
        let mut p = Pace::new(0);
        assert_eq!(long.pace(&mut p, 0, 0, depth), 1);
        assert_eq!(long.pace(&mut p, 8_900_000, 1, depth), 1);
        assert_eq!(p.next_room(depth), 9 * ms);
        assert_eq!(long.pace(&mut p, 9_100_000, 1, depth), 2);
    }

    #[test]
    fn a_longer_period_plans_longer_windows_and_keeps_the_learned_cost() {
        let mut c = DutyCycle::new(100, DEFAULT_PERIOD);
        assert_eq!(c.plan().submit, Duration::from_micros(49_500));
        // 1 ms a launch, learned from a window whose budget (8) was spent with work queued.
        let report = WindowReport {
            busy: Duration::from_millis(8),
            launches: 8,
            drain: Duration::from_millis(7),
        };
        c.finish(report);
        assert_eq!(
            c.plan().launches,
            49,
            "grown to what fills 49.5 ms at 1 ms a launch"
        );
        c.set_period(MEASURE_PERIOD);
        assert_eq!(c.plan().submit, Duration::from_micros(198_000));
        // A drain past a quarter of the new target refits the budget to the longer window.
        c.finish(WindowReport {
            busy: Duration::from_millis(200),
            launches: 200,
            drain: Duration::from_millis(60),
        });
        assert_eq!(c.plan().launches, 198);
    }

    #[test]
    fn marks_price_each_kernel_and_the_window_mean() {
        const A: u64 = 0xa;
        const B: u64 = 0xb;
        let per = 10e-6;
        let mut c = Costing::default();
        c.open();
        for _ in 0..8 {
            c.admitted(A);
        }
        assert_eq!(
            c.new_work(per),
            80_000,
            "unknown kernels at the time per launch"
        );
        assert_eq!(
            c.depth(),
            crate::share::PACE_DEPTH,
            "nothing learned: counted"
        );
        assert_eq!(c.mean(per), None);
        // The first mark only restarts the estimate; the second, recorded while the first was
        // queued, times the six launches between: 120 µs, twice the 60 µs estimated.
        assert_eq!(c.mark_done(2, None, per), Some(60_000));
        assert_eq!(c.mark_done(8, Some(120_000), per), Some(0));
        let a = c.costs().get(A).expect("A learned");
        assert!((a - 10_000.0 * 2f64.sqrt()).abs() < 1.0, "{a}");
        // A mark at or before the last teaches nothing.
        assert_eq!(c.mark_done(8, Some(1), per), None);
        assert_eq!(c.mark_done(3, Some(1), per), None);

        // The next window: three launches in four have a learned time, so it is priced at
        // them and paced at the priced depth; its mean is at what was learned.
        c.open();
        for k in [A, A, A, B] {
            c.admitted(k);
        }
        let work = c.new_work(per);
        assert_eq!(work, (3.0 * a + 10_000.0) as u64);
        assert_eq!(c.depth(), crate::share::COSTED_PACE_DEPTH);
        let mean = c.mean(per).expect("priced");
        assert!((mean * 1e9 - work as f64 / 4.0).abs() < 1.0, "{mean}");
        // Segments of 20 µs kernels move A there.
        for _ in 0..12 {
            c.open();
            for _ in 0..10 {
                c.admitted(A);
            }
            c.new_work(per);
            c.mark_done(1, None, per);
            c.mark_done(10, Some(180_000), per);
        }
        let a = c.costs().get(A).expect("A");
        assert!((a - 20_000.0).abs() < 200.0, "{a}");
    }
}
