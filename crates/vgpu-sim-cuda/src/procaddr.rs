//! `cuGetProcAddress`, `cuGetErrorString`/`cuGetErrorName`, and the table of exported symbols.
use core::ffi::{c_char, c_int, c_void};
use std::collections::HashMap;
use std::sync::OnceLock;

use vgpu_sys::cuda::*;

use crate::api_device::*;
use crate::api_graph::*;
use crate::api_memory::*;
use crate::cu;
use crate::sim::put;
use crate::state::R;

/// Builds the name → entry point map of every exported CUDA symbol.
macro_rules! symbol_table {
    ($($name:ident,)*) => {
        fn build_symbols() -> HashMap<&'static str, usize> {
            let mut m = HashMap::new();
            $(m.insert(stringify!($name), $name as *const () as usize);)*
            m
        }
    };
}

symbol_table! {
    cuInit,
    cuDriverGetVersion,
    cuDeviceGet,
    cuDeviceGetCount,
    cuDeviceGetName,
    cuDeviceGetUuid,
    cuDeviceGetUuid_v2,
    cuDeviceGetAttribute,
    cuDeviceTotalMem,
    cuDeviceTotalMem_v2,
    cuDevicePrimaryCtxRetain,
    cuDevicePrimaryCtxRelease,
    cuDevicePrimaryCtxRelease_v2,
    cuDevicePrimaryCtxReset,
    cuDevicePrimaryCtxReset_v2,
    cuDevicePrimaryCtxGetState,
    cuCtxCreate,
    cuCtxCreate_v2,
    cuCtxCreate_v3,
    cuCtxCreate_v4,
    cuCtxDestroy,
    cuCtxDestroy_v2,
    cuCtxSetCurrent,
    cuCtxGetCurrent,
    cuCtxPushCurrent,
    cuCtxPushCurrent_v2,
    cuCtxPopCurrent,
    cuCtxPopCurrent_v2,
    cuCtxGetDevice,
    cuCtxSynchronize,
    cuStreamCreate,
    cuStreamCreateWithPriority,
    cuStreamDestroy,
    cuStreamDestroy_v2,
    cuStreamSynchronize,
    cuStreamSynchronize_ptsz,
    cuMemcpy,
    cuMemcpy_ptds,
    cuMemcpyDtoH_v2,
    cuMemcpyDtoH_v2_ptds,
    cuMemcpyHtoD_v2,
    cuMemcpyHtoD_v2_ptds,
    cuMemcpy2D_v2,
    cuMemcpy2D_v2_ptds,
    cuMemcpy2DUnaligned_v2,
    cuMemcpy2DUnaligned_v2_ptds,
    cuMemcpy3D_v2,
    cuMemcpy3D_v2_ptds,
    cuMemcpy3DPeer,
    cuMemcpy3DPeer_ptds,
    cuMemcpyAtoH_v2,
    cuMemcpyAtoH_v2_ptds,
    cuMemcpyHtoA_v2,
    cuMemcpyHtoA_v2_ptds,
    cuStreamQuery,
    cuStreamQuery_ptsz,
    cuStreamGetDevice,
    cuStreamGetDevice_ptsz,
    cuStreamWaitEvent,
    cuStreamWaitEvent_ptsz,
    cuStreamBeginCapture,
    cuStreamBeginCapture_ptsz,
    cuStreamBeginCapture_v2,
    cuStreamBeginCapture_v2_ptsz,
    cuStreamEndCapture,
    cuStreamEndCapture_ptsz,
    cuStreamIsCapturing,
    cuThreadExchangeStreamCaptureMode,
    cuStreamIsCapturing_ptsz,
    cuStreamGetCaptureInfo,
    cuStreamGetCaptureInfo_ptsz,
    cuStreamGetCaptureInfo_v2,
    cuStreamGetCaptureInfo_v2_ptsz,
    cuStreamGetCaptureInfo_v3,
    cuStreamGetCaptureInfo_v3_ptsz,
    cuEventCreate,
    cuEventDestroy,
    cuEventDestroy_v2,
    cuStreamWaitValue32_v2,
    cuStreamWaitValue32_v2_ptsz,
    cuMemHostAlloc,
    cuMemAllocHost_v2,
    cuMemFreeHost,
    cuMemHostGetDevicePointer_v2,
    cuEventRecord,
    cuEventRecord_ptsz,
    cuEventRecordWithFlags,
    cuEventRecordWithFlags_ptsz,
    cuEventSynchronize,
    cuEventQuery,
    cuEventElapsedTime,
    cuEventElapsedTime_v2,
    cuGraphAddKernelNode,
    cuGraphAddKernelNode_v2,
    cuGraphCreate,
    cuGraphDestroy,
    cuGraphAddMemAllocNode,
    cuGraphAddMemFreeNode,
    cuGraphAddChildGraphNode,
    cuGraphChildGraphNodeGetGraph,
    cuGraphAddNode,
    cuGraphConditionalHandleCreate,
    cuGraphGetNodes,
    cuPointerGetAttribute,
    cuGraphUpload,
    cuGraphUpload_ptsz,
    cuGraphNodeGetType,
    cuGraphMemAllocNodeGetParams,
    cuGraphInstantiateWithFlags,
    cuGraphInstantiate,
    cuGraphInstantiate_v2,
    cuGraphExecDestroy,
    cuGraphLaunch,
    cuGraphLaunch_ptsz,
    cuDeviceGraphMemTrim,
    cuDeviceGetGraphMemAttribute,
    cuDeviceSetGraphMemAttribute,
    cuModuleLoadData,
    cuModuleLoadDataEx,
    cuModuleLoad,
    cuModuleUnload,
    cuLibraryLoadData,
    cuLibraryUnload,
    cuLibraryGetKernel,
    cuKernelGetFunction,
    cuModuleGetFunction,
    cuLaunchKernel,
    cuLaunchKernel_ptsz,
    cuLaunchKernelEx,
    cuLaunchKernelEx_ptsz,
    cuLaunchCooperativeKernel,
    cuLaunchCooperativeKernel_ptsz,
    cuMemGetInfo,
    cuMemGetInfo_v2,
    cuMemAlloc,
    cuMemAlloc_v2,
    cuMemFree,
    cuMemFree_v2,
    cuMemAllocPitch,
    cuMemAllocPitch_v2,
    cuMemAllocManaged,
    cuMemGetAddressRange,
    cuMemGetAddressRange_v2,
    cuDeviceGetDefaultMemPool,
    cuDeviceGetMemPool,
    cuDeviceSetMemPool,
    cuMemPoolCreate,
    cuMemPoolDestroy,
    cuMemPoolTrimTo,
    cuMemPoolGetAttribute,
    cuMemPoolSetAttribute,
    cuMemAllocAsync,
    cuMemAllocAsync_ptsz,
    cuMemAllocFromPoolAsync,
    cuMemAllocFromPoolAsync_ptsz,
    cuMemFreeAsync,
    cuMemFreeAsync_ptsz,
    cuMemGetAllocationGranularity,
    cuMemCreate,
    cuMemRelease,
    cuMemAddressReserve,
    cuMemAddressFree,
    cuMemMap,
    cuMemUnmap,
    cuMemSetAccess,
    cuMemGetAllocationPropertiesFromHandle,
    cuArrayCreate,
    cuArrayCreate_v2,
    cuArray3DCreate,
    cuArray3DCreate_v2,
    cuArrayDestroy,
    cuMipmappedArrayCreate,
    cuMipmappedArrayDestroy,
    cuArrayGetMemoryRequirements,
    cuMipmappedArrayGetMemoryRequirements,
    cuGetErrorString,
    cuGetErrorName,
    cuGetProcAddress,
    cuGetProcAddress_v2,
}

