//! Charges that are not one allocation: memory held by pools (stream-ordered allocation pools,
//! default and user-created, and each device's graph memory pool) and by contexts.
//!
//! A pool keeps freed memory for reuse, so what it takes from the device is what it
//! *reserves*, not what is allocated from it. vgpu charges each pool by its reserved memory:
//! before an allocation, the growth it can cause (`used + size − reserved`) is charged up front
//! (atomically, like any allocation); after it, the charge is brought up to the reserved size the
//! driver reports. Pools give memory back on synchronisation and trim; vgpu re-reads them after
//! a trim and whenever a charge would be denied, so freed memory is never counted for long.
//!
//! A context takes device memory of its own (about 0.5 GiB on an H200). NVML only reports the
//! device-wide used memory (its per-process list names host PIDs, which a process in a PID
//! namespace cannot match to itself, and is empty in the VM the H200 runs in), so a neighbour's
//! allocations and frees land in any before/after difference. [`Accounting::create_context`]
//! therefore:
//! 1. charges the expected size *first* ([`Accounting::context_estimate`]: this process's last
//!    trusted measurement on the device, else the plan's `context_size` (`VGPU_CONTEXT_SIZE`,
//!    default 512 MiB)), all of it: a start whose expected context does not fit is refused
//!    before it creates anything. So concurrent starters are admitted only while the budget
//!    holds their expected contexts, and a refused context never exists: the GPU holds more
//!    than the limit only when a context is larger than its estimate, and then by at most the
//!    difference, until the measurement settles it (and refuses it if the rest does not fit);
//! 2. reads the device's used memory twice before and twice after the creation
//!    ([`ContextSample`]); the difference is trusted only when both pairs agree (nobody changed
//!    the device's memory around the edges) and it lies within [`CONTEXT_FLOOR`] (less: a
//!    neighbour or a sibling freed memory meanwhile) ..= [`CONTEXT_CEILING`] (more: one
//!    allocated); a trusted figure is remembered for the device (process-local);
//! 3. settles the charge to the trusted figure, or else to the estimate: never a negative or
//!    absurd figure, whatever the neighbours do.
//!
//! Everything here is handed the ledger and a [`Driver`], so it is unit-tested in-process with a
//! fake driver (see the tests below).
use crate::driver::Driver;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use vgpu_policy::ledger::{Denied, DeviceIndex, Ledger};

const MIB: u64 = 1 << 20;
/// The smallest measured difference taken for a context (less: a neighbour, or another
/// process of the container, freed memory meanwhile; no GPU's context is that small).
pub const CONTEXT_FLOOR: u64 = 64 * MIB;
/// The largest measured difference taken for a context (more: a neighbour allocated).
pub const CONTEXT_CEILING: u64 = 2048 * MIB;
use vgpu_policy::registry::{AllocKind, Registry};
use vgpu_sys::cuda::*;

/// What a pool charge is keyed by.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PoolKey {
    /// A `CUmemoryPool` handle.
    Pool(usize),
    /// The graph memory pool of a device.
    Graph(DeviceIndex),
}

impl PoolKey {
    /// The key of a pool handle.
    pub fn pool(pool: CUmemoryPool) -> PoolKey {
        PoolKey::Pool(pool as usize)
    }
}

#[derive(Debug)]
struct Entry {
    key: PoolKey,
    device: DeviceIndex,
    charged: u64,
    /// Bumped by each allocation that settles into the charge ([`Accounting::pool_allocated`]):
    /// a reading of the pool taken before one is stale, and must not release what it added.
    generation: u64,
}

/// Pool and context charges of the process. Process-local locks, never held across a driver
/// call.
#[derive(Default)]
pub struct Accounting {
    /// What a context is expected to take before this process measured one
    /// (`Plan::context_size`).
    context_default: u64,
    pools: Mutex<Vec<Entry>>,
    /// Pools vgpu charges nothing for (now): made on a device without a limit (`Some`: its
    /// ordinal, looked at again at each allocation, since a limit may be set later), or in host
    /// memory (`None`).
    uncharged_pools: Mutex<Vec<(usize, Option<CUdevice>)>>,
    /// Pools destroyed while allocations from them were live: (pool, device, bytes still
    /// charged), released as those allocations are freed.
    retired: Mutex<Vec<(usize, DeviceIndex, u64)>>,
    /// Whether `retired` has any entry (read without the lock at each free).
    any_retired: AtomicBool,
    /// Whether some pool is charged anything (read without the lock, at synchronisations).
    pooled: AtomicBool,
    contexts: Mutex<Vec<(usize, DeviceIndex, u64)>>,
    /// How many contexts created with `cuCtxCreate*` are alive (read without the lock).
    created: AtomicUsize,
    /// The last trusted context measurement of each device (index, bytes).
    context_sizes: Mutex<Vec<(DeviceIndex, u64)>>,
    /// What each instantiated graph with memory nodes allocates at a launch (the executable
    /// graph, and the bytes its nodes name on each device, by ledger index).
    graphs: Mutex<Vec<GraphExec>>,
    /// Whether `graphs` has any entry (read without the lock at each graph launch).
    any_graphs: AtomicBool,
}

/// An executable graph with memory nodes ([`Accounting::graph_instantiated`]).
#[derive(Debug)]
struct GraphExec {
    exec: usize,
    /// Bytes its memory nodes allocate at a launch, by ledger device.
    need: Box<[u64]>,
    /// Instantiated to free, at each launch, what its previous launch allocated and the
    /// program did not free (`CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH`).
    auto_free: bool,
    /// Whether it was launched (with `auto_free`: its previous allocations may still be in its
    /// graph pools' `used`, and the next launch frees them first).
    launched: bool,
}

/// `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH`.
pub const AUTO_FREE_ON_LAUNCH: u64 = 1;

/// Devices a graph launch can charge at once (the region's device count).
pub const GRAPH_DEVICES: usize = 16;

/// What a graph launch was charged up front, per device ([`Accounting::graph_launching`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphCharge {
    /// Bytes charged on each device for the graph pool's growth.
    pub growth: [u64; GRAPH_DEVICES],
    /// Devices whose graph pool the launch uses.
    pub uses: [bool; GRAPH_DEVICES],
}

