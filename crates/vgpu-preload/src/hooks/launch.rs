//! Kernel launches: with a compute limit on the device, each launch passes its gate
//! ([`crate::compute::Gate::admit`]); without one, the hook is a load and a tail call. One body
//! per launch function serves its `_ptsz` twin too ([`Call::stream`]).
use crate::real::ty;
use crate::runtime::runtime;
use crate::symbols::Call;
use core::ffi::{c_uint, c_void};
use vgpu_sys::cuda::*;

/// Admits one launch of `key` (the function, or the graph, it runs: what prices it for the
/// compute pace) on `stream` of the current device if that device has a compute limit.
#[inline]
pub fn admit(stream: CUstream, key: u64) {
    if let Some(rt) = runtime()
        && let Some((ordinal, gate)) = rt.gate_here()
    {
        gate.admit(ordinal, stream, key, || crate::compute::Env {
            plan: rt.plan,
            region: rt.region_ledger(),
            uuid: &rt.devices[usize::try_from(ordinal).unwrap_or(0)].uuid,
        });
    }
}

/// # Safety
/// C API contract of `cuLaunchKernel` / `cuLaunchKernel_ptsz`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_kernel(
    call: Call<ty::cuLaunchKernel>,
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
    admit(call.stream(stream), f as u64);
    crate::forward!(call(
        f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra
    ))
}

/// # Safety
/// C API contract of `cuLaunchKernelEx` / `cuLaunchKernelEx_ptsz`.
pub unsafe fn launch_kernel_ex(
    call: Call<ty::cuLaunchKernelEx>,
    config: *const CUlaunchConfig,
    f: CUfunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    // The stream the config names (null config: the default stream).
    let s = if config.is_null() {
        core::ptr::null_mut()
    } else {
        // SAFETY: a non-null config from the caller, valid per cuLaunchKernelEx's contract.
        unsafe { (*config).hStream }
    };
    admit(call.stream(s), f as u64);
    crate::forward!(call(config, f, params, extra))
}

/// # Safety
/// C API contract of `cuLaunchCooperativeKernel` / `cuLaunchCooperativeKernel_ptsz`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_cooperative(
    call: Call<ty::cuLaunchCooperativeKernel>,
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
    admit(call.stream(stream), f as u64);
    crate::forward!(call(f, gx, gy, gz, bx, by, bz, shmem, stream, params))
}
