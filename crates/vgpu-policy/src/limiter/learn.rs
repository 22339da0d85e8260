//! What a limiter learns from its marks ([`Limiter::learn`]: timing brackets price kernels,
//! overhead brackets and restart probes calibrate them, hold marks anchor the queue) and how it
//! prices the launches admitted since its last look ([`Limiter::price_new`]).
use super::*;

impl Limiter {
    /// The mean price of the last few launches admitted, at their keys' prices now (ns): what
    /// the next ones are likely to cost (a step's phases differ: an optimizer's small kernels after the
    /// convolutions), the mean before anything was admitted.
    pub(super) fn recent_price(&self) -> f64 {
        let n = self.kept.len().min(RECENT);
        if n == 0 {
            return self.mean;
        }
        #[allow(clippy::cast_precision_loss)]
        let m = self
            .kept
            .iter()
            .rev()
            .take(n)
            .map(|a| self.price(a.key).unwrap_or_else(|| self.unpriced()))
            .sum::<f64>()
            / n as f64;
        m
    }

    /// The keys of launches `from..to`, as far as they are kept.
    fn kept_keys(&self, from: u64, to: u64) -> Vec<u64> {
        let lo = from.max(self.first_kept);
        (lo..to)
            .filter_map(|n| {
                usize::try_from(n - self.first_kept)
                    .ok()
                    .and_then(|i| self.kept.get(i))
                    .map(|a| a.key)
            })
            .collect()
    }

    /// The launch numbered `n`, if it is still kept.
    fn kept_at(&self, n: u64) -> Option<Admitted> {
        let i = usize::try_from(n.checked_sub(self.first_kept)?).ok()?;
        self.kept.get(i).copied()
    }

    /// The learned price of the launches from `from` on (ns): what is queued after a mark.
    fn work_after(&self, from: u64) -> f64 {
        self.kept_from(from).map(|a| a.price + a.deferred).sum()
    }

    /// The kept launches from number `from` on.
    fn kept_from(&self, from: u64) -> impl Iterator<Item = &Admitted> {
        kept_range(&self.kept, self.first_kept, from, u64::MAX)
    }

    /// Notes a bracket of `key` for [`Self::samples`] (its price was `before`; now as it is).
    fn trace(&mut self, key: u64, elapsed: u64, gap: u64, before: Option<f64>, shared: bool) {
        self.samples.push(Sample {
            key,
            elapsed,
            gap,
            before,
            after: self.prices.get(key),
            shared,
        });
    }

    /// `key`'s first price, `t` (charged): launches of it admitted before were charged the
    /// mean; what they cost above that is charged now. A shared sample (another process's work
    /// may be in it) corrects them only while measuring: there nothing is held back, and a
    /// program measured beside others' work was charged 55 % of its kernels; under a limit a
    /// shared price's excess charged to all of them starved a 70 % container for seconds. There
    /// they wait for the key's first clean sample (before, they went uncharged: a process
    /// started beside another ran its first PROBE launches for the mean's guess).
    fn first_price(&mut self, key: u64, t: f64, shared: bool, measuring: bool) {
        if shared && !measuring {
            if !self.uncorrected.contains(&key) && self.uncorrected.len() < UNCORRECTED {
                self.uncorrected.push(key);
            }
            return;
        }
        self.uncorrected.retain(|k| *k != key);
        let extra = charge_up(&mut self.kept, t, |a| a.key == key);
        self.correction = self.correction.saturating_add(extra);
    }

