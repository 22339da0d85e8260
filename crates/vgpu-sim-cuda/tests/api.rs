//! The simulated driver's semantics, called through the rlib (default configuration: two
//! 16 GiB GPUs, 303 MiB per context). The model is process-wide, so everything runs in one
//! test, section by section.
#![allow(clippy::missing_safety_doc)]

use std::ffi::{CStr, c_void};
use std::os::raw::{c_char, c_int, c_uint};
use std::ptr::{null, null_mut};

use vgpu_sim_cuda::api_device::*;
use vgpu_sim_cuda::api_graph::*;
use vgpu_sim_cuda::api_memory::*;
use vgpu_sim_cuda::introspect::*;
use vgpu_sim_cuda::procaddr::*;
use vgpu_sys::cuda::*;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const RESERVE: u64 = 317_718_528;

macro_rules! ok {
    ($e:expr) => {
        assert_eq!($e, CUDA_SUCCESS, "{}", stringify!($e))
    };
}

fn used(p: c_int) -> u64 {
    vgpuSimDeviceUsed(p)
}

fn calls(name: &CStr) -> u64 {
    // SAFETY: NUL-terminated literal.
    unsafe { vgpuSimCallCount(name.as_ptr()) }
}

fn loc(id: c_int) -> CUmemLocation {
    CUmemLocation {
        type_: CU_MEM_LOCATION_TYPE_DEVICE,
        id,
    }
}

fn alloc_prop(id: c_int) -> CUmemAllocationProp {
    CUmemAllocationProp {
        type_: CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: 0,
        location: loc(id),
        win32HandleMetaData: null_mut(),
        allocFlags: CUmemAllocationProp_allocFlags::default(),
    }
}

fn pool_props(id: c_int) -> CUmemPoolProps {
    CUmemPoolProps {
        allocType: CU_MEM_ALLOCATION_TYPE_PINNED,
        handleTypes: 0,
        location: loc(id),
        win32SecurityAttributes: null_mut(),
        maxSize: 0,
        usage: 0,
        reserved: [0; 54],
    }
}

#[test]
fn driver_semantics() {
    // SAFETY: (all sections) every pointer passed is a valid local of the right type.
    unsafe {
        before_init();
        devices();
        contexts_and_plain_memory();
        pools();
        vmm();
        arrays();
        graphs();
        streams_modules_launches();
        stream_devices();
        proc_address();
        threads();
    }
}

unsafe fn before_init() {
    // SAFETY: the simulator\'s own entry points, called as cuda.h documents them,
    // with pointers to live locals.
    unsafe {
        let mut n = 0;
        assert_eq!(cuDeviceGetCount(&mut n), CUDA_ERROR_NOT_INITIALIZED);
        let mut v = 0;
        ok!(cuDriverGetVersion(&mut v));
        assert_eq!(v, 13000);
        let mut s: *const c_char = null();
        ok!(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &mut s));
        assert_eq!(CStr::from_ptr(s), c"CUDA_ERROR_OUT_OF_MEMORY");
        ok!(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &mut s));
        assert_eq!(CStr::from_ptr(s), c"out of memory");
        assert_eq!(cuGetErrorString(12345, &mut s), CUDA_ERROR_INVALID_VALUE);
        assert!(s.is_null());
        assert_eq!(cuInit(1), CUDA_ERROR_INVALID_VALUE);
        ok!(cuInit(0));
    }
}

unsafe fn devices() {
    // SAFETY: the simulator\'s own entry points, called as cuda.h documents them,
    // with pointers to live locals.
    unsafe {
        let mut n = 0;
        ok!(cuDeviceGetCount(&mut n));
        assert_eq!(n, 2);
        let mut d = -1;
        ok!(cuDeviceGet(&mut d, 1));
        assert_eq!(d, 1);
        assert_eq!(cuDeviceGet(&mut d, 2), CUDA_ERROR_INVALID_DEVICE);
        let mut name = [0 as c_char; 64];
        ok!(cuDeviceGetName(name.as_mut_ptr(), 64, 0));
        assert_eq!(CStr::from_ptr(name.as_ptr()), c"NVIDIA H200 (simulated)");
        ok!(cuDeviceGetName(name.as_mut_ptr(), 7, 0));
        assert_eq!(CStr::from_ptr(name.as_ptr()), c"NVIDIA");
        let mut u = CUuuid::default();
        ok!(cuDeviceGetUuid_v2(&mut u, 1));
        let bytes: Vec<u8> = u.bytes.iter().map(|&b| b as u8).collect();
        assert_eq!(
            bytes,
            [0x5a, 0x1e, 0, 0, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0, 1]
        );
        let mut u0 = CUuuid::default();
        ok!(cuDeviceGetUuid(&mut u0, 0));
        assert_eq!(u0.bytes[15], 0);
        let mut v = -1;
        ok!(cuDeviceGetAttribute(
            &mut v,
            CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            0
        ));
        assert_eq!(v, 132);
        ok!(cuDeviceGetAttribute(
            &mut v,
            CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
            0
        ));
        assert_eq!(v, 9);
        ok!(cuDeviceGetAttribute(
            &mut v,
            CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
            0
        ));
        assert_eq!(v, 0);
        ok!(cuDeviceGetAttribute(&mut v, 1, 0));
        assert_eq!(v, 0);
        let mut t32: c_uint = 0;
        ok!(cuDeviceTotalMem(&mut t32, 0));
        assert_eq!(t32, u32::MAX);
        let mut t: usize = 0;
        ok!(cuDeviceTotalMem_v2(&mut t, 0));
        assert_eq!(t as u64, 16 * GIB);
        assert_eq!(vgpuSimDeviceTotal(1), 16 * GIB);
        assert_eq!(vgpuSimPhysicalIndex(1), 1);
        assert_eq!(vgpuSimPhysicalIndex(2), -1);
    }
}

