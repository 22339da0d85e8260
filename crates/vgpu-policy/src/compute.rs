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

/// What a paced window that starved the GPU multiplies the learned GPU time per launch by
/// ([`DutyCycle::finish_paced`]).
pub const PACE_PROBE: f64 = 0.9;

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

    /// The paced launch budget of a contended window (see [`crate::share::PACE_DEPTH`]):
    /// launches admitted `elapsed` after the window's first launch may run at most about
    /// `depth` ahead of the GPU, at the learned GPU time per launch. That is
    /// `⌊(elapsed + depth) / per⌋ + 1` launches, so the next launch is admitted `depth` before
    /// the GPU runs dry, whatever the kernels' length. Before anything is learned, no pacing
    /// (`u64::MAX`).
    pub fn paced(&self, elapsed: Duration, depth: Duration) -> u64 {
        match self.per_launch {
            Some(per) if per > 0.0 => {
                let ahead = ((elapsed + depth).as_secs_f64() / per).floor();
                // Saturating float-to-integer cast of a value clamped to [0, 1e15].
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let n = (ahead + 1.0).clamp(0.0, 1e15) as u64;
                n
            }
            _ => u64::MAX,
        }
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

    /// [`Self::finish`] for a window that was paced ([`Self::paced`]) with `depth`.
    ///
    /// Its launches followed the pace, so busy / launches measures the GPU only when the GPU
    /// never ran dry: then the work still queued at the close (the drain) is about `depth`, and
    /// the GPU time per launch is learned as usual. When launches waited for the pace
    /// (`pace_limited`) and the drain found (almost) nothing queued, the pace was slower than
    /// the GPU — the learned time per launch is too long (learned while the GPU was shared, say),
    /// and busy / launches would only confirm it — so it is shortened by [`PACE_PROBE`] a window
    /// until the queue stays fed; a drain past `depth` then measures it again. Otherwise (the
    /// program itself stopped launching) nothing is learned from the window.
    pub fn finish_paced(
        &mut self,
        r: WindowReport,
        depth: Duration,
        pace_limited: bool,
    ) -> Duration {
        if r.launches == 0 {
            return Duration::ZERO;
        }
        let drain = r.drain.as_secs_f64();
        let depth = depth.as_secs_f64();
        let fed = drain >= 0.5 * depth;
        let starved = pace_limited && drain < 0.25 * depth;
        if let (true, Some(per)) = (starved, self.per_launch) {
            self.per_launch = Some(per * PACE_PROBE);
        }
        self.learn(r, fed || self.per_launch.is_none());
        Duration::from_secs_f64(r.busy.as_secs_f64() / self.share)
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

    #[test]
    fn a_paced_window_learns_only_what_the_gpu_showed() {
        let depth = Duration::from_millis(2);
        let mut c = DutyCycle::new(20, DEFAULT_PERIOD);
        // Learned 11.5 µs a launch (while the GPU was shared, say); the GPU does 10.
        c.finish(WindowReport {
            busy: Duration::from_micros(11_500),
            launches: 1000,
            drain: Duration::from_millis(5),
        });
        assert_eq!(c.per_launch(), Some(Duration::from_nanos(11_500)));
        // Paced at 11.5 µs, the GPU ran dry: launches waited for the pace and the drain found
        // nothing queued. busy / launches (11.5 µs) would confirm the estimate; it is shortened.
        let starved = WindowReport {
            busy: Duration::from_millis(10),
            launches: 870,
            drain: Duration::from_micros(20),
        };
        c.finish_paced(starved, depth, true);
        assert_eq!(c.per_launch(), Some(Duration::from_nanos(10_350)));
        c.finish_paced(starved, depth, true);
        assert_eq!(c.per_launch(), Some(Duration::from_nanos(9_315)));
        // Now the pace runs ahead of the GPU: a full depth queued at the close, so the GPU was
        // never idle and busy / launches (10 µs) is its time per launch.
        c.finish_paced(
            WindowReport {
                busy: Duration::from_millis(10),
                launches: 1000,
                drain: Duration::from_millis(2),
            },
            depth,
            true,
        );
        assert_eq!(c.per_launch(), Some(Duration::from_nanos(9_658)));
        // The program stopped launching by itself (no launch waited for the pace): nothing
        // is learned from its empty drain.
        c.finish_paced(starved, depth, false);
        assert_eq!(c.per_launch(), Some(Duration::from_nanos(9_658)));
    }

    #[test]
    fn a_paced_budget_keeps_the_queue_short() {
        let mut c = DutyCycle::new(70, DEFAULT_PERIOD);
        let depth = Duration::from_millis(2);
        assert_eq!(c.paced(Duration::ZERO, depth), u64::MAX, "nothing learned");
        // 0.5 ms a launch, learned.
        c.finish(WindowReport {
            busy: Duration::from_millis(40),
            launches: 80,
            drain: Duration::from_millis(30),
        });
        assert_eq!(c.per_launch(), Some(Duration::from_micros(500)));
        assert_eq!(
            c.paced(Duration::ZERO, depth),
            5,
            "2 ms ahead, and the next"
        );
        assert_eq!(c.paced(Duration::from_millis(10), depth), 25);
        // Kernels longer than the depth: one at a time.
        let mut long = DutyCycle::new(70, DEFAULT_PERIOD);
        long.finish(WindowReport {
            busy: Duration::from_millis(88),
            launches: 8,
            drain: Duration::from_millis(80),
        });
        assert_eq!(long.paced(Duration::from_micros(8_900), depth), 1);
        assert_eq!(
            long.paced(Duration::from_micros(9_100), depth),
            2,
            "about 2 ms before it ends"
        );
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
}
