//! The integer and descriptor types in which `_v1` and `_v2` twins differ, so that one hook
//! body serves both: sizes (`c_uint` in the 32-bit legacy entry points, `usize` after), device
//! pointers (`CUdeviceptr_v1` and `CUdeviceptr`) and array descriptors.
use core::ffi::c_uint;
use vgpu_sys::cuda::*;

/// A size or count as a C API passes it.
pub trait Word: Copy + Default {
    /// The value, widened.
    fn wide(self) -> u64;
    /// `v`, clamped to what the type holds (a view never wraps around).
    fn clamped(v: u64) -> Self;
}

impl Word for u32 {
    fn wide(self) -> u64 {
        u64::from(self)
    }
    fn clamped(v: u64) -> Self {
        u32::try_from(v).unwrap_or(u32::MAX)
    }
}

impl Word for usize {
    fn wide(self) -> u64 {
        self as u64
    }
    fn clamped(v: u64) -> Self {
        usize::try_from(v).unwrap_or(usize::MAX)
    }
}

impl Word for u64 {
    fn wide(self) -> u64 {
        self
    }
    fn clamped(v: u64) -> Self {
        v
    }
}

/// A device pointer of one API generation, and that generation's `cuMemFree`.
pub trait DevPtr: Word {
    /// Frees it with the matching entry point (undoing an allocation vgpu must refuse).
    fn free(self) -> CUresult;
}

impl DevPtr for CUdeviceptr_v1 {
    fn free(self) -> CUresult {
        crate::fwd!(cuMemFree(self))
    }
}

impl DevPtr for CUdeviceptr {
    fn free(self) -> CUresult {
        crate::fwd!(cuMemFree_v2(self))
    }
}

/// Width, height, depth, format and channels of an array being created.
pub type Shape = (u64, u64, u64, CUarray_format, c_uint);

/// An array descriptor of `cuArrayCreate*` or `cuArray3DCreate*`.
pub trait ArrayDesc: Copy {
    /// The array's shape.
    fn shape(&self) -> Shape;
}

impl ArrayDesc for CUDA_ARRAY_DESCRIPTOR {
    fn shape(&self) -> Shape {
        (
            self.Width as u64,
            self.Height as u64,
            1,
            self.Format,
            self.NumChannels,
        )
    }
}

impl ArrayDesc for CUDA_ARRAY_DESCRIPTOR_v1 {
    fn shape(&self) -> Shape {
        (
            self.Width.wide(),
            self.Height.wide(),
            1,
            self.Format,
            self.NumChannels,
        )
    }
}

impl ArrayDesc for CUDA_ARRAY3D_DESCRIPTOR {
    fn shape(&self) -> Shape {
        (
            self.Width as u64,
            self.Height as u64,
            self.Depth as u64,
            self.Format,
            self.NumChannels,
        )
    }
}

impl ArrayDesc for CUDA_ARRAY3D_DESCRIPTOR_v1 {
    fn shape(&self) -> Shape {
        (
            self.Width.wide(),
            self.Height.wide(),
            self.Depth.wide(),
            self.Format,
            self.NumChannels,
        )
    }
}
