//! CUDA driver API types (`cuda.h`, CUDA 11.3 to 13.x).
use core::ffi::{c_char, c_int, c_uint, c_void};

/// A driver result code. Kept as a plain integer: see the crate documentation.
pub type CUresult = c_uint;

pub const CUDA_SUCCESS: CUresult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
pub const CUDA_ERROR_DEINITIALIZED: CUresult = 4;
pub const CUDA_ERROR_NO_DEVICE: CUresult = 100;
pub const CUDA_ERROR_INVALID_DEVICE: CUresult = 101;
pub const CUDA_ERROR_INVALID_CONTEXT: CUresult = 201;
/// An OS call failed (the compute gate refuses launches it has no controller thread for).
pub const CUDA_ERROR_OPERATING_SYSTEM: CUresult = 304;
pub const CUDA_ERROR_INVALID_HANDLE: CUresult = 400;
pub const CUDA_ERROR_NOT_FOUND: CUresult = 500;
pub const CUDA_ERROR_NOT_READY: CUresult = 600;
pub const CUDA_ERROR_NOT_PERMITTED: CUresult = 800;
pub const CUDA_ERROR_NOT_SUPPORTED: CUresult = 801;
pub const CUDA_ERROR_UNKNOWN: CUresult = 999;

pub type CUdevice = c_int;
pub type CUdeviceptr = u64;
/// The 32-bit device pointer of the pre-3.2 (`_v1`) entry points.
pub type CUdeviceptr_v1 = c_uint;
pub type CUmemGenericAllocationHandle = u64;

pub type CUcontext = *mut c_void;
pub type CUstream = *mut c_void;
pub type CUevent = *mut c_void;
pub type CUmodule = *mut c_void;
pub type CUfunction = *mut c_void;
pub type CUmemoryPool = *mut c_void;
pub type CUarray = *mut c_void;
pub type CUmipmappedArray = *mut c_void;
pub type CUgraph = *mut c_void;
pub type CUgraphNode = *mut c_void;
pub type CUgraphExec = *mut c_void;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CUuuid {
    pub bytes: [c_char; 16],
}

/// `cuGetProcAddress` flags.
pub const CU_GET_PROC_ADDRESS_DEFAULT: u64 = 0;
pub const CU_GET_PROC_ADDRESS_LEGACY_STREAM: u64 = 1;
pub const CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM: u64 = 2;

/// `CUdriverProcAddressQueryResult`.
pub type CUdriverProcAddressQueryResult = c_uint;
pub const CU_GET_PROC_ADDRESS_SUCCESS: CUdriverProcAddressQueryResult = 0;
pub const CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND: CUdriverProcAddressQueryResult = 1;
pub const CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT: CUdriverProcAddressQueryResult = 2;

