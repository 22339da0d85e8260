//! The compute limiter of one process on one GPU: a clock-free state machine.
//!
//! A container limited to N % of a GPU is charged the **GPU work** its processes launch, never
//! the time they hold the GPU. Each launch is priced by what its kernel costs on the GPU
//! ([`Prices`], learned from timing events the launch path records now and then), and the
//! price is added to the container's *virtual time* `vt` at N % ([`charge_vt`]): a container
//! that launched `w` ns of GPU work since it started may run while `vt ≤ now`, so over any
//! stretch it gets N % of the GPU's time, banking at most [`BANK`] of idleness. A program whose
//! kernels keep the GPU 10 % busy is charged 10 %, however its launches are spread: under a
//! 25 % limit it runs as fast as without one.
//!
//! Containers share the GPU three ways:
//! * **Light** processes (under their share lately and not GPU-bound: host-bound streams,
//!   request services between and during their requests) never wait for anyone: their kernels
//!   run beside the others', interleaved by the GPU's time-slicer, and their bursts are not
//!   held to a short queue.
//! * **Heavy** processes take exclusive *turns* through the node token when another heavy
//!   process wants the GPU. A process is heavy when its container used about its share lately
//!   (`vt` within [`LIGHT_LAG`] of now) or when it is GPU-bound: its queue, as estimated, kept
//!   the GPU busy most of the time lately, time spent waiting in a synchronisation counting as
//!   busy (a container squeezed below its share by the time-slicer is behind, yet heavy, and
//!   wins the turns). One waiting for its turn stays heavy. The waiter whose container's `vt`
//!   is smallest goes first (start-time fair queueing; ties to the least recently served); a
//!   holder keeps the GPU until a waiter is [`TURN_VT`] behind it, until it runs out of credit,
//!   until it stops launching while a waiter is due (first in line, not for a synchronisation
//!   it lately returned from straight to its kernels) or its queue runs dry between looks for
//!   [`STARVING`] (a host-bound phase: its small kernels run beside the next holder's), and
//!   before it hands the token on its queue drains. So two saturating containers neither lose
//!   time to the time-slicer's thrash nor wait through each other's host gaps. A turn is
//!   charged its own gaps too where another container waited through it (the GPU was the
//!   holder's alone; not its waits for its own credit), and a container banks nothing while it
//!   takes turns: its waits are no idleness, so on a GPU that cannot give every container its
//!   share (hand-overs cost) all fall behind the clock together and each gets its share of
//!   what the GPU runs
//!   ([`Decision::bank_at`]). Not in a crowd ([`crate::token::CROWD`]): there prices learned
//!   beside the others' work are too rough for exact keys, and those far behind go round.
//! * **Latency**: while a light process waits in a synchronisation (it needs its queued work
//!   now), heavy processes admit nothing, so the GPU runs the light one's work after at most the
//!   heavy queue ([`SHARED_DEPTH`]); one whose synchronisations come at a steady pace says so
//!   [`SYNC_LEAD`] before the next, and a heavy process ahead of its share drains first. A
//!   low-priority process (`CUDA_TASK_PRIORITY=1`), limited or not, keeps a queue of at most
//!   [`LOW_DEPTH`] while a high-priority one is active and stops while it synchronises or says
//!   its next synchronisation is due.
//!
//! Nothing unpriced runs away: until a timing event has priced one of its kernels a process
//! admits a handful of launches; a launch of a kernel never timed is charged the mean price; a
//! timing event is believed between 1 ns and 10 s.
//!
//! The driver (the preload's controller thread, or the model in `crates/vgpu-model`) reads
//! the gate, the marks and the node file into a [`Look`], calls [`Limiter::look`], and applies
//! the [`Decision`]: the gate's launch budget, the charge to the container's `vt`, what to
//! publish in its node slot, the token, whether to sample a launch, and when to look again.
//! Nothing here reads a clock, sleeps, or touches shared memory.
use crate::token::{Waiter, Watched};
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

mod learn;
mod look;
mod prices;
mod rhythm;
mod ring;
mod slot;
#[cfg(test)]
mod tests;

use prices::MAX_PRICE;
pub use prices::{Calibration, Prices};
use ring::Ring;
use slot::KEY_SHIFT;
pub use slot::{Peer, SlotState};

/// How much idleness a container banks at most, in its virtual time: after a long pause it may
/// run `BANK × N %` of GPU work above its share (a request's burst) before it is held back.
pub const BANK: Duration = Duration::from_millis(100);

/// How far a container's virtual time may run ahead of now (a debt of `AHEAD × N %` of GPU
/// work): its share is kept over any longer stretch, and containers whose shares add up to 100 %
/// never all wait at once because each one's last kernel overshot.
pub const AHEAD: Duration = Duration::from_millis(50);

/// How far past now a look's charge at prices that rest on one shared sample (upper bounds:
/// others' work may be in them) may run a container's virtual time; what it would run further
/// is deferred to the kernel's second sample, which charges each launch what that says, up to
/// its first price (one that leaves the kept launches before is charged that). A container at
/// 10 % started beside 63 busy ones was charged 24 ms for each of its first 8 launches of a 1 ms
/// kernel (its first sample spanned the others' work), ran 1.9 s ahead, and waited that long
/// for a turn in which a second sample could take the charge back (the simulator's 64
/// containers under `taskset -c 0`: the longest wait between synchronisations 0.95-2.5 s in six
/// runs, 0.71-1.34 s with this).
pub const UNSURE_AHEAD: Duration = Duration::from_millis(100);

/// How long what [`UNSURE_AHEAD`] deferred waits for its kernel's second sample at the most:
/// then it is charged at the first price (a program that stopped launching the kernel, or went
/// idle, would otherwise never pay for it).
pub const SETTLE_MAX: Duration = Duration::from_secs(2);

/// The virtual time a container that was never charged has in hand at first: it starts
/// [`AHEAD`] before now ([`charge_vt`]) and may run [`AHEAD`] past it ([`credit`]), so at N % it
/// runs `head_start() × N %` of GPU work at the GPU's full speed before its share holds it.
pub fn head_start() -> Duration {
    AHEAD * 2
}

/// How far a heavy waiter's container must be behind the holder's (virtual time) for the holder
/// to give its turn up: the turn's length, in virtual time (`TURN_VT × N %` of GPU work). Each
/// hand-over costs the GPU a drain, a wake-up and a context switch: on the model, two ResNet
/// steps at 30/70 got 27.0 / 69.4 % of their alone rate with 20 ms, 29.5 / 66.9 with 30 ms.
pub const TURN_VT: Duration = Duration::from_millis(30);

/// After a turn this long (wall time), the holder gives the token to a waiter as far along as
/// itself (the processes of one container share one virtual time, so neither is ever behind).
pub const TURN: Duration = Duration::from_millis(20);

/// A controller whose looks come late (starved of CPU) hands its turn on that much later, this
/// many times over: each hand-over costs the GPU about one late look of the next holder. Two
/// containers at 50/50 whose controllers ran every 5 ms kept 20–32 % of the GPU together with
/// the turns of controllers that look in time, 87–90 % with these (and the deeper queue); the
/// model's `keep_containers_taking_turns_under_starved_controllers_keep_the_gpu_busy`.
pub const TURN_PER_LATE: u64 = 10;

