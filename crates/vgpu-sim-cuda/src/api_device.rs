//! Entry points: initialization, devices, contexts, streams, events.
use core::ffi::{c_char, c_int, c_uint};

use vgpu_sys::cuda::*;

use crate::config::{DEVICE_NAME, uuid_bytes};
use crate::cu;
use crate::sim::{self, current, h, nonnull, ptr, put, with};
use crate::state::R;

/// The driver version the simulator reports (CUDA 13.0).
pub const DRIVER_VERSION: c_int = 13000;

cu! {
    noinit fn cuInit(flags: c_uint) {
        if flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if sim::config().visible.is_empty() {
            return Err(CUDA_ERROR_NO_DEVICE);
        }
        // Build the model (and map the shared state) now rather than on first use.
        drop(sim::model());
        sim::set_initialized();
        Ok(())
    }
}

cu! {
    noinit fn cuDriverGetVersion(version: *mut c_int) {
        // SAFETY: `version` is the caller's out-pointer (null is rejected by `put`).
        unsafe { put(version, DRIVER_VERSION) }
    }
}

cu! {
    fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) {
        let o = with(|m| m.ordinal(ordinal))?;
        // SAFETY: `device` is the caller's out-pointer.
        unsafe { put(device, o as CUdevice) }
    }
}

cu! {
    fn cuDeviceGetCount(count: *mut c_int) {
        let n = with(|m| Ok(m.device_count()))?;
        // SAFETY: `count` is the caller's out-pointer.
        unsafe { put(count, n as c_int) }
    }
}

cu! {
    fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) {
        with(|m| m.ordinal(dev))?;
        nonnull(name)?;
        let len = usize::try_from(len).ok().filter(|&l| l > 0).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let bytes = DEVICE_NAME.as_bytes();
        let n = bytes.len().min(len - 1);
        // SAFETY: `name` is non-null and, per cuda.h, valid for `len` bytes; we write `n + 1 <= len`.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), name.cast::<u8>(), n);
            name.add(n).write(0);
        }
        Ok(())
    }
}

/// The UUID of ordinal `dev` as a `CUuuid`.
fn uuid_of(dev: CUdevice) -> crate::state::R<CUuuid> {
    let p = with(|m| {
        let o = m.ordinal(dev)?;
        Ok(m.phys_of(o))
    })?;
    let mut u = CUuuid::default();
    for (d, s) in u.bytes.iter_mut().zip(uuid_bytes(p)) {
        *d = s as c_char;
    }
    Ok(u)
}

cu! {
    fn cuDeviceGetUuid(uuid: *mut CUuuid, dev: CUdevice) {
        nonnull(uuid)?;
        let u = uuid_of(dev)?;
        // SAFETY: `uuid` is the caller's out-pointer.
        unsafe { put(uuid, u) }
    }
}

cu! {
    fn cuDeviceGetUuid_v2(uuid: *mut CUuuid, dev: CUdevice) {
        nonnull(uuid)?;
        let u = uuid_of(dev)?;
        // SAFETY: `uuid` is the caller's out-pointer.
        unsafe { put(uuid, u) }
    }
}

cu! {
    fn cuDeviceGetAttribute(pi: *mut c_int, attrib: CUdevice_attribute, dev: CUdevice) {
        with(|m| m.ordinal(dev))?;
        let v = match attrib {
            CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT => 132,
            CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR => 9,
            CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR => 0,
            _ => 0,
        };
        // SAFETY: `pi` is the caller's out-pointer.
        unsafe { put(pi, v) }
    }
}

cu! {
    fn cuDeviceTotalMem(bytes: *mut c_uint, dev: CUdevice) {
        let total = with(|m| {
            m.ordinal(dev)?;
            Ok(m.cfg.mem)
        })?;
        // SAFETY: `bytes` is the caller's out-pointer.
        unsafe { put(bytes, total.min(u64::from(u32::MAX)) as c_uint) }
    }
}