    /// After `key`'s second sample: its launches charged its first price while that rested on
    /// one shared sample are charged what it costs now, up to that first price: above it, what
    /// they were charged is taken back ([`Decision::refund`]); below it (deferred,
    /// [`UNSURE_AHEAD`]), the rest is charged. Once only. Later samples change the price, not
    /// the past: a kernel timed beside a light neighbour's slices is over by them at every
    /// shared sample (the model's 11 ms loop beside a host-bound stream: 12.1 ms), and refunded
    /// at each, the loop stopped yielding to the stream's synchronisations, which ran at 0.84
    /// of their alone rate, against 0.95 (0.92 without limits).
    fn refund_below(&mut self, key: u64) {
        if self.refundable == 0 {
            return;
        }
        let Some(t) = self.price(key) else {
            return;
        };
        let (mut back, mut more, mut gone) = (0u64, 0u64, 0u64);
        for a in self
            .kept
            .iter_mut()
            .filter(|a| a.refundable && a.key == key)
        {
            let full = a.price + a.deferred;
            let settled = full.min(t);
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let (less, over, unqueued) = (
                (a.price - settled) as u64,
                (settled - a.price) as u64,
                (full - settled) as u64,
            );
            back = back.saturating_add(less);
            more = more.saturating_add(over);
            gone = gone.saturating_add(unqueued);
            self.deferred_total -= a.deferred.min(self.deferred_total);
            a.price = settled;
            a.deferred = 0.0;
            a.refundable = false;
            self.refundable -= 1;
        }
        self.refund = self.refund.saturating_add(back);
        self.correction = self.correction.saturating_add(more);
        self.unqueued = self.unqueued.saturating_add(gone);
    }

    /// Defers `cut` ns of what this look's new launches (the last `new` kept) were charged at
    /// prices that rest on one shared sample ([`UNSURE_AHEAD`]), the latest first.
    pub(super) fn defer_unsure(&mut self, new: u64, mut cut: f64, now: u64) {
        let n = usize::try_from(new).unwrap_or(usize::MAX);
        for a in self.kept.iter_mut().rev().take(n).filter(|a| a.refundable) {
            if cut <= 0.0 {
                break;
            }
            let d = a.price.min(cut);
            a.price -= d;
            a.deferred += d;
            a.deferred_at = now;
            cut -= d;
            self.deferred_total += d;
            self.deferred_since.get_or_insert(now);
        }
    }

    /// Charges what launches have deferred at their first price, each where it has waited
    /// [`SETTLE_MAX`] for its kernel's second sample (a program that stopped launching that
    /// kernel, or went idle): a price never re-timed is no licence to run free. (Each waits
    /// its own: a deferral made just before an older one settles is not charged with it.)
    pub(super) fn settle_stale(&mut self, now: u64) {
        if self.deferred_total <= 0.0 {
            self.deferred_since = None;
            return;
        }
        // (The oldest deferral still waiting is no older than this: a second sample that
        // settled it leaves it in place, and the scan below finds the next.)
        let since = *self.deferred_since.get_or_insert(now);
        if now.saturating_sub(since) < ns(SETTLE_MAX) {
            return;
        }
        let (mut owed, mut left, mut oldest) = (0.0, 0.0, None::<u64>);
        for a in self.kept.iter_mut().filter(|a| a.deferred > 0.0) {
            if now.saturating_sub(a.deferred_at) >= ns(SETTLE_MAX) {
                owed += a.deferred;
                a.price += a.deferred;
                a.deferred = 0.0;
            } else {
                left += a.deferred;
                oldest = Some(oldest.map_or(a.deferred_at, |o| o.min(a.deferred_at)));
            }
        }
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let owed_ns = owed as u64;
        self.correction = self.correction.saturating_add(owed_ns);
        self.deferred_total = left;
        self.deferred_since = oldest;
    }

    /// A clean timing `t` (charged) of launch `a`, of `key`: what unpriced launches cost
    /// ([`Limiter::unpriced`]), if it was admitted without a price, and what its function costs
    /// lately, for its new grids. (Never past what a price may be: a timing from a clock that
    /// jumped would charge every new kernel that.)
    fn timed_clean(&mut self, a: Admitted, key: u64, t: f64) {
        let t = t.min(MAX_PRICE);
        if a.guessed {
            let g = self.guess.unwrap_or(self.mean);
            self.guess = Some(g + (t - g) * 0.125);
        }
        if a.unit != 0 {
            let first = !self.unit_prices.contains_key(&a.unit);
            keep_unit(&mut self.unit_prices, a.unit, t);
            self.unit_waited.remove(&a.unit);
            if first {
                self.first_unit_price(a.unit, key, t);
            }
        }
    }

