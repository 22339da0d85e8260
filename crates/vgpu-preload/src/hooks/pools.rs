//! Stream-ordered allocation, pools and graph memory nodes: the hooks. What pools are charged,
//! and why, is [`crate::accounting`]'s.
use super::memory::{bad_stream, invalid_if, refused};
use crate::accounting::PoolKey;
use crate::driver::{Driver, REAL};
use crate::real::ty;
use crate::runtime::{Runtime, runtime};
use crate::symbols::Call;
use vgpu_policy::ledger::DeviceIndex;
use vgpu_policy::registry::AllocKind;
use vgpu_sys::cuda::*;

/// Shared body of the stream-ordered allocations from `pool` on `device`.
///
/// On a capturing stream nothing is allocated: the driver adds a memory node to the graph,
/// which is charged when the graph is launched ([`graph_launch`]). Only a size that could never
/// fit is refused there, as [`graph_add_alloc_node`] does (before: the pool's growth was charged
/// at capture, and again at the launch).
fn pool_alloc(
    rt: &Runtime,
    device: DeviceIndex,
    pool: CUmemoryPool,
    size: usize,
    (dptr, stream): (*mut CUdeviceptr, CUstream),
    alloc: impl FnOnce() -> CUresult,
) -> CUresult {
    if crate::compute::captures_counted() && REAL.capturing(stream) {
        if !fits_alone(rt, device, size as u64) {
            // The stream captures: it is a stream.
            return refused(|| invalid_if(dptr.is_null()));
        }
        return alloc();
    }
    let denied = core::cell::Cell::new(false);
    let r = rt.accounting.pool_alloc(
        rt.ledger(),
        &REAL,
        device,
        pool,
        size as u64,
        |bytes| {
            let c = rt.charge(device, bytes);
            denied.set(c.is_err());
            c
        },
        alloc,
    );
    if denied.get() {
        refused(|| stream_alloc_invalid(dptr, stream))
    } else {
        r
    }
}

/// What the driver says of a stream-ordered allocation's arguments that it refuses whatever
/// the size (for [`refused`]).
fn stream_alloc_invalid(dptr: *mut CUdeviceptr, stream: CUstream) -> Option<CUresult> {
    invalid_if(dptr.is_null()).or_else(|| bad_stream(stream))
}

/// Whether `bytes` would fit on `device` now, were nothing else charged for it (a charge
/// undone at once): what can be checked of memory that a graph takes only when it runs.
fn fits_alone(rt: &Runtime, device: DeviceIndex, bytes: u64) -> bool {
    let fits = rt.charge(device, bytes).is_ok();
    if fits {
        rt.ledger().release(device, bytes);
    }
    fits
}

/// The runtime and the current device's ledger index, when that device is limited, with the device's
/// current pool (what `cuMemAllocAsync` allocates from) if the driver can name it.
fn current_pool() -> Option<(&'static Runtime, DeviceIndex, Option<CUmemoryPool>)> {
    let rt = runtime()?;
    let device = rt.current_device()?;
    let pool = CUdevice::try_from(device)
        .ok()
        .and_then(|dev| REAL.device_mem_pool(dev));
    Some((rt, device, pool))
}

/// # Safety
/// C API contract of `cuMemAllocAsync` / `_ptsz`.
pub unsafe fn alloc_async(
    call: Call<ty::cuMemAllocAsync>,
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    stream: CUstream,
) -> CUresult {
    let Some((rt, device, pool)) = current_pool() else {
        return crate::forward!(call(dptr, bytesize, stream));
    };
    let Some(pool) = pool else {
        // The driver cannot name the pool, so what the allocation costs cannot be learnt: it
        // is charged its size (fail closed) and released when it is freed.
        return super::memory::charged(
            rt,
            device,
            bytesize as u64,
            AllocKind::Async,
            || stream_alloc_invalid(dptr, stream),
            || {
                let r = crate::forward!(call(dptr, bytesize, stream));
                // SAFETY: `dptr` is the out-pointer this call was given.
                (r, unsafe { super::memory::written(r, dptr) })
            },
        );
    };
    pool_alloc(
        rt,
        device,
        pool,
        bytesize,
        (dptr, call.stream(stream)),
        || crate::forward!(call(dptr, bytesize, stream)),
    )
}

/// A stream-ordered free releases what vgpu charged for the pointer itself (an allocation
/// whose pool the driver could not name); pool memory is settled by re-reading the pool.
///
/// # Safety
/// C API contract of `cuMemFreeAsync` / `_ptsz`.
pub unsafe fn free_async(
    call: Call<ty::cuMemFreeAsync>,
    dptr: CUdeviceptr,
    stream: CUstream,
) -> CUresult {
    super::memory::released(dptr, || {
        freed_from_pool(dptr, || crate::forward!(call(dptr, stream)))
    })
}