/// Every exported CUDA driver symbol (not the `vgpuSim*` introspection calls) and its address.
pub fn symbols() -> &'static HashMap<&'static str, usize> {
    static SYMBOLS: OnceLock<HashMap<&'static str, usize>> = OnceLock::new();
    SYMBOLS.get_or_init(build_symbols)
}

/// Base names with several variants: (minimum version, exported symbol), ascending.
pub const VERSIONED: &[(&str, &[(i32, &str)])] = &[
    (
        "cuMemAlloc",
        &[(2000, "cuMemAlloc"), (3020, "cuMemAlloc_v2")],
    ),
    ("cuMemFree", &[(2000, "cuMemFree"), (3020, "cuMemFree_v2")]),
    (
        "cuMemGetInfo",
        &[(2000, "cuMemGetInfo"), (3020, "cuMemGetInfo_v2")],
    ),
    (
        "cuMemAllocPitch",
        &[(2000, "cuMemAllocPitch"), (3020, "cuMemAllocPitch_v2")],
    ),
    (
        "cuDeviceTotalMem",
        &[(2000, "cuDeviceTotalMem"), (3020, "cuDeviceTotalMem_v2")],
    ),
    (
        "cuArrayCreate",
        &[(2000, "cuArrayCreate"), (3020, "cuArrayCreate_v2")],
    ),
    (
        "cuArray3DCreate",
        &[(2000, "cuArray3DCreate"), (3020, "cuArray3DCreate_v2")],
    ),
    (
        "cuMemGetAddressRange",
        &[
            (2000, "cuMemGetAddressRange"),
            (3020, "cuMemGetAddressRange_v2"),
        ],
    ),
    (
        "cuCtxCreate",
        &[
            (2000, "cuCtxCreate"),
            (3020, "cuCtxCreate_v2"),
            (11040, "cuCtxCreate_v3"),
            (12050, "cuCtxCreate_v4"),
        ],
    ),
    (
        "cuCtxDestroy",
        &[(2000, "cuCtxDestroy"), (4000, "cuCtxDestroy_v2")],
    ),
    (
        "cuCtxPushCurrent",
        &[(2000, "cuCtxPushCurrent"), (4000, "cuCtxPushCurrent_v2")],
    ),
    (
        "cuCtxPopCurrent",
        &[(2000, "cuCtxPopCurrent"), (4000, "cuCtxPopCurrent_v2")],
    ),
    (
        "cuStreamDestroy",
        &[(2000, "cuStreamDestroy"), (4000, "cuStreamDestroy_v2")],
    ),
    (
        "cuEventDestroy",
        &[(2000, "cuEventDestroy"), (4000, "cuEventDestroy_v2")],
    ),
    (
        "cuDevicePrimaryCtxRelease",
        &[
            (2000, "cuDevicePrimaryCtxRelease"),
            (11000, "cuDevicePrimaryCtxRelease_v2"),
        ],
    ),
    (
        "cuDevicePrimaryCtxReset",
        &[
            (2000, "cuDevicePrimaryCtxReset"),
            (11000, "cuDevicePrimaryCtxReset_v2"),
        ],
    ),
    (
        "cuDeviceGetUuid",
        &[(2000, "cuDeviceGetUuid"), (11040, "cuDeviceGetUuid_v2")],
    ),
    (
        "cuGetProcAddress",
        &[(2000, "cuGetProcAddress"), (12000, "cuGetProcAddress_v2")],
    ),
    (
        "cuGraphInstantiate",
        &[
            (10000, "cuGraphInstantiate"),
            (11000, "cuGraphInstantiate_v2"),
            (12000, "cuGraphInstantiateWithFlags"),
        ],
    ),
    (
        "cuGraphInstantiateWithFlags",
        &[(11040, "cuGraphInstantiateWithFlags")],
    ),
    (
        "cuGraphAddKernelNode",
        &[
            (10000, "cuGraphAddKernelNode"),
            (12000, "cuGraphAddKernelNode_v2"),
        ],
    ),
    (
        "cuStreamBeginCapture",
        &[
            (10000, "cuStreamBeginCapture"),
            (10010, "cuStreamBeginCapture_v2"),
        ],
    ),
    (
        "cuStreamGetCaptureInfo",
        &[
            (10010, "cuStreamGetCaptureInfo"),
            (11030, "cuStreamGetCaptureInfo_v2"),
            (12030, "cuStreamGetCaptureInfo_v3"),
        ],
    ),
    ("cuMemcpyDtoH", &[(3020, "cuMemcpyDtoH_v2")]),
    ("cuMemcpyHtoD", &[(3020, "cuMemcpyHtoD_v2")]),
    ("cuMemcpy2D", &[(3020, "cuMemcpy2D_v2")]),
    ("cuMemcpy2DUnaligned", &[(3020, "cuMemcpy2DUnaligned_v2")]),
    ("cuMemcpy3D", &[(3020, "cuMemcpy3D_v2")]),
    ("cuMemcpyAtoH", &[(3020, "cuMemcpyAtoH_v2")]),
    ("cuMemcpyHtoA", &[(3020, "cuMemcpyHtoA_v2")]),
    (
        "cuEventElapsedTime",
        &[
            (2000, "cuEventElapsedTime"),
            (12080, "cuEventElapsedTime_v2"),
        ],
    ),
];

