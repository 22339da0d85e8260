//! The symbol table: every driver and NVML function vgpu hooks or calls, declared once, as data.
//!
//! One line per exported hook gives its C prototype, the base name the driver's
//! `cuGetProcAddress` knows it by, the CUDA version from which the driver hands out this
//! variant, whether it is the per-thread-default-stream variant (`_ptsz`, or `_ptds` for a copy),
//! and the Rust function that implements it (a path relative to [`crate::hooks`]). The `uses`
//! list gives the functions vgpu calls on its own behalf. `with_symbols!` hands the whole table
//! to a generator macro: [`crate::real`] makes the typed pointers to the real functions from
//! it, and [`crate::hooks`] the exports and their lookup tables. Twins (`_v2`, `_ptsz`) name
//! one body; each export hands it a [`Call`] with its own real function and variant.

use crate::backend::real::RealFn;
use core::ffi::{c_int, c_void};
use vgpu_sys::cuda::CUstream;

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

/// The per-thread default stream's handle, for `_ptsz` calls on the NULL stream.
pub const PER_THREAD: CUstream = 2 as CUstream;

/// What a hook body is handed besides the C arguments: which export it runs for. Twins
/// (`_v2`, `_ptsz`) share one body; each export hands it its own real function and variant,
/// and the body forwards with [`crate::forward!`].
pub struct Call<F: 'static> {
    /// The real function of this export.
    pub real: &'static RealFn<F>,
    /// Whether this export is the per-thread-default-stream variant.
    pub ptsz: bool,
    /// Every hook (for `cuGetProcAddress`, which hands hooks out).
    pub hooks: &'static [Hook],
}

impl<F> Clone for Call<F> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<F> Copy for Call<F> {}

impl<F: Copy> Call<F> {
    /// The real function, `None` when the library or symbol is missing.
    #[inline]
    pub fn real(&self) -> Option<F> {
        self.real.get()
    }

    /// The stream a launch or capture really uses: under a `_ptsz` export the NULL stream is
    /// the per-thread default stream.
    #[inline]
    pub fn stream(&self, s: CUstream) -> CUstream {
        if self.ptsz && s.is_null() {
            PER_THREAD
        } else {
            s
        }
    }
}

