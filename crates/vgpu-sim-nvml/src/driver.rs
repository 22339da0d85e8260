//! The bridge to the simulated driver's `vgpuSimDeviceUsed`/`vgpuSimDeviceTotal` (memory)
//! and `vgpuSimDeviceBusyNs`/`vgpuSimNowNs` (utilization; optional).
use core::ffi::c_int;
use std::sync::Mutex;

use crate::config::config;

type QueryFn = unsafe extern "C" fn(c_int) -> u64;
type BusyFn = unsafe extern "C" fn(c_int, u64) -> u64;
type NowFn = unsafe extern "C" fn() -> u64;

#[derive(Clone, Copy)]
struct Driver {
    used: QueryFn,
    total: QueryFn,
    busy: Option<(BusyFn, NowFn)>,
}

/// The utilization window: the last second.
const WINDOW_NS: u64 = 1_000_000_000;

/// The loaded driver, once found (a failed load is retried on the next query).
static DRIVER: Mutex<Option<Driver>> = Mutex::new(None);

fn load() -> Option<Driver> {
    let mut slot = DRIVER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(d) = *slot {
        return Some(d);
    }
    // SAFETY: dlopen with a valid NUL-terminated name; the handle is deliberately never closed.
    let handle = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW) };
    if handle.is_null() {
        return None;
    }
    // SAFETY: `handle` is a live dlopen handle; the names are NUL-terminated.
    let (used, total) = unsafe {
        (
            libc::dlsym(handle, c"vgpuSimDeviceUsed".as_ptr()),
            libc::dlsym(handle, c"vgpuSimDeviceTotal".as_ptr()),
        )
    };
    if used.is_null() || total.is_null() {
        // Not the simulator (a real driver, say): keep it loaded, use the fallback.
        return None;
    }
    // SAFETY: `handle` is a live dlopen handle; the names are NUL-terminated.
    let (busy, now) = unsafe {
        (
            libc::dlsym(handle, c"vgpuSimDeviceBusyNs".as_ptr()),
            libc::dlsym(handle, c"vgpuSimNowNs".as_ptr()),
        )
    };
    // SAFETY: the symbols are the simulator's exports with exactly these signatures
    // (`(c_int) -> u64`, `(c_int, u64) -> u64`, `() -> u64`).
    let d = unsafe {
        Driver {
            used: std::mem::transmute::<*mut libc::c_void, QueryFn>(used),
            total: std::mem::transmute::<*mut libc::c_void, QueryFn>(total),
            busy: (!busy.is_null() && !now.is_null()).then(|| {
                (
                    std::mem::transmute::<*mut libc::c_void, BusyFn>(busy),
                    std::mem::transmute::<*mut libc::c_void, NowFn>(now),
                )
            }),
        }
    };
    *slot = Some(d);
    Some(d)
}

/// (used, total) bytes of physical GPU `p`.
pub fn memory(p: usize) -> (u64, u64) {
    match load() {
        // SAFETY: the simulator's introspection calls take any int and never fail.
        Some(d) => unsafe { ((d.used)(p as c_int), (d.total)(p as c_int)) },
        None => (0, config().mem),
    }
}

/// Percent of the last second physical GPU `p` spent running kernels (any process sharing
/// the driver's state), 0 without the simulated driver.
pub fn utilization(p: usize) -> u32 {
    match load().and_then(|d| d.busy) {
        Some((busy, now)) => {
            // SAFETY: the simulator's introspection calls take any arguments and never fail.
            let b = unsafe { busy(p as c_int, now().saturating_sub(WINDOW_NS)) };
            (b.min(WINDOW_NS) * 100).div_ceil(WINDOW_NS) as u32
        }
        None => 0,
    }
}

/// Whether the simulated driver was found.
pub fn driver_loaded() -> bool {
    load().is_some()
}
