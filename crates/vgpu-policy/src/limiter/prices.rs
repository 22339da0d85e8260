//! What each kernel costs on the GPU ([`Prices`]), learned from timing events, and what a
//! timing event adds to what it measures ([`Calibration`]: the restart after an event, the lag
//! of a launch into an empty queue).
use super::*;

/// What each kernel (launch key) costs on the GPU, learned from marks.
///
/// A timing event measures GPU wall time: when another process ran between two events (the
/// GPU's time-slicer preempted the kernel, or switched contexts between it and its events), the
/// time measured includes theirs and the switches'. Such a *shared* sample never raises a price
/// that a clean one set; it prices a kernel that has no clean price (too high a price holds a
/// process back: never too low, never unlimited), and the first clean sample replaces it.
#[derive(Clone, Debug, Default)]
pub struct Prices {
    ns: HashMap<u64, Price>,
    /// Kernels without a price whose one timing so far had a long launch call
    /// ([`LONG_CALL`]): at most what it measured (`Prices::observe_long`).
    long: HashMap<u64, f64>,
}

#[derive(Clone, Copy, Debug)]
struct Price {
    ns: f64,
    /// Set by a sample no other process shared.
    clean: bool,
    /// A clean bracket on a busy stream moved it (the idle lag is learned against it).
    busy: bool,
    /// A clean sample far above the price (more than [`Price::JUMP`] times it), not yet
    /// believed (0: none): one such sample is dropped, the next that agrees with it sets the
    /// price (a held bracket of a 3 µs kernel once measured 12 ms on the H200, and halfway to
    /// it charged the decode service its whole share for 7 % of the GPU, run 61).
    pending: f64,
    /// Clean samples of its kernel since it was last replaced (saturating): those that moved
    /// it, and idle ones of a price busy brackets set (they confirm the kernel is timed again).
    samples: u8,
    /// Set where a shared sample first priced the kernel (or a second long launch call, shared:
    /// [`Prices::observe_long`]), cleared by its next bracket that is not a long call
    /// ([`Prices::single_shared`]).
    single: bool,
}

impl Price {
    /// Clean samples a busy price needs before segments measure the restart against it.
    const STEADY: u8 = 3;

    /// How far above the price a clean sample must be to wait for a second.
    const JUMP: f64 = 4.0;

    fn new(t: f64, clean: bool, busy: bool) -> Self {
        Price {
            ns: t,
            clean,
            busy,
            pending: 0.0,
            samples: u8::from(clean && busy),
            single: false,
        }
    }

    /// A clean sample of the kind that sets it: halfway to it, or, far above the price, only
    /// once a second agrees (within a factor of two).
    fn push(&mut self, t: f64) {
        if t > Self::JUMP * self.ns {
            if self.pending > 0.0 && t <= 2.0 * self.pending && 2.0 * t >= self.pending {
                self.ns = t.min(self.pending);
                self.pending = 0.0;
            } else {
                self.pending = t;
            }
            return;
        }
        self.pending = 0.0;
        self.ns += (t - self.ns) * 0.5;
    }
}

/// Kernels with a price of their own, at most (later ones are priced at the mean).
pub const PRICES_KEPT: usize = 8192;

/// The most a kernel is believed to cost (ns): a timing event that claims more (a clock that
/// jumped, a corrupted event) prices it at this, so that one bad sample cannot charge a
/// container decades and stop it for good (10 s: past any kernel a GPU watchdog lets run).
pub(super) const MAX_PRICE: f64 = 10e9;

impl Prices {
    /// The learned price of `key` (ns).
    pub fn get(&self, key: u64) -> Option<f64> {
        self.ns.get(&key).map(|p| p.ns)
    }

    /// Whether `key`'s price was set by a sample no other process shared.
    pub fn clean(&self, key: u64) -> bool {
        self.ns.get(&key).is_some_and(|p| p.clean)
    }

    /// Whether a clean bracket on a busy stream moved `key`'s price.
    pub fn busy(&self, key: u64) -> bool {
        self.ns.get(&key).is_some_and(|p| p.busy)
    }