/// Calls `$callback! { hooks { .. } uses { .. } }` with the table.
macro_rules! with_symbols {
    ($callback:ident) => {
        $callback! {
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
        (dev: CUdevice) -> CUresult => context::primary_release;
    Cuda cuDevicePrimaryCtxReset ["cuDevicePrimaryCtxReset", 7000]
        (dev: CUdevice) -> CUresult => context::primary_reset;
    Cuda cuDevicePrimaryCtxReset_v2 ["cuDevicePrimaryCtxReset", 11000]
        (dev: CUdevice) -> CUresult => context::primary_reset;
    Cuda cuCtxCreate ["cuCtxCreate", 2000]
        (pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) -> CUresult => context::create;
    Cuda cuCtxCreate_v2 ["cuCtxCreate", 3020]
        (pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) -> CUresult => context::create;
    Cuda cuCtxCreate_v3 ["cuCtxCreate", 11040]
        (pctx: *mut CUcontext, params: *mut c_void, n: c_int, flags: c_uint, dev: CUdevice)
        -> CUresult => context::create_v3;
    Cuda cuCtxCreate_v4 ["cuCtxCreate", 12050]
        (pctx: *mut CUcontext, params: *mut c_void, flags: c_uint, dev: CUdevice) -> CUresult
        => context::create_v4;
    Cuda cuCtxDestroy ["cuCtxDestroy", 2000] (ctx: CUcontext) -> CUresult => context::destroy;
    Cuda cuCtxDestroy_v2 ["cuCtxDestroy", 4000] (ctx: CUcontext) -> CUresult => context::destroy;

    // Plain allocations.
    Cuda cuMemAlloc ["cuMemAlloc", 2000] (dptr: *mut CUdeviceptr_v1, bytesize: c_uint) -> CUresult
        => memory::alloc;
    Cuda cuMemAlloc_v2 ["cuMemAlloc", 3020] (dptr: *mut CUdeviceptr, bytesize: usize) -> CUresult
        => memory::alloc;
    Cuda cuMemAllocPitch ["cuMemAllocPitch", 2000]
        (dptr: *mut CUdeviceptr_v1, pitch: *mut c_uint, width: c_uint, height: c_uint, elem: c_uint)
        -> CUresult => memory::alloc_pitch;
    Cuda cuMemAllocPitch_v2 ["cuMemAllocPitch", 3020]
        (dptr: *mut CUdeviceptr, pitch: *mut usize, width: usize, height: usize, elem: c_uint)
        -> CUresult => memory::alloc_pitch;
    Cuda cuMemAllocManaged ["cuMemAllocManaged", 6000]
        (dptr: *mut CUdeviceptr, bytesize: usize, flags: c_uint) -> CUresult => memory::alloc_managed;
    Cuda cuMemFree ["cuMemFree", 2000] (dptr: CUdeviceptr_v1) -> CUresult => memory::free;
    Cuda cuMemFree_v2 ["cuMemFree", 3020] (dptr: CUdeviceptr) -> CUresult => memory::free;

    // Virtual memory management.
    Cuda cuMemCreate ["cuMemCreate", 10020]
        (handle: *mut CUmemGenericAllocationHandle, size: usize, prop: *const CUmemAllocationProp,
         flags: u64) -> CUresult => memory::mem_create;
    Cuda cuMemRelease ["cuMemRelease", 10020] (handle: CUmemGenericAllocationHandle) -> CUresult
        => memory::mem_release;
    Cuda cuMemRetainAllocationHandle ["cuMemRetainAllocationHandle", 11000]
        (handle: *mut CUmemGenericAllocationHandle, addr: *mut c_void) -> CUresult
        => memory::mem_retain;
    Cuda cuMemExportToShareableHandle ["cuMemExportToShareableHandle", 10020]
        (shareable: *mut c_void, handle: CUmemGenericAllocationHandle, kind: c_uint, flags: u64)
        -> CUresult => memory::mem_export;
    // A handle's memory lives while it is mapped, released or not.
    Cuda cuMemMap ["cuMemMap", 10020]
        (ptr: CUdeviceptr, size: usize, offset: usize, handle: CUmemGenericAllocationHandle,
         flags: u64) -> CUresult => memory::mem_map;
    Cuda cuMemUnmap ["cuMemUnmap", 10020] (ptr: CUdeviceptr, size: usize) -> CUresult
        => memory::mem_unmap;

    // Arrays.
    Cuda cuArrayCreate ["cuArrayCreate", 2000]
        (arr: *mut CUarray, desc: *const CUDA_ARRAY_DESCRIPTOR_v1) -> CUresult => memory::array_create;
    Cuda cuArrayCreate_v2 ["cuArrayCreate", 3020]
        (arr: *mut CUarray, desc: *const CUDA_ARRAY_DESCRIPTOR) -> CUresult => memory::array_create;
    Cuda cuArray3DCreate ["cuArray3DCreate", 2000]
        (arr: *mut CUarray, desc: *const CUDA_ARRAY3D_DESCRIPTOR_v1) -> CUresult
        => memory::array_create;
    Cuda cuArray3DCreate_v2 ["cuArray3DCreate", 3020]
        (arr: *mut CUarray, desc: *const CUDA_ARRAY3D_DESCRIPTOR) -> CUresult
        => memory::array_create;
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
        (dptr: *mut CUdeviceptr, bytesize: usize, stream: CUstream) -> CUresult => pools::alloc_async;
    Cuda cuMemAllocFromPoolAsync ["cuMemAllocFromPoolAsync", 11020]
        (dptr: *mut CUdeviceptr, bytesize: usize, pool: CUmemoryPool, stream: CUstream) -> CUresult
        => pools::alloc_from_pool;
    Cuda cuMemAllocFromPoolAsync_ptsz ["cuMemAllocFromPoolAsync", 11020, ptsz]
        (dptr: *mut CUdeviceptr, bytesize: usize, pool: CUmemoryPool, stream: CUstream) -> CUresult
        => pools::alloc_from_pool;
    Cuda cuMemFreeAsync ["cuMemFreeAsync", 11020]
        (dptr: CUdeviceptr, stream: CUstream) -> CUresult => pools::free_async;
    Cuda cuMemFreeAsync_ptsz ["cuMemFreeAsync", 11020, ptsz]
        (dptr: CUdeviceptr, stream: CUstream) -> CUresult => pools::free_async;
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
    // What an executable graph's memory nodes allocate, learnt at instantiation.
    Cuda cuGraphInstantiate ["cuGraphInstantiate", 10000]
        (exec: *mut CUgraphExec, graph: CUgraph, err_node: *mut CUgraphNode, log: *mut c_char,
         len: usize) -> CUresult => pools::graph_instantiate;
    Cuda cuGraphInstantiate_v2 ["cuGraphInstantiate", 11000]
        (exec: *mut CUgraphExec, graph: CUgraph, err_node: *mut CUgraphNode, log: *mut c_char,
         len: usize) -> CUresult => pools::graph_instantiate;
    Cuda cuGraphInstantiateWithFlags ["cuGraphInstantiateWithFlags", 11040]
        (exec: *mut CUgraphExec, graph: CUgraph, flags: u64) -> CUresult
        => pools::graph_instantiate_with_flags;
    Cuda cuGraphInstantiateWithParams ["cuGraphInstantiateWithParams", 12000]
        (exec: *mut CUgraphExec, graph: CUgraph, params: *mut c_void) -> CUresult
        => pools::graph_instantiate_with_params;
    Cuda cuGraphExecDestroy ["cuGraphExecDestroy", 10000] (exec: CUgraphExec) -> CUresult
        => pools::graph_exec_destroy;
    Cuda cuGraphUpload ["cuGraphUpload", 11010] (exec: CUgraphExec, stream: CUstream) -> CUresult
        => pools::graph_upload;
    Cuda cuGraphUpload_ptsz ["cuGraphUpload", 11010, ptsz] (exec: CUgraphExec, stream: CUstream)
        -> CUresult => pools::graph_upload;
    Cuda cuGraphLaunch ["cuGraphLaunch", 10000] (exec: CUgraphExec, stream: CUstream) -> CUresult
        => pools::graph_launch;
    Cuda cuGraphLaunch_ptsz ["cuGraphLaunch", 10000, ptsz] (exec: CUgraphExec, stream: CUstream)
        -> CUresult => pools::graph_launch;
    Cuda cuDeviceGraphMemTrim ["cuDeviceGraphMemTrim", 11040] (dev: CUdevice) -> CUresult
        => pools::graph_mem_trim;

    // Stream capture: a compute controller's drain must not fall inside one.
    Cuda cuStreamBeginCapture ["cuStreamBeginCapture", 10000] (stream: CUstream) -> CUresult
        => capture::begin_capture;
    Cuda cuStreamBeginCapture_ptsz ["cuStreamBeginCapture", 10000, ptsz] (stream: CUstream)
        -> CUresult => capture::begin_capture;
    Cuda cuStreamBeginCapture_v2 ["cuStreamBeginCapture", 10010]
        (stream: CUstream, mode: CUstreamCaptureMode) -> CUresult => capture::begin_capture_v2;
    Cuda cuStreamBeginCapture_v2_ptsz ["cuStreamBeginCapture", 10010, ptsz]
        (stream: CUstream, mode: CUstreamCaptureMode) -> CUresult
        => capture::begin_capture_v2;
    Cuda cuStreamBeginCaptureToGraph ["cuStreamBeginCaptureToGraph", 12030]
        (stream: CUstream, graph: CUgraph, deps: *const CUgraphNode,
         edges: *const CUgraphEdgeData, n: usize, mode: CUstreamCaptureMode) -> CUresult
        => capture::begin_capture_to_graph;
    Cuda cuStreamBeginCaptureToGraph_ptsz ["cuStreamBeginCaptureToGraph", 12030, ptsz]
        (stream: CUstream, graph: CUgraph, deps: *const CUgraphNode,
         edges: *const CUgraphEdgeData, n: usize, mode: CUstreamCaptureMode) -> CUresult
        => capture::begin_capture_to_graph;
    Cuda cuStreamEndCapture ["cuStreamEndCapture", 10000] (stream: CUstream, graph: *mut CUgraph)
        -> CUresult => capture::end_capture;
    Cuda cuStreamEndCapture_ptsz ["cuStreamEndCapture", 10000, ptsz]
        (stream: CUstream, graph: *mut CUgraph) -> CUresult => capture::end_capture;

    // Kernel launches: the compute limiter's gate.
    Cuda cuLaunchKernel ["cuLaunchKernel", 4000]
        (f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
         shmem: c_uint, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void)
        -> CUresult => launch::launch_kernel;
    Cuda cuLaunchKernel_ptsz ["cuLaunchKernel", 7000, ptsz]
        (f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
         shmem: c_uint, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void)
        -> CUresult => launch::launch_kernel;
    Cuda cuLaunchKernelEx ["cuLaunchKernelEx", 11060]
        (config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void,
         extra: *mut *mut c_void) -> CUresult => launch::launch_kernel_ex;
    Cuda cuLaunchKernelEx_ptsz ["cuLaunchKernelEx", 11060, ptsz]
        (config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void,
         extra: *mut *mut c_void) -> CUresult => launch::launch_kernel_ex;
    Cuda cuLaunchCooperativeKernel ["cuLaunchCooperativeKernel", 9000]
        (f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
         shmem: c_uint, stream: CUstream, params: *mut *mut c_void) -> CUresult
        => launch::launch_cooperative;
    Cuda cuLaunchCooperativeKernel_ptsz ["cuLaunchCooperativeKernel", 9000, ptsz]
        (f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
         shmem: c_uint, stream: CUstream, params: *mut *mut c_void) -> CUresult
        => launch::launch_cooperative;

    // Synchronisations and queries: the compute controller learns the queue is empty.
    Cuda cuCtxSynchronize ["cuCtxSynchronize", 2000] () -> CUresult => sync::ctx_synchronize;
    Cuda cuStreamSynchronize ["cuStreamSynchronize", 2000] (stream: CUstream) -> CUresult
        => sync::stream_synchronize;
    Cuda cuStreamSynchronize_ptsz ["cuStreamSynchronize", 7000, ptsz] (stream: CUstream)
        -> CUresult => sync::stream_synchronize;
    Cuda cuStreamQuery ["cuStreamQuery", 2000] (stream: CUstream) -> CUresult
        => sync::stream_query;
    Cuda cuStreamQuery_ptsz ["cuStreamQuery", 7000, ptsz] (stream: CUstream) -> CUresult
        => sync::stream_query;
    Cuda cuEventSynchronize ["cuEventSynchronize", 2000] (event: CUevent) -> CUresult
        => sync::event_synchronize;
    Cuda cuEventQuery ["cuEventQuery", 2000] (event: CUevent) -> CUresult => sync::event_query;
    // Copies to and from host memory: the host waits for the stream's earlier work (a
    // `cuMemcpy` between unified addresses where an end is host memory: `sync::memcpy`).
    Cuda cuMemcpy ["cuMemcpy", 4000] (dst: CUdeviceptr, src: CUdeviceptr, n: usize) -> CUresult
        => sync::memcpy;
    Cuda cuMemcpy_ptds ["cuMemcpy", 7000, ptsz] (dst: CUdeviceptr, src: CUdeviceptr, n: usize)
        -> CUresult => sync::memcpy;
    Cuda cuMemcpyDtoH_v2 ["cuMemcpyDtoH", 3020] (dst: *mut c_void, src: CUdeviceptr, n: usize)
        -> CUresult => sync::memcpy_dtoh;
    Cuda cuMemcpyDtoH_v2_ptds ["cuMemcpyDtoH", 7000, ptsz]
        (dst: *mut c_void, src: CUdeviceptr, n: usize) -> CUresult => sync::memcpy_dtoh;
    Cuda cuMemcpyHtoD_v2 ["cuMemcpyHtoD", 3020] (dst: CUdeviceptr, src: *const c_void, n: usize)
        -> CUresult => sync::memcpy_htod;
    Cuda cuMemcpyHtoD_v2_ptds ["cuMemcpyHtoD", 7000, ptsz]
        (dst: CUdeviceptr, src: *const c_void, n: usize) -> CUresult => sync::memcpy_htod;
    // 2D and 3D copies whose descriptor puts an end in host memory wait the same way.
    Cuda cuMemcpy2D_v2 ["cuMemcpy2D", 3020] (p: *const CUDA_MEMCPY2D) -> CUresult
        => sync::memcpy_2d;
    Cuda cuMemcpy2D_v2_ptds ["cuMemcpy2D", 7000, ptsz] (p: *const CUDA_MEMCPY2D) -> CUresult
        => sync::memcpy_2d;
    Cuda cuMemcpy2DUnaligned_v2 ["cuMemcpy2DUnaligned", 3020] (p: *const CUDA_MEMCPY2D)
        -> CUresult => sync::memcpy_2d;
    Cuda cuMemcpy2DUnaligned_v2_ptds ["cuMemcpy2DUnaligned", 7000, ptsz]
        (p: *const CUDA_MEMCPY2D) -> CUresult => sync::memcpy_2d;
    Cuda cuMemcpy3D_v2 ["cuMemcpy3D", 3020] (p: *const CUDA_MEMCPY3D) -> CUresult
        => sync::memcpy_3d;
    Cuda cuMemcpy3D_v2_ptds ["cuMemcpy3D", 7000, ptsz] (p: *const CUDA_MEMCPY3D) -> CUresult
        => sync::memcpy_3d;
    Cuda cuMemcpy3DPeer ["cuMemcpy3DPeer", 4000] (p: *const CUDA_MEMCPY3D_PEER) -> CUresult
        => sync::memcpy_3d_peer;
    Cuda cuMemcpy3DPeer_ptds ["cuMemcpy3DPeer", 7000, ptsz] (p: *const CUDA_MEMCPY3D_PEER)
        -> CUresult => sync::memcpy_3d_peer;
    // Copies between an array and host memory always have a host end.
    Cuda cuMemcpyAtoH_v2 ["cuMemcpyAtoH", 3020]
        (dst: *mut c_void, src: CUarray, offset: usize, n: usize) -> CUresult
        => sync::memcpy_atoh;
    Cuda cuMemcpyAtoH_v2_ptds ["cuMemcpyAtoH", 7000, ptsz]
        (dst: *mut c_void, src: CUarray, offset: usize, n: usize) -> CUresult
        => sync::memcpy_atoh;
    Cuda cuMemcpyHtoA_v2 ["cuMemcpyHtoA", 3020]
        (dst: CUarray, offset: usize, src: *const c_void, n: usize) -> CUresult
        => sync::memcpy_htoa;
    Cuda cuMemcpyHtoA_v2_ptds ["cuMemcpyHtoA", 7000, ptsz]
        (dst: CUarray, offset: usize, src: *const c_void, n: usize) -> CUresult
        => sync::memcpy_htoa;

    // Views of memory.
    Cuda cuMemGetInfo ["cuMemGetInfo", 2000] (free: *mut c_uint, total: *mut c_uint) -> CUresult
        => views::mem_get_info;
    Cuda cuMemGetInfo_v2 ["cuMemGetInfo", 3020] (free: *mut usize, total: *mut usize) -> CUresult
        => views::mem_get_info;
    Cuda cuDeviceTotalMem ["cuDeviceTotalMem", 2000] (bytes: *mut c_uint, dev: CUdevice) -> CUresult
        => views::device_total_mem;
    Cuda cuDeviceTotalMem_v2 ["cuDeviceTotalMem", 3020] (bytes: *mut usize, dev: CUdevice) -> CUresult
        => views::device_total_mem;
    Nvml nvmlDeviceGetMemoryInfo ["nvmlDeviceGetMemoryInfo", 0]
        (dev: nvmlDevice_t, mem: *mut nvmlMemory_t) -> nvmlReturn_t => nvml::get_memory_info;
    Nvml nvmlDeviceGetMemoryInfo_v2 ["nvmlDeviceGetMemoryInfo_v2", 0]
        (dev: nvmlDevice_t, mem: *mut nvmlMemory_v2_t) -> nvmlReturn_t => nvml::get_memory_info_v2;

    // NVML's reference count: the program's own, apart from vgpu's use.
    Nvml nvmlInit ["nvmlInit", 0] () -> nvmlReturn_t => nvml::init;
    Nvml nvmlInit_v2 ["nvmlInit_v2", 0] () -> nvmlReturn_t => nvml::init;
    Nvml nvmlInitWithFlags ["nvmlInitWithFlags", 0] (flags: c_uint) -> nvmlReturn_t
        => nvml::init_with_flags;
    Nvml nvmlShutdown ["nvmlShutdown", 0] () -> nvmlReturn_t => nvml::shutdown;
}
uses {
    Cuda cuDeviceGetCount(*mut c_int) -> CUresult;
    Cuda cuDeviceGetUuid(*mut CUuuid, CUdevice) -> CUresult;
    Cuda cuDeviceGetUuid_v2(*mut CUuuid, CUdevice) -> CUresult;
    Cuda cuCtxGetDevice(*mut CUdevice) -> CUresult;
    Cuda cuCtxGetCurrent(*mut CUcontext) -> CUresult;
    Cuda cuCtxSetCurrent(CUcontext) -> CUresult;
    Cuda cuStreamIsCapturing(CUstream, *mut CUstreamCaptureStatus) -> CUresult;
    Cuda cuStreamGetDevice(CUstream, *mut CUdevice) -> CUresult;
    Cuda cuThreadExchangeStreamCaptureMode(*mut CUstreamCaptureMode) -> CUresult;
    Cuda cuEventCreate(*mut CUevent, c_uint) -> CUresult;
    Cuda cuEventRecord(CUevent, CUstream) -> CUresult;
    Cuda cuEventElapsedTime(*mut f32, CUevent, CUevent) -> CUresult;
    Cuda cuEventElapsedTime_v2(*mut f32, CUevent, CUevent) -> CUresult;
    Cuda cuMemHostAlloc(*mut *mut c_void, usize, c_uint) -> CUresult;
    Cuda cuMemHostGetDevicePointer_v2(*mut CUdeviceptr, *mut c_void, c_uint) -> CUresult;
    Cuda cuStreamWaitValue32_v2(CUstream, CUdeviceptr, u32, c_uint) -> CUresult;
    Cuda cuModuleLoadData(*mut CUmodule, *const c_void) -> CUresult;
    Cuda cuModuleGetFunction(*mut CUfunction, CUmodule, *const c_char) -> CUresult;
    Cuda cuStreamCreate(*mut CUstream, c_uint) -> CUresult;
    Cuda cuDeviceGetMemPool(*mut CUmemoryPool, CUdevice) -> CUresult;
    Cuda cuMemPoolGetAttribute(CUmemoryPool, CUmemPool_attribute, *mut c_void) -> CUresult;
    Cuda cuDeviceGetGraphMemAttribute(CUdevice, CUgraphMem_attribute, *mut c_void) -> CUresult;
    Cuda cuGraphGetNodes(CUgraph, *mut CUgraphNode, *mut usize) -> CUresult;
    Cuda cuPointerGetAttribute(*mut c_void, CUpointer_attribute, CUdeviceptr) -> CUresult;
    Cuda cuMemGetAddressRange_v2(*mut CUdeviceptr, *mut usize, CUdeviceptr) -> CUresult;
    Cuda cuMemGetAllocationGranularity(*mut usize, *const CUmemAllocationProp, c_uint) -> CUresult;
    Cuda cuGraphNodeGetType(CUgraphNode, *mut CUgraphNodeType) -> CUresult;
    Cuda cuGraphChildGraphNodeGetGraph(CUgraphNode, *mut CUgraph) -> CUresult;
    Cuda cuGraphMemAllocNodeGetParams(CUgraphNode, *mut CUDA_MEM_ALLOC_NODE_PARAMS) -> CUresult;
    Cuda cuArrayGetMemoryRequirements(*mut CUDA_ARRAY_MEMORY_REQUIREMENTS, CUarray, CUdevice)
        -> CUresult;
    Cuda cuMipmappedArrayGetMemoryRequirements(
        *mut CUDA_ARRAY_MEMORY_REQUIREMENTS, CUmipmappedArray, CUdevice) -> CUresult;
    Nvml nvmlDeviceGetHandleByUUID(*const c_char, *mut nvmlDevice_t) -> nvmlReturn_t;
    Nvml nvmlDeviceGetUUID(nvmlDevice_t, *mut c_char, c_uint) -> nvmlReturn_t;
    Nvml nvmlDeviceGetIndex(nvmlDevice_t, *mut c_uint) -> nvmlReturn_t;
    Nvml nvmlDeviceGetCount_v2(*mut c_uint) -> nvmlReturn_t;
}
        }
    };
}
