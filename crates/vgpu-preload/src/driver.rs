//! The driver facade: every driver and NVML call vgpu makes on its own behalf (not on the
//! program's), behind one small trait, so that the accounting above it can be unit-tested
//! in-process with a fake driver ([`Driver`]), and the state layer never reaches into the hook
//! files for a query.
//!
//! [`Real`] implements it over the real functions (`crate::real`, resolved lazily
//! through the backend). Hook bodies forward the program's own calls themselves.
use core::ffi::{c_char, c_uint};
use std::ffi::CString;
use std::sync::atomic::{AtomicU32, Ordering};
use vgpu_sys::cuda::*;
use vgpu_sys::nvml::*;

/// What vgpu asks the driver (and NVML) for itself.
pub trait Driver {
    /// How many devices this process sees (`cuDeviceGetCount`).
    fn device_count(&self) -> Option<i32>;
    /// The UUID of CUDA device `ordinal`, in NVML's string form.
    fn device_uuid(&self, ordinal: CUdevice) -> Option<String>;
    /// The device of the calling thread's current context.
    fn current_device(&self) -> Option<CUdevice>;
    /// The device of `stream`'s context (`cuStreamGetDevice`, CUDA 12.8): `None` when the
    /// driver has no such call or refuses (an unknown stream). Meant for a created stream: the
    /// NULL, legacy and per-thread handles name the current context's streams.
    fn stream_device(&self, stream: CUstream) -> Option<CUdevice> {
        let _ = stream;
        None
    }
    /// The calling thread's current context (`None`: none, or the call failed).
    fn current_context(&self) -> Option<CUcontext>;
    /// Makes `ctx` current on the calling thread.
    fn set_current(&self, ctx: CUcontext) -> CUresult;
    /// Waits for the current context's work (`cuCtxSynchronize`).
    fn synchronize(&self) -> CUresult;
    /// Whether `stream` is being captured into a graph.
    fn capturing(&self, stream: CUstream) -> bool;
    /// Sets the calling thread's stream capture interaction mode
    /// (`cuThreadExchangeStreamCaptureMode`) and returns the one it had (`None`: the driver
    /// refused, or has no such call).
    fn exchange_capture_mode(&self, mode: CUstreamCaptureMode) -> Option<CUstreamCaptureMode> {
        let _ = mode;
        None
    }
    /// The current memory pool of a device (what `cuMemAllocAsync` allocates from).
    fn device_mem_pool(&self, dev: CUdevice) -> Option<CUmemoryPool>;
    /// Memory a pool reserves from the device now.
    fn pool_reserved(&self, pool: CUmemoryPool) -> Option<u64>;
    /// Memory allocated from a pool now.
    fn pool_used(&self, pool: CUmemoryPool) -> Option<u64>;
    /// Memory the graph pool of a device reserves now.
    fn graph_reserved(&self, dev: CUdevice) -> Option<u64>;
    /// Memory allocated from the graph pool of a device now.
    fn graph_used(&self, _dev: CUdevice) -> Option<u64> {
        None
    }
    /// The pool a stream-ordered allocation came from, and its size (`None`: not one, or the
    /// driver cannot say).
    fn pool_allocation(&self, _ptr: CUdeviceptr) -> Option<(CUmemoryPool, u64)> {
        None
    }
    /// The memory allocation nodes of `graph` and its child graphs, as (device ordinal,
    /// bytes); `None` when the driver cannot enumerate them, or the graph has conditional
    /// nodes (which may hold memory nodes of their own).
    fn graph_allocs(&self, _graph: CUgraph) -> Option<Vec<(CUdevice, u64)>> {
        None
    }
    /// The device-wide used memory of the GPU `uuid`, as NVML reports it (all processes).
    fn nvml_used(&self, uuid: &str) -> Option<u64>;
    /// NVML held for vgpu's use while the result lives (see [`NvmlHold`]): around a group of
    /// [`nvml_used`](Driver::nvml_used) readings. Nothing by default.
    fn hold_nvml(&self) -> NvmlHold {
        NvmlHold::none()
    }
    /// A new timing event in the calling thread's current context (`cuEventCreate`), for the
    /// compute pace's marks.
    fn event_create(&self) -> Option<CUevent>;
    /// Records `event` on `stream` (`cuEventRecord`).
    fn event_record(&self, event: CUevent, stream: CUstream) -> CUresult;
    /// Whether the GPU has reached `event` (`cuEventQuery`): `None` if the query failed.
    fn event_done(&self, event: CUevent) -> Option<bool>;
    /// Whether `stream` has nothing queued (`cuStreamQuery` succeeds).
    fn stream_idle(&self, stream: CUstream) -> bool;
    /// The GPU time from `from` to `to`, two completed events, in nanoseconds
    /// (`cuEventElapsedTime`, about half a microsecond's resolution).
    fn event_elapsed(&self, from: CUevent, to: CUevent) -> Option<u64>;
    /// A word of pinned host memory the GPU reads, for holding a stream ([`Driver::hold`]),
    /// allocated in the current context for the process's life (`None`: the driver cannot).
    fn host_word(&self) -> Option<HostWord> {
        None
    }
    /// Makes `stream`'s later work wait until `word` holds `value` or a later one
    /// (`cuStreamWaitValue32_v2`, `CU_STREAM_WAIT_VALUE_GEQ`: the GPU compares the signed
    /// difference, so it survives wrap-around); false if the driver refused.
    fn hold(&self, stream: CUstream, word: HostWord, value: u32) -> bool {
        let _ = (stream, word, value);
        false
    }
    /// Writes `value` into `word` (what a stream held on it waits for).
    fn set_word(&self, word: HostWord, value: u32) {
        let _ = (word, value);
    }
    /// What the restart probe runs ([`ProbeKit`]), made in the current context: an empty
    /// kernel loaded from PTX and a stream of vgpu's own (`None`: the driver cannot).
    fn probe_kit(&self) -> Option<ProbeKit> {
        None
    }
    /// Launches the probe's empty kernel (one thread) on the probe's stream, past the hooks.
    fn probe_launch(&self, kit: ProbeKit) -> bool {
        let _ = kit;
        false
    }
}