/// `CUarray_format`.
pub type CUarray_format = c_uint;
pub const CU_AD_FORMAT_UNSIGNED_INT8: CUarray_format = 0x01;
pub const CU_AD_FORMAT_UNSIGNED_INT16: CUarray_format = 0x02;
pub const CU_AD_FORMAT_UNSIGNED_INT32: CUarray_format = 0x03;
pub const CU_AD_FORMAT_SIGNED_INT8: CUarray_format = 0x08;
pub const CU_AD_FORMAT_SIGNED_INT16: CUarray_format = 0x09;
pub const CU_AD_FORMAT_SIGNED_INT32: CUarray_format = 0x0a;
pub const CU_AD_FORMAT_HALF: CUarray_format = 0x10;
pub const CU_AD_FORMAT_FLOAT: CUarray_format = 0x20;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CUDA_ARRAY_DESCRIPTOR {
    pub Width: usize,
    pub Height: usize,
    pub Format: CUarray_format,
    pub NumChannels: c_uint,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CUDA_ARRAY_DESCRIPTOR_v1 {
    pub Width: c_uint,
    pub Height: c_uint,
    pub Format: CUarray_format,
    pub NumChannels: c_uint,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CUDA_ARRAY3D_DESCRIPTOR {
    pub Width: usize,
    pub Height: usize,
    pub Depth: usize,
    pub Format: CUarray_format,
    pub NumChannels: c_uint,
    pub Flags: c_uint,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CUDA_ARRAY3D_DESCRIPTOR_v1 {
    pub Width: c_uint,
    pub Height: c_uint,
    pub Depth: c_uint,
    pub Format: CUarray_format,
    pub NumChannels: c_uint,
    pub Flags: c_uint,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CUDA_ARRAY_MEMORY_REQUIREMENTS {
    pub size: usize,
    pub alignment: usize,
    pub reserved: [c_uint; 4],
}

/// `CUmemorytype`: where one end of a 2D or 3D copy is.
pub type CUmemorytype = c_uint;
pub const CU_MEMORYTYPE_HOST: CUmemorytype = 1;
pub const CU_MEMORYTYPE_DEVICE: CUmemorytype = 2;
pub const CU_MEMORYTYPE_ARRAY: CUmemorytype = 3;
pub const CU_MEMORYTYPE_UNIFIED: CUmemorytype = 4;

/// `CUDA_MEMCPY2D` (`_v2`): `cuMemcpy2D_v2`'s descriptor.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUDA_MEMCPY2D {
    pub srcXInBytes: usize,
    pub srcY: usize,
    pub srcMemoryType: CUmemorytype,
    pub srcHost: *const c_void,
    pub srcDevice: CUdeviceptr,
    pub srcArray: CUarray,
    pub srcPitch: usize,
    pub dstXInBytes: usize,
    pub dstY: usize,
    pub dstMemoryType: CUmemorytype,
    pub dstHost: *mut c_void,
    pub dstDevice: CUdeviceptr,
    pub dstArray: CUarray,
    pub dstPitch: usize,
    pub WidthInBytes: usize,
    pub Height: usize,
}

/// `CUDA_MEMCPY3D` (`_v2`): `cuMemcpy3D_v2`'s descriptor.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUDA_MEMCPY3D {
    pub srcXInBytes: usize,
    pub srcY: usize,
    pub srcZ: usize,
    pub srcLOD: usize,
    pub srcMemoryType: CUmemorytype,
    pub srcHost: *const c_void,
    pub srcDevice: CUdeviceptr,
    pub srcArray: CUarray,
    pub reserved0: *mut c_void,
    pub srcPitch: usize,
    pub srcHeight: usize,
    pub dstXInBytes: usize,
    pub dstY: usize,
    pub dstZ: usize,
    pub dstLOD: usize,
    pub dstMemoryType: CUmemorytype,
    pub dstHost: *mut c_void,
    pub dstDevice: CUdeviceptr,
    pub dstArray: CUarray,
    pub reserved1: *mut c_void,
    pub dstPitch: usize,
    pub dstHeight: usize,
    pub WidthInBytes: usize,
    pub Height: usize,
    pub Depth: usize,
}

/// `CUDA_MEMCPY3D_PEER`: `cuMemcpy3DPeer`'s descriptor (`CUDA_MEMCPY3D`'s, each end with its
/// context where the other has a reserved word).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUDA_MEMCPY3D_PEER {
    pub srcXInBytes: usize,
    pub srcY: usize,
    pub srcZ: usize,
    pub srcLOD: usize,
    pub srcMemoryType: CUmemorytype,
    pub srcHost: *const c_void,
    pub srcDevice: CUdeviceptr,
    pub srcArray: CUarray,
    pub srcContext: CUcontext,
    pub srcPitch: usize,
    pub srcHeight: usize,
    pub dstXInBytes: usize,
    pub dstY: usize,
    pub dstZ: usize,
    pub dstLOD: usize,
    pub dstMemoryType: CUmemorytype,
    pub dstHost: *mut c_void,
    pub dstDevice: CUdeviceptr,
    pub dstArray: CUarray,
    pub dstContext: CUcontext,
    pub dstPitch: usize,
    pub dstHeight: usize,
    pub WidthInBytes: usize,
    pub Height: usize,
    pub Depth: usize,
}

/// `Default` for copy descriptors as C code makes them (`CUDA_MEMCPY2D c = {0};`): every field
/// zero or null.
macro_rules! zeroed_default {
    ($($t:ty),*) => {$(
        impl Default for $t {
            fn default() -> Self {
                // SAFETY: every field is an integer or a raw pointer, for which all-zero bytes
                // are a valid value (0, null).
                unsafe { core::mem::zeroed() }
            }
        }
    )*};
}
zeroed_default!(CUDA_MEMCPY2D, CUDA_MEMCPY3D, CUDA_MEMCPY3D_PEER);

// cuda.h's sizes on 64-bit targets.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(core::mem::size_of::<CUDA_MEMCPY2D>() == 128);
#[cfg(target_pointer_width = "64")]
const _: () = assert!(core::mem::size_of::<CUDA_MEMCPY3D>() == 200);
#[cfg(target_pointer_width = "64")]
const _: () = assert!(core::mem::size_of::<CUDA_MEMCPY3D_PEER>() == 200);

/// `CUmemLocationType`.
pub type CUmemLocationType = c_uint;
pub const CU_MEM_LOCATION_TYPE_INVALID: CUmemLocationType = 0;
pub const CU_MEM_LOCATION_TYPE_DEVICE: CUmemLocationType = 1;
pub const CU_MEM_LOCATION_TYPE_HOST: CUmemLocationType = 2;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CUmemLocation {
    pub type_: CUmemLocationType,
    pub id: c_int,
}

/// `CUmemAllocationType`.
pub const CU_MEM_ALLOCATION_TYPE_PINNED: c_uint = 1;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CUmemAllocationProp_allocFlags {
    pub compressionType: u8,
    pub gpuDirectRDMACapable: u8,
    pub usage: u16,
    pub reserved: [u8; 4],
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUmemAllocationProp {
    pub type_: c_uint,
    pub requestedHandleTypes: c_uint,
    pub location: CUmemLocation,
    pub win32HandleMetaData: *mut c_void,
    pub allocFlags: CUmemAllocationProp_allocFlags,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUmemPoolProps {
    pub allocType: c_uint,
    pub handleTypes: c_uint,
    pub location: CUmemLocation,
    pub win32SecurityAttributes: *mut c_void,
    pub maxSize: usize,
    pub usage: u16,
    pub reserved: [u8; 54],
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUmemAccessDesc {
    pub location: CUmemLocation,
    pub flags: c_uint,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUDA_MEM_ALLOC_NODE_PARAMS {
    pub poolProps: CUmemPoolProps,
    pub accessDescs: *const CUmemAccessDesc,
    pub accessDescCount: usize,
    pub bytesize: usize,
    pub dptr: CUdeviceptr,
}

/// `CUmemPool_attribute`.
pub type CUmemPool_attribute = c_uint;
pub const CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: CUmemPool_attribute = 4;
pub const CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: CUmemPool_attribute = 5;
pub const CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: CUmemPool_attribute = 6;
pub const CU_MEMPOOL_ATTR_USED_MEM_CURRENT: CUmemPool_attribute = 7;
pub const CU_MEMPOOL_ATTR_USED_MEM_HIGH: CUmemPool_attribute = 8;

/// `CUpointer_attribute`: the memory pool a stream-ordered allocation came from.
pub type CUpointer_attribute = c_uint;
pub const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: CUpointer_attribute = 2;
pub const CU_POINTER_ATTRIBUTE_IS_MANAGED: CUpointer_attribute = 8;
pub const CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: CUpointer_attribute = 17;

/// `CUgraphNodeType` (the memory node types; others are not named here).
pub type CUgraphNodeType = c_uint;
pub const CU_GRAPH_NODE_TYPE_KERNEL: CUgraphNodeType = 0;
pub const CU_GRAPH_NODE_TYPE_GRAPH: CUgraphNodeType = 4;
pub const CU_GRAPH_NODE_TYPE_MEM_ALLOC: CUgraphNodeType = 10;
pub const CU_GRAPH_NODE_TYPE_MEM_FREE: CUgraphNodeType = 11;
pub const CU_GRAPH_NODE_TYPE_CONDITIONAL: CUgraphNodeType = 13;

/// `CUgraphConditionalHandle`: a conditional node's condition.
pub type CUgraphConditionalHandle = u64;

/// `CUgraphChildGraphNodeOwnership`.
pub const CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE: c_uint = 0;
pub const CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE: c_uint = 1;

/// `CUgraphConditionalNodeType`.
pub const CU_GRAPH_COND_TYPE_IF: c_uint = 0;
pub const CU_GRAPH_COND_TYPE_WHILE: c_uint = 1;
pub const CU_GRAPH_COND_TYPE_SWITCH: c_uint = 2;

/// `CUDA_CHILD_GRAPH_NODE_PARAMS` (CUDA 12.9 and later: with its ownership).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUDA_CHILD_GRAPH_NODE_PARAMS {
    pub graph: CUgraph,
    pub ownership: c_uint,
}

/// `CUDA_CONDITIONAL_NODE_PARAMS`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUDA_CONDITIONAL_NODE_PARAMS {
    pub handle: CUgraphConditionalHandle,
    pub type_: c_uint,
    pub size: c_uint,
    /// The driver's array of the node's body graphs (`size` of them), written at creation.
    pub phGraph_out: *mut CUgraph,
    pub ctx: CUcontext,
}

/// `CUgraphNodeParams` (`cuGraphAddNode`): the node's type, then a union of every type's
/// parameters (read as the member `type_` names), 256 bytes in all.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUgraphNodeParams {
    pub type_: CUgraphNodeType,
    pub reserved0: [c_int; 3],
    pub params: [i64; 29],
    pub reserved2: i64,
}

/// `CUgraphMem_attribute`.
pub type CUgraphMem_attribute = c_uint;
pub const CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: CUgraphMem_attribute = 0;
pub const CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: CUgraphMem_attribute = 1;
pub const CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: CUgraphMem_attribute = 2;
pub const CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: CUgraphMem_attribute = 3;

/// `CUmemAllocationGranularity_flags`.
pub const CU_MEM_ALLOC_GRANULARITY_MINIMUM: c_uint = 0;
pub const CU_MEM_ALLOC_GRANULARITY_RECOMMENDED: c_uint = 1;

/// `CUmemAttach_flags`.
pub const CU_MEM_ATTACH_GLOBAL: c_uint = 1;

/// `CUdevice_attribute` values the simulator and tests use.
pub type CUdevice_attribute = c_int;
pub const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: CUdevice_attribute = 16;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: CUdevice_attribute = 75;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: CUdevice_attribute = 76;

/// Bytes per channel element of an array format, `None` for formats whose size is not a
/// plain multiple (block-compressed and planar video formats).
pub fn array_format_bytes(format: CUarray_format) -> Option<u64> {
    match format {
        CU_AD_FORMAT_UNSIGNED_INT8 | CU_AD_FORMAT_SIGNED_INT8 => Some(1),
        CU_AD_FORMAT_UNSIGNED_INT16 | CU_AD_FORMAT_SIGNED_INT16 | CU_AD_FORMAT_HALF => Some(2),
        CU_AD_FORMAT_UNSIGNED_INT32 | CU_AD_FORMAT_SIGNED_INT32 | CU_AD_FORMAT_FLOAT => Some(4),
        _ => None,
    }
}

/// Reads a NUL-terminated symbol name as bytes (without the NUL).
///
/// # Safety
/// `p` must be null or point to a NUL-terminated string valid for the call.
pub unsafe fn cstr_bytes<'a>(p: *const c_char) -> Option<&'a [u8]> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller promises `p` is a valid NUL-terminated string.
    Some(unsafe { core::ffi::CStr::from_ptr(p) }.to_bytes())
}

/// `CUlaunchAttribute`: an attribute id and its 64-byte value union.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUlaunchAttribute {
    pub id: c_uint,
    pub pad: [c_char; 4],
    /// `CUlaunchAttributeValue` (a union of at most 64 bytes, 8-byte aligned).
    pub value: [u64; 8],
}