unsafe fn contexts_and_plain_memory() {
    // SAFETY: the simulator\'s own entry points, called as cuda.h documents them,
    // with pointers to live locals.
    unsafe {
        let mut p: CUdeviceptr = 0;
        assert_eq!(cuMemAlloc_v2(&mut p, 16), CUDA_ERROR_INVALID_CONTEXT);
        let (mut free, mut total) = (0usize, 0usize);
        assert_eq!(
            cuMemGetInfo_v2(&mut free, &mut total),
            CUDA_ERROR_INVALID_CONTEXT
        );

        // Primary context: the first retain charges the reservation, the second does not.
        let mut pctx: CUcontext = null_mut();
        ok!(cuDevicePrimaryCtxRetain(&mut pctx, 0));
        assert_eq!(used(0), RESERVE);
        let mut again: CUcontext = null_mut();
        ok!(cuDevicePrimaryCtxRetain(&mut again, 0));
        assert_eq!(again, pctx);
        assert_eq!(used(0), RESERVE);
        ok!(cuDevicePrimaryCtxRelease_v2(0));
        ok!(cuCtxSetCurrent(pctx));
        let mut cur: CUcontext = null_mut();
        ok!(cuCtxGetCurrent(&mut cur));
        assert_eq!(cur, pctx);

        ok!(cuMemGetInfo_v2(&mut free, &mut total));
        assert_eq!(total as u64, 16 * GIB);
        assert_eq!(free as u64, 16 * GIB - RESERVE);
        let (mut f32_, mut t32) = (0 as c_uint, 0 as c_uint);
        ok!(cuMemGetInfo(&mut f32_, &mut t32));
        assert_eq!((f32_, t32), (u32::MAX, u32::MAX));

        // Plain allocations.
        ok!(cuMemAlloc_v2(&mut p, 1000));
        assert!(p != 0 && p.is_multiple_of(256));
        assert_eq!(used(0), RESERVE + 1000);
        assert_eq!(vgpuSimProcessUsed(0), RESERVE + 1000);
        let (mut base, mut size) = (0u64, 0usize);
        ok!(cuMemGetAddressRange_v2(&mut base, &mut size, p + 999));
        assert_eq!((base, size), (p, 1000));
        let mut q: CUdeviceptr = 0;
        assert_eq!(cuMemAlloc_v2(&mut q, 0), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(
            cuMemAlloc_v2(&mut q, (16 * GIB) as usize),
            CUDA_ERROR_OUT_OF_MEMORY
        );
        assert_eq!(used(0), RESERVE + 1000);
        ok!(cuMemAlloc_v2(&mut q, (16 * GIB - RESERVE - 1000) as usize));
        ok!(cuMemGetInfo_v2(&mut free, &mut total));
        assert_eq!(free, 0);
        ok!(cuMemFree_v2(q));
        assert_eq!(cuMemFree_v2(q), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuMemFree_v2(0x1234), CUDA_ERROR_INVALID_VALUE);
        ok!(cuMemFree_v2(p));
        assert_eq!(used(0), RESERVE);

        // v1 forms: 32-bit addresses.
        let mut p32: CUdeviceptr_v1 = 0;
        ok!(cuMemAlloc(&mut p32, 4096));
        assert!(p32 != 0 && p32.is_multiple_of(256));
        let (mut b32, mut s32) = (0 as CUdeviceptr_v1, 0 as c_uint);
        ok!(cuMemGetAddressRange(&mut b32, &mut s32, p32 + 5));
        assert_eq!((b32, s32), (p32, 4096));
        let mut pitch32: c_uint = 0;
        let mut pp32: CUdeviceptr_v1 = 0;
        ok!(cuMemAllocPitch(&mut pp32, &mut pitch32, 1000, 10, 4));
        assert_eq!(pitch32, 1024);
        assert_eq!(used(0), RESERVE + 4096 + 10240);
        ok!(cuMemFree(p32));
        ok!(cuMemFree(pp32));
        assert_eq!(used(0), RESERVE);

        // Pitched and managed.
        let mut pitch: usize = 0;
        ok!(cuMemAllocPitch_v2(&mut p, &mut pitch, 513, 100, 8));
        assert_eq!(pitch, 1024);
        assert_eq!(used(0), RESERVE + 102_400);
        ok!(cuMemFree_v2(p));
        assert_eq!(cuMemAllocManaged(&mut p, 4096, 7), CUDA_ERROR_INVALID_VALUE);
        ok!(cuMemAllocManaged(&mut p, 4096, CU_MEM_ATTACH_GLOBAL));
        assert_eq!(used(0), RESERVE + 4096);
        ok!(cuMemFree_v2(p));

        // A created context on device 1 is pushed current; destroying it frees everything.
        let mut c1: CUcontext = null_mut();
        ok!(cuCtxCreate_v4(&mut c1, null_mut(), 0, 1));
        assert_eq!(used(1), RESERVE);
        let mut dev = -1;
        ok!(cuCtxGetDevice(&mut dev));
        assert_eq!(dev, 1);
        ok!(cuMemAlloc_v2(&mut p, 5 * MIB as usize));
        assert_eq!(used(1), RESERVE + 5 * MIB);
        let mut popped: CUcontext = null_mut();
        ok!(cuCtxPopCurrent_v2(&mut popped));
        assert_eq!(popped, c1);
        ok!(cuCtxGetDevice(&mut dev));
        assert_eq!(dev, 0);
        ok!(cuCtxPushCurrent_v2(c1));
        ok!(cuCtxDestroy_v2(c1));
        assert_eq!(used(1), 0);
        ok!(cuCtxGetCurrent(&mut cur));
        assert_eq!(cur, pctx);
        assert_eq!(cuCtxDestroy_v2(c1), CUDA_ERROR_INVALID_CONTEXT);
        for create in 0..3 {
            let r = match create {
                0 => cuCtxCreate(&mut c1, 0, 1),
                1 => cuCtxCreate_v2(&mut c1, 0, 1),
                _ => cuCtxCreate_v3(&mut c1, null_mut(), 0, 0, 1),
            };
            ok!(r);
            assert_eq!(used(1), RESERVE);
            ok!(cuCtxDestroy(c1));
            assert_eq!(used(1), 0);
        }
        ok!(cuCtxSynchronize());
    }
}

unsafe fn pools() {
    // SAFETY: the simulator\'s own entry points, called as cuda.h documents them,
    // with pointers to live locals.
    unsafe {
        let base = used(0);
        let mut pool: CUmemoryPool = null_mut();
        ok!(cuDeviceGetMemPool(&mut pool, 0));
        let mut def: CUmemoryPool = null_mut();
        ok!(cuDeviceGetDefaultMemPool(&mut def, 0));
        assert_eq!(pool, def);

        let mut a: CUdeviceptr = 0;
        let mut b: CUdeviceptr = 0;
        ok!(cuMemAllocAsync(&mut a, (3 * MIB) as usize, null_mut()));
        assert_eq!(used(0) - base, 4 * MIB);
        ok!(cuMemAllocAsync_ptsz(&mut b, MIB as usize, null_mut()));
        assert_eq!(used(0) - base, 4 * MIB);
        let mut v: u64 = 0;
        ok!(cuMemPoolGetAttribute(
            pool,
            CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
            (&raw mut v).cast()
        ));
        assert_eq!(v, 4 * MIB);
        ok!(cuMemPoolGetAttribute(
            pool,
            CU_MEMPOOL_ATTR_USED_MEM_CURRENT,
            (&raw mut v).cast()
        ));
        assert_eq!(v, 4 * MIB);
        ok!(cuMemFreeAsync(a, null_mut()));
        assert_eq!(used(0) - base, 4 * MIB);
        ok!(cuStreamSynchronize(null_mut()));
        assert_eq!(used(0) - base, 2 * MIB);
        // Freed with plain cuMemFree: back to the pool, released at the next sync.
        ok!(cuMemFree_v2(b));
        assert_eq!(used(0) - base, 2 * MIB);
        ok!(cuCtxSynchronize());
        assert_eq!(used(0), base);

        // A release threshold keeps memory reserved across synchronizations.
        let mut threshold: u64 = 64 * MIB;
        ok!(cuMemPoolSetAttribute(
            pool,
            CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&raw mut threshold).cast()
        ));
        ok!(cuMemAllocAsync(&mut a, (10 * MIB) as usize, null_mut()));
        ok!(cuMemFreeAsync_ptsz(a, null_mut()));
        ok!(cuStreamSynchronize_ptsz(null_mut()));
        assert_eq!(used(0) - base, 10 * MIB);
        ok!(cuMemPoolTrimTo(pool, (3 * MIB) as usize));
        assert_eq!(used(0) - base, 4 * MIB);
        ok!(cuMemPoolTrimTo(pool, 0));
        assert_eq!(used(0), base);
        ok!(cuMemPoolGetAttribute(
            pool,
            CU_MEMPOOL_ATTR_USED_MEM_HIGH,
            (&raw mut v).cast()
        ));
        assert_eq!(v, 10 * MIB);
        let mut zero: u64 = 0;
        ok!(cuMemPoolSetAttribute(
            pool,
            CU_MEMPOOL_ATTR_USED_MEM_HIGH,
            (&raw mut zero).cast()
        ));
        ok!(cuMemPoolGetAttribute(
            pool,
            CU_MEMPOOL_ATTR_USED_MEM_HIGH,
            (&raw mut v).cast()
        ));
        assert_eq!(v, 0);
        ok!(cuMemPoolSetAttribute(
            pool,
            CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&raw mut zero).cast()
        ));

        // OOM changes nothing.
        assert_eq!(
            cuMemAllocAsync(&mut a, (16 * GIB) as usize, null_mut()),
            CUDA_ERROR_OUT_OF_MEMORY
        );
        ok!(cuMemPoolGetAttribute(
            pool,
            CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
            (&raw mut v).cast()
        ));
        assert_eq!(v, 0);
        assert_eq!(
            cuMemAllocAsync(&mut a, 0, null_mut()),
            CUDA_ERROR_INVALID_VALUE
        );

        // An explicit pool on device 1, used from a stream of device 0's context.
        let props = pool_props(1);
        let mut p1: CUmemoryPool = null_mut();
        ok!(cuMemPoolCreate(&mut p1, &props));
        ok!(cuMemAllocFromPoolAsync(&mut a, 100, p1, null_mut()));
        assert_eq!(used(1), 2 * MIB);
        assert_eq!(cuDeviceSetMemPool(0, p1), CUDA_ERROR_INVALID_DEVICE);
        ok!(cuDeviceSetMemPool(1, p1));
        let mut cur: CUmemoryPool = null_mut();
        ok!(cuDeviceGetMemPool(&mut cur, 1));
        assert_eq!(cur, p1);
        ok!(cuMemFreeAsync(a, null_mut()));
        ok!(cuMemPoolDestroy(p1));
        assert_eq!(used(1), 0);
        ok!(cuDeviceGetMemPool(&mut cur, 1));
        assert_ne!(cur, p1);
        assert_eq!(cuMemPoolDestroy(def), CUDA_ERROR_INVALID_VALUE);
    }
}