/// The device's used memory (NVML, all processes) read twice before and twice after a context
/// is created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ContextSample {
    pub before: [Option<u64>; 2],
    pub after: [Option<u64>; 2],
}

impl ContextSample {
    /// Runs `create` between the reads.
    pub fn take<D: Driver + ?Sized>(
        driver: &D,
        uuid: &str,
        create: impl FnOnce() -> CUresult,
    ) -> (CUresult, ContextSample) {
        // One hold across the four readings: NVML is initialised once for them, not four times.
        let _nvml = driver.hold_nvml();
        let b0 = driver.nvml_used(uuid);
        let b1 = driver.nvml_used(uuid);
        let r = create();
        let a0 = driver.nvml_used(uuid);
        let a1 = driver.nvml_used(uuid);
        (
            r,
            ContextSample {
                before: [b0, b1],
                after: [a0, a1],
            },
        )
    }

    /// The context's size, when the sample can be trusted: both pairs agree and the difference
    /// lies within [`CONTEXT_FLOOR`] ..= [`CONTEXT_CEILING`].
    pub fn trusted(&self) -> Option<u64> {
        let ([Some(b0), Some(b1)], [Some(a0), Some(a1)]) = (self.before, self.after) else {
            return None;
        };
        let d = a0.checked_sub(b0)?;
        (b0 == b1 && a0 == a1 && (CONTEXT_FLOOR..=CONTEXT_CEILING).contains(&d)).then_some(d)
    }
}

/// Memory reserved by the pool `key` now, as the driver reports it.
fn reserved_now<D: Driver + ?Sized>(driver: &D, key: PoolKey) -> Option<u64> {
    match key {
        PoolKey::Pool(p) => driver.pool_reserved(p as CUmemoryPool),
        PoolKey::Graph(device) => driver.graph_reserved(CUdevice::try_from(device).ok()?),
    }
}

impl Accounting {
    /// Accounting that expects a context to take `context_default` bytes until it measured one.
    pub fn new(context_default: u64) -> Accounting {
        Accounting {
            context_default,
            ..Accounting::default()
        }
    }

    fn with_pools<R>(&self, f: impl FnOnce(&mut Vec<Entry>) -> R) -> R {
        let mut v = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        let r = f(&mut v);
        self.pooled
            .store(v.iter().any(|e| e.charged > 0), Ordering::Relaxed);
        r
    }

    /// Whether some pool is charged anything now.
    #[inline]
    pub fn pooled(&self) -> bool {
        self.pooled.load(Ordering::Relaxed)
    }

    /// Re-reads every charged pool (stream-ordered and graph, on every device) and corrects
    /// its charge: after a synchronisation, at which the driver gives back to the device what
    /// a pool holds above its release threshold (0 by default: everything freed into it). The
    /// first eight only, so that this path never allocates; any others settle at the next trim
    /// or near-denial.
    pub fn refresh_all<D: Driver + ?Sized>(&self, ledger: &dyn Ledger, driver: &D) {
        let mut keys = [(PoolKey::Graph(0), 0); 8];
        let n = self.with_pools(|v| {
            let mut n = 0;
            for e in v.iter().filter(|e| e.charged > 0).take(keys.len()) {
                keys[n] = (e.key, e.device);
                n += 1;
            }
            n
        });
        for &(key, device) in &keys[..n] {
            self.refresh_pool(ledger, driver, key, device);
        }
    }

    /// Charges `bytes` to `device`; when that would pass the limit, first re-reads the pools of
    /// `device` (they may have released memory at a synchronisation) and, only if that gave
    /// something back, retries once (one refusal counts once).
    pub fn charge<D: Driver + ?Sized>(
        &self,
        ledger: &dyn Ledger,
        driver: &D,
        device: DeviceIndex,
        bytes: u64,
    ) -> Result<(), Denied> {
        match ledger.try_charge(device, bytes) {
            Ok(()) => Ok(()),
            Err(d) => {
                if self.refresh_device(ledger, driver, device) {
                    ledger.try_charge(device, bytes)
                } else {
                    Err(d)
                }
            }
        }
    }

    /// After a successful pool allocation: the `pre` bytes charged up front now belong to the
    /// pool, and its charge is raised to `reserved` if the driver reserved more.
    pub fn pool_allocated(
        &self,
        ledger: &dyn Ledger,
        key: PoolKey,
        device: DeviceIndex,
        pre: u64,
        reserved: u64,
    ) {
        self.with_pools(|v| {
            let e = entry(v, key, device);
            e.charged += pre;
            e.generation += 1;
            if reserved > e.charged {
                ledger.force_charge(device, reserved - e.charged);
                e.charged = reserved;
            }
        })
    }

    /// Sets a pool's charge to what it reserves now; returns whether that released memory.
    pub fn set_pool(
        &self,
        ledger: &dyn Ledger,
        key: PoolKey,
        device: DeviceIndex,
        reserved: u64,
    ) -> bool {
        self.settle_pool(ledger, key, device, reserved, None)
    }

    /// [`Self::set_pool`] with a reading taken at `generation` of the entry: if an allocation
    /// settled into the charge since, the reading may predate it and is used only to raise the
    /// charge, never to release.
    fn settle_pool(
        &self,
        ledger: &dyn Ledger,
        key: PoolKey,
        device: DeviceIndex,
        reserved: u64,
        generation: Option<u64>,
    ) -> bool {
        self.with_pools(|v| {
            let e = entry(v, key, device);
            if reserved > e.charged {
                ledger.force_charge(device, reserved - e.charged);
                e.charged = reserved;
                return false;
            }
            if generation.is_some_and(|g| g != e.generation) {
                return false;
            }
            let released = reserved < e.charged;
            ledger.release(device, e.charged - reserved);
            e.charged = reserved;
            released
        })
    }

    /// The entry's generation now (0 for a pool with no entry yet).
    fn generation(&self, key: PoolKey) -> u64 {
        self.with_pools(|v| v.iter().find(|e| e.key == key).map_or(0, |e| e.generation))
    }

