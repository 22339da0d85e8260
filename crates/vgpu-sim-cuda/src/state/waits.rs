//! Pinned host memory (`cuMemHostAlloc`) and stream waits on it (`cuStreamWaitValue32`): a
//! stream waiting for a word runs none of its later work until the word holds the value. The
//! GPU reads the word only once the stream's earlier work is done, and then as it is at that
//! moment (a word that was written and then moved on past an `EQ` value never satisfies it:
//! the stream waits forever, as on the GPU). The model schedules work when it is queued, so a
//! waiting stream's later event records and kernel launches are kept aside and queued, in
//! order, by the first operation of any thread that finds the wait reached and satisfied
//! (what the GPU does then: the work was already submitted, so its kernels start without the
//! launch latency). A graph
//! launched into a waiting stream is not modelled: the wait ends there (the graph's memory
//! nodes must answer at once).
use std::sync::atomic::{AtomicU32, Ordering};

use vgpu_sys::cuda::*;

use super::{Due, Model, R, SKey, Tail};
use crate::timeline::now_ns;

/// Work queued on a waiting stream, to queue once the wait is satisfied.
#[derive(Clone, Copy, Debug)]
pub enum Deferred {
    /// `cuEventRecord` of this event.
    Event(u64),
    /// A kernel launch of (function, grid, block).
    Kernel(u64, [u32; 3], [u32; 3]),
}

/// A stream waiting for a word of host memory.
#[derive(Debug)]
pub struct Wait {
    pub(super) ctx: Option<u64>,
    stream: u64,
    /// Host address of the word (an allocation of [`Model::host_alloc`]).
    addr: u64,
    value: u32,
    flags: u32,
    /// When the stream's work before the wait completes (the GPU reads the word from then).
    reached: Tail,
    /// When the word was last seen not satisfying the wait (its placement at first).
    unsatisfied: u64,
    /// The physical GPU.
    phys: usize,
    work: Vec<Deferred>,
}

/// A pinned host allocation: pages of its own (`mmap`), unmapped when it is freed or its
/// context is destroyed, so that a later access faults as on the real driver.
#[derive(Debug)]
pub struct HostMem {
    base: usize,
    len: usize,
    /// The context it was allocated in.
    pub(super) ctx: Option<u64>,
}

impl HostMem {
    fn new(size: usize, ctx: Option<u64>) -> Option<Self> {
        // SAFETY: an anonymous private mapping of `size` bytes at an address the kernel
        // chooses; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        (p != libc::MAP_FAILED).then_some(HostMem {
            base: p as usize,
            len: size,
            ctx,
        })
    }

    /// Whether `addr` lies inside.
    fn holds(&self, addr: u64) -> bool {
        usize::try_from(addr).is_ok_and(|a| a >= self.base && a < self.base + self.len)
    }

    /// The word at `addr`, if it lies inside and is aligned.
    fn word(&self, addr: u64) -> Option<&AtomicU32> {
        let a = usize::try_from(addr).ok()?;
        if a < self.base || a + 4 > self.base + self.len || !a.is_multiple_of(4) {
            return None;
        }
        // SAFETY: `a` lies inside the live mapping (unmapped only on drop, which needs `&mut
        // self` the returned borrow excludes), and is aligned for a u32; the mapping is
        // zero-filled memory shared with the program only through atomics.
        Some(unsafe { &*(a as *const AtomicU32) })
    }
}

impl Drop for HostMem {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// Whether `word` satisfies a wait for `value` under `flags` (cuda.h's semantics).
fn satisfied(word: u32, value: u32, flags: u32) -> bool {
    match flags & 0xf {
        CU_STREAM_WAIT_VALUE_EQ => word == value,
        CU_STREAM_WAIT_VALUE_AND => word & value != 0,
        CU_STREAM_WAIT_VALUE_NOR => !(word | value) != 0,
        // GEQ: as a signed difference, so that it survives wrap-around.
        _ => word.wrapping_sub(value).cast_signed() >= 0,
    }
}

impl Model {
    /// `cuMemHostAlloc` / `cuMemAllocHost`: `size` bytes of zeroed host memory that stream
    /// waits may read, owned by the model (its address is the device address too).
    pub fn host_alloc(&mut self, ctx: Option<u64>, size: usize) -> R<u64> {
        if size == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let mem = HostMem::new(size, ctx).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
        let addr = mem.base as u64;
        self.host.insert(addr, mem);
        Ok(addr)
    }

    /// `cuMemFreeHost`.
    pub fn host_free(&mut self, addr: u64) -> R<()> {
        self.host
            .remove(&addr)
            .map(|_| ())
            .ok_or(CUDA_ERROR_INVALID_VALUE)
    }

    /// `cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_MEMORY_TYPE)`: device memory, the model's
    /// pinned host memory, or (`CUDA_ERROR_INVALID_VALUE`, as the driver answers for pageable
    /// host memory) neither.
    pub fn memory_type(&self, addr: u64) -> R<CUmemorytype> {
        if self.address_range(addr).is_ok() {
            return Ok(CU_MEMORYTYPE_DEVICE);
        }
        match self.host.range(..=addr).next_back() {
            Some((_, mem)) if mem.holds(addr) => Ok(CU_MEMORYTYPE_HOST),
            _ => Err(CUDA_ERROR_INVALID_VALUE),
        }
    }

    /// `cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_IS_MANAGED)`: the model keeps no managed
    /// pages apart (a `cuMemAllocManaged` allocation is device memory here), so none is.
    pub fn is_managed(&self, addr: u64) -> R<bool> {
        self.memory_type(addr).map(|_| false)
    }

