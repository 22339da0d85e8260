//! Contexts take device memory of their own (about 0.5 GiB on an H200). vgpu charges the
//! expected size before the real call that creates the context, measures the change in the
//! device's used memory (NVML) across it, and settles the charge
//! ([`crate::accounting::Accounting::create_context`]): a context the container's budget
//! cannot hold is refused before it exists, and a neighbour's memory traffic never makes a
//! context free or absurdly expensive.
use crate::accounting::release_context_memory;
use crate::driver::{Driver, REAL};
use crate::real::ty;
use crate::runtime::runtime;
use crate::symbols::Call;
use core::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::Ordering;
use vgpu_sys::cuda::*;

/// # Safety
/// C API contract of `cuDevicePrimaryCtxRetain`.
pub unsafe fn primary_retain(
    call: Call<ty::cuDevicePrimaryCtxRetain>,
    pctx: *mut CUcontext,
    dev: CUdevice,
) -> CUresult {
    let Some((rt, device)) = runtime().and_then(|rt| Some((rt, rt.limited_device(dev)?))) else {
        let r = crate::forward!(call(pctx, dev));
        // Counted where a compute gate's marks may live in the context too (which release
        // is its last: `before_context_loss`).
        if r == CUDA_SUCCESS
            && let Some(rt) = runtime()
            && rt.gate(dev).is_some()
            && let Some(d) = rt.device(dev)
        {
            d.primary_retains.fetch_add(1, Ordering::AcqRel);
        }
        return r;
    };
    let d = &rt.devices[device];
    let remember = || {
        if !pctx.is_null() {
            // SAFETY: the driver wrote the primary context through `pctx` (it succeeded).
            d.primary.store(unsafe { *pctx } as u64, Ordering::Release);
        }
    };
    if d.primary_retains.fetch_add(1, Ordering::AcqRel) != 0 {
        let r = crate::forward!(call(pctx, dev));
        if r == CUDA_SUCCESS {
            remember();
        } else {
            d.primary_retains.fetch_sub(1, Ordering::AcqRel);
        }
        return r;
    }
    let made = rt.accounting.create_context(
        rt.context_ledger(),
        &REAL,
        device,
        &d.uuid,
        |b| rt.charge_context(device, b),
        || crate::forward!(call(pctx, dev)),
        || {
            crate::fwd!(cuDevicePrimaryCtxRelease_v2(dev));
        },
    );
    // The context's memory counts like any allocation: if the container's budget cannot hold
    // it, the program sees a full device.
    let bytes = match made {
        Ok(bytes) => bytes,
        Err(r) => {
            d.primary_retains.fetch_sub(1, Ordering::AcqRel);
            return r;
        }
    };
    d.primary_charge.store(bytes, Ordering::Release);
    remember();
    crate::log::info(format_args!(
        "primary context on device {dev}: {} charged",
        vgpu_policy::size::format_size(bytes)
    ));
    CUDA_SUCCESS
}

/// Before a call that destroys a context of device `dev` (`certain`), or may (a primary
/// release: when it is the last retain vgpu counted, or none was counted): the device's compute
/// gate retires its marks, whose driver objects may live in that context and go with it
/// ([`crate::marks::Marks::retire`]; the driver may crash on one used after). `ctx`: the
/// context, where it is known to be a created one (`Gate::retire_marks_of`).
fn before_context_loss(dev: CUdevice, certain: bool, ctx: Option<CUcontext>) {
    let Some(rt) = runtime() else {
        return;
    };
    let Some(g) = rt.gate(dev) else {
        return;
    };
    let retains = rt
        .device(dev)
        .map_or(0, |d| d.primary_retains.load(Ordering::Acquire));
    if certain || retains <= 1 {
        g.retire_marks_of(ctx);
    }
}

/// The device of context `ctx` (made current for the question, the caller's current context
/// put back), or `None` if the driver cannot say.
fn context_device(ctx: CUcontext) -> Option<CUdevice> {
    let before = REAL.current_context().unwrap_or(core::ptr::null_mut());
    if REAL.set_current(ctx) != CUDA_SUCCESS {
        return None;
    }
    let dev = REAL.current_device();
    REAL.set_current(before);
    dev
}

fn after_primary_release(dev: CUdevice, reset: bool) {
    let Some(rt) = runtime() else {
        return;
    };
    let Some(d) = rt.device(dev) else {
        return;
    };
    let last = if reset {
        d.primary_retains.swap(0, Ordering::AcqRel) > 0
    } else {
        d.primary_retains
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            == Ok(1)
    };
    let Some(device) = rt.limited_device(dev) else {
        return;
    };
    if last {
        rt.context_ledger()
            .release(device, d.primary_charge.swap(0, Ordering::AcqRel));
        // Its handle may come back for a context made later: no record may take it for the
        // primary.
        d.primary.store(0, Ordering::Release);
        // The primary context is gone, and with it the memory allocated in it (records say
        // which context they were made in: those of created contexts stay).
        release_context_memory(&rt.registry, rt.ledger(), device, Some(0));
    }
}