/// Minimum version of single-variant base names (everything else: 2000).
pub fn min_version(base: &str) -> i32 {
    match base {
        "cuMemAllocManaged" => 6000,
        "cuMipmappedArrayCreate" | "cuMipmappedArrayDestroy" => 5000,
        "cuLaunchKernel" | "cuMemcpy" | "cuMemcpy3DPeer" => 4000,
        "cuLaunchCooperativeKernel" => 9000,
        "cuStreamEndCapture" | "cuStreamIsCapturing" => 10000,
        "cuThreadExchangeStreamCaptureMode" => 10010,
        "cuEventRecordWithFlags" => 11010,
        "cuStreamGetDevice" => 12080,
        "cuLibraryLoadData" | "cuLibraryUnload" | "cuLibraryGetKernel" | "cuKernelGetFunction" => {
            12000
        }
        "cuGraphLaunch" | "cuGraphCreate" | "cuGraphDestroy" | "cuGraphExecDestroy" => 10000,
        "cuMemCreate"
        | "cuMemRelease"
        | "cuMemAddressReserve"
        | "cuMemAddressFree"
        | "cuMemMap"
        | "cuMemUnmap"
        | "cuMemSetAccess"
        | "cuMemGetAllocationGranularity"
        | "cuMemGetAllocationPropertiesFromHandle" => 10020,
        "cuMemAllocAsync"
        | "cuMemAllocFromPoolAsync"
        | "cuMemFreeAsync"
        | "cuMemPoolCreate"
        | "cuMemPoolDestroy"
        | "cuMemPoolTrimTo"
        | "cuMemPoolGetAttribute"
        | "cuMemPoolSetAttribute"
        | "cuDeviceGetDefaultMemPool"
        | "cuDeviceGetMemPool"
        | "cuDeviceSetMemPool" => 11020,
        "cuGraphUpload" => 11010,
        "cuGraphAddMemAllocNode"
        | "cuGraphAddMemFreeNode"
        | "cuGraphMemAllocNodeGetParams"
        | "cuDeviceGraphMemTrim"
        | "cuDeviceGetGraphMemAttribute"
        | "cuDeviceSetGraphMemAttribute" => 11040,
        "cuLaunchKernelEx"
        | "cuArrayGetMemoryRequirements"
        | "cuMipmappedArrayGetMemoryRequirements" => 11060,
        _ => 2000,
    }
}

