//! A guard against SIGBUS from shared files that others truncate.
//!
//! Every vgpu process maps files that other processes can shrink: the container's region (any
//! process of the container may `truncate` it) and the node token of a GPU (0666, anyone on the
//! node). Touching a page of a `MAP_SHARED` mapping past the end of its file is a SIGBUS, which
//! kills the process: the workload, `vgpu top`, the node's exporter.
//!
//! [`register`] records a mapped range in a fixed-size, lock-free registry and installs (once,
//! lazily) a SIGBUS handler. On a fault inside a registered range the handler maps anonymous
//! zero memory over the whole range (`MAP_FIXED`), so the faulting access retries and succeeds,
//! and flags the range broken. From then on this process reads zeroes there and writes go
//! nowhere: it is cut off from the shared file. Users check [`Registration::broken`] at their
//! non-hot points (the reaper's pass, the CLI's render) and fail closed, reattach or report.
//! Zeroes are a safe view of vgpu's layouts: a limit of 0 refuses every charge.
//!
//! A fault outside every registered range goes to the handler installed before ours (or, when
//! that was the default action, the default action is restored and the access faults again,
//! ending the process as it would have without us).
//!
//! The handler is async-signal-safe: atomic loads and stores, `mmap` and `sigaction` only.

use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

/// How many mappings can be guarded at once (a process maps one region and one token per
/// GPU; the CLI's exporter one region per container of the node).
pub const CAPACITY: usize = 512;

struct Entry {
    /// Start address (0: free entry).
    start: AtomicUsize,
    /// Length in bytes, a multiple of the page size (0: not yet, or no longer, guarded).
    len: AtomicUsize,
    broken: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Entry = Entry {
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    broken: AtomicBool::new(false),
};

static ENTRIES: [Entry; CAPACITY] = [FREE; CAPACITY];
static INSTALL: Once = Once::new();
/// The SIGBUS action in place before ours (leaked once, never freed).
static PREVIOUS: AtomicPtr<libc::sigaction> = AtomicPtr::new(std::ptr::null_mut());

/// A guarded range; unregisters it when dropped (drop it before unmapping the range).
#[derive(Debug)]
pub struct Registration {
    index: usize,
}

impl Registration {
    /// Whether a fault in the range replaced it with zeroes (the file was truncated).
    pub fn broken(&self) -> bool {
        ENTRIES[self.index].broken.load(Ordering::Acquire)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let e = &ENTRIES[self.index];
        e.len.store(0, Ordering::Release);
        e.broken.store(false, Ordering::Release);
        e.start.store(0, Ordering::Release);
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
}

/// Guards `len` bytes at `start` (the start of a mapping, so page-aligned). `None` when the
/// registry is full or the handler cannot be installed (the mapping then works unguarded).
pub fn register(start: *const u8, len: usize) -> Option<Registration> {
    install();
    if PREVIOUS.load(Ordering::Acquire).is_null() {
        return None;
    }
    let start = start as usize;
    let page = page_size();
    let len = len.div_ceil(page).checked_mul(page)?;
    if start == 0 || len == 0 {
        return None;
    }
    for (index, e) in ENTRIES.iter().enumerate() {
        if e.start
            .compare_exchange(0, start, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            e.broken.store(false, Ordering::Release);
            e.len.store(len, Ordering::Release);
            return Some(Registration { index });
        }
    }
    None
}

fn install() {
    INSTALL.call_once(|| {
        let new = crate::sys::signal_action(
            on_sigbus as *const () as usize,
            libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART,
        );
        let Some(old) = crate::sys::current_action(libc::SIGBUS) else {
            return;
        };
        // Leaked for the process's life, and published before the handler exists: a fault
        // outside our ranges always finds it.
        PREVIOUS.store(Box::into_raw(Box::new(old)), Ordering::Release);
        // SAFETY: `on_sigbus` is a static SA_SIGINFO handler, async-signal-safe; the previous
        // action was read above (a handler installed in between by another thread is lost: no
        // vgpu code does that).
        if !unsafe { crate::sys::set_action(libc::SIGBUS, &new) } {
            PREVIOUS.store(std::ptr::null_mut(), Ordering::Release);
        }
    });
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    for e in &ENTRIES {
        let len = e.len.load(Ordering::Acquire);
        let start = e.start.load(Ordering::Acquire);
        if len == 0 || start == 0 || addr < start || addr - start >= len {
            continue;
        }
        // SAFETY: `[start, start + len)` is a mapping registered by its owner, which keeps it
        // mapped while registered; replacing it with private zero pages of the same size
        // keeps every reference into it valid (only the contents change, to zeroes, which
        // every registered layout accepts).
        let p = unsafe {
            libc::mmap(
                start as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            e.broken.store(true, Ordering::Release);
            return; // the access retries on zeroes
        }
    }
    chain(sig, info, ctx);
}

/// Hands a fault that is not ours to the previous action.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let prev = PREVIOUS.load(Ordering::Acquire);
    if prev.is_null() {
        return;
    }
    // SAFETY: `prev` was leaked by `install` and is never freed or written again.
    let prev = unsafe { &*prev };
    let handler = prev.sa_sigaction;
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // Put the previous action back: the access faults again and ends the process as it
        // would have without vgpu.
        // SAFETY: sigaction is async-signal-safe; `prev` is a valid action.
        unsafe { libc::sigaction(sig, prev, std::ptr::null_mut()) };
        return;
    }
    if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed with SA_SIGINFO, so it has this type.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(handler) };
        f(sig, info, ctx);
    } else {
        // SAFETY: a plain `sa_handler` takes the signal number only.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
        f(sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_truncated_mapping_reads_zeroes_and_is_flagged() {
        let dir = tempfile::tempdir().unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("f"))
            .unwrap();
        f.set_len(3 * 4096).unwrap();
        let map = memmap2::MmapOptions::new()
            .len(3 * 4096)
            .map_raw(&f)
            .unwrap();
        let p = map.as_mut_ptr();
        // SAFETY: in bounds of the live mapping.
        unsafe { p.add(5000).write_volatile(7) };
        let reg = register(p.cast_const(), 3 * 4096).expect("registered");
        assert!(!reg.broken());
        // SAFETY: as above.
        assert_eq!(unsafe { p.add(5000).read_volatile() }, 7);
        f.set_len(0).unwrap();

        // Would be a SIGBUS without the guard.
        // SAFETY: the range is still mapped (now to zero pages).
        assert_eq!(unsafe { p.add(5000).read_volatile() }, 0);
        // SAFETY: as above.
        unsafe { p.add(9000).write_volatile(1) };
        assert!(reg.broken());
        drop(reg);
    }
}
