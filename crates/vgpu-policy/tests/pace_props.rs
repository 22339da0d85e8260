//! Properties of the compute limiter's pace (`compute::Pace`, `DutyCycle::finish_paced`) over
//! generated programs: whatever a program does inside a paced window, it never gets more than
//! the pace's depth (plus one launch) ahead of the GPU as the pace estimates it, a pause banks
//! nothing, and the learned time per launch stays positive and moves by bounded steps.
use proptest::prelude::*;
use std::time::Duration;
use vgpu_policy::compute::{DEFAULT_PERIOD, DutyCycle, PACE_STEP, Pace, WindowReport};

/// One look of the controller: `gap` ns after the previous, the program having taken `take`
/// percent of the launches it was allowed.
fn look() -> impl Strategy<Value = (u64, u64)> {
    (
        prop_oneof![1_000u64..200_000, 200_000u64..20_000_000],
        0u64..=100,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn a_program_never_runs_more_than_the_depth_ahead(
        per_us in 1u64..2_000,
        depth_us in 100u64..3_000,
        looks in proptest::collection::vec(look(), 1..200),
    ) {
        let per = per_us as f64 * 1e-6;
        let depth = Duration::from_micros(depth_us);
        let limit = depth_us * 1_000 + per_us * 1_000;
        let mut p = Pace::new(0);
        let mut now = 0u64;
        let mut launched = 0u64;
        let mut budget = p.budget(per, now, launched, depth);
        // A GPU that runs each launch in `per`, in order: when it finishes what it was given.
        let mut gpu_done = 0u64;
        for (gap, take) in looks {
            // The program takes part of what it was allowed (at once; it never gets past the
            // budget), and the GPU's real queue is never more than a depth and a launch.
            let allowed = budget.saturating_sub(launched);
            let taken = allowed * take / 100;
            launched += taken;
            gpu_done = gpu_done.max(now) + taken * per_us * 1_000;
            prop_assert!(gpu_done - now <= limit, "real queue {} > {limit}", gpu_done - now);
            now += gap;
            let before = budget;
            budget = p.budget(per, now, launched, depth);
            prop_assert!(budget >= launched, "the budget covers what was admitted");
            prop_assert!(p.queued(now) <= limit, "queued {} > {limit}", p.queued(now));
            // A pause banks nothing: whatever the time since the last look, the room is at
            // most a depth's worth of launches and the next one.
            prop_assert!(budget - launched <= depth_us / per_us + 1, "{budget} {launched} {before}");
        }
    }

    #[test]
    fn the_time_per_launch_stays_positive_and_moves_by_bounded_steps(
        reports in proptest::collection::vec(
            (1u64..100_000, 1u64..5_000, 0u64..5_000, proptest::option::of(0u64..3_000)),
            1..100,
        ),
    ) {
        let depth = Duration::from_millis(1);
        let mut c = DutyCycle::new(50, DEFAULT_PERIOD);
        for (busy_us, launches, drain_us, queued_us) in reports {
            let before = c.per_launch();
            c.finish_paced(
                WindowReport {
                    busy: Duration::from_micros(busy_us),
                    launches,
                    drain: Duration::from_micros(drain_us),
                },
                depth,
                queued_us.map(Duration::from_micros),
            );
            let (Some(b), Some(a)) = (before, c.per_launch()) else {
                continue;
            };
            let (b, a) = (b.as_secs_f64(), a.as_secs_f64());
            prop_assert!(a > 0.0 && a.is_finite());
            // Down by at most 1/√PACE_STEP a window; up by at most halfway to the window's mean.
            // (Durations round to whole nanoseconds.)
            prop_assert!(a >= b / PACE_STEP.sqrt() - 2e-9, "{b} -> {a}");
            let mean = busy_us as f64 * 1e-6 / launches as f64;
            prop_assert!(a <= b.max(mean) + 2e-9, "{b} -> {a}, mean {mean}");
        }
    }
}
