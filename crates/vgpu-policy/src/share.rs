//! Sharing one GPU between containers (and between the processes of one container): who gets
//! the node token next, what a window is charged, and when a window ends early.
//!
//! The duty cycle ([`crate::compute`]) keeps one container at its share when it is alone. When
//! several share a GPU they take turns through the node token, and four rules make the turns
//! add up to the limits (docs/COMPUTE.md has the derivation and the measurements):
//!
//! * **A1 — waiting for the token is not idleness.** A window is counted from the moment the
//!   container was *due* (its schedule allowed it and it had a launch waiting), not from its
//!   late start, within a bounded lag [`LAG`]: [`advance`]. Idle time still banks nothing: a
//!   container with nothing to launch has no due time.
//! * **A2 — the token goes to the earliest eligible waiter.** Waiters publish their due time
//!   (their *key*) in the node file; a free token may be taken only by the waiter with the
//!   smallest key ([`may_take`]), or by anyone once it has been free for [`HANDOFF_GRACE`]
//!   (a winner that died or never woke is passed over), or whose slot's heartbeat is stale
//!   ([`SLOT_STALE`]).
//! * **A3 — announce before sleeping; ties go to the least recently served**, so processes of
//!   one container (which share one schedule, hence one key) alternate.
//! * **A4 — move the schedule before handing the token on** (the caller's ordering: see
//!   docs/COMPUTE.md), so a sibling that wakes on the release sees the new schedule.
//!
//! And two rules for latency-sensitive tenants:
//!
//! * **A window ends when the container's queue is empty** ([`close_reason`]): once the
//!   program's own synchronisation (or successful query) has shown that its work finished and
//!   it has launched nothing for [`QUIET_GAP`], the window closes and is charged up to that
//!   moment only ([`charged_busy`]): the host gap until the next request is not GPU time.
//! * **A fresh waiter preempts.** A waiter whose launch arrived after its schedule allowed it
//!   (it is under its share: *fresh*) ends the holder's window early ([`Close::Yield`]), so a
//!   light service waits for at most the holder's drain, not its whole window. The holder loses
//!   nothing: it is backlogged, and A1 credits its wait.
//!
//! Everything here is plain arithmetic on nanoseconds of one monotonic clock; the caller (the
//! preload's controller, or the deterministic model in `crates/vgpu-model`) supplies the times.
use std::time::Duration;

// The token's rules, which lived here before they got a module of their own.
pub use crate::token::{
    HANDOFF_GRACE, SHARED_MEMORY, SLOT_STALE, Waiter, beat_fresh, contended, fresh_waiter,
    key_word, may_take, parse_key_word, retry_at, winner,
};

/// How far back a backlogged window may be counted from (A1): a container kept waiting by
/// others for longer than this forfeits the excess (2 × the default period).
pub const LAG: Duration = Duration::from_millis(100);

/// A window whose program has shown its queue empty (a synchronisation or a successful query
/// returned) and has launched nothing since for this long closes, charged up to that moment.
pub const QUIET_GAP: Duration = Duration::from_micros(500);

/// A window in which nothing at all was launched for this long closes (the program neither
/// launches nor synchronises: it is idle, or doing host work), charged up to its drain.
pub const IDLE_GAP: Duration = Duration::from_millis(2);

/// How far ahead of the GPU a contended window's launches may run (pacing): a fresh waiter
/// that ends the window then waits for about this much queued work (plus the kernel running),
/// not for the whole window's. See `DutyCycle::pace`. (2 ms until the H200's run 27, then 1 ms;
/// 0.5 ms since run 33, with a pace that never banks a pause and a time per launch steered by
/// the drains: beside PyTorch training at 50/50 a request's p99 went from 3.86 to 3.52 / 3.39 ms,
/// under MPS's 3.6, docs/COMPUTE.md.)
pub const PACE_DEPTH: Duration = Duration::from_micros(500);

/// [`PACE_DEPTH`] for a window whose launches are priced by their learned GPU time
/// (`compute::Costing`): the queue it allows is what the GPU takes to run it, not a count of
/// launches whose matrix products overrun it, so it can be deeper for the same wait.
pub const COSTED_PACE_DEPTH: Duration = Duration::from_millis(1);

/// The pace's marks (`compute::Costing`) recorded and not yet looked at, at most: a launch the
/// pace holds records none while this many are. A mark is a timing event, and the GPU takes a
/// few µs to stamp one before the next kernel of its queue starts (the H200's run 39): marked
/// at every hold, a run of 10 µs kernels carried ~125 marks in a 26 ms window and two such
/// containers lost 2–3 points of the GPU. Two keep a timed segment (a mark recorded while the
/// previous one is queued) in every half queue.
pub const MARKS_IN_FLIGHT: usize = 2;

