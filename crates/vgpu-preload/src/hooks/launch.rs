//! Kernel launches: with a compute limit on the device, each launch passes its gate
//! ([`crate::compute::Gate::admit`]); without one, the hook is a load and a tail call.
use crate::runtime::runtime;
use core::ffi::{c_uint, c_void};
use vgpu_sys::cuda::*;

/// The per-thread default stream's handle, for `_ptsz` launches on the NULL stream.
const PER_THREAD: CUstream = 2 as CUstream;

/// Admits one launch on `stream` of the current device if that device has a compute limit.
#[inline]
pub fn admit(stream: CUstream) {
    if let Some(rt) = runtime()
        && let Some((ordinal, gate)) = rt.gate_here()
    {
        gate.admit(ordinal, stream, || crate::compute::Env {
            plan: rt.plan,
            region: rt.region_ledger(),
            uuid: &rt.devices[ordinal as usize].uuid,
        });
    }
}

/// # Safety
/// C API contract of `cuLaunchKernel`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_kernel(
    f: CUfunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shmem: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    admit(stream);
    crate::fwd!(cuLaunchKernel(
        f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra
    ))
}

/// # Safety
/// C API contract of `cuLaunchKernel_ptsz`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_kernel_ptsz(
    f: CUfunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shmem: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    admit(if stream.is_null() { PER_THREAD } else { stream });
    crate::fwd!(cuLaunchKernel_ptsz(
        f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra
    ))
}

/// The stream a `cuLaunchKernelEx` config names (null config: the default stream).
fn config_stream(config: *const CUlaunchConfig, ptsz: bool) -> CUstream {
    let s = if config.is_null() {
        core::ptr::null_mut()
    } else {
        // SAFETY: a non-null config from the caller, valid per cuLaunchKernelEx's contract.
        unsafe { (*config).hStream }
    };
    if s.is_null() && ptsz { PER_THREAD } else { s }
}

/// # Safety
/// C API contract of `cuLaunchKernelEx`.
pub unsafe fn launch_kernel_ex(
    config: *const CUlaunchConfig,
    f: CUfunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    admit(config_stream(config, false));
    crate::fwd!(cuLaunchKernelEx(config, f, params, extra))
}

/// # Safety
/// C API contract of `cuLaunchKernelEx_ptsz`.
pub unsafe fn launch_kernel_ex_ptsz(
    config: *const CUlaunchConfig,
    f: CUfunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    admit(config_stream(config, true));
    crate::fwd!(cuLaunchKernelEx_ptsz(config, f, params, extra))
}

/// # Safety
/// C API contract of `cuLaunchCooperativeKernel`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_cooperative(
    f: CUfunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shmem: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
) -> CUresult {
    admit(stream);
    crate::fwd!(cuLaunchCooperativeKernel(
        f, gx, gy, gz, bx, by, bz, shmem, stream, params
    ))
}

/// # Safety
/// C API contract of `cuLaunchCooperativeKernel_ptsz`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_cooperative_ptsz(
    f: CUfunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shmem: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
) -> CUresult {
    admit(if stream.is_null() { PER_THREAD } else { stream });
    crate::fwd!(cuLaunchCooperativeKernel_ptsz(
        f, gx, gy, gz, bx, by, bz, shmem, stream, params
    ))
}
