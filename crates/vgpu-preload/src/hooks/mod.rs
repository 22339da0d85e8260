//! The hook table: every exported entry point is declared once, in [`hook_table!`] below.
//!
//! One line per exported symbol gives its C prototype, the base name the driver's
//! `cuGetProcAddress` knows it by, the CUDA version from which the driver hands out this
//! variant, whether it is the per-thread-default-stream (`_ptsz`) variant, and the Rust function
//! that implements it. From that single list the macro generates:
//! - the `#[no_mangle] extern "C"` export (symbol interposition for programs linked to the driver),
//!   whose body runs inside [`crate::guard::ffi`];
//! - a typed, lazily resolved pointer to the real function ([`real`]);
//! - the lookup used by our `dlsym` and by the `cuGetProcAddress` hooks ([`HOOKS`]).
#![allow(non_snake_case, non_upper_case_globals, clippy::missing_safety_doc)]

use crate::backend::dl::Lib;
use crate::backend::real::RealFn;
use core::ffi::{c_char, c_int, c_uint, c_void};
use vgpu_sys::cuda::*;
use vgpu_sys::nvml::*;

pub mod capture;
pub mod context;
pub mod init;
pub mod launch;
pub mod memory;
pub mod nvml;
pub mod pools;
pub mod procaddr;
pub mod views;

/// What the lookup paths need to know of one exported hook.
pub struct Hook {
    /// The exported symbol, e.g. `cuMemAlloc_v2`.
    pub name: &'static str,
    /// The name `cuGetProcAddress` takes, e.g. `cuMemAlloc`.
    pub base: &'static str,
    /// The lowest `cudaVersion` for which the driver hands out this variant.
    pub min_version: c_int,
    /// Whether this is the per-thread-default-stream variant.
    pub ptsz: bool,
    /// Our exported function.
    pub hook: *const c_void,
    /// The real function's address (resolved on demand), null if missing.
    pub real: fn() -> *mut c_void,
}

// SAFETY: `hook` is the address of a function in this library: immutable, valid for the
// lifetime of the process, safe to share between threads.
unsafe impl Sync for Hook {}

/// `"name\0"` as a `&'static CStr`, built at compile time.
macro_rules! cstr_of {
    ($name:ident) => {{
        const S: &str = concat!(stringify!($name), "\0");
        match core::ffi::CStr::from_bytes_with_nul(S.as_bytes()) {
            Ok(c) => c,
            Err(_) => panic!("symbol name"),
        }
    }};
}

macro_rules! hook_table {
    (
        hooks {$(
            $lib:ident $name:ident [$base:literal, $ver:literal $(, $ptsz:ident)?]
                ($($arg:ident : $ty:ty),* $(,)?) -> $ret:ty => $imp:path;
        )*}
        uses {$(
            $ulib:ident $uname:ident ($($uty:ty),* $(,)?) -> $uret:ty;
        )*}
    ) => {
        /// Typed pointers to the real functions: one per hook, and the driver and NVML functions
        /// vgpu calls itself. Named like the symbol.
        pub mod real {
            use super::*;
            $(
                // SAFETY: the type is the C prototype of the symbol, as declared in the table.
                pub static $name: RealFn<unsafe extern "C" fn($($ty),*) -> $ret> =
                    unsafe { RealFn::new(Lib::$lib, cstr_of!($name)) };
            )*
            $(
                // SAFETY: the type is the C prototype of the symbol, as declared in the table.
                pub static $uname: RealFn<unsafe extern "C" fn($($uty),*) -> $uret> =
                    unsafe { RealFn::new(Lib::$ulib, cstr_of!($uname)) };
            )*
        }

        /// The exported entry points.
        pub mod exports {
            use super::*;
            $(
                #[unsafe(no_mangle)]
                pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
                    // SAFETY: forwarded verbatim from our caller, who holds the C API's contract.
                    crate::guard::ffi(stringify!($name), 999, || unsafe { $imp($($arg),*) })
                }
            )*
        }

        /// Every hook, in declaration order.
        pub static HOOKS: &[Hook] = &[$(
            Hook {
                name: stringify!($name),
                base: $base,
                min_version: $ver,
                ptsz: false $(|| { let _ = stringify!($ptsz); true })?,
                hook: exports::$name as *const c_void,
                real: || real::$name.addr(),
            },
        )*];

        /// Our hook for an exported symbol name, if we have one.
        pub fn lookup(name: &[u8]) -> Option<*const c_void> {
            $(
                if name == stringify!($name).as_bytes() {
                    return Some(exports::$name as *const c_void);
                }
            )*
            None
        }
    };
}