    /// After [`Self::price_new`]: the clean timings of launches it has just priced. (One whose
    /// key had no price when it came back was admitted without one: it counts for the guess,
    /// though its key's timing priced it.)
    pub(super) fn learn_unpriced(&mut self) {
        // Taken out and put back emptied: its room is kept from look to look.
        let mut timed = std::mem::take(&mut self.timed_unpriced);
        for &(at, key, t, guessed) in &timed {
            if let Some(a) = self.kept_at(at) {
                self.timed_clean(Admitted { guessed, ..a }, key, t);
            }
        }
        timed.clear();
        self.timed_unpriced = timed;
    }

    /// The synchronisations that returned since the last look (`waits`), where the GPU was its
    /// own while they waited (`own_since`, [`Limiter::own_since`]). A synchronisation waits
    /// for work admitted before it began and not yet done: at most the launches since the last
    /// one began (those before were done when it returned; as for the queue estimate, any
    /// synchronisation counts, a stream's or an event's as the context's). Where it waited
    /// longer than those were charged, beyond [`WAIT_NOISE`], and some of them were charged a
    /// blind guess (no timing of their kernel or function, then or since), the difference is
    /// charged to those, evenly, at most [`WAIT_EACH_MAX`] more each (a later timing of their
    /// function raises them only by what is left); where they are all of one function, what
    /// each then cost prices its new grids until a timing of it does (`unit_waited`; a later
    /// such wait only raises it, as it comes only where they were charged too little). The one
    /// account of their cost that needs no mark: where the controller's looks come late, a
    /// program whose cheap kernels come first after each synchronisation gives them every
    /// bracket, and its expensive function over new grids ran on the cheap ones' guess (the
    /// simulator under a compile's load: 3 % of the GPU charged at 25 %,
    /// `new_grids_of_loaded_functions_among_known_short_kernels_are_held_to_the_share`).
    /// Launches with a price of their own or of their function are trusted (their brackets
    /// time them; a synchronisation may also wait for copies, host functions or another
    /// process's event, which are no kernel's cost).
    pub(super) fn charge_waits(&mut self, waits: &[Waited], own_since: Option<u64>) {
        for w in waits {
            let (from, to) = (self.waits_from, w.after);
            self.waits_from = self.waits_from.max(to);
            // (One that began after launches this look has not priced may have waited for
            // them: charged nothing.)
            let own = own_since.is_some_and(|t| t <= w.from);
            if !own || from < self.first_kept || to <= from || to > self.priced {
                continue;
            }
            let (prices, units) = (&self.prices, &self.unit_prices);
            // (Admitted without a price of its key, `guessed`, and nothing timed since: its
            // function has no timing now, so it had none then, or the map started afresh.)
            let blind = |a: &Admitted| {
                a.guessed
                    && a.unit != 0
                    && prices.get(a.key).is_none()
                    && !units.contains_key(&a.unit)
            };
            let (mut charged, mut n) = (0.0, 0u32);
            for a in kept_range(&self.kept, self.first_kept, from, to) {
                // (What was deferred is work it waited for too: `UNSURE_AHEAD`.)
                charged += a.price + a.deferred;
                n += u32::from(blind(a));
            }
            #[allow(clippy::cast_precision_loss)]
            let excess = w.ns as f64 - charged - ns(WAIT_NOISE) as f64;
            if n == 0 || excess <= 0.0 {
                continue;
            }
            #[allow(clippy::cast_precision_loss)]
            let each = (excess / f64::from(n)).min(ns(WAIT_EACH_MAX) as f64);
            let mut extra = 0u64;
            // The one function of them all, if they are of one (0: of several).
            let mut one = None;
            for a in kept_range_mut(&mut self.kept, self.first_kept, from, to) {
                if !blind(a) {
                    continue;
                }
                let more = each.min(MAX_PRICE - a.price).max(0.0);
                a.price += more;
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                {
                    extra = extra.saturating_add(more as u64);
                }
                one = match one {
                    None => Some((a.unit, a.price)),
                    Some((u, p)) if u == a.unit => Some((u, p.max(a.price))),
                    Some(_) => Some((0, 0.0)),
                };
            }
            self.correction = self.correction.saturating_add(extra);
            self.stats.waited_ns = self.stats.waited_ns.saturating_add(extra);
            // Of one function: that is what its new grids cost until a timing says otherwise
            // (charged at once, its next launches no longer run ahead of their charge, and a
            // later synchronisation cut short by a slow host, which sees only the end of
            // their work, leaves them no cheaper). Where they were of several, which cost
            // what is not known.
            if let Some((unit, p)) = one.filter(|(u, _)| *u != 0) {
                let was = self.unit_waited.get(&unit).copied().unwrap_or(0.0);
                keep_unit(&mut self.unit_waited, unit, was.max(p));
            }
        }
    }

