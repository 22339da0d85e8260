//! Typed, lazily resolved pointers to the real driver and NVML functions, one per symbol of the
//! table ([`crate::symbols`]): every hooked export, and the functions vgpu calls itself. Named
//! like the symbol (`crate::real::cuMemAlloc_v2`); [`crate::fwd!`] calls them.
#![allow(non_upper_case_globals, non_camel_case_types)]

use crate::backend::dl::Lib;
use crate::backend::real::RealFn;
use core::ffi::{c_char, c_int, c_uint, c_void};
use vgpu_sys::cuda::*;
use vgpu_sys::nvml::*;

/// `"name\0"` as a `&'static CStr`, built at compile time.
macro_rules! cstr_of {
    ($name:ident) => {{
        const S: &str = concat!(stringify!($name), "\0");
        match core::ffi::CStr::from_bytes_with_nul(S.as_bytes()) {
            Ok(c) => c,
            Err(_) => panic!("symbol name"),
        }
    }};
}

macro_rules! real_fns {
    (
        hooks {$(
            $lib:ident $name:ident [$base:literal, $ver:literal $(, $ptsz:ident)?]
                ($($arg:ident : $ty:ty),* $(,)?) -> $ret:ty => $imp:path;
        )*}
        uses {$(
            $ulib:ident $uname:ident ($($uty:ty),* $(,)?) -> $uret:ty;
        )*}
    ) => {
        $(
            pub static $name: RealFn<unsafe extern "C" fn($($ty),*) -> $ret> =
                // SAFETY: the type is the C prototype of the symbol, as declared in the table.
                unsafe { RealFn::new(Lib::$lib, cstr_of!($name)) };
        )*
        /// The C prototype of each hooked export, as a function pointer type (what its hook
        /// body's [`crate::symbols::Call`] is typed by).
        pub mod ty {
            use super::*;
            $(
                pub type $name = unsafe extern "C" fn($($ty),*) -> $ret;
            )*
        }
        $(
            pub static $uname: RealFn<unsafe extern "C" fn($($uty),*) -> $uret> =
                // SAFETY: the type is the C prototype of the symbol, as declared in the table.
                unsafe { RealFn::new(Lib::$ulib, cstr_of!($uname)) };
        )*
    };
}

with_symbols!(real_fns);