/// `CUlaunchConfig` of `cuLaunchKernelEx`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUlaunchConfig {
    pub gridDimX: c_uint,
    pub gridDimY: c_uint,
    pub gridDimZ: c_uint,
    pub blockDimX: c_uint,
    pub blockDimY: c_uint,
    pub blockDimZ: c_uint,
    pub sharedMemBytes: c_uint,
    pub hStream: CUstream,
    pub attrs: *mut CUlaunchAttribute,
    pub numAttrs: c_uint,
}

/// `CUmemAttach_flags`: `CU_MEM_ATTACH_HOST`.
pub const CU_MEM_ATTACH_HOST: c_uint = 2;

/// `CUstream` pseudo-handles.
pub const CU_STREAM_LEGACY: usize = 0x1;
pub const CU_STREAM_PER_THREAD: usize = 0x2;

#[cfg(target_pointer_width = "64")]
const _: () = assert!(core::mem::size_of::<CUlaunchAttribute>() == 72);
#[cfg(target_pointer_width = "64")]
const _: () = assert!(core::mem::size_of::<CUlaunchConfig>() == 56);

// ----- kernels, graphs, stream capture (used by the simulated timeline) -------------------

pub const CUDA_ERROR_ILLEGAL_STATE: CUresult = 401;
pub const CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: CUresult = 900;
pub const CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: CUresult = 901;
pub const CUDA_ERROR_STREAM_CAPTURE_UNMATCHED: CUresult = 903;
pub const CUDA_ERROR_STREAM_CAPTURE_UNJOINED: CUresult = 904;
pub const CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: CUresult = 906;
pub const CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD: CUresult = 908;