    /// Re-reads the pool `key` of `device` and corrects its charge (a reading that an
    /// allocation overtook releases nothing: `Self::settle_pool`).
    pub fn refresh_pool<D: Driver + ?Sized>(
        &self,
        ledger: &dyn Ledger,
        driver: &D,
        key: PoolKey,
        device: DeviceIndex,
    ) -> bool {
        let generation = self.generation(key);
        match reserved_now(driver, key) {
            Some(reserved) => self.settle_pool(ledger, key, device, reserved, Some(generation)),
            None => false,
        }
    }

    /// A pool is destroyed. The driver frees what it reserves beyond its live allocations now,
    /// and those when they are freed: the charge is brought down to `used` (what was live just
    /// before the destroy; the whole charge where the driver could not say), kept as a retired
    /// pool's, and released by [`Self::retired_freed`].
    pub fn pool_destroyed(&self, ledger: &dyn Ledger, key: PoolKey, used: Option<u64>) {
        let Some(e) = self.with_pools(|v| {
            let i = v.iter().position(|e| e.key == key)?;
            Some(v.swap_remove(i))
        }) else {
            return;
        };
        let keep = used.map_or(e.charged, |u| u.min(e.charged));
        ledger.release(e.device, e.charged - keep);
        if let (PoolKey::Pool(p), true) = (key, keep > 0) {
            let mut r = self.retired.lock().unwrap_or_else(|e| e.into_inner());
            r.push((p, e.device, keep));
            self.any_retired.store(true, Ordering::Release);
        }
    }

    /// Whether some destroyed pool still has live allocations charged (one load).
    #[inline]
    pub fn any_retired(&self) -> bool {
        self.any_retired.load(Ordering::Acquire)
    }

    /// An allocation of `bytes` from `pool` was freed: if the pool was destroyed, that much of
    /// its kept charge goes.
    pub fn retired_freed(&self, ledger: &dyn Ledger, pool: CUmemoryPool, bytes: u64) {
        let mut r = self.retired.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = r.iter().position(|e| e.0 == pool as usize) {
            let take = bytes.min(r[i].2);
            ledger.release(r[i].1, take);
            r[i].2 -= take;
            if r[i].2 == 0 {
                r.swap_remove(i);
            }
        }
        self.any_retired.store(!r.is_empty(), Ordering::Release);
    }

    /// A pool was made where vgpu charges nothing now: on device `ordinal` without a limit, or
    /// in host memory (`None`).
    pub fn pool_uncharged(&self, pool: CUmemoryPool, ordinal: Option<CUdevice>) {
        let mut v = self
            .uncharged_pools
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        v.retain(|e| e.0 != pool as usize);
        v.push((pool as usize, ordinal));
    }

    /// Where an uncharged pool was made: `None` if it is not one, `Some(None)` for host
    /// memory, `Some(Some(ordinal))` for a device that had no limit.
    pub fn uncharged_at(&self, pool: CUmemoryPool) -> Option<Option<CUdevice>> {
        let v = self
            .uncharged_pools
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        v.iter().find(|e| e.0 == pool as usize).map(|e| e.1)
    }

    /// A pool is destroyed, or charged from now on: no longer listed as uncharged.
    pub fn forget_uncharged(&self, pool: CUmemoryPool) {
        let mut v = self
            .uncharged_pools
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        v.retain(|e| e.0 != pool as usize);
    }

    /// The device a pool was recorded on.
    pub fn pool_device(&self, key: PoolKey) -> Option<DeviceIndex> {
        self.with_pools(|v| v.iter().find(|e| e.key == key).map(|e| e.device))
    }

    /// Re-reads every pool of `device` (and its graph pool) and corrects their charges: called
    /// before a denial, so memory pools released on synchronisation is available again.
    /// Returns whether any pool gave memory back.
    pub fn refresh_device<D: Driver + ?Sized>(
        &self,
        ledger: &dyn Ledger,
        driver: &D,
        device: DeviceIndex,
    ) -> bool {
        let keys: Vec<PoolKey> = self.with_pools(|v| {
            v.iter()
                .filter(|e| e.device == device)
                .map(|e| e.key)
                .collect()
        });
        let mut released = false;
        for key in keys {
            released |= self.refresh_pool(ledger, driver, key, device);
        }
        released
    }