    /// `unit`'s first clean timing, `t` (charged), from a launch of `key`: its launches over
    /// other grids admitted before were charged what unpriced launches cost (it had no timing
    /// to price them by); what they cost above that is charged now, as its later launches are
    /// charged `t`; only those whose own key is still unpriced (one priced since was charged
    /// its key's price by [`Self::first_price`], which knows its grid). A program whose every
    /// step brings new functions (a module loaded per step, a JIT's fresh kernels) otherwise
    /// ran each step's burst of long kernels on the guess of its short ones: a simulated 25 %
    /// limit let 1 ms kernels, new each step, run at 35–44 % of the GPU.
    fn first_unit_price(&mut self, unit: u64, key: u64, t: f64) {
        let prices = &self.prices;
        let extra = charge_up(&mut self.kept, t, |a| {
            a.unit == unit && a.key != key && a.guessed && prices.get(a.key).is_none()
        });
        self.correction = self.correction.saturating_add(extra);
    }

    /// A bracket came back: an exclusive request (if any) has had its sample; a shared one is
    /// asked again after `EXCLUSIVE_RETRY`.
    fn exclusive_sampled(&mut self, shared: bool, now: u64) {
        if self.exclusive_since.is_some() {
            self.exclusive_since = None;
            self.last_exclusive = Some(if shared {
                now.saturating_sub(ns(EXCLUSIVE_EVERY)) + ns(EXCLUSIVE_RETRY)
            } else {
                now
            });
        }
    }

    /// Learns from the marks completed since the last look, in the order they were recorded.
    pub(super) fn learn(&mut self, marks: &[Mark], now: u64, measuring: bool) {
        self.samples.clear();
        for m in marks {
            match m.kind {
                MarkKind::Overhead { elapsed } => {
                    #[allow(clippy::cast_precision_loss)]
                    let e = (elapsed as f64).min(MAX_OVERHEAD);
                    self.overhead = if self.overhead == 0.0 || e < self.overhead {
                        e
                    } else {
                        self.overhead + (e - self.overhead) * 0.125
                    };
                }
                MarkKind::Probe { one, two } => {
                    // Counted shared too: it runs back to back in a few µs, so a context
                    // switch rarely falls inside it, and the lower quartile of fifteen
                    // discards one that does. One whose first span shows it waited behind
                    // other work says nothing (`Calibration::probe`), and the next is asked
                    // only PROBE_EVERY on: probing every PROBE_SOON for ever, 40 containers
                    // taking turns on the simulator, whose waiters' probes wait for the
                    // holder's kernels, used 0.44 cores against 0.36.
                    #[allow(clippy::cast_precision_loss)]
                    let counted = self
                        .calibration
                        .probe(one as f64, two as f64, self.overhead);
                    if !counted {
                        self.probe_at = self.probe_at.max(now.saturating_add(ns(PROBE_EVERY)));
                    }
                    self.stats.probes += 1;
                }
                MarkKind::Bracket { .. } => self.bracket(m, now, measuring),
                MarkKind::Hold { at, segment } => self.hold(at, segment, m.shared, now),
            }
        }
    }