/// Handing its turn on, a controller whose looks come late releases the token while this many
/// times its lateness is still queued, instead of waiting to see its queue empty at its next
/// (late) look: the next holder starts only at its own late look, which then overlaps the
/// drain. The model's 50/50 pairs with controllers every 5 ms kept 86.5–90.0 % of the GPU
/// waiting, 92.0–96.0 with this; at 30/70 every 1 ms, 89.3–91.5 and 94.5–99.3. (Twice its
/// lateness did as well every 5 ms but left the 1 ms kernels' pair as it was every 1 ms;
/// releasing whatever is queued did about as well as four times, with no bound on how much of
/// its queue the next holder's work runs beside.)
pub const YIELD_PER_LATE: u64 = 4;

/// A turn is at least this much GPU work, whatever the share (at a small share [`TURN_VT`] of
/// virtual time is little work, and every hand-over costs a drain and a wake-up).
pub const MIN_TURN_WORK: Duration = Duration::from_millis(5);

/// How far a waiter's container must be behind the holder's for the holder to give its turn up,
/// in virtual time: [`TURN_VT`], or [`MIN_TURN_WORK`] of GPU work at `percent` if that is more.
pub fn turn_vt(percent: u8) -> u64 {
    ns(TURN_VT).max(ns(MIN_TURN_WORK) * 100 / u64::from(percent.clamp(1, 100)))
}

/// How far ahead of the GPU a process's admitted work may run when no other process is active
/// on the GPU.
pub const ALONE_DEPTH: Duration = Duration::from_millis(2);

/// The same while other processes are active: a light process's synchronisation waits for at
/// most this much of a heavy one's queue (plus the kernel running).
pub const SHARED_DEPTH: Duration = Duration::from_micros(500);

/// The same for a heavy process whose peers are all heavy (they take turns, and none waits in
/// a synchronisation for its queue): a queue of short kernels this shallow ran dry behind the
/// host's launches, and the GPU idled in the holder's turn (two ResNet steps at 50/50 on the
/// model: 43.2 / 44.2 % of their alone rate with 0.5 ms, 48.2 / 48.7 with 1 ms; a CNN pair at
/// 30/70 with 250 µs context switches: 64.6 % for the 70 % container with 1 ms, 66.5 with
/// 2 ms). As deep as alone: a hand-over drains it first, so the next holder still runs alone.
pub const TURN_DEPTH: Duration = Duration::from_millis(2);

/// How late a controller's looks count as coming, at most (starved of CPU: busy threads keep
/// the host's cores full). It keeps a queue twice as much deeper alone or taking turns (at
/// most 40 ms deeper), as much deeper beside a light peer (20 ms), and holds its turns
/// `TURN_PER_LATE` times as much longer. Looking every 5 ms with a 2 ms queue, a process of
/// 1 ms kernels ran 1 ms of them per look: 20 % of the GPU under a 50 % limit (the model,
/// `Params::ctl_quantum`). With the deeper queue capped at 20 ms instead of 40, a pair at 50/50
/// whose controllers ran every 20 ms admitted 20 ms of kernels at one look and 2 ms at the
/// next (the hold mark read at a late look dates the queue a look long), and kept 70–74 % of
/// the GPU together (1 ms kernels, the ResNet step, 11 ms kernels; the CNN step 98 %); now
/// 88–96 % (the CNN step 98 %).
pub const MAX_LATE: Duration = Duration::from_millis(20);

/// How late a timed look may come and count as in time (a timer's wake-up: 4.4 µs late at the
/// median on the H200, 14.7 at p99, run 85): only what a look comes later than this deepens the
/// queue. (Counted from the first ns, the model's looks 5 µs late put the ResNet pair at 30/70
/// on a GPU whose brackets add 3 µs at 28.6 / 58.4 % of alone, against 29.1 / 68.1.)
pub const LATE_NOISE: Duration = Duration::from_micros(100);

/// What a synchronisation may wait beyond the work it waits for (its thread's wake-up, the
/// hook's clock reads): only what it waited past this and the charge of the launches it could
/// have waited for is charged to those of them that nobody could price ([`Look::waited`]).
pub const WAIT_NOISE: Duration = Duration::from_micros(200);

/// The most a synchronisation's wait charges one launch beyond its charge: a synchronisation
/// may also wait for a copy, a host function or another process's event, and a launch beside
/// such a wait is charged no more than a long kernel's time ([`Look::waited`]).
pub const WAIT_EACH_MAX: Duration = Duration::from_millis(100);

/// How long a mark the GPU has not reached holds back the unpriced launches past it
/// ([`Look::unreached`]) at the most: a queue of new kernels the pace admitted on a guess runs
/// in far less, and a stream that waits for something the program does later is not waited for.
pub const UNREACHED_MAX: Duration = Duration::from_secs(1);

/// How long before its next synchronisation is due a light process that synchronises at a
/// steady pace says it is coming ([`SlotState::soon`]): a heavy neighbour ahead of its share
/// (one that would wait for its credit anyway) then admits nothing, its queue drains, and the
/// light one's queued kernels run before the synchronisation instead of inside it. (On the
/// model, the H200's decode service beside its ResNet step at 50/50: p50 199.0 ms without,
/// 186.2 with 1 ms, 185.5 alone; 0.3 ms did half of that, 1.5 ms no more, 2 ms less.)
pub const SYNC_LEAD: Duration = Duration::from_millis(1);

/// The queue a low-priority process keeps while a high-priority one is active (it drains before
/// each of that one's synchronisations the high one announces, [`SYNC_LEAD`]). On the model,
/// the H200's decode service at high priority beside its ResNet step at low: 0.2 ms without
/// the announcement, p99 1.060x alone and the step at 0.681 of its alone rate (the H200, run
/// 97: 1.10-1.14x, 0.66-0.68); with it 0.2 ms gave 1.006x / 0.632, this 1.007x / 0.733, 1 ms
/// 1.086x / 0.749, 2 ms 1.151x / 0.794.
pub const LOW_DEPTH: Duration = Duration::from_micros(500);

/// A container whose virtual time is at least this far behind now has used less than its
/// share lately: its processes are *light* (they run beside the others, without turns).
pub const LIGHT_LAG: Duration = Duration::from_millis(50);

/// A heavy process further than [`LIGHT_LAG`] behind its share is held on the GPU for a light
/// peer's announced synchronisations ([`SYNC_LEAD`]) at most one part in this of the time (an
/// allowance that fills at that rate up to [`FAR_HOLD_BURST`]): a light service keeps its
/// protection beside a trainer that cannot use its share, and a light peer that announces all
/// the time costs a squeezed neighbour no more. (The H100's 50 us loop beside the 5 us stream
/// at 50/50, held however far behind, was behind its share at the stream's announcements, and
/// so held, 23-31 % of the time, and kept 32.6-34.3 % of its alone rate against 40.4-40.7 not
/// held behind it, run 124; on a slower host the decode service's trainer at 30/70 was behind
/// its share at 9 % of the time at the service's announcements and, not held then, the
/// service waited 27.7 ms a request for the GPU against 11.3 at 50/50 where it was held, run
/// 127. On the model, the `slowhost` example's decode service beside a trainer with 1.4x the
/// host work at 30/70: p50 / p99 200.4 / 209.6 ms not held, 195.2 / 202.0 held however far
/// behind, 195.0 / 206.5 with this; the stream beside the 50 us loop keeps it at 45.5 %, as not
/// held, against 37.4 held however far behind.)
pub const FAR_HOLD_PART: u64 = 8;

/// The most a heavy process far behind its share has in its allowance ([`FAR_HOLD_PART`]):
/// with looks 1 ms apart, a full one holds it for about 23 ms in a row (the allowance fills
/// while it is spent), then an eighth of the looks.
pub const FAR_HOLD_BURST: Duration = Duration::from_millis(20);