    /// One stream-ordered allocation of `size` bytes from `pool` on `device`: charges the growth
    /// it can cause, runs `alloc`, and settles the pool's charge. Without a pool (`None`: the
    /// driver could not name it) or its attributes, the requested size is charged (fail
    /// closed).
    // The ledger, the driver, the request (device, pool, size) and the two steps it runs: each
    // is one plain value, and a struct for them would only be taken apart again here.
    #[allow(clippy::too_many_arguments)]
    pub fn pool_alloc<D: Driver + ?Sized>(
        &self,
        ledger: &dyn Ledger,
        driver: &D,
        device: DeviceIndex,
        pool: CUmemoryPool,
        size: u64,
        charge: impl FnOnce(u64) -> Result<(), Denied>,
        alloc: impl FnOnce() -> CUresult,
    ) -> CUresult {
        let growth = match (driver.pool_reserved(pool), driver.pool_used(pool)) {
            (Some(r), Some(u)) => u.saturating_add(size).saturating_sub(r),
            _ => size,
        };
        if charge(growth).is_err() {
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        let r = alloc();
        if r != CUDA_SUCCESS {
            ledger.release(device, growth);
            return r;
        }
        let now = driver.pool_reserved(pool).unwrap_or(0);
        self.pool_allocated(ledger, PoolKey::pool(pool), device, growth, now);
        r
    }

    /// An executable graph was instantiated whose memory nodes allocate `need[d]` bytes on
    /// ledger device `d` at each launch, with the instantiation `flags` (a graph without any
    /// memory node is not recorded).
    pub fn graph_instantiated(&self, exec: CUgraphExec, need: Box<[u64]>, flags: u64) {
        let mut v = self.graphs.lock().unwrap_or_else(|e| e.into_inner());
        v.retain(|e| e.exec != exec as usize);
        if need.iter().any(|&b| b > 0) {
            v.push(GraphExec {
                exec: exec as usize,
                need,
                auto_free: flags & AUTO_FREE_ON_LAUNCH != 0,
                launched: false,
            });
        }
        self.any_graphs.store(!v.is_empty(), Ordering::Release);
    }

    /// An executable graph is gone.
    pub fn graph_destroyed(&self, exec: CUgraphExec) {
        if !self.any_graphs.load(Ordering::Acquire) {
            return;
        }
        let mut v = self.graphs.lock().unwrap_or_else(|e| e.into_inner());
        v.retain(|e| e.exec != exec as usize);
        self.any_graphs.store(!v.is_empty(), Ordering::Release);
    }

    /// Before a launch of `exec` (or an upload, `launch` false: the pools grow as for a launch,
    /// nothing is allocated): charges, on each `limited` device its memory nodes allocate
    /// on, what the device's graph pool can grow by: its `used` plus what the nodes allocate,
    /// less what it reserves (all of what they allocate when the driver cannot say). An
    /// auto-free graph launched before frees its previous allocations first: up to what its
    /// nodes allocate is taken out of `used`. `Ok(None)`: a graph with no memory node (or not
    /// recorded), nothing charged. `Err`: a charge was refused, nothing stays charged, and the
    /// launch must not run.
    pub fn graph_launching<D: Driver + ?Sized>(
        &self,
        ledger: &dyn Ledger,
        driver: &D,
        exec: CUgraphExec,
        launch: bool,
        limited: impl Fn(DeviceIndex) -> bool,
        charge: impl Fn(DeviceIndex, u64) -> Result<(), Denied>,
    ) -> Result<Option<GraphCharge>, CUresult> {
        if !self.any_graphs.load(Ordering::Acquire) {
            return Ok(None);
        }
        let mut need = [0u64; GRAPH_DEVICES];
        let frees_own;
        {
            let mut v = self.graphs.lock().unwrap_or_else(|e| e.into_inner());
            let Some(g) = v.iter_mut().find(|e| e.exec == exec as usize) else {
                return Ok(None);
            };
            for (d, &b) in g.need.iter().enumerate().take(GRAPH_DEVICES) {
                need[d] = b;
            }
            frees_own = launch && g.auto_free && g.launched;
            g.launched |= launch;
        }
        let mut c = GraphCharge {
            growth: [0; GRAPH_DEVICES],
            uses: [false; GRAPH_DEVICES],
        };
        for (d, &need) in need.iter().enumerate() {
            if need == 0 || !limited(d) {
                continue;
            }
            c.uses[d] = true;
            let ordinal = CUdevice::try_from(d).ok();
            let growth = match (
                ordinal.and_then(|o| driver.graph_reserved(o)),
                ordinal.and_then(|o| driver.graph_used(o)),
            ) {
                (Some(r), Some(u)) => {
                    let u = if frees_own { u.saturating_sub(need) } else { u };
                    u.saturating_add(need).saturating_sub(r)
                }
                _ => need,
            };
            if charge(d, growth).is_err() {
                for (back, &bytes) in c.growth.iter().enumerate() {
                    if bytes > 0 {
                        ledger.release(back, bytes);
                    }
                }
                return Err(CUDA_ERROR_OUT_OF_MEMORY);
            }
            c.growth[d] = growth;
        }
        Ok(Some(c))
    }

    /// After a launch charged `c` up front: on success the charges belong to the devices' graph
    /// pools, whose charges are then brought to what they reserve; on failure they are released.
    pub fn graph_launched<D: Driver + ?Sized>(
        &self,
        ledger: &dyn Ledger,
        driver: &D,
        c: &GraphCharge,
        ok: bool,
    ) {
        for d in 0..GRAPH_DEVICES {
            if !c.uses[d] {
                continue;
            }
            if !ok {
                ledger.release(d, c.growth[d]);
                continue;
            }
            let key = PoolKey::Graph(d);
            let reserved = reserved_now(driver, key).unwrap_or(0);
            self.pool_allocated(ledger, key, d, c.growth[d], reserved);
            // The up-front charge was an upper bound: settle to what the pool reserves.
            self.refresh_pool(ledger, driver, key, d);
        }
    }

    /// What a new context on `device` is expected to take: this process's last trusted
    /// measurement there, else the configured default.
    pub fn context_estimate(&self, device: DeviceIndex) -> u64 {
        let v = self.context_sizes.lock().unwrap_or_else(|e| e.into_inner());
        v.iter()
            .find(|e| e.0 == device)
            .map_or(self.context_default, |e| e.1)
    }

    /// What a context whose creation was sampled as `sample` is charged: the trusted
    /// measurement (remembered for the device), else the estimate.
    pub fn context_figure(&self, device: DeviceIndex, sample: &ContextSample) -> u64 {
        let Some(bytes) = sample.trusted() else {
            return self.context_estimate(device);
        };
        let mut v = self.context_sizes.lock().unwrap_or_else(|e| e.into_inner());
        match v.iter_mut().find(|e| e.0 == device) {
            Some(e) => e.1 = bytes,
            None => v.push((device, bytes)),
        }
        bytes
    }

    /// Creates a context on `device` (GPU `uuid`) under the budget, charge first: the whole
    /// estimate is charged through `charge` before `create` runs (refused: `Err(OUT_OF_MEMORY)`,
    /// nothing created), the creation is sampled, and the charge settled to the figure
    /// ([`Accounting::context_figure`]); if the budget cannot hold the difference, `undo`
    /// destroys the context and everything is released. `Ok(bytes)`: the context exists and
    /// `bytes` are charged for it. `Err(r)`: no context, nothing charged.
    // The ledger, the driver, the device (index, uuid) and the three steps it runs: each is one
    // plain value, and a struct for them would only be taken apart again here.
    #[allow(clippy::too_many_arguments)]
    pub fn create_context<D: Driver + ?Sized>(
        &self,
        ledger: &dyn Ledger,
        driver: &D,
        device: DeviceIndex,
        uuid: &str,
        charge: impl Fn(u64) -> Result<(), Denied>,
        create: impl FnOnce() -> CUresult,
        undo: impl FnOnce(),
    ) -> Result<u64, CUresult> {
        // The whole estimate, or nothing: a context the budget cannot hold is never made (a
        // part of the estimate would let the driver create a context that does not fit, and
        // the GPU would hold it, over the limit, until the measurement refused it).
        let first = self.context_estimate(device);
        if charge(first).is_err() {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        let (r, sample) = ContextSample::take(driver, uuid, create);
        if r != CUDA_SUCCESS {
            ledger.release(device, first);
            return Err(r);
        }
        let bytes = self.context_figure(device, &sample);
        if bytes > first {
            if charge(bytes - first).is_err() {
                undo();
                ledger.release(device, first);
                return Err(CUDA_ERROR_OUT_OF_MEMORY);
            }
        } else {
            ledger.release(device, first - bytes);
        }
        Ok(bytes)
    }

    /// Records what a created context was charged.
    pub fn add_context(&self, ctx: CUcontext, device: DeviceIndex, bytes: u64) {
        let mut v = self.contexts.lock().unwrap_or_else(|e| e.into_inner());
        v.push((ctx as usize, device, bytes));
        self.created.store(v.len(), Ordering::Release);
    }

    /// Whether a context created with `cuCtxCreate*` is alive on `device` (one load while none
    /// is alive anywhere).
    pub fn has_context_on(&self, device: DeviceIndex) -> bool {
        if self.created.load(Ordering::Acquire) == 0 {
            return false;
        }
        let v = self.contexts.lock().unwrap_or_else(|e| e.into_inner());
        v.iter().any(|e| e.1 == device)
    }

    /// A context is gone: releases what it was charged.
    /// Returns the context's device if vgpu had charged it.
    pub fn context_destroyed(&self, ledger: &dyn Ledger, ctx: CUcontext) -> Option<DeviceIndex> {
        let taken = {
            let mut v = self.contexts.lock().unwrap_or_else(|e| e.into_inner());
            let taken = v
                .iter()
                .position(|e| e.0 == ctx as usize)
                .map(|i| v.swap_remove(i));
            self.created.store(v.len(), Ordering::Release);
            taken
        };
        let (_, device, bytes) = taken?;
        ledger.release(device, bytes);
        Some(device)
    }
}

/// Whether memory of `kind` dies with the context it was allocated in. VMM handles, graph
/// memory and stream-ordered allocations belong to the device (or its pools), not a context.
pub fn dies_with_context(kind: AllocKind) -> bool {
    matches!(
        kind,
        AllocKind::Plain
            | AllocKind::Pitch
            | AllocKind::Managed
            | AllocKind::Array
            | AllocKind::MipmappedArray
    )
}

/// Context `ctx` of `device` is gone (0: the device's primary context; `None`: every context
/// of the device, the last one this process knows of being gone): the driver freed the memory
/// allocated in it, so those charges are released and their records dropped. Returns the bytes
/// released.
pub fn release_context_memory(
    registry: &Registry,
    ledger: &dyn Ledger,
    device: DeviceIndex,
    ctx: Option<u64>,
) -> u64 {
    let mut released = 0;
    let dead = registry.drain_where(|rec| {
        rec.device == device && dies_with_context(rec.kind) && ctx.is_none_or(|c| rec.ctx == c)
    });
    for (_, rec) in dead {
        ledger.release(device, rec.bytes);
        released += rec.bytes;
    }
    released
}

fn entry(v: &mut Vec<Entry>, key: PoolKey, device: DeviceIndex) -> &mut Entry {
    let i = match v.iter().position(|e| e.key == key) {
        Some(i) => i,
        None => {
            v.push(Entry {
                key,
                device,
                charged: 0,
                generation: 0,
            });
            v.len() - 1
        }
    };
    &mut v[i]
}

#[cfg(test)]
pub(crate) mod fake {
    //! A driver for in-process tests: pools and NVML as plain numbers.
    use super::*;
    use std::cell::{Cell, RefCell};
    use std::collections::VecDeque;

    #[derive(Default)]
    pub struct FakeDriver {
        pub reserved: Cell<Option<u64>>,
        pub used: Cell<Option<u64>>,
        pub graph: Cell<Option<u64>>,
        pub graph_used: Cell<Option<u64>>,
        pub nvml: Cell<Option<u64>>,
        /// Values NVML reports next, in turn (then `nvml`).
        pub nvml_reads: RefCell<VecDeque<u64>>,
        pub device: Cell<Option<CUdevice>>,
        /// The streams the driver can place (handle, device): `cuStreamGetDevice`.
        pub streams: RefCell<Vec<(usize, CUdevice)>>,
        /// How often `cuStreamGetDevice` was asked.
        pub streams_asked: Cell<u32>,
    }

    impl Driver for FakeDriver {
        fn device_count(&self) -> Option<i32> {
            Some(1)
        }
        fn device_uuid(&self, _: CUdevice) -> Option<String> {
            Some("GPU-fake".into())
        }
        fn current_device(&self) -> Option<CUdevice> {
            self.device.get()
        }
        fn stream_device(&self, s: CUstream) -> Option<CUdevice> {
            self.streams_asked.set(self.streams_asked.get() + 1);
            let streams = self.streams.borrow();
            streams
                .iter()
                .find(|(h, _)| *h == s.addr())
                .map(|(_, d)| *d)
        }
        fn current_context(&self) -> Option<CUcontext> {
            None
        }
        fn set_current(&self, _: CUcontext) -> CUresult {
            CUDA_SUCCESS
        }
        fn synchronize(&self) -> CUresult {
            CUDA_SUCCESS
        }
        fn capturing(&self, _: CUstream) -> bool {
            false
        }
        fn event_create(&self) -> Option<CUevent> {
            None
        }
        fn event_record(&self, _: CUevent, _: CUstream) -> CUresult {
            CUDA_ERROR_NOT_SUPPORTED
        }
        fn event_done(&self, _: CUevent) -> Option<bool> {
            None
        }
        fn stream_idle(&self, _: CUstream) -> bool {
            true
        }
        fn event_elapsed(&self, _: CUevent, _: CUevent) -> Option<u64> {
            None
        }
        fn device_mem_pool(&self, _: CUdevice) -> Option<CUmemoryPool> {
            None
        }
        fn pool_reserved(&self, _: CUmemoryPool) -> Option<u64> {
            self.reserved.get()
        }
        fn pool_used(&self, _: CUmemoryPool) -> Option<u64> {
            self.used.get()
        }
        fn graph_reserved(&self, _: CUdevice) -> Option<u64> {
            self.graph.get()
        }
        fn graph_used(&self, _: CUdevice) -> Option<u64> {
            self.graph_used.get()
        }
        fn nvml_used(&self, _: &str) -> Option<u64> {
            self.nvml_reads
                .borrow_mut()
                .pop_front()
                .or_else(|| self.nvml.get())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::FakeDriver;
    use super::*;
    use std::cell::Cell;
    use vgpu_policy::ledger::LocalLedger;
    use vgpu_policy::registry::Record;

    const DEFAULT: u64 = 512 * MIB;
    const POOL: CUmemoryPool = 0x1000 as CUmemoryPool;

    fn alloc_ok(d: &FakeDriver, reserved_after: u64) -> impl FnOnce() -> CUresult + '_ {
        move || {
            d.reserved.set(Some(reserved_after));
            CUDA_SUCCESS
        }
    }

    #[test]
    fn a_pool_allocation_charges_its_growth_then_what_the_pool_reserves() {
        let l = LocalLedger::new(&[Some(100 * MIB)]);
        let (a, d) = (Accounting::default(), FakeDriver::default());
        d.reserved.set(Some(0));
        d.used.set(Some(0));
        let charge = |b| l.try_charge(0, b);
        // 10 MiB asked; the pool reserves 32 MiB (its granularity).
        let r = a.pool_alloc(&l, &d, 0, POOL, 10 * MIB, charge, alloc_ok(&d, 32 * MIB));
        assert_eq!(r, CUDA_SUCCESS);
        assert_eq!(l.used(0), 32 * MIB);
        // 10 MiB more fits in what the pool holds: no growth.
        d.used.set(Some(10 * MIB));
        let r = a.pool_alloc(&l, &d, 0, POOL, 10 * MIB, charge, alloc_ok(&d, 32 * MIB));
        assert_eq!(r, CUDA_SUCCESS);
        assert_eq!(l.used(0), 32 * MIB);
        // Destroyed with 10 MiB still live: that stays charged until it is freed.
        a.pool_destroyed(&l, PoolKey::pool(POOL), Some(10 * MIB));
        assert_eq!(l.used(0), 10 * MIB);
        assert!(a.any_retired());
        a.retired_freed(&l, POOL, 10 * MIB);
        assert_eq!(l.used(0), 0);
        assert!(!a.any_retired());
    }

    #[test]
    fn a_pool_the_driver_cannot_describe_is_charged_the_requested_size() {
        let l = LocalLedger::new(&[Some(100 * MIB)]);
        let (a, d) = (Accounting::default(), FakeDriver::default());
        let charge = |b| l.try_charge(0, b);
        let r = a.pool_alloc(&l, &d, 0, POOL, 60 * MIB, charge, || CUDA_SUCCESS);
        assert_eq!(r, CUDA_SUCCESS);
        assert_eq!(l.used(0), 60 * MIB);
        let r = a.pool_alloc(&l, &d, 0, POOL, 60 * MIB, charge, || CUDA_SUCCESS);
        assert_eq!(r, CUDA_ERROR_OUT_OF_MEMORY);
        assert_eq!(l.used(0), 60 * MIB);
    }

    #[test]
    fn a_failed_pool_allocation_releases_its_charge() {
        let l = LocalLedger::new(&[Some(100 * MIB)]);
        let (a, d) = (Accounting::default(), FakeDriver::default());
        d.reserved.set(Some(0));
        d.used.set(Some(0));
        let r = a.pool_alloc(
            &l,
            &d,
            0,
            POOL,
            10 * MIB,
            |b| l.try_charge(0, b),
            || CUDA_ERROR_OUT_OF_MEMORY,
        );
        assert_eq!(r, CUDA_ERROR_OUT_OF_MEMORY);
        assert_eq!(l.used(0), 0);
    }

    #[test]
    fn a_denied_charge_rereads_the_pools_and_retries_once() {
        let l = LocalLedger::new(&[Some(100 * MIB)]);
        let (a, d) = (Accounting::default(), FakeDriver::default());
        a.set_pool(&l, PoolKey::pool(POOL), 0, 80 * MIB);
        assert_eq!(l.used(0), 80 * MIB);
        // The pool still holds its 80 MiB: denied.
        d.reserved.set(Some(80 * MIB));
        assert!(a.charge(&l, &d, 0, 50 * MIB).is_err());
        // The pool gave 60 MiB back at a synchronisation: the retry fits.
        d.reserved.set(Some(20 * MIB));
        assert!(a.charge(&l, &d, 0, 50 * MIB).is_ok());
        assert_eq!(l.used(0), 70 * MIB);
    }

    #[test]
    fn graph_pools_are_reread_by_device() {
        let l = LocalLedger::new(&[Some(100 * MIB)]);
        let (a, d) = (Accounting::default(), FakeDriver::default());
        d.graph.set(Some(40 * MIB));
        a.refresh_pool(&l, &d, PoolKey::Graph(0), 0);
        assert_eq!(l.used(0), 40 * MIB);
        d.graph.set(Some(0));
        assert!(a.refresh_device(&l, &d, 0));
        assert_eq!(l.used(0), 0);
    }

    #[test]
    fn a_dead_context_releases_its_memory_but_not_the_devices() {
        let l = LocalLedger::new(&[Some(100 * MIB), Some(100 * MIB)]);
        let reg = Registry::new();
        // (key, device, bytes, kind, context: 0 the primary, 7 a created one)
        for (key, device, bytes, kind, ctx) in [
            (1, 0, 10 * MIB, AllocKind::Plain, 0),
            (2, 0, 20 * MIB, AllocKind::Array, 0),
            (3, 0, 30 * MIB, AllocKind::Vmm, 0),
            (4, 1, 5 * MIB, AllocKind::Plain, 0),
            (5, 0, 15 * MIB, AllocKind::Plain, 7),
        ] {
            l.try_charge(device, bytes).unwrap();
            reg.insert(
                key,
                Record {
                    device,
                    bytes,
                    kind,
                    ctx,
                },
            );
        }
        // The created context goes: only what was allocated in it.
        assert_eq!(release_context_memory(&reg, &l, 0, Some(7)), 15 * MIB);
        assert_eq!(l.used(0), 60 * MIB);
        // The primary goes: its plain and array memory, not the device's VMM memory.
        assert_eq!(release_context_memory(&reg, &l, 0, Some(0)), 30 * MIB);
        assert_eq!(l.used(0), 30 * MIB);
        assert_eq!(l.used(1), 5 * MIB);
        assert!(reg.get(1).is_none() && reg.get(2).is_none() && reg.get(5).is_none());
        assert!(reg.get(3).is_some() && reg.get(4).is_some());
    }

    fn ctx_accounting() -> Accounting {
        Accounting::new(DEFAULT)
    }

    /// Runs `create_context` on device 0 with NVML answering `reads` in turn (then `d.nvml`).
    fn create(
        a: &Accounting,
        l: &LocalLedger,
        d: &FakeDriver,
        reads: &[u64],
        created: &Cell<bool>,
    ) -> Result<u64, CUresult> {
        d.nvml_reads.borrow_mut().extend(reads.iter().copied());
        a.create_context(
            l,
            d,
            0,
            "GPU-fake",
            |b| l.try_charge(0, b),
            || {
                created.set(true);
                CUDA_SUCCESS
            },
            || created.set(false),
        )
    }

    #[test]
    fn a_quiet_device_measures_the_context_and_remembers_it() {
        let l = LocalLedger::new(&[Some(4096 * MIB)]);
        let (a, d) = (ctx_accounting(), FakeDriver::default());
        let made = Cell::new(false);
        let got = create(&a, &l, &d, &[5 * MIB, 5 * MIB, 308 * MIB, 308 * MIB], &made);
        assert_eq!(got, Ok(303 * MIB));
        assert!(made.get());
        assert_eq!(l.used(0), 303 * MIB);
        assert_eq!(a.context_estimate(0), 303 * MIB);
        a.add_context(0x77 as CUcontext, 0, 303 * MIB);
        a.context_destroyed(&l, 0x78 as CUcontext);
        assert_eq!(l.used(0), 303 * MIB);
        a.context_destroyed(&l, 0x77 as CUcontext);
        assert_eq!(l.used(0), 0);
    }

    #[test]
    fn a_neighbours_frees_and_allocations_never_make_a_context_free_or_absurd() {
        let l = LocalLedger::new(&[Some(1024 * MIB)]);
        let (a, d) = (ctx_accounting(), FakeDriver::default());
        let made = Cell::new(false);
        // The neighbour freed 1 GiB during the creation: the difference is negative.
        let got = create(
            &a,
            &l,
            &d,
            &[2048 * MIB, 2048 * MIB, 1327 * MIB, 1327 * MIB],
            &made,
        );
        assert_eq!(got, Ok(DEFAULT));
        l.release(0, DEFAULT);
        // It freed 256 MiB: 47 MiB, below the floor.
        let got = create(
            &a,
            &l,
            &d,
            &[559 * MIB, 559 * MIB, 606 * MIB, 606 * MIB],
            &made,
        );
        assert_eq!(got, Ok(DEFAULT));
        l.release(0, DEFAULT);
        // It allocated 2 GiB: 2.3 GiB, above the ceiling; the start does not fail.
        let got = create(&a, &l, &d, &[0, 0, 2351 * MIB, 2351 * MIB], &made);
        assert_eq!(got, Ok(DEFAULT));
        l.release(0, DEFAULT);
        // It was busy around the edges (the pairs disagree): not trusted either.
        let got = create(&a, &l, &d, &[0, 64 * MIB, 303 * MIB, 303 * MIB], &made);
        assert_eq!(got, Ok(DEFAULT));
        l.release(0, DEFAULT);
        // Without NVML: the estimate.
        assert_eq!(create(&a, &l, &d, &[], &made), Ok(DEFAULT));
        l.release(0, DEFAULT);
        // Once a quiet creation measured the device, that figure stands in for noisy ones.
        assert_eq!(
            create(&a, &l, &d, &[0, 0, 303 * MIB, 303 * MIB], &made),
            Ok(303 * MIB)
        );
        l.release(0, 303 * MIB);
        let got = create(&a, &l, &d, &[0, 0, 4096 * MIB, 4096 * MIB], &made);
        assert_eq!(got, Ok(303 * MIB));
    }

    #[test]
    fn a_context_the_budget_cannot_hold_is_refused_before_it_is_created() {
        let l = LocalLedger::new(&[Some(1024 * MIB)]);
        let (a, d) = (ctx_accounting(), FakeDriver::default());
        let made = Cell::new(false);
        // 424 MiB left, less than the 512 MiB estimate: refused, and the driver is never
        // called (it once charged the 424 MiB left and created the context).
        l.try_charge(0, 600 * MIB).unwrap();
        let got = create(&a, &l, &d, &[0, 0, 303 * MIB, 303 * MIB], &made);
        assert_eq!(got, Err(CUDA_ERROR_OUT_OF_MEMORY));
        assert!(!made.get());
        assert_eq!(l.used(0), 600 * MIB);
        // Nothing left: refused too.
        let full = LocalLedger::new(&[Some(1024 * MIB)]);
        full.try_charge(0, 1024 * MIB).unwrap();
        let got = create(&a, &full, &d, &[0, 0, 303 * MIB, 303 * MIB], &made);
        assert_eq!(got, Err(CUDA_ERROR_OUT_OF_MEMORY));
        assert!(!made.get());
        assert_eq!(full.used(0), 1024 * MIB);
        // Concurrent starters each hold their charge while creating: the first takes the
        // estimate, the second finds 109 MiB left and never creates.
        let l = LocalLedger::new(&[Some(1024 * MIB)]);
        let (fresh, d) = (ctx_accounting(), FakeDriver::default());
        l.try_charge(0, 403 * MIB).unwrap();
        let second = Cell::new(false);
        let mut order = Vec::new();
        let r = fresh.create_context(
            &l,
            &d,
            0,
            "GPU-fake",
            |b| l.try_charge(0, b),
            || {
                order.push(l.used(0));
                let r2 = fresh.create_context(
                    &l,
                    &d,
                    0,
                    "GPU-fake",
                    |b| l.try_charge(0, b),
                    || {
                        second.set(true);
                        CUDA_SUCCESS
                    },
                    || {},
                );
                assert_eq!(r2, Err(CUDA_ERROR_OUT_OF_MEMORY));
                CUDA_SUCCESS
            },
            || {},
        );
        assert_eq!(order, vec![915 * MIB]);
        assert!(!second.get(), "the second starter created a context");
        assert_eq!(r, Ok(DEFAULT));
        assert_eq!(l.used(0), 915 * MIB);
    }

    #[test]
    fn a_context_bigger_than_the_room_left_is_destroyed_and_nothing_stays_charged() {
        let l = LocalLedger::new(&[Some(1024 * MIB)]);
        let (a, d) = (ctx_accounting(), FakeDriver::default());
        l.try_charge(0, 400 * MIB).unwrap();
        let made = Cell::new(false);
        // 624 MiB left: the 512 MiB estimate fits, the measured 700 MiB does not.
        let got = create(&a, &l, &d, &[0, 0, 700 * MIB, 700 * MIB], &made);
        assert_eq!(got, Err(CUDA_ERROR_OUT_OF_MEMORY));
        assert!(!made.get(), "the context was not destroyed");
        assert_eq!(l.used(0), 400 * MIB);
    }

    #[test]
    fn a_graph_launch_is_charged_its_pools_growth_first_and_refused_whole() {
        // Two devices; the graph allocates 300 MiB on device 0 and 700 MiB on device 1, whose
        // graph pools reserve (and use) nothing yet (the fake reads no `used`: all of it is
        // growth). Device 1 has 600 MiB left: refused, and device 0 keeps nothing charged.
        let l = LocalLedger::new(&[Some(1024 * MIB), Some(600 * MIB)]);
        let (a, d) = (Accounting::new(0), FakeDriver::default());
        d.graph.set(Some(0));
        let exec = 0x77 as CUgraphExec;
        a.graph_instantiated(exec, vec![300 * MIB, 700 * MIB].into_boxed_slice(), 0);
        let got = a.graph_launching(&l, &d, exec, true, |_| true, |dev, b| l.try_charge(dev, b));
        assert_eq!(got, Err(CUDA_ERROR_OUT_OF_MEMORY));
        assert_eq!((l.used(0), l.used(1)), (0, 0));
        // 500 MiB on device 1 fits: charged before, then settled to what the pools reserve.
        a.graph_instantiated(exec, vec![300 * MIB, 500 * MIB].into_boxed_slice(), 0);
        let c = a
            .graph_launching(&l, &d, exec, true, |_| true, |dev, b| l.try_charge(dev, b))
            .unwrap()
            .expect("a graph with memory nodes");
        assert_eq!((l.used(0), l.used(1)), (300 * MIB, 500 * MIB));
        d.graph.set(Some(512 * MIB));
        a.graph_launched(&l, &d, &c, true);
        assert_eq!((l.used(0), l.used(1)), (512 * MIB, 512 * MIB));
        // A graph without memory nodes, or destroyed, charges nothing.
        a.graph_destroyed(exec);
        assert_eq!(
            a.graph_launching(&l, &d, exec, true, |_| true, |_, _| unreachable!()),
            Ok(None)
        );
    }

    #[test]
    fn an_auto_free_graph_s_replay_is_not_charged_its_previous_allocations() {
        // A graph of 600 MiB under a 1 GiB limit, launched once: its pool reserves and uses
        // 600 MiB (the program did not free them). Instantiated to free them at its next launch
        // (AUTO_FREE_ON_LAUNCH), the replay needs nothing new; without the flag the driver
        // would need another 600 MiB, which do not fit.
        let l = LocalLedger::new(&[Some(1024 * MIB)]);
        let d = FakeDriver::default();
        let exec = 0x99 as CUgraphExec;
        for (flags, fits) in [(AUTO_FREE_ON_LAUNCH, true), (0, false)] {
            let a = Accounting::new(0);
            a.graph_instantiated(exec, vec![600 * MIB].into_boxed_slice(), flags);
            d.graph.set(Some(0));
            d.graph_used.set(Some(0));
            let first =
                a.graph_launching(&l, &d, exec, true, |_| true, |dev, b| l.try_charge(dev, b));
            let c = first.unwrap().expect("a graph with memory nodes");
            d.graph.set(Some(600 * MIB));
            d.graph_used.set(Some(600 * MIB));
            a.graph_launched(&l, &d, &c, true);
            assert_eq!(l.used(0), 600 * MIB);
            let replay =
                a.graph_launching(&l, &d, exec, true, |_| true, |dev, b| l.try_charge(dev, b));
            assert_eq!(replay.is_ok(), fits, "flags {flags}");
            if let Ok(Some(c)) = replay {
                a.graph_launched(&l, &d, &c, true);
            }
            assert_eq!(l.used(0), 600 * MIB, "flags {flags}");
            // The next case starts from an empty budget.
            l.release(0, l.used(0));
        }
    }

    #[test]
    fn a_pool_reading_an_allocation_overtook_releases_nothing() {
        // A synchronising thread reads the pool (nothing reserved); meanwhile another thread
        // allocates 40 MiB from it and settles its charge; the stale reading must not release
        // that (before: it did, and the memory went uncharged until the next reading).
        let l = LocalLedger::new(&[Some(100 * MIB)]);
        let a = Accounting::default();
        let key = PoolKey::pool(POOL);
        a.set_pool(&l, key, 0, 0);
        let seen = a.generation(key);
        l.try_charge(0, 40 * MIB).unwrap();
        a.pool_allocated(&l, key, 0, 40 * MIB, 40 * MIB);
        assert!(!a.settle_pool(&l, key, 0, 0, Some(seen)));
        assert_eq!(l.used(0), 40 * MIB);
        // A reading taken after it does release.
        let now = a.generation(key);
        assert!(a.settle_pool(&l, key, 0, 0, Some(now)));
        assert_eq!(l.used(0), 0);
    }
}
