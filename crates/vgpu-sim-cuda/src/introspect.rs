//! Test-only introspection exports (`vgpuSim*`). They work before `cuInit` and never fail:
//! out-of-range arguments read as 0 (or -1 for [`vgpuSimPhysicalIndex`]).
use core::ffi::{c_char, c_int};

use vgpu_sys::cuda::{CUdevice, cstr_bytes};

use crate::sim;

fn phys(p: c_int) -> Option<usize> {
    usize::try_from(p)
        .ok()
        .filter(|&p| p < sim::config().devices)
}

/// Device-wide bytes in use on physical GPU `physical` (all processes sharing
/// `VGPU_SIM_STATE`, else this process).
#[unsafe(no_mangle)]
pub extern "C" fn vgpuSimDeviceUsed(physical: c_int) -> u64 {
    sim::enter_value("vgpuSimDeviceUsed", 0, || {
        phys(physical).map_or(0, |p| {
            sim::counters()[p].load(std::sync::atomic::Ordering::SeqCst)
        })
    })
}

/// The highest device-wide usage physical GPU `physical` has had (all processes sharing
/// `VGPU_SIM_STATE`, else this process). Also at byte 192 + 8 × `physical` of the state file.
#[unsafe(no_mangle)]
pub extern "C" fn vgpuSimDevicePeak(physical: c_int) -> u64 {
    sim::enter_value("vgpuSimDevicePeak", 0, || {
        phys(physical).map_or(0, |p| {
            sim::peaks()[p].load(std::sync::atomic::Ordering::SeqCst)
        })
    })
}

/// Memory of physical GPU `physical` (`VGPU_SIM_MEM`).
#[unsafe(no_mangle)]
pub extern "C" fn vgpuSimDeviceTotal(physical: c_int) -> u64 {
    sim::enter_value("vgpuSimDeviceTotal", 0, || {
        phys(physical).map_or(0, |_| sim::config().mem)
    })
}

/// Bytes this process has charged to physical GPU `physical`.
#[unsafe(no_mangle)]
pub extern "C" fn vgpuSimProcessUsed(physical: c_int) -> u64 {
    sim::enter_value("vgpuSimProcessUsed", 0, || {
        phys(physical).map_or(0, |p| sim::model().process_used(p))
    })
}

/// Calls of the exported symbol named `symbol` so far in this process.
///
/// # Safety
/// `symbol` must be null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vgpuSimCallCount(symbol: *const c_char) -> u64 {
    sim::enter_value("vgpuSimCallCount", 0, || {
        // SAFETY: `symbol` is null or NUL-terminated per this function's contract.
        let name = unsafe { cstr_bytes(symbol) };
        name.and_then(|n| core::str::from_utf8(n).ok())
            .map_or(0, sim::call_count)
    })
}

/// Physical index of CUDA ordinal `ordinal`, or -1.
#[unsafe(no_mangle)]
pub extern "C" fn vgpuSimPhysicalIndex(ordinal: CUdevice) -> c_int {
    sim::enter_value("vgpuSimPhysicalIndex", -1, || {
        usize::try_from(ordinal)
            .ok()
            .and_then(|o| sim::config().visible.get(o).copied())
            .map_or(-1, |p| p as c_int)
    })
}

/// `CLOCK_MONOTONIC` now, in nanoseconds: the simulator's timeline clock.
#[unsafe(no_mangle)]
pub extern "C" fn vgpuSimNowNs() -> u64 {
    sim::enter_value("vgpuSimNowNs", 0, crate::timeline::now_ns)
}

/// Kernel nanoseconds this process's kernels have executed on physical GPU `physical` so far
/// (a kernel still running counts up to now, queued ones not at all).
#[unsafe(no_mangle)]
pub extern "C" fn vgpuSimKernelNs(physical: c_int) -> u64 {
    sim::enter_value("vgpuSimKernelNs", 0, || {
        phys(physical).map_or(0, |p| sim::model().process_kernel_ns(p))
    })
}

/// Kernel nanoseconds executed on physical GPU `physical` so far by every process (sharing
/// `VGPU_SIM_STATE`; else this process), with the same rule as [`vgpuSimKernelNs`].
#[unsafe(no_mangle)]
pub extern "C" fn vgpuSimDeviceKernelNs(physical: c_int) -> u64 {
    sim::enter_value("vgpuSimDeviceKernelNs", 0, || {
        phys(physical).map_or(0, |p| {
            sim::advance_device(p);
            sim::timelines()[p].executed_ns(crate::timeline::now_ns())
        })
    })
}

/// Nanoseconds physical GPU `physical` was busy with kernels (any process) within
/// `[since_ns, now)` (`vgpuSimNowNs` clock). Used by the simulated NVML's utilization.
#[unsafe(no_mangle)]
pub extern "C" fn vgpuSimDeviceBusyNs(physical: c_int, since_ns: u64) -> u64 {
    sim::enter_value("vgpuSimDeviceBusyNs", 0, || {
        phys(physical).map_or(0, |p| {
            sim::advance_device(p);
            sim::timelines()[p].busy_between(since_ns, crate::timeline::now_ns())
        })
    })
}

/// Kernels this process has launched on physical GPU `physical` (each kernel node of a
/// launched graph counts; kernels captured into a graph do not until it is launched).
#[unsafe(no_mangle)]
pub extern "C" fn vgpuSimKernelsLaunched(physical: c_int) -> u64 {
    sim::enter_value("vgpuSimKernelsLaunched", 0, || {
        phys(physical).map_or(0, |p| sim::model().kernels_launched(p))
    })
}

/// Context switches on physical GPU `physical` so far (a kernel of another process than the
/// previous kernel's, among the processes sharing `VGPU_SIM_STATE`); each cost
/// `VGPU_SIM_SWITCH_NS` of GPU time.
#[unsafe(no_mangle)]
pub extern "C" fn vgpuSimDeviceSwitches(physical: c_int) -> u64 {
    sim::enter_value("vgpuSimDeviceSwitches", 0, || {
        phys(physical).map_or(0, |p| {
            sim::advance_device(p);
            sim::timelines()[p].switches().0
        })
    })
}

/// Launch, start and end (`vgpuSimNowNs` clock) of this process's `index`-th kernel (from 0,
/// in launch order; graph kernel nodes count at graph launch) on physical GPU `physical`, on
/// the GPU's timeline: with time-slicing a preempted kernel's span includes the other
/// processes' turns. Returns 1 (times written; null pointers skipped) once it completed, 0
/// while it has not, -1 if there is no such kernel or it is older than the last 4096.
///
/// # Safety
/// `launch`, `start` and `end` must each be null or valid for a write of `u64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vgpuSimKernelTimes(
    physical: c_int,
    index: u64,
    launch: *mut u64,
    start: *mut u64,
    end: *mut u64,
) -> c_int {
    sim::enter_value("vgpuSimKernelTimes", -1, || {
        let Some(p) = phys(physical) else { return -1 };
        match sim::model().kernel_times(p, index) {
            None => -1,
            Some(None) => 0,
            Some(Some(t)) => {
                for (ptr, v) in [(launch, t.launch), (start, t.start), (end, t.end)] {
                    if !ptr.is_null() {
                        // SAFETY: non-null, and writable per this function's contract.
                        unsafe { ptr.write(v) };
                    }
                }
                1
            }
        }
    })
}