/// The restart probe's empty kernel and its stream ([`Driver::probe_kit`]), as addresses (the
/// driver's handles; never unloaded or destroyed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeKit {
    function: usize,
    /// The probe's stream (non-blocking: the legacy default stream does not wait for it).
    pub stream: usize,
}

/// The probe's kernel: PTX for any GPU since `sm_50`, compiled by the driver at load.
const PROBE_PTX: &[u8] = b".version 6.0\n.target sm_50\n.address_size 64\n\
.visible .entry vgpu_probe()\n{\n\tret;\n}\n\0";

/// A word of pinned, device-mapped host memory ([`Driver::host_word`]): its host address and
/// the address the GPU reads it at. Never freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostWord {
    host: usize,
    device: CUdeviceptr,
}

impl HostWord {
    /// The word after this one in the same allocation (a [`Driver::host_word`] spans 64 bytes:
    /// the brackets' word and the queue hold's, `marks.rs`).
    pub fn next(self) -> HostWord {
        HostWord {
            host: self.host + core::mem::size_of::<u32>(),
            device: self.device + core::mem::size_of::<u32>() as CUdeviceptr,
        }
    }
}

/// The calling thread in `RELAXED` stream capture mode while this lives, then back in the mode
/// it had ([`relaxed`]).
pub struct Relaxed(Option<CUstreamCaptureMode>);

/// Puts the calling thread in `RELAXED` capture mode until the result drops, around vgpu's own
/// event and stream queries in a program's thread. In the default `GLOBAL` mode a query
/// (`cuEventQuery`, `cuStreamQuery`) is prohibited while another thread captures a stream in
/// `GLOBAL` mode (PyTorch's default), or while the calling thread captures one itself, and the
/// prohibited call invalidates that capture (pytorch#104487: a watchdog's `cudaEventQuery`);
/// in `RELAXED` mode it never is. Two driver calls, on cold paths only.
#[must_use = "the thread goes back to its mode when the result drops"]
pub fn relaxed() -> Relaxed {
    Relaxed(REAL.exchange_capture_mode(CU_STREAM_CAPTURE_MODE_RELAXED))
}

