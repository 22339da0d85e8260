//! `cuGetProcAddress` and `cuGetProcAddress_v2`: hand back our hook, with the ABI of the variant
//! the driver chose, for every symbol we hook; the driver's own pointer for everything else.
//!
//! libcudart 13 asks for `cuGetProcAddress` itself through this function and uses the answer
//! for every later lookup, so the lookup function is one of the hooks.
use crate::real::ty;
use crate::runtime::{self, Mode};
use crate::symbols::{Call, Hook};
use core::ffi::{c_char, c_int, c_void};
use vgpu_sys::cuda::*;

/// # Safety
/// C API contract of `cuGetProcAddress`.
pub unsafe fn get_proc_address(
    call: Call<ty::cuGetProcAddress>,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> CUresult {
    let r = crate::forward!(call(symbol, pfn, version, flags));
    // SAFETY: same pointers, validated inside.
    unsafe { substitute(call.hooks, r, symbol, pfn, version, flags) };
    r
}

/// # Safety
/// C API contract of `cuGetProcAddress_v2`.
pub unsafe fn get_proc_address_v2(
    call: Call<ty::cuGetProcAddress_v2>,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut CUdriverProcAddressQueryResult,
) -> CUresult {
    let r = crate::forward!(call(symbol, pfn, version, flags, status));
    // SAFETY: same pointers, validated inside.
    unsafe { substitute(call.hooks, r, symbol, pfn, version, flags) };
    r
}

/// # Safety
/// `symbol` null or NUL-terminated; `pfn` null or valid for reads and writes.
unsafe fn substitute(
    hooks: &[Hook],
    r: CUresult,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) {
    if r != CUDA_SUCCESS || pfn.is_null() || runtime::mode() == Mode::Disabled {
        return;
    }
    // SAFETY: non-null, and the driver just wrote it.
    let found = unsafe { *pfn };
    if found.is_null() {
        return;
    }
    // SAFETY: `symbol` is the caller's NUL-terminated name (or null).
    let Some(name) = (unsafe { cstr_bytes(symbol) }) else {
        return;
    };
    if let Some(h) = select(hooks, name, version, flags, found) {
        // SAFETY: `pfn` is valid for writes (checked non-null, the driver wrote it).
        unsafe { *pfn = h as *mut c_void };
    }
}

/// Base names the driver hands out another function for from some version on, with a
/// prototype of its own: (`name`, from `version`, the exported function it is then).
/// `cuGraphInstantiate` is `cuGraphInstantiateWithFlags` from CUDA 12 (`cuda.h` defines the one
/// as the other), three arguments instead of five.
const RENAMED: &[(&str, c_int, &str)] =
    &[("cuGraphInstantiate", 12000, "cuGraphInstantiateWithFlags")];

/// Which of our hooks stands for what the driver returned for `name`.
///
/// First by address: among the hooks of `name` and of what it was renamed to, the one whose real
/// function is exactly `found` (the function the driver chose, whatever its rules: its
/// prototype is the hook's). Failing that (a
/// driver that returns internal addresses), by the driver's documented rules: a base name that
/// became another function (`RENAMED`) is that function's hook; else, among the hooks for base
/// name `name` (or exported name `name`), the per-thread-stream variant when `flags` ask for it
/// and one exists, and the highest `min_version` not above `version`. `None`: not a symbol we
/// hook.
pub fn select(
    table: &[Hook],
    name: &[u8],
    version: c_int,
    flags: u64,
    found: *mut c_void,
) -> Option<*const c_void> {
    let named = |h: &&Hook| h.base.as_bytes() == name || h.name.as_bytes() == name;
    if !table.iter().any(|h| named(&h)) {
        return None;
    }
    // The candidates: the hooks of this name, and those of what it was renamed to (only
    // these: resolving every hook's real function would load NVML into the program).
    let renamed = |h: &&Hook| {
        RENAMED
            .iter()
            .any(|&(from, _, to)| from.as_bytes() == name && h.name == to)
    };
    if let Some(h) = table
        .iter()
        .filter(|h| named(h) || renamed(h))
        .find(|h| (h.real)() == found)
    {
        return Some(h.hook);
    }
    if let Some(&(_, _, to)) = RENAMED
        .iter()
        .find(|&&(from, since, _)| from.as_bytes() == name && version >= since)
    {
        return table.iter().find(|h| h.name == to).map(|h| h.hook);
    }
    let want_ptsz = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM != 0
        && table.iter().filter(named).any(|h| h.ptsz);
    table
        .iter()
        .filter(named)
        .filter(|h| h.ptsz == want_ptsz && h.min_version <= version)
        .max_by_key(|h| h.min_version)
        .map(|h| h.hook)
}

#[cfg(test)]
#[allow(clippy::manual_dangling_ptr)]
mod tests {
    use super::*;
    use crate::hooks::HOOKS;

    fn null() -> *mut c_void {
        core::ptr::null_mut()
    }
    fn addr_a() -> *mut c_void {
        0x1000 as *mut c_void
    }
    fn addr_b() -> *mut c_void {
        0x2000 as *mut c_void
    }

    /// A table entry whose hook is the number `hook`.
    fn mk(
        name: &'static str,
        base: &'static str,
        min_version: c_int,
        ptsz: bool,
        hook: usize,
        real: fn() -> *mut c_void,
    ) -> Hook {
        Hook {
            name,
            base,
            min_version,
            ptsz,
            hook: hook as *const c_void,
            real,
        }
    }

    fn table() -> Vec<Hook> {
        vec![
            mk("cuMemAlloc", "cuMemAlloc", 2000, false, 1, null),
            mk("cuMemAlloc_v2", "cuMemAlloc", 3020, false, 2, null),
            mk("cuLaunchKernel", "cuLaunchKernel", 4000, false, 3, addr_a),
            mk(
                "cuLaunchKernel_ptsz",
                "cuLaunchKernel",
                4000,
                true,
                4,
                addr_b,
            ),
        ]
    }

    #[test]
    fn picks_by_address_first() {
        let t = table();
        // Asked at an old version with legacy flags, but the driver returned the ptsz address.
        let h = select(&t, b"cuLaunchKernel", 4000, 0, addr_b());
        assert_eq!(h, Some(4 as *const c_void));
        let h = select(&t, b"cuLaunchKernel", 12000, 2, addr_a());
        assert_eq!(h, Some(3 as *const c_void));
    }

    #[test]
    fn falls_back_to_version_rules() {
        let t = table();
        let unknown = 0x9999 as *mut c_void;
        assert_eq!(
            select(&t, b"cuMemAlloc", 3010, 0, unknown),
            Some(1 as *const c_void)
        );
        assert_eq!(
            select(&t, b"cuMemAlloc", 3020, 0, unknown),
            Some(2 as *const c_void)
        );
        assert_eq!(
            select(&t, b"cuMemAlloc", 13000, 2, unknown),
            Some(2 as *const c_void)
        );
        assert_eq!(
            select(&t, b"cuLaunchKernel", 7000, 2, unknown),
            Some(4 as *const c_void)
        );
        assert_eq!(
            select(&t, b"cuLaunchKernel", 7000, 1, unknown),
            Some(3 as *const c_void)
        );
        assert_eq!(
            select(&t, b"cuLaunchKernel", 7000, 0, unknown),
            Some(3 as *const c_void)
        );
    }

    #[test]
    fn exported_names_and_unknown_names() {
        let t = table();
        let unknown = 0x9999 as *mut c_void;
        assert_eq!(
            select(&t, b"cuMemAlloc_v2", 12000, 0, unknown),
            Some(2 as *const c_void)
        );
        assert_eq!(select(&t, b"cuMemcpy", 12000, 0, unknown), None);
        assert_eq!(select(&t, b"cuMemAllo", 12000, 0, unknown), None);
    }

    #[test]
    fn a_base_name_that_became_another_function_gets_that_function_s_hook() {
        // cuGetProcAddress("cuGraphInstantiate", 12000) is cuGraphInstantiateWithFlags (three
        // arguments): handing out the five-argument cuGraphInstantiate_v2 hook would read two
        // garbage pointers.
        let t = vec![
            mk(
                "cuGraphInstantiate",
                "cuGraphInstantiate",
                10000,
                false,
                1,
                null,
            ),
            mk(
                "cuGraphInstantiate_v2",
                "cuGraphInstantiate",
                11000,
                false,
                2,
                null,
            ),
            mk(
                "cuGraphInstantiateWithFlags",
                "cuGraphInstantiateWithFlags",
                11040,
                false,
                3,
                addr_a,
            ),
        ];
        let unknown = 0x9999 as *mut c_void;
        // By address, whatever the name.
        assert_eq!(
            select(&t, b"cuGraphInstantiate", 12000, 0, addr_a()),
            Some(3 as *const c_void)
        );
        // By the rename, where the address says nothing.
        assert_eq!(
            select(&t, b"cuGraphInstantiate", 13000, 0, unknown),
            Some(3 as *const c_void)
        );
        assert_eq!(
            select(&t, b"cuGraphInstantiate", 11020, 0, unknown),
            Some(2 as *const c_void)
        );
    }

    #[test]
    fn version_below_every_variant_is_not_substituted() {
        let t = table();
        assert_eq!(
            select(&t, b"cuLaunchKernel", 3000, 0, 0x9999 as *mut c_void),
            None
        );
    }

    #[test]
    fn the_real_table_is_consistent() {
        for h in HOOKS {
            assert!(
                h.name.starts_with(h.base),
                "{} is not a variant of {}",
                h.name,
                h.base
            );
            assert_eq!(
                h.ptsz,
                h.name.ends_with("_ptsz") || h.name.ends_with("_ptds"),
                "{}",
                h.name
            );
            assert_eq!(super::super::lookup(h.name.as_bytes()), Some(h.hook));
        }
        // Every (base, ptsz, version) is unambiguous.
        for (i, a) in HOOKS.iter().enumerate() {
            for b in &HOOKS[i + 1..] {
                assert!(
                    !(a.base == b.base && a.ptsz == b.ptsz && a.min_version == b.min_version),
                    "{} and {} are indistinguishable",
                    a.name,
                    b.name
                );
            }
        }
    }
}