    /// A bracket came back ([`MarkKind::Bracket`]; any other mark is not one): what its
    /// launch's kernel cost, for its key's price and the launch's charge.
    fn bracket(&mut self, m: &Mark, now: u64, measuring: bool) {
        let MarkKind::Bracket {
            at,
            key,
            elapsed,
            gap,
        } = m.kind
        else {
            return;
        };
        let shared = m.shared;
        self.sample_out = None;
        // On a busy stream the events' own cost is in the time; on an idle one the
        // launch call's (`gap`), but never more than MAX_OVERHEAD of it. At least a
        // twentieth of what the events saw: a kernel is never free.
        #[allow(clippy::cast_precision_loss)]
        let less = if gap > 0 {
            (gap as f64).min(MAX_OVERHEAD)
        } else {
            self.overhead
        };
        #[allow(clippy::cast_precision_loss)]
        let raw = (elapsed as f64 - less).max(elapsed as f64 / 20.0).max(1.0);
        // A function's first launch call longer than LONG_CALL loaded its module
        // (CUDA's lazy loading: the kernel queued at its end; the H200's decode
        // service's first calls took 0.8–21 ms, run 66). What the events saw less
        // MAX_OVERHEAD is at most the kernel, and a price only if its next timing
        // is long too (`Prices::observe_long`); meanwhile it is charged the mean,
        // and its first price charges what that missed. Taken as a price, the
        // decode service's 3 µs kernels were priced at milliseconds, a kernel
        // launched once a request kept it, and the mean price its unpriced
        // launches are charged stood at hundreds of µs for seconds.
        if gap > LONG_CALL {
            self.stats.brackets += 1;
            self.stats.long_calls += 1;
            let before = self.prices.get(key);
            let priced = self.prices.observe_long(key, raw, shared);
            self.trace(key, elapsed, gap, before, shared);
            if priced {
                let t = self.calibration.charge(raw);
                self.first_price(key, t, shared, measuring);
            } else if self.prices.is_empty() {
                // Before the first price, the next launch is timed at once (each
                // first launch of a program's kernels may load a module).
                self.asked = false;
            }
            self.exclusive_sampled(shared, now);
            return;
        }
        let idle = gap > 0;
        if idle
            && !shared
            && self.prices.busy(key)
            && let Some(p) = self.prices.get(key)
        {
            self.calibration.idle_bracket(raw, p);
        }
        let raw = if idle {
            self.calibration.busy_equivalent(raw)
        } else {
            raw
        };
        // What the launch is charged by it: the kernel's own part of the time.
        let t = self.calibration.charge(raw);
        self.stats.brackets += 1;
        self.stats.idle_brackets += u64::from(gap > 0);
        if let Some(a) = self.kept_at(at) {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            {
                self.stats.sampled_ns += t as u64;
                self.stats.sampled_charged_ns += a.price as u64;
            }
        }
        // A launch timed clean teaches what its function costs (and, admitted without a
        // price, what unpriced launches cost). One admitted since the last look is not priced
        // yet (its function and its charge are not known before `price_new`): it teaches once
        // it is ([`Self::learn_unpriced`]). Left out, a function new to each step (a module
        // loaded per step) whose first launch came back before the look that priced it was
        // never priced by its function, and its long kernels ran on the guess.
        if !shared {
            match self.kept_at(at) {
                Some(a) => self.timed_clean(a, key, t),
                None if at >= self.priced && self.timed_unpriced.len() < TIMED_UNPRICED => {
                    let guessed = self.prices.get(key).is_none();
                    self.timed_unpriced.push((at, key, t, guessed));
                }
                None => {}
            }
        }
        let before = self.prices.get(key);
        let first = before.is_none();
        let single = self.prices.single_shared(key);
        self.prices.observe(key, raw, shared, !idle);
        self.trace(key, elapsed, gap, before, shared);
        if single {
            self.refund_below(key);
        }
        if first || (!shared && self.uncorrected.contains(&key)) {
            self.first_price(key, t, shared, measuring);
        }
        // The launch was charged before its kernel was known: what it cost above
        // that is charged now (never less: a sample that ran beside another
        // process's work, or shorter, changes the price, not the past).
        if !shared
            && let Some(a) = self.kept_at(at)
            && t > a.price
        {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let extra = (t - a.price) as u64;
            self.correction = self.correction.saturating_add(extra);
        }
        self.exclusive_sampled(shared, now);
    }