/// A process is held for its peers' synchronisations (`PeerSync`: begun, announced, behind
/// its share, far behind on its allowance) at most this long in all since a look last found
/// none to hold it for, counted while it is held; then not again until a look finds none
/// (`Stats::peer_hold_cut_ns`). A light peer's synchronisation that waits for something other
/// than its own GPU work (a word another process writes, a collective's peer on another GPU)
/// holds nobody for longer. The decode service's synchronisations held the ResNet loop 1.2-1.3
/// ms a hold on average (the H100, runs 150-151).
pub const PEER_HOLD_MAX: Duration = Duration::from_millis(100);

/// A process that launched within this long is *active* (its peers keep their queues short).
pub const ACTIVE: Duration = Duration::from_millis(20);

/// A holder handing the token on waits for its queue to drain to this (its estimate)...
pub const YIELD_EMPTY: Duration = Duration::from_micros(20);

/// ...but no longer than this.
pub const YIELD_MAX: Duration = Duration::from_millis(30);

/// A heavy process that launched with a short queue and nothing waiting for this long is in a
/// host-bound phase: it needs no turn (its small kernels run beside the holder's).
pub const STARVING: Duration = Duration::from_micros(300);

/// How long the queue of a holder that is owed the GPU (every waiter's container is further
/// along than its own) must run dry before it hands its turn on, where its host-bound
/// stretches have been shorter than this.
pub const OWED_STARVING: Duration = Duration::from_millis(1);

/// A process whose queue (as estimated) has kept the GPU this busy lately is GPU-bound
/// (heavy, whatever its share)...
const BOUND_BUSY: f64 = 0.85;

/// ...until it falls under this.
const UNBOUND_BUSY: f64 = 0.6;

/// A light process whose queue kept the GPU busy this much lately (`Limiter::busy`: as much as
/// a bound one stays bound at) holds for a light peer's synchronisations as a heavy one does (a
/// trainer whose host keeps it under its share). Not less: a decode-like service beside a
/// host-bound trainer, its queue busy about half the time, held for the trainer's at 0.5.
const HUNGRY_BUSY: f64 = UNBOUND_BUSY;

/// How long "lately" is: the time constant of that average (a training step's host-bound
/// optimizer and its synchronisation are shorter).
const BUSY_TAU: Duration = Duration::from_millis(50);

/// A token holder that neither launched nor was held for this long gives its turn up to a
/// waiter that is due (to nobody else: it keeps the token while nobody is).
pub const IDLE: Duration = Duration::from_micros(500);

/// How often, at most, a launch is timed on its own (a bracket of two timing events).
pub const SAMPLE_EVERY: Duration = Duration::from_micros(500);

/// A process whose prices are all known still times a launch this often (kernels change).
pub const SAMPLE_REFRESH: Duration = Duration::from_millis(20);

/// How often the restart probe runs until the restart is believed ([`Decision::probe`]).
pub const PROBE_SOON: Duration = Duration::from_millis(20);
/// How often the restart probe runs once the restart is believed.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);

/// A process whose kernels have only shared prices asks for a clean sample at most this often
/// (the others keep off the GPU for one of its kernels: [`SlotState::exclusive`]).
pub const EXCLUSIVE_EVERY: Duration = Duration::from_secs(1);

/// How long it waits, once it asked, for the others' queues to drain before it times a launch.
pub const EXCLUSIVE_SETTLE: Duration = Duration::from_micros(400);

/// A request whose sample came back shared is made again after this long.
pub const EXCLUSIVE_RETRY: Duration = Duration::from_millis(100);

/// It gives the request up after this long without a clean sample.
pub const EXCLUSIVE_MAX: Duration = Duration::from_millis(60);

/// A process held back by its share looks again once its container has this much more
/// virtual time (a chunk of `CREDIT_STEP × N %` of GPU work; not a look per launch).
pub const CREDIT_STEP: Duration = Duration::from_millis(1);

/// How long a peer's heartbeat may stand still, on this process's clock, and its requests that
/// hold the others back (a clean sample, a light or high-priority process's synchronisation)
/// still count. A live process with such a request looks every [`SHARED_POLL`] and beats at
/// each look; one killed with a request published held its neighbours until its slot went
/// stale (`token::SLOT_STALE`, 0.5 s).
pub const HOLD_STILL: Duration = Duration::from_millis(20);

/// How often the controller looks while other processes are active or wait.
pub const SHARED_POLL: Duration = Duration::from_micros(125);

/// How often a heavy process waiting for the free node token looks (the winner's plain grace,
/// `token::HANDOFF_GRACE`; it takes the token once the grace it allows the winner is past,
/// [`Limiter::handoff_grace`]).
pub const WAIT_POLL: Duration = Duration::from_millis(2);

/// How often it looks while another process holds the token: the holder's release wakes the
/// first two in line at once, so this only notices a holder that died without releasing, and
/// keeps the waiter's slot fresh (many waiters then cost little CPU).
pub const HELD_WAIT: Duration = crate::token::HELD_POLL;

/// How often it looks while alone (a launch that reaches the budget wakes it earlier).
pub const ALONE_POLL: Duration = Duration::from_millis(5);

/// The price of a launch before anything is known of the process's kernels (ns). (At most
/// `PROBE` (8) launches are admitted before the first price is measured, so a process whose first
/// kernels are long cannot queue seconds of them on this guess.)
pub const FIRST_PRICE: f64 = 10_000.0;

/// A light process times a kernel again whose price rests on one shared sample and is more
/// than this many times its mean price ([`Limiter::settled`]).
pub const OUTLIER_PRICE: f64 = 4.0;

/// The launches a process admits before anything is priced (then it waits for a sample).
const PROBE: u64 = 8;

/// The most launches one decision admits beyond those already admitted: the keys of at most
/// this many launches are in the gate's ring between two looks (the preload's ring holds twice
/// as many).
pub const MAX_ROOM: u64 = 2048;

/// A timing event costs this much GPU time at the most (ns): a bracket measuring more than
/// this of pure overhead is not believed.
const MAX_OVERHEAD: f64 = 20_000.0;

/// A function's first launch call that took longer than this (ns) loaded its module, and an
/// unheld bracket around it says nothing of its kernel (`MarkKind::Bracket::gap`); of any
/// other call the driver reports at most this much (a longer one was preempted, perhaps after
/// it handed the kernel over).
pub const LONG_CALL: u64 = 20_000;

/// Nanoseconds of `d`, saturating at `u64::MAX`.
pub fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Hold marks (timing events recorded by held launches) in flight at most: a launch the gate
/// holds records none while this many are unread. The GPU stamps each before the next kernel of
/// its queue starts (a few µs on the H200): two keep a timed segment in every half queue.
pub const MARKS_IN_FLIGHT: usize = 2;

/// The container's virtual time after `work` ns of GPU work was launched at `now` under a
/// share of `percent` %: it never starts from further back than [`BANK`] before `now` (idleness
/// banks at most that much), and each ns of work moves it by `100 / percent` ns. The driver
/// applies [`Decision::charge_vt`] (this, with the bank the limiter chose) to the container's
/// shared word atomically (several processes charge it).
pub fn charge_vt(vt: u64, now: u64, work: u64, percent: u8) -> u64 {
    charge_vt_banked(vt, Some(now), now, (work, 0), percent)
}

