//! Loads the built cdylib through a symlink named `libcuda.so.1`, as the integration harness
//! does, and checks the soname and a few entry points through `dlsym`.
use std::ffi::{CStr, CString, c_void};
use std::os::raw::{c_char, c_int, c_uint};

use vgpu_sys::cuda::*;

fn so_path() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().join("libvgpu_sim_cuda.so")
}

#[test]
fn dlopen_through_libcuda_symlink() {
    let so = so_path();
    assert!(so.exists(), "{} missing", so.display());
    let dir = std::env::temp_dir().join(format!("vgpu-sim-dlopen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("libcuda.so.1");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&so, &link).unwrap();
    let path = CString::new(link.to_str().unwrap()).unwrap();

    // SAFETY: valid paths and names; the symbols have the cuda.h signatures they are cast to.
    unsafe {
        let lib = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        assert!(!lib.is_null(), "{:?}", CStr::from_ptr(libc::dlerror()));
        // Loaded objects are matched by soname: a plain name finds the same library.
        let again = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        assert_eq!(again, lib);

        let sym = |name: &CStr| {
            let p = libc::dlsym(lib, name.as_ptr());
            assert!(!p.is_null(), "{name:?}");
            p
        };
        let cu_init: unsafe extern "C" fn(c_uint) -> CUresult = std::mem::transmute(sym(c"cuInit"));
        let count: unsafe extern "C" fn(*mut c_int) -> CUresult =
            std::mem::transmute(sym(c"cuDeviceGetCount"));
        let get_proc: unsafe extern "C" fn(
            *const c_char,
            *mut *mut c_void,
            c_int,
            u64,
            *mut CUdriverProcAddressQueryResult,
        ) -> CUresult = std::mem::transmute(sym(c"cuGetProcAddress_v2"));
        let calls: unsafe extern "C" fn(*const c_char) -> u64 =
            std::mem::transmute(sym(c"vgpuSimCallCount"));

        let mut n = 0;
        assert_eq!(count(&mut n), CUDA_ERROR_NOT_INITIALIZED);
        assert_eq!(cu_init(0), CUDA_SUCCESS);
        assert_eq!(count(&mut n), CUDA_SUCCESS);
        assert_eq!(n, 2);
        assert_eq!(calls(c"cuDeviceGetCount".as_ptr()), 2);

        let mut pfn: *mut c_void = std::ptr::null_mut();
        let mut st = 99;
        assert_eq!(
            get_proc(c"cuMemAlloc".as_ptr(), &mut pfn, 12000, 0, &mut st),
            CUDA_SUCCESS
        );
        assert_eq!(st, CU_GET_PROC_ADDRESS_SUCCESS);
        assert_eq!(pfn, sym(c"cuMemAlloc_v2"));
        assert_eq!(
            get_proc(c"cuMemFreeAsync".as_ptr(), &mut pfn, 12000, 2, &mut st),
            CUDA_SUCCESS
        );
        assert_eq!(pfn, sym(c"cuMemFreeAsync_ptsz"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
