//! Plain memory: `cuMemAlloc*`, pitched and managed allocations, frees and address ranges.
use vgpu_sys::cuda::*;

use super::{ADDR_ALIGN, Alloc, AllocKind, Model, PITCH_ALIGN, R, round_up};

impl Model {
    /// `cuMemGetInfo*`: (free, total) of the current context's device.
    pub fn mem_info(&self, ctx: Option<u64>) -> R<(u64, u64)> {
        let o = self.ctx_ordinal(ctx)?;
        let total = self.cfg.mem;
        Ok((
            total.saturating_sub(self.device_used(self.phys_of(o))),
            total,
        ))
    }

    /// `cuMemAlloc*`/`cuMemAllocManaged`: `size` bytes on the current device.
    pub fn mem_alloc(&mut self, ctx: Option<u64>, size: u64, low: bool) -> R<u64> {
        let o = self.ctx_ordinal(ctx)?;
        if size == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let h = ctx.unwrap_or_default();
        let addr = if low {
            if size > u64::from(u32::MAX) {
                return Err(CUDA_ERROR_OUT_OF_MEMORY);
            }
            self.low_range(size)?
        } else {
            self.high_range(size, ADDR_ALIGN)?
        };
        self.charge(o, size)?;
        self.allocs.insert(
            addr,
            Alloc {
                size,
                ordinal: o,
                kind: AllocKind::Plain { ctx: h, low },
            },
        );
        Ok(addr)
    }

    /// `cuMemAllocPitch*`: pitch is `width` rounded up to 512; charges `pitch × height`.
    pub fn mem_alloc_pitch(
        &mut self,
        ctx: Option<u64>,
        width: u64,
        height: u64,
        elem: u64,
        low: bool,
    ) -> R<(u64, u64)> {
        self.ctx_ordinal(ctx)?;
        if width == 0 || height == 0 || !matches!(elem, 4 | 8 | 16) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let pitch = round_up(width, PITCH_ALIGN);
        let size = pitch.checked_mul(height).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
        let addr = self.mem_alloc(ctx, size, low)?;
        Ok((addr, pitch))
    }

    /// `cuMemFree*` (and the release half of `cuMemFreeAsync`): returns the allocation at
    /// exactly `ptr` to wherever it came from.
    pub fn mem_free(&mut self, ptr: u64) -> R<()> {
        let a = self.allocs.remove(&ptr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        match a.kind {
            AllocKind::Plain { .. } => self.uncharge(a.ordinal, a.size),
            AllocKind::Pool { pool } => {
                if let Some(p) = self.pools.get_mut(&pool) {
                    p.used = p.used.saturating_sub(a.size);
                    if p.destroyed {
                        self.pool_shrink(pool, 0);
                    }
                }
            }
            AllocKind::Graph => {
                let g = &mut self.graph_pools[a.ordinal];
                g.used = g.used.saturating_sub(a.size);
            }
        }
        Ok(())
    }

    /// Is `ptr` a live allocation (of any kind) that a free accepts?
    pub fn alloc_at(&self, ptr: u64) -> Option<Alloc> {
        self.allocs.get(&ptr).copied()
    }

    /// `cuMemGetAddressRange*`: base and size of the allocation or mapping containing `ptr`.
    pub fn address_range(&self, ptr: u64) -> R<(u64, u64)> {
        if let Some((&base, a)) = self.allocs.range(..=ptr).next_back()
            && ptr < base.saturating_add(a.size)
        {
            return Ok((base, a.size));
        }
        if let Some((&base, m)) = self.mappings.range(..=ptr).next_back()
            && ptr < base.saturating_add(m.size)
        {
            return Ok((base, m.size));
        }
        Err(CUDA_ERROR_NOT_FOUND)
    }
}
