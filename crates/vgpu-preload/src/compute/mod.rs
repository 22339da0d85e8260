//! The compute limiter's launch gate and its controller thread: the thin driver of
//! [`vgpu_policy::limiter::Limiter`], which decides everything (docs/COMPUTE.md).
//!
//! Launch path (every `cuLaunchKernel*`, `cuLaunchCooperativeKernel*`, `cuGraphLaunch*`): one
//! `fetch_add` on the gate's launch counter, a load of its budget, one relaxed store of the
//! launch's key, and two compares (the controller's poke point and its sample); no syscall, no
//! lock, no allocation, no clock read. A launch past the budget takes its count back, records
//! a hold mark (it waits anyway), wakes the controller and sleeps on a futex until the budget
//! grows. The one launch the controller picked for a sample is bracketed by timing events
//! (`crate::marks`).
//!
//! Synchronisation and query hooks (only while a gate exists): a synchronisation counts itself
//! in and out (`syncing`), and one that returns successfully, or a successful query, notes that
//! the queue was seen empty; while other processes share the GPU each wakes the controller, so
//! that its slot in the node file says at once that the program waits for its GPU work. The
//! outermost one also notes when it began and how long it waited (two clock reads, `waits`).
//!
//! Controller (one thread per limited device, started at the first launch): each *look* reads
//! the gate (launches, keys, whether a launch waits), the completed marks, the node file's slots
//! and the container's virtual time, hands them to `Limiter::look`, and applies the decision:
//! the charge (to the container's shared word, and the region's counters), the budget, the slot
//! state, the node token (take, keep, hand on), a drain before a hand-over, a sample; then it
//! sleeps until the decision's next look or a poke.
//!
//! The gate is `gate`; the controller, `controller`; the captures and drains that must not
//! overlap are this module's ([`capture_begin`], [`capture_end`]).
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use vgpu_policy::exclusion::Exclusion;
use vgpu_policy::plan::Plan;
use vgpu_region::RegionLedger;
use vgpu_region::sys::{futex_wait, futex_wake};

mod controller;
mod gate;
mod keyset;
mod waits;

pub use gate::{Admitted, Gate};

/// A gate's budget when nothing limits it (measuring, or at 100 %).
const OPEN: u64 = u64::MAX;

/// What a gate's controller is handed when it starts (from the runtime, by the launch hook).
#[derive(Clone, Copy)]
pub struct Env {
    /// The resolved configuration.
    pub plan: &'static Plan,
    /// The container's region ledger (counters, live limit, virtual time), if it has one.
    pub region: Option<&'static RegionLedger>,
    /// The device's UUID (names its node token).
    pub uuid: &'static str,
}

/// This process's stream captures and drains, which must not overlap (counted while a gate or
/// a memory limit exists): see [`vgpu_policy::exclusion`].
static EXCLUSION: Exclusion<AtomicU32> = Exclusion::new();

/// Before a stream capture begins: waits for any drain in progress, then counts the capture.
pub fn capture_begin() {
    while let Err(d) = EXCLUSION.try_begin_capture() {
        futex_wait(&EXCLUSION.draining, d, Duration::from_millis(5));
    }
}

/// A counted stream capture ended (or never began).
pub fn capture_end() {
    EXCLUSION.end_capture();
    futex_wake(&EXCLUSION.captures);
}

/// Whether some stream capture of this process is counted now (a cheap filter before asking
/// the driver whether a given stream captures).
pub fn captures_counted() -> bool {
    EXCLUSION.captures.load(Ordering::Acquire) > 0
}

/// In a forked child: no drain runs there, and no capture of the parent's threads continues.
pub fn after_fork() {
    EXCLUSION.reset();
}

fn end_drain() {
    EXCLUSION.end_drain();
    futex_wake(&EXCLUSION.draining);
}
