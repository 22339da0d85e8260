//! A simulated NVML (`libnvidia-ml.so.1`) for vgpu's tests.
//!
//! NVML's view is physical: it ignores `CUDA_VISIBLE_DEVICES`. Device count and memory come
//! from `VGPU_SIM_DEVICES` and `VGPU_SIM_MEM` (as in the simulated driver); UUIDs match the
//! driver's (`GPU-5a1e0000-0000-4000-8000-0000000000NN`). Memory in use is read from the
//! simulated driver (`dlopen("libcuda.so.1")` + `vgpuSimDeviceUsed`/`vgpuSimDeviceTotal`), so
//! that this process's allocations, and with `VGPU_SIM_STATE` every process's, show up; if the
//! driver cannot be loaded, used is 0 and total is `VGPU_SIM_MEM`. GPU utilization is the busy
//! share of the last second of the driver's simulated kernel timeline.
#![allow(non_snake_case)]

pub mod config;
pub mod driver;
pub mod exports;
