//! What the program is shown: `cuMemGetInfo` and `cuDeviceTotalMem` report the limit as the
//! total. Without a limit on the device every value is the driver's, untouched.
use super::abi::Word;
use crate::runtime::runtime;
use crate::symbols::Call;
use vgpu_policy::view;
use vgpu_sys::cuda::*;

/// (limit, used) of the current device, when it is limited.
fn current_limit() -> Option<(u64, u64)> {
    let rt = runtime()?;
    let device = rt.current_device()?;
    Some((rt.ledger().limit(device)?, rt.ledger().used(device)))
}

fn device_limit(dev: CUdevice) -> Option<u64> {
    let rt = runtime()?;
    rt.ledger().limit(rt.limited_device(dev)?)
}

/// # Safety
/// C API contract of `cuMemGetInfo_v2` / `cuMemGetInfo` (32-bit legacy entry point).
pub unsafe fn mem_get_info<W: Word>(
    call: Call<unsafe extern "C" fn(*mut W, *mut W) -> CUresult>,
    free: *mut W,
    total: *mut W,
) -> CUresult {
    let r = crate::forward!(call(free, total));
    if r != CUDA_SUCCESS || free.is_null() || total.is_null() {
        return r;
    }
    if let Some((limit, used)) = current_limit() {
        // SAFETY: both non-null and just written by the driver.
        unsafe {
            let (f, t) = view::mem_info(Some(limit), used, (*free).wide(), (*total).wide());
            *free = W::clamped(f);
            *total = W::clamped(t);
        }
    }
    r
}

/// # Safety
/// C API contract of `cuDeviceTotalMem_v2` / `cuDeviceTotalMem` (32-bit legacy entry point).
pub unsafe fn device_total_mem<W: Word>(
    call: Call<unsafe extern "C" fn(*mut W, CUdevice) -> CUresult>,
    bytes: *mut W,
    dev: CUdevice,
) -> CUresult {
    let r = crate::forward!(call(bytes, dev));
    if r == CUDA_SUCCESS
        && !bytes.is_null()
        && let Some(limit) = device_limit(dev)
    {
        // SAFETY: non-null and just written by the driver.
        unsafe { *bytes = W::clamped(view::total_mem(Some(limit), (*bytes).wide())) };
    }
    r
}
