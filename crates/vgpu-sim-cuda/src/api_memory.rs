//! Entry points: plain device memory, stream-ordered memory and pools, VMM, arrays.
use core::ffi::{c_uint, c_void};

use vgpu_sys::cuda::*;

use crate::cu;
use crate::sim::{self, current, get, h, nonnull, ptr, put, with};
use crate::state::{GRANULE, R};

// ----- pinned host memory ------------------------------------------------------------------

cu! {
    fn cuMemHostAlloc(pp: *mut *mut c_void, size: usize, flags: c_uint) {
        let _ = flags;
        nonnull(pp)?;
        let a = with(|m| m.host_alloc(current(), size))?;
        // SAFETY: `pp` is the caller's non-null out-pointer.
        unsafe { put(pp, a as *mut c_void) }
    }
}

cu! {
    fn cuMemAllocHost_v2(pp: *mut *mut c_void, size: usize) {
        nonnull(pp)?;
        let a = with(|m| m.host_alloc(current(), size))?;
        // SAFETY: `pp` is the caller's non-null out-pointer.
        unsafe { put(pp, a as *mut c_void) }
    }
}

cu! {
    fn cuMemFreeHost(p: *mut c_void) {
        with(|m| m.host_free(p as u64))
    }
}

cu! {
    fn cuMemHostGetDevicePointer_v2(dptr: *mut CUdeviceptr, p: *mut c_void, flags: c_uint) {
        nonnull(dptr)?;
        if flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let d = with(|m| m.host_device_pointer(p as u64))?;
        // SAFETY: `dptr` is the caller's non-null out-pointer.
        unsafe { put(dptr, d) }
    }
}

// ----- plain memory ------------------------------------------------------------------------

fn mem_info() -> R<(u64, u64)> {
    with(|m| m.mem_info(current()))
}

cu! {
    fn cuMemGetInfo(free: *mut c_uint, total: *mut c_uint) {
        let (f, t) = mem_info()?;
        let clamp = |x: u64| x.min(u64::from(u32::MAX)) as c_uint;
        // SAFETY: both are the caller's out-pointers (null ones are skipped).
        unsafe {
            if !free.is_null() {
                put(free, clamp(f))?;
            }
            if !total.is_null() {
                put(total, clamp(t))?;
            }
        }
        Ok(())
    }
}

cu! {
    fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) {
        let (f, t) = mem_info()?;
        // SAFETY: both are the caller's out-pointers (null ones are skipped).
        unsafe {
            if !free.is_null() {
                put(free, f as usize)?;
            }
            if !total.is_null() {
                put(total, t as usize)?;
            }
        }
        Ok(())
    }
}

cu! {
    fn cuMemAlloc(dptr: *mut CUdeviceptr_v1, size: c_uint) {
        nonnull(dptr)?;
        let a = with(|m| m.mem_alloc(current(), u64::from(size), true))?;
        // SAFETY: `dptr` is the caller's non-null out-pointer; `a` is below 4 GiB.
        unsafe { put(dptr, a as CUdeviceptr_v1) }
    }
}

cu! {
    fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, size: usize) {
        nonnull(dptr)?;
        let a = with(|m| m.mem_alloc(current(), size as u64, false))?;
        // SAFETY: `dptr` is the caller's non-null out-pointer.
        unsafe { put(dptr, a) }
    }
}

fn mem_free(dptr: u64) -> R<()> {
    with(|m| {
        m.ctx_ordinal(current())?;
        m.mem_free(dptr)
    })
}

cu! {
    fn cuMemFree(dptr: CUdeviceptr_v1) {
        mem_free(u64::from(dptr))
    }
}

cu! {
    fn cuMemFree_v2(dptr: CUdeviceptr) {
        mem_free(dptr)
    }
}

