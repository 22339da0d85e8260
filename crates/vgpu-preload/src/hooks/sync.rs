//! Synchronisations and queries: how the compute controller learns that the program's queue is
//! empty (docs/COMPUTE.md, "quiet end"). While some device has a compute gate, a
//! synchronisation counts itself in and out of one device's gate (the program waits for its
//! GPU work: not idle), and one that returns successfully, or a query that succeeds, tells that
//! gate "the queue was seen empty now" ([`crate::compute::Gate::saw_empty`]). Which device's:
//! for `cuStreamSynchronize` and `cuStreamQuery` (and `_ptsz`) on a created stream, the
//! stream's own (a program may wait for a stream of device 0 while device 1 is current), as
//! the driver's `cuStreamGetDevice` (CUDA 12.8) says, asked only where the process sees more
//! than one device (in `RELAXED` capture mode); for the NULL, legacy and per-thread streams, and where the driver cannot say (before
//! 12.8, an unknown stream), the current device's. Every other hook here counts in the current
//! device's gate: `cuCtxSynchronize` waits for the current context, and `cuEventSynchronize` and
//! `cuEventQuery` stay there because no driver call names an event's device (a wait for an
//! event recorded on another device is counted in the current device's gate). A synchronous
//! copy to or from host memory waits for the stream's earlier work and counts as a
//! synchronisation: `cuMemcpyDtoH`, `cuMemcpyHtoD` (`cudaMemcpy` with a direction, how CUDA C
//! programs wait), `cuMemcpyAtoH`, `cuMemcpyHtoA` (an array and the host), and `cuMemcpy2D`,
//! `cuMemcpy2DUnaligned`, `cuMemcpy3D` and `cuMemcpy3DPeer` whose descriptor puts one end,
//! not both, in host memory (`CU_MEMORYTYPE_HOST`: `cudaMemcpy2D`/`3D` to or from the host;
//! `CU_MEMORYTYPE_UNIFIED` where the driver says its address is: the same with
//! `cudaMemcpyDefault`), and `cuMemcpy` (`cudaMemcpy` with `cudaMemcpyDefault`) of some bytes
//! where the driver says one end, not both, is host memory, not managed
//! (`cuPointerGetAttribute` calls, only under an SM limit: between two device pointers it
//! returns at once). A stream, event or context synchronisation also settles this process's
//! pool charges, if it has any (the driver releases pool memory then). Without a gate and
//! pools these hooks are a load and a forward.
//! The controller's own drain calls the real `cuCtxSynchronize` directly, never these hooks.
use crate::compute::Gate;
use crate::driver::REAL;
use crate::real::ty;
use crate::runtime::runtime;
use crate::symbols::Call;
use core::ffi::c_void;
use vgpu_sys::cuda::*;

/// The current device's gate, if it has one.
#[inline]
fn gate() -> Option<&'static Gate> {
    gate_for(None)
}

/// The gate that counts a wait for `stream`'s work (`None`: the current context's, or an
/// event's), if its device has one ([`crate::runtime::Runtime::gate_for`]).
#[inline]
fn gate_for(stream: Option<CUstream>) -> Option<&'static Gate> {
    runtime()?.gate_for(stream).map(|(_, g)| g)
}

/// Runs `call`, a call that waits for the GPU's earlier work, counted in the current device's
/// gate.
#[inline]
fn waiting(call: impl FnOnce() -> CUresult) -> CUresult {
    counted(gate(), call)
}

/// Runs `call`, a call that waits for the GPU's earlier work, counted in `gate` if there is one.
#[inline]
fn counted(gate: Option<&Gate>, call: impl FnOnce() -> CUresult) -> CUresult {
    match gate {
        None => call(),
        Some(g) => {
            g.sync_begin();
            let r = call();
            g.sync_end(r == CUDA_SUCCESS);
            r
        }
    }
}

/// Runs a synchronisation `call` counted in `gate` (if any); after one that succeeded, the
/// pools this process charged are re-read (the driver gives back at a stream, event or context
/// synchronisation what a pool holds above its release threshold).
#[inline]
fn synchronizing(gate: Option<&Gate>, call: impl FnOnce() -> CUresult) -> CUresult {
    let r = counted(gate, call);
    if r == CUDA_SUCCESS
        && let Some(rt) = runtime()
        && rt.accounting.pooled()
    {
        rt.accounting.refresh_all(rt.ledger(), &REAL);
    }
    r
}