// Result codes are 999 (CUDA_ERROR_UNKNOWN / NVML_ERROR_UNKNOWN) when a hook body panics.
const _: () = assert!(CUDA_ERROR_UNKNOWN == 999 && NVML_ERROR_UNKNOWN == 999);

hook_table! {
hooks {
    // Initialisation and lookup.
    Cuda cuInit ["cuInit", 2000] (flags: c_uint) -> CUresult => init::cu_init;
    Cuda cuGetProcAddress ["cuGetProcAddress", 11030]
        (symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64) -> CUresult
        => procaddr::get_proc_address;
    Cuda cuGetProcAddress_v2 ["cuGetProcAddress", 12000]
        (symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64,
         status: *mut CUdriverProcAddressQueryResult) -> CUresult
        => procaddr::get_proc_address_v2;

    // Contexts: the driver's own reservation is measured and charged.
    Cuda cuDevicePrimaryCtxRetain ["cuDevicePrimaryCtxRetain", 7000]
        (pctx: *mut CUcontext, dev: CUdevice) -> CUresult => context::primary_retain;
    Cuda cuDevicePrimaryCtxRelease ["cuDevicePrimaryCtxRelease", 7000]
        (dev: CUdevice) -> CUresult => context::primary_release;
    Cuda cuDevicePrimaryCtxRelease_v2 ["cuDevicePrimaryCtxRelease", 11000]
        (dev: CUdevice) -> CUresult => context::primary_release_v2;
    Cuda cuDevicePrimaryCtxReset ["cuDevicePrimaryCtxReset", 7000]
        (dev: CUdevice) -> CUresult => context::primary_reset;
    Cuda cuDevicePrimaryCtxReset_v2 ["cuDevicePrimaryCtxReset", 11000]
        (dev: CUdevice) -> CUresult => context::primary_reset_v2;
    Cuda cuCtxCreate ["cuCtxCreate", 2000]
        (pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) -> CUresult => context::create_v1;
    Cuda cuCtxCreate_v2 ["cuCtxCreate", 3020]
        (pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) -> CUresult => context::create_v2;
    Cuda cuCtxCreate_v3 ["cuCtxCreate", 11040]
        (pctx: *mut CUcontext, params: *mut c_void, n: c_int, flags: c_uint, dev: CUdevice)
        -> CUresult => context::create_v3;
    Cuda cuCtxCreate_v4 ["cuCtxCreate", 12050]
        (pctx: *mut CUcontext, params: *mut c_void, flags: c_uint, dev: CUdevice) -> CUresult
        => context::create_v4;
    Cuda cuCtxDestroy ["cuCtxDestroy", 2000] (ctx: CUcontext) -> CUresult => context::destroy_v1;
    Cuda cuCtxDestroy_v2 ["cuCtxDestroy", 4000] (ctx: CUcontext) -> CUresult => context::destroy_v2;

    // Plain allocations.
    Cuda cuMemAlloc ["cuMemAlloc", 2000] (dptr: *mut CUdeviceptr_v1, bytesize: c_uint) -> CUresult
        => memory::alloc_v1;
    Cuda cuMemAlloc_v2 ["cuMemAlloc", 3020] (dptr: *mut CUdeviceptr, bytesize: usize) -> CUresult
        => memory::alloc_v2;
    Cuda cuMemAllocPitch ["cuMemAllocPitch", 2000]
        (dptr: *mut CUdeviceptr_v1, pitch: *mut c_uint, width: c_uint, height: c_uint, elem: c_uint)
        -> CUresult => memory::alloc_pitch_v1;
    Cuda cuMemAllocPitch_v2 ["cuMemAllocPitch", 3020]
        (dptr: *mut CUdeviceptr, pitch: *mut usize, width: usize, height: usize, elem: c_uint)
        -> CUresult => memory::alloc_pitch_v2;
    Cuda cuMemAllocManaged ["cuMemAllocManaged", 6000]
        (dptr: *mut CUdeviceptr, bytesize: usize, flags: c_uint) -> CUresult => memory::alloc_managed;
    Cuda cuMemFree ["cuMemFree", 2000] (dptr: CUdeviceptr_v1) -> CUresult => memory::free_v1;
    Cuda cuMemFree_v2 ["cuMemFree", 3020] (dptr: CUdeviceptr) -> CUresult => memory::free_v2;

    // Virtual memory management.
    Cuda cuMemCreate ["cuMemCreate", 10020]
        (handle: *mut CUmemGenericAllocationHandle, size: usize, prop: *const CUmemAllocationProp,
         flags: u64) -> CUresult => memory::mem_create;
    Cuda cuMemRelease ["cuMemRelease", 10020] (handle: CUmemGenericAllocationHandle) -> CUresult
        => memory::mem_release;

    // Arrays.
    Cuda cuArrayCreate ["cuArrayCreate", 2000]
        (arr: *mut CUarray, desc: *const CUDA_ARRAY_DESCRIPTOR_v1) -> CUresult => memory::array_create_v1;
    Cuda cuArrayCreate_v2 ["cuArrayCreate", 3020]
        (arr: *mut CUarray, desc: *const CUDA_ARRAY_DESCRIPTOR) -> CUresult => memory::array_create_v2;
    Cuda cuArray3DCreate ["cuArray3DCreate", 2000]
        (arr: *mut CUarray, desc: *const CUDA_ARRAY3D_DESCRIPTOR_v1) -> CUresult
        => memory::array3d_create_v1;
    Cuda cuArray3DCreate_v2 ["cuArray3DCreate", 3020]
        (arr: *mut CUarray, desc: *const CUDA_ARRAY3D_DESCRIPTOR) -> CUresult
        => memory::array3d_create_v2;
    Cuda cuArrayDestroy ["cuArrayDestroy", 2000] (arr: CUarray) -> CUresult => memory::array_destroy;
    Cuda cuMipmappedArrayCreate ["cuMipmappedArrayCreate", 5000]
        (arr: *mut CUmipmappedArray, desc: *const CUDA_ARRAY3D_DESCRIPTOR, levels: c_uint) -> CUresult
        => memory::mipmap_create;
    Cuda cuMipmappedArrayDestroy ["cuMipmappedArrayDestroy", 5000] (arr: CUmipmappedArray) -> CUresult
        => memory::mipmap_destroy;

    // Stream-ordered allocation and pools.
    Cuda cuMemAllocAsync ["cuMemAllocAsync", 11020]
        (dptr: *mut CUdeviceptr, bytesize: usize, stream: CUstream) -> CUresult => pools::alloc_async;
    Cuda cuMemAllocAsync_ptsz ["cuMemAllocAsync", 11020, ptsz]
        (dptr: *mut CUdeviceptr, bytesize: usize, stream: CUstream) -> CUresult => pools::alloc_async_ptsz;
    Cuda cuMemAllocFromPoolAsync ["cuMemAllocFromPoolAsync", 11020]
        (dptr: *mut CUdeviceptr, bytesize: usize, pool: CUmemoryPool, stream: CUstream) -> CUresult
        => pools::alloc_from_pool;
    Cuda cuMemAllocFromPoolAsync_ptsz ["cuMemAllocFromPoolAsync", 11020, ptsz]
        (dptr: *mut CUdeviceptr, bytesize: usize, pool: CUmemoryPool, stream: CUstream) -> CUresult
        => pools::alloc_from_pool_ptsz;
    Cuda cuMemPoolCreate ["cuMemPoolCreate", 11020]
        (pool: *mut CUmemoryPool, props: *const CUmemPoolProps) -> CUresult => pools::pool_create;
    Cuda cuMemPoolDestroy ["cuMemPoolDestroy", 11020] (pool: CUmemoryPool) -> CUresult
        => pools::pool_destroy;
    Cuda cuMemPoolTrimTo ["cuMemPoolTrimTo", 11020] (pool: CUmemoryPool, keep: usize) -> CUresult
        => pools::pool_trim;

    // Graph memory nodes.
    Cuda cuGraphAddMemAllocNode ["cuGraphAddMemAllocNode", 11040]
        (node: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, n: usize,
         params: *mut CUDA_MEM_ALLOC_NODE_PARAMS) -> CUresult => pools::graph_add_alloc_node;
    Cuda cuGraphLaunch ["cuGraphLaunch", 10000] (exec: CUgraphExec, stream: CUstream) -> CUresult
        => pools::graph_launch;
    Cuda cuGraphLaunch_ptsz ["cuGraphLaunch", 10000, ptsz] (exec: CUgraphExec, stream: CUstream)
        -> CUresult => pools::graph_launch_ptsz;
    Cuda cuDeviceGraphMemTrim ["cuDeviceGraphMemTrim", 11040] (dev: CUdevice) -> CUresult
        => pools::graph_mem_trim;

    // Stream capture: a compute controller's drain must not fall inside one.
    Cuda cuStreamBeginCapture ["cuStreamBeginCapture", 10000] (stream: CUstream) -> CUresult
        => capture::begin_capture;
    Cuda cuStreamBeginCapture_ptsz ["cuStreamBeginCapture", 10000, ptsz] (stream: CUstream)
        -> CUresult => capture::begin_capture_ptsz;
    Cuda cuStreamBeginCapture_v2 ["cuStreamBeginCapture", 10010]
        (stream: CUstream, mode: CUstreamCaptureMode) -> CUresult => capture::begin_capture_v2;
    Cuda cuStreamBeginCapture_v2_ptsz ["cuStreamBeginCapture", 10010, ptsz]
        (stream: CUstream, mode: CUstreamCaptureMode) -> CUresult
        => capture::begin_capture_v2_ptsz;
    Cuda cuStreamBeginCaptureToGraph ["cuStreamBeginCaptureToGraph", 12030]
        (stream: CUstream, graph: CUgraph, deps: *const CUgraphNode,
         edges: *const CUgraphEdgeData, n: usize, mode: CUstreamCaptureMode) -> CUresult
        => capture::begin_capture_to_graph;
    Cuda cuStreamBeginCaptureToGraph_ptsz ["cuStreamBeginCaptureToGraph", 12030, ptsz]
        (stream: CUstream, graph: CUgraph, deps: *const CUgraphNode,
         edges: *const CUgraphEdgeData, n: usize, mode: CUstreamCaptureMode) -> CUresult
        => capture::begin_capture_to_graph_ptsz;
    Cuda cuStreamEndCapture ["cuStreamEndCapture", 10000] (stream: CUstream, graph: *mut CUgraph)
        -> CUresult => capture::end_capture;
    Cuda cuStreamEndCapture_ptsz ["cuStreamEndCapture", 10000, ptsz]
        (stream: CUstream, graph: *mut CUgraph) -> CUresult => capture::end_capture_ptsz;

    // Kernel launches: the compute limiter's gate.
    Cuda cuLaunchKernel ["cuLaunchKernel", 4000]
        (f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
         shmem: c_uint, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void)
        -> CUresult => launch::launch_kernel;
    Cuda cuLaunchKernel_ptsz ["cuLaunchKernel", 7000, ptsz]
        (f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
         shmem: c_uint, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void)
        -> CUresult => launch::launch_kernel_ptsz;
    Cuda cuLaunchKernelEx ["cuLaunchKernelEx", 11060]
        (config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void,
         extra: *mut *mut c_void) -> CUresult => launch::launch_kernel_ex;
    Cuda cuLaunchKernelEx_ptsz ["cuLaunchKernelEx", 11060, ptsz]
        (config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void,
         extra: *mut *mut c_void) -> CUresult => launch::launch_kernel_ex_ptsz;
    Cuda cuLaunchCooperativeKernel ["cuLaunchCooperativeKernel", 9000]
        (f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
         shmem: c_uint, stream: CUstream, params: *mut *mut c_void) -> CUresult
        => launch::launch_cooperative;
    Cuda cuLaunchCooperativeKernel_ptsz ["cuLaunchCooperativeKernel", 9000, ptsz]
        (f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
         shmem: c_uint, stream: CUstream, params: *mut *mut c_void) -> CUresult
        => launch::launch_cooperative_ptsz;

    // Views of memory.
    Cuda cuMemGetInfo ["cuMemGetInfo", 2000] (free: *mut c_uint, total: *mut c_uint) -> CUresult
        => views::mem_get_info_v1;
    Cuda cuMemGetInfo_v2 ["cuMemGetInfo", 3020] (free: *mut usize, total: *mut usize) -> CUresult
        => views::mem_get_info_v2;
    Cuda cuDeviceTotalMem ["cuDeviceTotalMem", 2000] (bytes: *mut c_uint, dev: CUdevice) -> CUresult
        => views::device_total_mem_v1;
    Cuda cuDeviceTotalMem_v2 ["cuDeviceTotalMem", 3020] (bytes: *mut usize, dev: CUdevice) -> CUresult
        => views::device_total_mem_v2;
    Nvml nvmlDeviceGetMemoryInfo ["nvmlDeviceGetMemoryInfo", 0]
        (dev: nvmlDevice_t, mem: *mut nvmlMemory_t) -> nvmlReturn_t => nvml::get_memory_info;
    Nvml nvmlDeviceGetMemoryInfo_v2 ["nvmlDeviceGetMemoryInfo_v2", 0]
        (dev: nvmlDevice_t, mem: *mut nvmlMemory_v2_t) -> nvmlReturn_t => nvml::get_memory_info_v2;
}
uses {
    Cuda cuDeviceGetCount(*mut c_int) -> CUresult;
    Cuda cuDeviceGetUuid(*mut CUuuid, CUdevice) -> CUresult;
    Cuda cuDeviceGetUuid_v2(*mut CUuuid, CUdevice) -> CUresult;
    Cuda cuCtxGetDevice(*mut CUdevice) -> CUresult;
    Cuda cuCtxGetCurrent(*mut CUcontext) -> CUresult;
    Cuda cuCtxSetCurrent(CUcontext) -> CUresult;
    Cuda cuCtxSynchronize() -> CUresult;
    Cuda cuStreamIsCapturing(CUstream, *mut CUstreamCaptureStatus) -> CUresult;
    Cuda cuDeviceGetMemPool(*mut CUmemoryPool, CUdevice) -> CUresult;
    Cuda cuMemPoolGetAttribute(CUmemoryPool, CUmemPool_attribute, *mut c_void) -> CUresult;
    Cuda cuDeviceGetGraphMemAttribute(CUdevice, CUgraphMem_attribute, *mut c_void) -> CUresult;
    Cuda cuArrayGetMemoryRequirements(*mut CUDA_ARRAY_MEMORY_REQUIREMENTS, CUarray, CUdevice)
        -> CUresult;
    Cuda cuMipmappedArrayGetMemoryRequirements(
        *mut CUDA_ARRAY_MEMORY_REQUIREMENTS, CUmipmappedArray, CUdevice) -> CUresult;
    Cuda cuMemFreeAsync(CUdeviceptr, CUstream) -> CUresult;
    Nvml nvmlInit_v2() -> nvmlReturn_t;
    Nvml nvmlDeviceGetHandleByUUID(*const c_char, *mut nvmlDevice_t) -> nvmlReturn_t;
    Nvml nvmlDeviceGetUUID(nvmlDevice_t, *mut c_char, c_uint) -> nvmlReturn_t;
    Nvml nvmlDeviceGetIndex(nvmlDevice_t, *mut c_uint) -> nvmlReturn_t;
}
}