/// [`charge_vt`] with the bank counted back from `bank_at` (`None`: no bank, the container's
/// virtual time stays where it is however far behind: it takes turns with others, and the time
/// it waited is no idleness), and `work` as (GPU ns charged, GPU ns taken back,
/// [`Decision::refund`]). What is taken back never moves it further back than [`BANK`] before the
/// bank's point (before now where it has none): at most what idleness could have banked, even
/// where the refund's launches never paid their charge (dropped while unthrottled) or another
/// process reset the word meanwhile. (Floored at now instead, the model's jittery decode service
/// beside its ResNet step lost the bank its first prices' refunds gave it: p50 194.0 ms, over
/// its test's bar of 1.04× its 185.9 alone.)
fn charge_vt_banked(
    vt: u64,
    bank_at: Option<u64>,
    now: u64,
    (work, refund): (u64, u64),
    percent: u8,
) -> u64 {
    // A container never charged (`vt` 0) starts from the bank's point (now without one).
    let from = match bank_at {
        None if vt != 0 => vt,
        at => start(vt, at.unwrap_or(now).min(now)),
    };
    let p = u64::from(percent.clamp(1, 100));
    let to = from.saturating_add(work.saturating_mul(100) / p);
    if refund == 0 {
        return to;
    }
    let floor = bank_at.unwrap_or(now).min(now).saturating_sub(ns(BANK));
    to.saturating_sub(refund.saturating_mul(100) / p)
        .max(floor.min(to))
}

/// Where a container's virtual time stands when the bank counts back from `at`: `vt`, but never
/// further back than [`BANK`]; a container that was never charged (`vt` 0: a new region)
/// starts [`AHEAD`] back, with less banked than one that was idle (its first request is not
/// held back for the lack of a past; the model's decode service beside a training container
/// missed its p99 bar without it).
fn start(vt: u64, at: u64) -> u64 {
    if vt == 0 {
        at.saturating_sub(ns(AHEAD))
    } else {
        vt.max(at.saturating_sub(ns(BANK)))
    }
}

/// The GPU work (ns) a container whose virtual time is `vt` may still launch at `now`: it may
/// run up to [`AHEAD`] ahead of its share (so that kernels longer than the others' gaps never
/// leave the GPU idle while every container waits for its time to come round).
pub fn credit(vt: u64, now: u64, percent: u8) -> u64 {
    now.saturating_add(ns(AHEAD))
        .saturating_sub(start(vt, now))
        .min(ns(BANK) + ns(AHEAD))
        * u64::from(percent.clamp(1, 100))
        / 100
}

/// The time from which a container whose virtual time is `vt` has credit again.
pub fn credit_at(vt: u64) -> u64 {
    vt.saturating_sub(ns(AHEAD))
}

/// HAMi's task priority, as `CUDA_TASK_PRIORITY` gives it (0 high, 1 low).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Priority {
    /// `CUDA_TASK_PRIORITY=0`: its peers keep out of its way.
    High,
    /// No priority given.
    #[default]
    Normal,
    /// `CUDA_TASK_PRIORITY=1`: keeps out of a high-priority peer's way.
    Low,
}

impl Priority {
    /// From the plan's task priority (HAMi's 0 or 1).
    pub fn from_task_priority(p: Option<i32>) -> Self {
        match p {
            Some(0) => Priority::High,
            Some(_) => Priority::Low,
            None => Priority::Normal,
        }
    }
}

/// What a completed timing event ("mark") measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MarkKind {
    /// Recorded by a launch held at the budget, after the `at` launches admitted before it.
    Hold {
        /// Launches admitted before it.
        at: u64,
        /// When the mark recorded before it (a hold mark, or a bracket's last event) was still
        /// queued as this one was recorded, the launches between ran back to back: the first
        /// of them, and the GPU ns from that mark to this one.
        segment: Option<(u64, u64)>,
    },
    /// Two events around one launch (number `at`, of `key`): `elapsed` is the GPU time
    /// between them.
    Bracket {
        /// The launch's number.
        at: u64,
        /// Its key.
        key: u64,
        /// GPU time between the two events.
        elapsed: u64,
        /// Of that, what the GPU spent waiting for the launch itself (ns): on a stream that
        /// was idle, the first event is reached at once and the kernel only once the host's
        /// launch call has handed it over (the driver's measure: how long that call took).
        /// At most [`LONG_CALL`], unless the launch was its function's first (then the whole
        /// call, on a busy stream too where it is longer: the stream may have run dry while
        /// the call loaded the module); 0 on a busy or held stream.
        gap: u64,
    },
    /// Two events with nothing between them: what a timing event costs.
    Overhead {
        /// GPU time between the two events.
        elapsed: u64,
    },
    /// The restart probe ([`Decision::probe`]): on a stream of the driver's own, held until all
    /// was queued, an event, one empty kernel, an event, two empty kernels, an event. `one`
    /// is the first span (a restart behind an event, an empty kernel, an event's cost), `two`
    /// the second (the same with a second empty kernel run back to back): `2 one − two` is
    /// what a bracket adds to any kernel it times, which a service's launches (never back to
    /// back, so no segment) could not teach.
    Probe {
        /// GPU time from the first event to the second.
        one: u64,
        /// GPU time from the second event to the third.
        two: u64,
    },
}

/// One completed mark, in the order they were recorded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mark {
    /// What it measured.
    pub kind: MarkKind,
    /// Whether another process launched while it was in flight (its time may include theirs).
    pub shared: bool,
}

/// A synchronisation of the program's that returned (successfully) since the last look: the
/// outermost, where threads overlapped theirs ([`Look::waited`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Waited {
    /// Launches admitted when it began (the gate's count): it waited for some of those.
    pub after: u64,
    /// When it began (ns of the one monotonic clock).
    pub from: u64,
    /// How long its thread waited (ns); where the driver's log had no room for each, the sum
    /// of several, `after` the last one's and `from` the first one's.
    pub ns: u64,
}

/// What the driver read at a look.
#[derive(Clone, Copy, Debug)]
pub struct Look<'a> {
    /// Now (ns of the one monotonic clock).
    pub now: u64,
    /// Launches admitted so far (the gate's count, never past its budget).
    pub launched: u64,
    /// The keys of the launches admitted since the last look, oldest first (those the gate's
    /// ring lost are missing from the front: priced at the mean).
    pub keys: &'a [u64],
    /// Each of those launches' function (or graph), as `keys` (empty: not known): a new grid
    /// of a function timed before is priced at that function's last timing. Read only for a
    /// launch of a key without a price, and for a timed launch (the preload records it only
    /// for launches that take its sampling path, which those do).
    pub units: &'a [u64],
    /// A launch waits at the gate now.
    pub held: bool,
    /// Marks completed since the last look.
    pub marks: &'a [Mark],
    /// The oldest mark still in flight, which the GPU has not reached: the launches admitted
    /// before it (`None`: none is in flight). Every launch from there on is still queued.
    pub unreached: Option<u64>,
    /// The other processes on this GPU.
    pub peers: &'a [Peer],
    /// This process holds the node token.
    pub holding: bool,
    /// The container's virtual time as its shared word holds it now.
    pub vt: u64,
    /// A thread of this process is inside a synchronisation.
    pub syncing: bool,
    /// The synchronisations its threads began so far (the hooks count them; a look that saw
    /// one more than the last times the gap between them, [`SYNC_LEAD`]).
    pub syncs: u64,
    /// A synchronisation or a query showed its queue empty since the last look, and nothing
    /// was launched after it.
    pub empty: bool,
    /// The driver drained the context (as the last decision asked) just before this look.
    pub drained: bool,
    /// The synchronisations that returned since the last look, in order: one that waited
    /// longer than what it could have waited for was charged proves that work cost more
    /// (`Limiter::charge_waits`).
    pub waited: &'a [Waited],
    /// The share in force (percent; 100: measuring only).
    pub percent: u8,
    /// HAMi's monitor blocks the container.
    pub blocked: bool,
    /// The container is work-conserving (`VGPU_SM_WORK_CONSERVING`): while no other process
    /// on the GPU uses its share (no heavy peer), it owes nothing ([`Decision::unthrottled`]).
    pub work_conserving: bool,
    /// HAMi's monitor says the container is alone on its GPU under the `default` policy
    /// (`utilization_switch` 0): it owes nothing.
    pub monitor_alone: bool,
    /// The driver can hold this process's queue on the GPU ([`Decision::hold_queue`]): its
    /// streams take a wait on a word of pinned memory before their next launches.
    pub queue_hold: bool,
}