/// The device a pool allocates on: the one recorded at `cuMemPoolCreate`; `None` for a pool in
/// host memory or on a device without a limit now (not charged); else the device whose current
/// pool it is; else the current device (fail closed: a pool vgpu cannot place is charged where
/// the program runs).
fn pool_device(pool: CUmemoryPool) -> Option<(&'static Runtime, DeviceIndex)> {
    let rt = runtime()?;
    if let Some(device) = rt.accounting.pool_device(PoolKey::pool(pool)) {
        return Some((rt, device));
    }
    let ordinal = match rt.accounting.uncharged_at(pool) {
        // Host memory: never charged.
        Some(None) => return None,
        Some(Some(ordinal)) => Some(ordinal),
        None => (0..rt.devices.len())
            .filter_map(|d| CUdevice::try_from(d).ok())
            .find(|&dev| REAL.device_mem_pool(dev) == Some(pool)),
    };
    let Some(ordinal) = ordinal else {
        return Some((rt, rt.current_device()?));
    };
    match rt.limited_device(ordinal) {
        Some(device) => {
            // Charged from now on (a limit set since it was made), for what it holds already.
            rt.accounting.forget_uncharged(pool);
            rt.accounting
                .refresh_pool(rt.ledger(), &REAL, PoolKey::pool(pool), device);
            Some((rt, device))
        }
        None => {
            rt.accounting.pool_uncharged(pool, Some(ordinal));
            None
        }
    }
}

/// # Safety
/// C API contract of `cuMemAllocFromPoolAsync` / `_ptsz`.
pub unsafe fn alloc_from_pool(
    call: Call<ty::cuMemAllocFromPoolAsync>,
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    pool: CUmemoryPool,
    stream: CUstream,
) -> CUresult {
    let Some((rt, device)) = pool_device(pool) else {
        return crate::forward!(call(dptr, bytesize, pool, stream));
    };
    pool_alloc(
        rt,
        device,
        pool,
        bytesize,
        (dptr, call.stream(stream)),
        || crate::forward!(call(dptr, bytesize, pool, stream)),
    )
}

/// # Safety
/// C API contract of `cuMemPoolCreate`.
pub unsafe fn pool_create(
    call: Call<ty::cuMemPoolCreate>,
    pool: *mut CUmemoryPool,
    props: *const CUmemPoolProps,
) -> CUresult {
    let r = crate::forward!(call(pool, props));
    if r == CUDA_SUCCESS
        && !props.is_null()
        && let Some(rt) = runtime()
    {
        // SAFETY: non-null properties from the caller; on success the driver wrote `pool`.
        let (loc, p) = unsafe { ((*props).location, *pool) };
        let limited = if loc.type_ == CU_MEM_LOCATION_TYPE_DEVICE {
            rt.limited_device(loc.id)
        } else {
            None
        };
        match limited {
            Some(device) => {
                rt.accounting
                    .set_pool(rt.ledger(), PoolKey::pool(p), device, 0);
            }
            // A device without a limit (looked at again at each allocation), or host memory
            // (`CU_MEM_LOCATION_TYPE_HOST*`, never charged). Before: unknown, and so charged to
            // the current device.
            None => rt.accounting.pool_uncharged(
                p,
                (loc.type_ == CU_MEM_LOCATION_TYPE_DEVICE).then_some(loc.id),
            ),
        }
    }
    r
}

/// # Safety
/// C API contract of `cuMemPoolDestroy`.
///
/// A pool destroyed while allocations from it are live keeps their memory until they are freed
/// (the driver's rule): that much of its charge stays, and goes as they are freed
/// (`freed_from_pool`).
pub unsafe fn pool_destroy(call: Call<ty::cuMemPoolDestroy>, pool: CUmemoryPool) -> CUresult {
    let Some(rt) = runtime() else {
        return crate::forward!(call(pool));
    };
    // Read before: afterwards the handle is gone.
    let used = rt
        .accounting
        .pool_device(PoolKey::pool(pool))
        .and_then(|_| REAL.pool_used(pool));
    let r = crate::forward!(call(pool));
    if r == CUDA_SUCCESS {
        rt.accounting
            .pool_destroyed(rt.ledger(), PoolKey::pool(pool), used);
        rt.accounting.forget_uncharged(pool);
    }
    r
}

