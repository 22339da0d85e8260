//! Memory held by pools: stream-ordered allocation pools (default and user-created) and the
//! per-device graph memory pool.
//!
//! A pool keeps freed memory for reuse, so what it takes from the device is what it
//! *reserves*, not what is allocated from it. vgpu charges each pool by its reserved memory:
//! before an allocation, the growth it can cause (`used + size − reserved`) is charged up front
//! (atomically, like any allocation); after it, the charge is brought up to the reserved size the
//! driver reports. Pools give memory back on synchronisation and trim; vgpu re-reads them after
//! a trim and whenever a charge would be denied, so freed memory is never counted for long.
use crate::runtime::{Runtime, runtime};
use std::sync::Mutex;
use vgpu_policy::ledger::Slot;
use vgpu_sys::cuda::*;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum PoolKey {
    /// A `CUmemoryPool` handle.
    Pool(usize),
    /// The graph memory pool of a device.
    Graph(Slot),
}

#[derive(Debug)]
struct Entry {
    key: PoolKey,
    slot: Slot,
    charged: u64,
}

/// What each pool is charged. A process-local lock, never held across a driver call.
#[derive(Default)]
pub struct PoolCharges {
    inner: Mutex<Vec<Entry>>,
}

impl PoolCharges {
    fn with<R>(&self, f: impl FnOnce(&mut Vec<Entry>) -> R) -> R {
        let mut v = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut v)
    }

    /// After a successful allocation: the `pre` bytes charged up front now belong to the pool,
    /// and its charge is raised to `reserved` if the driver reserved more.
    fn after_alloc(&self, rt: &Runtime, key: PoolKey, slot: Slot, pre: u64, reserved: u64) {
        self.with(|v| {
            let e = entry(v, key, slot);
            e.charged += pre;
            if reserved > e.charged {
                rt.ledger().force_charge(slot, reserved - e.charged);
                e.charged = reserved;
            }
        })
    }

    /// Sets a pool's charge to what it reserves now; returns whether that released memory.
    fn set(&self, rt: &Runtime, key: PoolKey, slot: Slot, reserved: u64) -> bool {
        self.with(|v| {
            let e = entry(v, key, slot);
            let released = reserved < e.charged;
            if reserved > e.charged {
                rt.ledger().force_charge(slot, reserved - e.charged);
            } else {
                rt.ledger().release(slot, e.charged - reserved);
            }
            e.charged = reserved;
            released
        })
    }

    fn forget(&self, rt: &Runtime, key: PoolKey) {
        self.with(|v| {
            if let Some(i) = v.iter().position(|e| e.key == key) {
                let e = v.swap_remove(i);
                rt.ledger().release(e.slot, e.charged);
            }
        })
    }

    fn slot_of(&self, key: PoolKey) -> Option<Slot> {
        self.with(|v| v.iter().find(|e| e.key == key).map(|e| e.slot))
    }

    /// Re-reads every pool of `slot` (and its graph pool) and corrects their charges: called
    /// before a denial, so memory pools released on synchronisation is available again.
    /// Returns whether any pool gave memory back.
    pub fn refresh_slot(&self, rt: &Runtime, slot: Slot) -> bool {
        let keys: Vec<PoolKey> =
            self.with(|v| v.iter().filter(|e| e.slot == slot).map(|e| e.key).collect());
        let mut released = false;
        for key in keys {
            if let Some(reserved) = reserved_now(key) {
                released |= self.set(rt, key, slot, reserved);
            }
        }
        released
    }
}

