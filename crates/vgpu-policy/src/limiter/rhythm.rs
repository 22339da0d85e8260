//! When a process's next synchronisation is due ([`Rhythm`]): a service that synchronises at a
//! steady pace (an eager decode loop reads each token back) says so a little before, so that
//! a neighbour ahead of its share has its queue drained when the synchronisation comes.
use super::{Ring, SYNC_LEAD, Waited, ns};

/// The synchronisations a process began, as its looks count them (`Look::syncs`), and the
/// gaps between them.
#[derive(Clone, Debug)]
pub(super) struct Rhythm {
    /// Synchronisations counted so far.
    count: u64,
    /// When the latest began, as near as a look can tell (the hook wakes the controller).
    last: Option<u64>,
    /// The latest gaps between two consecutive ones (ns).
    gaps: Ring<u64, { Rhythm::N }>,
    /// Synchronisations that began inside the window [`Rhythm::due_within`] gave for them.
    foretold: u64,
    /// How long past its due time the next is still waited for: the gap over this
    /// ([`Rhythm::LATE_PART`], [`Rhythm::PRIORITY_LATE_PART`]).
    late_part: u64,
    /// The latest synchronisations counted whose waits have not come yet, oldest first: when
    /// the look that counted each came, and whether it was foretold ([`Rhythm::waits_of`]).
    pending: [(u64, bool); Rhythm::N],
    /// How many of `pending` are in use.
    pending_len: usize,
}

/// What the synchronisations foretold waited, and what the others waited: (how many, ns)
/// each ([`Rhythm::waits_of`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct SyncWaits {
    /// Those begun inside their window.
    pub(super) foretold: (u64, u64),
    /// The others.
    pub(super) other: (u64, u64),
}

impl Rhythm {
    /// How many gaps it keeps, and needs before it predicts.
    const N: usize = 8;
    /// How many of them must lie within a quarter of their median.
    const STEADY: usize = 6;
    /// A longer gap is a pause (between requests), not a step of the rhythm.
    const PAUSE: u64 = 50_000_000;
    /// A light process's window stays open half a gap past the due time. (A quarter closes
    /// before a slow token comes: on a spread of token gaps that a quarter foretells about as
    /// often as the H100 did, 78 % against 69-76 % in runs 145-147, half foretells 88 %, for
    /// little more time announced, since a window ends when its synchronisation comes;
    /// `a_decode_services_late_tokens_are_foretold_too`. On the H100 it showed no gain in one
    /// round, run 148: 70 and 76 % foretold at 50/50 and 30/70, the quarter 83 and 70 %; kept
    /// because the model calibrated to the H100 finds it neutral for latency and training.)
    pub(super) const LATE_PART: u64 = 2;
    /// A process with a task priority, high or low: a quarter. A high-priority one's
    /// announcements hold a low-priority neighbour whatever that one's share, and a window
    /// kept open for a late token costs the neighbour GPU time it is owed (on the model, the
    /// low-priority ResNet step beside the high-priority decode service went from 0.713 to
    /// 0.707 of its alone rate with half, the service's p99 within 1.03x alone either way,
    /// `t4_a_high_priority_service_s_announced_synchronisations_find_training_drained`; on the
    /// H100 the service kept p99 0.89x alone, run 146, with the training under its bar). A
    /// low-priority one is no latency service to keep a neighbour off the GPU longer for.
    pub(super) const PRIORITY_LATE_PART: u64 = 4;

    /// A rhythm whose windows stay open `gap / late_part` past the due time (or `lead`).
    pub(super) fn new(late_part: u64) -> Self {
        Rhythm {
            count: 0,
            last: None,
            gaps: Ring::default(),
            foretold: 0,
            late_part: late_part.max(1),
            pending: [(0, false); Rhythm::N],
            pending_len: 0,
        }
    }

    /// Notes a synchronisation counted by the look at `at`, foretold or not, for its wait.
    fn note(&mut self, at: u64, foretold: bool) {
        if self.pending_len == Rhythm::N {
            self.pending.copy_within(1.., 0);
            self.pending_len -= 1;
        }
        self.pending[self.pending_len] = (at, foretold);
        self.pending_len += 1;
    }