impl<'a> Look<'a> {
    /// A look of a process alone on the GPU that only launched (`launched` so far, `keys`
    /// since the last look) under `percent` % with its container at `vt`: nothing held, no
    /// marks, no peers, not holding the token, not synchronising, nothing from HAMi's monitor.
    /// The other fields are set where a look saw more.
    pub fn alone(now: u64, launched: u64, keys: &'a [u64], vt: u64, percent: u8) -> Self {
        Look {
            now,
            launched,
            keys,
            units: &[],
            held: false,
            marks: &[],
            unreached: None,
            peers: &[],
            holding: false,
            vt,
            syncs: 0,
            syncing: false,
            empty: false,
            drained: false,
            waited: &[],
            percent,
            blocked: false,
            work_conserving: false,
            monitor_alone: false,
            queue_hold: false,
        }
    }
}

/// What the node token should do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Token {
    /// Not needed (release it if held).
    Free,
    /// Wanted with this key: announce it, take the token when [`may_take_now`] allows.
    Want(u64),
    /// Wanted with this key, but left to a live waiter a whole turn behind this process (it
    /// would hand the token to it at once): announce it, do not take it, wait for the release
    /// as a waiter does.
    Wait(u64),
    /// Keep it.
    Hold,
}

/// Why the last decision admitted nothing more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Held {
    /// It may admit more.
    No,
    /// The container is at its share.
    Credit,
    /// The queue is as deep as allowed.
    Queue,
    /// Another process has the GPU (the token, a light peer's synchronisation, a
    /// high-priority peer).
    Peer,
    /// HAMi's monitor blocks it.
    Blocked,
}

/// What the driver does after a look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// GPU ns to add to the container's virtual time ([`charge_vt`]).
    pub charge: u64,
    /// GPU ns to take back from it: launches charged their kernel's first price while it
    /// rested on one shared sample (an upper bound: others' work may be in it), which the
    /// kernel's second sample has undercut ([`Decision::charge_vt`]).
    pub refund: u64,
    /// The gate admits launches while its count is below this.
    pub budget: u64,
    /// What to publish in the node slot.
    pub slot: SlotState,
    /// The node token.
    pub token: Token,
    /// Time this launch (its number) on its own: the launch path brackets it with two timing
    /// events.
    pub sample: Option<u64>,
    /// Record an overhead bracket (two timing events with nothing between).
    pub overhead: bool,
    /// Run the restart probe ([`MarkKind::Probe`]) if the driver has one: often until the
    /// restart is believed, then every [`PROBE_EVERY`].
    pub probe: bool,
    /// Drain the context (wait for all its work), then look again with [`Look::drained`].
    pub drain: bool,
    /// Look again at this time at the latest.
    pub next: u64,
    /// Why nothing more is admitted.
    pub held: Held,
    /// The gate may stay open (no budget): measuring only (100 %) and not of low priority. A
    /// low-priority process keeps [`Decision::budget`] even without a limit.
    pub open: bool,
    /// Nothing holds the container back now: its virtual time is kept at now
    /// ([`Decision::charge_vt`]), so a neighbour that comes finds no debt to repay.
    pub unthrottled: bool,
    /// Hold the queue on the GPU until a decision says otherwise: launches pass the gate as
    /// the budget allows, but wait on the GPU behind a stream wait (a peer's synchronisation
    /// keeps it off the GPU, and its host goes on; [`Look::queue_hold`]).
    pub hold_queue: bool,
    /// Where the container's bank counts back from ([`charge_vt`]): `now`, or the GPU's
    /// virtual time where that is behind (the latest among the processes waiting for the
    /// token: a container that comes back from idleness, or a new one, starts no further
    /// ahead in line than [`BANK`] before the last of those that took turns all along, which
    /// an oversubscribed GPU has put behind the clock); `None` from when it takes turns with
    /// others until it has been idle for [`BANK`] or no heavy peer is left (its waits, its
    /// synchronisations and its host-bound stretches are no idleness: banked from `now`, the
    /// container that waited longer for each turn lost more of its virtual time, and 11 ms
    /// kernels beside 50 µs kernels at 50/50 got 50.1 / 46.9–47.8 % of their alone rates on
    /// the H200, runs 84, 87, 88, 90; 49.4 / 48.1–48.7 without, runs 88, 90). `now` again in
    /// a crowd of waiters ([`crate::token::CROWD`]), whose keys tie at the floor.
    pub bank_at: Option<u64>,
}

impl Decision {
    /// Whether another process's work runs on the GPU until the next look, by this decision: it
    /// keeps off the GPU for a peer (the token's holder, a light or high-priority peer's
    /// synchronisation, an exclusive sample). The driver counts the marks in flight as shared
    /// then: the peer may launch, run and go quiet between two looks, and its slot read at the
    /// next one would not show it (the model's CNN at 30 % priced its 600 µs kernel at 2.6 ms
    /// from one bracket that spanned its neighbour's exclusive sample). Also while it drains
    /// before handing the token on: a light or host-bound peer needs no token, and counted
    /// clean then, the model's CNN was still charged 1.08× its work. Also while its queue is
    /// held on the GPU for a peer ([`Decision::hold_queue`]).
    pub fn peer_runs(&self) -> bool {
        self.held == Held::Peer || self.hold_queue
    }

    /// The container's virtual time `vt` (as its shared word holds it) after this decision's
    /// charge at `percent`: [`charge_vt`] with the bank counted from [`Decision::bank_at`], less
    /// [`Decision::refund`] (never past the bank), kept at `now` while
    /// [`Decision::unthrottled`].
    pub fn charge_vt(&self, vt: u64, now: u64, percent: u8) -> u64 {
        let v = charge_vt_banked(vt, self.bank_at, now, (self.charge, self.refund), percent);
        if self.unthrottled { v.min(now) } else { v }
    }
}

/// One admitted launch the limiter still remembers (for pricing segments and the queue).
#[derive(Clone, Copy, Debug)]
struct Admitted {
    key: u64,
    /// Its function (or graph; 0: not known).
    unit: u64,
    price: f64,
    /// Charged the mean: its kernel had no price when it was admitted.
    guessed: bool,
    /// Charged its kernel's first price while that rested on one shared sample: the kernel's
    /// second sample takes back what it was charged above that sample's price, if anything
    /// ([`Decision::refund`]; while it is still kept, among the last [`KEPT`] launches).
    refundable: bool,
    /// Of its first price, what was not charged yet ([`UNSURE_AHEAD`]): the second sample
    /// charges it what that says up to its first price, and a launch that leaves the kept ones
    /// before is charged its first price.
    deferred: f64,
    /// When it was deferred (it waits [`SETTLE_MAX`] from then at the most).
    deferred_at: u64,
}

/// The launches whose prices size the next look's admission.
const RECENT: usize = 16;