    /// Whether `key`'s price is clean, busy and has seen `Price::STEADY` (3) clean samples:
    /// what a segment measures the restart against. One early sample on a loaded host can be
    /// half again the kernel (the simulator's 20 µs kernels: segments taught a 15.4 µs
    /// restart, the cap of half the price, so the price was at least 31 µs), and once the
    /// price came down the kernels were charged half their cost until the segments' median
    /// moved on (0.83 s for 1.1 s of share at 25 %).
    pub fn steady(&self, key: u64) -> bool {
        self.ns
            .get(&key)
            .is_some_and(|p| p.clean && p.busy && p.samples >= Price::STEADY)
    }

    /// Whether `key`'s price rests on one sample, a shared one (an upper bound: another
    /// process's work may be in it): the launches charged it may be refunded by its next
    /// sample (`Decision::refund`).
    pub fn single_shared(&self, key: u64) -> bool {
        self.ns.get(&key).is_some_and(|p| p.single)
    }

    /// `key`'s price (ns), whether it is clean ([`Prices::clean`]) and whether it rests on one
    /// shared sample ([`Prices::single_shared`]), in one lookup.
    pub fn state(&self, key: u64) -> Option<(f64, bool, bool)> {
        self.ns.get(&key).map(|p| (p.ns, p.clean, p.single))
    }

    /// Kernels with a price.
    pub fn len(&self) -> usize {
        self.ns.len()
    }

    /// Whether nothing is priced.
    pub fn is_empty(&self) -> bool {
        self.ns.is_empty()
    }

    /// Moves `key`'s price by a sample `t` (ns) as the type's rules say; `busy`: taken on a
    /// busy stream (the first clean one replaces a price idle brackets set).
    fn update(&mut self, key: u64, t: f64, shared: bool, busy: bool) {
        if !t.is_finite() || t <= 0.0 {
            return;
        }
        // Never under 1 ns (a segment of n launches measured at 1 ns), never past MAX_PRICE.
        let t = t.clamp(1.0, MAX_PRICE);
        let room = self.ns.len() < PRICES_KEPT;
        let busy = busy && !shared;
        self.long.remove(&key);
        let existed = self.ns.contains_key(&key);
        match self.ns.get_mut(&key) {
            // A bracket on an idle stream is off by the idle lag: it never moves what a busy one
            // measured (it teaches the lag instead, `Calibration::idle_lag`, which it could not
            // if it moved the price it is compared with: a 1.5 µs stream on the model learned a
            // fifth of its lag and was charged 2.7× its kernels).
            Some(p) if p.busy && !busy && !shared => {
                p.samples = p.samples.saturating_add(1);
            }
            Some(p) if !shared && !p.clean || busy && !p.busy => {
                *p = Price::new(t, true, busy);
            }
            Some(p) if shared && t < p.ns => {
                // A shared sample is at most what the kernel took with a neighbour's time on
                // top: one lower than the price says the price is too high (a first price a
                // neighbour's time slice was in took a light service eight samples, seconds, to
                // come down by halves, and kept it heavy and held meanwhile: run 54).
                *p = Price::new(t, p.clean, p.busy);
            }
            Some(p) if !shared => {
                p.push(t);
                p.busy |= busy;
                p.samples = p.samples.saturating_add(1);
            }
            Some(p) if !p.clean => {
                // Up by a shared sample, slowly: a neighbour's time is in it.
                p.ns += (t - p.ns) * 0.125;
            }
            Some(_) => {}
            None if room => {
                self.ns.insert(key, Price::new(t, !shared, busy));
            }
            None => {}
        }
        if let Some(p) = self.ns.get_mut(&key) {
            p.single = shared && !existed;
        }
    }

    /// One launch of `key` timed on its own took `t` ns (`shared`: another process ran
    /// meanwhile; `busy`: on a busy stream).
    pub fn observe(&mut self, key: u64, t: f64, shared: bool, busy: bool) {
        self.update(key, t, shared, busy);
    }

