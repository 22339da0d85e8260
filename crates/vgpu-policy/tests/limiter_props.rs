//! Properties of the compute limiter (`vgpu_policy::limiter::Limiter`) over generated programs,
//! driven as the preload's controller drives it (the gate's budget, the container's virtual
//! time, timing events that say what each timed launch cost):
//! * whatever a program does, the GPU work charged over any stretch T ≥ 1 s is at most its
//!   share of T + BANK + AHEAD, plus the work of the one look that overshot;
//! * a program whose kernels keep the GPU busy less than its share is never held by credit;
//! * prices never become unlimited: whatever the marks say, every launch is charged at least
//!   1 ns, one of a kernel never timed the mean (never 0), and a decision admits at most
//!   MAX_ROOM launches.
use proptest::prelude::*;
use std::collections::VecDeque;
use vgpu_policy::limiter::{
    AHEAD, BANK, Held, Limiter, Look, MAX_ROOM, Mark, MarkKind, Priority, charge_vt,
};

const US: u64 = 1_000;
const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;

fn ns(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap()
}

/// A look of a process alone, its container's virtual time `vt`.
fn alone<'a>(
    now: u64,
    launched: u64,
    keys: &'a [u64],
    held: bool,
    marks: &'a [Mark],
    vt: u64,
    percent: u8,
) -> Look<'a> {
    Look {
        held,
        marks,
        ..Look::alone(now, launched, keys, vt, percent)
    }
}

/// A program phase: launches of `keys` kernels (key `k` costs `cost[k]` ns), `per_look` of
/// them between two looks at most, for `looks` looks `gap` ns apart.
#[derive(Clone, Debug)]
struct Phase {
    keys: u64,
    per_look: u64,
    looks: u64,
    gap: u64,
}

fn phase() -> impl Strategy<Value = Phase> {
    (
        1u64..6,
        prop_oneof![0u64..4, 4u64..64, 64u64..2_048],
        1u64..400,
        prop_oneof![20 * US..200 * US, 200 * US..6 * MS],
    )
        .prop_map(|(keys, per_look, looks, gap)| Phase {
            keys,
            per_look,
            looks,
            gap,
        })
}

/// What a run charged: (look time, charge) for every look, and whether any look was held by
/// credit.
struct Run {
    charges: Vec<(u64, u64)>,
    credit_held: bool,
}

