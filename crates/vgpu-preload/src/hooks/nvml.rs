//! NVML: `nvmlDeviceGetMemoryInfo` (and `_v2`) show the limit as the total and vgpu's
//! accounting as used, so `nvidia-smi` in the container shows the limit. (vgpu's own NVML
//! queries are in [`crate::driver`].)
use crate::driver::REAL;
use crate::real::ty;
use crate::runtime;
use crate::symbols::Call;
use core::ffi::c_uint;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use vgpu_policy::view;
use vgpu_sys::nvml::*;

const MISSING: nvmlReturn_t = NVML_ERROR_FUNCTION_NOT_FOUND;

/// (limit, used) to show for an NVML device, if it is limited.
///
/// In a process that initialised CUDA, the device is found by UUID in the device table. In one
/// that did not (`nvidia-smi`): the limit of the container's region while some process uses it
/// (the region wins, as for a CUDA process), else the plan's limit for the NVML index
/// (per-index variables number the container's devices as NVML does): where the region has
/// no limit for that GPU, and beside a region nobody uses (a finished run's limits bind
/// nobody). The usage shown is the container's while its region is in use.
fn limit_for(dev: nvmlDevice_t) -> Option<(u64, u64)> {
    let uuid = REAL.nvml_uuid(dev)?;
    if let Some(rt) = runtime::runtime()
        && let Some(device) = rt.devices.iter().position(|d| d.uuid == uuid)
    {
        return Some((rt.ledger().limit(device)?, rt.ledger().used(device)));
    }
    let planned = || {
        let plan = runtime::plan()?;
        plan.device(REAL.nvml_index(dev)?).memory_limit
    };
    if let Some(region) = region_for_view()
        && let Some(i) = region.device_index(&uuid)
        && region.any_live()
    {
        let limit = region.limit_index(i).or_else(planned)?;
        return Some((limit, region.used_index(i)));
    }
    Some((planned()?, 0))
}

/// The container's region, opened without taking a process slot (for views only).
fn region_for_view() -> Option<&'static vgpu_region::Region> {
    static REGION: OnceLock<Option<vgpu_region::Region>> = OnceLock::new();
    REGION
        .get_or_init(|| {
            let shared = runtime::plan().and_then(|p| p.shared_cache.clone());
            vgpu_region::Region::open_existing(&vgpu_region::Location::new(shared)).ok()
        })
        .as_ref()
}

/// # Safety
/// C API contract of `nvmlDeviceGetMemoryInfo`.
pub unsafe fn get_memory_info(
    call: Call<ty::nvmlDeviceGetMemoryInfo>,
    dev: nvmlDevice_t,
    mem: *mut nvmlMemory_t,
) -> nvmlReturn_t {
    let r = crate::forward!(MISSING, call(dev, mem));
    if r == NVML_SUCCESS
        && !mem.is_null()
        && runtime::limits_may_apply()
        && let Some((limit, used)) = limit_for(dev)
    {
        // SAFETY: non-null, just written by NVML.
        let m = unsafe { &mut *mem };
        (m.total, m.used, m.free) = view::nvml_memory(Some(limit), used, m.total, m.used);
    }
    r
}

/// # Safety
/// C API contract of `nvmlDeviceGetMemoryInfo_v2`.
pub unsafe fn get_memory_info_v2(
    call: Call<ty::nvmlDeviceGetMemoryInfo_v2>,
    dev: nvmlDevice_t,
    mem: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    let r = crate::forward!(MISSING, call(dev, mem));
    if r == NVML_SUCCESS
        && !mem.is_null()
        && runtime::limits_may_apply()
        && let Some((limit, used)) = limit_for(dev)
    {
        // SAFETY: non-null, just written by NVML.
        let m = unsafe { &mut *mem };
        (m.total, m.used, m.free) = view::nvml_memory(Some(limit), used, m.total, m.used);
        m.reserved = 0;
    }
    r
}

/// The program's own `nvmlInit*` calls that succeeded, less its `nvmlShutdown`s: NVML's
/// reference count as the program alone sees it (vgpu's use is [`crate::driver::NvmlHold`]).
static PROGRAM_INITS: AtomicU32 = AtomicU32::new(0);

/// # Safety
/// C API contract of `nvmlInit` / `nvmlInit_v2`.
pub unsafe fn init(call: Call<ty::nvmlInit_v2>) -> nvmlReturn_t {
    let r = crate::forward!(MISSING, call());
    if r == NVML_SUCCESS {
        PROGRAM_INITS.fetch_add(1, Ordering::AcqRel);
    }
    r
}

/// # Safety
/// C API contract of `nvmlInitWithFlags`.
pub unsafe fn init_with_flags(call: Call<ty::nvmlInitWithFlags>, flags: c_uint) -> nvmlReturn_t {
    let r = crate::forward!(MISSING, call(flags));
    if r == NVML_SUCCESS {
        PROGRAM_INITS.fetch_add(1, Ordering::AcqRel);
    }
    r
}

/// A shutdown past the program's own inits is `NVML_ERROR_UNINITIALIZED`, as NVML says
/// without vgpu, while vgpu holds NVML (forwarded, it would take vgpu's reference away).
/// Otherwise it is forwarded (and, if the program's inits were not all seen, NVML decides).
///
/// # Safety
/// C API contract of `nvmlShutdown`.
pub unsafe fn shutdown(call: Call<ty::nvmlShutdown>) -> nvmlReturn_t {
    let mine = PROGRAM_INITS
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
        .is_ok();
    if !mine && crate::driver::nvml_in_use_by_vgpu() {
        return NVML_ERROR_UNINITIALIZED;
    }
    let r = crate::forward!(MISSING, call());
    if mine && r != NVML_SUCCESS {
        PROGRAM_INITS.fetch_add(1, Ordering::AcqRel);
    }
    r
}