/// Timings of launches not yet priced that one look keeps for after pricing, at most (the
/// preload's marks ring holds 8 brackets).
const TIMED_UNPRICED: usize = 32;

/// Functions whose last timing is kept for their new grids, at most.
const UNITS_KEPT: usize = 4096;

/// The launches kept for segments: at least two looks' worth.
const KEPT: usize = 2 * 2048 + 64;
const _: () = assert!(KEPT as u64 == 2 * MAX_ROOM + 64);

/// The limiter of one process on one GPU (see the module's documentation).
#[derive(Clone, Debug)]
pub struct Limiter {
    priority: Priority,
    /// What each kernel's brackets measured (ns).
    prices: Prices,
    /// What its brackets measure beyond a kernel's own time.
    calibration: Calibration,
    /// The overhead of one timing event on the GPU (ns), from overhead brackets.
    overhead: f64,
    /// The mean price of the launches admitted lately (ns).
    mean: f64,
    /// What launches admitted without a price turned out to cost, lately, by the clean timings
    /// of such launches (ns; `None`: none timed yet): [`Limiter::unpriced`].
    guess: Option<f64>,
    /// Each function's (or graph's) last clean timing (ns): the price of its new grids (at most
    /// [`UNITS_KEPT`]; past that the map starts afresh).
    unit_prices: HashMap<u64, f64>,
    /// What functions never timed cost by the synchronisations that waited for them
    /// ([`Limiter::charge_waits`]), each the price of its new grids until a timing replaces it
    /// (at most [`UNITS_KEPT`] too).
    unit_waited: HashMap<u64, f64>,
    /// Clean timings (launch, key, charge, key unpriced) of launches not priced yet when
    /// they came back, for [`Limiter::learn_unpriced`] (at most [`TIMED_UNPRICED`]).
    timed_unpriced: Vec<(u64, u64, f64, bool)>,
    /// Launches priced so far.
    priced: u64,
    /// The recent admitted launches, numbered from `first_kept`.
    kept: VecDeque<Admitted>,
    first_kept: u64,
    /// When the GPU is estimated to finish what was admitted (never behind the last look).
    gpu_done: u64,
    /// While its queue is held on the GPU ([`Decision::hold_queue`]): when the work admitted
    /// before the hold was estimated to finish, and the work admitted since (it runs after
    /// the hold is lifted).
    queue_held: Option<(u64, u64)>,
    /// When the last decision asked to look again.
    next_at: u64,
    /// How late its looks have come lately (ns, at most [`MAX_LATE`]): a controller starved of
    /// CPU keeps a deeper queue alone or taking turns, and longer turns.
    late: u64,
    /// The oldest mark in flight the GPU had not reached at the last looks (the launches
    /// before it), and since when.
    unreached_since: Option<(u64, u64)>,
    /// Each peer's heartbeat as last seen, and since when (this process's clock), in the order
    /// of the last look's peers ([`HOLD_STILL`]); and the look before's,
    /// whose buffer the next look reuses.
    beats: Vec<Watched>,
    beats_before: Vec<Watched>,
    /// The queue the last look's pace counted (ns): the estimate's, or more where the GPU has
    /// not reached a mark ([`Limiter::unreached_queue`]).
    paced: u64,
    /// The last look's time.
    looked: u64,
    /// When this process last launched.
    last_launch: u64,
    /// How busy its queue, as estimated, kept the GPU lately (0..=1), and whether that made
    /// it GPU-bound.
    busy: f64,
    /// How long that average has watched (ns): until BUSY_TAU it is the plain mean, so that
    /// a newcomer that fills the GPU is bound within a few looks and a host-bound one never.
    observed: u64,
    bound: bool,
    /// The last look saw its queue empty (a returned synchronisation, a drain).
    seen_empty: bool,
    /// A launch waited at the gate at the last look.
    waited: bool,
    /// Since when a look has seen a thread of it in a synchronisation.
    sync_since: Option<u64>,
    /// The launches a synchronisation may have waited for begin here: those before were done
    /// when the last one returned ([`Limiter::charge_waits`]).
    waits_from: u64,
    /// Since when every look has found the GPU its own (its queue not held on the GPU, and no
    /// peer live, or it holds the token and every live peer is heavy): a synchronisation that
    /// began after waited for its own work alone.
    own_since: Option<u64>,
    /// The last decision found it heavy.
    heavy: bool,
    /// Its last look found no limit on it (priorities only): it runs beside the others and its
    /// queue is kept short by prices that are mostly shared ([`Limiter::settled`]).
    unlimited: bool,
    /// How long it may still be held for a light peer's announcements while far behind its
    /// share (ns, at most [`FAR_HOLD_BURST`]; below 0 a debt, at most as much).
    far_hold_credit: i64,
    /// How long its peers' synchronisations have held it since a look last found none to hold
    /// it for ([`PEER_HOLD_MAX`]).
    peer_held_ns: u64,
    /// Held [`PEER_HOLD_MAX`] in a row: not held for them again until a look finds none to
    /// hold it for.
    peer_hold_cut: bool,
    /// The last look was not held for them past the limit where it would have been
    /// ([`Stats::peer_hold_cut_ns`]).
    was_cut: bool,
    /// When its current turn with the token began.
    turn_since: u64,
    /// How long its queue, as estimated, ran dry in its current turn since its first launch
    /// in it (`None`: nothing launched in it yet).
    turn_dry: Option<u64>,
    /// The last decision found it heavy beside other heavy processes (taking turns, or in a
    /// host-bound stretch between its turns).
    in_turns: bool,
    /// The last decision wanted the token (it is one of the waiters its peers see).
    wanted: bool,
    /// Since when it lets its queue drain before it hands the token on.
    yield_since: Option<u64>,
    /// Since when it has launched with a short queue and nothing waiting.
    starving_since: Option<u64>,
    /// How long its last two stretches of launching with its queue dry lasted (ns).
    dry_last: [u64; 2],
    /// It starved (a host-bound stretch) since its last synchronisation began.
    starved_since_sync: bool,
    /// Whether it starved between each of its last two synchronisations and the next (true
    /// until it has seen two).
    sync_starved: [bool; 2],
    holding: bool,
    /// The last decision's reason for admitting nothing more.
    held: Held,
    /// Sampling: when the last bracket was asked for, and whether one is outstanding.
    last_sample: u64,
    last_overhead: u64,
    /// When to ask for the next restart probe.
    probe_at: u64,
    /// Launches priced at the mean since the last sample.
    unknown: u64,
    /// A sample was ever asked for.
    asked: bool,
    /// Launches priced lately whose price only shared samples set.
    dirty: u64,
    /// Launches priced lately.
    recent: u64,
    /// Since when it asks the others to keep off the GPU for a clean sample.
    exclusive_since: Option<u64>,
    /// When the last such request ended (0: never).
    last_exclusive: Option<u64>,
    /// GPU ns charged in all.
    charged: u64,
    /// What launches turned out to cost above what they were charged, still to charge.
    correction: u64,
    /// The sampling's pseudo-random state (never 0).
    seed: u64,
    /// The launch asked to be timed, and when, until it has come.
    sample_pending: Option<(u64, u64)>,
    /// When the last sample was asked for, until a bracket returns (or `SAMPLE_REFRESH`
    /// passes: the sample was lost). Before the first price, one more launch is admitted for a
    /// new sample only while none is out.
    sample_out: Option<u64>,
    /// Launches admitted between two looks, lately (where a sample falls).
    per_look: f64,
    /// What it learned from its marks, counted (for the debug line).
    stats: Stats,
    /// The brackets its last look read, one by one (the preload's trace level prints them).
    samples: Vec<Sample>,
    /// Keys whose first price came from a shared sample under a limit: the launches charged
    /// the mean before it are corrected at the key's first clean sample instead (at most
    /// [`UNCORRECTED`] keys wait so).
    uncorrected: Vec<u64>,
    /// What refundable launches turned out to cost below their charge, still to take back.
    refund: u64,
    /// Refundable launches in `kept` (none: a sample's refund looks at none of them).
    refundable: usize,
    /// What launches have deferred in all ([`UNSURE_AHEAD`]), and since when the oldest of it
    /// has waited for its settling, at the earliest ([`SETTLE_MAX`]: a second sample or the
    /// end of `kept` may take the oldest away, and `settle_stale`'s scan finds the next).
    deferred_total: f64,
    deferred_since: Option<u64>,
    /// Of the queue as estimated, what settled launches turned out not to cost (ns, for the
    /// next look to take off it).
    unqueued: u64,
    /// The first in line's grace, as the last look judged it ([`Limiter::handoff_grace`]).
    grace: u64,
    /// When its synchronisations come ([`SYNC_LEAD`]).
    rhythm: rhythm::Rhythm,
    /// What a peer's synchronisation did to it at the last look (its time to the next look
    /// goes to the matching [`Stats`] counter).
    peer_sync: PeerSync,
}