/// Runs a query `call`; a success shows the queue empty to the gate `gate` finds (asked only
/// then).
#[inline]
fn querying<'g>(
    gate: impl FnOnce() -> Option<&'g Gate>,
    call: impl FnOnce() -> CUresult,
) -> CUresult {
    let r = call();
    if r == CUDA_SUCCESS
        && let Some(g) = gate()
    {
        g.saw_empty();
    }
    r
}

/// # Safety
/// C API contract of `cuCtxSynchronize`.
pub unsafe fn ctx_synchronize(call: Call<ty::cuCtxSynchronize>) -> CUresult {
    synchronizing(gate(), || crate::forward!(call()))
}

/// # Safety
/// C API contract of `cuStreamSynchronize` / `_ptsz`.
pub unsafe fn stream_synchronize(call: Call<ty::cuStreamSynchronize>, s: CUstream) -> CUresult {
    synchronizing(gate_for(Some(s)), || crate::forward!(call(s)))
}

/// Counted in the current device's gate: no driver call names an event's device.
///
/// # Safety
/// C API contract of `cuEventSynchronize`.
pub unsafe fn event_synchronize(call: Call<ty::cuEventSynchronize>, e: CUevent) -> CUresult {
    synchronizing(gate(), || crate::forward!(call(e)))
}

/// # Safety
/// C API contract of `cuStreamQuery` / `_ptsz`.
pub unsafe fn stream_query(call: Call<ty::cuStreamQuery>, s: CUstream) -> CUresult {
    querying(|| gate_for(Some(s)), || crate::forward!(call(s)))
}

/// Shown to the current device's gate: no driver call names an event's device.
///
/// # Safety
/// C API contract of `cuEventQuery`.
pub unsafe fn event_query(call: Call<ty::cuEventQuery>, e: CUevent) -> CUresult {
    querying(gate, || crate::forward!(call(e)))
}

/// # Safety
/// C API contract of `cuMemcpyDtoH_v2` / `_ptds`.
pub unsafe fn memcpy_dtoh(
    call: Call<ty::cuMemcpyDtoH_v2>,
    dst: *mut c_void,
    src: CUdeviceptr,
    n: usize,
) -> CUresult {
    waiting(|| crate::forward!(call(dst, src, n)))
}

/// # Safety
/// C API contract of `cuMemcpyHtoD_v2` / `_ptds`.
pub unsafe fn memcpy_htod(
    call: Call<ty::cuMemcpyHtoD_v2>,
    dst: CUdeviceptr,
    src: *const c_void,
    n: usize,
) -> CUresult {
    waiting(|| crate::forward!(call(dst, src, n)))
}

/// # Safety
/// C API contract of `cuMemcpy` / `_ptds` (unified addresses).
pub unsafe fn memcpy(
    call: Call<ty::cuMemcpy>,
    dst: CUdeviceptr,
    src: CUdeviceptr,
    n: usize,
) -> CUresult {
    let g = gate().filter(|_| n > 0 && waits(REAL.host_memory(src), REAL.host_memory(dst)));
    counted(g, || crate::forward!(call(dst, src, n)))
}

/// # Safety
/// C API contract of `cuMemcpyAtoH_v2` / `_ptds`.
pub unsafe fn memcpy_atoh(
    call: Call<ty::cuMemcpyAtoH_v2>,
    dst: *mut c_void,
    src: CUarray,
    offset: usize,
    n: usize,
) -> CUresult {
    waiting(|| crate::forward!(call(dst, src, offset, n)))
}

/// # Safety
/// C API contract of `cuMemcpyHtoA_v2` / `_ptds`.
pub unsafe fn memcpy_htoa(
    call: Call<ty::cuMemcpyHtoA_v2>,
    dst: CUarray,
    offset: usize,
    src: *const c_void,
    n: usize,
) -> CUresult {
    waiting(|| crate::forward!(call(dst, offset, src, n)))
}

