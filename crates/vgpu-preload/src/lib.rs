//! `libvgpu.so`: loaded with `LD_PRELOAD` into CUDA programs, it sits between the program (or
//! libcudart) and the real driver (`libcuda.so.1`) and NVML (`libnvidia-ml.so.1`), and holds
//! each GPU's device memory to the configured limit.
//!
//! Layout (see `docs/ARCHITECTURE.md`), each layer depending only on those after it:
//! - [`hooks`]: the exports, generated from the symbol table ([`symbols`]), and their bodies,
//!   thin adapters from C pointers to the runtime; twins (`_v2`, `_ptsz`) share one body.
//! - [`runtime`]: lazily initialised process state (mode, the resolved plan, device table,
//!   ledger, registry, accounting, compute gates).
//! - [`compute`]: the compute gate of each limited device and its controller; [`marks`]: what
//!   its paced windows' launches cost.
//! - [`accounting`]: pool and context charges, over any [`driver::Driver`].
//! - [`driver`]: the driver facade, every driver and NVML call vgpu makes on its own behalf.
//! - [`real`], [`symbols`]: typed pointers to the real functions, and the table they come from.
//! - [`backend`]: the loader: finding the real `dlsym`, opening the real libraries, typed
//!   pointers to real functions, and our `dlsym` trampoline. All raw-address `unsafe` is here.
//! - [`node`], [`guard`], [`log`]: node tokens, the C boundary (no panic crosses it) and stderr
//!   messages; [`version`]: the exported `vgpu_version()`.
//!
//! Configuration comes resolved from `vgpu_policy::plan::Plan` (the environment is read only by
//! `vgpu_policy::config`).
//!
//! Policy (size parsing, configuration, the ledger, views) is plain safe Rust in the
//! `vgpu-policy` crate and is unit-tested there without any FFI.
#![deny(unsafe_op_in_unsafe_fn)]

#[macro_use]
pub mod symbols;

pub mod accounting;
pub mod backend;
pub mod compute;
pub mod driver;
pub mod guard;
pub mod hooks;
pub mod log;
pub mod marks;
pub mod node;
pub mod real;
pub mod runtime;
pub mod version;

/// Forwards a call to the real function of the same name, or returns `$missing` when the real
/// library or symbol is absent.
#[macro_export]
#[doc(hidden)]
macro_rules! fwd {
    ($missing:expr, $name:ident($($arg:expr),* $(,)?)) => {
        match $crate::real::$name.get() {
            // SAFETY: the arguments are the caller's own, forwarded unchanged to the real
            // function with the same prototype.
            Some(f) => unsafe { f($($arg),*) },
            None => $missing,
        }
    };
    ($name:ident($($arg:expr),* $(,)?)) => {
        $crate::fwd!(vgpu_sys::cuda::CUDA_ERROR_NOT_FOUND, $name($($arg),*))
    };
}

/// Forwards a hook body's call to the real function of its own export (`$call`, the body's
/// [`symbols::Call`]), or returns `$missing` when the real library or symbol is absent.
#[macro_export]
#[doc(hidden)]
macro_rules! forward {
    ($missing:expr, $call:ident($($arg:expr),* $(,)?)) => {
        match $call.real() {
            // SAFETY: the arguments are the caller's own, forwarded unchanged to the real
            // function of the export the caller called, which has the same prototype.
            Some(f) => unsafe { f($($arg),*) },
            None => $missing,
        }
    };
    ($call:ident($($arg:expr),* $(,)?)) => {
        $crate::forward!(vgpu_sys::cuda::CUDA_ERROR_NOT_FOUND, $call($($arg),*))
    };
}
