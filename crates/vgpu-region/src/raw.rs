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

/// A read-write `MAP_SHARED` mapping of a file, viewed as a `T`.
pub struct Mapping<T: Shared> {
    map: MmapRaw,
    _t: PhantomData<T>,
}

impl<T: Shared> Mapping<T> {
    /// Maps the first `size_of::<T>()` bytes of `file` (which must be at least that long)
    /// read-write and shared.
    ///
    /// The file must not be truncated below `size_of::<T>()` while mapped (the kernel would send
    /// SIGBUS on access): callers check the size first, and only the file's owner could shrink
    /// it.
    pub fn new(file: &File) -> io::Result<Mapping<T>> {
        let len = file.metadata()?.len();
        if len < size_of::<T>() as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "file shorter than the layout",
            ));
        }
        let map = MmapOptions::new().len(size_of::<T>()).map_raw(file)?;
        if map.len() < size_of::<T>() || !(map.as_ptr() as usize).is_multiple_of(align_of::<T>()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "mapping too short or misaligned",
            ));
        }
        Ok(Mapping {
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
