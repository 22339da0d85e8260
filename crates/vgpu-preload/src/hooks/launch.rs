//! Kernel launches: with a compute limit on the device, each launch passes its gate
//! ([`crate::compute::Gate::admit`]); without one, the hook is a load and a tail call. One body
//! per launch function serves its `_ptsz` twin too ([`Call::stream`]).
use crate::real::ty;
use crate::runtime::runtime;
use crate::symbols::Call;
use core::ffi::{c_uint, c_void};
use vgpu_sys::cuda::*;

/// Launches `go` (the real launch) of `key` (what it runs: the function and its grid, or the
/// graph; what prices it for the compute limit) of `unit` (the function, or the graph: `kernel`
/// says which) on `stream` of the current device, through that device's gate if it has a
/// compute limit; a launch the gate picked as a sample is bracketed by its timing events.
#[inline]
pub fn admit(
    stream: CUstream,
    key: u64,
    unit: u64,
    kernel: bool,
    go: impl FnOnce() -> CUresult,
) -> CUresult {
    if let Some(rt) = runtime()
        && let Some((ordinal, gate)) = rt.gate_here()
    {
        let admitted = gate.admit(ordinal, stream, key, unit, kernel, || crate::compute::Env {
            plan: rt.plan,
            region: rt.region_ledger(),
            uuid: &rt.devices[usize::try_from(ordinal).unwrap_or(0)].uuid,
        });
        return match admitted {
            crate::compute::Admitted::Go => go(),
            crate::compute::Admitted::Refused => CUDA_ERROR_OPERATING_SYSTEM,
            crate::compute::Admitted::Unpriced => {
                let r = go();
                gate.launched(unit);
                r
            }
            crate::compute::Admitted::Sample(b) => {
                // A sampled launch: how long its call takes is what the GPU waits for it on an
                // idle stream (the bracket's first events are reached at once).
                let t0 = vgpu_region::sys::monotonic_ns();
                let r = go();
                let call = vgpu_region::sys::monotonic_ns().saturating_sub(t0);
                gate.sampled(b, stream, key, unit, call);
                r
            }
        };
    }
    go()
}

/// The key of a kernel launch: its function and its grid (a kernel's GPU time depends on both;
/// the same function over another shape is priced on its own). Never 0.
#[inline]
pub fn kernel_key(f: CUfunction, grid: [c_uint; 3], block: [c_uint; 3], shmem: c_uint) -> u64 {
    let g = u64::from(grid[0]) * u64::from(grid[1]) * u64::from(grid[2]);
    let b = u64::from(block[0]) * u64::from(block[1]) * u64::from(block[2]);
    let k = (f as u64)
        ^ g.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ b.wrapping_mul(0xC2B2_AE3D_27D4_EB4F).rotate_left(21)
        ^ u64::from(shmem).rotate_left(47);
    k.max(1)
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
    let key = kernel_key(f, [gx, gy, gz], [bx, by, bz], shmem);
    admit(call.stream(stream), key, f as u64, true, || {
        crate::forward!(call(
            f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra
        ))
    })
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
    // The stream and the grid the config names (null config: the default stream).
    let (s, key) = if config.is_null() {
        (core::ptr::null_mut(), kernel_key(f, [0; 3], [0; 3], 0))
    } else {
        // SAFETY: a non-null config from the caller, valid per cuLaunchKernelEx's contract.
        let c = unsafe { &*config };
        (
            c.hStream,
            kernel_key(
                f,
                [c.gridDimX, c.gridDimY, c.gridDimZ],
                [c.blockDimX, c.blockDimY, c.blockDimZ],
                c.sharedMemBytes,
            ),
        )
    };
    admit(call.stream(s), key, f as u64, true, || {
        crate::forward!(call(config, f, params, extra))
    })
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
    let key = kernel_key(f, [gx, gy, gz], [bx, by, bz], shmem);
    admit(call.stream(stream), key, f as u64, true, || {
        crate::forward!(call(f, gx, gy, gz, bx, by, bz, shmem, stream, params))
    })
}