/// Whether `name` is only a variant (never a base name `cuGetProcAddress` accepts).
fn variant_only(name: &str) -> bool {
    name.ends_with("_ptsz")
        || name.ends_with("_ptds")
        || VERSIONED
            .iter()
            .any(|(base, vs)| *base != name && vs.iter().any(|(_, v)| *v == name))
            && !VERSIONED.iter().any(|(base, _)| *base == name)
}

/// Resolves base `symbol` for `version` and `flags` to an exported symbol name.
pub fn resolve(
    symbol: &str,
    version: i32,
    flags: u64,
) -> Result<&'static str, CUdriverProcAddressQueryResult> {
    let syms = symbols();
    let chosen = if let Some((_, variants)) = VERSIONED.iter().find(|(b, _)| *b == symbol) {
        variants
            .iter()
            .rev()
            .find(|(min, _)| version >= *min)
            .map(|(_, v)| *v)
            .ok_or(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)?
    } else {
        let (&name, _) = syms
            .get_key_value(symbol)
            .filter(|(n, _)| !variant_only(n))
            .ok_or(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)?;
        if version < min_version(name) {
            return Err(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
        }
        name
    };
    if flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM != 0 {
        // Stream-ordered calls have a `_ptsz` variant, copies a `_ptds` one.
        for suffix in ["_ptsz", "_ptds"] {
            let per_thread = format!("{chosen}{suffix}");
            if let Some((&name, _)) = syms.get_key_value(per_thread.as_str()) {
                return Ok(name);
            }
        }
    }
    Ok(chosen)
}