cu! {
    fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) {
        let total = with(|m| {
            m.ordinal(dev)?;
            Ok(m.cfg.mem)
        })?;
        // SAFETY: `bytes` is the caller's out-pointer.
        unsafe { put(bytes, total as usize) }
    }
}

/// A context creation takes `VGPU_SIM_CTX_CREATE_US` (its memory is already taken; the model
/// lock is not held).
fn creation_time() {
    let us = sim::config().ctx_create_us;
    if us > 0 {
        std::thread::sleep(std::time::Duration::from_micros(us));
    }
}

// ----- primary contexts --------------------------------------------------------------------

cu! {
    fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) {
        nonnull(pctx)?;
        let c = with(|m| m.primary_retain(dev))?;
        creation_time();
        // SAFETY: `pctx` is the caller's out-pointer.
        unsafe { put(pctx, ptr(c)) }
    }
}

fn primary_release(dev: CUdevice) -> crate::state::R<()> {
    with(|m| m.primary_release(dev))
}

cu! {
    fn cuDevicePrimaryCtxRelease(dev: CUdevice) {
        primary_release(dev)
    }
}

cu! {
    fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) {
        primary_release(dev)
    }
}

cu! {
    fn cuDevicePrimaryCtxReset(dev: CUdevice) {
        with(|m| m.primary_reset(dev))
    }
}

cu! {
    fn cuDevicePrimaryCtxReset_v2(dev: CUdevice) {
        with(|m| m.primary_reset(dev))
    }
}

cu! {
    fn cuDevicePrimaryCtxGetState(dev: CUdevice, flags: *mut c_uint, active: *mut c_int) {
        nonnull(flags)?;
        nonnull(active)?;
        let is_active = with(|m| Ok(m.primary_handle(dev)?.is_some_and(|c| m.ctx_valid(c))))?;
        // SAFETY: both are the caller's non-null out-pointers.
        unsafe {
            put(flags, 0)?;
            put(active, c_int::from(is_active))
        }
    }
}

// ----- contexts ----------------------------------------------------------------------------

/// Creates a context on `dev`, makes it current and stores it in `*pctx`.
fn ctx_create(pctx: *mut CUcontext, dev: CUdevice) -> crate::state::R<()> {
    nonnull(pctx)?;
    let c = with(|m| m.ctx_create(dev))?;
    creation_time();
    sim::push_current(c);
    // SAFETY: `pctx` is the caller's non-null out-pointer.
    unsafe { put(pctx, ptr(c)) }
}

cu! {
    fn cuCtxCreate(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) {
        let _ = flags;
        ctx_create(pctx, dev)
    }
}

cu! {
    fn cuCtxCreate_v2(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) {
        let _ = flags;
        ctx_create(pctx, dev)
    }
}

cu! {
    fn cuCtxCreate_v3(
        pctx: *mut CUcontext,
        params: *mut core::ffi::c_void,
        num_params: c_int,
        flags: c_uint,
        dev: CUdevice,
    ) {
        let _ = (params, flags);
        if num_params < 0 || (num_params > 0 && params.is_null()) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        ctx_create(pctx, dev)
    }
}

cu! {
    fn cuCtxCreate_v4(
        pctx: *mut CUcontext,
        params: *mut core::ffi::c_void,
        flags: c_uint,
        dev: CUdevice,
    ) {
        let _ = (params, flags);
        ctx_create(pctx, dev)
    }
}

fn ctx_destroy(ctx: CUcontext) -> crate::state::R<()> {
    with(|m| m.ctx_destroy(h(ctx)))?;
    sim::forget_current(h(ctx));
    Ok(())
}

cu! {
    fn cuCtxDestroy(ctx: CUcontext) {
        ctx_destroy(ctx)
    }
}

cu! {
    fn cuCtxDestroy_v2(ctx: CUcontext) {
        ctx_destroy(ctx)
    }
}

cu! {
    fn cuCtxSetCurrent(ctx: CUcontext) {
        if !ctx.is_null() && !with(|m| Ok(m.ctx_valid(h(ctx))))? {
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        }
        sim::set_current(h(ctx));
        Ok(())
    }
}

