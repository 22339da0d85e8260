//! NVML reading memory use from the simulated driver: the test loads the built
//! `libvgpu_sim_cuda.so` (soname `libcuda.so.1`) so that NVML's `dlopen("libcuda.so.1")`
//! finds it, allocates through the driver and sees NVML report it.
mod common;

use std::ffi::{CString, c_void};
use std::os::raw::{c_int, c_uint};

use common::*;
use vgpu_sim_nvml::exports::*;
use vgpu_sys::cuda::{CUDA_SUCCESS, CUcontext, CUdeviceptr, CUresult};
use vgpu_sys::nvml::*;

#[test]
fn nvml_sees_driver_allocations() {
    let exe = std::env::current_exe().unwrap();
    let so = exe.parent().unwrap().join("libvgpu_sim_cuda.so");
    if !so.exists() {
        eprintln!("skipping: {} not built", so.display());
        return;
    }
    let path = CString::new(so.to_str().unwrap()).unwrap();
    // SAFETY: valid path; the handle is never closed.
    let lib = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    assert!(!lib.is_null());
    let sym = |name: &str| {
        let n = CString::new(name).unwrap();
        // SAFETY: live handle, NUL-terminated name.
        let p = unsafe { libc::dlsym(lib, n.as_ptr()) };
        assert!(!p.is_null(), "{name}");
        p
    };
    // SAFETY: the symbols have these cuda.h signatures.
    unsafe {
        let cu_init: unsafe extern "C" fn(c_uint) -> CUresult = std::mem::transmute(sym("cuInit"));
        let retain: unsafe extern "C" fn(*mut CUcontext, c_int) -> CUresult =
            std::mem::transmute(sym("cuDevicePrimaryCtxRetain"));
        let set_current: unsafe extern "C" fn(CUcontext) -> CUresult =
            std::mem::transmute(sym("cuCtxSetCurrent"));
        let alloc: unsafe extern "C" fn(*mut CUdeviceptr, usize) -> CUresult =
            std::mem::transmute(sym("cuMemAlloc_v2"));
        let _: *mut c_void = sym("vgpuSimDeviceUsed");

        assert_eq!(nvmlInit_v2(), NVML_SUCCESS);
        assert!(memory_from_driver());
        let before = memory(handle(1));
        assert_eq!(before.used, 0);

        assert_eq!(cu_init(0), CUDA_SUCCESS);
        let mut ctx: CUcontext = std::ptr::null_mut();
        assert_eq!(retain(&mut ctx, 1), CUDA_SUCCESS);
        assert_eq!(set_current(ctx), CUDA_SUCCESS);
        let mut p: CUdeviceptr = 0;
        assert_eq!(alloc(&mut p, 1 << 30), CUDA_SUCCESS);
        let after = memory(handle(1));
        assert_eq!(after.used, 317_718_528 + (1 << 30));
        assert_eq!(after.free, after.total - after.used);
        assert_eq!(memory(handle(0)).used, 0);

        // Utilization: the share of the last second the device timeline was busy.
        let load: unsafe extern "C" fn(*mut *mut c_void, *const c_void) -> CUresult =
            std::mem::transmute(sym("cuModuleLoadData"));
        let get_fn: unsafe extern "C" fn(
            *mut *mut c_void,
            *mut c_void,
            *const std::ffi::c_char,
        ) -> CUresult = std::mem::transmute(sym("cuModuleGetFunction"));
        type Launch = unsafe extern "C" fn(
            *mut c_void,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            *mut c_void,
            *mut *mut c_void,
            *mut *mut c_void,
        ) -> CUresult;
        let launch: Launch = std::mem::transmute(sym("cuLaunchKernel"));
        let sync: unsafe extern "C" fn(*mut c_void) -> CUresult =
            std::mem::transmute(sym("cuStreamSynchronize"));
        let util = |d| {
            let mut u = nvmlUtilization_t {
                gpu: 99,
                memory: 99,
            };
            assert_eq!(
                nvmlDeviceGetUtilizationRates(handle(d), &mut u),
                NVML_SUCCESS
            );
            u.gpu
        };
        assert_eq!(util(1), 0);
        let image = [0u8; 8];
        let (mut m, mut f) = (std::ptr::null_mut(), std::ptr::null_mut());
        assert_eq!(load(&mut m, image.as_ptr().cast()), CUDA_SUCCESS);
        assert_eq!(get_fn(&mut f, m, c"spin_200000us".as_ptr()), CUDA_SUCCESS);
        let null = std::ptr::null_mut();
        assert_eq!(
            launch(f, 1, 1, 1, 32, 1, 1, 0, null, null.cast(), null.cast()),
            CUDA_SUCCESS
        );
        assert_eq!(sync(null), CUDA_SUCCESS);
        assert!((20..=21).contains(&util(1)), "{}", util(1));
        assert_eq!(util(0), 0);
    }
}