pub type CUlibrary = *mut c_void;
pub type CUkernel = *mut c_void;
/// `CUjit_option`.
pub type CUjit_option = c_uint;
/// `CUlibraryOption`.
pub type CUlibraryOption = c_uint;

/// `CUstream_flags`: `CU_STREAM_NON_BLOCKING`.
pub const CU_STREAM_NON_BLOCKING: c_uint = 0x1;

/// `cuMemHostAlloc` flags.
pub const CU_MEMHOSTALLOC_PORTABLE: c_uint = 0x1;
pub const CU_MEMHOSTALLOC_DEVICEMAP: c_uint = 0x2;

/// `CUstreamWaitValue_flags`.
pub const CU_STREAM_WAIT_VALUE_GEQ: c_uint = 0x0;
pub const CU_STREAM_WAIT_VALUE_EQ: c_uint = 0x1;
pub const CU_STREAM_WAIT_VALUE_AND: c_uint = 0x2;
pub const CU_STREAM_WAIT_VALUE_NOR: c_uint = 0x3;

/// `CUevent_flags`.
pub const CU_EVENT_DEFAULT: c_uint = 0x0;
pub const CU_EVENT_BLOCKING_SYNC: c_uint = 0x1;
pub const CU_EVENT_DISABLE_TIMING: c_uint = 0x2;
pub const CU_EVENT_INTERPROCESS: c_uint = 0x4;