    /// A hold mark recorded after launch `at`: everything before it is done, and the launches
    /// of `segment` ran back to back (what a bracket adds to a kernel).
    fn hold(&mut self, at: u64, segment: Option<(u64, u64)>, shared: bool, now: u64) {
        if let Some((from, e)) = segment
            && from < at
        {
            self.stats.segments += 1;
            let keys = self.kept_keys(from, at);
            // Only prices clean busy brackets set: a shared one has a neighbour's time
            // in it, and one an idle bracket set is off by the idle lag (a first
            // idle price of 87 µs for a 20 µs kernel made the restart 20 µs, and
            // once the price was right it was charged an eighth), and only once
            // three have (`Prices::steady`).
            // Their sum and the least of them.
            let priced = keys
                .iter()
                .map(|k| self.prices.get(*k).filter(|_| self.prices.steady(*k)))
                .try_fold((0.0, f64::INFINITY), |(sum, least), p| {
                    p.map(|p| (sum + p, f64::min(least, p)))
                });
            #[allow(clippy::cast_precision_loss)]
            let e = (e as f64 - self.overhead).max(1.0);
            if let Some((sum, least)) = priced
                && !shared
                && keys.len() as u64 == at - from
            {
                self.calibration.segment(keys.len(), sum, least, e);
            }
        }
        // Everything before the mark is done: the queue is what came after it.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let after = self.work_after(at).max(0.0) as u64;
        self.gpu_done = now.saturating_add(after);
    }

    /// What is still queued, at least, where the GPU has not reached a mark recorded after
    /// launch `at` (the oldest in flight): every launch from there on, at what it was charged,
    /// where some of them are of kernels never priced (charged the mean, which may be a
    /// fiftieth of what they cost), else nothing (ns). The pace admits no more than its depth
    /// past that, however early the estimate had the queue drained: a process whose kernels
    /// turned from 20 µs to 1 ms, its controller starved of CPU, found its estimate drained at
    /// each look and admitted 2 ms of them again (100 ms of GPU work) until a bracket came back
    /// from behind them (the simulator under eight busy loops: 1500 ran at 100 % of the GPU
    /// under a 50 % limit). Where all are priced the estimate stands: the launches after a mark
    /// on one stream may run on others before it (a collective waiting for its peers), and
    /// their prices already say what they cost. Nor once the mark has stood unreached for
    /// [`UNREACHED_MAX`]: its stream may wait for something the program does later (a
    /// `cuStreamWaitValue32` on a word the host or another stream's kernel writes), and holding
    /// the program's launches until the GPU got there could hold them for ever.
    pub(super) fn unreached_queue(&mut self, at: Option<u64>, now: u64) -> u64 {
        let Some(at) = at else {
            self.unreached_since = None;
            return 0;
        };
        let since = match self.unreached_since {
            Some((a, t)) if a == at => t,
            _ => {
                self.unreached_since = Some((at, now));
                now
            }
        };
        if now.saturating_sub(since) >= ns(UNREACHED_MAX) {
            return 0;
        }
        // (A launch priced when admitted needs no lookup: a price, once learned, stays.)
        if !self
            .kept_from(at)
            .any(|a| a.guessed && self.prices.get(a.key).is_none())
        {
            return 0;
        }
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let queued = self.work_after(at).max(0.0) as u64;
        queued
    }

