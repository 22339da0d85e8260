//! What the program is shown: `cuMemGetInfo` and `cuDeviceTotalMem` report the limit as the
//! total. Without a limit on the device every value is the driver's, untouched.
use crate::runtime::runtime;
use core::ffi::c_uint;
use vgpu_policy::view;
use vgpu_sys::cuda::*;

/// (limit, used) of the current device, when it is limited.
fn current_limit() -> Option<(u64, u64)> {
    let rt = runtime()?;
    let slot = rt.current_slot()?;
    Some((rt.ledger().limit(slot)?, rt.ledger().used(slot)))
}

fn device_limit(dev: CUdevice) -> Option<u64> {
    let rt = runtime()?;
    rt.ledger().limit(rt.limited_slot(dev)?)
}

/// # Safety
/// C API contract of `cuMemGetInfo_v2`.
pub unsafe fn mem_get_info_v2(free: *mut usize, total: *mut usize) -> CUresult {
    let r = crate::fwd!(cuMemGetInfo_v2(free, total));
    if r != CUDA_SUCCESS || free.is_null() || total.is_null() {
        return r;
    }
    if let Some((limit, used)) = current_limit() {
        // SAFETY: both non-null and just written by the driver.
        unsafe {
            let (f, t) = view::mem_info(Some(limit), used, *free as u64, *total as u64);
            *free = f as usize;
            *total = t as usize;
        }
    }
    r
}

/// # Safety
/// C API contract of `cuMemGetInfo` (32-bit legacy entry point).
pub unsafe fn mem_get_info_v1(free: *mut c_uint, total: *mut c_uint) -> CUresult {
    let r = crate::fwd!(cuMemGetInfo(free, total));
    if r != CUDA_SUCCESS || free.is_null() || total.is_null() {
        return r;
    }
    if let Some((limit, used)) = current_limit() {
        // SAFETY: both non-null and just written by the driver.
        unsafe {
            let (f, t) = view::mem_info(Some(limit), used, *free as u64, *total as u64);
            *free = f.min(c_uint::MAX as u64) as c_uint;
            *total = t.min(c_uint::MAX as u64) as c_uint;
        }
    }
    r
}

/// # Safety
/// C API contract of `cuDeviceTotalMem_v2`.
pub unsafe fn device_total_mem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    let r = crate::fwd!(cuDeviceTotalMem_v2(bytes, dev));
    if r == CUDA_SUCCESS
        && !bytes.is_null()
        && let Some(limit) = device_limit(dev)
    {
        // SAFETY: non-null and just written by the driver.
        unsafe { *bytes = view::total_mem(Some(limit), *bytes as u64) as usize };
    }
    r
}

/// # Safety
/// C API contract of `cuDeviceTotalMem` (32-bit legacy entry point).
pub unsafe fn device_total_mem_v1(bytes: *mut c_uint, dev: CUdevice) -> CUresult {
    let r = crate::fwd!(cuDeviceTotalMem(bytes, dev));
    if r == CUDA_SUCCESS
        && !bytes.is_null()
        && let Some(limit) = device_limit(dev)
    {
        // SAFETY: non-null and just written by the driver.
        unsafe {
            *bytes = view::total_mem(Some(limit), *bytes as u64).min(c_uint::MAX as u64) as c_uint
        };
    }
    r
}