/// Runs `phases` at `percent` through the gate: the program launches what it wants up to the
/// budget; a launch the limiter asked to time comes back, at the next look, as a clean bracket
/// of its true cost.
fn run(percent: u8, cost: &[u64], phases: &[Phase]) -> Run {
    let start = 10 * S;
    let mut l = Limiter::new(Priority::Normal, start);
    let (mut now, mut vt, mut launched, mut budget) = (start, 0u64, 0u64, 0u64);
    let mut sample: Option<u64> = None;
    let mut pending: VecDeque<Mark> = VecDeque::new();
    let mut charges = Vec::new();
    let mut credit_held = false;
    let mut k = 0u64;
    for p in phases {
        for _ in 0..p.looks {
            now += p.gap;
            let want = p.per_look;
            let n = want.min(budget.saturating_sub(launched));
            let mut keys = Vec::with_capacity(usize::try_from(n).unwrap());
            for _ in 0..n {
                let key = k % p.keys;
                k += 1;
                if sample == Some(launched) {
                    pending.push_back(Mark {
                        kind: MarkKind::Bracket {
                            at: launched,
                            key,
                            elapsed: cost[usize::try_from(key).unwrap()],
                            gap: 0,
                        },
                        shared: false,
                    });
                    sample = None;
                }
                keys.push(key);
                launched += 1;
            }
            let marks: Vec<Mark> = pending.drain(..).collect();
            let d = l.look(&alone(now, launched, &keys, n < want, &marks, vt, percent));
            vt = charge_vt(vt, now, d.charge, percent);
            charges.push((now, d.charge));
            credit_held |= d.held == Held::Credit;
            assert!(d.budget >= launched && d.budget - launched <= MAX_ROOM);
            budget = d.budget;
            if let Some(at) = d.sample {
                sample = Some(at);
            }
        }
    }
    Run {
        charges,
        credit_held,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn the_work_charged_over_any_second_is_at_most_the_share_and_the_bank(
        percent in 1u8..100,
        cost in proptest::collection::vec(prop_oneof![1u64..10 * US, 10 * US..20 * MS], 6),
        phases in proptest::collection::vec(phase(), 1..12),
    ) {
        let r = run(percent, &cost, &phases);
        let share = |t: u64| t * u64::from(percent) / 100;
        let slack = share(ns(BANK) + ns(AHEAD));
        // Every stretch from one look to a later one at least a second on: the charges of the
        // looks after its start, within it.
        let c = &r.charges;
        let most = c.iter().map(|x| x.1).max().unwrap_or(0);
        let mut prefix = vec![0u64];
        for x in c {
            prefix.push(prefix.last().unwrap() + x.1);
        }
        let mut j = 0;
        for i in 0..c.len() {
            while j < c.len() && c[j].0 < c[i].0 + S {
                j += 1;
            }
            for e in j..c.len() {
                let t = c[e].0 - c[i].0;
                let got = prefix[e + 1] - prefix[i + 1];
                prop_assert!(
                    got <= share(t) + slack + most,
                    "{got} ns charged in {t} ns at {percent} % (bound {})",
                    share(t) + slack + most
                );
            }
        }
    }

    #[test]
    fn a_program_under_its_share_is_never_held_by_credit(
        percent in 10u8..100,
        kernel in 1u64..500 * US,
        keys in 1u64..4,
        looks in 50u64..400,
        gap in 50 * US..2 * MS,
    ) {
        // Launches of `kernel` ns, as many a look as keep the GPU at most 80 % of the share busy.
        let per_look = gap * u64::from(percent) * 8 / 1_000 / kernel;
        prop_assume!(per_look >= 1);
        let phases = [Phase { keys, per_look, looks, gap }];
        let r = run(percent, &[kernel; 6], &phases);
        prop_assert!(!r.credit_held);
    }

    #[test]
    fn prices_never_become_unlimited(
        marks in proptest::collection::vec(
            (0u64..4, prop_oneof![Just(0u64), 0u64..1_000, 1_000u64..u64::MAX / 4], any::<bool>(), 0u8..3),
            0..64,
        ),
        fresh in 1u64..500,
    ) {
        // Whatever the timing events claim (0 ns, absurd times, shared or not, brackets,
        // segments, overheads), the launches of a kernel never timed are charged what unpriced
        // launches cost (`Limiter::unpriced`: the mean until one is timed), and nothing is
        // ever charged 0.
        let mut l = Limiter::new(Priority::Normal, 10 * S);
        let mut now = 10 * S;
        let mut launched = 0u64;
        for (i, (key, elapsed, shared, kind)) in marks.iter().enumerate() {
            now += MS;
            let kind = match kind {
                0 => MarkKind::Bracket { at: launched, key: *key, elapsed: *elapsed, gap: 0 },
                1 => MarkKind::Hold { at: launched, segment: Some((launched.saturating_sub(3), *elapsed)) },
                _ => MarkKind::Overhead { elapsed: *elapsed },
            };
            launched += 1;
            let keys = [*key];
            let marks = [Mark { kind, shared: *shared }];
            let d = l.look(&alone(now, launched, &keys, i % 2 == 0, &marks, 0, 50));
            prop_assert!(d.charge >= 1, "a launch charged {}", d.charge);
            prop_assert!(d.budget - launched <= MAX_ROOM);
        }
        let mean = l.mean_price();
        prop_assert!(mean.is_finite() && mean >= 1.0, "mean {mean}");
        let unpriced = l.unpriced();
        prop_assert!(unpriced.is_finite() && unpriced >= 1.0, "unpriced {unpriced}");
        // `fresh` launches of a kernel nobody timed: charged that.
        let keys = vec![1_000u64; usize::try_from(fresh).unwrap()];
        now += MS;
        let d = l.look(&alone(now, launched + fresh, &keys, false, &[], 0, 50));
        #[allow(clippy::cast_precision_loss)]
        let want = fresh as f64 * unpriced;
        #[allow(clippy::cast_precision_loss)]
        let got = d.charge as f64;
        prop_assert!(got >= 1.0 && (got - want).abs() <= want * 1e-9 + 1.0, "{got} for {fresh} at {unpriced}");
    }
}
