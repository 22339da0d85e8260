//! Virtual memory management: `cuMemCreate`, reservations, mappings and releases.
use vgpu_sys::cuda::*;

use super::{GRANULE, Model, R};

/// Physical memory of `cuMemCreate`.
#[derive(Clone, Debug)]
pub struct PhysMem {
    pub ordinal: usize,
    pub size: u64,
    pub released: bool,
    pub maps: u32,
}

/// One `cuMemMap` mapping.
#[derive(Clone, Copy, Debug)]
pub struct Mapping {
    pub size: u64,
    pub handle: u64,
}

impl Model {
    /// `cuMemCreate`: `size` (a multiple of 2 MiB) bytes on `location`, charged at once.
    pub fn vmm_create(&mut self, size: u64, location: CUmemLocation) -> R<u64> {
        if location.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        let o = self.ordinal(location.id)?;
        if size == 0 || !size.is_multiple_of(GRANULE) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        self.charge(o, size)?;
        let h = self.handle();
        self.phys.insert(
            h,
            PhysMem {
                ordinal: o,
                size,
                released: false,
                maps: 0,
            },
        );
        Ok(h)
    }

    /// The physical allocation behind a `cuMemCreate` handle.
    pub fn vmm_handle(&self, h: u64) -> R<&PhysMem> {
        self.phys
            .get(&h)
            .filter(|p| !p.released)
            .ok_or(CUDA_ERROR_INVALID_VALUE)
    }

    /// Frees physical memory `h` if it is released and no longer mapped.
    fn vmm_maybe_free(&mut self, h: u64) {
        if let Some(p) = self.phys.get(&h)
            && p.released
            && p.maps == 0
        {
            let (o, size) = (p.ordinal, p.size);
            self.phys.remove(&h);
            self.uncharge(o, size);
        }
    }

    /// `cuMemRelease`.
    pub fn vmm_release(&mut self, h: u64) -> R<()> {
        self.vmm_handle(h)?;
        if let Some(p) = self.phys.get_mut(&h) {
            p.released = true;
        }
        self.vmm_maybe_free(h);
        Ok(())
    }

    /// `cuMemAddressReserve` (the address hint is ignored).
    pub fn vmm_reserve(&mut self, size: u64, align: u64) -> R<u64> {
        if size == 0 || !size.is_multiple_of(GRANULE) || (align != 0 && !align.is_power_of_two()) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let start = self.high_range(size, align.max(GRANULE))?;
        self.reservations.insert(start, size);
        Ok(start)
    }

    /// `cuMemAddressFree`: `ptr`/`size` must name a whole reservation; mappings inside it are
    /// dropped.
    pub fn vmm_address_free(&mut self, ptr: u64, size: u64) -> R<()> {
        if self.reservations.get(&ptr) != Some(&size) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        self.reservations.remove(&ptr);
        self.unmap_range(ptr, size);
        Ok(())
    }

    /// `cuMemMap`: maps `size` bytes of handle `h` (from `offset`) at `ptr`, inside a
    /// reservation and over no other mapping.
    pub fn vmm_map(&mut self, ptr: u64, size: u64, offset: u64, h: u64) -> R<()> {
        let p = self.vmm_handle(h)?;
        let end = ptr.checked_add(size).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if size == 0
            || !size.is_multiple_of(GRANULE)
            || !ptr.is_multiple_of(GRANULE)
            || offset.checked_add(size).is_none_or(|e| e > p.size)
        {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let inside = self
            .reservations
            .range(..=ptr)
            .next_back()
            .is_some_and(|(&b, &s)| end <= b.saturating_add(s));
        if !inside {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let overlaps = self
            .mappings
            .range(..end)
            .next_back()
            .is_some_and(|(&b, m)| b.saturating_add(m.size) > ptr);
        if overlaps {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        self.mappings.insert(ptr, Mapping { size, handle: h });
        if let Some(p) = self.phys.get_mut(&h) {
            p.maps += 1;
        }
        Ok(())
    }

    /// Drops every mapping that starts inside `[ptr, ptr + size)`; returns how many.
    fn unmap_range(&mut self, ptr: u64, size: u64) -> usize {
        let end = ptr.saturating_add(size);
        let hit: Vec<(u64, Mapping)> = self
            .mappings
            .range(ptr..end)
            .map(|(&b, &m)| (b, m))
            .collect();
        for (b, m) in &hit {
            self.mappings.remove(b);
            if let Some(p) = self.phys.get_mut(&m.handle) {
                p.maps = p.maps.saturating_sub(1);
            }
            self.vmm_maybe_free(m.handle);
        }
        hit.len()
    }

    /// `cuMemUnmap`.
    pub fn vmm_unmap(&mut self, ptr: u64, size: u64) -> R<()> {
        if size == 0 || self.unmap_range(ptr, size) == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        Ok(())
    }
}
