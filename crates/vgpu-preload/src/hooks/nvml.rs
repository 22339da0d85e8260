//! NVML: `nvmlDeviceGetMemoryInfo` (and `_v2`) show the limit as the total and vgpu's
//! accounting as used, so `nvidia-smi` in the container shows the limit. NVML is also how vgpu
//! measures what a context takes ([`device_used`]).
use crate::runtime::{self, Runtime};
use core::ffi::{c_char, c_uint};
use std::ffi::CString;
use std::sync::OnceLock;
use vgpu_policy::ledger::Slot;
use vgpu_policy::view;
use vgpu_sys::nvml::*;

const MISSING: nvmlReturn_t = NVML_ERROR_FUNCTION_NOT_FOUND;

/// Initialises NVML for vgpu's own use, once.
fn nvml_ready() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| crate::fwd!(MISSING, nvmlInit_v2()) == NVML_SUCCESS)
}

/// The device-wide used memory of `slot`'s GPU as NVML reports it (all processes).
pub fn device_used(rt: &Runtime, slot: Slot) -> Option<u64> {
    if !nvml_ready() {
        return None;
    }
    let uuid = CString::new(rt.devices.get(slot)?.uuid.clone()).ok()?;
    let mut dev: nvmlDevice_t = core::ptr::null_mut();
    if crate::fwd!(MISSING, nvmlDeviceGetHandleByUUID(uuid.as_ptr(), &mut dev)) != NVML_SUCCESS {
        return None;
    }
    let mut mem = nvmlMemory_t::default();
    (crate::fwd!(MISSING, nvmlDeviceGetMemoryInfo(dev, &mut mem)) == NVML_SUCCESS)
        .then_some(mem.used)
}

fn uuid_of(dev: nvmlDevice_t) -> Option<String> {
    let mut buf = [0 as c_char; NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    let r = crate::fwd!(
        MISSING,
        nvmlDeviceGetUUID(dev, buf.as_mut_ptr(), buf.len() as c_uint)
    );
    if r != NVML_SUCCESS {
        return None;
    }
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8(bytes).ok()
}

/// (limit, used) to show for an NVML device, if it is limited.
///
/// In a process that initialised CUDA, the device is found by UUID in the device table. In one
/// that did not (`nvidia-smi`), the CUDA ordinal is derived from `CUDA_VISIBLE_DEVICES` (indices
/// or UUIDs) over NVML's own order, and nothing is in use by this process.
fn limit_for(dev: nvmlDevice_t) -> Option<(u64, u64)> {
    let uuid = uuid_of(dev)?;
    if let Some(rt) = runtime::runtime()
        && let Some(slot) = rt.devices.iter().position(|d| d.uuid == uuid)
    {
        return Some((rt.ledger().limit(slot)?, rt.ledger().used(slot)));
    }
    // nvidia-smi and other NVML-only processes: the container's region, if there is one, has the
    // limit and the container-wide usage.
    if let Some(region) = region_for_view()
        && let Some(i) = region.device_index(&uuid)
    {
        return Some((region.limit_index(i)?, region.used_index(i)));
    }
    let cfg = runtime::config()?;
    let mut index: c_uint = 0;
    if crate::fwd!(MISSING, nvmlDeviceGetIndex(dev, &mut index)) != NVML_SUCCESS {
        return None;
    }
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let ordinal = cuda_ordinal(visible.as_deref(), index, &uuid)?;
    Some((cfg.memory_limit_for(ordinal)?, 0))
}

/// The container's region, opened without taking a process slot (for views only).
fn region_for_view() -> Option<&'static vgpu_region::Region> {
    static REGION: OnceLock<Option<vgpu_region::Region>> = OnceLock::new();
    REGION
        .get_or_init(|| {
            let shared = runtime::config().and_then(|c| c.shared_region_path.clone());
            vgpu_region::Region::open_existing(&vgpu_region::Location::new(shared)).ok()
        })
        .as_ref()
}

/// The CUDA ordinal of the GPU with NVML index `index` and UUID `uuid` under a
/// `CUDA_VISIBLE_DEVICES` value (`None`: unset, every GPU visible in NVML order).
pub fn cuda_ordinal(visible: Option<&str>, index: u32, uuid: &str) -> Option<u32> {
    let Some(list) = visible else {
        return Some(index);
    };
    for (ordinal, entry) in list.split(',').map(str::trim).enumerate() {
        let hit = match entry.parse::<u32>() {
            Ok(i) => i == index,
            Err(_) => !entry.is_empty() && uuid.starts_with(entry),
        };
        if hit {
            return u32::try_from(ordinal).ok();
        }
    }
    None
}

/// # Safety
/// C API contract of `nvmlDeviceGetMemoryInfo`.
pub unsafe fn get_memory_info(dev: nvmlDevice_t, mem: *mut nvmlMemory_t) -> nvmlReturn_t {
    let r = crate::fwd!(MISSING, nvmlDeviceGetMemoryInfo(dev, mem));
    if r == NVML_SUCCESS
        && !mem.is_null()
        && runtime::enforcing()
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
pub unsafe fn get_memory_info_v2(dev: nvmlDevice_t, mem: *mut nvmlMemory_v2_t) -> nvmlReturn_t {
    let r = crate::fwd!(MISSING, nvmlDeviceGetMemoryInfo_v2(dev, mem));
    if r == NVML_SUCCESS
        && !mem.is_null()
        && runtime::enforcing()
        && let Some((limit, used)) = limit_for(dev)
    {
        // SAFETY: non-null, just written by NVML.
        let m = unsafe { &mut *mem };
        (m.total, m.used, m.free) = view::nvml_memory(Some(limit), used, m.total, m.used);
        m.reserved = 0;
    }
    r
}

#[cfg(test)]
mod tests {
    use super::cuda_ordinal;

    #[test]
    fn visible_devices_map_nvml_index_to_cuda_ordinal() {
        assert_eq!(cuda_ordinal(None, 3, "GPU-a"), Some(3));
        assert_eq!(cuda_ordinal(Some("1"), 1, "GPU-a"), Some(0));
        assert_eq!(cuda_ordinal(Some("1"), 0, "GPU-a"), None);
        assert_eq!(cuda_ordinal(Some("1,0"), 0, "GPU-a"), Some(1));
        assert_eq!(cuda_ordinal(Some("GPU-5a1e,0"), 7, "GPU-5a1e0000"), Some(0));
        assert_eq!(cuda_ordinal(Some(""), 0, "GPU-a"), None);
    }
}