impl Drop for Relaxed {
    fn drop(&mut self) {
        if let Some(m) = self.0 {
            REAL.exchange_capture_mode(m);
        }
    }
}

/// The real driver and NVML.
pub struct Real;

/// The real driver, for the runtime and the hooks.
pub static REAL: Real = Real;

const MISSING: nvmlReturn_t = NVML_ERROR_FUNCTION_NOT_FOUND;

/// The UUID buffer's length as NVML takes it (a small constant: the cast cannot truncate).
#[allow(clippy::cast_possible_truncation)]
const UUID_BUFFER: c_uint = NVML_DEVICE_UUID_V2_BUFFER_SIZE as c_uint;

/// A C character as a byte: `c_char` is `i8` or `u8` by target, and the bits are kept.
#[allow(clippy::cast_sign_loss, clippy::unnecessary_cast)]
fn byte(c: c_char) -> u8 {
    c as u8
}

/// vgpu's own sessions of NVML open now (see [`NvmlHold`]).
static SESSIONS: AtomicU32 = AtomicU32::new(0);

/// Whether vgpu holds NVML for its own use at this moment.
pub fn nvml_in_use_by_vgpu() -> bool {
    SESSIONS.load(Ordering::Acquire) != 0
}

/// vgpu's own use of NVML, for as long as it lives: `nvmlInit_v2` when taken, `nvmlShutdown`
/// when dropped. NVML counts its inits, so vgpu never leaves it initialised for the program:
/// a call the program makes before its own `nvmlInit` gets `NVML_ERROR_UNINITIALIZED`, as
/// without vgpu. Taking one while the program (or another hold) has NVML open is a counter
/// increment in NVML; otherwise it initialises NVML, so callers hold one across a group of
/// queries (a context's four readings, the device table).
pub struct NvmlHold(bool);

impl NvmlHold {
    /// Initialises NVML for vgpu's use.
    pub fn take() -> NvmlHold {
        let ok = crate::fwd!(MISSING, nvmlInit_v2()) == NVML_SUCCESS;
        if ok {
            SESSIONS.fetch_add(1, Ordering::AcqRel);
        }
        NvmlHold(ok)
    }

    /// A hold that holds nothing (a driver without NVML, the tests' fake).
    pub const fn none() -> NvmlHold {
        NvmlHold(false)
    }

    /// Whether NVML is usable while this lives.
    pub fn ok(&self) -> bool {
        self.0
    }
}

