//! The only place that turns raw shared memory into Rust values.
//!
//! [`Shared`] is an `unsafe trait` whose contract makes a reference into a shared mapping
//! sound; [`Mapping`] is the safe type on top. (The system calls are in [`crate::sys`].)

use std::fs::File;
use std::io;
use std::marker::PhantomData;

use memmap2::{MmapOptions, MmapRaw};

/// Types that may be viewed in a `MAP_SHARED` file mapping that other processes write.
///
/// # Safety
/// An implementor must be `#[repr(C)]` (or a primitive), have no `Drop`, accept every bit pattern
/// of its `size_of` bytes as a valid value (zeroes included), and be mutable only through atomics
/// (so that another process writing the bytes at any time is, to us, just another atomic
/// access). A type made only of `Atomic*` integers and arrays of them satisfies this.
pub unsafe trait Shared: Sync {}

// SAFETY: every type below is `#[repr(C)]`, has no `Drop`, and consists only of atomic integers
// (and arrays of them), for which every bit pattern is valid.
unsafe impl Shared for crate::layout::Layout {}
// SAFETY: as above: `#[repr(C)]`, atomics only.
unsafe impl Shared for crate::node::NodeFile {}

/// A `MAP_SHARED` mapping of a file, viewed as a `T`, guarded against truncation of the file
/// ([`crate::fault`]: a truncated file reads as zeroes and [`Mapping::broken`] says so).
pub struct Mapping<T: Shared> {
    // Dropped first: the range is unregistered before it is unmapped.
    guard: Option<crate::fault::Registration>,
    map: MmapRaw,
    _t: PhantomData<T>,
}

impl<T: Shared> Drop for Mapping<T> {
    fn drop(&mut self) {
        // Before the fields (the guard, then the mapping) go.
        crate::suspend::forget_range(self.map.as_ptr() as usize, self.map.len());
    }
}

impl<T: Shared> Mapping<T> {
    /// Maps the first `size_of::<T>()` bytes of `file` (which must be at least that long)
    /// read-write and shared.
    ///
    /// A truncation of the file while mapped does not fault: the range is registered with
    /// [`crate::fault`], and reads as zeroes afterwards ([`Mapping::broken`]).
    pub fn new(file: &File) -> io::Result<Mapping<T>> {
        Self::map(file, false)
    }

    /// Maps the file read-only (`PROT_READ`; the file may be opened `O_RDONLY`). The caller
    /// must never store through the view: any atomic store or read-modify-write faults.
    pub fn read_only(file: &File) -> io::Result<Mapping<T>> {
        Self::map(file, true)
    }

    /// Whether the file was truncated under the mapping (it now reads as zeroes).
    pub fn broken(&self) -> bool {
        self.guard
            .as_ref()
            .is_some_and(crate::fault::Registration::broken)
    }

    fn map(file: &File, read_only: bool) -> io::Result<Mapping<T>> {
        let len = file.metadata()?.len();
        if len < size_of::<T>() as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "file shorter than the layout",
            ));
        }
        let opts = {
            let mut o = MmapOptions::new();
            o.len(size_of::<T>());
            o
        };
        let map = if read_only {
            opts.map_raw_read_only(file)?
        } else {
            opts.map_raw(file)?
        };
        if map.len() < size_of::<T>() || !(map.as_ptr() as usize).is_multiple_of(align_of::<T>()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "mapping too short or misaligned",
            ));
        }
        let guard = crate::fault::register(map.as_ptr(), map.len());
        Ok(Mapping {
            guard,
            map,
            _t: PhantomData,
        })
    }

    /// The mapped `T`.
    pub fn get(&self) -> &T {
        // SAFETY: `new` checked that the mapping is at least `size_of::<T>()` bytes long and
        // aligned for `T`; it stays mapped as long as `self` (the returned borrow); `T: Shared`
        // accepts any bit pattern and is only mutated through atomics, so concurrent writes by
        // other processes (or through other `&T`s) are not data races on non-atomic memory.
        unsafe { &*self.map.as_ptr().cast::<T>() }
    }
}