    /// Prices the launches admitted since the last look; returns their GPU work (ns), how many
    /// they are, and what of the work is at prices that rest on one shared sample (ns).
    /// `units`: each launch's function (or graph), as `keys` (another length: none known).
    pub(super) fn price_new(
        &mut self,
        launched: u64,
        keys: &[u64],
        units: &[u64],
        now: u64,
    ) -> (u64, u64, f64) {
        let new = launched.saturating_sub(self.priced);
        if new == 0 {
            return (0, 0, 0.0);
        }
        let lost = new.saturating_sub(keys.len() as u64);
        let take = usize::try_from(new).unwrap_or(usize::MAX).min(keys.len());
        let units = (units.len() == keys.len()).then(|| &units[units.len() - take..]);
        let keys = &keys[keys.len() - take..];
        let mut work = 0.0;
        #[allow(clippy::cast_precision_loss)]
        {
            work += lost as f64 * self.unpriced();
        }
        for _ in 0..lost {
            self.keep(Admitted {
                key: 0,
                unit: 0,
                price: self.unpriced(),
                guessed: true,
                refundable: false,
                deferred: 0.0,
                deferred_at: 0,
            });
        }
        self.recent += new;
        let (mut known, mut known_n, mut unsure) = (0.0, 0u64, 0.0);
        for (i, &k) in keys.iter().enumerate() {
            if !self.prices.clean(k) {
                self.dirty += 1;
            }
            let unit = units.map_or(0, |u| u[i]);
            let (p, guessed) = match self.price(k) {
                Some(p) => {
                    known += p;
                    known_n += 1;
                    (p, false)
                }
                None => {
                    // A new grid of a function timed before: what its last clean timing
                    // measured (a framework's kernels over a new shape: a prompt of another
                    // length, a cache one token longer); else what unpriced launches cost.
                    // (Or what synchronisations made of the function, never timed.)
                    self.unknown += 1;
                    let p = self.unit_prices.get(&unit).copied().filter(|_| unit != 0);
                    let waited = self.unit_waited.get(&unit).copied().filter(|_| unit != 0);
                    (p.or(waited).unwrap_or_else(|| self.unpriced()), true)
                }
            };
            work += p;
            let refundable = !guessed && self.prices.single_shared(k);
            if refundable {
                unsure += p;
            }
            self.keep(Admitted {
                key: k,
                unit,
                price: p,
                guessed,
                refundable,
                deferred: 0.0,
                deferred_at: 0,
            });
        }
        self.priced = launched;
        #[allow(clippy::cast_precision_loss)]
        {
            self.per_look += (new as f64 - self.per_look) * 0.125;
        }
        // The mean (what an unpriced launch is charged) follows the priced launches admitted,
        // a look at a time, weighted by their number; never the unpriced ones' own charge.
        if known_n > 0 {
            #[allow(clippy::cast_precision_loss)]
            let look_mean = known / known_n as f64;
            #[allow(clippy::cast_precision_loss)]
            let w = (known_n as f64 / 16.0).min(0.5);
            self.mean += (look_mean - self.mean) * w;
        }
        self.last_launch = now;
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let work = work.clamp(0.0, 1e18) as u64;
        self.gpu_done = self.gpu_done.max(self.looked).saturating_add(work);
        (work, new, unsure)
    }

    /// Keeps `a`; the oldest kept goes where `KEPT` are, charged what it had deferred, if
    /// anything (its first price: no second sample will say it was less).
    fn keep(&mut self, a: Admitted) {
        if self.kept.len() == KEPT {
            if let Some(o) = self.kept.pop_front().filter(|o| o.refundable) {
                self.refundable -= 1;
                self.deferred_total -= o.deferred.min(self.deferred_total);
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let d = o.deferred as u64;
                self.correction = self.correction.saturating_add(d);
            }
            self.first_kept += 1;
        }
        self.refundable += usize::from(a.refundable);
        self.kept.push_back(a);
    }
}

/// Sets `unit`'s price in `map`, which starts afresh where it holds [`UNITS_KEPT`] others.
fn keep_unit(map: &mut HashMap<u64, f64>, unit: u64, price: f64) {
    if map.len() >= UNITS_KEPT && !map.contains_key(&unit) {
        map.clear();
    }
    map.insert(unit, price);
}

/// The range of `kept` (whose first is launch `first_kept`) of launches `from..to`, as far as
/// it holds them.
fn kept_indices(len: usize, first_kept: u64, from: u64, to: u64) -> std::ops::Range<usize> {
    let at = |n: u64| usize::try_from(n.saturating_sub(first_kept)).map_or(len, |i| i.min(len));
    at(from)..at(to.max(from))
}

/// The kept launches numbered `from..to`.
fn kept_range(
    kept: &VecDeque<Admitted>,
    first_kept: u64,
    from: u64,
    to: u64,
) -> impl Iterator<Item = &Admitted> {
    kept.range(kept_indices(kept.len(), first_kept, from, to))
}

/// The same, to change.
fn kept_range_mut(
    kept: &mut VecDeque<Admitted>,
    first_kept: u64,
    from: u64,
    to: u64,
) -> impl Iterator<Item = &mut Admitted> {
    let r = kept_indices(kept.len(), first_kept, from, to);
    kept.range_mut(r)
}

/// Raises the kept launches `pick` chooses that were charged less than `t` to `t`; returns what
/// that adds to their charge (ns), for the next look's correction.
fn charge_up(kept: &mut VecDeque<Admitted>, t: f64, pick: impl Fn(&Admitted) -> bool) -> u64 {
    let mut extra = 0u64;
    for a in kept.iter_mut().filter(|a| a.price < t && pick(a)) {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let more = (t - a.price) as u64;
        extra = extra.saturating_add(more);
        a.price = t;
    }
    extra
}
