//! Stream-ordered memory pools: default/current/created pools, their attributes and trimming,
//! `cuMemAllocAsync`/`cuMemFreeAsync`.
use vgpu_sys::cuda::*;

use super::{ADDR_ALIGN, Alloc, AllocKind, GRANULE, Model, R, round_up};

/// A stream-ordered memory pool.
#[derive(Clone, Debug, Default)]
pub struct Pool {
    pub ordinal: usize,
    pub reserved: u64,
    pub used: u64,
    pub reserved_high: u64,
    pub used_high: u64,
    pub release_threshold: u64,
    pub is_default: bool,
    pub destroyed: bool,
    pub reuse: [i32; 3],
}

impl Model {
    /// `cuDeviceGetDefaultMemPool`.
    pub fn default_pool(&self, dev: i32) -> R<u64> {
        Ok(self.default_pool[self.ordinal(dev)?])
    }

    /// `cuDeviceGetMemPool`.
    pub fn current_pool(&self, dev: i32) -> R<u64> {
        Ok(self.current_pool[self.ordinal(dev)?])
    }

    /// `cuDeviceSetMemPool`: `pool` must belong to `dev`.
    pub fn set_current_pool(&mut self, dev: i32, pool: u64) -> R<()> {
        let o = self.ordinal(dev)?;
        match self.pools.get(&pool) {
            Some(p) if !p.destroyed && p.ordinal == o => {
                self.current_pool[o] = pool;
                Ok(())
            }
            Some(_) => Err(CUDA_ERROR_INVALID_DEVICE),
            None => Err(CUDA_ERROR_INVALID_VALUE),
        }
    }

    /// `cuMemPoolCreate` on `location` (must be a device).
    pub fn pool_create(&mut self, location: CUmemLocation) -> R<u64> {
        if location.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        let o = self.ordinal(location.id)?;
        let h = self.handle();
        self.pools.insert(
            h,
            Pool {
                ordinal: o,
                reuse: [1, 1, 1],
                ..Pool::default()
            },
        );
        Ok(h)
    }

    fn live_pool(&self, h: u64) -> R<&Pool> {
        self.pools
            .get(&h)
            .filter(|p| !p.destroyed)
            .ok_or(CUDA_ERROR_INVALID_VALUE)
    }

    /// Pool statistics (for tests and attributes).
    pub fn pool(&self, h: u64) -> Option<&Pool> {
        self.pools.get(&h)
    }

    /// `cuMemPoolDestroy`: unused memory goes back at once, the rest as it is freed. A
    /// device's current pool reverts to the default pool.
    pub fn pool_destroy(&mut self, h: u64) -> R<()> {
        let p = self.live_pool(h)?;
        if p.is_default {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let o = p.ordinal;
        if self.current_pool[o] == h {
            self.current_pool[o] = self.default_pool[o];
        }
        if let Some(p) = self.pools.get_mut(&h) {
            p.destroyed = true;
        }
        self.pool_shrink(h, 0);
        Ok(())
    }

    /// Shrinks pool `h`'s reservation to `max(used, keep)` rounded up to 2 MiB, if lower.
    pub(super) fn pool_shrink(&mut self, h: u64, keep: u64) {
        let Some(p) = self.pools.get_mut(&h) else {
            return;
        };
        let target = round_up(p.used.max(keep), GRANULE);
        if target < p.reserved {
            let give = p.reserved - target;
            p.reserved = target;
            let (o, gone) = (p.ordinal, p.destroyed && p.used == 0);
            self.uncharge(o, give);
            if gone {
                self.pools.remove(&h);
            }
        } else if p.destroyed && p.used == 0 && p.reserved == 0 {
            self.pools.remove(&h);
        }
    }

    /// `cuMemPoolTrimTo`.
    pub fn pool_trim_to(&mut self, h: u64, keep: u64) -> R<()> {
        self.live_pool(h)?;
        self.pool_shrink(h, keep);
        Ok(())
    }

    /// `cuMemPoolGetAttribute`: the value as u64 (int attributes are widened).
    pub fn pool_get_attr(&self, h: u64, attr: CUmemPool_attribute) -> R<u64> {
        let p = self.live_pool(h)?;
        Ok(match attr {
            1..=3 => p.reuse[attr as usize - 1] as u64,
            CU_MEMPOOL_ATTR_RELEASE_THRESHOLD => p.release_threshold,
            CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT => p.reserved,
            CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH => p.reserved_high,
            CU_MEMPOOL_ATTR_USED_MEM_CURRENT => p.used,
            CU_MEMPOOL_ATTR_USED_MEM_HIGH => p.used_high,
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        })
    }

    /// `cuMemPoolSetAttribute`: the threshold, the reuse flags, or a reset of a high mark
    /// (value must be 0).
    pub fn pool_set_attr(&mut self, h: u64, attr: CUmemPool_attribute, value: u64) -> R<()> {
        self.live_pool(h)?;
        let Some(p) = self.pools.get_mut(&h) else {
            return Err(CUDA_ERROR_INVALID_VALUE);
        };
        match attr {
            1..=3 => p.reuse[attr as usize - 1] = i32::from(value != 0),
            CU_MEMPOOL_ATTR_RELEASE_THRESHOLD => p.release_threshold = value,
            CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH if value == 0 => p.reserved_high = p.reserved,
            CU_MEMPOOL_ATTR_USED_MEM_HIGH if value == 0 => p.used_high = p.used,
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
        Ok(())
    }

    /// `cuMemAllocAsync` (pool `None`: the stream device's current pool) and
    /// `cuMemAllocFromPoolAsync`.
    pub fn alloc_async(
        &mut self,
        ctx: Option<u64>,
        size: u64,
        pool: Option<u64>,
        stream: u64,
    ) -> R<u64> {
        let (k, so) = self.skey(ctx, stream)?;
        if size == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if let Some(g) = self.tl(k).capture {
            // Captured: a graph mem-alloc node on the stream's device.
            let loc = CUmemLocation {
                type_: CU_MEM_LOCATION_TYPE_DEVICE,
                id: so as i32,
            };
            return self
                .graph_add_alloc(g, &[], loc, size)
                .map(|(_, dptr)| dptr);
        }
        let ph = match pool {
            Some(h) => h,
            None => self.current_pool[so],
        };
        let p = self.live_pool(ph)?;
        let (o, free) = (p.ordinal, p.reserved - p.used);
        let grow = if free >= size {
            0
        } else {
            round_up(size - free, GRANULE)
        };
        let addr = self.high_range(size, ADDR_ALIGN)?;
        self.charge(o, grow)?;
        if let Some(p) = self.pools.get_mut(&ph) {
            p.reserved += grow;
            p.used += size;
            p.reserved_high = p.reserved_high.max(p.reserved);
            p.used_high = p.used_high.max(p.used);
        }
        self.allocs.insert(
            addr,
            Alloc {
                size,
                ordinal: o,
                kind: AllocKind::Pool { pool: ph },
            },
        );
        Ok(addr)
    }

    /// `cuMemFreeAsync`.
    pub fn free_async(&mut self, ctx: Option<u64>, ptr: u64, stream: u64) -> R<()> {
        let (k, _) = self.skey(ctx, stream)?;
        if let Some(g) = self.tl(k).capture {
            // Captured: a graph mem-free node.
            return self.graph_add_free(g, &[], ptr).map(|_| ());
        }
        self.mem_free(ptr)
    }
}