cu! {
    fn cuCtxGetCurrent(pctx: *mut CUcontext) {
        // SAFETY: `pctx` is the caller's out-pointer.
        unsafe { put(pctx, ptr(current().unwrap_or(0))) }
    }
}

fn ctx_push(ctx: CUcontext) -> crate::state::R<()> {
    if !with(|m| Ok(m.ctx_valid(h(ctx))))? {
        return Err(CUDA_ERROR_INVALID_CONTEXT);
    }
    sim::push_current(h(ctx));
    Ok(())
}

cu! {
    fn cuCtxPushCurrent(ctx: CUcontext) {
        ctx_push(ctx)
    }
}

cu! {
    fn cuCtxPushCurrent_v2(ctx: CUcontext) {
        ctx_push(ctx)
    }
}

fn ctx_pop(pctx: *mut CUcontext) -> crate::state::R<()> {
    let c = sim::pop_current().ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
    if !pctx.is_null() {
        // SAFETY: `pctx` is the caller's non-null out-pointer.
        unsafe { put(pctx, ptr(c))? };
    }
    Ok(())
}

cu! {
    fn cuCtxPopCurrent(pctx: *mut CUcontext) {
        ctx_pop(pctx)
    }
}

cu! {
    fn cuCtxPopCurrent_v2(pctx: *mut CUcontext) {
        ctx_pop(pctx)
    }
}

cu! {
    fn cuCtxGetDevice(device: *mut CUdevice) {
        let o = with(|m| m.ctx_ordinal(current()))?;
        // SAFETY: `device` is the caller's out-pointer.
        unsafe { put(device, o as CUdevice) }
    }
}

cu! {
    fn cuCtxSynchronize() {
        with(|m| m.ctx_sync_begin(current()))?;
        sim::wait(|m| m.ctx_due(current()))?;
        with(|m| m.ctx_sync(current()))
    }
}

// ----- streams -----------------------------------------------------------------------------

cu! {
    fn cuStreamCreate(stream: *mut CUstream, flags: c_uint) {
        nonnull(stream)?;
        let s = with(|m| m.stream_create(current(), flags, 0))?;
        // SAFETY: `stream` is the caller's non-null out-pointer.
        unsafe { put(stream, ptr(s)) }
    }
}

cu! {
    fn cuStreamCreateWithPriority(stream: *mut CUstream, flags: c_uint, priority: c_int) {
        nonnull(stream)?;
        let s = with(|m| m.stream_create(current(), flags, priority))?;
        // SAFETY: `stream` is the caller's non-null out-pointer.
        unsafe { put(stream, ptr(s)) }
    }
}

cu! {
    fn cuStreamDestroy(stream: CUstream) {
        with(|m| m.stream_destroy(h(stream)))
    }
}

cu! {
    fn cuStreamDestroy_v2(stream: CUstream) {
        with(|m| m.stream_destroy(h(stream)))
    }
}

/// Sleeps until the stream's queued work completes, then trims the device's pools.
fn stream_sync(stream: u64) -> R<()> {
    with(|m| m.potentially_unsafe())?;
    sim::wait(|m| m.stream_due(current(), stream))?;
    with(|m| m.stream_sync(current(), stream))
}

cu! {
    fn cuStreamSynchronize(stream: CUstream) {
        stream_sync(h(stream))
    }
}

cu! {
    fn cuStreamSynchronize_ptsz(stream: CUstream) {
        stream_sync(sim::ptsz(stream))
    }
}

cu! {
    fn cuStreamQuery(stream: CUstream) {
        with(|m| m.stream_query(current(), h(stream)))
    }
}

cu! {
    fn cuStreamQuery_ptsz(stream: CUstream) {
        with(|m| m.stream_query(current(), sim::ptsz(stream)))
    }
}

/// `cuStreamGetDevice*` (CUDA 12.8): the device of stream `stream`'s context; the current
/// context's for the NULL, legacy and per-thread handles.
fn stream_device(stream: u64, device: *mut CUdevice) -> R<()> {
    nonnull(device)?;
    let o = with(|m| m.stream_ordinal(current(), stream))?;
    // SAFETY: `device` is the caller's non-null out-pointer.
    unsafe { put(device, o as CUdevice) }
}