/// `CUstreamCaptureStatus`.
pub type CUstreamCaptureStatus = c_uint;
pub const CU_STREAM_CAPTURE_STATUS_NONE: CUstreamCaptureStatus = 0;
pub const CU_STREAM_CAPTURE_STATUS_ACTIVE: CUstreamCaptureStatus = 1;
pub const CU_STREAM_CAPTURE_STATUS_INVALIDATED: CUstreamCaptureStatus = 2;

/// `CUstreamCaptureMode`.
pub type CUstreamCaptureMode = c_uint;
pub const CU_STREAM_CAPTURE_MODE_GLOBAL: CUstreamCaptureMode = 0;
pub const CU_STREAM_CAPTURE_MODE_THREAD_LOCAL: CUstreamCaptureMode = 1;
pub const CU_STREAM_CAPTURE_MODE_RELAXED: CUstreamCaptureMode = 2;

/// `CUgraphEdgeData` (CUDA 12.3).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CUgraphEdgeData {
    pub from_port: u8,
    pub to_port: u8,
    pub type_: u8,
    pub reserved: [u8; 5],
}

/// `CUDA_KERNEL_NODE_PARAMS_v1` (`cuGraphAddKernelNode`, CUDA 10 to 11).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUDA_KERNEL_NODE_PARAMS_v1 {
    pub func: CUfunction,
    pub gridDimX: c_uint,
    pub gridDimY: c_uint,
    pub gridDimZ: c_uint,
    pub blockDimX: c_uint,
    pub blockDimY: c_uint,
    pub blockDimZ: c_uint,
    pub sharedMemBytes: c_uint,
    pub kernelParams: *mut *mut c_void,
    pub extra: *mut *mut c_void,
}

/// `CUDA_KERNEL_NODE_PARAMS_v2` (`cuGraphAddKernelNode_v2`, CUDA 12; `CUDA_KERNEL_NODE_PARAMS`
/// since 12.0). `func` null: `kern` (a `CUkernel`) in context `ctx`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUDA_KERNEL_NODE_PARAMS_v2 {
    pub func: CUfunction,
    pub gridDimX: c_uint,
    pub gridDimY: c_uint,
    pub gridDimZ: c_uint,
    pub blockDimX: c_uint,
    pub blockDimY: c_uint,
    pub blockDimZ: c_uint,
    pub sharedMemBytes: c_uint,
    pub kernelParams: *mut *mut c_void,
    pub extra: *mut *mut c_void,
    pub kern: CUkernel,
    pub ctx: CUcontext,
}

#[cfg(target_pointer_width = "64")]
const _: () = assert!(core::mem::size_of::<CUDA_KERNEL_NODE_PARAMS_v1>() == 56);
#[cfg(target_pointer_width = "64")]
const _: () = assert!(core::mem::size_of::<CUDA_KERNEL_NODE_PARAMS_v2>() == 72);
#[cfg(target_pointer_width = "64")]
const _: () = assert!(core::mem::offset_of!(CUDA_KERNEL_NODE_PARAMS_v2, kernelParams) == 40);
const _: () = assert!(core::mem::size_of::<CUgraphEdgeData>() == 8);
