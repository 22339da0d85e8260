//! NVML semantics without the simulated driver loaded (memory falls back to `VGPU_SIM_MEM`).
mod common;

use std::ffi::CStr;
use std::os::raw::{c_char, c_uint};

use common::*;
use vgpu_sim_nvml::exports::*;
use vgpu_sys::nvml::*;

#[test]
fn nvml_api() {
    let mut n: c_uint = 0;
    // SAFETY: (whole test) every pointer passed is a valid local.
    unsafe {
        assert_eq!(nvmlDeviceGetCount_v2(&mut n), NVML_ERROR_UNINITIALIZED);
        assert_eq!(nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
        assert_eq!(nvmlInit_v2(), NVML_SUCCESS);
        assert_eq!(nvmlDeviceGetCount_v2(&mut n), NVML_SUCCESS);
        assert_eq!(n, 2);
        assert_eq!(nvmlDeviceGetCount(&mut n), NVML_SUCCESS);

        let d1 = handle(1);
        assert_eq!(uuid(d1), "GPU-5a1e0000-0000-4000-8000-000000000001");
        let mut idx = 9;
        assert_eq!(nvmlDeviceGetIndex(d1, &mut idx), NVML_SUCCESS);
        assert_eq!(idx, 1);
        let mut by_uuid: nvmlDevice_t = std::ptr::null_mut();
        let u = c"GPU-5a1e0000-0000-4000-8000-000000000001";
        assert_eq!(
            nvmlDeviceGetHandleByUUID(u.as_ptr(), &mut by_uuid),
            NVML_SUCCESS
        );
        assert_eq!(by_uuid, d1);
        assert_eq!(
            nvmlDeviceGetHandleByUUID(c"GPU-nope".as_ptr(), &mut by_uuid),
            NVML_ERROR_NOT_FOUND
        );
        let mut d: nvmlDevice_t = std::ptr::null_mut();
        assert_eq!(
            nvmlDeviceGetHandleByIndex(2, &mut d),
            NVML_ERROR_INVALID_ARGUMENT
        );

        let mut small = [0 as c_char; 8];
        assert_eq!(
            nvmlDeviceGetUUID(d1, small.as_mut_ptr(), 8),
            NVML_ERROR_INSUFFICIENT_SIZE
        );
        let mut name = [0 as c_char; NVML_DEVICE_NAME_BUFFER_SIZE];
        assert_eq!(nvmlDeviceGetName(d1, name.as_mut_ptr(), 64), NVML_SUCCESS);
        assert_eq!(
            CStr::from_ptr(name.as_ptr()).to_str().unwrap(),
            "NVIDIA H200 (simulated)"
        );
        let mut ver = [0 as c_char; NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
        assert_eq!(
            nvmlSystemGetDriverVersion(ver.as_mut_ptr(), 80),
            NVML_SUCCESS
        );
        assert_eq!(
            CStr::from_ptr(ver.as_ptr()).to_str().unwrap(),
            "580.00.00-sim"
        );

        if !memory_from_driver() {
            let m = memory(d1);
            assert_eq!((m.total, m.used, m.free), (16 << 30, 0, 16 << 30));
        }
        let mut m2 = nvmlMemory_v2_t::default();
        assert_eq!(
            nvmlDeviceGetMemoryInfo_v2(d1, &mut m2),
            NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        );
        m2.version = NVML_MEMORY_V2;
        assert_eq!(nvmlDeviceGetMemoryInfo_v2(d1, &mut m2), NVML_SUCCESS);
        assert_eq!(m2.total, 16 << 30);

        let mut util = nvmlUtilization_t { gpu: 5, memory: 5 };
        assert_eq!(nvmlDeviceGetUtilizationRates(d1, &mut util), NVML_SUCCESS);
        assert_eq!((util.gpu, util.memory), (0, 0));
        let mut count: c_uint = 4;
        let mut infos = [nvmlProcessInfo_t::default(); 4];
        assert_eq!(
            nvmlDeviceGetComputeRunningProcesses_v3(d1, &mut count, infos.as_mut_ptr()),
            NVML_SUCCESS
        );
        assert_eq!(count, 0);
        count = 4;
        assert_eq!(
            nvmlDeviceGetProcessUtilization(d1, std::ptr::null_mut(), &mut count, 0),
            NVML_ERROR_NOT_FOUND
        );
        assert!(!nvmlErrorString(NVML_ERROR_NOT_FOUND).is_null());

        assert_eq!(nvmlInit(), NVML_SUCCESS);
        assert_eq!(nvmlShutdown(), NVML_SUCCESS);
        assert_eq!(nvmlShutdown(), NVML_SUCCESS);
        assert_eq!(nvmlDeviceGetCount_v2(&mut n), NVML_ERROR_UNINITIALIZED);
    }
}