fn entry(v: &mut Vec<Entry>, key: PoolKey, slot: Slot) -> &mut Entry {
    let i = match v.iter().position(|e| e.key == key) {
        Some(i) => i,
        None => {
            v.push(Entry {
                key,
                slot,
                charged: 0,
            });
            v.len() - 1
        }
    };
    &mut v[i]
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

fn graph_attr(dev: CUdevice, attr: CUgraphMem_attribute) -> Option<u64> {
    let mut value: u64 = 0;
    let r = crate::fwd!(cuDeviceGetGraphMemAttribute(
        dev,
        attr,
        (&mut value as *mut u64).cast()
    ));
    (r == CUDA_SUCCESS).then_some(value)
}

fn reserved_now(key: PoolKey) -> Option<u64> {
    match key {
        PoolKey::Pool(p) => pool_attr(p as CUmemoryPool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
        PoolKey::Graph(slot) => {
            graph_attr(slot as CUdevice, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT)
        }
    }
}

/// Shared body of the stream-ordered allocations from `pool` on `slot`.
fn pool_alloc(
    rt: &Runtime,
    slot: Slot,
    pool: CUmemoryPool,
    size: usize,
    alloc: impl FnOnce() -> CUresult,
) -> CUresult {
    let reserved = pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
    let used = pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
    let growth = match (reserved, used) {
        (Some(r), Some(u)) => u.saturating_add(size as u64).saturating_sub(r),
        _ => size as u64,
    };
    if rt.charge(slot, growth).is_err() {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    let r = alloc();
    if r != CUDA_SUCCESS {
        rt.ledger().release(slot, growth);
        return r;
    }
    let now = pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT).unwrap_or(0);
    rt.pools
        .after_alloc(rt, PoolKey::Pool(pool as usize), slot, growth, now);
    r
}

/// The current device's pool (what `cuMemAllocAsync` allocates from) and its slot.
fn current_pool() -> Option<(&'static Runtime, Slot, CUmemoryPool)> {
    let rt = runtime()?;
    let slot = rt.current_slot()?;
    let mut pool: CUmemoryPool = core::ptr::null_mut();
    let r = crate::fwd!(cuDeviceGetMemPool(&mut pool, slot as CUdevice));
    (r == CUDA_SUCCESS && !pool.is_null()).then_some((rt, slot, pool))
}

/// # Safety
/// C API contract of `cuMemAllocAsync`.
pub unsafe fn alloc_async(dptr: *mut CUdeviceptr, bytesize: usize, stream: CUstream) -> CUresult {
    let Some((rt, slot, pool)) = current_pool() else {
        return crate::fwd!(cuMemAllocAsync(dptr, bytesize, stream));
    };
    pool_alloc(rt, slot, pool, bytesize, || {
        crate::fwd!(cuMemAllocAsync(dptr, bytesize, stream))
    })
}

/// # Safety
/// C API contract of `cuMemAllocAsync_ptsz`.
pub unsafe fn alloc_async_ptsz(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    stream: CUstream,
) -> CUresult {
    let Some((rt, slot, pool)) = current_pool() else {
        return crate::fwd!(cuMemAllocAsync_ptsz(dptr, bytesize, stream));
    };
    pool_alloc(rt, slot, pool, bytesize, || {
        crate::fwd!(cuMemAllocAsync_ptsz(dptr, bytesize, stream))
    })
}

/// The slot a pool allocates on: the one recorded at `cuMemPoolCreate`, else the current one.
fn pool_slot(pool: CUmemoryPool) -> Option<(&'static Runtime, Slot)> {
    let rt = runtime()?;
    let slot = match rt.pools.slot_of(PoolKey::Pool(pool as usize)) {
        Some(s) => s,
        None => rt.current_slot()?,
    };
    Some((rt, slot))
}

/// # Safety
/// C API contract of `cuMemAllocFromPoolAsync`.
pub unsafe fn alloc_from_pool(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    pool: CUmemoryPool,
    stream: CUstream,
) -> CUresult {
    let Some((rt, slot)) = pool_slot(pool) else {
        return crate::fwd!(cuMemAllocFromPoolAsync(dptr, bytesize, pool, stream));
    };
    pool_alloc(rt, slot, pool, bytesize, || {
        crate::fwd!(cuMemAllocFromPoolAsync(dptr, bytesize, pool, stream))
    })
}

/// # Safety
/// C API contract of `cuMemAllocFromPoolAsync_ptsz`.
pub unsafe fn alloc_from_pool_ptsz(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    pool: CUmemoryPool,
    stream: CUstream,
) -> CUresult {
    let Some((rt, slot)) = pool_slot(pool) else {
        return crate::fwd!(cuMemAllocFromPoolAsync_ptsz(dptr, bytesize, pool, stream));
    };
    pool_alloc(rt, slot, pool, bytesize, || {
        crate::fwd!(cuMemAllocFromPoolAsync_ptsz(dptr, bytesize, pool, stream))
    })
}

/// # Safety
/// C API contract of `cuMemPoolCreate`.
pub unsafe fn pool_create(pool: *mut CUmemoryPool, props: *const CUmemPoolProps) -> CUresult {
    let r = crate::fwd!(cuMemPoolCreate(pool, props));
    if r == CUDA_SUCCESS
        && !props.is_null()
        && let Some(rt) = runtime()
    {
        // SAFETY: non-null properties from the caller; on success the driver wrote `pool`.
        let (loc, p) = unsafe { ((*props).location, *pool) };
        if loc.type_ == CU_MEM_LOCATION_TYPE_DEVICE
            && let Some(slot) = rt.limited_slot(loc.id)
        {
            rt.pools.set(rt, PoolKey::Pool(p as usize), slot, 0);
        }
    }
    r
}

/// # Safety
/// C API contract of `cuMemPoolDestroy`.
pub unsafe fn pool_destroy(pool: CUmemoryPool) -> CUresult {
    let r = crate::fwd!(cuMemPoolDestroy(pool));
    if r == CUDA_SUCCESS
        && let Some(rt) = runtime()
    {
        rt.pools.forget(rt, PoolKey::Pool(pool as usize));
    }
    r
}

/// # Safety
/// C API contract of `cuMemPoolTrimTo`.
pub unsafe fn pool_trim(pool: CUmemoryPool, keep: usize) -> CUresult {
    let r = crate::fwd!(cuMemPoolTrimTo(pool, keep));
    if r == CUDA_SUCCESS
        && let Some(rt) = runtime()
        && let Some(slot) = rt.pools.slot_of(PoolKey::Pool(pool as usize))
        && let Some(reserved) = reserved_now(PoolKey::Pool(pool as usize))
    {
        rt.pools
            .set(rt, PoolKey::Pool(pool as usize), slot, reserved);
    }
    r
}

/// Re-reads the graph memory pool of `slot` after something may have changed it.
fn refresh_graph(rt: &Runtime, slot: Slot) {
    if let Some(reserved) = reserved_now(PoolKey::Graph(slot)) {
        rt.pools.set(rt, PoolKey::Graph(slot), slot, reserved);
    }
}

/// A graph memory node is refused at creation when its size alone does not fit what is left;
/// the memory it takes is charged when a launch makes the graph pool grow.
///
/// # Safety
/// C API contract of `cuGraphAddMemAllocNode`.
pub unsafe fn graph_add_alloc_node(
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
            && let Some(slot) = rt.limited_slot(loc.id)
        {
            // Probe: charge and release at once; the pool's growth is charged at launch.
            if rt.charge(slot, size).is_err() {
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
            rt.ledger().release(slot, size);
        }
    }
    crate::fwd!(cuGraphAddMemAllocNode(node, graph, deps, n, params))
}

fn after_graph_launch(r: CUresult) {
    if r == CUDA_SUCCESS
        && crate::runtime::runtime().is_some_and(|rt| rt.memory_limited())
        && let Some((rt, slot)) = runtime().and_then(|rt| Some((rt, rt.current_slot()?)))
    {
        refresh_graph(rt, slot);
    }
}

/// # Safety
/// C API contract of `cuGraphLaunch`.
pub unsafe fn graph_launch(exec: CUgraphExec, stream: CUstream) -> CUresult {
    super::launch::admit(stream);
    let r = crate::fwd!(cuGraphLaunch(exec, stream));
    after_graph_launch(r);
    r
}

/// # Safety
/// C API contract of `cuGraphLaunch_ptsz`.
pub unsafe fn graph_launch_ptsz(exec: CUgraphExec, stream: CUstream) -> CUresult {
    super::launch::admit(if stream.is_null() {
        2 as CUstream
    } else {
        stream
    });
    let r = crate::fwd!(cuGraphLaunch_ptsz(exec, stream));
    after_graph_launch(r);
    r
}

/// # Safety
/// C API contract of `cuDeviceGraphMemTrim`.
pub unsafe fn graph_mem_trim(dev: CUdevice) -> CUresult {
    let r = crate::fwd!(cuDeviceGraphMemTrim(dev));
    if r == CUDA_SUCCESS
        && let Some(rt) = runtime()
        && let Some(slot) = rt.limited_slot(dev)
    {
        refresh_graph(rt, slot);
    }
    r
}
