/*
 * mini_cuda.h - the few CUDA driver API declarations the vgpu probe needs, written by hand
 * with the exact ABI of cuda.h (CUDA 11.x to 13.x, LP64 Linux), so that the probe builds
 * without a CUDA toolkit.  Only what probe.c uses is here; names and values are cuda.h's.
 *
 * Every prototype uses the symbol that libcuda.so.1 really exports (cuMemAlloc_v2, not the
 * cuMemAlloc macro of cuda.h).  For each prototype there is a matching function-pointer type
 * PFN_<exported name>, used by the probe's lookup table.
 */
#ifndef VGPU_MINI_CUDA_H
#define VGPU_MINI_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- results ------------------------------------------------------------------------ */
typedef enum cudaError_enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_DEINITIALIZED = 4,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_NOT_PERMITTED = 800,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_UNKNOWN = 999
} CUresult;

/* ---- scalar and handle types -------------------------------------------------------- */
typedef uint64_t cuuint64_t;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;   /* CUdeviceptr_v2 */
typedef unsigned int CUdeviceptr_v1;      /* the pre-3.2 32-bit device pointer */
typedef unsigned long long CUmemGenericAllocationHandle;

typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUarray_st *CUarray;
typedef struct CUmipmappedArray_st *CUmipmappedArray;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUgraphExec_st *CUgraphExec;

typedef struct CUuuid_st {
    char bytes[16];
} CUuuid;

#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

/* ---- cuGetProcAddress ---------------------------------------------------------------- */
#define CU_GET_PROC_ADDRESS_DEFAULT 0
#define CU_GET_PROC_ADDRESS_LEGACY_STREAM (1ULL << 0)
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM (1ULL << 1)

typedef enum CUdriverProcAddressQueryResult_enum {
    CU_GET_PROC_ADDRESS_SUCCESS = 0,
    CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
    CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2
} CUdriverProcAddressQueryResult;

/* ---- arrays -------------------------------------------------------------------------- */
typedef enum CUarray_format_enum {
    CU_AD_FORMAT_UNSIGNED_INT8 = 0x01,
    CU_AD_FORMAT_UNSIGNED_INT16 = 0x02,
    CU_AD_FORMAT_UNSIGNED_INT32 = 0x03,
    CU_AD_FORMAT_SIGNED_INT8 = 0x08,
    CU_AD_FORMAT_SIGNED_INT16 = 0x09,
    CU_AD_FORMAT_SIGNED_INT32 = 0x0a,
    CU_AD_FORMAT_HALF = 0x10,
    CU_AD_FORMAT_FLOAT = 0x20
} CUarray_format;

typedef enum CUmemorytype_enum {
    CU_MEMORYTYPE_HOST = 1,
    CU_MEMORYTYPE_DEVICE = 2,
    CU_MEMORYTYPE_ARRAY = 3,
    CU_MEMORYTYPE_UNIFIED = 4
} CUmemorytype;

typedef struct CUDA_MEMCPY2D_st {           /* CUDA_MEMCPY2D_v2 */
    size_t srcXInBytes, srcY;
    CUmemorytype srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    CUarray srcArray;
    size_t srcPitch;
    size_t dstXInBytes, dstY;
    CUmemorytype dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    CUarray dstArray;
    size_t dstPitch;
    size_t WidthInBytes, Height;
} CUDA_MEMCPY2D;

typedef struct CUDA_MEMCPY3D_st {           /* CUDA_MEMCPY3D_v2 */
    size_t srcXInBytes, srcY, srcZ, srcLOD;
    CUmemorytype srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    CUarray srcArray;
    void *reserved0;
    size_t srcPitch, srcHeight;
    size_t dstXInBytes, dstY, dstZ, dstLOD;
    CUmemorytype dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    CUarray dstArray;
    void *reserved1;
    size_t dstPitch, dstHeight;
    size_t WidthInBytes, Height, Depth;
} CUDA_MEMCPY3D;

typedef struct CUDA_MEMCPY3D_PEER_st {      /* CUDA_MEMCPY3D_PEER_v1 */
    size_t srcXInBytes, srcY, srcZ, srcLOD;
    CUmemorytype srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    CUarray srcArray;
    CUcontext srcContext;
    size_t srcPitch, srcHeight;
    size_t dstXInBytes, dstY, dstZ, dstLOD;
    CUmemorytype dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    CUarray dstArray;
    CUcontext dstContext;
    size_t dstPitch, dstHeight;
    size_t WidthInBytes, Height, Depth;
} CUDA_MEMCPY3D_PEER;