/// # Safety
/// C API contract of `cuDevicePrimaryCtxRelease` / `_v2`.
pub unsafe fn primary_release(
    call: Call<ty::cuDevicePrimaryCtxRelease>,
    dev: CUdevice,
) -> CUresult {
    before_context_loss(dev, false, None);
    let r = crate::forward!(call(dev));
    if r == CUDA_SUCCESS {
        after_primary_release(dev, false);
    }
    r
}

/// # Safety
/// C API contract of `cuDevicePrimaryCtxReset` / `_v2`.
pub unsafe fn primary_reset(call: Call<ty::cuDevicePrimaryCtxReset>, dev: CUdevice) -> CUresult {
    before_context_loss(dev, true, None);
    let r = crate::forward!(call(dev));
    if r == CUDA_SUCCESS {
        after_primary_release(dev, true);
    }
    r
}

/// Shared body of the `cuCtxCreate` variants. `pctx` is the out-pointer the caller gave the
/// driver; it is read only after the driver reported success (and so wrote it).
fn created(pctx: *mut CUcontext, dev: CUdevice, create: impl FnOnce() -> CUresult) -> CUresult {
    let Some((rt, device)) = runtime().and_then(|rt| Some((rt, rt.limited_device(dev)?))) else {
        return create();
    };
    if pctx.is_null() {
        return create();
    }
    let made = rt.accounting.create_context(
        rt.context_ledger(),
        &REAL,
        device,
        &rt.devices[device].uuid,
        |b| rt.charge_context(device, b),
        create,
        || {
            // SAFETY: `undo` runs only after the driver reported success, so it wrote the new
            // context to `pctx`.
            let ctx = unsafe { *pctx };
            crate::fwd!(cuCtxDestroy_v2(ctx));
        },
    );
    match made {
        Ok(bytes) => {
            // SAFETY: the driver wrote the new context to `pctx` on success.
            let ctx = unsafe { *pctx };
            rt.accounting.add_context(ctx, device, bytes);
            CUDA_SUCCESS
        }
        Err(r) => r,
    }
}

/// # Safety
/// C API contract of `cuCtxCreate` / `_v2`.
pub unsafe fn create(
    call: Call<ty::cuCtxCreate>,
    pctx: *mut CUcontext,
    flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    created(pctx, dev, || crate::forward!(call(pctx, flags, dev)))
}

/// # Safety
/// C API contract of `cuCtxCreate_v3`.
pub unsafe fn create_v3(
    call: Call<ty::cuCtxCreate_v3>,
    pctx: *mut CUcontext,
    params: *mut c_void,
    n: c_int,
    flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    created(pctx, dev, || {
        crate::forward!(call(pctx, params, n, flags, dev))
    })
}

/// # Safety
/// C API contract of `cuCtxCreate_v4`.
pub unsafe fn create_v4(
    call: Call<ty::cuCtxCreate_v4>,
    pctx: *mut CUcontext,
    params: *mut c_void,
    flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    created(pctx, dev, || {
        crate::forward!(call(pctx, params, flags, dev))
    })
}

fn after_destroy(ctx: CUcontext) {
    let Some(rt) = runtime() else {
        return;
    };
    let Some(device) = rt.accounting.context_destroyed(rt.context_ledger(), ctx) else {
        return;
    };
    // The memory allocated in it is gone with it.
    release_context_memory(&rt.registry, rt.ledger(), device, Some(ctx as u64));
    if !rt.accounting.has_context_on(device)
        && rt.devices[device].primary_retains.load(Ordering::Acquire) == 0
    {
        // The device's last context vgpu knows of is gone, and with it all its memory.
        release_context_memory(&rt.registry, rt.ledger(), device, None);
    }
}

/// # Safety
/// C API contract of `cuCtxDestroy` / `_v2`.
pub unsafe fn destroy(call: Call<ty::cuCtxDestroy>, ctx: CUcontext) -> CUresult {
    if let Some(rt) = runtime().filter(|rt| rt.compute_limited) {
        // The gate of the context's device; every gate where the driver cannot say which.
        match context_device(ctx) {
            Some(dev) => before_context_loss(dev, true, Some(ctx)),
            None => rt
                .gates
                .iter()
                .flatten()
                .for_each(|g| g.retire_marks_of(None)),
        }
    }
    let r = crate::forward!(call(ctx));
    if r == CUDA_SUCCESS {
        after_destroy(ctx);
    }
    r
}
