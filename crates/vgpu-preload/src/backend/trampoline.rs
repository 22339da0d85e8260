//! Our exported `dlsym`.
//!
//! glibc's `dlsym` resolves `RTLD_NEXT` relative to its caller's return address. A plain Rust
//! override that called the real one would make *this* library the caller and break every
//! `RTLD_NEXT` lookup of the program and of other interposers. So the export is a naked
//! trampoline: it asks [`crate::hooks::dlsym_decide`] whether the name is one of our hooks and,
//! if not, *jumps* (not calls) to glibc's `dlsym` with the original arguments and return address.

/// Asks the hook table; returns the hook's address or null. Never unwinds, never allocates.
extern "C" fn decide(handle: *mut core::ffi::c_void, name: *const core::ffi::c_char) -> usize {
    // Make sure the jump target exists before the trampoline uses it.
    super::dl::real_dlsym_addr();
    // `dlsym_decide` is panic-free by construction (table lookups); catch anyway.
    // SAFETY: the arguments are the program's own dlsym arguments, passed through.
    std::panic::catch_unwind(|| unsafe { crate::hooks::dlsym_decide(handle, name) }).unwrap_or(0)
}

/// The exported `dlsym`.
///
/// # Safety
/// Same contract as glibc's `dlsym`.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(
    handle: *mut core::ffi::c_void,
    symbol: *const core::ffi::c_char,
) -> *mut core::ffi::c_void {
    // On entry rsp ≡ 8 (mod 16). Two pushes and 8 bytes keep the call 16-byte aligned.
    core::arch::naked_asm!(
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {decide}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jnz 2f",
        "jmp qword ptr [rip + {real}]",
        "2:",
        "ret",
        decide = sym decide,
        real = sym super::dl::REAL_DLSYM,
    )
}