/// Runs `free` (of device pointer `ptr`) and, while some destroyed pool still has live
/// allocations charged, gives back what `ptr` held if it came from one (asked of the driver
/// before the free; nothing otherwise: one load).
pub(super) fn freed_from_pool(ptr: CUdeviceptr, free: impl FnOnce() -> CUresult) -> CUresult {
    let Some(rt) = runtime().filter(|rt| rt.accounting.any_retired()) else {
        return free();
    };
    let from = REAL.pool_allocation(ptr);
    let r = free();
    if r == CUDA_SUCCESS
        && let Some((pool, bytes)) = from
    {
        rt.accounting.retired_freed(rt.ledger(), pool, bytes);
    }
    r
}

/// # Safety
/// C API contract of `cuMemPoolTrimTo`.
pub unsafe fn pool_trim(
    call: Call<ty::cuMemPoolTrimTo>,
    pool: CUmemoryPool,
    keep: usize,
) -> CUresult {
    let r = crate::forward!(call(pool, keep));
    if r == CUDA_SUCCESS
        && let Some(rt) = runtime()
        && let Some(device) = rt.accounting.pool_device(PoolKey::pool(pool))
    {
        rt.accounting
            .refresh_pool(rt.ledger(), &REAL, PoolKey::pool(pool), device);
    }
    r
}

/// Re-reads the graph memory pool of `device` after something may have changed it.
fn refresh_graph(rt: &Runtime, device: DeviceIndex) {
    rt.accounting
        .refresh_pool(rt.ledger(), &REAL, PoolKey::Graph(device), device);
}

/// A graph memory node is refused at creation when its size alone does not fit what is left;
/// the memory it takes is charged when a launch makes the graph pool grow.
///
/// # Safety
/// C API contract of `cuGraphAddMemAllocNode`.
pub unsafe fn graph_add_alloc_node(
    call: Call<ty::cuGraphAddMemAllocNode>,
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: *mut CUDA_MEM_ALLOC_NODE_PARAMS,
) -> CUresult {
    if !params.is_null()
        && let Some(rt) = runtime()
    {
        // SAFETY: non-null parameters from the caller.
        let (loc, size) = unsafe { ((*params).poolProps.location, (*params).bytesize as u64) };
        if loc.type_ == CU_MEM_LOCATION_TYPE_DEVICE
            && let Some(device) = rt.limited_device(loc.id)
        {
            // The pool's growth is charged at launch.
            if !fits_alone(rt, device, size) {
                return refused(|| invalid_if(node.is_null()));
            }
        }
    }
    crate::forward!(call(node, graph, deps, n, params))
}

/// Records what the memory nodes of `graph`, just instantiated as `exec`, allocate on each
/// limited device; then settles the graph pools (an instantiation that uploads may grow them).
fn instantiated(r: CUresult, exec: *mut CUgraphExec, graph: CUgraph, flags: u64) -> CUresult {
    if r != CUDA_SUCCESS || exec.is_null() {
        return r;
    }
    let Some(rt) = runtime() else {
        return r;
    };
    // SAFETY: on success the driver wrote the new executable graph through `exec`.
    let e = unsafe { *exec };
    let mut need = vec![0u64; rt.devices.len()].into_boxed_slice();
    match REAL.graph_allocs(graph) {
        Some(allocs) => {
            // Every device, limited now or not: a limit may be set before a launch.
            for (ordinal, bytes) in allocs {
                if let Some(n) = usize::try_from(ordinal).ok().and_then(|d| need.get_mut(d)) {
                    *n = n.saturating_add(bytes);
                }
            }
        }
        // The driver cannot say: each launch's growth is charged after it, as it is read
        // (and an entry left by an executable graph of the same value goes).
        None => {
            rt.accounting.graph_destroyed(e);
            return r;
        }
    }
    for (d, &b) in need.iter().enumerate() {
        if b > 0 && rt.is_limited(d) {
            refresh_graph(rt, d);
        }
    }
    rt.accounting.graph_instantiated(e, need, flags);
    r
}

/// # Safety
/// C API contract of `cuGraphInstantiate` / `_v2`.
pub unsafe fn graph_instantiate(
    call: Call<ty::cuGraphInstantiate>,
    exec: *mut CUgraphExec,
    graph: CUgraph,
    err_node: *mut CUgraphNode,
    log: *mut core::ffi::c_char,
    len: usize,
) -> CUresult {
    let r = crate::forward!(call(exec, graph, err_node, log, len));
    instantiated(r, exec, graph, 0)
}

