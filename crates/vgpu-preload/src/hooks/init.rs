//! `cuInit`: where a bad configuration makes CUDA initialisation fail.
use crate::real::ty;
use crate::runtime::{self, Mode};
use crate::symbols::Call;
use core::ffi::c_uint;
use vgpu_sys::cuda::*;

/// # Safety
/// C API contract of `cuInit`.
pub unsafe fn cu_init(call: Call<ty::cuInit>, flags: c_uint) -> CUresult {
    if runtime::mode() == Mode::Broken {
        // The configuration error was printed when it was read; never run unlimited.
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    let r = crate::forward!(CUDA_ERROR_NO_DEVICE, call(flags));
    if r == CUDA_SUCCESS && runtime::limits_may_apply() {
        // Build the device table now, while nothing else is running on the GPU (and, with no
        // limit of our own, see whether the container's region is in use).
        runtime::runtime();
        if runtime::budget_refused() {
            // The container's budget cannot be used: fail closed (the line was printed).
            return CUDA_ERROR_NOT_INITIALIZED;
        }
    }
    r
}