unsafe fn vmm() {
    // SAFETY: the simulator\'s own entry points, called as cuda.h documents them,
    // with pointers to live locals.
    unsafe {
        let base = used(0);
        let prop = alloc_prop(0);
        let mut g: usize = 0;
        ok!(cuMemGetAllocationGranularity(
            &mut g,
            &prop,
            CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
        ));
        assert_eq!(g as u64, 2 * MIB);
        let mut hdl: CUmemGenericAllocationHandle = 0;
        assert_eq!(
            cuMemCreate(&mut hdl, MIB as usize, &prop, 0),
            CUDA_ERROR_INVALID_VALUE
        );
        ok!(cuMemCreate(&mut hdl, (4 * MIB) as usize, &prop, 0));
        assert_eq!(used(0) - base, 4 * MIB);
        let mut got = alloc_prop(1);
        ok!(cuMemGetAllocationPropertiesFromHandle(&mut got, hdl));
        assert_eq!(got.location.id, 0);
        let mut va: CUdeviceptr = 0;
        ok!(cuMemAddressReserve(&mut va, (8 * MIB) as usize, 0, 0, 0));
        assert_eq!(va % (2 * MIB), 0);
        ok!(cuMemMap(va, (4 * MIB) as usize, 0, hdl, 0));
        let desc = CUmemAccessDesc {
            location: loc(0),
            flags: 3,
        };
        ok!(cuMemSetAccess(va, (4 * MIB) as usize, &desc, 1));
        let (mut b, mut s) = (0u64, 0usize);
        ok!(cuMemGetAddressRange_v2(&mut b, &mut s, va + 5));
        assert_eq!((b, s as u64), (va, 4 * MIB));
        ok!(cuMemRelease(hdl));
        assert_eq!(used(0) - base, 4 * MIB, "still mapped");
        ok!(cuMemUnmap(va, (4 * MIB) as usize));
        assert_eq!(used(0), base);
        ok!(cuMemAddressFree(va, (8 * MIB) as usize));
        assert_eq!(cuMemRelease(hdl), CUDA_ERROR_INVALID_VALUE);
    }
}