/// # Safety
/// C API contract of `cuGraphInstantiateWithFlags`.
pub unsafe fn graph_instantiate_with_flags(
    call: Call<ty::cuGraphInstantiateWithFlags>,
    exec: *mut CUgraphExec,
    graph: CUgraph,
    flags: u64,
) -> CUresult {
    let r = crate::forward!(call(exec, graph, flags));
    instantiated(r, exec, graph, flags)
}

/// # Safety
/// C API contract of `cuGraphInstantiateWithParams`.
pub unsafe fn graph_instantiate_with_params(
    call: Call<ty::cuGraphInstantiateWithParams>,
    exec: *mut CUgraphExec,
    graph: CUgraph,
    params: *mut core::ffi::c_void,
) -> CUresult {
    let r = crate::forward!(call(exec, graph, params));
    // `CUDA_GRAPH_INSTANTIATE_PARAMS` begins with its `cuuint64_t flags`.
    let flags = if params.is_null() {
        0
    } else {
        // SAFETY: non-null, the caller's parameters struct, whose first field is a u64.
        unsafe { params.cast::<u64>().read_unaligned() }
    };
    instantiated(r, exec, graph, flags)
}

/// # Safety
/// C API contract of `cuGraphExecDestroy`.
pub unsafe fn graph_exec_destroy(
    call: Call<ty::cuGraphExecDestroy>,
    exec: CUgraphExec,
) -> CUresult {
    let r = crate::forward!(call(exec));
    if r == CUDA_SUCCESS
        && let Some(rt) = runtime()
    {
        rt.accounting.graph_destroyed(exec);
    }
    r
}

/// # Safety
/// C API contract of `cuGraphLaunch` / `_ptsz`.
///
/// Under a memory limit, a graph whose memory nodes were learnt at instantiation is charged,
/// before it runs, what its devices' graph pools can grow by ([`Accounting::graph_launching`]):
/// refused, it does not run and returns `CUDA_ERROR_OUT_OF_MEMORY`, as the driver does when the
/// device cannot hold it. After the launch the pools' charges are settled to what they reserve.
/// A graph vgpu knows nothing of has the current device's graph pool re-read after it.
///
/// [`Accounting::graph_launching`]: crate::accounting::Accounting::graph_launching
pub unsafe fn graph_launch(
    call: Call<ty::cuGraphLaunch>,
    exec: CUgraphExec,
    stream: CUstream,
) -> CUresult {
    with_graph_charge(exec, true, || {
        super::launch::admit(
            call.stream(stream),
            (exec as u64).max(1),
            exec as u64,
            false,
            || crate::forward!(call(exec, stream)),
        )
    })
}

/// # Safety
/// C API contract of `cuGraphUpload` / `_ptsz`: the graph pools grow as for a launch, and are
/// charged the same way first; nothing runs, so the compute gate is not involved.
pub unsafe fn graph_upload(
    call: Call<ty::cuGraphUpload>,
    exec: CUgraphExec,
    stream: CUstream,
) -> CUresult {
    with_graph_charge(exec, false, || crate::forward!(call(exec, stream)))
}

/// Runs `run` (a launch or an upload of `exec`) between the graph charges: refused up front
/// (`CUDA_ERROR_OUT_OF_MEMORY`, `run` does not run) or settled after it.
fn with_graph_charge(exec: CUgraphExec, launch: bool, run: impl FnOnce() -> CUresult) -> CUresult {
    let rt = runtime().filter(|rt| rt.memory_limited());
    let pre = match rt {
        Some(rt) => match rt.accounting.graph_launching(
            rt.ledger(),
            &REAL,
            exec,
            launch,
            |d| rt.is_limited(d),
            |d, b| rt.charge(d, b),
        ) {
            Ok(pre) => pre,
            Err(r) => return r,
        },
        None => None,
    };
    let r = run();
    if let Some(rt) = rt {
        match pre {
            Some(c) => rt
                .accounting
                .graph_launched(rt.ledger(), &REAL, &c, r == CUDA_SUCCESS),
            None => {
                if r == CUDA_SUCCESS
                    && let Some(device) = rt.current_device()
                {
                    refresh_graph(rt, device);
                }
            }
        }
    }
    r
}

/// # Safety
/// C API contract of `cuDeviceGraphMemTrim`.
pub unsafe fn graph_mem_trim(call: Call<ty::cuDeviceGraphMemTrim>, dev: CUdevice) -> CUresult {
    let r = crate::forward!(call(dev));
    if r == CUDA_SUCCESS
        && let Some(rt) = runtime()
        && let Some(device) = rt.limited_device(dev)
    {
        refresh_graph(rt, device);
    }
    r
}