/// What a peer's synchronisation did to a heavy or low-priority process at a look ([`Stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum PeerSync {
    /// Nothing: no peer that holds it synchronises or announces one.
    #[default]
    None,
    /// Held while a peer synchronises.
    Syncing,
    /// Held for a peer's announced synchronisation (ahead of its share, or of low priority).
    Announced,
    /// A light peer announced one and it is behind its share, within [`LIGHT_LAG`] of it: held
    /// on the GPU where the driver can ([`Decision::hold_queue`]).
    Behind,
    /// The same further behind: held so for a part of the time at most ([`FAR_HOLD_PART`]).
    Far,
}

/// Keys at most whose first launches wait for a clean sample to be corrected.
const UNCORRECTED: usize = 64;

/// One bracket as the limiter read it: what it measured and what it did to the key's price.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// The launch's key.
    pub key: u64,
    /// What the events saw (ns).
    pub elapsed: u64,
    /// What the driver reported of the launch call ([`MarkKind::Bracket`]'s `gap`).
    pub gap: u64,
    /// The key's price before and after it (ns).
    pub before: Option<f64>,
    /// See `before`.
    pub after: Option<f64>,
    /// Another process may have run inside it.
    pub shared: bool,
}

/// What a limiter learned from its marks so far, counted (the preload's debug line reports
/// them a second at a time): how its prices are made, and what they corrected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Brackets read.
    pub brackets: u64,
    /// Of the brackets, those timed on an idle stream (the call's time subtracted).
    pub idle_brackets: u64,
    /// Back-to-back hold segments read.
    pub segments: u64,
    /// What the brackets measured (ns, after the overhead or call), summed over those whose
    /// launch is still kept.
    pub sampled_ns: u64,
    /// What those launches were charged when admitted (ns).
    pub sampled_charged_ns: u64,
    /// Charged after the fact: launches that cost more than their charge (ns).
    pub corrected_ns: u64,
    /// Taken back after the fact ([`Decision::refund`], ns; as asked: the virtual time never
    /// goes past the bank for it).
    pub refunded_ns: u64,
    /// Deferred to a kernel's second sample: what charges at prices that rest on one shared
    /// sample would have run the virtual time past [`UNSURE_AHEAD`] (ns; the settling charges
    /// it, as [`Stats::corrected_ns`], what the second sample says).
    pub deferred_ns: u64,
    /// Of that, what synchronisations that waited longer than their work was charged proved
    /// (ns, [`Look::waited`]).
    pub waited_ns: u64,
    /// Restart probes read (shared ones too).
    pub probes: u64,
    /// Brackets of a function's first launch whose call outlasted [`LONG_CALL`] (a module
    /// load): not prices unless a second agrees (`Prices::observe_long`).
    pub long_calls: u64,
    /// Synchronisations begun, as its looks counted them.
    pub syncs: u64,
    /// Of them, those its rhythm foretold: begun inside the window its [`SlotState::soon`]
    /// covers (from [`SYNC_LEAD`] before the expected time).
    pub syncs_foretold: u64,
    /// Waits of synchronisations foretold that ended: how many, and their time (ns).
    pub foretold_waits: (u64, u64),
    /// The same of the synchronisations not foretold.
    pub other_waits: (u64, u64),
    /// How long a heavy process was held while a light peer synchronised, or a low-priority
    /// one while a high-priority peer did (ns).
    pub held_peer_sync_ns: u64,
    /// How long it was held for such a peer's synchronisation announced as due soon (ns).
    pub held_announced_ns: u64,
    /// How long a light peer's announcement found it behind its share (ns): held on the GPU
    /// then where the driver can while within [`LIGHT_LAG`] of its share, further behind for a
    /// part of the time at most ([`FAR_HOLD_PART`]) (the debug line's "passed over").
    pub announced_behind_ns: u64,
    /// Of that, how long it was further than [`LIGHT_LAG`] behind (ns; "far behind")...
    pub announced_far_ns: u64,
    /// ...and how long of that it was held on the GPU on its allowance (ns; "held so").
    pub held_far_ns: u64,
    /// How long it was not held for its peers' synchronisations because they had held it
    /// [`PEER_HOLD_MAX`] in a row (ns; "past the hold limit").
    pub peer_hold_cut_ns: u64,
}

impl Default for Limiter {
    fn default() -> Self {
        Limiter::new(Priority::Normal, 0)
    }
}

impl Limiter {
    /// A process's limiter, started at `now`.
    pub fn new(priority: Priority, now: u64) -> Self {
        Limiter {
            priority,
            prices: Prices::default(),
            calibration: Calibration::default(),
            overhead: 0.0,
            mean: FIRST_PRICE,
            guess: None,
            unit_prices: HashMap::new(),
            unit_waited: HashMap::new(),
            timed_unpriced: Vec::with_capacity(TIMED_UNPRICED),
            priced: 0,
            kept: VecDeque::with_capacity(KEPT),
            first_kept: 0,
            gpu_done: now,
            queue_held: None,
            paced: 0,
            unreached_since: None,
            beats: Vec::new(),
            beats_before: Vec::new(),
            next_at: u64::MAX,
            late: 0,
            looked: now,
            last_launch: 0,
            busy: 0.0,
            observed: 0,
            waited: false,
            seen_empty: false,
            bound: false,
            sync_since: None,
            waits_from: 0,
            own_since: None,
            heavy: false,
            unlimited: false,
            far_hold_credit: 0,
            peer_held_ns: 0,
            peer_hold_cut: false,
            was_cut: false,
            turn_since: now,
            turn_dry: None,
            in_turns: false,
            wanted: false,
            yield_since: None,
            starving_since: None,
            dry_last: [0; 2],
            starved_since_sync: false,
            sync_starved: [true; 2],
            holding: false,
            held: Held::No,
            last_sample: 0,
            last_overhead: 0,
            probe_at: 0,
            unknown: 0,
            asked: false,
            sample_out: None,
            dirty: 0,
            recent: 0,
            exclusive_since: None,
            last_exclusive: None,
            charged: 0,
            correction: 0,
            seed: 0x9E37_79B9_7F4A_7C15,
            sample_pending: None,
            per_look: 1.0,
            stats: Stats::default(),
            samples: Vec::new(),
            uncorrected: Vec::new(),
            refund: 0,
            refundable: 0,
            deferred_total: 0.0,
            deferred_since: None,
            unqueued: 0,
            grace: ns(crate::token::HANDOFF_GRACE),
            rhythm: rhythm::Rhythm::new(if priority == Priority::Normal {
                rhythm::Rhythm::LATE_PART
            } else {
                rhythm::Rhythm::PRIORITY_LATE_PART
            }),
            peer_sync: PeerSync::None,
        }
    }

