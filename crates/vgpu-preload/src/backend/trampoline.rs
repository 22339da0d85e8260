//! Our exported `dlsym`.
//!
//! glibc's `dlsym` resolves `RTLD_NEXT` relative to its caller's return address. A plain Rust
//! override that called the real one would make *this* library the caller and break every
//! `RTLD_NEXT` lookup of the program and of other interposers. So the export is a naked
//! trampoline: it asks [`crate::hooks::dlsym_decide`] whether the name is one of our hooks and,
//! if not, *jumps* (not calls) to glibc's `dlsym` with the original arguments and return address
//! (x86-64: the return address on the stack is untouched; aarch64: the link register `x30` is
//! restored before the tail branch).
//!
//! There is one trampoline per supported architecture. Any other architecture is a build error:
//! without the export, allocations a program looks up through `dlsym` would escape the limit.

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!(
    "vgpu-preload exports a dlsym trampoline for x86_64 and aarch64 only; \
     add one for this architecture in backend/trampoline.rs"
);

/// Asks the hook table; returns the hook's address or null. Never unwinds, never allocates.
extern "C" fn decide(handle: *mut core::ffi::c_void, name: *const core::ffi::c_char) -> usize {
    // Make sure the jump target exists before the trampoline uses it.
    super::dl::real_dlsym_addr();
    // `dlsym_decide` is panic-free by construction (table lookups); catch anyway.
    // SAFETY: the arguments are the program's own dlsym arguments, passed through.
    std::panic::catch_unwind(|| unsafe { crate::hooks::dlsym_decide(handle, name) }).unwrap_or(0)
}

/// The exported `dlsym` (x86-64 System V).
///
/// # Safety
/// Same contract as glibc's `dlsym`.
#[cfg(target_arch = "x86_64")]
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

/// The exported `dlsym` (AArch64 AAPCS64).
///
/// The frame saves the frame pointer, the link register (`x30`, the program's return address)
/// and the two arguments; `sp` stays 16-byte aligned. After `decide` returns, everything is
/// restored, so the tail branch reaches glibc's `dlsym` with the program's `x30`: glibc then
/// resolves `RTLD_NEXT` relative to the program, not to this library. The branch goes through
/// `x16` (IP0, free to clobber across a call and accepted by a `bti c` landing pad).
///
/// # Safety
/// Same contract as glibc's `dlsym`.
#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(
    handle: *mut core::ffi::c_void,
    symbol: *const core::ffi::c_char,
) -> *mut core::ffi::c_void {
    core::arch::naked_asm!(
        "stp x29, x30, [sp, #-32]!",
        "mov x29, sp",
        "stp x0, x1, [sp, #16]",
        "bl {decide}",
        "mov x9, x0",
        "ldp x0, x1, [sp, #16]",
        "ldp x29, x30, [sp], #32",
        "cbnz x9, 2f",
        "adrp x16, {real}",
        "ldr x16, [x16, :lo12:{real}]",
        "br x16",
        "2:",
        "mov x0, x9",
        "ret",
        decide = sym decide,
        real = sym super::dl::REAL_DLSYM,
    )
}