cu! {
    fn cuMemAllocPitch(
        dptr: *mut CUdeviceptr_v1,
        pitch: *mut c_uint,
        width: c_uint,
        height: c_uint,
        elem: c_uint,
    ) {
        nonnull(dptr)?;
        nonnull(pitch)?;
        let (a, p) = with(|m| {
            m.mem_alloc_pitch(current(), width.into(), height.into(), elem.into(), true)
        })?;
        // SAFETY: both are the caller's non-null out-pointers; `a` is below 4 GiB and `p`
        // (a 512-rounded u32) fits in u32 because the allocation did.
        unsafe {
            put(dptr, a as CUdeviceptr_v1)?;
            put(pitch, p as c_uint)
        }
    }
}

cu! {
    fn cuMemAllocPitch_v2(
        dptr: *mut CUdeviceptr,
        pitch: *mut usize,
        width: usize,
        height: usize,
        elem: c_uint,
    ) {
        nonnull(dptr)?;
        nonnull(pitch)?;
        let (a, p) = with(|m| {
            m.mem_alloc_pitch(current(), width as u64, height as u64, elem.into(), false)
        })?;
        // SAFETY: both are the caller's non-null out-pointers.
        unsafe {
            put(dptr, a)?;
            put(pitch, p as usize)
        }
    }
}

cu! {
    fn cuMemAllocManaged(dptr: *mut CUdeviceptr, size: usize, flags: c_uint) {
        nonnull(dptr)?;
        if flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let a = with(|m| m.mem_alloc(current(), size as u64, false))?;
        // SAFETY: `dptr` is the caller's non-null out-pointer.
        unsafe { put(dptr, a) }
    }
}