/// Decides what our exported `dlsym` returns: the address of our hook when `name` is a hooked
/// symbol that the real library also has, or 0 to let glibc's `dlsym` answer.
///
/// Runs inside `dlsym`: no allocation, no lock, no logging for names that are not ours.
///
/// # Safety
/// The arguments of a `dlsym` call: `handle` a handle or pseudo-handle, `name` null or a
/// NUL-terminated string.
pub unsafe fn dlsym_decide(handle: *mut c_void, name: *const c_char) -> usize {
    if handle == libc::RTLD_NEXT || name.is_null() {
        return 0;
    }
    // SAFETY: `name` is non-null and, per dlsym's contract, NUL-terminated.
    let Some(bytes) = (unsafe { cstr_bytes(name) }) else {
        return 0;
    };
    if !(bytes.starts_with(b"cu") || bytes.starts_with(b"nvml")) {
        return 0;
    }
    let Some(hook) = lookup(bytes) else {
        return 0;
    };
    if crate::runtime::mode() == crate::runtime::Mode::Disabled {
        return 0;
    }
    // Only hand out our hook where the real library has the symbol too, so a program probing
    // for an entry point its driver lacks still sees it missing.
    // SAFETY: `handle` came from the program's dlsym call; `name` is NUL-terminated.
    let real = unsafe { crate::backend::dl::real_dlsym(handle, name) };
    if real.is_null() { 0 } else { hook as usize }
}
