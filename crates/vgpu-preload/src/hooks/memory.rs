//! Allocation paths that take a size up front: charge first (atomically, so racing threads
//! cannot overshoot together), call the driver, and undo the charge if the driver fails. A
//! denial returns `CUDA_ERROR_OUT_OF_MEMORY` (or what the driver says of arguments it refuses
//! whatever the size: `refused`) and changes nothing, so allocators that free their cache and
//! retry keep working. Frees release exactly what was charged; a free of a pointer
//! vgpu did not record goes to the driver unchanged.
use super::abi::{ArrayDesc, DevPtr, Shape, Word};
use crate::real::ty;
use crate::runtime::{Runtime, runtime};
use crate::symbols::Call;
use core::ffi::c_uint;
use vgpu_policy::ledger::DeviceIndex;
use vgpu_policy::registry::{AllocKind, Record};
use vgpu_policy::view;
use vgpu_sys::cuda::*;

/// What the driver wrote through an out-pointer, if the call succeeded (else the default).
///
/// # Safety
/// `p` is the out-pointer given to the driver call that returned `r`.
pub(super) unsafe fn written<T: Copy + Default>(r: CUresult, p: *const T) -> T {
    if r == CUDA_SUCCESS && !p.is_null() {
        // SAFETY: on success the driver wrote a `T` through `p` (this function's contract).
        unsafe { *p }
    } else {
        T::default()
    }
}

/// The record of an allocation of `bytes` on `device`, made in the calling thread's current
/// context ([`Runtime::record_ctx`]).
fn record(rt: &Runtime, device: DeviceIndex, bytes: u64, kind: AllocKind) -> Record {
    Record {
        device,
        bytes,
        kind,
        ctx: rt.record_ctx(device),
    }
}

/// What a call vgpu refuses returns: what the driver says of arguments it refuses whatever the
/// size (`invalid`, asked only now: a NULL out-pointer, bad flags, a bad stream...), else
/// `CUDA_ERROR_OUT_OF_MEMORY`. An allocator that frees its cache and retries on
/// OUT_OF_MEMORY must not take a bug in its arguments for a full GPU.
#[cold]
pub(super) fn refused(invalid: impl FnOnce() -> Option<CUresult>) -> CUresult {
    invalid().unwrap_or(CUDA_ERROR_OUT_OF_MEMORY)
}

/// `CUDA_ERROR_INVALID_VALUE` if `bad`.
pub(super) fn invalid_if(bad: bool) -> Option<CUresult> {
    bad.then_some(CUDA_ERROR_INVALID_VALUE)
}

/// What the driver says of `stream` if it does not name a stream (`cuStreamQuery`'s error for
/// it, `CUDA_ERROR_INVALID_HANDLE` on the driver), else nothing. The query runs in `RELAXED`
/// capture mode ([`crate::driver::relaxed`]): in the thread's own mode it would invalidate
/// another thread's `GLOBAL` capture. A stream that captures answers with a capture error: it
/// is a stream.
pub(super) fn bad_stream(stream: CUstream) -> Option<CUresult> {
    let _relaxed = crate::driver::relaxed();
    match crate::fwd!(cuStreamQuery(stream)) {
        CUDA_SUCCESS
        | CUDA_ERROR_NOT_READY
        | CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
        | CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
        | CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
        | CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD => None,
        e => Some(e),
    }
}

/// Charges `bytes`, runs `alloc` (which returns the driver's result and the new object's key),
/// and records the object; undoes the charge if the driver fails. Refused: [`refused`].
#[inline]
pub(super) fn charged(
    rt: &Runtime,
    device: DeviceIndex,
    bytes: u64,
    kind: AllocKind,
    invalid: impl FnOnce() -> Option<CUresult>,
    alloc: impl FnOnce() -> (CUresult, u64),
) -> CUresult {
    if rt.charge(device, bytes).is_err() {
        return refused(invalid);
    }
    let (r, key) = alloc();
    if r != CUDA_SUCCESS {
        rt.ledger().release(device, bytes);
        return r;
    }
    rt.registry.insert(key, record(rt, device, bytes, kind));
    r
}

