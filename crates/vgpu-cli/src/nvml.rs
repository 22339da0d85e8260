//! The physical GPUs as NVML reports them (the monitor's backend for the `gpu` label, memory
//! used outside vgpu and the machine's GPU count): `libnvidia-ml.so.1` loaded at run time, so
//! the CLI works without it (every figure is then absent). The only unsafe code of the
//! monitor lives here; each call passes valid out-pointers to an entry point whose C signature
//! matches the `vgpu-sys` types it is declared with.

use std::ffi::{CStr, c_char, c_uint};

use libloading::Library;
use vgpu_sys::nvml::{
    NVML_DEVICE_UUID_V2_BUFFER_SIZE, NVML_SUCCESS, nvmlDevice_t, nvmlMemory_t, nvmlReturn_t,
    nvmlUtilization_t,
};

type Init = unsafe extern "C" fn() -> nvmlReturn_t;
type Count = unsafe extern "C" fn(*mut c_uint) -> nvmlReturn_t;
type ByIndex = unsafe extern "C" fn(c_uint, *mut nvmlDevice_t) -> nvmlReturn_t;
type Uuid = unsafe extern "C" fn(nvmlDevice_t, *mut c_char, c_uint) -> nvmlReturn_t;
type Memory = unsafe extern "C" fn(nvmlDevice_t, *mut nvmlMemory_t) -> nvmlReturn_t;
type Util = unsafe extern "C" fn(nvmlDevice_t, *mut nvmlUtilization_t) -> nvmlReturn_t;

/// One physical GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gpu {
    /// NVML index (dcgm-exporter's `gpu` label).
    pub index: u32,
    /// UUID (`GPU-...`).
    pub uuid: String,
    /// Device memory in use by every process, bytes.
    pub used: Option<u64>,
    /// Device memory, bytes.
    pub total: Option<u64>,
    /// Percent of the last sample period a kernel was running (any process).
    pub util: Option<u32>,
}

/// A loaded, initialised NVML.
pub struct Nvml {
    count: Count,
    by_index: ByIndex,
    uuid: Uuid,
    memory: Option<Memory>,
    util: Option<Util>,
    _lib: Library,
}

fn sym<T: Copy>(lib: &Library, name: &str) -> Option<T> {
    // SAFETY: each caller names an NVML function whose C signature matches `T`.
    unsafe { lib.get::<T>(name.as_bytes()) }.ok().map(|s| *s)
}

impl Nvml {
    /// Loads and initialises NVML; `None` when it is missing or fails to initialise.
    pub fn load() -> Option<Nvml> {
        // SAFETY: loading NVML runs its initialisers, as nvidia-smi does.
        let lib = unsafe { Library::new("libnvidia-ml.so.1") }.ok()?;
        let init: Init = sym(&lib, "nvmlInit_v2")?;
        // SAFETY: nvmlInit_v2 takes no arguments.
        if unsafe { init() } != NVML_SUCCESS {
            return None;
        }
        Some(Nvml {
            count: sym(&lib, "nvmlDeviceGetCount_v2")?,
            by_index: sym(&lib, "nvmlDeviceGetHandleByIndex_v2")?,
            uuid: sym(&lib, "nvmlDeviceGetUUID")?,
            memory: sym(&lib, "nvmlDeviceGetMemoryInfo"),
            util: sym(&lib, "nvmlDeviceGetUtilizationRates"),
            _lib: lib,
        })
    }

    /// The number of GPUs NVML sees (the whole machine, whatever CUDA_VISIBLE_DEVICES says).
    pub fn count(&self) -> Option<u32> {
        let mut n: c_uint = 0;
        // SAFETY: a valid out-pointer.
        (unsafe { (self.count)(&mut n) } == NVML_SUCCESS).then_some(n)
    }

    /// Every GPU, by NVML index.
    pub fn gpus(&self) -> Vec<Gpu> {
        let Some(n) = self.count() else {
            return Vec::new();
        };
        (0..n).filter_map(|i| self.gpu(i)).collect()
    }

    fn gpu(&self, index: u32) -> Option<Gpu> {
        let mut dev: nvmlDevice_t = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        if unsafe { (self.by_index)(index, &mut dev) } != NVML_SUCCESS {
            return None;
        }
        let mut buf = [0 as c_char; NVML_DEVICE_UUID_V2_BUFFER_SIZE];
        // SAFETY: `buf` holds `len` bytes; NVML NUL-terminates within them on success.
        let rc = unsafe {
            (self.uuid)(
                dev,
                buf.as_mut_ptr(),
                c_uint::try_from(buf.len()).unwrap_or(c_uint::MAX),
            )
        };
        if rc != NVML_SUCCESS {
            return None;
        }
        let last = buf.len() - 1;
        buf[last] = 0;
        // SAFETY: `buf` is NUL-terminated (set just above at the latest).
        let uuid = unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let mem = self.memory.and_then(|f| {
            let mut m = nvmlMemory_t {
                total: 0,
                free: 0,
                used: 0,
            };
            // SAFETY: a device handle from NVML and a valid out-pointer.
            (unsafe { f(dev, &mut m) } == NVML_SUCCESS).then_some(m)
        });
        let util = self.util.and_then(|f| {
            let mut u = nvmlUtilization_t { gpu: 0, memory: 0 };
            // SAFETY: a device handle from NVML and a valid out-pointer.
            (unsafe { f(dev, &mut u) } == NVML_SUCCESS).then_some(u.gpu)
        });
        Some(Gpu {
            index,
            uuid,
            used: mem.as_ref().map(|m| m.used),
            total: mem.as_ref().map(|m| m.total),
            util,
        })
    }
}