    /// A launch of `key` whose launch call was long ([`LONG_CALL`]) took at most `t` ns. The
    /// first such timing of a kernel without a price is only noted (the kernel stays unpriced
    /// and is timed again); a second one prices it at the lower of the two (its calls are
    /// always long: a loaded host). Never moves a price. Returns whether it set one.
    pub fn observe_long(&mut self, key: u64, t: f64, shared: bool) -> bool {
        if let Some(p) = self.ns.get_mut(&key) {
            // A price's second bracket, spent: the kernel is not timed again for it.
            p.single = false;
            return false;
        }
        if !t.is_finite() || t <= 0.0 {
            return false;
        }
        let t = t.clamp(1.0, MAX_PRICE);
        match self.long.remove(&key) {
            Some(first) if self.ns.len() < PRICES_KEPT => {
                let mut p = Price::new(t.min(first), !shared, false);
                p.single = shared;
                self.ns.insert(key, p);
                true
            }
            Some(_) => false,
            None => {
                if self.long.len() < PRICES_KEPT {
                    self.long.insert(key, t);
                }
                false
            }
        }
    }
}

/// What a bracket measures of a kernel beyond its own GPU time, in two parts, each learned.
///
/// * **The restart.** A kernel queued behind another starts as that one drains; one behind a
///   timing event starts only once the event is written. So a bracket on a busy stream
///   measures each kernel some µs longer than it runs among its neighbours, which for short
///   kernels is much of their time (the H200's run 53: the ResNet-50 step's kernels, 22 µs on
///   average, were priced 1.2× their CUPTI time). A *segment* — `n` launches that ran back to
///   back after a mark, up to a hold mark — took their kernels' time plus one such start,
///   where their prices count `n`: the excess over `n − 1` is the restart.
/// * **The idle lag.** On an idle stream the events are reached at once and the kernel only
///   once the launch call has handed it over and the GPU has fetched it; the call's time is
///   subtracted, the fetch is not. An idle bracket of a kernel that busy brackets priced
///   measures the lag. (On the H200 it came out 0–5 µs, a median of 0: run 55. Run 54's
///   overcharge of the ResNet step at 25 %, 60 % of its brackets idle, is not explained by it.)
///
/// Each is the median of its last 15 estimates (`Recent::N`), so a few odd ones (a neighbour's
/// time in a price, a call preempted on a loaded host) move it nowhere.
#[derive(Clone, Copy, Debug, Default)]
pub struct Calibration {
    restart: Recent,
    idle: Recent,
    /// The restart probe's estimates ([`Calibration::probe`]).
    probes: Recent,
}

impl Calibration {
    /// The most either part is believed to be (ns).
    const MAX: f64 = 20_000.0;
    /// The fewest launches a segment teaches the restart with.
    const MIN_SEGMENT: usize = 4;
    /// A price is never cut below this part of what its brackets measured: a segment the driver
    /// got wrong cannot make kernels cheap (the restart is a few µs; a bracket of the shortest
    /// kernel measures at least twice that).
    const FLOOR: f64 = 0.5;

    /// What a bracket on a busy stream measures beyond its kernel (ns; 0 until segments or
    /// probes show it: one early probe obstructed on a loaded host said 15 µs, and the
    /// simulator's 20 µs kernels at 25 % were charged half their cost until segments took
    /// over, 0.90 s for 1.1 s of share).
    pub fn restart(&self) -> f64 {
        if self.restart.believed() {
            self.restart.median.clamp(0.0, Self::MAX)
        } else if self.probes.believed() {
            self.probes.low().clamp(0.0, Self::MAX)
        } else {
            0.0
        }
    }

    /// What a bracket on an idle stream measures beyond one on a busy stream (ns; 0 until
    /// learned). It may be negative: the launch call's time, which an idle bracket subtracts,
    /// can be longer than what the GPU waited for the kernel (a slow host: a debug build on the
    /// simulator measured its 20 µs kernels at 18-20 µs that way, some brackets at 1 µs).
    pub fn idle_lag(&self) -> f64 {
        self.idle.median.clamp(-Self::MAX, Self::MAX)
    }

    /// What a launch is charged whose kernel busy brackets measured at `raw` ns (never under
    /// 1 ns).
    pub fn charge(&self, raw: f64) -> f64 {
        (raw - self.restart()).max(raw * Self::FLOOR).max(1.0)
    }

    /// What an idle bracket's `raw` ns would have measured on a busy stream (more than `raw`
    /// when the lag is negative).
    pub fn busy_equivalent(&self, raw: f64) -> f64 {
        (raw - self.idle_lag()).max(raw * Self::FLOOR).max(1.0)
    }