    /// The brackets the last look read (for a trace).
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    /// What it learned from its marks so far, counted.
    pub fn stats(&self) -> Stats {
        Stats {
            syncs: self.rhythm.count(),
            syncs_foretold: self.rhythm.foretold(),
            ..self.stats
        }
    }

    /// What was learned of the process's kernels: what their brackets measured (a launch is
    /// charged [`Limiter::price`]).
    pub fn prices(&self) -> &Prices {
        &self.prices
    }

    /// Whether launches of `key` need no bracket of their own (the driver brackets the next
    /// launch of any other key when no sample is pending): its kernel has a price, and one no
    /// other process's time is in, unless this process is light (it runs beside the others,
    /// so no sample of its own is ever clean, and it would bracket every launch for nothing).
    /// A heavy process runs alone in its turns: a shared first price (a neighbour's time slice
    /// in it, four times the kernel's cost) is replaced at the kernel's next launch instead of
    /// when a sample happens to fall on it (a second and more on the model).
    ///
    /// A low-priority process with no limit (priorities only) also times again a price that
    /// rests on one shared sample: its queue is kept short by its prices, and one neighbour's
    /// time slice in a single price stood for seconds (the model's ResNet step on an H100's
    /// costs: a 13 µs kernel priced 1,178 µs, its queue estimate twice its real queue, the step
    /// at 0.450 of its alone rate for 8 s; timed again, 0.646). (The high-priority service's
    /// own prices keep nothing short: timed again too, its p99 moved by 0.003× on average over
    /// 24 `slowhost` settings, for a second bracket of each of its kernels.) A limited light
    /// process does so only where that price is more than [`OUTLIER_PRICE`] times its mean
    /// (the same step with 1.4× its host work, work-conserving at 50/50: a 6 µs kernel priced
    /// 3,403 µs, the step at 0.627 for 8 s; now 0.713), because timing every such kernel
    /// again, the model's ResNet pair at 50/50 was charged 1.29× and 1.11× its work (its clean
    /// brackets' corrections came to 237 ms each, against 76 and 93) and fell to 41.3 / 46.3 %
    /// of its alone rate. Either way once: the next bracket of the kernel, shared or not,
    /// leaves its price resting on more than one sample (a shared one that is higher moves it
    /// by an eighth of the difference only). The mean includes the outlier's own launches, so
    /// a mispriced kernel a quarter or more of the launches is never timed again so.
    pub fn settled(&self, key: u64) -> bool {
        let Some((price, clean, single)) = self.prices.state(key) else {
            return false;
        };
        let retime = self.heavy
            || (single
                && (self.unlimited && self.priority == Priority::Low
                    || price > OUTLIER_PRICE * self.mean));
        clean || !retime
    }

    /// What a launch of `key` is charged (ns), if its kernel has a price.
    pub fn price(&self, key: u64) -> Option<f64> {
        self.prices.get(key).map(|p| self.calibration.charge(p))
    }

    /// What a bracket measures beyond its kernel on a busy stream, as learned (ns; see
    /// [`Calibration`]).
    pub fn restart(&self) -> f64 {
        self.calibration.restart()
    }

    /// What a bracket on an idle stream measures beyond one on a busy stream, as learned (ns).
    pub fn idle_lag(&self) -> f64 {
        self.calibration.idle_lag()
    }

    /// How long the first in line has a free token to itself, as this process's last look
    /// judged it where that look wanted the token ([`may_take_now`]): `token::HANDOFF_GRACE`,
    /// and [`MAX_LATE`] more while the first in line's heartbeat moves. On a host that starves
    /// controllers of CPU the winner, woken by the release, may look as late as a starved look
    /// comes, and a waiter that happened to look first took the token after the plain grace,
    /// every time (the model's 64 containers at 10 %, controllers every 20 ms: 55 of them ran
    /// nothing after the first second, the GPU 18 % busy). A dead or hung one stops holding the
    /// GPU idle so once its heartbeat stood still for [`HELD_WAIT`] and `MAX_LATE`.
    pub fn handoff_grace(&self) -> u64 {
        self.grace
    }

    /// The mean price of a launch lately (ns).
    pub fn mean_price(&self) -> f64 {
        self.mean
    }

    /// What a launch without a price is charged (ns): what such launches turned out to cost,
    /// by the timings of those the gate timed, once one was; the mean price of the launches
    /// admitted lately until then. New kernels are not like the known ones: charged the mean, a
    /// program whose every launch was of a new kernel (dynamic shapes: each grid new; only
    /// about two are timed at once) was charged the first guess for ever, and one whose new
    /// kernels were long beside short known ones was charged the short ones' price: 99.4–99.7 %
    /// of the GPU under a 50 % limit on the model.
    pub fn unpriced(&self) -> f64 {
        self.guess.unwrap_or(self.mean)
    }

    /// The GPU work charged in all (ns).
    pub fn charged(&self) -> u64 {
        self.charged
    }

    /// The estimated GPU work still queued at `now` (ns).
    pub fn queued(&self, now: u64) -> u64 {
        self.gpu_done.saturating_sub(now)
    }

    /// The last decision's reason for admitting nothing more.
    pub fn held(&self) -> Held {
        self.held
    }
}

/// The first two in line for the free token among `peers` at `now` (`token::order`, as
/// [`may_take_now`] follows it): a release wakes these two only.
pub fn next_in_line(peers: &[Peer], now: u64) -> [Option<u64>; 2] {
    crate::token::next_in_line(&wanting(peers), now)
}

/// The peers that want the token, as waiters.
fn wanting(peers: &[Peer]) -> Vec<Waiter> {
    peers
        .iter()
        .filter_map(|p| {
            p.state.want.map(|key| Waiter {
                id: p.id,
                key,
                fresh: false,
                served: p.served,
                beat: p.beat,
            })
        })
        .collect()
}

/// Whether process `me`, wanting the token with the key it published, may take the free token
/// now (it was freed at `freed_at`): its key is due, and it is the eligible waiter with the
/// smallest key, ties to the least recently served, or that waiter has let it lie for `grace`
/// ([`Limiter::handoff_grace`]; `crate::token::may_take_after` over the peers that want it).
pub fn may_take_now(
    me: u64,
    my: Option<(u64, u64)>,
    peers: &[Peer],
    now: u64,
    (freed_at, grace): (u64, u64),
) -> bool {
    // Not before its own turn is due (its container has credit): a holder out of credit hands
    // the token on, and nobody should take it back before the one served longest ago can.
    if my.is_some_and(|(key, _)| key > now) {
        return false;
    }
    let mut ws = wanting(peers);
    if let Some((key, served)) = my {
        ws.push(Waiter {
            id: me,
            // Compared as the others see it: at the published word's resolution (two waiters
            // with one key, each comparing its exact key with the other's rounded one, would
            // each find the other first, and neither would take the token).
            key: (key >> KEY_SHIFT) << KEY_SHIFT,
            fresh: false,
            served,
            beat: now,
        });
    }
    crate::token::may_take_after(me, &ws, now, freed_at, grace)
}