/// Shared body of both `cuGetProcAddress` forms.
///
/// # Safety
/// `symbol` null or NUL-terminated; `pfn` and `status` null or writable.
unsafe fn get_proc_address(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut CUdriverProcAddressQueryResult,
) -> R<()> {
    if pfn.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: `pfn` is non-null and writable per the contract.
    unsafe { put(pfn, std::ptr::null_mut())? };
    // SAFETY: `symbol` is null or NUL-terminated per the contract.
    let name = unsafe { cstr_bytes(symbol) }.ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let name = core::str::from_utf8(name).unwrap_or("");
    let result = resolve(name, version, flags);
    let st = match result {
        Ok(_) => CU_GET_PROC_ADDRESS_SUCCESS,
        Err(s) => s,
    };
    if !status.is_null() {
        // SAFETY: `status` is non-null and writable per the contract.
        unsafe { put(status, st)? };
    }
    let name = result.map_err(|_| CUDA_ERROR_NOT_FOUND)?;
    let addr = symbols().get(name).copied().ok_or(CUDA_ERROR_NOT_FOUND)?;
    // SAFETY: `pfn` is non-null and writable per the contract.
    unsafe { put(pfn, std::ptr::with_exposed_provenance_mut(addr)) }
}

cu! {
    noinit fn cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64) {
        // SAFETY: the caller's pointers, as cuda.h documents them.
        unsafe { get_proc_address(symbol, pfn, version, flags, std::ptr::null_mut()) }
    }
}

cu! {
    noinit fn cuGetProcAddress_v2(
        symbol: *const c_char,
        pfn: *mut *mut c_void,
        version: c_int,
        flags: u64,
        status: *mut CUdriverProcAddressQueryResult,
    ) {
        // SAFETY: the caller's pointers, as cuda.h documents them.
        unsafe { get_proc_address(symbol, pfn, version, flags, status) }
    }
}

/// (code, name, description) of every result code the simulator knows.
const ERRORS: &[(CUresult, &core::ffi::CStr, &core::ffi::CStr)] = &[
    (CUDA_SUCCESS, c"CUDA_SUCCESS", c"no error"),
    (
        CUDA_ERROR_INVALID_VALUE,
        c"CUDA_ERROR_INVALID_VALUE",
        c"invalid argument",
    ),
    (
        CUDA_ERROR_OUT_OF_MEMORY,
        c"CUDA_ERROR_OUT_OF_MEMORY",
        c"out of memory",
    ),
    (
        CUDA_ERROR_NOT_INITIALIZED,
        c"CUDA_ERROR_NOT_INITIALIZED",
        c"initialization error",
    ),
    (
        CUDA_ERROR_DEINITIALIZED,
        c"CUDA_ERROR_DEINITIALIZED",
        c"driver shutting down",
    ),
    (
        CUDA_ERROR_NO_DEVICE,
        c"CUDA_ERROR_NO_DEVICE",
        c"no CUDA-capable device is detected",
    ),
    (
        CUDA_ERROR_INVALID_DEVICE,
        c"CUDA_ERROR_INVALID_DEVICE",
        c"invalid device ordinal",
    ),
    (
        CUDA_ERROR_INVALID_CONTEXT,
        c"CUDA_ERROR_INVALID_CONTEXT",
        c"invalid device context",
    ),
    (
        CUDA_ERROR_INVALID_HANDLE,
        c"CUDA_ERROR_INVALID_HANDLE",
        c"invalid resource handle",
    ),
    (
        CUDA_ERROR_ILLEGAL_STATE,
        c"CUDA_ERROR_ILLEGAL_STATE",
        c"the operation cannot be performed in the present state",
    ),
    (
        CUDA_ERROR_NOT_FOUND,
        c"CUDA_ERROR_NOT_FOUND",
        c"named symbol not found",
    ),
    (
        CUDA_ERROR_NOT_READY,
        c"CUDA_ERROR_NOT_READY",
        c"device not ready",
    ),
    (
        CUDA_ERROR_NOT_PERMITTED,
        c"CUDA_ERROR_NOT_PERMITTED",
        c"operation not permitted",
    ),
    (
        CUDA_ERROR_NOT_SUPPORTED,
        c"CUDA_ERROR_NOT_SUPPORTED",
        c"operation not supported",
    ),
    (
        CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
        c"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
        c"operation not permitted when stream is capturing",
    ),
    (
        CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
        c"CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
        c"operation failed due to a previous error during capture",
    ),
    (CUDA_ERROR_UNKNOWN, c"CUDA_ERROR_UNKNOWN", c"unknown error"),
];