/// A program that last launched this long before a paced window's close, and was not held by
/// the pace since, had *stopped launching* (see [`pace_limited`]): the pace, refilled at every
/// look, holds a launcher again within a few looks, while a program waiting for its own GPU
/// work stopped when it was about [`PACE_DEPTH`] ahead.
pub const PACE_RECENT: Duration = Duration::from_micros(500);

/// Whether a paced window's pace, not the program, set its rate up to its close: the pace held
/// a launch in the window (`held_at`, the last time it did; 0: never), and the program had not
/// stopped launching by the close — its last launch (`last_launch`) is recent, or the pace held
/// it after that. A program that stopped on its own (it waits for its GPU work, or does host
/// work) has a short drain whatever the pace did earlier; read as a pace too slow, such windows
/// shortened the time per launch step after step of a PyTorch training loop, until the pace
/// held nothing (H200 runs 27 and 31).
pub fn pace_limited(held_at: u64, last_launch: u64, now: u64) -> bool {
    held_at != 0 && (held_at >= last_launch || now.saturating_sub(last_launch) < ns(PACE_RECENT))
}

/// The budget cap under contention (B), as a multiple of what fills the target on-time.
pub const CONTENDED_BUDGET: f64 = 1.25;

/// Nanoseconds of `d`, saturating at `u64::MAX`.
pub fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// When a window became due: its schedule allowed it (`next`) and a launch was waiting
/// (`demand`, the first waiting launch's time; for a container backlogged at its previous
/// window's end, that end). This is the waiter's key.
pub fn due(next: u64, demand: u64) -> u64 {
    next.max(demand)
}

/// Whether a waiter with this due time is *fresh*: its launch arrived after its schedule
/// allowed it, so it was under its share and idle. Only for a container whose last window
/// was not [`backlogged`]: one cut short while busy wants the GPU from its close on, however
/// late its program's next launch reached the gate.
pub fn is_fresh(next: u64, demand: u64) -> bool {
    demand > next
}

/// Whether a window that closed for this reason leaves its container *backlogged*: its program
/// was still busy (the deadline, the budget or a fresh waiter ended the window, not the
/// program). Its next demand then counts from the close (A1), and it is never fresh.
pub fn backlogged(close: Close) -> bool {
    matches!(close, Close::Deadline | Close::Budget | Close::Yield)
}

/// [`backlogged`], knowing whether a launch was already waiting for the next window when the
/// window was settled (after its drain): a program that launches again while its quiet or idle
/// window drains was not done (a pause between two bursts of one loop), and keeps the time it
/// is owed, as a window the program did not end would.
pub fn backlogged_at_settle(close: Close, launch_waiting: bool) -> bool {
    backlogged(close) || launch_waiting
}

/// Whether a container whose last window ended quiet or idle should have its next window
/// opened *armed*, before any launch: its schedule allows it by `now` (it is under its share)
/// and nobody else wants the GPU. The next launch then passes the gate at once instead of
/// waking the controller and waiting for it, and the window counts from that launch (its due
/// time is its first launch, never the arming: idle time is not banked). An armed window is
/// given back as soon as another process waits, and after [`ARMED_HOLD`] without a launch.
pub fn arm(last_backlogged: bool, contended: bool) -> bool {
    !last_backlogged && !contended
}

/// How long an armed window waits for its first launch before it gives the token back (the
/// controller then waits for a launch as usual).
pub const ARMED_HOLD: Duration = Duration::from_millis(100);

/// How often an armed window with no launch yet looks for other waiters (a newcomer waits at
/// most this long for an idle holder).
pub const ARMED_POLL: Duration = Duration::from_millis(1);

/// A1: the container's next opening time after a window that was due at `due`, started (first
/// launch) at `first` and earned `credit` (busy / share); `next` is the schedule before it.
/// Counts from the due time, but never from more than [`LAG`] before the start, and never
/// before `next` (already earned time is never given back).
pub fn advance(next: u64, due: u64, first: u64, credit: Duration) -> u64 {
    let from = next.max(due.max(first.saturating_sub(ns(LAG))));
    from.saturating_add(ns(credit))
}

