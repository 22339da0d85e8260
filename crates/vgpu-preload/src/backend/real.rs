//! Typed, lazily resolved pointers to the real driver and NVML functions.
use super::dl::{self, Lib};
use core::ffi::{CStr, c_void};
use core::marker::PhantomData;
use core::sync::atomic::{AtomicPtr, Ordering};

/// The real implementation of one exported symbol, resolved on first use and then cached.
///
/// `F` is the function pointer type of the symbol's C prototype. Resolving is a `dlsym` on the
/// real library; afterwards [`RealFn::get`] is a single atomic load, for a symbol the library
/// lacks too (an older driver's: a failed `dlsym` takes the loader's lock and allocates its
/// error message, and an optional call asked at every synchronisation would pay that each
/// time). Only a library that cannot be loaded is tried again at the next use.
pub struct RealFn<F> {
    lib: Lib,
    name: &'static CStr,
    ptr: AtomicPtr<c_void>,
    _f: PhantomData<F>,
}

/// What [`RealFn`] keeps for a symbol its loaded library lacks: an address no function has.
fn absent() -> *mut c_void {
    core::ptr::without_provenance_mut(1)
}

// SAFETY: the only state is an AtomicPtr; `F` is a plain function pointer type (see `new`).
unsafe impl<F> Sync for RealFn<F> {}

impl<F: Copy> RealFn<F> {
    /// # Safety
    /// `F` must be an `unsafe extern "C" fn(..) -> ..` pointer type whose signature is exactly
    /// the C prototype of the symbol `name` exported by `lib`.
    pub const unsafe fn new(lib: Lib, name: &'static CStr) -> Self {
        RealFn {
            lib,
            name,
            ptr: AtomicPtr::new(core::ptr::null_mut()),
            _f: PhantomData,
        }
    }

    /// The symbol's name.
    pub fn name(&self) -> &'static CStr {
        self.name
    }

    /// The real function's address, or null when the library or symbol is missing.
    #[inline]
    pub fn addr(&self) -> *mut c_void {
        let p = self.ptr.load(Ordering::Acquire);
        if p == absent() {
            return core::ptr::null_mut();
        }
        if !p.is_null() {
            return p;
        }
        let Some(p) = dl::resolve(self.lib, self.name) else {
            return core::ptr::null_mut();
        };
        self.ptr
            .store(if p.is_null() { absent() } else { p }, Ordering::Release);
        p
    }

    /// The real function, or `None` when the library or symbol is missing.
    #[inline]
    pub fn get(&self) -> Option<F> {
        const { assert!(core::mem::size_of::<F>() == core::mem::size_of::<*mut c_void>()) };
        let p = self.addr();
        if p.is_null() {
            return None;
        }
        // SAFETY: by the contract of `new`, F is a function pointer type matching the symbol,
        // and `p` is that symbol's non-null address; the sizes match (checked above).
        Some(unsafe { core::mem::transmute_copy::<*mut c_void, F>(&p) })
    }
}