unsafe fn arrays() {
    // SAFETY: the simulator\'s own entry points, called as cuda.h documents them,
    // with pointers to live locals.
    unsafe {
        let base = used(0);
        let mut arr: CUarray = null_mut();
        let d2 = CUDA_ARRAY_DESCRIPTOR {
            Width: 100,
            Height: 10,
            Format: CU_AD_FORMAT_FLOAT,
            NumChannels: 1,
        };
        ok!(cuArrayCreate_v2(&mut arr, &d2));
        assert_eq!(used(0) - base, 64 << 10);
        let mut req = CUDA_ARRAY_MEMORY_REQUIREMENTS::default();
        ok!(cuArrayGetMemoryRequirements(&mut req, arr, 0));
        assert_eq!(req.size as u64, 64 << 10);
        ok!(cuArrayDestroy(arr));
        assert_eq!(used(0), base);

        let d1 = CUDA_ARRAY_DESCRIPTOR_v1 {
            Width: 1000,
            Height: 100,
            Format: CU_AD_FORMAT_UNSIGNED_INT8,
            NumChannels: 4,
        };
        ok!(cuArrayCreate(&mut arr, &d1));
        // 4000 bytes a row → 4096, × 100 = 409600 → 448 KiB.
        assert_eq!(used(0) - base, 448 << 10);
        ok!(cuArrayDestroy(arr));

        let d3 = CUDA_ARRAY3D_DESCRIPTOR {
            Width: 64,
            Height: 64,
            Depth: 64,
            Format: CU_AD_FORMAT_HALF,
            NumChannels: 2,
            Flags: 0,
        };
        ok!(cuArray3DCreate_v2(&mut arr, &d3));
        assert_eq!(used(0) - base, 512 * 64 * 64);
        ok!(cuArrayDestroy(arr));
        let d3v1 = CUDA_ARRAY3D_DESCRIPTOR_v1 {
            Width: 10,
            Height: 0,
            Depth: 0,
            Format: CU_AD_FORMAT_SIGNED_INT32,
            NumChannels: 1,
            Flags: 0,
        };
        ok!(cuArray3DCreate(&mut arr, &d3v1));
        assert_eq!(used(0) - base, 64 << 10);
        ok!(cuArrayDestroy(arr));
        let bad = CUDA_ARRAY_DESCRIPTOR { Format: 0x99, ..d2 };
        assert_eq!(cuArrayCreate_v2(&mut arr, &bad), CUDA_ERROR_INVALID_VALUE);

        let mut mm: CUmipmappedArray = null_mut();
        let dm = CUDA_ARRAY3D_DESCRIPTOR {
            Width: 1024,
            Height: 1024,
            Depth: 0,
            Format: CU_AD_FORMAT_FLOAT,
            NumChannels: 1,
            Flags: 0,
        };
        ok!(cuMipmappedArrayCreate(&mut mm, &dm, 3));
        let expect = (4 << 20) + (1 << 20) + (256 << 10);
        assert_eq!(used(0) - base, expect);
        ok!(cuMipmappedArrayGetMemoryRequirements(&mut req, mm, 0));
        assert_eq!(req.size as u64, expect);
        assert_eq!(cuArrayDestroy(mm), CUDA_ERROR_INVALID_HANDLE);
        ok!(cuMipmappedArrayDestroy(mm));
        assert_eq!(used(0), base);
    }
}

