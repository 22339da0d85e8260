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
//! A context takes device memory of its own (about 0.5 GiB on an H200), measured as the change
//! in the device's used memory (NVML) across the call that creates it.
//!
//! Everything here is handed the ledger and a [`Driver`], so it is unit-tested in-process with a
//! fake driver (see the tests below).
use crate::driver::Driver;
use std::sync::Mutex;
use vgpu_policy::ledger::{Denied, Ledger, Slot};
use vgpu_policy::registry::{AllocKind, Registry};
use vgpu_sys::cuda::*;

/// What a pool charge is keyed by.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PoolKey {
    /// A `CUmemoryPool` handle.
    Pool(usize),
    /// The graph memory pool of a device.
    Graph(Slot),
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
    slot: Slot,
    charged: u64,
}

/// Pool and context charges of the process. Process-local locks, never held across a driver
/// call.
#[derive(Default)]
pub struct Accounting {
    pools: Mutex<Vec<Entry>>,
    contexts: Mutex<Vec<(usize, Slot, u64)>>,
}

/// Memory reserved by the pool `key` now, as the driver reports it.
fn reserved_now<D: Driver + ?Sized>(driver: &D, key: PoolKey) -> Option<u64> {
    match key {
        PoolKey::Pool(p) => driver.pool_reserved(p as CUmemoryPool),
        PoolKey::Graph(slot) => driver.graph_reserved(CUdevice::try_from(slot).ok()?),
    }
}