impl Drop for NvmlHold {
    fn drop(&mut self) {
        if self.0 {
            let _ = crate::fwd!(MISSING, nvmlShutdown());
            SESSIONS.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

// Handles (contexts, streams, pools, NVML devices) are opaque driver values passed on to the
// driver, never dereferenced here.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
impl Real {
    /// The minimum granularity of allocations with the properties `prop`
    /// (`cuMemGetAllocationGranularity`).
    pub fn granularity(&self, prop: *const CUmemAllocationProp) -> Option<u64> {
        let mut g: usize = 0;
        let r = crate::fwd!(cuMemGetAllocationGranularity(
            &mut g,
            prop,
            CU_MEM_ALLOC_GRANULARITY_MINIMUM
        ));
        (r == CUDA_SUCCESS && g > 0).then_some(g as u64)
    }

    /// Whether `ptr` (a unified address) is host memory: pinned (`CU_MEMORYTYPE_HOST`, not
    /// managed) or not the driver's at all (pageable memory: `CUDA_ERROR_INVALID_VALUE`).
    /// Device memory, managed memory (which may answer either type, page by page) and any
    /// other answer are not.
    pub fn host_memory(&self, ptr: CUdeviceptr) -> bool {
        let mut kind: CUmemorytype = 0;
        let r = crate::fwd!(cuPointerGetAttribute(
            (&mut kind as *mut CUmemorytype).cast(),
            CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            ptr
        ));
        match r {
            CUDA_SUCCESS if kind == CU_MEMORYTYPE_HOST => {
                let mut managed: core::ffi::c_uint = 1;
                let r = crate::fwd!(cuPointerGetAttribute(
                    (&mut managed as *mut core::ffi::c_uint).cast(),
                    CU_POINTER_ATTRIBUTE_IS_MANAGED,
                    ptr
                ));
                r == CUDA_SUCCESS && managed == 0
            }
            CUDA_ERROR_INVALID_VALUE => true,
            _ => false,
        }
    }

    fn graph_attr(dev: CUdevice, attr: CUgraphMem_attribute) -> Option<u64> {
        let mut value: u64 = 0;
        let r = crate::fwd!(cuDeviceGetGraphMemAttribute(
            dev,
            attr,
            (&mut value as *mut u64).cast()
        ));
        (r == CUDA_SUCCESS).then_some(value)
    }

    fn pool_attr(pool: CUmemoryPool, attr: CUmemPool_attribute) -> Option<u64> {
        let mut value: u64 = 0;
        let r = crate::fwd!(cuMemPoolGetAttribute(
            pool,
            attr,
            (&mut value as *mut u64).cast()
        ));
        (r == CUDA_SUCCESS).then_some(value)
    }

    /// The UUID NVML gives a device handle.
    pub fn nvml_uuid(&self, dev: nvmlDevice_t) -> Option<String> {
        let mut buf = [0 as c_char; NVML_DEVICE_UUID_V2_BUFFER_SIZE];
        let r = crate::fwd!(
            MISSING,
            nvmlDeviceGetUUID(dev, buf.as_mut_ptr(), UUID_BUFFER)
        );
        if r != NVML_SUCCESS {
            return None;
        }
        let bytes: Vec<u8> = buf
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| byte(c))
            .collect();
        String::from_utf8(bytes).ok()
    }

    /// NVML's index of the GPU `uuid` (its index in the container's device list).
    pub fn nvml_index_of_uuid(&self, uuid: &str) -> Option<u32> {
        let nvml = NvmlHold::take();
        if !nvml.ok() {
            return None;
        }
        let uuid = CString::new(uuid).ok()?;
        let mut dev: nvmlDevice_t = core::ptr::null_mut();
        if crate::fwd!(MISSING, nvmlDeviceGetHandleByUUID(uuid.as_ptr(), &mut dev)) != NVML_SUCCESS
        {
            return None;
        }
        self.nvml_index(dev)
    }

    /// How many GPUs NVML sees: the container's devices (NVML ignores
    /// `CUDA_VISIBLE_DEVICES`).
    pub fn nvml_device_count(&self) -> Option<u32> {
        let nvml = NvmlHold::take();
        if !nvml.ok() {
            return None;
        }
        let mut n: c_uint = 0;
        (crate::fwd!(MISSING, nvmlDeviceGetCount_v2(&mut n)) == NVML_SUCCESS).then_some(n)
    }

    /// NVML's index of a device handle.
    pub fn nvml_index(&self, dev: nvmlDevice_t) -> Option<u32> {
        let mut index: c_uint = 0;
        (crate::fwd!(MISSING, nvmlDeviceGetIndex(dev, &mut index)) == NVML_SUCCESS).then_some(index)
    }
}

// As above: opaque handles, passed on to the driver.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
impl Driver for Real {
    fn device_count(&self) -> Option<i32> {
        let mut count: i32 = 0;
        (crate::fwd!(cuDeviceGetCount(&mut count)) == CUDA_SUCCESS).then_some(count)
    }

    fn device_uuid(&self, ordinal: CUdevice) -> Option<String> {
        let mut raw = CUuuid::default();
        let r = if crate::real::cuDeviceGetUuid_v2.get().is_some() {
            crate::fwd!(cuDeviceGetUuid_v2(&mut raw, ordinal))
        } else {
            crate::fwd!(cuDeviceGetUuid(&mut raw, ordinal))
        };
        (r == CUDA_SUCCESS).then(|| format_uuid(&raw))
    }

    #[inline]
    fn current_device(&self) -> Option<CUdevice> {
        let mut dev: CUdevice = 0;
        (crate::fwd!(cuCtxGetDevice(&mut dev)) == CUDA_SUCCESS).then_some(dev)
    }

    #[inline]
    fn stream_device(&self, stream: CUstream) -> Option<CUdevice> {
        // A driver before CUDA 12.8 lacks it: no capture-mode exchange for nothing.
        crate::real::cuStreamGetDevice.get()?;
        let mut dev: CUdevice = 0;
        // In `RELAXED` capture mode: asked in a program's thread while another may capture in
        // `GLOBAL` mode, a call the driver counts as unsafe would invalidate that capture (a
        // CCCL note reports `cudaStreamGetDevice` refused during capture on drivers 580-595).
        let _relaxed = relaxed();
        (crate::fwd!(cuStreamGetDevice(stream, &mut dev)) == CUDA_SUCCESS).then_some(dev)
    }

    fn current_context(&self) -> Option<CUcontext> {
        let mut ctx: CUcontext = core::ptr::null_mut();
        let r = crate::fwd!(cuCtxGetCurrent(&mut ctx));
        (r == CUDA_SUCCESS && !ctx.is_null()).then_some(ctx)
    }

    fn set_current(&self, ctx: CUcontext) -> CUresult {
        crate::fwd!(cuCtxSetCurrent(ctx))
    }

    fn synchronize(&self) -> CUresult {
        crate::fwd!(cuCtxSynchronize())
    }

    fn capturing(&self, stream: CUstream) -> bool {
        let mut status: CUstreamCaptureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
        crate::fwd!(cuStreamIsCapturing(stream, &mut status)) == CUDA_SUCCESS
            && status == CU_STREAM_CAPTURE_STATUS_ACTIVE
    }

    fn device_mem_pool(&self, dev: CUdevice) -> Option<CUmemoryPool> {
        let mut pool: CUmemoryPool = core::ptr::null_mut();
        let r = crate::fwd!(cuDeviceGetMemPool(&mut pool, dev));
        (r == CUDA_SUCCESS && !pool.is_null()).then_some(pool)
    }

    fn pool_reserved(&self, pool: CUmemoryPool) -> Option<u64> {
        Real::pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
    }

    fn pool_used(&self, pool: CUmemoryPool) -> Option<u64> {
        Real::pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT)
    }

    fn graph_reserved(&self, dev: CUdevice) -> Option<u64> {
        Real::graph_attr(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT)
    }

    fn graph_used(&self, dev: CUdevice) -> Option<u64> {
        Real::graph_attr(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT)
    }

    fn pool_allocation(&self, ptr: CUdeviceptr) -> Option<(CUmemoryPool, u64)> {
        let mut pool: CUmemoryPool = core::ptr::null_mut();
        let r = crate::fwd!(cuPointerGetAttribute(
            (&mut pool as *mut CUmemoryPool).cast(),
            CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
            ptr
        ));
        if r != CUDA_SUCCESS || pool.is_null() {
            return None;
        }
        let (mut base, mut size): (CUdeviceptr, usize) = (0, 0);
        let r = crate::fwd!(cuMemGetAddressRange_v2(&mut base, &mut size, ptr));
        (r == CUDA_SUCCESS).then_some((pool, size as u64))
    }

    fn graph_allocs(&self, graph: CUgraph) -> Option<Vec<(CUdevice, u64)>> {
        let mut allocs = Vec::new();
        graph_allocs_into(graph, 0, &mut allocs)?;
        Some(allocs)
    }

    fn hold_nvml(&self) -> NvmlHold {
        NvmlHold::take()
    }

    fn nvml_used(&self, uuid: &str) -> Option<u64> {
        let nvml = NvmlHold::take();
        if !nvml.ok() {
            return None;
        }
        let uuid = CString::new(uuid).ok()?;
        let mut dev: nvmlDevice_t = core::ptr::null_mut();
        if crate::fwd!(MISSING, nvmlDeviceGetHandleByUUID(uuid.as_ptr(), &mut dev)) != NVML_SUCCESS
        {
            return None;
        }
        let mut mem = nvmlMemory_t::default();
        (crate::fwd!(MISSING, nvmlDeviceGetMemoryInfo(dev, &mut mem)) == NVML_SUCCESS)
            .then_some(mem.used)
    }

    fn exchange_capture_mode(&self, mode: CUstreamCaptureMode) -> Option<CUstreamCaptureMode> {
        let mut m = mode;
        (crate::fwd!(cuThreadExchangeStreamCaptureMode(&mut m)) == CUDA_SUCCESS).then_some(m)
    }

    fn event_create(&self) -> Option<CUevent> {
        let mut event: CUevent = core::ptr::null_mut();
        let r = crate::fwd!(cuEventCreate(&mut event, CU_EVENT_DEFAULT));
        (r == CUDA_SUCCESS && !event.is_null()).then_some(event)
    }

    fn event_record(&self, event: CUevent, stream: CUstream) -> CUresult {
        crate::fwd!(cuEventRecord(event, stream))
    }

    fn stream_idle(&self, stream: CUstream) -> bool {
        crate::fwd!(cuStreamQuery(stream)) == CUDA_SUCCESS
    }

    fn event_done(&self, event: CUevent) -> Option<bool> {
        match crate::fwd!(cuEventQuery(event)) {
            CUDA_SUCCESS => Some(true),
            CUDA_ERROR_NOT_READY => Some(false),
            _ => None,
        }
    }

    // Milliseconds as a float to whole nanoseconds: clamped to [0, 1e12] first.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    fn event_elapsed(&self, from: CUevent, to: CUevent) -> Option<u64> {
        let mut ms: f32 = 0.0;
        let r = if crate::real::cuEventElapsedTime_v2.get().is_some() {
            crate::fwd!(cuEventElapsedTime_v2(&mut ms, from, to))
        } else {
            crate::fwd!(cuEventElapsedTime(&mut ms, from, to))
        };
        (r == CUDA_SUCCESS && ms.is_finite()).then(|| (f64::from(ms) * 1e6).clamp(0.0, 1e12) as u64)
    }

