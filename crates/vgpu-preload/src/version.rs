//! The library's version and commit (from the build script shared with the `vgpu` command):
//! the exported `vgpu_version()`, which `vgpu doctor` calls to tell this library from another
//! `libvgpu.so` (HAMi-core's has the same name), and the stamp each process writes into its
//! region slot for `vgpu status` and `vgpu_build_info`.

use core::ffi::c_char;

/// "`<version> <commit>`", as each process stamps its region slot.
pub const STAMP: &str = concat!(env!("CARGO_PKG_VERSION"), " ", env!("VGPU_COMMIT"));

/// What `vgpu_version()` returns, as `vgpu --version` words it, NUL-terminated.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("VGPU_COMMIT"),
    ", built ",
    env!("VGPU_BUILD_DATE"),
    ")\0"
);

/// The library's version, commit and build date: a static NUL-terminated string, e.g.
/// `0.1.0 (commit 1a2b3c4d5e6f, built 2025-01-31)`. Never fails, allocates nothing.
#[unsafe(no_mangle)]
pub extern "C" fn vgpu_version() -> *const c_char {
    VERSION.as_ptr().cast()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_version_is_one_c_string_that_starts_with_the_stamp() {
        let v = super::VERSION;
        assert_eq!(v.find('\0'), Some(v.len() - 1));
        let (version, commit) = super::STAMP.split_once(' ').unwrap();
        assert!(
            v.starts_with(&format!("{version} (commit {commit}, built ")),
            "{v}"
        );
        assert!(
            super::STAMP.len() < 32,
            "the region keeps 31 bytes: {}",
            super::STAMP
        );
    }
}