/// Whether a copy whose ends are in host memory as `src` and `dst` say makes the host wait for
/// the stream's earlier work: one end in host memory and the other not (a copy between two
/// host buffers may never wait for the GPU, and counted, it would say the queue was empty
/// when it was not).
fn waits(src: bool, dst: bool) -> bool {
    src != dst
}

/// Whether an end of a 2D or 3D copy of the memory type `kind` is in host memory:
/// `CU_MEMORYTYPE_HOST`, or `CU_MEMORYTYPE_UNIFIED` (`cudaMemcpy2D` / `3D` with
/// `cudaMemcpyDefault`) where `unified_host` (the driver, asked of its address) says so.
fn host_end(kind: CUmemorytype, unified_host: impl FnOnce() -> bool) -> bool {
    match kind {
        CU_MEMORYTYPE_HOST => true,
        CU_MEMORYTYPE_UNIFIED => unified_host(),
        _ => false,
    }
}

/// A 2D or 3D copy's descriptor: the memory type of its source and of its destination, each
/// with its device address (a unified end's address).
trait Described {
    fn ends(&self) -> [(CUmemorytype, CUdeviceptr); 2];
}

macro_rules! described_by {
    ($($t:ty),*) => {$(
        impl Described for $t {
            fn ends(&self) -> [(CUmemorytype, CUdeviceptr); 2] {
                [(self.srcMemoryType, self.srcDevice), (self.dstMemoryType, self.dstDevice)]
            }
        }
    )*};
}
described_by!(CUDA_MEMCPY2D, CUDA_MEMCPY3D, CUDA_MEMCPY3D_PEER);

/// Runs `call`, a 2D or 3D copy described by `*p`, counted in the current device's gate where
/// the descriptor puts one end, not both, in host memory (a unified end as the driver says:
/// one or two `cuPointerGetAttribute` calls for each). The descriptor is read only where a
/// gate exists (without an SM limit: a forward).
///
/// # Safety
/// `p` is null (not read: the driver refuses it) or points to the caller's live descriptor.
unsafe fn described<T: Described>(p: *const T, call: impl FnOnce() -> CUresult) -> CUresult {
    let g = gate().filter(|_| {
        // SAFETY: null or the caller's live descriptor (this function's contract), read for
        // its two ends' memory types and device addresses.
        unsafe { p.as_ref() }.is_some_and(|c| {
            let [src, dst] = c
                .ends()
                .map(|(kind, at)| host_end(kind, || REAL.host_memory(at)));
            waits(src, dst)
        })
    });
    counted(g, call)
}

/// # Safety
/// C API contract of `cuMemcpy2D_v2`, `cuMemcpy2DUnaligned_v2` and their `_ptds`: `p` is null
/// or points to a live descriptor.
pub unsafe fn memcpy_2d(call: Call<ty::cuMemcpy2D_v2>, p: *const CUDA_MEMCPY2D) -> CUresult {
    let forward = || crate::forward!(call(p));
    // SAFETY: `p` is null or the caller's live descriptor (this function's contract).
    unsafe { described(p, forward) }
}

/// # Safety
/// C API contract of `cuMemcpy3D_v2` / `_ptds`: `p` is null or points to a live descriptor.
pub unsafe fn memcpy_3d(call: Call<ty::cuMemcpy3D_v2>, p: *const CUDA_MEMCPY3D) -> CUresult {
    let forward = || crate::forward!(call(p));
    // SAFETY: as in `memcpy_2d`.
    unsafe { described(p, forward) }
}