    fn host_word(&self) -> Option<HostWord> {
        let mut host: *mut core::ffi::c_void = core::ptr::null_mut();
        let flags = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP;
        if crate::fwd!(cuMemHostAlloc(&mut host, 64, flags)) != CUDA_SUCCESS || host.is_null() {
            return None;
        }
        let mut device: CUdeviceptr = 0;
        if crate::fwd!(cuMemHostGetDevicePointer_v2(&mut device, host, 0)) != CUDA_SUCCESS
            || device == 0
        {
            return None;
        }
        // Page-aligned (the driver's pinned allocations are), so 4-byte aligned.
        if !(host as usize).is_multiple_of(core::mem::align_of::<AtomicU32>()) {
            return None;
        }
        Some(HostWord {
            host: host as usize,
            device,
        })
    }

    fn hold(&self, stream: CUstream, word: HostWord, value: u32) -> bool {
        crate::fwd!(cuStreamWaitValue32_v2(
            stream,
            word.device,
            value,
            CU_STREAM_WAIT_VALUE_GEQ
        )) == CUDA_SUCCESS
    }

    fn probe_kit(&self) -> Option<ProbeKit> {
        let mut module: CUmodule = core::ptr::null_mut();
        if crate::fwd!(cuModuleLoadData(&mut module, PROBE_PTX.as_ptr().cast())) != CUDA_SUCCESS
            || module.is_null()
        {
            return None;
        }
        let mut function: CUfunction = core::ptr::null_mut();
        if crate::fwd!(cuModuleGetFunction(
            &mut function,
            module,
            c"vgpu_probe".as_ptr()
        )) != CUDA_SUCCESS
            || function.is_null()
        {
            return None;
        }
        let mut stream: CUstream = core::ptr::null_mut();
        if crate::fwd!(cuStreamCreate(&mut stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS
            || stream.is_null()
        {
            return None;
        }
        Some(ProbeKit {
            function: function as usize,
            stream: stream as usize,
        })
    }

    fn probe_launch(&self, kit: ProbeKit) -> bool {
        crate::fwd!(cuLaunchKernel(
            kit.function as CUfunction,
            1,
            1,
            1,
            1,
            1,
            1,
            0,
            kit.stream as CUstream,
            core::ptr::null_mut(),
            core::ptr::null_mut()
        )) == CUDA_SUCCESS
    }

    fn set_word(&self, word: HostWord, value: u32) {
        // SAFETY: `word.host` came from `host_word`: a live (never freed), aligned allocation of
        // 64 bytes of pinned host memory, which the GPU only reads; an atomic store is a plain
        // aligned store the GPU sees once it leaves the CPU's store buffer.
        let w = unsafe { &*(word.host as *const AtomicU32) };
        w.store(value, Ordering::SeqCst);
    }
}

/// How deep [`graph_allocs_into`] follows child graphs (CUDA 13 lets a child graph whose
/// ownership moved to its parent hold memory nodes).
const CHILD_DEPTH: usize = 8;

/// The memory allocation nodes of `graph` and of its child graphs, as (device ordinal, bytes),
/// into `out`; `None` when the driver cannot enumerate them, the children nest deeper than
/// [`CHILD_DEPTH`], or the graph has conditional nodes (whose bodies are not walked).
fn graph_allocs_into(graph: CUgraph, depth: usize, out: &mut Vec<(CUdevice, u64)>) -> Option<()> {
    if depth > CHILD_DEPTH {
        return None;
    }
    let mut n: usize = 0;
    let r = crate::fwd!(cuGraphGetNodes(graph, core::ptr::null_mut(), &mut n));
    if r != CUDA_SUCCESS {
        return None;
    }
    let mut nodes: Vec<CUgraphNode> = vec![core::ptr::null_mut(); n];
    let r = crate::fwd!(cuGraphGetNodes(graph, nodes.as_mut_ptr(), &mut n));
    if r != CUDA_SUCCESS {
        return None;
    }
    nodes.truncate(n);
    for node in nodes {
        let mut kind: CUgraphNodeType = 0;
        if crate::fwd!(cuGraphNodeGetType(node, &mut kind)) != CUDA_SUCCESS {
            return None;
        }
        match kind {
            // A conditional node's bodies hold no memory nodes: CUDA allows kernels, empty
            // nodes, child graphs, memsets, memcopies and conditionals there, recursively
            // (`CUDA_CONDITIONAL_NODE_PARAMS`). Should a driver ever allocate in one, the
            // pool's growth is still read and charged after the launch.
            CU_GRAPH_NODE_TYPE_CONDITIONAL => {}
            CU_GRAPH_NODE_TYPE_GRAPH => {
                let mut child: CUgraph = core::ptr::null_mut();
                if crate::fwd!(cuGraphChildGraphNodeGetGraph(node, &mut child)) != CUDA_SUCCESS
                    || child.is_null()
                {
                    return None;
                }
                graph_allocs_into(child, depth + 1, out)?;
            }
            CU_GRAPH_NODE_TYPE_MEM_ALLOC => {
                let mut p = core::mem::MaybeUninit::<CUDA_MEM_ALLOC_NODE_PARAMS>::zeroed();
                if crate::fwd!(cuGraphMemAllocNodeGetParams(node, p.as_mut_ptr())) != CUDA_SUCCESS {
                    return None;
                }
                // SAFETY: the driver filled the struct on success (and it started zeroed:
                // every field is an integer or a pointer, for which zero is a valid value).
                let p = unsafe { p.assume_init() };
                if p.poolProps.location.type_ == CU_MEM_LOCATION_TYPE_DEVICE {
                    out.push((p.poolProps.location.id, p.bytesize as u64));
                }
            }
            _ => {}
        }
    }
    Some(())
}

/// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, as NVML prints it.
pub fn format_uuid(u: &CUuuid) -> String {
    let b: Vec<u8> = u.bytes.iter().map(|&c| byte(c)).collect();
    let hex =
        |r: std::ops::Range<usize>| b[r].iter().map(|x| format!("{x:02x}")).collect::<String>();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex(0..4),
        hex(4..6),
        hex(6..8),
        hex(8..10),
        hex(10..16)
    )
}