    /// `cuMemHostGetDevicePointer`: the allocation holding `addr`, at the same address.
    pub fn host_device_pointer(&self, addr: u64) -> R<u64> {
        self.host_word(addr)
            .map(|_| addr)
            .ok_or(CUDA_ERROR_INVALID_VALUE)
    }

    /// The word at `addr`, if it lies in a host allocation of the model.
    fn host_word(&self, addr: u64) -> Option<&AtomicU32> {
        if !addr.is_multiple_of(4) {
            return None;
        }
        let (_, mem) = self.host.range(..=addr).next_back()?;
        mem.word(addr)
    }

    /// `cuStreamWaitValue32*`: later work on the stream waits until the word at `addr` (host
    /// memory of [`Self::host_alloc`]) satisfies `value` under `flags`. Already satisfied, or
    /// on a capturing stream: nothing waits.
    pub fn stream_wait_value(
        &mut self,
        ctx: Option<u64>,
        stream: u64,
        addr: u64,
        value: u32,
        flags: u32,
    ) -> R<()> {
        let (k, o) = self.skey(ctx, stream)?;
        self.host_word(addr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if self.tl(k).capture.is_some() || self.waits.contains_key(&k) {
            // (A second wait on a waiting stream is not modelled: the first one stands.)
            return Ok(());
        }
        let w = Wait {
            ctx,
            stream,
            addr,
            value,
            flags,
            reached: self.tail(k),
            unsatisfied: now_ns(),
            phys: self.phys_of(o),
            work: Vec::new(),
        };
        if !self.wait_over(&w) {
            self.waits.insert(k, w);
        }
        Ok(())
    }

    /// Keeps `work` aside if stream `k` waits (true), for [`Self::release_waits`].
    pub(super) fn defer(&mut self, k: SKey, work: Deferred) -> bool {
        match self.waits.get_mut(&k) {
            Some(w) => {
                w.work.push(work);
                true
            }
            None => false,
        }
    }

    /// Ends stream `k`'s wait now, if it waits (its work kept aside is queued).
    pub(super) fn end_wait(&mut self, k: SKey) {
        if let Some(w) = self.waits.remove(&k) {
            self.replay(w);
        }
    }

    /// Queues the work of every stream whose word now satisfies its wait (called before each
    /// operation).
    pub fn release_waits(&mut self) {
        if self.waits.is_empty() {
            return;
        }
        let keys: Vec<SKey> = self.waits.keys().copied().collect();
        let mut done = Vec::new();
        for k in keys {
            let over = match self.waits.remove(&k) {
                Some(mut w) => {
                    let over = self.wait_over(&w);
                    if !over && self.word_satisfies(&w) == Some(false) {
                        w.unsatisfied = now_ns();
                    }
                    self.waits.insert(k, w);
                    over
                }
                None => false,
            };
            if over {
                done.push(k);
            }
        }
        for k in done {
            self.end_wait(k);
        }
    }

    /// Whether the GPU has reached wait `w` and found its word satisfying it (a word freed
    /// meanwhile: over).
    fn wait_over(&mut self, w: &Wait) -> bool {
        let Due::At(reached) = self.due(w.phys, w.reached) else {
            return false;
        };
        if reached > now_ns() {
            return false;
        }
        self.word_satisfies(w) != Some(false)
    }

    /// Whether `w`'s word satisfies it now (`None`: the word was freed).
    fn word_satisfies(&self, w: &Wait) -> Option<bool> {
        self.host_word(w.addr)
            .map(|x| satisfied(x.load(Ordering::SeqCst), w.value, w.flags))
    }

    /// Queues `w`'s work as the GPU did: from when it reached the wait, or when the word was
    /// last seen unsatisfied if that is later (the write came between that look and this one).
    fn replay(&mut self, w: Wait) {
        let reached = match self.due(w.phys, w.reached) {
            Due::At(t) => t,
            Due::Pending(_) => now_ns(),
        };
        self.replay_at = Some(reached.max(w.unsatisfied).min(now_ns()));
        for d in w.work {
            // Errors were the caller's to see when it queued the work; here the work only runs
            // (a handle destroyed meanwhile is skipped).
            let _ = match d {
                Deferred::Event(e) => self.event_record(w.ctx, e, w.stream),
                Deferred::Kernel(f, grid, block) => self.launch(w.ctx, f, grid, block, w.stream),
            };
        }
        self.replay_at = None;
    }

    /// The host instant an operation happens at: now, or, while a wait's work is queued, when
    /// the GPU let it go.
    pub(super) fn op_now(&self) -> u64 {
        self.replay_at.unwrap_or_else(now_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::satisfied;
    use vgpu_sys::cuda::*;

    #[test]
    fn waits_compare_as_cuda_h_says() {
        assert!(satisfied(5, 5, CU_STREAM_WAIT_VALUE_EQ));
        assert!(!satisfied(4, 5, CU_STREAM_WAIT_VALUE_EQ));
        assert!(satisfied(6, 5, CU_STREAM_WAIT_VALUE_GEQ));
        assert!(!satisfied(4, 5, CU_STREAM_WAIT_VALUE_GEQ));
        // GEQ survives wrap-around: 1 is "after" u32::MAX.
        assert!(satisfied(1, u32::MAX, CU_STREAM_WAIT_VALUE_GEQ));
        assert!(satisfied(0b110, 0b010, CU_STREAM_WAIT_VALUE_AND));
        assert!(!satisfied(0b100, 0b010, CU_STREAM_WAIT_VALUE_AND));
    }
}