    /// What the synchronisations that ended since the last look (`waited`) waited, split by
    /// whether each was foretold: a wait goes to the earliest synchronisation still pending
    /// that a look counted at or after its start (the look that counts a synchronisation comes
    /// after it began), and those pending before it, whose waits never came, are dropped. (A
    /// wait the driver's log merged with others goes to the first of them; one whose own entry
    /// was pushed out, more than `N` counted without a wait, to a later one; one that began
    /// between a look's clock read and its count may find none. Counters for the debug line
    /// only: whether the unforetold synchronisations are what a light service waits in.)
    pub(super) fn waits_of(&mut self, waited: &[Waited]) -> SyncWaits {
        let mut out = SyncWaits::default();
        for w in waited {
            let Some(i) = self.pending[..self.pending_len]
                .iter()
                .position(|&(at, _)| at >= w.from)
            else {
                continue;
            };
            let side = if self.pending[i].1 {
                &mut out.foretold
            } else {
                &mut out.other
            };
            *side = (side.0 + 1, side.1.saturating_add(w.ns));
            self.pending.copy_within(i + 1..self.pending_len, 0);
            self.pending_len -= i + 1;
        }
        out
    }

    /// A look saw `count` synchronisations begun so far, at `now`. Only a single new one
    /// times a gap: two begun between two looks are one step the look cannot split.
    pub(super) fn saw(&mut self, count: u64, now: u64) {
        if count <= self.count {
            return;
        }
        let single = count == self.count + 1;
        let foretold = single && self.due_within(ns(SYNC_LEAD), now);
        if foretold {
            self.foretold += 1;
        }
        for _ in 0..count.saturating_sub(self.count).min(Rhythm::N as u64) {
            self.note(now, foretold);
        }
        self.count = count;
        if let Some(last) = self.last {
            let gap = now.saturating_sub(last);
            // A pause (between two requests) is no step of the rhythm: the steps go on after
            // it as before. (Started again after each, the model's H200 decode service beside
            // its ResNet step at 50/50 announced only the last 24 of its 33 tokens and answered
            // at p50 192.5 ms, 186.3 so; 185.5 alone.)
            if single && gap < Self::PAUSE {
                self.gaps.push(gap);
            }
        }
        self.last = Some(now);
    }

    /// Synchronisations counted so far.
    pub(super) fn count(&self) -> u64 {
        self.count
    }

    /// Of them, those that began where it foretold them (a look's [`SYNC_LEAD`] window).
    pub(super) fn foretold(&self) -> u64 {
        self.foretold
    }

    /// The gaps' median, where the last `N` are steady (`None`: no rhythm to go by).
    fn gap(&self) -> Option<u64> {
        if self.gaps.len() < Self::N {
            return None;
        }
        let g = self.gaps.sorted(u64::cmp);
        let median = g[Self::N / 2 - 1];
        let near = g
            .iter()
            .filter(|&&x| x.saturating_mul(4) >= median * 3 && x.saturating_mul(4) <= median * 5)
            .count();
        (near >= Self::STEADY).then_some(median)
    }

