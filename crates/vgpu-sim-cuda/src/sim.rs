//! Process-wide glue between the C entry points and the model: lazy configuration, the one
//! model mutex, the per-thread context stack, per-symbol call counters and the panic guard.
use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use vgpu_sys::cuda::*;

use crate::config::Config;
use crate::shared::{self, Shared};
use crate::state::{Due, Model, R};
use crate::timeline::{DevTimeline, now_ns, sleep_until};

static CONFIG: OnceLock<Config> = OnceLock::new();
static SHARED: OnceLock<Shared> = OnceLock::new();
static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);
static MODEL: OnceLock<Mutex<Model>> = OnceLock::new();
static INITIALIZED: AtomicBool = AtomicBool::new(false);
static CALLS: OnceLock<Mutex<HashMap<&'static str, u64>>> = OnceLock::new();

thread_local! {
    /// This thread's context stack; the top is the current context.
    static CTX_STACK: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
    /// This thread's id for per-thread default streams (0 until first used).
    static THREAD_ID: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A process-unique id of the calling thread (never 0).
pub fn thread_id() -> u64 {
    THREAD_ID
        .try_with(|c| {
            if c.get() == 0 {
                c.set(NEXT_THREAD.fetch_add(1, Ordering::Relaxed));
            }
            c.get()
        })
        .unwrap_or(u64::MAX)
}

/// The configuration, read from the environment on first use.
pub fn config() -> &'static Config {
    CONFIG.get_or_init(Config::from_env)
}

fn shared_state() -> Shared {
    *SHARED.get_or_init(|| {
        let c = config();
        shared::state(c.state_path.as_deref(), c.timeslice_us.saturating_mul(1000))
    })
}

/// Device-wide usage counters (shared through `VGPU_SIM_STATE` if set).
pub fn counters() -> &'static [AtomicU64] {
    shared_state().counters
}

/// Device-wide peak usage (shared through `VGPU_SIM_STATE` if set).
pub fn peaks() -> &'static [AtomicU64] {
    shared_state().peaks
}

/// Device timelines (shared through `VGPU_SIM_STATE` if set).
pub fn timelines() -> &'static [DevTimeline] {
    shared_state().timelines
}

/// Time-slicing: runs physical GPU `p`'s schedule forward to now (before device-wide
/// figures are read). Nothing in FIFO mode.
pub fn advance_device(p: usize) {
    if let (Some(s), Some(tl)) = (shared_state().slicing, timelines().get(p)) {
        drop(s.advance(p, config().switch_ns, tl));
    }
}

/// The longest a synchronisation waits for work whose completion keeps being unknown.
const WAIT_LIMIT_NS: u64 = 600_000_000_000;
/// Shortest and longest sleep of a synchronisation that re-reads the schedule.
const POLL_NS: (u64, u64) = (20_000, 1_000_000);

/// A synchronisation: sleeps (never holding a lock) until what `due` says is due completes.
/// Time-slicing: while completion is not known yet, sleeps in short steps (until the
/// earliest it could complete, at most 1 ms), re-reading the schedule; gives up with
/// `CUDA_ERROR_LAUNCH_TIMEOUT` after 10 minutes.
pub fn wait(mut due: impl FnMut(&mut Model) -> R<Due>) -> R<()> {
    let give_up = now_ns().saturating_add(WAIT_LIMIT_NS);
    loop {
        match with(&mut due)? {
            Due::At(t) => {
                sleep_until(t);
                return Ok(());
            }
            Due::Pending(earliest) => {
                let now = now_ns();
                if now >= give_up {
                    return Err(crate::state::LAUNCH_TIMEOUT);
                }
                sleep_until(earliest.clamp(now + POLL_NS.0, now + POLL_NS.1));
            }
        }
    }
}