/// # Safety
/// C API contract of `cuMemcpy3DPeer` / `_ptds`: `p` is null or points to a live descriptor.
pub unsafe fn memcpy_3d_peer(
    call: Call<ty::cuMemcpy3DPeer>,
    p: *const CUDA_MEMCPY3D_PEER,
) -> CUresult {
    let forward = || crate::forward!(call(p));
    // SAFETY: as in `memcpy_2d`.
    unsafe { described(p, forward) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accounting::fake::FakeDriver;
    use crate::runtime::gate_among;
    use vgpu_policy::plan::{GatePlan, SmShare};

    /// A stream the program created on device 0.
    const ON_DEVICE_0: usize = 0x5000;
    /// A stream the driver does not know.
    const UNKNOWN: usize = 0x6000;

    fn gates(n: usize) -> Vec<Option<Gate>> {
        (0..n)
            .map(|_| {
                Some(Gate::new(GatePlan {
                    share: SmShare::new(50),
                    measuring: false,
                }))
            })
            .collect()
    }

    /// The gate among `gates` that counts a wait for stream `s`, as `driver` places it.
    fn stream_gate_in<'g>(
        gates: &'g [Option<Gate>],
        driver: &FakeDriver,
        s: CUstream,
    ) -> Option<&'g Gate> {
        gate_among(gates, driver, Some(s)).map(|(_, g)| g)
    }

    /// The index in `gates` of the gate `g`.
    fn which(gates: &[Option<Gate>], g: Option<&Gate>) -> Option<usize> {
        let g = g?;
        gates
            .iter()
            .position(|x| x.as_ref().is_some_and(|x| core::ptr::eq(x, g)))
    }

    #[test]
    fn a_stream_of_device_0_synchronised_while_device_1_is_current_counts_in_device_0s_gate() {
        let gates = gates(2);
        // The current device is 1; the driver places one stream, of device 0.
        let d = FakeDriver::default();
        d.device.set(Some(1));
        d.streams.borrow_mut().push((ON_DEVICE_0, 0));
        let s = ON_DEVICE_0 as CUstream;
        // cudaSetDevice(1); cudaStreamSynchronize(s) / cudaStreamQuery(s).
        assert_eq!(which(&gates, stream_gate_in(&gates, &d, s)), Some(0));
        assert_eq!(d.streams_asked.get(), 1);
        // The current context's own streams: the current device's, the driver not asked.
        for own in [0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD] {
            let g = stream_gate_in(&gates, &d, own as CUstream);
            assert_eq!(which(&gates, g), Some(1), "{own:#x}");
        }
        assert_eq!(d.streams_asked.get(), 1);
        // A stream the driver cannot place: the current device's, as before.
        let g = stream_gate_in(&gates, &d, UNKNOWN as CUstream);
        assert_eq!(which(&gates, g), Some(1));
        assert_eq!(d.streams_asked.get(), 2);
        // One gate: that one, without a driver call.
        let one = self::gates(1);
        assert_eq!(which(&one, stream_gate_in(&one, &d, s)), Some(0));
        assert_eq!(d.streams_asked.get(), 2);
    }

    /// Whether a 2D or 3D copy between ends of the types `src` and `dst` waits, a unified end
    /// in host memory where `unified_host` says so.
    fn waits_between(src: CUmemorytype, dst: CUmemorytype, unified_host: bool) -> bool {
        waits(
            host_end(src, || unified_host),
            host_end(dst, || unified_host),
        )
    }

    #[test]
    fn a_copy_waits_where_one_end_is_host_memory() {
        use CU_MEMORYTYPE_ARRAY as A;
        use CU_MEMORYTYPE_DEVICE as D;
        use CU_MEMORYTYPE_HOST as H;
        // (source, destination, waits); between two host buffers: no wait for the GPU.
        for (src, dst, want) in [
            (D, H, true),
            (H, A, true),
            (D, D, false),
            (A, D, false),
            (H, H, false),
        ] {
            assert_eq!(waits_between(src, dst, false), want, "{src} -> {dst}");
        }
    }

    #[test]
    fn a_unified_end_is_host_memory_where_the_driver_says_so() {
        use CU_MEMORYTYPE_DEVICE as D;
        use CU_MEMORYTYPE_HOST as H;
        use CU_MEMORYTYPE_UNIFIED as U;
        // (source, destination, the driver says a unified end is host memory, waits).
        for (src, dst, host, want) in [
            (U, D, true, true),
            (D, U, true, true),
            (U, D, false, false),
            (U, H, true, false),
            (U, U, true, false),
        ] {
            assert_eq!(
                waits_between(src, dst, host),
                want,
                "{src} -> {dst}, {host}"
            );
        }
        // An end of a known type is never asked about.
        assert!(host_end(H, || unreachable!()));
        assert!(!host_end(CU_MEMORYTYPE_ARRAY, || unreachable!()));
    }
}
