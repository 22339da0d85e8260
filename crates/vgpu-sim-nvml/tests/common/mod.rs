//! Shared helpers for the NVML integration tests (included with `mod common;`).
#![allow(dead_code)]

use std::ffi::CStr;
use std::os::raw::{c_char, c_uint};

use vgpu_sim_nvml::exports::*;
use vgpu_sys::nvml::*;

pub fn handle(i: u32) -> nvmlDevice_t {
    let mut d: nvmlDevice_t = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    let rc = unsafe { nvmlDeviceGetHandleByIndex_v2(i, &mut d) };
    assert_eq!(rc, NVML_SUCCESS);
    d
}

pub fn memory(d: nvmlDevice_t) -> nvmlMemory_t {
    let mut m = nvmlMemory_t::default();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { nvmlDeviceGetMemoryInfo(d, &mut m) }, NVML_SUCCESS);
    m
}

pub fn uuid(d: nvmlDevice_t) -> String {
    let mut buf = [0 as c_char; NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    // SAFETY: buffer of the stated length.
    let r = unsafe { nvmlDeviceGetUUID(d, buf.as_mut_ptr(), buf.len() as c_uint) };
    assert_eq!(r, NVML_SUCCESS);
    // SAFETY: NUL-terminated by the call.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_str()
        .unwrap()
        .to_string()
}