/// Locks the model (a poisoned lock is taken over: the model stays consistent because every
/// mutation happens after its checks).
pub fn model() -> MutexGuard<'static, Model> {
    MODEL
        .get_or_init(|| {
            let mut m = Model::new(config().clone(), counters(), timelines());
            m.device_peak = Some(shared_state().peaks);
            m.slicing = shared_state().slicing;
            Mutex::new(m)
        })
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` on the locked model (told which thread calls, for per-thread streams).
pub fn with<T>(f: impl FnOnce(&mut Model) -> R<T>) -> R<T> {
    let tid = thread_id();
    let mut m = model();
    m.thread = tid;
    m.release_waits();
    f(&mut m)
}

/// The stream handle a `_ptsz` entry point means: its NULL stream is the per-thread one.
pub fn ptsz(stream: CUstream) -> u64 {
    match h(stream) {
        0 => crate::state::STREAM_PER_THREAD,
        s => s,
    }
}

/// Marks the driver initialized.
pub fn set_initialized() {
    INITIALIZED.store(true, Ordering::SeqCst);
}

/// Counts one call of `name`.
pub fn count(name: &'static str) {
    let mut calls = CALLS
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    *calls.entry(name).or_insert(0) += 1;
}

/// Calls of `name` so far.
pub fn call_count(name: &str) -> u64 {
    CALLS
        .get()
        .map(|m| {
            m.lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(name)
                .copied()
                .unwrap_or(0)
        })
        .unwrap_or(0)
}

/// Body of every CUDA entry point: counts the call, checks initialization, runs `f` and
/// turns a panic into `CUDA_ERROR_UNKNOWN`.
pub fn enter(name: &'static str, needs_init: bool, f: impl FnOnce() -> R<()>) -> CUresult {
    let run = || {
        count(name);
        if needs_init && !INITIALIZED.load(Ordering::SeqCst) {
            return Err(CUDA_ERROR_NOT_INITIALIZED);
        }
        f()
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(Ok(())) => CUDA_SUCCESS,
        Ok(Err(e)) => e,
        Err(_) => CUDA_ERROR_UNKNOWN,
    }
}

/// Like [`enter`] for the `vgpuSim*` introspection calls: panics become `default`.
pub fn enter_value<T>(name: &'static str, default: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(|| {
        count(name);
        f()
    }))
    .unwrap_or(default)
}

/// This thread's current context, if any.
pub fn current() -> Option<u64> {
    CTX_STACK
        .try_with(|s| s.borrow().last().copied())
        .ok()
        .flatten()
        .filter(|&h| h != 0)
}

/// `cuCtxSetCurrent`: replaces the top of the stack (null pops it).
pub fn set_current(h: u64) {
    let _ = CTX_STACK.try_with(|s| {
        let mut s = s.borrow_mut();
        s.pop();
        if h != 0 {
            s.push(h);
        }
    });
}

/// `cuCtxPushCurrent`.
pub fn push_current(h: u64) {
    let _ = CTX_STACK.try_with(|s| s.borrow_mut().push(h));
}

/// `cuCtxPopCurrent`.
pub fn pop_current() -> Option<u64> {
    CTX_STACK.try_with(|s| s.borrow_mut().pop()).ok().flatten()
}

/// Removes every occurrence of `h` from this thread's stack (after a destroy).
pub fn forget_current(h: u64) {
    let _ = CTX_STACK.try_with(|s| s.borrow_mut().retain(|&x| x != h));
}

/// Writes `v` through `p`, or fails with `CUDA_ERROR_INVALID_VALUE` if `p` is null.
///
/// # Safety
/// `p` must be null or valid for a write of `T`.
pub unsafe fn put<T>(p: *mut T, v: T) -> R<()> {
    if p.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null and valid for writes per the caller's contract.
    unsafe { p.write(v) };
    Ok(())
}

/// Reads `*p`, or fails with `CUDA_ERROR_INVALID_VALUE` if `p` is null.
///
/// # Safety
/// `p` must be null or valid for a read of `T`.
pub unsafe fn get<T: Copy>(p: *const T) -> R<T> {
    if p.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null and valid for reads per the caller's contract.
    Ok(unsafe { p.read() })
}

/// Fails with `CUDA_ERROR_INVALID_VALUE` if `p` is null.
pub fn nonnull<T>(p: *const T) -> R<()> {
    if p.is_null() {
        Err(CUDA_ERROR_INVALID_VALUE)
    } else {
        Ok(())
    }
}

/// An opaque handle as a C pointer.
pub fn ptr(h: u64) -> *mut core::ffi::c_void {
    std::ptr::without_provenance_mut(h as usize)
}

/// A C pointer handle as the model's `u64`.
pub fn h<T>(p: *mut T) -> u64 {
    p.addr() as u64
}

/// Defines an exported CUDA entry point: `#[unsafe(no_mangle)] extern "C"`, counted,
/// initialization-checked (unless `noinit`), panic-guarded; the body evaluates to `R<()>`.
#[macro_export]
#[doc(hidden)]
macro_rules! cu {
    ($(#[$m:meta])* fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $body:block) => {
        $crate::cu!(@ true, $(#[$m])* $name($($arg: $ty),*) $body);
    };
    ($(#[$m:meta])* noinit fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $body:block) => {
        $crate::cu!(@ false, $(#[$m])* $name($($arg: $ty),*) $body);
    };
    (@ $init:expr, $(#[$m:meta])* $name:ident($($arg:ident : $ty:ty),*) $body:block) => {
        #[doc = concat!("Simulated `", stringify!($name), "`.")]
        $(#[$m])*
        ///
        /// # Safety
        /// Pointer arguments must be null or valid as `cuda.h` documents for this call.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> CUresult {
            $crate::sim::enter(stringify!($name), $init, || -> $crate::state::R<()> { $body })
        }
    };
}