unsafe fn graphs() {
    // SAFETY: the simulator\'s own entry points, called as cuda.h documents them,
    // with pointers to live locals.
    unsafe {
        let base = used(0);
        let mut g: CUgraph = null_mut();
        ok!(cuGraphCreate(&mut g, 0));
        let mut params = CUDA_MEM_ALLOC_NODE_PARAMS {
            poolProps: pool_props(0),
            accessDescs: null(),
            accessDescCount: 0,
            bytesize: (3 * MIB) as usize,
            dptr: 0,
        };
        let mut n1: CUgraphNode = null_mut();
        ok!(cuGraphAddMemAllocNode(&mut n1, g, null(), 0, &mut params));
        let p1 = params.dptr;
        assert_ne!(p1, 0);
        params.bytesize = MIB as usize;
        let mut n2: CUgraphNode = null_mut();
        ok!(cuGraphAddMemAllocNode(&mut n2, g, &n1, 1, &mut params));
        let p2 = params.dptr;
        let mut n3: CUgraphNode = null_mut();
        ok!(cuGraphAddMemFreeNode(&mut n3, g, &n2, 1, p1));
        let mut exec: CUgraphExec = null_mut();
        ok!(cuGraphInstantiateWithFlags(&mut exec, g, 0));
        assert_eq!(used(0), base, "instantiation allocates nothing");
        ok!(cuGraphLaunch(exec, null_mut()));
        assert_eq!(used(0) - base, 4 * MIB);
        let mut v: u64 = 0;
        ok!(cuDeviceGetGraphMemAttribute(
            0,
            CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT,
            (&raw mut v).cast()
        ));
        assert_eq!(v, MIB);
        ok!(cuDeviceGetGraphMemAttribute(
            0,
            CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT,
            (&raw mut v).cast()
        ));
        assert_eq!(v, 4 * MIB);
        ok!(cuDeviceGetGraphMemAttribute(
            0,
            CU_GRAPH_MEM_ATTR_USED_MEM_HIGH,
            (&raw mut v).cast()
        ));
        assert_eq!(v, 4 * MIB);
        let (mut b, mut s) = (0u64, 0usize);
        ok!(cuMemGetAddressRange_v2(&mut b, &mut s, p2));
        assert_eq!(s as u64, MIB);
        ok!(cuMemFreeAsync(p2, null_mut()));
        ok!(cuStreamSynchronize(null_mut()));
        assert_eq!(
            used(0) - base,
            4 * MIB,
            "graph memory stays reserved until trimmed"
        );
        ok!(cuGraphLaunch_ptsz(exec, null_mut()));
        ok!(cuMemFree_v2(p2));
        ok!(cuDeviceGraphMemTrim(0));
        assert_eq!(used(0), base);
        let mut zero: u64 = 0;
        ok!(cuDeviceSetGraphMemAttribute(
            0,
            CU_GRAPH_MEM_ATTR_USED_MEM_HIGH,
            (&raw mut zero).cast()
        ));
        ok!(cuDeviceGetGraphMemAttribute(
            0,
            CU_GRAPH_MEM_ATTR_USED_MEM_HIGH,
            (&raw mut v).cast()
        ));
        assert_eq!(v, 0);

        // The older instantiate forms, and OOM at launch.
        let mut g2: CUgraph = null_mut();
        ok!(cuGraphCreate(&mut g2, 0));
        params.bytesize = (16 * GIB) as usize;
        ok!(cuGraphAddMemAllocNode(&mut n1, g2, null(), 0, &mut params));
        let mut e2: CUgraphExec = null_mut();
        let mut err_node: CUgraphNode = 1 as CUgraphNode;
        let mut log = [1 as c_char; 16];
        ok!(cuGraphInstantiate_v2(
            &mut e2,
            g2,
            &mut err_node,
            log.as_mut_ptr(),
            16
        ));
        assert!(err_node.is_null());
        assert_eq!(log[0], 0);
        assert_eq!(cuGraphLaunch(e2, null_mut()), CUDA_ERROR_OUT_OF_MEMORY);
        ok!(cuDeviceGetGraphMemAttribute(
            0,
            CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT,
            (&raw mut v).cast()
        ));
        assert_eq!(v, 0);
        assert_eq!(used(0), base);
        ok!(cuGraphExecDestroy(e2));
        ok!(cuGraphInstantiate(&mut e2, g2, null_mut(), null_mut(), 0));
        ok!(cuGraphExecDestroy(e2));
        ok!(cuGraphExecDestroy(exec));
        ok!(cuGraphDestroy(g));
        ok!(cuGraphDestroy(g2));
    }
}

