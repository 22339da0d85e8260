//! Loading the real driver and NVML, and finding the real `dlsym`.
//!
//! The real libraries are opened by soname (`libcuda.so.1`, `libnvidia-ml.so.1`), so the
//! loader's search path (`LD_LIBRARY_PATH`, `ld.so.cache`) decides which driver is used. If the
//! program already loaded one, `dlopen` returns that same object.
//!
//! We export our own `dlsym` (see [`super::trampoline`]), so this library must never call
//! `libc::dlsym` itself: that name binds to our export. All lookups go through
//! [`real_dlsym`], the glibc function found with `dlvsym`.
use core::ffi::{CStr, c_char, c_void};
use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// Which real library a symbol comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lib {
    /// `libcuda.so.1`, the CUDA driver.
    Cuda,
    /// `libnvidia-ml.so.1`, NVML.
    Nvml,
}

impl Lib {
    fn soname(self) -> &'static CStr {
        match self {
            Lib::Cuda => c"libcuda.so.1",
            Lib::Nvml => c"libnvidia-ml.so.1",
        }
    }
    /// Where the handle is kept once opened (null until then).
    fn cache(self) -> &'static AtomicPtr<c_void> {
        static CUDA: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
        static NVML: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
        match self {
            Lib::Cuda => &CUDA,
            Lib::Nvml => &NVML,
        }
    }
}

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// Address of glibc's `dlsym`, 0 until resolved. The trampoline reads it with a plain load
/// (an `AtomicUsize` has the layout of a `usize`) after `decide` has resolved it.
pub(crate) static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn dlsym_unavailable(_: *mut c_void, _: *const c_char) -> *mut c_void {
    core::ptr::null_mut()
}

/// The symbol versions glibc has given `dlsym`, newest first. glibc 2.34 moved `dlsym` from
/// `libdl` into `libc` as `dlsym@GLIBC_2.34`; before that (and still, as a compatibility alias)
/// it is versioned with the architecture's oldest glibc ABI: `GLIBC_2.2.5` on x86-64,
/// `GLIBC_2.17` on AArch64. Asking for the other architecture's version finds nothing.
#[cfg(target_arch = "x86_64")]
const DLSYM_VERSIONS: [&CStr; 2] = [c"GLIBC_2.34", c"GLIBC_2.2.5"];
#[cfg(target_arch = "aarch64")]
const DLSYM_VERSIONS: [&CStr; 2] = [c"GLIBC_2.34", c"GLIBC_2.17"];

/// Finds glibc's own `dlsym` once (see `DLSYM_VERSIONS`). Lock-free and allocation-free: it
/// can run inside an allocator's or the loader's own initialisation.
pub fn real_dlsym_addr() -> usize {
    let cur = REAL_DLSYM.load(Ordering::Acquire);
    if cur != 0 {
        return cur;
    }
    let mut found = core::ptr::null_mut();
    for version in DLSYM_VERSIONS {
        // SAFETY: dlvsym with RTLD_NEXT and two NUL-terminated strings is always valid to call;
        // RTLD_NEXT is resolved relative to this library, so it finds the next `dlsym`: libc's.
        found = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) };
        if !found.is_null() {
            break;
        }
    }
    let addr = if found.is_null() {
        dlsym_unavailable as DlsymFn as usize
    } else {
        found as usize
    };
    REAL_DLSYM.store(addr, Ordering::Release);
    addr
}

/// Calls glibc's `dlsym` with this library as the caller.
///
/// # Safety
/// `handle` must be a handle from `dlopen` or one of the `RTLD_*` pseudo-handles, and `name` a
/// valid NUL-terminated string.
pub unsafe fn real_dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    let addr = real_dlsym_addr();
    // SAFETY: `addr` is glibc's dlsym (or our null-returning stand-in), both of type DlsymFn.
    let f: DlsymFn = unsafe { core::mem::transmute::<usize, DlsymFn>(addr) };
    // SAFETY: arguments are valid per this function's contract.
    unsafe { f(handle, name) }
}

/// The `dlopen` handle of a real library, opened on first use. Null if it cannot be loaded.
pub fn handle(lib: Lib) -> *mut c_void {
    let cache = lib.cache();
    let h = cache.load(Ordering::Acquire);
    if !h.is_null() {
        return h;
    }
    // SAFETY: dlopen with a NUL-terminated soname; RTLD_NOW|RTLD_GLOBAL mirrors how libcudart
    // opens the driver. Re-opening an already loaded object only bumps its reference count.
    let h = unsafe { libc::dlopen(lib.soname().as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if !h.is_null() {
        // A racing thread may store the same handle: dlopen returns one handle per object.
        cache.store(h, Ordering::Release);
    }
    h
}

/// The real address of `name` in `lib` (null: the library lacks it), or `None` when the
/// library cannot be loaded.
pub fn resolve(lib: Lib, name: &CStr) -> Option<*mut c_void> {
    let h = handle(lib);
    if h.is_null() {
        return None;
    }
    // SAFETY: `h` is a live dlopen handle and `name` is NUL-terminated.
    Some(unsafe { real_dlsym(h, name.as_ptr()) })
}