impl Accounting {
    fn with_pools<R>(&self, f: impl FnOnce(&mut Vec<Entry>) -> R) -> R {
        let mut v = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut v)
    }

    /// Charges `bytes` to `slot`; when that would pass the limit, first re-reads the pools of
    /// `slot` (they may have released memory at a synchronisation) and, only if that gave
    /// something back, retries once (one refusal counts once).
    pub fn charge<D: Driver + ?Sized>(
        &self,
        ledger: &dyn Ledger,
        driver: &D,
        slot: Slot,
        bytes: u64,
    ) -> Result<(), Denied> {
        match ledger.try_charge(slot, bytes) {
            Ok(()) => Ok(()),
            Err(d) => {
                if self.refresh_slot(ledger, driver, slot) {
                    ledger.try_charge(slot, bytes)
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
        slot: Slot,
        pre: u64,
        reserved: u64,
    ) {
        self.with_pools(|v| {
            let e = entry(v, key, slot);
            e.charged += pre;
            if reserved > e.charged {
                ledger.force_charge(slot, reserved - e.charged);
                e.charged = reserved;
            }
        })
    }

    /// Sets a pool's charge to what it reserves now; returns whether that released memory.
    pub fn set_pool(&self, ledger: &dyn Ledger, key: PoolKey, slot: Slot, reserved: u64) -> bool {
        self.with_pools(|v| {
            let e = entry(v, key, slot);
            let released = reserved < e.charged;
            if reserved > e.charged {
                ledger.force_charge(slot, reserved - e.charged);
            } else {
                ledger.release(slot, e.charged - reserved);
            }
            e.charged = reserved;
            released
        })
    }

    /// Re-reads the pool `key` of `slot` and corrects its charge.
    pub fn refresh_pool<D: Driver + ?Sized>(
        &self,
        ledger: &dyn Ledger,
        driver: &D,
        key: PoolKey,
        slot: Slot,
    ) {
        if let Some(reserved) = reserved_now(driver, key) {
            self.set_pool(ledger, key, slot, reserved);
        }
    }

    /// A pool is gone: its charge is released.
    pub fn forget_pool(&self, ledger: &dyn Ledger, key: PoolKey) {
        self.with_pools(|v| {
            if let Some(i) = v.iter().position(|e| e.key == key) {
                let e = v.swap_remove(i);
                ledger.release(e.slot, e.charged);
            }
        })
    }

    /// The slot a pool was recorded on.
    pub fn pool_slot(&self, key: PoolKey) -> Option<Slot> {
        self.with_pools(|v| v.iter().find(|e| e.key == key).map(|e| e.slot))
    }

    /// Re-reads every pool of `slot` (and its graph pool) and corrects their charges: called
    /// before a denial, so memory pools released on synchronisation is available again.
    /// Returns whether any pool gave memory back.
    pub fn refresh_slot<D: Driver + ?Sized>(
        &self,
        ledger: &dyn Ledger,
        driver: &D,
        slot: Slot,
    ) -> bool {
        let keys: Vec<PoolKey> =
            self.with_pools(|v| v.iter().filter(|e| e.slot == slot).map(|e| e.key).collect());
        let mut released = false;
        for key in keys {
            if let Some(reserved) = reserved_now(driver, key) {
                released |= self.set_pool(ledger, key, slot, reserved);
            }
        }
        released
    }

    /// One stream-ordered allocation of `size` bytes from `pool` on `slot`: charges the growth
    /// it can cause, runs `alloc`, and settles the pool's charge. Without a pool (`None`: the
    /// driver could not name it) or its attributes, the requested size is charged (fail
    /// closed).
    // The ledger, the driver, the request (slot, pool, size) and the two steps it runs: each
    // is one plain value, and a struct for them would only be taken apart again here.
    #[allow(clippy::too_many_arguments)]
    pub fn pool_alloc<D: Driver + ?Sized>(
        &self,
        ledger: &dyn Ledger,
        driver: &D,
        slot: Slot,
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
            ledger.release(slot, growth);
            return r;
        }
        let now = driver.pool_reserved(pool).unwrap_or(0);
        self.pool_allocated(ledger, PoolKey::pool(pool), slot, growth, now);
        r
    }

    /// Records what a created context was charged.
    pub fn add_context(&self, ctx: CUcontext, slot: Slot, bytes: u64) {
        let mut v = self.contexts.lock().unwrap_or_else(|e| e.into_inner());
        v.push((ctx as usize, slot, bytes));
    }

    /// Whether a context created with `cuCtxCreate*` is alive on `slot`.
    pub fn has_context_on(&self, slot: Slot) -> bool {
        let v = self.contexts.lock().unwrap_or_else(|e| e.into_inner());
        v.iter().any(|e| e.1 == slot)
    }

    /// A context is gone: releases what it was charged.
    /// Returns the context's slot if vgpu had charged it.
    pub fn context_destroyed(&self, ledger: &dyn Ledger, ctx: CUcontext) -> Option<Slot> {
        let taken = {
            let mut v = self.contexts.lock().unwrap_or_else(|e| e.into_inner());
            v.iter()
                .position(|e| e.0 == ctx as usize)
                .map(|i| v.swap_remove(i))
        };
        let (_, slot, bytes) = taken?;
        ledger.release(slot, bytes);
        Some(slot)
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

/// The last context of `slot` this process knows is gone (destroyed, reset, or its last
/// primary release): the driver freed the memory allocated in it, so its charges are released
/// and its records dropped. Returns the bytes released.
pub fn release_context_memory(registry: &Registry, ledger: &dyn Ledger, slot: Slot) -> u64 {
    let mut released = 0;
    for (key, rec) in registry.drain_slot(slot) {
        if dies_with_context(rec.kind) {
            ledger.release(slot, rec.bytes);
            released += rec.bytes;
        } else {
            registry.insert(key, rec);
        }
    }
    released
}

/// Runs `create` and returns its result with the device memory it took on the GPU `uuid`, as
/// NVML sees it (0, with one info line, when NVML cannot tell).
pub fn measured<D: Driver + ?Sized>(
    driver: &D,
    uuid: &str,
    create: impl FnOnce() -> CUresult,
) -> (CUresult, u64) {
    let before = driver.nvml_used(uuid);
    let r = create();
    let after = driver.nvml_used(uuid);
    let bytes = match (before, after) {
        (Some(b), Some(a)) => a.saturating_sub(b),
        _ => {
            crate::log::info(format_args!(
                "NVML unavailable: context reservation on {uuid} not measured"
            ));
            0
        }
    };
    (r, bytes)
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

#[cfg(test)]
pub(crate) mod fake {
    //! A driver for in-process tests: pools and NVML as plain numbers.
    use super::*;
    use std::cell::Cell;

    #[derive(Default)]
    pub struct FakeDriver {
        pub reserved: Cell<Option<u64>>,
        pub used: Cell<Option<u64>>,
        pub graph: Cell<Option<u64>>,
        pub nvml: Cell<Option<u64>>,
        pub device: Cell<Option<CUdevice>>,
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
        fn nvml_used(&self, _: &str) -> Option<u64> {
            self.nvml.get()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::FakeDriver;
    use super::*;
    use vgpu_policy::ledger::LocalLedger;
    use vgpu_policy::registry::Record;

    const MIB: u64 = 1 << 20;
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
        a.forget_pool(&l, PoolKey::pool(POOL));
        assert_eq!(l.used(0), 0);
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
        assert!(a.refresh_slot(&l, &d, 0));
        assert_eq!(l.used(0), 0);
    }

    #[test]
    fn a_dead_context_releases_its_memory_but_not_the_devices() {
        let l = LocalLedger::new(&[Some(100 * MIB), Some(100 * MIB)]);
        let reg = Registry::new();
        for (key, slot, bytes, kind) in [
            (1, 0, 10 * MIB, AllocKind::Plain),
            (2, 0, 20 * MIB, AllocKind::Array),
            (3, 0, 30 * MIB, AllocKind::Vmm),
            (4, 1, 5 * MIB, AllocKind::Plain),
        ] {
            l.try_charge(slot, bytes).unwrap();
            reg.insert(key, Record { slot, bytes, kind });
        }
        assert_eq!(release_context_memory(&reg, &l, 0), 30 * MIB);
        assert_eq!(l.used(0), 30 * MIB);
        assert_eq!(l.used(1), 5 * MIB);
        assert!(reg.get(1).is_none() && reg.get(2).is_none());
        assert_eq!(reg.get(3).map(|r| r.bytes), Some(30 * MIB));
        assert!(reg.get(4).is_some());
    }

    #[test]
    fn contexts_are_measured_and_released_when_destroyed() {
        let l = LocalLedger::new(&[Some(100 * MIB)]);
        let (a, d) = (Accounting::default(), FakeDriver::default());
        d.nvml.set(Some(5 * MIB));
        let (r, bytes) = measured(&d, "GPU-fake", || {
            d.nvml.set(Some(12 * MIB));
            CUDA_SUCCESS
        });
        assert_eq!((r, bytes), (CUDA_SUCCESS, 7 * MIB));
        let ctx = 0x77 as CUcontext;
        l.try_charge(0, bytes).unwrap();
        a.add_context(ctx, 0, bytes);
        a.context_destroyed(&l, 0x78 as CUcontext);
        assert_eq!(l.used(0), 7 * MIB);
        a.context_destroyed(&l, ctx);
        assert_eq!(l.used(0), 0);
        // Without NVML nothing is measured.
        d.nvml.set(None);
        assert_eq!(measured(&d, "GPU-fake", || CUDA_SUCCESS).1, 0);
    }
}
