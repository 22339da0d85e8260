//! Kernel launches: with a compute limit on the device, each launch passes its gate
//! ([`crate::compute::Gate::admit`]); without one, the hook is a load and a tail call.
use crate::runtime::runtime;
use core::ffi::{c_uint, c_void};
use vgpu_sys::cuda::*;

/// Admits one launch on the current device if that device has a compute limit.
#[inline]
pub fn admit() {
    if let Some(rt) = runtime()
        && let Some((ordinal, gate)) = rt.gate_here()
    {
        gate.admit(ordinal, &rt.devices[ordinal as usize].uuid);
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
    admit();
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
    admit();
    crate::fwd!(cuLaunchKernel_ptsz(
        f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra
    ))
}

/// # Safety
/// C API contract of `cuLaunchKernelEx`.
pub unsafe fn launch_kernel_ex(
    config: *const CUlaunchConfig,
    f: CUfunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    admit();
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
    admit();
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
    admit();
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
    admit();
    crate::fwd!(cuLaunchCooperativeKernel_ptsz(
        f, gx, gy, gz, bx, by, bz, shmem, stream, params
    ))
}