cu! {
    fn cuPointerGetAttribute(data: *mut c_void, attr: CUpointer_attribute, dptr: CUdeviceptr) {
        nonnull(data)?;
        // Only what vgpu asks: the memory's type and the pool of a stream-ordered allocation;
        // the driver knows more.
        if attr == CU_POINTER_ATTRIBUTE_MEMORY_TYPE {
            let t = with(|m| m.memory_type(dptr))?;
            // SAFETY: `data` points to a CUmemorytype per cuda.h for this attribute.
            return unsafe { put(data.cast::<CUmemorytype>(), t) };
        }
        if attr == CU_POINTER_ATTRIBUTE_IS_MANAGED {
            let managed = with(|m| m.is_managed(dptr))?;
            // SAFETY: `data` points to an unsigned int per cuda.h for this attribute.
            return unsafe { put(data.cast::<c_uint>(), c_uint::from(managed)) };
        }
        if attr != CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE {
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        let pool = with(|m| match m.alloc_at(dptr).map(|a| a.kind) {
            Some(crate::state::AllocKind::Pool { pool }) => Ok(pool),
            _ => Err(CUDA_ERROR_INVALID_VALUE),
        })?;
        // SAFETY: `data` points to a CUmemoryPool per cuda.h for this attribute.
        unsafe { put(data.cast::<CUmemoryPool>(), ptr(pool)) }
    }
}

fn address_range(dptr: u64) -> R<(u64, u64)> {
    with(|m| {
        m.ctx_ordinal(current())?;
        m.address_range(dptr)
    })
}

cu! {
    fn cuMemGetAddressRange(base: *mut CUdeviceptr_v1, size: *mut c_uint, dptr: CUdeviceptr_v1) {
        let (b, s) = address_range(u64::from(dptr))?;
        // SAFETY: both are the caller's out-pointers (null ones are skipped).
        unsafe {
            if !base.is_null() {
                put(base, b as CUdeviceptr_v1)?;
            }
            if !size.is_null() {
                put(size, s.min(u64::from(u32::MAX)) as c_uint)?;
            }
        }
        Ok(())
    }
}

cu! {
    fn cuMemGetAddressRange_v2(base: *mut CUdeviceptr, size: *mut usize, dptr: CUdeviceptr) {
        let (b, s) = address_range(dptr)?;
        // SAFETY: both are the caller's out-pointers (null ones are skipped).
        unsafe {
            if !base.is_null() {
                put(base, b)?;
            }
            if !size.is_null() {
                put(size, s as usize)?;
            }
        }
        Ok(())
    }
}

// ----- synchronous copies ------------------------------------------------------------------

/// A synchronous copy of `n` bytes between the host pointers `host` and the device ranges `dev`
/// (each its start and the bytes it spans) on the legacy default stream, or the calling
/// thread's for a `_ptds` variant: where one end is in host memory the host waits for the
/// stream's earlier work, as the driver's copies to or from host memory do; between two device
/// ranges it returns at once. The simulator keeps no device contents, so nothing is copied.
fn copy_sync(dev: &[(u64, usize)], host: &[*const c_void], n: usize, ptds: bool) -> R<()> {
    if n == 0 {
        return Ok(());
    }
    if host.iter().any(|p| p.is_null()) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    with(|m| {
        for &(d, span) in dev {
            let (base, size) = m.address_range(d).map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
            if d.saturating_add(span as u64) > base.saturating_add(size) {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
        }
        m.potentially_unsafe()
    })?;
    if host.is_empty() {
        return Ok(());
    }
    let stream = if ptds {
        crate::state::STREAM_PER_THREAD
    } else {
        0
    };
    sim::wait(|m| m.stream_due(current(), stream))
}

/// A copy's ends: its device ranges (each its start and the bytes it spans) and its host
/// pointers.
type Ends = (Vec<(u64, usize)>, Vec<*const c_void>);

/// `cuMemcpy`'s ends: each one in device memory (an allocation's range, `n` bytes of it) or in
/// host memory.
fn copy_ends(dst: CUdeviceptr, src: CUdeviceptr, n: usize) -> R<Ends> {
    with(|m| {
        let (mut dev, mut host) = (Vec::new(), Vec::new());
        for p in [dst, src] {
            if m.memory_type(p) == Ok(CU_MEMORYTYPE_DEVICE) {
                dev.push((p, n));
            } else {
                host.push(p as *const c_void);
            }
        }
        Ok((dev, host))
    })
}

/// One end of a 2D or 3D copy, as its descriptor gives it: where it is, its host pointer,
/// device address and array, and its first byte's offset and the bytes it spans from there.
struct End {
    kind: CUmemorytype,
    host: *const c_void,
    device: CUdeviceptr,
    array: CUarray,
    offset: usize,
    span: usize,
}

/// A 2D or 3D copy between `ends`, `rows` rows of `width` bytes (zero: nothing to copy): device
/// ends checked against their allocation, host ends against null, unified ones taken for
/// device memory where [`Model::memory_type`] says so (as `cuPointerGetAttribute` answers
/// and `cuMemcpy`'s ends are told), array ends for a plain array (their extent
/// in a 2D or 3D copy is not checked). It waits like [`copy_sync`] where an end is in host
/// memory.
fn copy_described(ends: [End; 2], width: usize, rows: usize, ptds: bool) -> R<()> {
    if width == 0 || rows == 0 {
        return Ok(());
    }
    let (mut dev, mut host) = (Vec::new(), Vec::new());
    for e in ends {
        let unified_device = e.kind == CU_MEMORYTYPE_UNIFIED
            && with(|m| m.memory_type(e.device)) == Ok(CU_MEMORYTYPE_DEVICE);
        let start = || {
            e.device
                .checked_add(e.offset as u64)
                .ok_or(CUDA_ERROR_INVALID_VALUE)
        };
        match e.kind {
            CU_MEMORYTYPE_DEVICE => dev.push((start()?, e.span)),
            CU_MEMORYTYPE_UNIFIED if unified_device => dev.push((start()?, e.span)),
            CU_MEMORYTYPE_HOST => host.push(e.host),
            CU_MEMORYTYPE_UNIFIED => host.push(e.device as *const c_void),
            CU_MEMORYTYPE_ARRAY => with(|m| m.array_holds(h(e.array), 0, 0))?,
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
    }
    copy_sync(&dev, &host, width.saturating_mul(rows), ptds)
}

/// The bytes a pitched end spans: `rows` rows of `width` bytes, `pitch` apart (zero rows: none).
fn pitched_span(pitch: usize, width: usize, rows: usize) -> usize {
    rows.saturating_sub(1)
        .saturating_mul(pitch)
        .saturating_add(width)
}

/// `cuMemcpy2D_v2` and its variants.
///
/// # Safety
/// `p` is null or points to a live descriptor.
unsafe fn copy_2d(p: *const CUDA_MEMCPY2D, ptds: bool) -> R<()> {
    if p.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: `p` is non-null and, by the caller's contract, a live descriptor.
    let c = unsafe { *p };
    let (w, rows) = (c.WidthInBytes, c.Height);
    // Rows closer than their width overlap: refused, as the driver does, where there are two
    // or more.
    if rows > 1 && (c.srcPitch < w || c.dstPitch < w) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let end = |kind, host, device, array, x: usize, y: usize, pitch: usize| End {
        kind,
        host,
        device,
        array,
        offset: y.saturating_mul(pitch).saturating_add(x),
        span: pitched_span(pitch, w, rows),
    };
    copy_described(
        [
            end(
                c.srcMemoryType,
                c.srcHost,
                c.srcDevice,
                c.srcArray,
                c.srcXInBytes,
                c.srcY,
                c.srcPitch,
            ),
            end(
                c.dstMemoryType,
                c.dstHost.cast_const(),
                c.dstDevice,
                c.dstArray,
                c.dstXInBytes,
                c.dstY,
                c.dstPitch,
            ),
        ],
        w,
        rows,
        ptds,
    )
}

/// `cuMemcpy3D_v2` and `cuMemcpy3DPeer` (and their `_ptds`), for the descriptor type `$t` (the
/// two have the same fields but for the peer's contexts, which are not checked).
macro_rules! copy_3d {
    ($name:ident, $t:ty) => {
        /// A 3D copy (see the macro).
        ///
        /// # Safety
        /// `p` is null or points to a live descriptor.
        unsafe fn $name(p: *const $t, ptds: bool) -> R<()> {
            if p.is_null() {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            // SAFETY: `p` is non-null and, by the caller's contract, a live descriptor.
            let c = unsafe { *p };
            let (w, h, d) = (c.WidthInBytes, c.Height, c.Depth);
            let rows = h.saturating_mul(d);
            // An end's slices are `height` rows of `pitch` bytes; its span runs from its first
            // byte to the last row of its last slice.
            let end = |kind,
                       host,
                       (device, array): (CUdeviceptr, CUarray),
                       (x, y, z): (usize, usize, usize),
                       pitch: usize,
                       height: usize| {
                let pitch = pitch.max(w);
                let slice = pitch.saturating_mul(height.max(h));
                End {
                    kind,
                    host,
                    device,
                    array,
                    offset: z
                        .saturating_mul(slice)
                        .saturating_add(y.saturating_mul(pitch))
                        .saturating_add(x),
                    span: d
                        .saturating_sub(1)
                        .saturating_mul(slice)
                        .saturating_add(pitched_span(pitch, w, h)),
                }
            };
            copy_described(
                [
                    end(
                        c.srcMemoryType,
                        c.srcHost,
                        (c.srcDevice, c.srcArray),
                        (c.srcXInBytes, c.srcY, c.srcZ),
                        c.srcPitch,
                        c.srcHeight,
                    ),
                    end(
                        c.dstMemoryType,
                        c.dstHost.cast_const(),
                        (c.dstDevice, c.dstArray),
                        (c.dstXInBytes, c.dstY, c.dstZ),
                        c.dstPitch,
                        c.dstHeight,
                    ),
                ],
                w,
                rows,
                ptds,
            )
        }
    };
}
copy_3d!(copy_3d, CUDA_MEMCPY3D);
copy_3d!(copy_3d_peer, CUDA_MEMCPY3D_PEER);

cu! {
    fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, n: usize) {
        copy_sync(&[(src, n)], &[dst.cast_const()], n, false)
    }
}

cu! {
    fn cuMemcpyDtoH_v2_ptds(dst: *mut c_void, src: CUdeviceptr, n: usize) {
        copy_sync(&[(src, n)], &[dst.cast_const()], n, true)
    }
}

cu! {
    fn cuMemcpyHtoD_v2(dst: CUdeviceptr, src: *const c_void, n: usize) {
        copy_sync(&[(dst, n)], &[src], n, false)
    }
}

cu! {
    fn cuMemcpyHtoD_v2_ptds(dst: CUdeviceptr, src: *const c_void, n: usize) {
        copy_sync(&[(dst, n)], &[src], n, true)
    }
}

cu! {
    fn cuMemcpy(dst: CUdeviceptr, src: CUdeviceptr, n: usize) {
        let (dev, host) = copy_ends(dst, src, n)?;
        copy_sync(&dev, &host, n, false)
    }
}

cu! {
    fn cuMemcpy_ptds(dst: CUdeviceptr, src: CUdeviceptr, n: usize) {
        let (dev, host) = copy_ends(dst, src, n)?;
        copy_sync(&dev, &host, n, true)
    }
}

/// A synchronous copy of `n` bytes between plain array `a` (from byte `offset`) and the host
/// pointer `host`: it waits like [`copy_sync`].
fn copy_array(a: CUarray, offset: usize, host: *const c_void, n: usize, ptds: bool) -> R<()> {
    if n > 0 {
        with(|m| m.array_holds(h(a), offset as u64, n as u64))?;
    }
    copy_sync(&[], &[host], n, ptds)
}

cu! {
    fn cuMemcpyAtoH_v2(dst: *mut c_void, src: CUarray, offset: usize, n: usize) {
        copy_array(src, offset, dst.cast_const(), n, false)
    }
}

cu! {
    fn cuMemcpyAtoH_v2_ptds(dst: *mut c_void, src: CUarray, offset: usize, n: usize) {
        copy_array(src, offset, dst.cast_const(), n, true)
    }
}

cu! {
    fn cuMemcpyHtoA_v2(dst: CUarray, offset: usize, src: *const c_void, n: usize) {
        copy_array(dst, offset, src, n, false)
    }
}

cu! {
    fn cuMemcpyHtoA_v2_ptds(dst: CUarray, offset: usize, src: *const c_void, n: usize) {
        copy_array(dst, offset, src, n, true)
    }
}

cu! {
    fn cuMemcpy3DPeer(p: *const CUDA_MEMCPY3D_PEER) {
        // SAFETY: `p` is the caller's descriptor (null or live).
        unsafe { copy_3d_peer(p, false) }
    }
}

cu! {
    fn cuMemcpy3DPeer_ptds(p: *const CUDA_MEMCPY3D_PEER) {
        // SAFETY: `p` is the caller's descriptor (null or live).
        unsafe { copy_3d_peer(p, true) }
    }
}

cu! {
    fn cuMemcpy2D_v2(p: *const CUDA_MEMCPY2D) {
        // SAFETY: `p` is the caller's descriptor (null or live).
        unsafe { copy_2d(p, false) }
    }
}

cu! {
    fn cuMemcpy2D_v2_ptds(p: *const CUDA_MEMCPY2D) {
        // SAFETY: `p` is the caller's descriptor (null or live).
        unsafe { copy_2d(p, true) }
    }
}

cu! {
    fn cuMemcpy2DUnaligned_v2(p: *const CUDA_MEMCPY2D) {
        // SAFETY: `p` is the caller's descriptor (null or live).
        unsafe { copy_2d(p, false) }
    }
}

cu! {
    fn cuMemcpy2DUnaligned_v2_ptds(p: *const CUDA_MEMCPY2D) {
        // SAFETY: `p` is the caller's descriptor (null or live).
        unsafe { copy_2d(p, true) }
    }
}

cu! {
    fn cuMemcpy3D_v2(p: *const CUDA_MEMCPY3D) {
        // SAFETY: `p` is the caller's descriptor (null or live).
        unsafe { copy_3d(p, false) }
    }
}

cu! {
    fn cuMemcpy3D_v2_ptds(p: *const CUDA_MEMCPY3D) {
        // SAFETY: `p` is the caller's descriptor (null or live).
        unsafe { copy_3d(p, true) }
    }
}

// ----- pools and stream-ordered allocation -------------------------------------------------

cu! {
    fn cuDeviceGetDefaultMemPool(pool: *mut CUmemoryPool, dev: CUdevice) {
        let p = with(|m| m.default_pool(dev))?;
        // SAFETY: `pool` is the caller's out-pointer.
        unsafe { put(pool, ptr(p)) }
    }
}

cu! {
    fn cuDeviceGetMemPool(pool: *mut CUmemoryPool, dev: CUdevice) {
        if crate::sim::config().no_device_mempool {
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        let p = with(|m| m.current_pool(dev))?;
        // SAFETY: `pool` is the caller's out-pointer.
        unsafe { put(pool, ptr(p)) }
    }
}

cu! {
    fn cuDeviceSetMemPool(dev: CUdevice, pool: CUmemoryPool) {
        with(|m| m.set_current_pool(dev, h(pool)))
    }
}

cu! {
    fn cuMemPoolCreate(pool: *mut CUmemoryPool, props: *const CUmemPoolProps) {
        nonnull(pool)?;
        // SAFETY: `props` is the caller's struct (null is rejected by `get`).
        let props = unsafe { get(props) }?;
        if props.allocType != CU_MEM_ALLOCATION_TYPE_PINNED {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let p = with(|m| m.pool_create(props.location))?;
        // SAFETY: `pool` is the caller's non-null out-pointer.
        unsafe { put(pool, ptr(p)) }
    }
}

cu! {
    fn cuMemPoolDestroy(pool: CUmemoryPool) {
        with(|m| m.pool_destroy(h(pool)))
    }
}

cu! {
    fn cuMemPoolTrimTo(pool: CUmemoryPool, keep: usize) {
        with(|m| m.pool_trim_to(h(pool), keep as u64))
    }
}

/// Whether pool attribute `attr` is an `int` (the reuse flags) rather than a `cuuint64_t`.
fn int_attr(attr: CUmemPool_attribute) -> bool {
    (1..=3).contains(&attr)
}

cu! {
    fn cuMemPoolGetAttribute(pool: CUmemoryPool, attr: CUmemPool_attribute, value: *mut c_void) {
        nonnull(value)?;
        let v = with(|m| m.pool_get_attr(h(pool), attr))?;
        // SAFETY: `value` points to an int or a u64 as cuda.h documents for `attr`.
        unsafe {
            if int_attr(attr) {
                put(value.cast::<i32>(), v as i32)
            } else {
                put(value.cast::<u64>(), v)
            }
        }
    }
}

cu! {
    fn cuMemPoolSetAttribute(pool: CUmemoryPool, attr: CUmemPool_attribute, value: *mut c_void) {
        // SAFETY: `value` points to an int or a u64 as cuda.h documents for `attr`.
        let v = unsafe {
            if int_attr(attr) {
                get(value.cast::<i32>().cast_const())? as u64
            } else {
                get(value.cast::<u64>().cast_const())?
            }
        };
        with(|m| m.pool_set_attr(h(pool), attr, v))
    }
}

fn alloc_async(dptr: *mut CUdeviceptr, size: usize, pool: Option<u64>, stream: u64) -> R<()> {
    nonnull(dptr)?;
    let a = with(|m| m.alloc_async(current(), size as u64, pool, stream))?;
    // SAFETY: `dptr` is the caller's non-null out-pointer.
    unsafe { put(dptr, a) }
}

cu! {
    fn cuMemAllocAsync(dptr: *mut CUdeviceptr, size: usize, stream: CUstream) {
        alloc_async(dptr, size, None, h(stream))
    }
}

cu! {
    fn cuMemAllocAsync_ptsz(dptr: *mut CUdeviceptr, size: usize, stream: CUstream) {
        alloc_async(dptr, size, None, sim::ptsz(stream))
    }
}

cu! {
    fn cuMemAllocFromPoolAsync(
        dptr: *mut CUdeviceptr,
        size: usize,
        pool: CUmemoryPool,
        stream: CUstream,
    ) {
        alloc_async(dptr, size, Some(h(pool)), h(stream))
    }
}

cu! {
    fn cuMemAllocFromPoolAsync_ptsz(
        dptr: *mut CUdeviceptr,
        size: usize,
        pool: CUmemoryPool,
        stream: CUstream,
    ) {
        alloc_async(dptr, size, Some(h(pool)), sim::ptsz(stream))
    }
}

cu! {
    fn cuMemFreeAsync(dptr: CUdeviceptr, stream: CUstream) {
        with(|m| m.free_async(current(), dptr, h(stream)))
    }
}

cu! {
    fn cuMemFreeAsync_ptsz(dptr: CUdeviceptr, stream: CUstream) {
        with(|m| m.free_async(current(), dptr, sim::ptsz(stream)))
    }
}

// ----- virtual memory management -----------------------------------------------------------

/// Reads and checks a `CUmemAllocationProp`.
///
/// # Safety
/// `prop` must be null or valid for reads.
unsafe fn alloc_prop(prop: *const CUmemAllocationProp) -> R<CUmemAllocationProp> {
    // SAFETY: forwarded caller contract.
    let p = unsafe { get(prop) }?;
    if p.type_ != CU_MEM_ALLOCATION_TYPE_PINNED || p.location.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    with(|m| m.ordinal(p.location.id))?;
    Ok(p)
}

cu! {
    fn cuMemGetAllocationGranularity(
        granularity: *mut usize,
        prop: *const CUmemAllocationProp,
        option: c_uint,
    ) {
        let _ = option;
        nonnull(granularity)?;
        // SAFETY: `prop` is the caller's struct.
        unsafe { alloc_prop(prop) }?;
        // SAFETY: `granularity` is the caller's non-null out-pointer.
        unsafe { put(granularity, GRANULE as usize) }
    }
}

cu! {
    fn cuMemCreate(
        handle: *mut CUmemGenericAllocationHandle,
        size: usize,
        prop: *const CUmemAllocationProp,
        flags: u64,
    ) {
        nonnull(handle)?;
        if flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: `prop` is the caller's struct.
        let p = unsafe { alloc_prop(prop) }?;
        let hd = with(|m| m.vmm_create(size as u64, p.location))?;
        // SAFETY: `handle` is the caller's non-null out-pointer.
        unsafe { put(handle, hd) }
    }
}

cu! {
    fn cuMemRelease(handle: CUmemGenericAllocationHandle) {
        with(|m| m.vmm_release(handle))
    }
}

cu! {
    fn cuMemAddressReserve(
        dptr: *mut CUdeviceptr,
        size: usize,
        align: usize,
        addr: CUdeviceptr,
        flags: u64,
    ) {
        let _ = (addr, flags);
        nonnull(dptr)?;
        let a = with(|m| m.vmm_reserve(size as u64, align as u64))?;
        // SAFETY: `dptr` is the caller's non-null out-pointer.
        unsafe { put(dptr, a) }
    }
}

cu! {
    fn cuMemAddressFree(dptr: CUdeviceptr, size: usize) {
        with(|m| m.vmm_address_free(dptr, size as u64))
    }
}

cu! {
    fn cuMemMap(
        dptr: CUdeviceptr,
        size: usize,
        offset: usize,
        handle: CUmemGenericAllocationHandle,
        flags: u64,
    ) {
        if flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        with(|m| m.vmm_map(dptr, size as u64, offset as u64, handle))
    }
}

cu! {
    fn cuMemUnmap(dptr: CUdeviceptr, size: usize) {
        with(|m| m.vmm_unmap(dptr, size as u64))
    }
}

cu! {
    fn cuMemSetAccess(dptr: CUdeviceptr, size: usize, desc: *const CUmemAccessDesc, count: usize) {
        let _ = (dptr, size);
        if count == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        nonnull(desc)
    }
}

cu! {
    fn cuMemGetAllocationPropertiesFromHandle(
        prop: *mut CUmemAllocationProp,
        handle: CUmemGenericAllocationHandle,
    ) {
        nonnull(prop)?;
        let o = with(|m| m.vmm_handle(handle).map(|p| p.ordinal))?;
        let p = CUmemAllocationProp {
            type_: CU_MEM_ALLOCATION_TYPE_PINNED,
            requestedHandleTypes: 0,
            location: CUmemLocation {
                type_: CU_MEM_LOCATION_TYPE_DEVICE,
                id: o as i32,
            },
            win32HandleMetaData: std::ptr::null_mut(),
            allocFlags: CUmemAllocationProp_allocFlags::default(),
        };
        // SAFETY: `prop` is the caller's non-null out-pointer.
        unsafe { put(prop, p) }
    }
}

// ----- arrays ------------------------------------------------------------------------------

fn array_create(
    out: *mut *mut c_void,
    dims: (u64, u64, u64),
    format: CUarray_format,
    channels: u32,
    levels: Option<u32>,
) -> R<()> {
    nonnull(out)?;
    let a = with(|m| m.array_create(current(), dims.0, dims.1, dims.2, format, channels, levels))?;
    // SAFETY: `out` is the caller's non-null out-pointer.
    unsafe { put(out, ptr(a)) }
}

cu! {
    fn cuArrayCreate(array: *mut CUarray, desc: *const CUDA_ARRAY_DESCRIPTOR_v1) {
        // SAFETY: `desc` is the caller's descriptor.
        let d = unsafe { get(desc) }?;
        array_create(array, (d.Width.into(), d.Height.into(), 0), d.Format, d.NumChannels, None)
    }
}

cu! {
    fn cuArrayCreate_v2(array: *mut CUarray, desc: *const CUDA_ARRAY_DESCRIPTOR) {
        // SAFETY: `desc` is the caller's descriptor.
        let d = unsafe { get(desc) }?;
        array_create(array, (d.Width as u64, d.Height as u64, 0), d.Format, d.NumChannels, None)
    }
}

cu! {
    fn cuArray3DCreate(array: *mut CUarray, desc: *const CUDA_ARRAY3D_DESCRIPTOR_v1) {
        // SAFETY: `desc` is the caller's descriptor.
        let d = unsafe { get(desc) }?;
        let dims = (d.Width.into(), d.Height.into(), d.Depth.into());
        array_create(array, dims, d.Format, d.NumChannels, None)
    }
}

cu! {
    fn cuArray3DCreate_v2(array: *mut CUarray, desc: *const CUDA_ARRAY3D_DESCRIPTOR) {
        // SAFETY: `desc` is the caller's descriptor.
        let d = unsafe { get(desc) }?;
        let dims = (d.Width as u64, d.Height as u64, d.Depth as u64);
        array_create(array, dims, d.Format, d.NumChannels, None)
    }
}

cu! {
    fn cuArrayDestroy(array: CUarray) {
        with(|m| m.array_destroy(h(array), false))
    }
}

cu! {
    fn cuMipmappedArrayCreate(
        array: *mut CUmipmappedArray,
        desc: *const CUDA_ARRAY3D_DESCRIPTOR,
        levels: c_uint,
    ) {
        // SAFETY: `desc` is the caller's descriptor.
        let d = unsafe { get(desc) }?;
        let dims = (d.Width as u64, d.Height as u64, d.Depth as u64);
        array_create(array, dims, d.Format, d.NumChannels, Some(levels))
    }
}

cu! {
    fn cuMipmappedArrayDestroy(array: CUmipmappedArray) {
        with(|m| m.array_destroy(h(array), true))
    }
}

fn requirements(
    out: *mut CUDA_ARRAY_MEMORY_REQUIREMENTS,
    array: u64,
    mipmapped: bool,
    dev: CUdevice,
) -> R<()> {
    nonnull(out)?;
    let bytes = with(|m| m.array_requirements(array, mipmapped, dev))?;
    let req = CUDA_ARRAY_MEMORY_REQUIREMENTS {
        size: bytes as usize,
        alignment: crate::state::ARRAY_ALIGN as usize,
        reserved: [0; 4],
    };
    // SAFETY: `out` is the caller's non-null out-pointer.
    unsafe { put(out, req) }
}

cu! {
    fn cuArrayGetMemoryRequirements(
        req: *mut CUDA_ARRAY_MEMORY_REQUIREMENTS,
        array: CUarray,
        dev: CUdevice,
    ) {
        requirements(req, h(array), false, dev)
    }
}

cu! {
    fn cuMipmappedArrayGetMemoryRequirements(
        req: *mut CUDA_ARRAY_MEMORY_REQUIREMENTS,
        array: CUmipmappedArray,
        dev: CUdevice,
    ) {
        requirements(req, h(array), true, dev)
    }
}