cu! {
    fn cuStreamGetDevice(stream: CUstream, device: *mut CUdevice) {
        stream_device(h(stream), device)
    }
}

cu! {
    fn cuStreamGetDevice_ptsz(stream: CUstream, device: *mut CUdevice) {
        stream_device(sim::ptsz(stream), device)
    }
}

cu! {
    fn cuStreamWaitEvent(stream: CUstream, event: CUevent, flags: c_uint) {
        let _ = flags;
        with(|m| m.stream_wait_event(current(), h(stream), h(event)))
    }
}

cu! {
    fn cuStreamWaitEvent_ptsz(stream: CUstream, event: CUevent, flags: c_uint) {
        let _ = flags;
        with(|m| m.stream_wait_event(current(), sim::ptsz(stream), h(event)))
    }
}

cu! {
    fn cuStreamWaitValue32_v2(stream: CUstream, addr: CUdeviceptr, value: u32, flags: c_uint) {
        with(|m| m.stream_wait_value(current(), h(stream), addr, value, flags))
    }
}

cu! {
    fn cuStreamWaitValue32_v2_ptsz(
        stream: CUstream,
        addr: CUdeviceptr,
        value: u32,
        flags: c_uint,
    ) {
        with(|m| m.stream_wait_value(current(), sim::ptsz(stream), addr, value, flags))
    }
}

// ----- events ------------------------------------------------------------------------------

cu! {
    fn cuEventCreate(event: *mut CUevent, flags: c_uint) {
        nonnull(event)?;
        let e = with(|m| m.event_create(current(), flags))?;
        // SAFETY: `event` is the caller's non-null out-pointer.
        unsafe { put(event, ptr(e)) }
    }
}

cu! {
    fn cuEventDestroy(event: CUevent) {
        with(|m| m.event_destroy(h(event)))
    }
}

cu! {
    fn cuEventDestroy_v2(event: CUevent) {
        with(|m| m.event_destroy(h(event)))
    }
}

cu! {
    fn cuEventRecord(event: CUevent, stream: CUstream) {
        with(|m| m.event_record(current(), h(event), h(stream)))
    }
}

cu! {
    fn cuEventRecord_ptsz(event: CUevent, stream: CUstream) {
        with(|m| m.event_record(current(), h(event), sim::ptsz(stream)))
    }
}

cu! {
    fn cuEventRecordWithFlags(event: CUevent, stream: CUstream, flags: c_uint) {
        let _ = flags;
        with(|m| m.event_record(current(), h(event), h(stream)))
    }
}

cu! {
    fn cuEventRecordWithFlags_ptsz(event: CUevent, stream: CUstream, flags: c_uint) {
        let _ = flags;
        with(|m| m.event_record(current(), h(event), sim::ptsz(stream)))
    }
}

cu! {
    fn cuEventSynchronize(event: CUevent) {
        with(|m| m.potentially_unsafe())?;
        sim::wait(|m| m.event_due(h(event)))?;
        with(|m| m.event_sync(h(event)))
    }
}

cu! {
    fn cuEventQuery(event: CUevent) {
        with(|m| m.event_query(h(event)))
    }
}

cu! {
    fn cuEventElapsedTime(ms: *mut f32, start: CUevent, end: CUevent) {
        nonnull(ms)?;
        let v = with(|m| m.event_elapsed(h(start), h(end)))?;
        // SAFETY: `ms` is the caller's non-null out-pointer.
        unsafe { put(ms, v) }
    }
}

cu! {
    fn cuEventElapsedTime_v2(ms: *mut f32, start: CUevent, end: CUevent) {
        nonnull(ms)?;
        let v = with(|m| m.event_elapsed(h(start), h(end)))?;
        // SAFETY: `ms` is the caller's non-null out-pointer.
        unsafe { put(ms, v) }
    }
}