/// Looks up `error` and writes the chosen static string to `*out` (NULL if unknown).
///
/// # Safety
/// `out` null or writable.
unsafe fn error_text(error: CUresult, out: *mut *const c_char, name: bool) -> R<()> {
    let found = ERRORS.iter().find(|(c, _, _)| *c == error);
    let s = found.map_or(
        std::ptr::null(),
        |(_, n, d)| if name { n.as_ptr() } else { d.as_ptr() },
    );
    // SAFETY: `out` is null (rejected) or writable per the contract.
    unsafe { put(out, s)? };
    found.map(|_| ()).ok_or(CUDA_ERROR_INVALID_VALUE)
}

cu! {
    noinit fn cuGetErrorString(error: CUresult, out: *mut *const c_char) {
        // SAFETY: `out` is the caller's out-pointer.
        unsafe { error_text(error, out, false) }
    }
}

cu! {
    noinit fn cuGetErrorName(error: CUresult, out: *mut *const c_char) {
        // SAFETY: `out` is the caller's out-pointer.
        unsafe { error_text(error, out, true) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolution() {
        assert_eq!(resolve("cuMemAlloc", 3010, 0), Ok("cuMemAlloc"));
        assert_eq!(resolve("cuMemAlloc", 13000, 0), Ok("cuMemAlloc_v2"));
        assert_eq!(resolve("cuCtxCreate", 12040, 0), Ok("cuCtxCreate_v3"));
        assert_eq!(resolve("cuCtxCreate", 12050, 0), Ok("cuCtxCreate_v4"));
        assert_eq!(
            resolve("cuGraphInstantiate", 11020, 0),
            Ok("cuGraphInstantiate_v2")
        );
        assert_eq!(
            resolve("cuGraphInstantiate", 12000, 0),
            Ok("cuGraphInstantiateWithFlags")
        );
        assert_eq!(
            resolve("cuGraphInstantiateWithFlags", 11040, 0),
            Ok("cuGraphInstantiateWithFlags")
        );
        assert_eq!(
            resolve("cuMemAllocAsync", 12000, 2),
            Ok("cuMemAllocAsync_ptsz")
        );
        assert_eq!(resolve("cuMemAllocAsync", 12000, 1), Ok("cuMemAllocAsync"));
        assert_eq!(resolve("cuMemAlloc", 12000, 2), Ok("cuMemAlloc_v2"));
        assert_eq!(
            resolve("cuMemAllocAsync", 11000, 0),
            Err(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)
        );
        assert_eq!(
            resolve("cuMemAlloc_v2", 12000, 0),
            Err(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)
        );
        assert_eq!(
            resolve("cuNope", 12000, 0),
            Err(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)
        );
        assert_eq!(
            resolve("cuGetProcAddress", 12000, 0),
            Ok("cuGetProcAddress_v2")
        );
        assert_eq!(
            resolve("cuGetProcAddress", 11030, 0),
            Ok("cuGetProcAddress")
        );
    }

    #[test]
    fn every_variant_is_exported() {
        for (_, vs) in VERSIONED {
            for (_, v) in *vs {
                assert!(symbols().contains_key(v), "{v}");
            }
        }
    }
}
