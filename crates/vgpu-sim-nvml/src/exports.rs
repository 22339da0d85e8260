//! The exported NVML entry points.
use core::ffi::{c_char, c_uint};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU32, Ordering};

use vgpu_sys::nvml::*;

use crate::config::{DEVICE_NAME, DRIVER_VERSION, config, uuid_string};
use crate::driver;

type R<T> = Result<T, nvmlReturn_t>;

/// Outstanding `nvmlInit*` calls.
static INIT_COUNT: AtomicU32 = AtomicU32::new(0);
/// First fake device handle; handle of GPU `p` is `HANDLE_BASE + 16 p`.
const HANDLE_BASE: usize = 0x5a1e_0000;

/// Runs an entry point body: checks initialization (unless `needs_init` is false) and turns
/// a panic into `NVML_ERROR_UNKNOWN`.
fn enter(needs_init: bool, f: impl FnOnce() -> R<()>) -> nvmlReturn_t {
    let run = || {
        if needs_init && INIT_COUNT.load(Ordering::SeqCst) == 0 {
            return Err(NVML_ERROR_UNINITIALIZED);
        }
        f()
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(Ok(())) => NVML_SUCCESS,
        Ok(Err(e)) => e,
        Err(_) => NVML_ERROR_UNKNOWN,
    }
}

/// Writes `v` through `p`; null is `NVML_ERROR_INVALID_ARGUMENT`.
///
/// # Safety
/// `p` must be null or valid for a write of `T`.
unsafe fn put<T>(p: *mut T, v: T) -> R<()> {
    if p.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: non-null and writable per the caller's contract.
    unsafe { p.write(v) };
    Ok(())
}