/// What the controller knows about the open window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowState {
    /// The window's first launch (ns).
    pub first: u64,
    /// When the submission time ends (`first + plan.submit`).
    pub deadline: u64,
    /// Whether a launch found the budget spent.
    pub budget_spent: bool,
    /// The last launch admitted.
    pub last_launch: u64,
    /// When the program last saw all its work finished (a synchronisation or a successful
    /// query returned) with no launch after it; `None` otherwise.
    pub quiet: Option<u64>,
    /// Whether a thread of the program is inside a synchronisation now (waiting for its GPU
    /// work: not idle, however long since its last launch).
    pub syncing: bool,
    /// Whether a fresh waiter wants the token ([`fresh_waiter`]).
    pub fresh_waiter: bool,
}

/// Why a window closes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Close {
    /// Its submission time is over.
    Deadline,
    /// Its launch budget is spent.
    Budget,
    /// The program showed its queue empty and stayed quiet for [`QUIET_GAP`]: charged up to
    /// the quiet moment.
    Quiet(u64),
    /// Nothing launched for [`IDLE_GAP`], and no synchronisation in progress: the program is
    /// busy on the host.
    Idle,
    /// A fresh waiter is owed the GPU.
    Yield,
}

/// Whether the window closes now, and why (checked in this order: a quiet program, a fresh
/// waiter, the budget, the deadline, an idle program). A program with a thread inside a
/// synchronisation (or waiting for the pace) is never quiet: one successful synchronisation
/// shows one stream or one event done, and a thread already waiting again (an event watcher, a
/// second stream) has GPU work outstanding.
pub fn close_reason(s: &WindowState, now: u64) -> Option<Close> {
    if let Some(q) = s.quiet
        && !s.syncing
        && now >= q.saturating_add(ns(QUIET_GAP))
    {
        return Some(Close::Quiet(q));
    }
    if s.fresh_waiter {
        return Some(Close::Yield);
    }
    if s.budget_spent {
        return Some(Close::Budget);
    }
    if now >= s.deadline {
        return Some(Close::Deadline);
    }
    if !s.syncing && now >= s.last_launch.saturating_add(ns(IDLE_GAP)) {
        return Some(Close::Idle);
    }
    None
}

/// The next time [`close_reason`] can change without any event (a launch, a synchronisation,
/// a waiter) happening: when the controller must look again at the latest.
pub fn next_check(s: &WindowState) -> u64 {
    let mut t = s.deadline;
    if !s.syncing {
        t = t.min(s.last_launch.saturating_add(ns(IDLE_GAP)));
        if let Some(q) = s.quiet {
            t = t.min(q.saturating_add(ns(QUIET_GAP)));
        }
    }
    t
}

/// A drain that returned within this long found the queue empty.
pub const EMPTY_DRAIN: Duration = Duration::from_micros(50);

/// How often, at the least, a holder's controller looks at the waiter slots during a window
/// (for a fresh waiter: [`Close::Yield`]).
pub const POLL: Duration = Duration::from_micros(250);

/// How often a holder's controller looks during a **paced** (contended) window: it raises the
/// pace at each look, and a fresh waiter waits for its next look. With a [`PACE_DEPTH`] of
/// 1 ms, looking every 125 µs keeps the queue between 0.875 and 1 ms deep.
pub const PACED_POLL: Duration = Duration::from_micros(125);

/// The longest a holder's controller sleeps between two looks at the slots during a window.
pub fn poll(paced: bool) -> Duration {
    if paced { PACED_POLL } else { POLL }
}