    /// `n` launches whose brackets' prices sum to `priced` ns ran back to back after a mark in
    /// `measured` ns. Only segments of `Self::MIN_SEGMENT` (4) launches or more count: what the
    /// segment's own events cost is known only roughly (an overhead pair the host outran
    /// measures host time), and in a segment of two the whole error would be one restart (a
    /// debug build on the simulator, which has none, learned 2-4 µs and undercharged 20 µs
    /// kernels by a sixth). `least` is the lowest of those prices: every bracket measured a
    /// restart and a kernel, so the restart is less than the cheapest, and an estimate is
    /// taken at most at half of it. (At most half the segment's mean price, the H100's
    /// ResNet loop alone, its prices set seconds before, maybe while the GPU's clock was still
    /// low, had segments of kernels of 20-50 µs say 20 µs a start for four seconds: charged
    /// half its kernels, it ran at 71 % of its alone rate under a 50 % limit, run 115.)
    pub fn segment(&mut self, n: usize, priced: f64, least: f64, measured: f64) {
        if n < Self::MIN_SEGMENT
            || !(priced.is_finite() && least.is_finite() && measured.is_finite())
            || measured <= 0.0
        {
            return;
        }
        #[allow(clippy::cast_precision_loss)]
        let starts = (n - 1) as f64;
        self.restart.push(
            ((priced - measured) / starts)
                .clamp(0.0, Self::MAX)
                .min(least / 2.0),
        );
    }

    /// A restart probe came back: its spans `one` (an event, the empty kernel, an event) and
    /// `two` (the same with the kernel twice), ns, and `overhead`, what an event costs. The
    /// estimate is `2 one − two` less an event's cost; where the first span is longer than
    /// the most a restart, an empty kernel and an event can take (20 µs, the most a restart is
    /// believed to be), the probe waited behind other work and says nothing: it is dropped.
    ///
    /// Used only where no segment taught the restart (a stream whose kernels never run back to
    /// back), and then their lower quartile: a probe whose empty kernel waited behind or beside
    /// the program's own kernels overstates it, and an overstated restart undercharges (the
    /// simulator's 20 µs kernels, always queued, were charged 0.7 of their cost when probes
    /// went into the median with segments). Where segments exist (kernels queued back to
    /// back, which is where a probe is obstructed) they decide. Clamped to `MAX` instead of
    /// dropped, probes that waited 0.2-1.8 ms behind a stream of 200 kernels of 20 µs, whose
    /// prices were too new for segments, said 20 µs four times in five: the stream was charged
    /// half its kernels and ran at 92 % of the simulator's GPU under a 50 % limit.
    /// Returns whether it counted.
    pub fn probe(&mut self, one: f64, two: f64, overhead: f64) -> bool {
        let est = 2.0 * one - two - overhead;
        let counted = est.is_finite() && one <= Self::MAX;
        if counted {
            self.probes.push(est.clamp(0.0, Self::MAX));
        }
        counted
    }

    /// Whether the restart is believed (enough estimates of either kind).
    pub fn restart_believed(&self) -> bool {
        self.restart.believed() || self.probes.believed()
    }

    /// An idle bracket measured `raw` ns of a kernel that busy brackets price at `busy` ns.
    pub fn idle_bracket(&mut self, raw: f64, busy: f64) {
        if raw.is_finite() && busy.is_finite() {
            self.idle.push((raw - busy).clamp(-Self::MAX, Self::MAX));
        }
    }
}

/// The last [`Recent::N`] values and their median, once there are [`Recent::FEW`] of them (0
/// before: one early estimate alone, from prices not yet settled, undercharged a debug build's
/// kernels eightfold on the simulator and let a 25 % run go at full speed).
#[derive(Clone, Copy, Debug, Default)]
struct Recent {
    values: Ring<f64, { Recent::N }>,
    /// The median of what is held (0 while fewer than `FEW`).
    median: f64,
}

impl Recent {
    const N: usize = 15;
    const FEW: usize = 5;

    fn push(&mut self, x: f64) {
        self.values.push(x);
        if self.believed() {
            self.median = self.values.sorted(f64::total_cmp)[self.values.len() / 2];
        }
    }

    fn believed(&self) -> bool {
        self.values.len() >= Self::FEW
    }

    /// The lower quartile of what is held (0 while fewer than `FEW`).
    fn low(&self) -> f64 {
        if !self.believed() {
            return 0.0;
        }
        self.values.sorted(f64::total_cmp)[self.values.len() / 4]
    }
}