/// Copies `s` NUL-terminated into `buf` of `len` bytes (`NVML_ERROR_INSUFFICIENT_SIZE` if it
/// does not fit).
///
/// # Safety
/// `buf` must be null or valid for `len` bytes.
unsafe fn put_str(buf: *mut c_char, len: c_uint, s: &str) -> R<()> {
    if buf.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (len as usize) < s.len() + 1 {
        return Err(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    // SAFETY: `buf` is valid for `len >= s.len() + 1` bytes per the caller's contract.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), s.len());
        buf.add(s.len()).write(0);
    }
    Ok(())
}

/// Physical index of a device handle.
fn index_of(dev: nvmlDevice_t) -> R<usize> {
    let a = dev.addr();
    if a < HANDLE_BASE || !(a - HANDLE_BASE).is_multiple_of(16) {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    let p = (a - HANDLE_BASE) / 16;
    if p < config().devices {
        Ok(p)
    } else {
        Err(NVML_ERROR_INVALID_ARGUMENT)
    }
}

fn handle_of(p: usize) -> nvmlDevice_t {
    std::ptr::without_provenance_mut(HANDLE_BASE + 16 * p)
}

/// Defines an exported NVML entry point (`noinit`: callable before `nvmlInit`).
macro_rules! nvml {
    ($(#[$m:meta])* fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $body:block) => {
        nvml!(@ true, $(#[$m])* $name($($arg: $ty),*) $body);
    };
    ($(#[$m:meta])* noinit fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $body:block) => {
        nvml!(@ false, $(#[$m])* $name($($arg: $ty),*) $body);
    };
    (@ $init:expr, $(#[$m:meta])* $name:ident($($arg:ident : $ty:ty),*) $body:block) => {
        #[doc = concat!("Simulated `", stringify!($name), "`.")]
        $(#[$m])*
        ///
        /// # Safety
        /// Pointer arguments must be null or valid as `nvml.h` documents for this call.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> nvmlReturn_t {
            enter($init, || -> R<()> { $body })
        }
    };
}

fn init() -> R<()> {
    INIT_COUNT.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

nvml! {
    noinit fn nvmlInit() {
        init()
    }
}

nvml! {
    noinit fn nvmlInit_v2() {
        init()
    }
}

nvml! {
    noinit fn nvmlInitWithFlags(flags: c_uint) {
        let _ = flags;
        init()
    }
}

nvml! {
    fn nvmlShutdown() {
        INIT_COUNT
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .map(|_| ())
            .map_err(|_| NVML_ERROR_UNINITIALIZED)
    }
}

/// Simulated `nvmlErrorString`: a static description of `result`.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    let s: &'static core::ffi::CStr = match result {
        NVML_SUCCESS => c"Success",
        NVML_ERROR_UNINITIALIZED => c"Uninitialized",
        NVML_ERROR_INVALID_ARGUMENT => c"Invalid Argument",
        NVML_ERROR_NOT_SUPPORTED => c"Not Supported",
        NVML_ERROR_NOT_FOUND => c"Not Found",
        NVML_ERROR_INSUFFICIENT_SIZE => c"Insufficient Size",
        NVML_ERROR_FUNCTION_NOT_FOUND => c"Function Not Found",
        NVML_ERROR_ARGUMENT_VERSION_MISMATCH => c"Argument Version Mismatch",
        _ => c"Unknown Error",
    };
    s.as_ptr()
}

nvml! {
    fn nvmlSystemGetDriverVersion(version: *mut c_char, len: c_uint) {
        // SAFETY: `version` is the caller's buffer of `len` bytes.
        unsafe { put_str(version, len, DRIVER_VERSION) }
    }
}

nvml! {
    fn nvmlDeviceGetCount(count: *mut c_uint) {
        // SAFETY: `count` is the caller's out-pointer.
        unsafe { put(count, config().devices as c_uint) }
    }
}

nvml! {
    fn nvmlDeviceGetCount_v2(count: *mut c_uint) {
        // SAFETY: `count` is the caller's out-pointer.
        unsafe { put(count, config().devices as c_uint) }
    }
}

fn by_index(index: c_uint, dev: *mut nvmlDevice_t) -> R<()> {
    if index as usize >= config().devices {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: `dev` is the caller's out-pointer.
    unsafe { put(dev, handle_of(index as usize)) }
}

nvml! {
    fn nvmlDeviceGetHandleByIndex(index: c_uint, dev: *mut nvmlDevice_t) {
        by_index(index, dev)
    }
}

nvml! {
    fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, dev: *mut nvmlDevice_t) {
        by_index(index, dev)
    }
}

nvml! {
    fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, dev: *mut nvmlDevice_t) {
        if uuid.is_null() || dev.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: `uuid` is a non-null NUL-terminated string per nvml.h.
        let s = unsafe { core::ffi::CStr::from_ptr(uuid) }.to_bytes();
        let p = (0..config().devices)
            .find(|&p| uuid_string(p).as_bytes() == s)
            .ok_or(NVML_ERROR_NOT_FOUND)?;
        // SAFETY: `dev` is the caller's non-null out-pointer.
        unsafe { put(dev, handle_of(p)) }
    }
}

nvml! {
    fn nvmlDeviceGetUUID(dev: nvmlDevice_t, uuid: *mut c_char, len: c_uint) {
        let p = index_of(dev)?;
        // SAFETY: `uuid` is the caller's buffer of `len` bytes.
        unsafe { put_str(uuid, len, &uuid_string(p)) }
    }
}

nvml! {
    fn nvmlDeviceGetName(dev: nvmlDevice_t, name: *mut c_char, len: c_uint) {
        index_of(dev)?;
        // SAFETY: `name` is the caller's buffer of `len` bytes.
        unsafe { put_str(name, len, DEVICE_NAME) }
    }
}

nvml! {
    fn nvmlDeviceGetIndex(dev: nvmlDevice_t, index: *mut c_uint) {
        let p = index_of(dev)?;
        // SAFETY: `index` is the caller's out-pointer.
        unsafe { put(index, p as c_uint) }
    }
}

nvml! {
    fn nvmlDeviceGetMemoryInfo(dev: nvmlDevice_t, memory: *mut nvmlMemory_t) {
        let p = index_of(dev)?;
        let (used, total) = driver::memory(p);
        let used = used.min(total);
        // SAFETY: `memory` is the caller's out-pointer.
        unsafe { put(memory, nvmlMemory_t { total, free: total - used, used }) }
    }
}

nvml! {
    fn nvmlDeviceGetMemoryInfo_v2(dev: nvmlDevice_t, memory: *mut nvmlMemory_v2_t) {
        let p = index_of(dev)?;
        if memory.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: `memory` is non-null and points to the caller's struct.
        if unsafe { (*memory).version } != NVML_MEMORY_V2 {
            return Err(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        let (used, total) = driver::memory(p);
        let used = used.min(total);
        let m = nvmlMemory_v2_t {
            version: NVML_MEMORY_V2,
            total,
            reserved: 0,
            free: total - used,
            used,
        };
        // SAFETY: `memory` is the caller's non-null out-pointer.
        unsafe { put(memory, m) }
    }
}

nvml! {
    fn nvmlDeviceGetUtilizationRates(dev: nvmlDevice_t, util: *mut nvmlUtilization_t) {
        let p = index_of(dev)?;
        let gpu = crate::driver::utilization(p);
        // SAFETY: `util` is the caller's out-pointer.
        unsafe { put(util, nvmlUtilization_t { gpu, memory: 0 }) }
    }
}

/// The process list: always empty (as in the VM the real GPU runs in).
fn no_processes(dev: nvmlDevice_t, count: *mut c_uint) -> R<()> {
    index_of(dev)?;
    // SAFETY: `count` is the caller's in/out pointer.
    unsafe { put(count, 0) }
}

nvml! {
    fn nvmlDeviceGetComputeRunningProcesses(
        dev: nvmlDevice_t,
        count: *mut c_uint,
        infos: *mut nvmlProcessInfo_t,
    ) {
        let _ = infos;
        no_processes(dev, count)
    }
}

nvml! {
    fn nvmlDeviceGetComputeRunningProcesses_v2(
        dev: nvmlDevice_t,
        count: *mut c_uint,
        infos: *mut nvmlProcessInfo_t,
    ) {
        let _ = infos;
        no_processes(dev, count)
    }
}

nvml! {
    fn nvmlDeviceGetComputeRunningProcesses_v3(
        dev: nvmlDevice_t,
        count: *mut c_uint,
        infos: *mut nvmlProcessInfo_t,
    ) {
        let _ = infos;
        no_processes(dev, count)
    }
}

nvml! {
    fn nvmlDeviceGetProcessUtilization(
        dev: nvmlDevice_t,
        samples: *mut nvmlProcessUtilizationSample_t,
        count: *mut c_uint,
        last_seen: u64,
    ) {
        let _ = (samples, count, last_seen);
        index_of(dev)?;
        Err(NVML_ERROR_NOT_FOUND)
    }
}

/// Whether the simulated driver backs the memory numbers (for tests).
pub fn memory_from_driver() -> bool {
    driver::driver_loaded()
}