/// Runs `free` for a recorded object and releases its charge if the driver freed it.
#[inline]
pub(super) fn released(key: u64, free: impl FnOnce() -> CUresult) -> CUresult {
    let Some(rt) = runtime() else {
        return free();
    };
    let rec = rt.registry.remove(key);
    let r = free();
    if let Some(rec) = rec {
        if r == CUDA_SUCCESS {
            rt.ledger().release(rec.device, rec.bytes);
        } else {
            rt.registry.insert(key, rec);
        }
    }
    r
}

/// Brings a provisional charge of `charged` to the `real` size the driver reports, after the
/// object exists. If the extra does not fit, `undo` destroys the object and the call is denied.
fn settle(
    rt: &Runtime,
    device: DeviceIndex,
    charged: u64,
    real: u64,
    undo: impl FnOnce(),
) -> Result<u64, CUresult> {
    if real > charged {
        if rt.charge(device, real - charged).is_err() {
            undo();
            rt.ledger().release(device, charged);
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
    } else {
        rt.ledger().release(device, charged - real);
    }
    Ok(real)
}

/// The runtime and the current device's ledger index, when that device is limited.
#[inline]
fn limited_here() -> Option<(&'static Runtime, DeviceIndex)> {
    let rt = runtime()?;
    Some((rt, rt.current_device()?))
}

/// # Safety
/// C API contract of `cuMemAlloc_v2` / `cuMemAlloc` (32-bit legacy entry point).
pub unsafe fn alloc<P: DevPtr, W: Word>(
    call: Call<unsafe extern "C" fn(*mut P, W) -> CUresult>,
    dptr: *mut P,
    bytesize: W,
) -> CUresult {
    let Some((rt, device)) = limited_here() else {
        return crate::forward!(call(dptr, bytesize));
    };
    let invalid = || invalid_if(dptr.is_null());
    charged(
        rt,
        device,
        bytesize.wide(),
        AllocKind::Plain,
        invalid,
        || {
            let r = crate::forward!(call(dptr, bytesize));
            // SAFETY: `dptr` is the out-pointer this call was given.
            (r, unsafe { written(r, dptr) }.wide())
        },
    )
}

/// # Safety
/// C API contract of `cuMemAllocManaged`.
pub unsafe fn alloc_managed(
    call: Call<ty::cuMemAllocManaged>,
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    flags: c_uint,
) -> CUresult {
    let Some((rt, device)) = limited_here() else {
        return crate::forward!(call(dptr, bytesize, flags));
    };
    // Managed memory may migrate to the host, but it can fill the device: count all of it.
    let invalid = || {
        invalid_if(dptr.is_null() || !matches!(flags, CU_MEM_ATTACH_GLOBAL | CU_MEM_ATTACH_HOST))
    };
    charged(
        rt,
        device,
        bytesize as u64,
        AllocKind::Managed,
        invalid,
        || {
            let r = crate::forward!(call(dptr, bytesize, flags));
            // SAFETY: `dptr` is the out-pointer this call was given.
            (r, unsafe { written(r, dptr) })
        },
    )
}

/// Pitched allocations: charge the unpadded size first, then the real `pitch × height`.
fn pitched(
    rt: &Runtime,
    device: DeviceIndex,
    width: u64,
    height: u64,
    invalid: impl FnOnce() -> Option<CUresult>,
    alloc: impl FnOnce() -> (CUresult, u64, u64),
    free: impl FnOnce(u64),
) -> CUresult {
    let Some(lower) = width.checked_mul(height) else {
        // No device holds more than 2^64 bytes: the driver refuses it, with whatever code its
        // own checks give first (CUDA_ERROR_OUT_OF_MEMORY, or INVALID_VALUE for a bad element
        // size), and that is the code returned. Should it ever succeed, the allocation is
        // freed and refused: it cannot fit any limit.
        let (r, ptr, _) = alloc();
        if r == CUDA_SUCCESS {
            free(ptr);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        return r;
    };
    if rt.charge(device, lower).is_err() {
        return refused(invalid);
    }
    let (r, ptr, pitch) = alloc();
    if r != CUDA_SUCCESS {
        rt.ledger().release(device, lower);
        return r;
    }
    let real = pitch.saturating_mul(height);
    match settle(rt, device, lower, real, || free(ptr)) {
        Ok(bytes) => {
            let kind = AllocKind::Pitch;
            rt.registry.insert(ptr, record(rt, device, bytes, kind));
            r
        }
        Err(e) => e,
    }
}

/// # Safety
/// C API contract of `cuMemAllocPitch_v2` / `cuMemAllocPitch` (32-bit legacy entry point).
pub unsafe fn alloc_pitch<P: DevPtr, W: Word>(
    call: Call<unsafe extern "C" fn(*mut P, *mut W, W, W, c_uint) -> CUresult>,
    dptr: *mut P,
    pitch: *mut W,
    width: W,
    height: W,
    elem: c_uint,
) -> CUresult {
    let Some((rt, device)) = limited_here() else {
        return crate::forward!(call(dptr, pitch, width, height, elem));
    };
    pitched(
        rt,
        device,
        width.wide(),
        height.wide(),
        || invalid_if(dptr.is_null() || pitch.is_null() || !matches!(elem, 4 | 8 | 16)),
        || {
            let r = crate::forward!(call(dptr, pitch, width, height, elem));
            if r != CUDA_SUCCESS {
                return (r, 0, 0);
            }
            // SAFETY: on success the driver wrote both out-parameters.
            unsafe { (r, (*dptr).wide(), (*pitch).wide()) }
        },
        |p| {
            P::clamped(p).free();
        },
    )
}

/// # Safety
/// C API contract of `cuMemFree_v2` / `cuMemFree`.
pub unsafe fn free<P: DevPtr>(
    call: Call<unsafe extern "C" fn(P) -> CUresult>,
    dptr: P,
) -> CUresult {
    // A stream-ordered allocation may be freed here too.
    released(dptr.wide(), || {
        super::pools::freed_from_pool(dptr.wide(), || crate::forward!(call(dptr)))
    })
}

/// # Safety
/// C API contract of `cuMemCreate`.
pub unsafe fn mem_create(
    call: Call<ty::cuMemCreate>,
    handle: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const CUmemAllocationProp,
    flags: u64,
) -> CUresult {
    // The device is the one the properties name, not the current one.
    let device = runtime().and_then(|rt| {
        if prop.is_null() {
            return None;
        }
        // SAFETY: non-null, and the caller passes a valid properties struct.
        let loc = unsafe { (*prop).location };
        if loc.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
            return None;
        }
        Some((rt, rt.limited_device(loc.id)?))
    });
    let Some((rt, device)) = device else {
        return crate::forward!(call(handle, size, prop, flags));
    };
    let invalid = || {
        let granule = crate::driver::REAL.granularity(prop).unwrap_or(1).max(1);
        invalid_if(handle.is_null() || flags != 0 || !(size as u64).is_multiple_of(granule))
    };
    charged(rt, device, size as u64, AllocKind::Vmm, invalid, || {
        // The book is held across the call: a handle value the driver hands out again is
        // released (and its record removed) under it before it is created anew.
        let mut book = vmm(rt);
        let r = crate::forward!(call(handle, size, prop, flags));
        // SAFETY: `handle` is the out-pointer this call was given.
        let h = unsafe { written(r, handle) };
        if r == CUDA_SUCCESS {
            book.created(h);
        }
        (r, h)
    })
}

/// The runtime's VMM handle book (a poisoned lock is recovered: the book is consistent between
/// calls). Each VMM hook holds it across its driver call, so that the book follows the
/// driver's order of events (no hook calls another under it).
fn vmm(rt: &Runtime) -> std::sync::MutexGuard<'_, vgpu_policy::vmm::Handles> {
    rt.vmm
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Releases the charge of VMM handle `h` (its memory is gone).
fn vmm_freed(rt: &Runtime, h: u64) {
    if let Some(rec) = rt.registry.remove(h) {
        rt.ledger().release(rec.device, rec.bytes);
    }
}

/// # Safety
/// C API contract of `cuMemRelease`.
pub unsafe fn mem_release(
    call: Call<ty::cuMemRelease>,
    handle: CUmemGenericAllocationHandle,
) -> CUresult {
    let Some(rt) = runtime() else {
        return crate::forward!(call(handle));
    };
    let mut book = vmm(rt);
    let r = crate::forward!(call(handle));
    if r == CUDA_SUCCESS && rt.registry.get(handle).is_some() && book.released(handle) {
        // Else it is still mapped (or was exported): its memory, and its charge, stay.
        vmm_freed(rt, handle);
    }
    r
}

/// # Safety
/// C API contract of `cuMemRetainAllocationHandle`.
pub unsafe fn mem_retain(
    call: Call<ty::cuMemRetainAllocationHandle>,
    handle: *mut CUmemGenericAllocationHandle,
    addr: *mut core::ffi::c_void,
) -> CUresult {
    let Some(rt) = runtime() else {
        return crate::forward!(call(handle, addr));
    };
    let mut book = vmm(rt);
    let r = crate::forward!(call(handle, addr));
    // SAFETY: `handle` is the out-pointer this call was given.
    let h = unsafe { written(r, handle) };
    if r == CUDA_SUCCESS {
        book.retained(h);
    }
    r
}

/// # Safety
/// C API contract of `cuMemExportToShareableHandle`.
pub unsafe fn mem_export(
    call: Call<ty::cuMemExportToShareableHandle>,
    shareable: *mut core::ffi::c_void,
    handle: CUmemGenericAllocationHandle,
    kind: c_uint,
    flags: u64,
) -> CUresult {
    let Some(rt) = runtime() else {
        return crate::forward!(call(shareable, handle, kind, flags));
    };
    let mut book = vmm(rt);
    let r = crate::forward!(call(shareable, handle, kind, flags));
    if r == CUDA_SUCCESS {
        book.exported(handle);
    }
    r
}

/// # Safety
/// C API contract of `cuMemMap`.
pub unsafe fn mem_map(
    call: Call<ty::cuMemMap>,
    ptr: CUdeviceptr,
    size: usize,
    offset: usize,
    handle: CUmemGenericAllocationHandle,
    flags: u64,
) -> CUresult {
    let Some(rt) = runtime() else {
        return crate::forward!(call(ptr, size, offset, handle, flags));
    };
    let mut book = vmm(rt);
    let r = crate::forward!(call(ptr, size, offset, handle, flags));
    if r == CUDA_SUCCESS {
        book.mapped(ptr, size as u64, handle);
    }
    r
}

/// # Safety
/// C API contract of `cuMemUnmap`.
pub unsafe fn mem_unmap(call: Call<ty::cuMemUnmap>, ptr: CUdeviceptr, size: usize) -> CUresult {
    let Some(rt) = runtime() else {
        return crate::forward!(call(ptr, size));
    };
    let mut book = vmm(rt);
    let r = crate::forward!(call(ptr, size));
    if r == CUDA_SUCCESS {
        for h in book.unmapped(ptr, size as u64) {
            vmm_freed(rt, h);
        }
    }
    r
}

/// The two kinds of array the driver makes: what each is recorded as, what the driver says it
/// really takes, and how a refused one is destroyed.
#[derive(Clone, Copy)]
enum ArrayKind {
    Array,
    Mipmapped,
}

impl ArrayKind {
    fn alloc_kind(self) -> AllocKind {
        match self {
            ArrayKind::Array => AllocKind::Array,
            ArrayKind::Mipmapped => AllocKind::MipmappedArray,
        }
    }

    /// What the driver says array `key` takes (`cuArrayGetMemoryRequirements`, which includes
    /// the hardware's padding, or its mipmapped twin).
    fn real_size(self, device: DeviceIndex, key: u64) -> Option<u64> {
        let dev = CUdevice::try_from(device).ok()?;
        let mut req = CUDA_ARRAY_MEMORY_REQUIREMENTS::default();
        let r = match self {
            ArrayKind::Array => {
                crate::fwd!(cuArrayGetMemoryRequirements(&mut req, key as CUarray, dev))
            }
            ArrayKind::Mipmapped => crate::fwd!(cuMipmappedArrayGetMemoryRequirements(
                &mut req,
                key as CUmipmappedArray,
                dev
            )),
        };
        (r == CUDA_SUCCESS).then_some(req.size as u64)
    }

    fn destroy(self, key: u64) {
        match self {
            ArrayKind::Array => crate::fwd!(cuArrayDestroy(key as CUarray)),
            ArrayKind::Mipmapped => crate::fwd!(cuMipmappedArrayDestroy(key as CUmipmappedArray)),
        };
    }
}

/// Arrays: charge the size their shape implies, then what the driver says it really takes. A
/// refusal says what the driver would of a NULL out-pointer (`out_null`) before it says out of
/// memory. `create` is the real call: its result and the array made.
fn array(
    rt: &Runtime,
    device: DeviceIndex,
    estimate: Option<u64>,
    out_null: bool,
    kind: ArrayKind,
    create: impl FnOnce() -> (CUresult, u64),
) -> CUresult {
    let estimate = estimate.unwrap_or(0);
    if rt.charge(device, estimate).is_err() {
        return refused(|| invalid_if(out_null));
    }
    let (r, key) = create();
    if r != CUDA_SUCCESS {
        rt.ledger().release(device, estimate);
        return r;
    }
    let real = kind.real_size(device, key).unwrap_or(estimate);
    match settle(rt, device, estimate, real, || kind.destroy(key)) {
        Ok(bytes) => {
            rt.registry
                .insert(key, record(rt, device, bytes, kind.alloc_kind()));
            r
        }
        Err(e) => e,
    }
}

fn shape_bytes(w: u64, h: u64, d: u64, format: CUarray_format, channels: c_uint) -> Option<u64> {
    view::array_bytes(w, h, d, channels, array_format_bytes(format)?)
}

/// Shared body of the array constructors: `create` is the real call (which writes `*arr`).
///
/// # Safety
/// `arr` is the caller's out-pointer of the constructor, written by the driver on success.
unsafe fn new_array(
    arr: *mut CUarray,
    shape: Option<Shape>,
    create: impl FnOnce() -> CUresult,
) -> CUresult {
    let Some(((rt, device), (w, h, d, format, channels))) = limited_here().zip(shape) else {
        return create();
    };
    array(
        rt,
        device,
        shape_bytes(w, h, d, format, channels),
        arr.is_null(),
        ArrayKind::Array,
        || {
            let r = create();
            // SAFETY: `arr` is the out-pointer this call was given.
            (r, unsafe { written(r, arr) } as u64)
        },
    )
}

/// # Safety
/// C API contract of `cuArrayCreate`, `cuArray3DCreate` and their `_v2`.
pub unsafe fn array_create<D: ArrayDesc>(
    call: Call<unsafe extern "C" fn(*mut CUarray, *const D) -> CUresult>,
    arr: *mut CUarray,
    desc: *const D,
) -> CUresult {
    // SAFETY: the caller's descriptor, null or valid.
    let shape = unsafe { desc.as_ref() }.map(ArrayDesc::shape);
    let create = || crate::forward!(call(arr, desc));
    // SAFETY: `arr` is the caller's out-pointer.
    unsafe { new_array(arr, shape, create) }
}

/// # Safety
/// C API contract of `cuArrayDestroy`.
pub unsafe fn array_destroy(call: Call<ty::cuArrayDestroy>, arr: CUarray) -> CUresult {
    released(arr as u64, || crate::forward!(call(arr)))
}

/// # Safety
/// C API contract of `cuMipmappedArrayCreate`.
pub unsafe fn mipmap_create(
    call: Call<ty::cuMipmappedArrayCreate>,
    arr: *mut CUmipmappedArray,
    desc: *const CUDA_ARRAY3D_DESCRIPTOR,
    levels: c_uint,
) -> CUresult {
    let Some((rt, device)) = limited_here().filter(|_| !desc.is_null()) else {
        return crate::forward!(call(arr, desc, levels));
    };
    // SAFETY: non-null descriptor from the caller.
    let d = unsafe { *desc };
    let (mut w, mut h, mut z) = (d.Width as u64, d.Height as u64, d.Depth as u64);
    let mut est = Some(0u64);
    for _ in 0..levels.max(1) {
        est = est.and_then(|e| e.checked_add(shape_bytes(w, h, z, d.Format, d.NumChannels)?));
        w = (w / 2).max(1);
        h = if h == 0 { 0 } else { (h / 2).max(1) };
        z = if z == 0 { 0 } else { (z / 2).max(1) };
    }
    array(rt, device, est, arr.is_null(), ArrayKind::Mipmapped, || {
        let r = crate::forward!(call(arr, desc, levels));
        // SAFETY: `arr` is the out-pointer this call was given.
        (r, unsafe { written(r, arr) } as u64)
    })
}

/// # Safety
/// C API contract of `cuMipmappedArrayDestroy`.
pub unsafe fn mipmap_destroy(
    call: Call<ty::cuMipmappedArrayDestroy>,
    arr: CUmipmappedArray,
) -> CUresult {
    released(arr as u64, || crate::forward!(call(arr)))
}