typedef struct CUDA_ARRAY_DESCRIPTOR_st {   /* CUDA_ARRAY_DESCRIPTOR_v2 */
    size_t Width;
    size_t Height;
    CUarray_format Format;
    unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;

typedef struct CUDA_ARRAY3D_DESCRIPTOR_st { /* CUDA_ARRAY3D_DESCRIPTOR_v2 */
    size_t Width;
    size_t Height;
    size_t Depth;
    CUarray_format Format;
    unsigned int NumChannels;
    unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR;

typedef struct CUDA_ARRAY_MEMORY_REQUIREMENTS_st {
    size_t size;
    size_t alignment;
    unsigned int reserved[4];
} CUDA_ARRAY_MEMORY_REQUIREMENTS;

/* ---- virtual memory management and pools ------------------------------------------- */
typedef enum CUmemLocationType_enum {
    CU_MEM_LOCATION_TYPE_INVALID = 0,
    CU_MEM_LOCATION_TYPE_DEVICE = 1,
    CU_MEM_LOCATION_TYPE_HOST = 2,
    CU_MEM_LOCATION_TYPE_HOST_NUMA = 3,
    CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT = 4
} CUmemLocationType;

typedef enum CUmemAllocationType_enum {
    CU_MEM_ALLOCATION_TYPE_INVALID = 0,
    CU_MEM_ALLOCATION_TYPE_PINNED = 1
} CUmemAllocationType;

typedef enum CUmemAllocationHandleType_enum {
    CU_MEM_HANDLE_TYPE_NONE = 0,
    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
} CUmemAllocationHandleType;

typedef enum CUmemAccess_flags_enum {
    CU_MEM_ACCESS_FLAGS_PROT_NONE = 0,
    CU_MEM_ACCESS_FLAGS_PROT_READ = 1,
    CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
} CUmemAccess_flags;

typedef enum CUmemAllocationGranularity_flags_enum {
    CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0,
    CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1
} CUmemAllocationGranularity_flags;

typedef enum CUmemAttach_flags_enum {
    CU_MEM_ATTACH_GLOBAL = 1,
    CU_MEM_ATTACH_HOST = 2,
    CU_MEM_ATTACH_SINGLE = 4
} CUmemAttach_flags;

typedef struct CUmemLocation_st {
    CUmemLocationType type;
    int id;
} CUmemLocation;

typedef struct CUmemAllocationProp_st {
    CUmemAllocationType type;
    CUmemAllocationHandleType requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;

typedef struct CUmemPoolProps_st {
    CUmemAllocationType allocType;
    CUmemAllocationHandleType handleTypes;
    CUmemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
} CUmemPoolProps;

typedef struct CUmemAccessDesc_st {
    CUmemLocation location;
    CUmemAccess_flags flags;
} CUmemAccessDesc;

typedef enum CUmemPool_attribute_enum {
    CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES = 1,
    CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC = 2,
    CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES = 3,
    CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4,
    CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5,
    CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH = 6,
    CU_MEMPOOL_ATTR_USED_MEM_CURRENT = 7,
    CU_MEMPOOL_ATTR_USED_MEM_HIGH = 8
} CUmemPool_attribute;

/* ---- graphs --------------------------------------------------------------------------- */
typedef struct CUDA_MEM_ALLOC_NODE_PARAMS_st {  /* CUDA_MEM_ALLOC_NODE_PARAMS_v1 */
    CUmemPoolProps poolProps;
    const CUmemAccessDesc *accessDescs;
    size_t accessDescCount;
    size_t bytesize;
    CUdeviceptr dptr;   /* out */
} CUDA_MEM_ALLOC_NODE_PARAMS;

typedef enum CUgraphMem_attribute_enum {
    CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT = 0,
    CU_GRAPH_MEM_ATTR_USED_MEM_HIGH = 1,
    CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT = 2,
    CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH = 3
} CUgraphMem_attribute;

/* Compile-time ABI checks (LP64): sizes of the structures as cuda.h lays them out. */
#define MC_ABI_CHECK(name, cond) typedef char mc_abi_check_##name[(cond) ? 1 : -1]
MC_ABI_CHECK(uuid, sizeof(CUuuid) == 16);
MC_ABI_CHECK(array_desc, sizeof(CUDA_ARRAY_DESCRIPTOR) == 24);
MC_ABI_CHECK(array3d_desc, sizeof(CUDA_ARRAY3D_DESCRIPTOR) == 40);
MC_ABI_CHECK(array_memreq, sizeof(CUDA_ARRAY_MEMORY_REQUIREMENTS) == 32);
MC_ABI_CHECK(mem_location, sizeof(CUmemLocation) == 8);
MC_ABI_CHECK(alloc_prop, sizeof(CUmemAllocationProp) == 32);
MC_ABI_CHECK(pool_props, sizeof(CUmemPoolProps) == 88);
MC_ABI_CHECK(access_desc, sizeof(CUmemAccessDesc) == 12);
MC_ABI_CHECK(alloc_node, sizeof(CUDA_MEM_ALLOC_NODE_PARAMS) == 120);
MC_ABI_CHECK(alloc_node_dptr, offsetof(CUDA_MEM_ALLOC_NODE_PARAMS, dptr) == 112);

/* ---- prototypes (exported names) and matching pointer types ------------------------------
 * MC_FN(ret, name, params) declares `ret name params;` and `typedef ret (*PFN_name) params;`. */
#define MC_FN(ret, name, params) \
    ret name params;             \
    typedef ret(*PFN_##name) params

MC_FN(CUresult, cuInit, (unsigned int Flags));
MC_FN(CUresult, cuDriverGetVersion, (int *driverVersion));
MC_FN(CUresult, cuDeviceGet, (CUdevice *device, int ordinal));
MC_FN(CUresult, cuDeviceGetCount, (int *count));
MC_FN(CUresult, cuDeviceTotalMem_v2, (size_t *bytes, CUdevice dev));
MC_FN(CUresult, cuDeviceGetUuid, (CUuuid *uuid, CUdevice dev));
MC_FN(CUresult, cuGetProcAddress, (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags));
MC_FN(CUresult, cuGetProcAddress_v2, (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *symbolStatus));

MC_FN(CUresult, cuDevicePrimaryCtxRetain, (CUcontext *pctx, CUdevice dev));
MC_FN(CUresult, cuDevicePrimaryCtxRelease_v2, (CUdevice dev));
MC_FN(CUresult, cuDevicePrimaryCtxReset_v2, (CUdevice dev));
MC_FN(CUresult, cuCtxCreate_v2, (CUcontext *pctx, unsigned int flags, CUdevice dev));
MC_FN(CUresult, cuCtxDestroy_v2, (CUcontext ctx));
MC_FN(CUresult, cuCtxSetCurrent, (CUcontext ctx));
MC_FN(CUresult, cuCtxGetCurrent, (CUcontext *pctx));
MC_FN(CUresult, cuCtxSynchronize, (void));

MC_FN(CUresult, cuMemGetInfo_v2, (size_t *free, size_t *total));
MC_FN(CUresult, cuMemAlloc_v2, (CUdeviceptr *dptr, size_t bytesize));
MC_FN(CUresult, cuMemAlloc, (CUdeviceptr_v1 *dptr, unsigned int bytesize)); /* legacy 32-bit */
MC_FN(CUresult, cuMemFree_v2, (CUdeviceptr dptr));
MC_FN(CUresult, cuMemAllocPitch_v2, (CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                      unsigned int ElementSizeBytes));
MC_FN(CUresult, cuMemAllocManaged, (CUdeviceptr *dptr, size_t bytesize, unsigned int flags));

MC_FN(CUresult, cuStreamSynchronize, (CUstream hStream));
MC_FN(CUresult, cuMemcpyDtoH_v2, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount));
MC_FN(CUresult, cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount));
MC_FN(CUresult, cuMemcpy2D_v2, (const CUDA_MEMCPY2D *pCopy));
MC_FN(CUresult, cuMemcpy3D_v2, (const CUDA_MEMCPY3D *pCopy));
MC_FN(CUresult, cuMemcpy3DPeer, (const CUDA_MEMCPY3D_PEER *pCopy));
MC_FN(CUresult, cuMemcpyAtoH_v2, (void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount));
MC_FN(CUresult, cuModuleLoadData, (CUmodule *module, const void *image));
MC_FN(CUresult, cuModuleGetFunction, (CUfunction *hfunc, CUmodule hmod, const char *name));
MC_FN(CUresult, cuLaunchKernel,
      (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
       unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
       unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra));
MC_FN(CUresult, cuLaunchKernel_ptsz,
      (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
       unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
       unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra));
typedef struct CUlaunchConfig_st {
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    void *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;
MC_FN(CUresult, cuLaunchKernelEx, (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra));
MC_FN(CUresult, cuLaunchCooperativeKernel,
      (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
       unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
       unsigned int sharedMemBytes, CUstream hStream, void **kernelParams));
MC_FN(CUresult, cuMemAllocAsync, (CUdeviceptr *dptr, size_t bytesize, CUstream hStream));
MC_FN(CUresult, cuMemFreeAsync, (CUdeviceptr dptr, CUstream hStream));
MC_FN(CUresult, cuMemAllocFromPoolAsync, (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream));
/* per-thread-default-stream exports (what cuGetProcAddress flags 2 returns) */
MC_FN(CUresult, cuStreamSynchronize_ptsz, (CUstream hStream));
MC_FN(CUresult, cuMemAllocAsync_ptsz, (CUdeviceptr *dptr, size_t bytesize, CUstream hStream));
MC_FN(CUresult, cuMemFreeAsync_ptsz, (CUdeviceptr dptr, CUstream hStream));
MC_FN(CUresult, cuMemAllocFromPoolAsync_ptsz, (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                                CUstream hStream));
MC_FN(CUresult, cuGraphLaunch_ptsz, (CUgraphExec hGraphExec, CUstream hStream));

MC_FN(CUresult, cuMemPoolCreate, (CUmemoryPool *pool, const CUmemPoolProps *poolProps));
MC_FN(CUresult, cuMemPoolDestroy, (CUmemoryPool pool));
MC_FN(CUresult, cuMemPoolTrimTo, (CUmemoryPool pool, size_t minBytesToKeep));
MC_FN(CUresult, cuMemPoolGetAttribute, (CUmemoryPool pool, CUmemPool_attribute attr, void *value));
MC_FN(CUresult, cuMemPoolSetAttribute, (CUmemoryPool pool, CUmemPool_attribute attr, void *value));
MC_FN(CUresult, cuDeviceGetDefaultMemPool, (CUmemoryPool *pool_out, CUdevice dev));

MC_FN(CUresult, cuMemGetAllocationGranularity, (size_t *granularity, const CUmemAllocationProp *prop,
                                                 CUmemAllocationGranularity_flags option));
MC_FN(CUresult, cuMemCreate, (CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                               unsigned long long flags));
MC_FN(CUresult, cuMemRelease, (CUmemGenericAllocationHandle handle));
MC_FN(CUresult, cuMemAddressReserve, (CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                       unsigned long long flags));
MC_FN(CUresult, cuMemAddressFree, (CUdeviceptr ptr, size_t size));
MC_FN(CUresult, cuMemMap, (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                            unsigned long long flags));
MC_FN(CUresult, cuMemUnmap, (CUdeviceptr ptr, size_t size));
MC_FN(CUresult, cuMemSetAccess, (CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count));

MC_FN(CUresult, cuArrayCreate_v2, (CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray));
MC_FN(CUresult, cuArray3DCreate_v2, (CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray));
MC_FN(CUresult, cuArrayDestroy, (CUarray hArray));
MC_FN(CUresult, cuMipmappedArrayCreate, (CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,
                                          unsigned int numMipmapLevels));
MC_FN(CUresult, cuMipmappedArrayDestroy, (CUmipmappedArray hMipmappedArray));
MC_FN(CUresult, cuArrayGetMemoryRequirements,
      (CUDA_ARRAY_MEMORY_REQUIREMENTS *memoryRequirements, CUarray array, CUdevice device));
MC_FN(CUresult, cuMipmappedArrayGetMemoryRequirements,
      (CUDA_ARRAY_MEMORY_REQUIREMENTS *memoryRequirements, CUmipmappedArray mipmap, CUdevice device));

MC_FN(CUresult, cuGraphCreate, (CUgraph *phGraph, unsigned int flags));
MC_FN(CUresult, cuGraphDestroy, (CUgraph hGraph));
MC_FN(CUresult, cuGraphAddMemAllocNode, (CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                          size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams));
MC_FN(CUresult, cuGraphAddChildGraphNode, (CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                            size_t numDependencies, CUgraph childGraph));
MC_FN(CUresult, cuGraphInstantiateWithFlags, (CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags));
MC_FN(CUresult, cuGraphLaunch, (CUgraphExec hGraphExec, CUstream hStream));
MC_FN(CUresult, cuGraphUpload, (CUgraphExec exec, CUstream stream));
MC_FN(CUresult, cuStreamCreate, (CUstream *phStream, unsigned int Flags));
MC_FN(CUresult, cuMemHostAlloc, (void **pp, size_t bytesize, unsigned int Flags));
MC_FN(CUresult, cuMemFreeHost, (void *p));
MC_FN(CUresult, cuMemHostGetDevicePointer_v2, (CUdeviceptr *pdptr, void *p, unsigned int Flags));
#define CU_STREAM_WAIT_VALUE_GEQ 0x0
MC_FN(CUresult, cuStreamWaitValue32_v2, (CUstream stream, CUdeviceptr addr, unsigned int value, unsigned int flags));
MC_FN(CUresult, cuStreamBeginCapture_v2, (CUstream hStream, int mode));
MC_FN(CUresult, cuStreamEndCapture, (CUstream hStream, CUgraph *phGraph));
MC_FN(CUresult, cuGraphExecDestroy, (CUgraphExec hGraphExec));
MC_FN(CUresult, cuDeviceGraphMemTrim, (CUdevice device));
MC_FN(CUresult, cuDeviceGetGraphMemAttribute, (CUdevice device, CUgraphMem_attribute attr, void *value));

#ifdef __cplusplus
}
#endif

#endif /* VGPU_MINI_CUDA_H */