    /// Whether the next synchronisation is due within `lead` of `now`: from `lead` before the
    /// expected time until a part of the gap (`late_part`: half, or a quarter for a process
    /// with a task priority), or `lead` if longer, after it, after which one that did not come
    /// is not waited for. Never where they come less than two `lead`s apart (a host-bound
    /// stream synchronising every millisecond would say so half the time and more).
    pub(super) fn due_within(&self, lead: u64, now: u64) -> bool {
        match (self.last, self.gap()) {
            (Some(last), Some(gap)) if gap >= lead.saturating_mul(2) => {
                let at = last.saturating_add(gap);
                now.saturating_add(lead) >= at
                    && now < at.saturating_add(lead.max(gap / self.late_part))
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn steady(gaps: &[u64]) -> Rhythm {
        steady_with(Rhythm::LATE_PART, gaps)
    }

    /// A rhythm of `late_part` that saw a synchronisation at 1 s and one after each of `gaps`.
    fn steady_with(late_part: u64, gaps: &[u64]) -> Rhythm {
        let mut r = Rhythm::new(late_part);
        let mut t = 1_000 * MS;
        r.saw(1, t);
        for (i, g) in gaps.iter().enumerate() {
            t += g;
            r.saw(i as u64 + 2, t);
        }
        r
    }

    #[test]
    fn a_steady_pace_foretells_the_next_synchronisation() {
        let r = steady(&[5 * MS; 8]);
        let last = 1_000 * MS + 40 * MS;
        assert!(!r.due_within(MS, last + 3 * MS), "4 ms early is not yet");
        assert!(r.due_within(MS, last + 4 * MS + MS / 2));
        assert!(
            r.due_within(MS, last + 5 * MS + MS / 2),
            "a little late: still due"
        );
        assert!(
            r.due_within(MS, last + 7 * MS + MS / 4),
            "2.25 ms late, under half the gap: still due"
        );
        assert!(
            !r.due_within(MS, last + 7 * MS + MS / 2),
            "one that did not come is not waited for"
        );
    }

    #[test]
    fn synchronisations_inside_the_window_count_as_foretold() {
        let mut r = steady(&[5 * MS; 8]);
        assert_eq!(
            (r.count(), r.foretold()),
            (9, 0),
            "no rhythm before the eighth gap"
        );
        let last = 1_000 * MS + 40 * MS;
        r.saw(10, last + 5 * MS + MS / 10);
        assert_eq!((r.count(), r.foretold()), (10, 1), "on time");
        r.saw(11, last + 7 * MS);
        assert_eq!(r.foretold(), 1, "2 ms early: not foretold");
        r.saw(13, last + 20 * MS);
        assert_eq!(
            (r.count(), r.foretold()),
            (13, 1),
            "two at one look: counted, not foretold"
        );
    }

    #[test]
    fn a_pace_faster_than_two_leads_is_not_foretold() {
        let r = steady(&[MS + MS / 2; 8]);
        let last = 1_000 * MS + 12 * MS;
        assert!((0..30).all(|i| !r.due_within(MS, last + i * MS / 10)));
    }

    #[test]
    fn no_rhythm_from_few_or_uneven_gaps() {
        assert!(
            steady(&[5 * MS; 7]).gap().is_none(),
            "seven gaps are too few"
        );
        let uneven = [2 * MS, 9 * MS, 3 * MS, 12 * MS, 5 * MS, MS, 7 * MS, 4 * MS];
        assert!(steady(&uneven).gap().is_none());
        let mostly = [
            5 * MS,
            5 * MS,
            10 * MS,
            5 * MS,
            5 * MS,
            5 * MS,
            5 * MS,
            5 * MS,
        ];
        assert_eq!(
            steady(&mostly).gap(),
            Some(5 * MS),
            "one missed step moves nothing"
        );
    }

    #[test]
    fn after_a_pause_the_rhythm_goes_on_from_the_next_synchronisation() {
        let mut r = steady(&[5 * MS; 8]);
        let back = 1_000 * MS + 40 * MS + 200 * MS;
        r.saw(10, back);
        assert_eq!(r.gaps.len(), 8, "the pause is no gap");
        assert!(
            r.due_within(MS, back + 4 * MS + MS / 2),
            "the next step is foretold"
        );
        assert!(!r.due_within(MS, back + 2 * MS));
    }

    /// A decode service's token gaps, drawn by a fixed pseudo-random sequence from a
    /// piecewise-linear distribution with a long tail of slow tokens: p10 / p50 / p90 of 4.74 /
    /// 5.4 / 6.54 ms (3.96 at the least, 7.86 at the most). On the H100 the service's gaps
    /// beside training were 4.3 / 5.4 / 7.3 ms over whole runs (runs 145-147), more uneven
    /// than from one token to the next; a window closing a quarter of the gap past the due
    /// time foretells about as many of these as the H100 did (78 % against 69-76 %).
    fn decode_gaps(n: usize) -> Vec<u64> {
        let points = [
            (0.0, 3.96),
            (0.1, 4.74),
            (0.5, 5.4),
            (0.9, 6.54),
            (1.0, 7.86),
        ];
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                #[allow(clippy::cast_precision_loss)]
                let u = (x >> 11) as f64 / (1u64 << 53) as f64;
                let i = points
                    .iter()
                    .rposition(|&(p, _)| p <= u)
                    .unwrap_or(0)
                    .min(3);
                let ((p0, g0), (p1, g1)) = (points[i], points[i + 1]);
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let gap = ((g0 + (g1 - g0) * (u - p0) / (p1 - p0)) * MS as f64) as u64;
                gap
            })
            .collect()
    }

    #[test]
    fn a_decode_services_late_tokens_are_foretold_too() {
        // A token later than its due time by more than a quarter of the gap came after the
        // window had closed, and the trainer's queue was back on the GPU ahead of it: 78 % of
        // these were foretold so; with the window open half a gap past, 88 %.
        let r = steady(&decode_gaps(2_000));
        let (n, told) = (r.count() - 9, r.foretold());
        #[allow(clippy::cast_precision_loss)]
        let share = told as f64 / n as f64;
        assert!(share >= 0.85, "{told} of {n} foretold ({share:.2})");
    }

    #[test]
    fn a_high_priority_window_closes_a_quarter_gap_past_the_due_time() {
        let steady_at = |late_part| steady_with(late_part, &[8 * MS; 8]);
        let last = 1_000 * MS + 64 * MS;
        let (light, high) = (
            steady_at(Rhythm::LATE_PART),
            steady_at(Rhythm::PRIORITY_LATE_PART),
        );
        // Due 8 ms after the last: a quarter gap past is 2 ms, half 4 ms.
        assert!(light.due_within(MS, last + 9 * MS) && high.due_within(MS, last + 9 * MS));
        assert!(
            light.due_within(MS, last + 11 * MS),
            "half a gap: still due"
        );
        assert!(
            !high.due_within(MS, last + 10 * MS + MS / 10),
            "a quarter: no longer"
        );
        assert!(!light.due_within(MS, last + 12 * MS + MS / 10));
    }

    #[test]
    fn each_wait_goes_to_its_synchronisation_foretold_or_not() {
        let mut r = steady(&[5 * MS; 8]);
        let last = 1_000 * MS + 40 * MS;
        let wait = |from: u64, ms: u64| Waited {
            after: 0,
            from,
            ns: ms * MS,
        };
        // On time: foretold; its 1 ms wait comes at the next look. (One that began at the
        // very time of the look that counted it is that look's too.)
        r.saw(10, last + 5 * MS + MS / 10);
        let w = r.waits_of(&[wait(last + 5 * MS + MS / 10, 1)]);
        assert_eq!(
            w,
            SyncWaits {
                foretold: (1, MS),
                other: (0, 0)
            }
        );
        // 2 ms early: not foretold; it began and ended before the look that counted it.
        r.saw(11, last + 8 * MS);
        let w = r.waits_of(&[wait(last + 7 * MS + MS / 2, 3)]);
        assert_eq!(
            w,
            SyncWaits {
                foretold: (0, 0),
                other: (1, 3 * MS)
            }
        );
        // A wait whose synchronisation no look counted yet is left out, and nothing stays
        // pending once each wait has come.
        assert_eq!(r.waits_of(&[wait(last + 20 * MS, 2)]), SyncWaits::default());
        assert_eq!(r.pending_len, 0);
        // Two counted at one look, one wait come: the other stays pending for its own.
        r.saw(13, last + 30 * MS);
        let w = r.waits_of(&[wait(last + 29 * MS, 1)]);
        assert_eq!((w.other, r.pending_len), ((1, MS), 1));
    }

    #[test]
    fn two_synchronisations_between_two_looks_time_no_gap() {
        let mut r = steady(&[5 * MS; 8]);
        r.saw(11, 1_000 * MS + 50 * MS);
        assert_eq!(r.gaps.len(), 8, "the double step is not a gap");
        assert_eq!(r.last, Some(1_000 * MS + 50 * MS), "but it is the latest");
    }
}