unsafe fn streams_modules_launches() {
    // SAFETY: the simulator\'s own entry points, called as cuda.h documents them,
    // with pointers to live locals.
    unsafe {
        let mut s: CUstream = null_mut();
        ok!(cuStreamCreate(&mut s, 0));
        let mut s2: CUstream = null_mut();
        ok!(cuStreamCreateWithPriority(&mut s2, 1, -1));
        ok!(cuStreamQuery(s));
        ok!(cuStreamQuery_ptsz(s2));
        ok!(cuStreamSynchronize(s));
        let mut ev: CUevent = null_mut();
        ok!(cuEventCreate(&mut ev, 0));
        ok!(cuEventRecord(ev, s));
        ok!(cuEventSynchronize(ev));
        ok!(cuEventQuery(ev));
        ok!(cuEventDestroy_v2(ev));

        let image = [0u8; 16];
        let mut m: CUmodule = null_mut();
        ok!(cuModuleLoadData(&mut m, image.as_ptr().cast()));
        let mut f: CUfunction = null_mut();
        ok!(cuModuleGetFunction(&mut f, m, c"kern".as_ptr()));
        let mut f2: CUfunction = null_mut();
        ok!(cuModuleGetFunction(&mut f2, m, c"kern".as_ptr()));
        assert_eq!(f, f2);
        ok!(cuLaunchKernel(
            f,
            1,
            1,
            1,
            128,
            1,
            1,
            0,
            s,
            null_mut(),
            null_mut()
        ));
        ok!(cuLaunchKernel_ptsz(
            f,
            8,
            2,
            1,
            32,
            32,
            1,
            0,
            null_mut(),
            null_mut(),
            null_mut()
        ));
        assert_eq!(
            cuLaunchKernel(f, 1, 1, 1, 2048, 1, 1, 0, s, null_mut(), null_mut()),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(
            cuLaunchKernel(f, 0, 1, 1, 1, 1, 1, 0, s, null_mut(), null_mut()),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(
            cuLaunchKernel(
                0x77 as CUfunction,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                s,
                null_mut(),
                null_mut()
            ),
            CUDA_ERROR_INVALID_HANDLE
        );
        assert_eq!(
            cuLaunchKernel(
                f,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                0x99 as CUstream,
                null_mut(),
                null_mut()
            ),
            CUDA_ERROR_INVALID_HANDLE
        );
        let cfg = CUlaunchConfig {
            gridDimX: 4,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: 256,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: 0,
            hStream: s2,
            attrs: null_mut(),
            numAttrs: 0,
        };
        ok!(cuLaunchKernelEx(&cfg, f, null_mut(), null_mut()));
        ok!(cuLaunchKernelEx_ptsz(&cfg, f, null_mut(), null_mut()));
        ok!(cuLaunchCooperativeKernel(
            f,
            1,
            1,
            1,
            64,
            1,
            1,
            0,
            s,
            null_mut()
        ));
        ok!(cuLaunchCooperativeKernel_ptsz(
            f,
            1,
            1,
            1,
            64,
            1,
            1,
            0,
            s,
            null_mut()
        ));
        ok!(cuModuleUnload(m));
        assert_eq!(
            cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, null_mut(), null_mut()),
            CUDA_ERROR_INVALID_HANDLE
        );
        ok!(cuStreamDestroy_v2(s));
        ok!(cuStreamDestroy(s2));
        assert_eq!(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
    }
}

/// `cuStreamGetDevice` (+`_ptsz`): a created stream's own device, whichever context is current;
/// the current context's device for the NULL, legacy and per-thread handles.
unsafe fn stream_devices() {
    // SAFETY: the simulator\'s own entry points, called as cuda.h documents them,
    // with pointers to live locals.
    unsafe {
        let mut s0: CUstream = null_mut();
        ok!(cuStreamCreate(&mut s0, 0));
        let mut dev: CUdevice = -1;
        ok!(cuStreamGetDevice(s0, &mut dev));
        assert_eq!(dev, 0);
        // A context of device 1 made current (as cudaSetDevice(1) does): device 0's stream
        // still answers device 0.
        let mut c1: CUcontext = null_mut();
        ok!(cuCtxCreate_v2(&mut c1, 0, 1));
        let mut s1: CUstream = null_mut();
        ok!(cuStreamCreate(&mut s1, CU_STREAM_NON_BLOCKING));
        for (s, want) in [(s0, 0), (s1, 1)] {
            dev = -1;
            ok!(cuStreamGetDevice(s, &mut dev));
            assert_eq!(dev, want);
            dev = -1;
            ok!(cuStreamGetDevice_ptsz(s, &mut dev));
            assert_eq!(dev, want);
        }
        for own in [0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD] {
            dev = -1;
            ok!(cuStreamGetDevice(own as CUstream, &mut dev));
            assert_eq!(dev, 1, "{own:#x}");
            dev = -1;
            ok!(cuStreamGetDevice_ptsz(own as CUstream, &mut dev));
            assert_eq!(dev, 1, "{own:#x}");
        }
        assert_eq!(
            cuStreamGetDevice(0x77 as CUstream, &mut dev),
            CUDA_ERROR_INVALID_HANDLE
        );
        assert_eq!(cuStreamGetDevice(s0, null_mut()), CUDA_ERROR_INVALID_VALUE);
        ok!(cuStreamDestroy_v2(s1));
        assert_eq!(cuStreamGetDevice(s1, &mut dev), CUDA_ERROR_INVALID_HANDLE);
        ok!(cuCtxDestroy_v2(c1));
        assert_eq!(used(1), 0);
        ok!(cuStreamDestroy_v2(s0));

        // Handed out from CUDA 12.8, its `_ptsz` twin for per-thread default stream callers.
        let (r, pfn, _) = lookup(c"cuStreamGetDevice", 12080, 0);
        assert_eq!((r, pfn), (CUDA_SUCCESS, cuStreamGetDevice as *mut c_void));
        let flags = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
        let (r, pfn, _) = lookup(c"cuStreamGetDevice", 12080, flags);
        assert_eq!(
            (r, pfn),
            (CUDA_SUCCESS, cuStreamGetDevice_ptsz as *mut c_void)
        );
        let (r, _, st) = lookup(c"cuStreamGetDevice", 12060, 0);
        assert_eq!(
            (r, st),
            (
                CUDA_ERROR_NOT_FOUND,
                CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
            )
        );
    }
}

type GetProc = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> CUresult;
type GetProcV2 = unsafe extern "C" fn(
    *const c_char,
    *mut *mut c_void,
    c_int,
    u64,
    *mut CUdriverProcAddressQueryResult,
) -> CUresult;

unsafe fn lookup(name: &CStr, version: c_int, flags: u64) -> (CUresult, *mut c_void, u32) {
    let mut pfn: *mut c_void = std::ptr::dangling_mut();
    let mut status = 99;
    // SAFETY: a NUL-terminated name and pointers to live locals.
    let r = unsafe { cuGetProcAddress_v2(name.as_ptr(), &mut pfn, version, flags, &mut status) };
    (r, pfn, status)
}

unsafe fn proc_address() {
    // SAFETY: the simulator\'s own entry points, called as cuda.h documents them,
    // with pointers to live locals.
    unsafe {
        let (r, pfn, st) = lookup(c"cuMemAlloc", 12000, 0);
        assert_eq!((r, st), (CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS));
        assert_eq!(pfn, cuMemAlloc_v2 as *mut c_void);
        assert_eq!(lookup(c"cuMemAlloc", 3000, 0).1, cuMemAlloc as *mut c_void);
        assert_eq!(
            lookup(c"cuCtxCreate", 12050, 0).1,
            cuCtxCreate_v4 as *mut c_void
        );
        assert_eq!(
            lookup(c"cuCtxCreate", 11040, 0).1,
            cuCtxCreate_v3 as *mut c_void
        );
        assert_eq!(
            lookup(c"cuCtxDestroy", 4000, 0).1,
            cuCtxDestroy_v2 as *mut c_void
        );
        assert_eq!(
            lookup(c"cuDevicePrimaryCtxRelease", 11000, 0).1,
            cuDevicePrimaryCtxRelease_v2 as *mut c_void
        );
        assert_eq!(
            lookup(c"cuDeviceGetUuid", 11030, 0).1,
            cuDeviceGetUuid as *mut c_void
        );
        assert_eq!(
            lookup(c"cuDeviceGetUuid", 11040, 0).1,
            cuDeviceGetUuid_v2 as *mut c_void
        );
        assert_eq!(
            lookup(c"cuGraphInstantiate", 12000, 0).1,
            cuGraphInstantiateWithFlags as *mut c_void
        );
        assert_eq!(
            lookup(c"cuGraphInstantiate", 10000, 0).1,
            cuGraphInstantiate as *mut c_void
        );
        assert_eq!(
            lookup(c"cuMemAllocAsync", 12000, 2).1,
            cuMemAllocAsync_ptsz as *mut c_void
        );
        assert_eq!(
            lookup(c"cuStreamSynchronize", 12000, 2).1,
            cuStreamSynchronize_ptsz as *mut c_void
        );
        assert_eq!(
            lookup(c"cuGraphLaunch", 12000, 2).1,
            cuGraphLaunch_ptsz as *mut c_void
        );
        assert_eq!(
            lookup(c"cuLaunchKernelEx", 12000, 2).1,
            cuLaunchKernelEx_ptsz as *mut c_void
        );
        assert_eq!(
            lookup(c"cuMemAlloc", 12000, 2).1,
            cuMemAlloc_v2 as *mut c_void
        );

        let (r, pfn, st) = lookup(c"cuNoSuchThing", 12000, 0);
        assert_eq!(
            (r, pfn, st),
            (
                CUDA_ERROR_NOT_FOUND,
                null_mut(),
                CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND
            )
        );
        let (r, pfn, st) = lookup(c"cuMemAllocAsync", 11010, 0);
        assert_eq!(
            (r, pfn, st),
            (
                CUDA_ERROR_NOT_FOUND,
                null_mut(),
                CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
            )
        );
        assert_eq!(
            lookup(c"cuLaunchKernelEx", 11050, 0).0,
            CUDA_ERROR_NOT_FOUND
        );
        assert_eq!(lookup(c"cuLaunchKernelEx", 11060, 0).0, CUDA_SUCCESS);

        // cuGetProcAddress resolves itself by version.
        let mut pfn: *mut c_void = null_mut();
        ok!(cuGetProcAddress(
            c"cuGetProcAddress".as_ptr(),
            &mut pfn,
            11030,
            0
        ));
        assert_eq!(pfn, cuGetProcAddress as *mut c_void);
        ok!(cuGetProcAddress(
            c"cuGetProcAddress".as_ptr(),
            &mut pfn,
            12000,
            0
        ));
        assert_eq!(pfn, cuGetProcAddress_v2 as *mut c_void);
        let v2: GetProcV2 = std::mem::transmute::<*mut c_void, GetProcV2>(pfn);
        let mut st = 0;
        ok!(v2(c"cuMemFree".as_ptr(), &mut pfn, 13000, 0, &mut st));
        assert_eq!(pfn, cuMemFree_v2 as *mut c_void);
        let _: GetProc = cuGetProcAddress;

        // Call counters distinguish the variant a pointer reached.
        let (before_v1, before_v2) = (calls(c"cuMemAlloc"), calls(c"cuMemAlloc_v2"));
        let alloc: unsafe extern "C" fn(*mut CUdeviceptr, usize) -> CUresult =
            std::mem::transmute::<*mut c_void, _>(lookup(c"cuMemAlloc", 13000, 0).1);
        let mut p: CUdeviceptr = 0;
        ok!(alloc(&mut p, 64));
        ok!(cuMemFree_v2(p));
        assert_eq!(calls(c"cuMemAlloc_v2"), before_v2 + 1);
        assert_eq!(calls(c"cuMemAlloc"), before_v1);
        assert_eq!(calls(c"cuNoSuchThing"), 0);
        assert!(calls(c"cuInit") >= 2);
    }
}

unsafe fn threads() {
    // SAFETY: the simulator\'s own entry points, called as cuda.h documents them,
    // with pointers to live locals.
    unsafe {
        let mut cur: CUcontext = null_mut();
        ok!(cuCtxGetCurrent(&mut cur));
        assert!(!cur.is_null());
        let cur_addr = cur as usize;
        std::thread::spawn(move || other_thread(cur_addr))
            .join()
            .unwrap();
        // Releasing the last reference destroys the primary context and its memory.
        let mut p: CUdeviceptr = 0;
        ok!(cuMemAlloc_v2(&mut p, 4096));
        ok!(cuDevicePrimaryCtxRelease(0));
        assert_eq!(used(0), 0);
        assert_eq!(cuMemAlloc_v2(&mut p, 16), CUDA_ERROR_INVALID_CONTEXT);
        assert_eq!(cuDevicePrimaryCtxRelease(0), CUDA_ERROR_INVALID_CONTEXT);
        assert_eq!(vgpuSimProcessUsed(0), 0);
    }
}

/// Runs on a fresh thread: no current context until it sets one.
fn other_thread(ctx_addr: usize) {
    // SAFETY: valid locals.
    unsafe {
        let mut c: CUcontext = 1 as CUcontext;
        ok!(cuCtxGetCurrent(&mut c));
        assert!(c.is_null(), "the current context is per thread");
        let mut p: CUdeviceptr = 0;
        assert_eq!(cuMemAlloc_v2(&mut p, 16), CUDA_ERROR_INVALID_CONTEXT);
        ok!(cuCtxSetCurrent(ctx_addr as CUcontext));
        ok!(cuMemAlloc_v2(&mut p, 16));
        ok!(cuMemFree_v2(p));
    }
}