/// The busy time a window is charged: from its first launch to the end of its work. When the
/// window closed quiet and its drain (from `closed` to `drained`) found nothing to wait for,
/// the work ended by the quiet moment, and the gap since is not charged; otherwise (other
/// streams still had work, or any other close) it ended at the drain.
pub fn charged_busy(first: u64, closed: u64, drained: u64, close: Close) -> Duration {
    let end = match close {
        Close::Quiet(q) if drained.saturating_sub(closed) <= ns(EMPTY_DRAIN) => q.min(drained),
        _ => drained,
    };
    Duration::from_nanos(end.saturating_sub(first))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_program_that_stopped_launching_was_not_held_by_its_pace() {
        let us = 1_000;
        // Never held: not pace-limited.
        assert!(!pace_limited(0, 100 * us, 200 * us));
        // Held after its last launch: waiting for the pace now.
        assert!(pace_limited(150 * us, 100 * us, 2_000 * us));
        // Held earlier, launched 100 µs ago: the pace lets it through a few at a time.
        assert!(pace_limited(80 * us, 100 * us, 200 * us));
        // Held earlier, last launch 1 ms ago and nothing held since: it stopped by itself.
        assert!(!pace_limited(80 * us, 100 * us, 1_100 * us));
    }

    #[test]
    fn a_backlogged_window_counts_from_its_due_time_within_the_lag() {
        let credit = Duration::from_millis(40);
        // Due at 100, kept waiting by another container until 130: counted from 100.
        assert_eq!(advance(100 * MS, 100 * MS, 130 * MS, credit), 140 * MS);
        // Kept waiting 300 ms: only LAG (100 ms) is credited.
        assert_eq!(advance(100 * MS, 100 * MS, 400 * MS, credit), 340 * MS);
        // A fresh demand at 500 after an idle stretch: from the demand, not from `next`.
        let d = due(100 * MS, 500 * MS);
        assert_eq!(d, 500 * MS);
        assert_eq!(advance(100 * MS, d, 501 * MS, credit), 540 * MS);
        // Never before the schedule.
        assert_eq!(advance(200 * MS, 100 * MS, 150 * MS, credit), 240 * MS);
    }

    #[test]
    fn fresh_means_the_launch_came_after_the_schedule_allowed_it() {
        assert!(is_fresh(10, 11));
        assert!(!is_fresh(10, 10));
        assert!(!is_fresh(10, 5));
    }

    #[test]
    fn a_window_the_program_did_not_end_leaves_its_container_backlogged() {
        assert!(backlogged(Close::Deadline));
        assert!(backlogged(Close::Budget));
        assert!(backlogged(Close::Yield));
        assert!(!backlogged(Close::Quiet(5)));
        assert!(!backlogged(Close::Idle));
    }

    fn state() -> WindowState {
        WindowState {
            first: 10 * MS,
            deadline: 35 * MS,
            budget_spent: false,
            last_launch: 12 * MS,
            quiet: None,
            syncing: false,
            fresh_waiter: false,
        }
    }

    #[test]
    fn a_window_closes_when_the_program_is_quiet_and_is_charged_up_to_then() {
        let mut s = state();
        assert_eq!(close_reason(&s, 13 * MS), None);
        assert_eq!(next_check(&s), 14 * MS, "the idle gap");
        s.quiet = Some(12_600_000);
        assert_eq!(next_check(&s), 13_100_000);
        assert_eq!(close_reason(&s, 13_000_000), None);
        let c = close_reason(&s, 13_100_000).unwrap();
        assert_eq!(c, Close::Quiet(12_600_000));
        // The drain found nothing: charged to the quiet moment, not to the drain.
        assert_eq!(
            charged_busy(10 * MS, 13_100_000, 13_120_000, c),
            Duration::from_micros(2600)
        );
        // The drain had to wait (another stream's work): charged to the drain's end.
        assert_eq!(
            charged_busy(10 * MS, 13_100_000, 14 * MS, c),
            Duration::from_millis(4)
        );
        assert_eq!(
            charged_busy(10 * MS, 13 * MS, 13 * MS, Close::Deadline),
            Duration::from_millis(3)
        );
    }

    #[test]
    fn a_program_waiting_for_its_gpu_work_is_not_quiet() {
        // An event watcher: its synchronisation returned (one event done) and it is already
        // inside the next one, with later kernels queued.
        let mut s = state();
        s.quiet = Some(12 * MS);
        s.syncing = true;
        assert_eq!(close_reason(&s, 20 * MS), None);
        s.syncing = false;
        assert_eq!(close_reason(&s, 20 * MS), Some(Close::Quiet(12 * MS)));
    }

    #[test]
    fn a_launch_waiting_at_settle_keeps_a_quiet_window_backlogged() {
        assert!(!backlogged_at_settle(Close::Quiet(5), false));
        assert!(backlogged_at_settle(Close::Quiet(5), true));
        assert!(backlogged_at_settle(Close::Idle, true));
        assert!(backlogged_at_settle(Close::Deadline, false));
        assert!(arm(false, false));
        assert!(
            !arm(true, false),
            "a busy program waits for its schedule as before"
        );
        assert!(!arm(false, true), "others wait: no token held idle");
    }

    #[test]
    fn other_reasons_to_close() {
        let mut s = state();
        assert_eq!(close_reason(&s, 14 * MS), Some(Close::Idle));
        s.syncing = true;
        assert_eq!(close_reason(&s, 14 * MS), None, "waiting for its work");
        assert_eq!(next_check(&s), 35 * MS);
        s.syncing = false;
        s.last_launch = 34 * MS;
        assert_eq!(close_reason(&s, 35 * MS), Some(Close::Deadline));
        s.budget_spent = true;
        assert_eq!(close_reason(&s, 20 * MS), Some(Close::Budget));
        s.fresh_waiter = true;
        assert_eq!(close_reason(&s, 20 * MS), Some(Close::Yield));
    }
}
