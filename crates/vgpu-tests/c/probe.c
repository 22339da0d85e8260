/*
 * probe.c - a CUDA driver-API probe for vgpu's tests, run against the simulated libcuda on
 * the CPU and against the real driver on a GPU machine.
 *
 *   cc -O1 -Wall -Wextra -o probe probe.c -L<dir with libcuda.so> -lcuda -ldl -lpthread
 *
 *   probe [--via MODE] [--device N] [--ptds] OP...
 *
 * MODE is how every driver function pointer is obtained (once, at start, into a table):
 *   link           the symbols linked directly (&cuMemAlloc_v2, ...)            (default)
 *   dlsym          dlopen("libcuda.so.1") + dlsym of the exported names
 *   gpa:VER:FLAGS  dlsym cuGetProcAddress_v2 only; every function through it by base name
 *                  ("cuMemAlloc") at cudaVersion VER with flags FLAGS
 *   gpa1:VER:FLAGS the same through the 4-argument v1 cuGetProcAddress
 *   cudart         what libcudart 13 does: dlsym cuGetProcAddress_v2, ask it for
 *                  ("cuGetProcAddress", 12000) and look everything up through the pointer it
 *                  returns, at the versions libcudart asks for
 * --ptds asks for the per-thread-default-stream variants of the stream functions (flags 2 in
 * the gpa/cudart modes, the exported *_ptsz names in the link/dlsym modes).
 *
 * Each OP prints exactly one line, flushed: "OK <op> <details>" or "ERR <op> <code> [...]".
 * A function whose lookup failed prints "ERR lookup <name> <code> [status=N]" when an op first
 * needs it, and the probe exits 3.  Usage errors exit 2.  Otherwise the exit status is 0,
 * whatever the ops returned (read the lines).  See usage() for the list of ops.
 */
#define _GNU_SOURCE
#include "mini_cuda.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

/* ==== the function table ==================================================================
 * X(exported name, base name, cudaVersion libcudart asks for (12000 where unknown), flags)
 * F_STREAM: has a per-thread-default-stream variant (exported as <name>_ptsz).
 * F_PIN:    in gpa modes always ask for the listed version, not VER, because a later version
 *           has another ABI (cuCtxCreate_v3/_v4) or is another function (cuMemAlloc v1). */
#define F_STREAM 1
#define F_PIN 2

/* Linked strongly: keeps libcuda a DT_NEEDED of the probe even under --as-needed. */
#define FN_CORE(X)                                 \
    X(cuInit, "cuInit", 2000, 0)                   \
    X(cuDeviceGet, "cuDeviceGet", 12000, 0)        \
    X(cuMemGetInfo_v2, "cuMemGetInfo", 3020, 0)    \
    X(cuMemAlloc_v2, "cuMemAlloc", 3020, 0)        \
    X(cuMemFree_v2, "cuMemFree", 3020, 0)

/* Linked weakly: a libcuda without them (a partial simulator) still links; they resolve to
 * NULL and print "ERR lookup" when used. */
#define FN_OPT(X)                                                          \
    X(cuDriverGetVersion, "cuDriverGetVersion", 12000, 0)                  \
    X(cuDeviceGetCount, "cuDeviceGetCount", 12000, 0)                      \
    X(cuDeviceTotalMem_v2, "cuDeviceTotalMem", 3020, 0)                    \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000, 0)       \
    X(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease", 12000, 0) \
    X(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset", 12000, 0) \
    X(cuCtxCreate_v2, "cuCtxCreate", 3020, F_PIN)                          \
    X(cuCtxDestroy_v2, "cuCtxDestroy", 12000, 0)                           \
    X(cuCtxSetCurrent, "cuCtxSetCurrent", 12000, 0)                        \
    X(cuCtxGetCurrent, "cuCtxGetCurrent", 12000, 0)                        \
    X(cuCtxSynchronize, "cuCtxSynchronize", 12000, F_PIN)                  \
    X(cuMemAlloc, "cuMemAlloc", 2000, F_PIN)                               \
    X(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020, 0)                      \
    X(cuMemAllocManaged, "cuMemAllocManaged", 6000, 0)                     \
    X(cuStreamSynchronize, "cuStreamSynchronize", 12000, F_STREAM)         \
    X(cuMemcpyDtoH_v2, "cuMemcpyDtoH", 3020, 0)                            \
    X(cuMemcpy, "cuMemcpy", 4000, 0)                                       \
    X(cuMemcpy2D_v2, "cuMemcpy2D", 3020, 0)                                \
    X(cuMemcpy3D_v2, "cuMemcpy3D", 3020, 0)                                \
    X(cuMemcpy3DPeer, "cuMemcpy3DPeer", 4000, 0)                           \
    X(cuMemcpyAtoH_v2, "cuMemcpyAtoH", 3020, 0)                            \
    X(cuMemAllocAsync, "cuMemAllocAsync", 11020, F_STREAM)                 \
    X(cuMemFreeAsync, "cuMemFreeAsync", 12000, F_STREAM)                   \
    X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020, F_STREAM) \
    X(cuMemPoolCreate, "cuMemPoolCreate", 11020, 0)                        \
    X(cuMemPoolDestroy, "cuMemPoolDestroy", 12000, 0)                      \
    X(cuMemPoolTrimTo, "cuMemPoolTrimTo", 12000, 0)                        \
    X(cuMemPoolGetAttribute, "cuMemPoolGetAttribute", 12000, 0)            \
    X(cuMemPoolSetAttribute, "cuMemPoolSetAttribute", 12000, 0)            \
    X(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", 12000, 0)    \
    X(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity", 12000, 0) \
    X(cuMemCreate, "cuMemCreate", 12000, 0)                                \
    X(cuMemRelease, "cuMemRelease", 12000, 0)                              \
    X(cuMemAddressReserve, "cuMemAddressReserve", 12000, 0)                \
    X(cuMemAddressFree, "cuMemAddressFree", 12000, 0)                      \
    X(cuMemMap, "cuMemMap", 12000, 0)                                      \
    X(cuMemUnmap, "cuMemUnmap", 12000, 0)                                  \
    X(cuMemSetAccess, "cuMemSetAccess", 12000, 0)                          \
    X(cuArrayCreate_v2, "cuArrayCreate", 3020, 0)                          \
    X(cuArray3DCreate_v2, "cuArray3DCreate", 3020, 0)                      \
    X(cuArrayDestroy, "cuArrayDestroy", 12000, 0)                          \
    X(cuMipmappedArrayCreate, "cuMipmappedArrayCreate", 5000, 0)           \
    X(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", 12000, 0)        \
    X(cuArrayGetMemoryRequirements, "cuArrayGetMemoryRequirements", 11060, 0) \
    X(cuModuleLoadData, "cuModuleLoadData", 12000, 0)                      \
    X(cuModuleGetFunction, "cuModuleGetFunction", 12000, 0)                \
    X(cuLaunchKernel, "cuLaunchKernel", 7000, F_STREAM)                    \
    X(cuLaunchKernelEx, "cuLaunchKernelEx", 11060, 0)                      \
    X(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel", 9000, 0)     \
    X(cuStreamCreate, "cuStreamCreate", 12000, 0)                          \
    X(cuMemHostAlloc, "cuMemHostAlloc", 3020, 0)                           \
    X(cuMemFreeHost, "cuMemFreeHost", 3020, 0)                             \
    X(cuMemHostGetDevicePointer_v2, "cuMemHostGetDevicePointer", 3020, 0)  \
    X(cuStreamWaitValue32_v2, "cuStreamWaitValue32", 12000, 0)             \
    X(cuStreamBeginCapture_v2, "cuStreamBeginCapture", 12000, 0)           \
    X(cuStreamEndCapture, "cuStreamEndCapture", 12000, 0)                  \
    X(cuMipmappedArrayGetMemoryRequirements, "cuMipmappedArrayGetMemoryRequirements", 11060, 0) \
    X(cuGraphCreate, "cuGraphCreate", 12000, 0)                            \
    X(cuGraphDestroy, "cuGraphDestroy", 12000, 0)                          \
    X(cuGraphAddMemAllocNode, "cuGraphAddMemAllocNode", 11040, 0)          \
    X(cuGraphAddChildGraphNode, "cuGraphAddChildGraphNode", 10000, 0)      \
    X(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", 12000, 0) \
    X(cuGraphLaunch, "cuGraphLaunch", 10000, F_STREAM)                     \
    X(cuGraphUpload, "cuGraphUpload", 11010, F_STREAM)                     \
    X(cuGraphExecDestroy, "cuGraphExecDestroy", 12000, 0)                  \
    X(cuDeviceGraphMemTrim, "cuDeviceGraphMemTrim", 12000, 0)              \
    X(cuDeviceGetGraphMemAttribute, "cuDeviceGetGraphMemAttribute", 12000, 0)

#define FN_ALL(X) FN_CORE(X) FN_OPT(X)

#define DO_PRAGMA(x) _Pragma(#x)
#define X_WEAK(n, b, v, f) DO_PRAGMA(weak n)
FN_OPT(X_WEAK)
#pragma weak cuStreamSynchronize_ptsz
#pragma weak cuMemAllocAsync_ptsz
#pragma weak cuMemFreeAsync_ptsz
#pragma weak cuMemAllocFromPoolAsync_ptsz
#pragma weak cuGraphLaunch_ptsz
#pragma weak cuLaunchKernel_ptsz

enum {
#define X_ENUM(n, b, v, f) FN_##n,
    FN_ALL(X_ENUM) FN_COUNT
};

static const struct fninfo {
    const char *exported;
    const char *base;
    int ver;
    int flags;
} fninfo[FN_COUNT] = {
#define X_INFO(n, b, v, f) {#n, b, v, f},
    FN_ALL(X_INFO)};

static void *fnp[FN_COUNT];          /* resolved pointers (NULL: lookup failed) */
static int fnerr[FN_COUNT];          /* lookup result code when fnp is NULL */
static int fnstatus[FN_COUNT];       /* cuGetProcAddress_v2 symbolStatus, -1 if none */
static const char *fnname[FN_COUNT]; /* the name that was looked up */

static void *link_addr(int id, int ptds)
{
    if (ptds) {
        switch (id) {
        case FN_cuStreamSynchronize: return (void *)&cuStreamSynchronize_ptsz;
        case FN_cuMemAllocAsync: return (void *)&cuMemAllocAsync_ptsz;
        case FN_cuMemFreeAsync: return (void *)&cuMemFreeAsync_ptsz;
        case FN_cuMemAllocFromPoolAsync: return (void *)&cuMemAllocFromPoolAsync_ptsz;
        case FN_cuGraphLaunch: return (void *)&cuGraphLaunch_ptsz;
        default: break;
        }
    }
    switch (id) {
#define X_LINK(n, b, v, f) \
    case FN_##n: return (void *)&n;
        FN_ALL(X_LINK)
    default: return NULL;
    }
}

/* ==== output ========================================================================== */
static void out(const char *fmt, ...)
{
    va_list ap;
    flockfile(stdout);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
    funlockfile(stdout);
}

/* The function pointer for an entry, or "ERR lookup" and exit 3. */
static void *need(int id)
{
    if (fnp[id])
        return fnp[id];
    if (fnstatus[id] >= 0)
        out("ERR lookup %s %d status=%d", fnname[id], fnerr[id], fnstatus[id]);
    else
        out("ERR lookup %s %d", fnname[id], fnerr[id]);
    exit(3);
}
#define FN(n) ((PFN_##n)need(FN_##n))

/* ==== options and resolution ========================================================== */
enum via { VIA_LINK, VIA_DLSYM, VIA_GPA, VIA_GPA1, VIA_CUDART };
static enum via opt_via = VIA_LINK;
static const char *opt_via_text = "link";
static int opt_ver = 12000;
static unsigned long long opt_flags = 0;
static int opt_device = 0;
static int opt_vmm_device = -1; /* --vmm-device: the ordinal cuMemCreate names (-1: --device's) */
static int opt_ptds = 0;

static void *open_libcuda(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        out("ERR lookup libcuda.so.1 -1");
        fprintf(stderr, "probe: dlopen(libcuda.so.1): %s\n", dlerror());
        exit(3);
    }
    return h;
}

static void resolve_all(void)
{
    void *h = NULL;
    PFN_cuGetProcAddress_v2 gpa2 = NULL;
    PFN_cuGetProcAddress gpa1 = NULL;
    int ok = 0;

    if (opt_via != VIA_LINK)
        h = open_libcuda();
    if (opt_via == VIA_GPA || opt_via == VIA_CUDART) {
        gpa2 = (PFN_cuGetProcAddress_v2)dlsym(h, "cuGetProcAddress_v2");
        if (!gpa2) {
            out("ERR lookup cuGetProcAddress_v2 -1");
            exit(3);
        }
    } else if (opt_via == VIA_GPA1) {
        gpa1 = (PFN_cuGetProcAddress)dlsym(h, "cuGetProcAddress");
        if (!gpa1) {
            out("ERR lookup cuGetProcAddress -1");
            exit(3);
        }
    }
    if (opt_via == VIA_CUDART) {
        /* libcudart 13's first calls, in its order; only the last result is used. */
        void *p = NULL;
        CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
        CUresult r;
        (void)gpa2("", &p, 0, 0, &st);
        (void)gpa2("cuInit", &p, 2000, 0, &st);
        (void)gpa2("cuGetProcAddress", &p, 11030, 0, &st);
        p = NULL;
        r = gpa2("cuGetProcAddress", &p, 12000, 0, &st);
        if (r != CUDA_SUCCESS || !p) {
            out("ERR lookup cuGetProcAddress %d status=%d", r != CUDA_SUCCESS ? (int)r : (int)CUDA_ERROR_NOT_FOUND,
                (int)st);
            exit(3);
        }
        gpa2 = (PFN_cuGetProcAddress_v2)p;
    }

    for (int id = 0; id < FN_COUNT; id++) {
        const struct fninfo *fi = &fninfo[id];
        int stream_ptds = opt_ptds && (fi->flags & F_STREAM);
        void *p = NULL;
        fnstatus[id] = -1;
        fnerr[id] = 0;
        switch (opt_via) {
        case VIA_LINK:
            fnname[id] = fi->exported;
            p = link_addr(id, stream_ptds);
            if (!p)
                fnerr[id] = -1;
            break;
        case VIA_DLSYM: {
            static char buf[FN_COUNT][64];
            if (stream_ptds) {
                snprintf(buf[id], sizeof buf[id], "%s_ptsz", fi->exported);
                fnname[id] = buf[id];
            } else {
                fnname[id] = fi->exported;
            }
            p = dlsym(h, fnname[id]);
            if (!p)
                fnerr[id] = -1;
            break;
        }
        case VIA_GPA:
        case VIA_GPA1:
        case VIA_CUDART: {
            int ver;
            cuuint64_t flags;
            CUresult r;
            fnname[id] = fi->base;
            if (opt_via == VIA_CUDART) {
                ver = fi->ver;
                flags = stream_ptds ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0;
            } else {
                ver = (fi->flags & F_PIN) ? fi->ver : opt_ver;
                flags = opt_flags | (stream_ptds ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0);
            }
            if (opt_via == VIA_GPA1) {
                r = gpa1(fi->base, &p, ver, flags);
            } else {
                CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
                r = gpa2(fi->base, &p, ver, flags, &st);
                fnstatus[id] = (int)st;
            }
            if (r != CUDA_SUCCESS || !p) {
                p = NULL;
                fnerr[id] = r != CUDA_SUCCESS ? (int)r : (int)CUDA_ERROR_NOT_FOUND;
            }
            break;
        }
        }
        fnp[id] = p;
        if (p)
            ok++;
    }
    fprintf(stderr, "probe: via=%s ptds=%d device=%d resolved %d/%d\n", opt_via_text, opt_ptds, opt_device, ok,
            FN_COUNT);
}

/* ==== allocations ====================================================================== */
enum kind {
    K_ALLOC,
    K_ALLOC_V1,
    K_PITCH,
    K_MANAGED,
    K_ASYNC,
    K_POOLASYNC,
    K_VMM,
    K_VMMREL,
    K_GRAPH,
    K_ARRAY,
    K_ARRAY3D,
    K_MIPMAP,
    K_NKINDS
};
static const char *const kind_names[K_NKINDS] = {"alloc", "alloc_v1", "pitch", "managed", "async", "poolasync",
                                                  "vmm",   "vmmrel", "graphalloc", "array", "array3d", "mipmap"};

struct alloc {
    enum kind kind;
    CUdeviceptr ptr;
    size_t size; /* bytes asked for (pitch: pitch*height, vmm: rounded to the granularity) */
    CUmemGenericAllocationHandle handle;
    CUarray array;
    CUmipmappedArray mipmap;
    CUgraph graph;
    CUgraphExec exec;
};

static pthread_mutex_t stack_lock = PTHREAD_MUTEX_INITIALIZER;
static struct alloc *stack;
static size_t stack_len, stack_cap;

static void push(const struct alloc *a)
{
    pthread_mutex_lock(&stack_lock);
    if (stack_len == stack_cap) {
        size_t cap = stack_cap ? stack_cap * 2 : 256;
        struct alloc *s = realloc(stack, cap * sizeof *s);
        if (!s) {
            fprintf(stderr, "probe: out of host memory\n");
            abort();
        }
        stack = s;
        stack_cap = cap;
    }
    stack[stack_len++] = *a;
    pthread_mutex_unlock(&stack_lock);
}

/* What the driver says an array really takes (cuArrayGetMemoryRequirements), 0 if unknown. */
static unsigned long long array_real(const struct alloc *a)
{
    CUDA_ARRAY_MEMORY_REQUIREMENTS req;
    CUresult r;
    memset(&req, 0, sizeof req);
    if (a->kind == K_MIPMAP) {
        if (!fnp[FN_cuMipmappedArrayGetMemoryRequirements])
            return 0;
        r = ((PFN_cuMipmappedArrayGetMemoryRequirements)fnp[FN_cuMipmappedArrayGetMemoryRequirements])(
            &req, a->mipmap, opt_device);
    } else {
        if (!fnp[FN_cuArrayGetMemoryRequirements])
            return 0;
        r = ((PFN_cuArrayGetMemoryRequirements)fnp[FN_cuArrayGetMemoryRequirements])(&req, a->array,
                                                                                    opt_device);
    }
    return r == CUDA_SUCCESS ? (unsigned long long)req.size : 0;
}

static int pop(struct alloc *a)
{
    int ok = 0;
    pthread_mutex_lock(&stack_lock);
    if (stack_len) {
        *a = stack[--stack_len];
        ok = 1;
    }
    pthread_mutex_unlock(&stack_lock);
    return ok;
}

static CUdevice dev;
static int have_dev;
static CUmemoryPool own_pool;
static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;

static CUresult get_dev(void)
{
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&state_lock);
    if (!have_dev) {
        r = FN(cuDeviceGet)(&dev, opt_device);
        if (r == CUDA_SUCCESS)
            have_dev = 1;
    }
    pthread_mutex_unlock(&state_lock);
    return r;
}

static CUresult get_pool(CUmemoryPool *pool)
{
    CUresult r = get_dev();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&state_lock);
    if (!own_pool) {
        CUmemPoolProps props;
        CUdevice where = dev;
        /* --vmm-device names the pool's device too (else the current context's) */
        if (opt_vmm_device >= 0 && FN(cuDeviceGet)(&where, opt_vmm_device) != CUDA_SUCCESS)
            where = dev;
        memset(&props, 0, sizeof props);
        props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
        props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = where;
        r = FN(cuMemPoolCreate)(&own_pool, &props);
        if (r != CUDA_SUCCESS)
            own_pool = NULL;
    }
    *pool = own_pool;
    pthread_mutex_unlock(&state_lock);
    return r;
}

#define TRY(call, name)              \
    do {                             \
        r = (call);                  \
        if (r != CUDA_SUCCESS) {     \
            fail_step = (name);      \
            goto fail;               \
        }                            \
    } while (0)

static CUresult alloc_pitch(size_t w, size_t h, unsigned elem, struct alloc *a)
{
    size_t pitch = 0;
    CUresult r = FN(cuMemAllocPitch_v2)(&a->ptr, &pitch, w, h, elem);
    a->kind = K_PITCH;
    a->size = pitch * h;
    return r;
}

static CUresult alloc_vmm(size_t size, struct alloc *a, const char **failed)
{
    const char *fail_step = NULL;
    CUmemAllocationProp prop;
    CUmemAccessDesc acc;
    size_t gran = 0;
    int created = 0, reserved = 0, mapped = 0;
    CUdevice where;
    CUresult r = get_dev();
    if (r != CUDA_SUCCESS) {
        *failed = "cuDeviceGet";
        return r;
    }
    where = dev;
    /* NCCL's shape: physical memory on a device other than the current context's */
    if (opt_vmm_device >= 0 && (r = FN(cuDeviceGet)(&where, opt_vmm_device)) != CUDA_SUCCESS) {
        *failed = "cuDeviceGet";
        return r;
    }
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = where;
    TRY(FN(cuMemGetAllocationGranularity)(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
        "cuMemGetAllocationGranularity");
    if (gran == 0)
        gran = 2u << 20;
    size = (size + gran - 1) / gran * gran;
    a->kind = K_VMM;
    a->size = size;
    TRY(FN(cuMemCreate)(&a->handle, size, &prop, 0), "cuMemCreate");
    created = 1;
    TRY(FN(cuMemAddressReserve)(&a->ptr, size, 0, 0, 0), "cuMemAddressReserve");
    reserved = 1;
    TRY(FN(cuMemMap)(a->ptr, size, 0, a->handle, 0), "cuMemMap");
    mapped = 1;
    memset(&acc, 0, sizeof acc);
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    TRY(FN(cuMemSetAccess)(a->ptr, size, &acc, 1), "cuMemSetAccess");
    return CUDA_SUCCESS;
fail:
    if (mapped)
        (void)FN(cuMemUnmap)(a->ptr, size);
    if (reserved)
        (void)FN(cuMemAddressFree)(a->ptr, size);
    if (created)
        (void)FN(cuMemRelease)(a->handle);
    *failed = fail_step;
    return r;
}

static CUresult alloc_graph(size_t size, struct alloc *a, const char **failed)
{
    const char *fail_step = NULL;
    CUDA_MEM_ALLOC_NODE_PARAMS params;
    CUgraphNode node = NULL;
    int launched = 0;
    CUresult r = get_dev();
    if (r != CUDA_SUCCESS) {
        *failed = "cuDeviceGet";
        return r;
    }
    a->kind = K_GRAPH;
    a->size = size;
    a->graph = NULL;
    a->exec = NULL;
    TRY(FN(cuGraphCreate)(&a->graph, 0), "cuGraphCreate");
    memset(&params, 0, sizeof params);
    params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    params.poolProps.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    params.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    params.poolProps.location.id = dev;
    params.accessDescs = NULL;
    params.accessDescCount = 0;
    params.bytesize = size;
    TRY(FN(cuGraphAddMemAllocNode)(&node, a->graph, NULL, 0, &params), "cuGraphAddMemAllocNode");
    a->ptr = params.dptr;
    TRY(FN(cuGraphInstantiateWithFlags)(&a->exec, a->graph, 0), "cuGraphInstantiateWithFlags");
    TRY(FN(cuGraphLaunch)(a->exec, NULL), "cuGraphLaunch");
    launched = 1;
    TRY(FN(cuStreamSynchronize)(NULL), "cuStreamSynchronize");
    return CUDA_SUCCESS;
fail:
    if (launched) {
        (void)FN(cuMemFreeAsync)(a->ptr, NULL);
        (void)FN(cuStreamSynchronize)(NULL);
    }
    if (a->exec)
        (void)FN(cuGraphExecDestroy)(a->exec);
    if (a->graph)
        (void)FN(cuGraphDestroy)(a->graph);
    *failed = fail_step;
    return r;
}

/* One allocation of a size-driven kind; fills *a.  *failed names the failing call. */
static CUresult alloc_kind(enum kind k, size_t size, struct alloc *a, const char **failed)
{
    CUresult r;
    memset(a, 0, sizeof *a);
    a->kind = k;
    a->size = size;
    *failed = NULL;
    switch (k) {
    case K_ALLOC:
        return FN(cuMemAlloc_v2)(&a->ptr, size);
    case K_ALLOC_V1: {
        CUdeviceptr_v1 p32 = 0;
        if (size > 0xffffffffu)
            return CUDA_ERROR_INVALID_VALUE;
        r = FN(cuMemAlloc)(&p32, (unsigned int)size);
        a->ptr = p32;
        return r;
    }
    case K_PITCH: {
        size_t w = size < (1u << 20) ? size : (1u << 20);
        size_t h = w ? (size + w - 1) / w : 0;
        return alloc_pitch(w, h, 4, a);
    }
    case K_MANAGED:
        return FN(cuMemAllocManaged)(&a->ptr, size, CU_MEM_ATTACH_GLOBAL);
    case K_ASYNC:
        r = FN(cuMemAllocAsync)(&a->ptr, size, NULL);
        if (r != CUDA_SUCCESS) {
            *failed = "cuMemAllocAsync";
            return r;
        }
        r = FN(cuStreamSynchronize)(NULL);
        if (r != CUDA_SUCCESS) {
            *failed = "cuStreamSynchronize";
            push(a); /* allocated all the same */
        }
        return r;
    case K_POOLASYNC: {
        CUmemoryPool pool = NULL;
        r = get_pool(&pool);
        if (r != CUDA_SUCCESS) {
            *failed = "cuMemPoolCreate";
            return r;
        }
        r = FN(cuMemAllocFromPoolAsync)(&a->ptr, size, pool, NULL);
        if (r != CUDA_SUCCESS) {
            *failed = "cuMemAllocFromPoolAsync";
            return r;
        }
        r = FN(cuStreamSynchronize)(NULL);
        if (r != CUDA_SUCCESS) {
            *failed = "cuStreamSynchronize";
            push(a);
        }
        return r;
    }
    case K_VMM:
        return alloc_vmm(size, a, failed);
    case K_VMMREL:
        /* NVIDIA's VMM samples' shape: the handle is released as soon as it is mapped; the
           memory lives until the last mapping goes */
        r = alloc_vmm(size, a, failed);
        if (r != CUDA_SUCCESS)
            return r;
        a->kind = K_VMMREL;
        r = FN(cuMemRelease)(a->handle);
        if (r != CUDA_SUCCESS) {
            *failed = "cuMemRelease";
            (void)FN(cuMemUnmap)(a->ptr, a->size);
            (void)FN(cuMemAddressFree)(a->ptr, a->size);
        }
        return r;
    case K_GRAPH:
        return alloc_graph(size, a, failed);
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult free_one(const struct alloc *a)
{
    CUresult r, r2;
    switch (a->kind) {
    case K_ALLOC:
    case K_ALLOC_V1:
    case K_PITCH:
    case K_MANAGED:
        return FN(cuMemFree_v2)(a->ptr);
    case K_ASYNC:
    case K_POOLASYNC:
        r = FN(cuMemFreeAsync)(a->ptr, NULL);
        r2 = FN(cuStreamSynchronize)(NULL);
        return r != CUDA_SUCCESS ? r : r2;
    case K_VMM:
        r = FN(cuMemUnmap)(a->ptr, a->size);
        r2 = FN(cuMemAddressFree)(a->ptr, a->size);
        if (r == CUDA_SUCCESS)
            r = r2;
        r2 = FN(cuMemRelease)(a->handle);
        return r != CUDA_SUCCESS ? r : r2;
    case K_VMMREL:
        r = FN(cuMemUnmap)(a->ptr, a->size);
        r2 = FN(cuMemAddressFree)(a->ptr, a->size);
        return r != CUDA_SUCCESS ? r : r2;
    case K_ARRAY:
    case K_ARRAY3D:
        return FN(cuArrayDestroy)(a->array);
    case K_MIPMAP:
        return FN(cuMipmappedArrayDestroy)(a->mipmap);
    case K_GRAPH:
        r = FN(cuMemFreeAsync)(a->ptr, NULL);
        r2 = FN(cuStreamSynchronize)(NULL);
        if (r == CUDA_SUCCESS)
            r = r2;
        r2 = FN(cuGraphExecDestroy)(a->exec);
        if (r == CUDA_SUCCESS)
            r = r2;
        r2 = FN(cuGraphDestroy)(a->graph);
        return r != CUDA_SUCCESS ? r : r2;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* ==== parsing ========================================================================== */
/* A size: decimal digits with an optional binary suffix k, m, g or t (either case). */
static int parse_size(const char *s, unsigned long long *v)
{
    char *end;
    unsigned long long n, mul = 1;
    if (!s || !*s || *s == '-' || *s == '+')
        return -1;
    errno = 0;
    n = strtoull(s, &end, 10);
    if (errno || end == s)
        return -1;
    switch (*end) {
    case '\0': break;
    case 'k': case 'K': mul = 1ULL << 10; end++; break;
    case 'm': case 'M': mul = 1ULL << 20; end++; break;
    case 'g': case 'G': mul = 1ULL << 30; end++; break;
    case 't': case 'T': mul = 1ULL << 40; end++; break;
    default: return -1;
    }
    if (*end == 'i' || *end == 'I') /* "256MiB"-style tolerance: Mi / MiB */
        end++;
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end)
        return -1;
    if (n && mul > ~0ULL / n)
        return -1;
    *v = n * mul;
    return 0;
}

static int parse_kind(const char *s, enum kind *k)
{
    for (int i = 0; i < K_NKINDS; i++) {
        if (!strcmp(s, kind_names[i]) && i <= K_GRAPH) {
            *k = (enum kind)i;
            return 0;
        }
    }
    if (!strcmp(s, "graph")) {
        *k = K_GRAPH;
        return 0;
    }
    return -1;
}

/* The atexit op: at exit, as a program's late teardown (the CUDA runtime's) would: make the
 * primary context current, free every allocation still held, allocate SIZE bytes (0: none) and
 * free them, then release the primary context entirely. Registered before `init`, it runs after
 * vgpu's own exit handler. It runs on a thread of its own: the simulator keeps the current
 * context in a thread-local that the exiting thread has already destroyed. Prints
 * "OK atexit freed=N free_error=E alloc=R release=R". `atexit_held:SIZE` allocates SIZE first,
 * while everything is still held (a static destructor that allocates). */
static unsigned long long atexit_alloc;
static int atexit_held;
static void *teardown_thread(void *unused)
{
    struct alloc a;
    const char *failed = NULL;
    unsigned long long n = 0;
    CUcontext ctx = NULL;
    CUresult r = CUDA_SUCCESS, fr = CUDA_SUCCESS, rr;
    if (get_dev() != CUDA_SUCCESS || FN(cuDevicePrimaryCtxRetain)(&ctx, dev) != CUDA_SUCCESS ||
        FN(cuCtxSetCurrent)(ctx) != CUDA_SUCCESS) {
        out("ERR atexit 201 context");
        return unused;
    }
    if (atexit_held && atexit_alloc) {
        r = alloc_kind(K_ALLOC, (size_t)atexit_alloc, &a, &failed);
        if (r == CUDA_SUCCESS)
            push(&a);
    }
    while (pop(&a)) {
        CUresult e = free_one(&a);
        if (e == CUDA_SUCCESS)
            n++;
        else
            fr = e;
    }
    if (atexit_alloc && !atexit_held) {
        r = alloc_kind(K_ALLOC, (size_t)atexit_alloc, &a, &failed);
        if (r == CUDA_SUCCESS)
            free_one(&a);
    }
    /* Ours and the ctx op's retain. */
    rr = FN(cuDevicePrimaryCtxRelease_v2)(dev);
    if (rr == CUDA_SUCCESS)
        rr = FN(cuDevicePrimaryCtxRelease_v2)(dev);
    out("OK atexit freed=%llu free_error=%d alloc=%d release=%d", n, (int)fr, (int)r, (int)rr);
    return unused;
}

static void at_exit_teardown(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, teardown_thread, NULL) == 0)
        pthread_join(t, NULL);
    else
        out("ERR atexit 999 thread");
}

enum optype {
    OP_INIT, OP_CTX, OP_CTXCREATE, OP_CTXDESTROY,
    OP_ALLOCK,      /* alloc, alloc_v1, managed, async, poolasync, vmm, graphalloc: SIZE */
    OP_PITCH, OP_ARRAY, OP_ARRAY3D, OP_MIPMAP,
    OP_FREE, OP_FREEALL, OP_FREE_BOGUS, OP_FILL, OP_TRIM, OP_SYNC,
    OP_MEMINFO, OP_TOTALMEM, OP_NVML, OP_NVML2, OP_NVMLCOUNT, OP_NVMLSHUTDOWN, OP_POOLINFO, OP_GRAPHMEM, OP_STACK,
    OP_SLEEP, OP_HOLD, OP_THREADS, OP_ECHO, OP_EXIT, OP_KILL, OP_SIMUSED, OP_CALLS, OP_RTLDNEXT, OP_KERNELS, OP_SIMKERNEL, OP_FORK, OP_CAPTURE, OP_FORKHOLD, OP_NOCTX, OP_CHURN, OP_ATEXIT, OP_ATEXIT_HELD, OP_BUSY, OP_WAITVALUE, OP_OTHERSYNC, OP_REQUESTS, OP_STREAM, OP_AT, OP_GRAPHALLOCS, OP_KEEP, OP_CAPALLOC, OP_BADARGS, OP_POOLDESTROY, OP_RESET
};

struct op {
    enum optype type;
    enum kind kind;
    unsigned long long a[4];
    const char *text;
};

/* A kernels op's BLOCKS field: "N" (every launch N blocks) or "A-B" (launch i has
 * A + i % (B - A + 1) blocks). */
static void parse_blocks(const char *f, unsigned long long *from, unsigned long long *to)
{
    const char *dash = strchr(f, '-');
    *from = strtoull(f, NULL, 10);
    *to = dash ? strtoull(dash + 1, NULL, 10) : *from;
    if (*to < *from)
        *to = *from;
}

/* Splits "name:x:y" in place; returns the number of fields after the name. */
static int split(char *s, char **f, int max)
{
    int n = 0;
    char *c = strchr(s, ':');
    while (c && n < max) {
        *c = '\0';
        f[n++] = c + 1;
        c = strchr(c + 1, ':');
    }
    return c ? max + 1 : n;
}

static int parse_op(const char *arg, struct op *op)
{
    static const struct {
        const char *name;
        enum optype type;
        int nargs; /* numeric fields after the name */
    } simple[] = {
        {"init", OP_INIT, 0},         {"ctx", OP_CTX, 0},           {"ctxcreate", OP_CTXCREATE, 0},
        {"ctxdestroy", OP_CTXDESTROY, 0}, {"reset", OP_RESET, 0}, {"pitch", OP_PITCH, 3},   {"array", OP_ARRAY, 2},
        {"array3d", OP_ARRAY3D, 3},   {"mipmap", OP_MIPMAP, 3},     {"free", OP_FREE, 0},
        {"freeall", OP_FREEALL, 0},   {"free_bogus", OP_FREE_BOGUS, 0}, {"trim", OP_TRIM, 0},
        {"sync", OP_SYNC, 0},         {"meminfo", OP_MEMINFO, 0},   {"totalmem", OP_TOTALMEM, 0},
        {"badargs", OP_BADARGS, 0},   {"pooldestroy", OP_POOLDESTROY, 0},   {"nvml", OP_NVML, 0},         {"nvml2", OP_NVML2, 0},       {"poolinfo", OP_POOLINFO, 0},
        {"nvmlcount", OP_NVMLCOUNT, 0}, {"nvmlshutdown", OP_NVMLSHUTDOWN, 0},
        {"graphmem", OP_GRAPHMEM, 0}, {"stack", OP_STACK, 0},       {"sleep", OP_SLEEP, 1},
        {"hold", OP_HOLD, 0},         {"exit", OP_EXIT, 1},         {"kill", OP_KILL, 0},
        {"atexit", OP_ATEXIT, 1},     {"atexit_held", OP_ATEXIT_HELD, 1},     {"at", OP_AT, 1},
        {"noctxlaunch", OP_NOCTX, 0}, {"simused", OP_SIMUSED, 0},   {"rtldnext", OP_RTLDNEXT, 0}, {"simkernel", OP_SIMKERNEL, 0},
    };
    char buf[256];
    char *f[6];
    int n;

    memset(op, 0, sizeof *op);
    if (!strncmp(arg, "echo:", 5)) {
        op->type = OP_ECHO;
        op->text = arg + 5;
        return 0;
    }
    if (!strncmp(arg, "kernels:", 8)) { /* kernels:NAME:BLOCKS:COUNT:SYNC */
        op->type = OP_KERNELS;
        op->text = arg + 8;
        return 0;
    }
    if (!strncmp(arg, "waitvalue:", 10)) { /* waitvalue:NAME:BLOCKS:COUNT */
        op->type = OP_WAITVALUE;
        op->text = arg + 10;
        return 0;
    }
    if (!strncmp(arg, "othersync:", 10)) { /* othersync:NAME:COUNT:DEVICE */
        op->type = OP_OTHERSYNC;
        op->text = arg + 10;
        return 0;
    }
    if (!strncmp(arg, "busy:", 5)) { /* busy:NAME:MS:SYNC */
        op->type = OP_BUSY;
        op->text = arg + 5;
        return 0;
    }
    if (!strncmp(arg, "stream:", 7)) { /* stream:NAME:LAUNCHES:GAP_US:SYNC_EVERY */
        op->type = OP_STREAM;
        op->text = arg + 7;
        return 0;
    }
    if (!strncmp(arg, "requests:", 9)) { /* requests:NAME:KERNELS:PERIOD_US:COUNT[:MODE] */
        op->type = OP_REQUESTS;
        op->text = arg + 9;
        return 0;
    }
    if (!strncmp(arg, "capture:", 8)) { /* capture:NAME:BLOCKS:COUNT[:MODE[:GAP_US[:MIXED]]] */
        op->type = OP_CAPTURE;
        op->text = arg + 8;
        return 0;
    }
    if (!strncmp(arg, "capalloc:", 9)) { /* capalloc:N:SIZE - N stream-ordered allocations captured */
        op->type = OP_CAPALLOC;
        op->text = arg + 9;
        return 0;
    }
    if (!strncmp(arg, "keep:", 5)) { /* keep:SIZE - pools keep SIZE bytes at a synchronisation */
        op->type = OP_KEEP;
        op->text = arg + 5;
        return 0;
    }
    if (!strncmp(arg, "graphallocs:", 12)) { /* graphallocs:N:SIZE - one graph, N alloc nodes */
        op->type = OP_GRAPHALLOCS;
        op->text = arg + 12;
        return 0;
    }
    if (!strncmp(arg, "forkhold:", 9)) { /* forkhold:MS - a child that sleeps MS, not waited for */
        op->type = OP_FORKHOLD;
        op->text = arg + 9;
        return 0;
    }
    if (!strncmp(arg, "fork:", 5)) { /* fork:SIZE - a child allocates SIZE, reports, exits */
        op->type = OP_FORK;
        op->text = arg + 5;
        return 0;
    }
    if (!strncmp(arg, "churn:", 6)) { /* churn:SIZE:MS - allocate and free SIZE for MS ms */
        op->type = OP_CHURN;
        op->text = arg + 6;
        return 0;
    }
    if (!strncmp(arg, "calls:", 6)) {
        op->type = OP_CALLS;
        op->text = arg + 6;
        return 0;
    }
    if (strlen(arg) >= sizeof buf)
        return -1;
    strcpy(buf, arg);
    n = split(buf, f, 5);

    for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++) {
        if (strcmp(buf, simple[i].name))
            continue;
        if (n != simple[i].nargs)
            return -1;
        op->type = simple[i].type;
        for (int j = 0; j < n; j++)
            if (parse_size(f[j], &op->a[j]))
                return -1;
        return 0;
    }
    if (!strcmp(buf, "fill")) { /* fill:KIND:CHUNK[:MAXCOUNT] */
        op->type = OP_FILL;
        if ((n != 2 && n != 3) || parse_kind(f[0], &op->kind) || parse_size(f[1], &op->a[0]) || !op->a[0])
            return -1;
        op->a[1] = 100000;
        if (n == 3 && parse_size(f[2], &op->a[1]))
            return -1;
        return 0;
    }
    if (!strcmp(buf, "threads")) { /* threads:N:KIND:CHUNK:COUNT */
        op->type = OP_THREADS;
        if (n != 4 || parse_size(f[0], &op->a[0]) || parse_kind(f[1], &op->kind) || parse_size(f[2], &op->a[1]) ||
            parse_size(f[3], &op->a[2]) || op->a[0] < 1 || op->a[0] > 1024)
            return -1;
        return 0;
    }
    if (parse_kind(buf, &op->kind) == 0 && strcmp(buf, "graph") && op->kind != K_PITCH) {
        op->type = OP_ALLOCK;
        if (n != 1 || parse_size(f[0], &op->a[0]))
            return -1;
        return 0;
    }
    return -1;
}

/* ==== NVML ============================================================================= */
typedef struct {
    unsigned long long total, free, used;
} nvml_memory_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvml_memory_v2_t;
#define NVML_MEMORY_V2_VERSION ((unsigned int)(sizeof(nvml_memory_v2_t) | (2u << 24)))
typedef int (*nvml_init_fn)(void);
typedef int (*nvml_handle_fn)(unsigned int, void **);
typedef int (*nvml_mem_fn)(void *, void *);

static void op_nvml(int v2)
{
    static void *h;
    static int inited;
    const char *name = v2 ? "nvml2" : "nvml";
    void *dh = NULL;
    int r;
    if (!h) {
        h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
        if (!h) {
            fprintf(stderr, "probe: dlopen(libnvidia-ml.so.1): %s\n", dlerror());
            out("ERR %s -1 at=dlopen", name);
            return;
        }
    }
    nvml_init_fn init = (nvml_init_fn)dlsym(h, "nvmlInit_v2");
    nvml_handle_fn get = (nvml_handle_fn)dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    nvml_mem_fn mem = (nvml_mem_fn)dlsym(h, v2 ? "nvmlDeviceGetMemoryInfo_v2" : "nvmlDeviceGetMemoryInfo");
    if (!init || !get || !mem) {
        out("ERR %s -1 at=dlsym", name);
        return;
    }
    if (!inited) {
        r = init();
        if (r) {
            out("ERR %s %d at=nvmlInit_v2", name, r);
            return;
        }
        inited = 1;
    }
    r = get((unsigned)opt_device, &dh);
    if (r) {
        out("ERR %s %d at=nvmlDeviceGetHandleByIndex_v2", name, r);
        return;
    }
    if (v2) {
        nvml_memory_v2_t m;
        memset(&m, 0, sizeof m);
        m.version = NVML_MEMORY_V2_VERSION;
        r = mem(dh, &m);
        if (r)
            out("ERR %s %d at=nvmlDeviceGetMemoryInfo_v2", name, r);
        else
            out("OK %s total=%llu reserved=%llu used=%llu free=%llu", name, m.total, m.reserved, m.used, m.free);
    } else {
        nvml_memory_t m;
        memset(&m, 0, sizeof m);
        r = mem(dh, &m);
        if (r)
            out("ERR %s %d at=nvmlDeviceGetMemoryInfo", name, r);
        else
            out("OK %s total=%llu used=%llu free=%llu", name, m.total, m.used, m.free);
    }
}

/* One NVML call as the program makes it, with no nvmlInit of its own first: nvmlcount
 * (nvmlDeviceGetCount_v2) or nvmlshutdown (nvmlShutdown). "OK <op> [n=N]" or "ERR <op> CODE". */
typedef int (*nvml_count_fn)(unsigned int *);
typedef int (*nvml_void_fn)(void);
static void op_nvml_raw(const char *name, const char *sym)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    void *f = h ? dlsym(h, sym) : NULL;
    unsigned int n = 0;
    int r;
    if (!f) {
        out("ERR %s -1 at=%s", name, h ? "dlsym" : "dlopen");
        return;
    }
    if (!strcmp(sym, "nvmlShutdown")) {
        r = ((nvml_void_fn)f)();
        if (r)
            out("ERR %s %d", name, r);
        else
            out("OK %s", name);
        return;
    }
    r = ((nvml_count_fn)f)(&n);
    if (r)
        out("ERR %s %d", name, r);
    else
        out("OK %s n=%u", name, n);
}

/* ==== hold / signals ==================================================================== */
static volatile sig_atomic_t in_hold, got_term;

static void on_term(int sig)
{
    (void)sig;
    if (!in_hold)
        _exit(143);
    got_term = 1;
}

static void op_hold(void)
{
    char buf[256];
    /* Before the line: a SIGTERM sent once the line is read must end the hold, not the probe. */
    in_hold = 1;
    out("OK hold");
    while (!got_term) {
        ssize_t n = read(0, buf, sizeof buf);
        if (n == 0 || (n < 0 && errno != EINTR))
            break;
    }
    in_hold = 0;
    got_term = 0;
}

/* ==== threads =========================================================================== */
struct thr {
    pthread_t tid;
    CUcontext ctx;
    enum kind kind;
    size_t chunk;
    unsigned long long count, ok, fail, bytes;
    int first_err;
};

static void *thr_main(void *arg)
{
    struct thr *t = arg;
    if (t->ctx) {
        CUresult r = FN(cuCtxSetCurrent)(t->ctx);
        if (r != CUDA_SUCCESS) {
            t->fail = t->count;
            t->first_err = (int)r;
            return NULL;
        }
    }
    for (unsigned long long i = 0; i < t->count; i++) {
        struct alloc a;
        const char *failed;
        CUresult r = alloc_kind(t->kind, t->chunk, &a, &failed);
        if (r == CUDA_SUCCESS) {
            push(&a);
            t->ok++;
            t->bytes += a.size;
        } else {
            t->fail++;
            if (!t->first_err)
                t->first_err = (int)r;
        }
    }
    return NULL;
}

static void op_threads(const struct op *op)
{
    unsigned long long n = op->a[0], ok = 0, fail = 0, bytes = 0;
    int err = 0;
    CUcontext ctx = NULL;
    struct thr *t = calloc(n, sizeof *t);
    if (!t) {
        out("ERR threads -1 at=calloc");
        return;
    }
    if (fnp[FN_cuCtxGetCurrent])
        (void)FN(cuCtxGetCurrent)(&ctx);
    for (unsigned long long i = 0; i < n; i++) {
        t[i].ctx = ctx;
        t[i].kind = op->kind;
        t[i].chunk = op->a[1];
        t[i].count = op->a[2];
        if (pthread_create(&t[i].tid, NULL, thr_main, &t[i])) {
            t[i].tid = 0;
            t[i].fail = t[i].count;
            t[i].first_err = -1;
        }
    }
    for (unsigned long long i = 0; i < n; i++) {
        if (t[i].tid)
            pthread_join(t[i].tid, NULL);
        ok += t[i].ok;
        fail += t[i].fail;
        bytes += t[i].bytes;
        if (!err && t[i].first_err)
            err = t[i].first_err;
    }
    free(t);
    out("OK threads ok=%llu fail=%llu bytes=%llu err=%d", ok, fail, bytes, err);
}

/* ==== running ops ======================================================================= */
static CUcontext created[64];
static int ncreated;

static CUfunction noctx_fn;
static CUresult noctx_result;
static void *noctx_thread(void *arg)
{
    (void)arg;
    noctx_result = FN(cuLaunchKernel)(noctx_fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    return NULL;
}

static unsigned long long mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

/* Function NAME of a module loaded from a dummy image (the simulator times kernels by name). */
static CUresult sim_function(const char *name, CUfunction *fn)
{
    /* "=NAME": the function the first op that named it got (its module loaded once, as a
     * framework's kernels stay loaded); any other name loads a module of its own. */
    static struct { char name[64]; CUfunction fn; } kept[16];
    static int nkept;
    CUmodule mod = NULL;
    CUresult r;
    int i, keep = name[0] == '=';
    if (keep) {
        name++;
        for (i = 0; i < nkept; i++)
            if (!strcmp(kept[i].name, name)) {
                *fn = kept[i].fn;
                return CUDA_SUCCESS;
            }
    }
    r = FN(cuModuleLoadData)(&mod, "vgpu-probe");
    if (r == CUDA_SUCCESS)
        r = FN(cuModuleGetFunction)(fn, mod, name);
    if (r == CUDA_SUCCESS && keep && nkept < 16 && strlen(name) < sizeof kept[0].name) {
        snprintf(kept[nkept].name, sizeof kept[nkept].name, "%s", name);
        kept[nkept++].fn = *fn;
    }
    return r;
}

static void err_line(const char *op, CUresult r, const char *failed)
{
    if (failed)
        out("ERR %s %d at=%s", op, (int)r, failed);
    else
        out("ERR %s %d", op, (int)r);
}

static void run_op(const struct op *op)
{
    CUresult r;
    struct alloc a;
    const char *failed = NULL;

    switch (op->type) {
    case OP_INIT: {
        int v = 0;
        r = FN(cuInit)(0);
        if (r != CUDA_SUCCESS) {
            err_line("init", r, NULL);
            break;
        }
        if (fnp[FN_cuDriverGetVersion])
            (void)FN(cuDriverGetVersion)(&v);
        out("OK init driver=%d", v);
        break;
    }
    case OP_CTX: {
        CUcontext ctx = NULL;
        if ((r = get_dev()) != CUDA_SUCCESS) {
            err_line("ctx", r, "cuDeviceGet");
            break;
        }
        if ((r = FN(cuDevicePrimaryCtxRetain)(&ctx, dev)) != CUDA_SUCCESS) {
            err_line("ctx", r, "cuDevicePrimaryCtxRetain");
            break;
        }
        if ((r = FN(cuCtxSetCurrent)(ctx)) != CUDA_SUCCESS) {
            err_line("ctx", r, "cuCtxSetCurrent");
            break;
        }
        out("OK ctx device=%d", opt_device);
        break;
    }
    case OP_CTXCREATE: {
        CUcontext ctx = NULL;
        if ((r = get_dev()) != CUDA_SUCCESS) {
            err_line("ctxcreate", r, "cuDeviceGet");
            break;
        }
        if ((r = FN(cuCtxCreate_v2)(&ctx, 0, dev)) != CUDA_SUCCESS) {
            err_line("ctxcreate", r, NULL);
            break;
        }
        if (ncreated < (int)(sizeof created / sizeof created[0]))
            created[ncreated++] = ctx;
        out("OK ctxcreate device=%d", opt_device);
        break;
    }
    case OP_RESET:
        /* reset - cuDevicePrimaryCtxReset: the primary context's objects and memory go; it
         * stays retained (and current), made again at its next use */
        if ((r = get_dev()) == CUDA_SUCCESS)
            r = FN(cuDevicePrimaryCtxReset_v2)(dev);
        if (r != CUDA_SUCCESS)
            err_line("reset", r, NULL);
        else
            out("OK reset");
        break;
    case OP_CTXDESTROY:
        if (ncreated) {
            r = FN(cuCtxDestroy_v2)(created[--ncreated]);
            if (r != CUDA_SUCCESS)
                err_line("ctxdestroy", r, NULL);
            else
                out("OK ctxdestroy created");
        } else {
            if ((r = get_dev()) == CUDA_SUCCESS)
                r = FN(cuDevicePrimaryCtxRelease_v2)(dev);
            if (r != CUDA_SUCCESS)
                err_line("ctxdestroy", r, NULL);
            else
                out("OK ctxdestroy primary");
        }
        break;
    case OP_ALLOCK: {
        const char *name = kind_names[op->kind];
        r = alloc_kind(op->kind, op->a[0], &a, &failed);
        if (r != CUDA_SUCCESS) {
            err_line(name, r, failed);
            break;
        }
        push(&a);
        out("OK %s ptr=0x%llx size=%zu", name, a.ptr, a.size);
        break;
    }
    case OP_PITCH: {
        memset(&a, 0, sizeof a);
        r = alloc_pitch(op->a[0], op->a[1], (unsigned)op->a[2], &a);
        if (r != CUDA_SUCCESS) {
            err_line("pitch", r, NULL);
            break;
        }
        push(&a);
        out("OK pitch ptr=0x%llx pitch=%zu size=%zu", a.ptr, op->a[1] ? a.size / op->a[1] : 0, a.size);
        break;
    }
    case OP_ARRAY: {
        CUDA_ARRAY_DESCRIPTOR d;
        memset(&a, 0, sizeof a);
        memset(&d, 0, sizeof d);
        d.Width = op->a[0];
        d.Height = op->a[1];
        d.Format = CU_AD_FORMAT_FLOAT;
        d.NumChannels = 1;
        a.kind = K_ARRAY;
        a.size = d.Width * (d.Height ? d.Height : 1) * 4;
        r = FN(cuArrayCreate_v2)(&a.array, &d);
        if (r != CUDA_SUCCESS) {
            err_line("array", r, NULL);
            break;
        }
        push(&a);
        out("OK array handle=%p size=%zu real=%llu", (void *)a.array, a.size, array_real(&a));
        break;
    }
    case OP_ARRAY3D:
    case OP_MIPMAP: {
        CUDA_ARRAY3D_DESCRIPTOR d;
        const char *name = op->type == OP_MIPMAP ? "mipmap" : "array3d";
        memset(&a, 0, sizeof a);
        memset(&d, 0, sizeof d);
        d.Width = op->a[0];
        d.Height = op->a[1];
        d.Depth = op->type == OP_MIPMAP ? 0 : op->a[2];
        d.Format = CU_AD_FORMAT_FLOAT;
        d.NumChannels = 1;
        d.Flags = 0;
        a.size = d.Width * (d.Height ? d.Height : 1) * (d.Depth ? d.Depth : 1) * 4; /* level 0 only */
        if (op->type == OP_MIPMAP) {
            a.kind = K_MIPMAP;
            r = FN(cuMipmappedArrayCreate)(&a.mipmap, &d, (unsigned)op->a[2]);
        } else {
            a.kind = K_ARRAY3D;
            r = FN(cuArray3DCreate_v2)(&a.array, &d);
        }
        if (r != CUDA_SUCCESS) {
            err_line(name, r, NULL);
            break;
        }
        push(&a);
        out("OK %s handle=%p size=%zu real=%llu", name,
            op->type == OP_MIPMAP ? (void *)a.mipmap : (void *)a.array, a.size, array_real(&a));
        break;
    }
    case OP_FREE:
        if (!pop(&a)) {
            out("ERR free %d empty", (int)CUDA_ERROR_INVALID_VALUE);
            break;
        }
        r = free_one(&a);
        if (r != CUDA_SUCCESS)
            out("ERR free %d kind=%s size=%zu", (int)r, kind_names[a.kind], a.size);
        else
            out("OK free kind=%s ptr=0x%llx size=%zu", kind_names[a.kind], a.ptr, a.size);
        break;
    case OP_FREEALL: {
        unsigned long long n = 0, errs = 0, bytes = 0;
        int first = 0;
        while (pop(&a)) {
            r = free_one(&a);
            if (r != CUDA_SUCCESS) {
                errs++;
                if (!first)
                    first = (int)r;
            } else {
                n++;
                bytes += a.size;
            }
        }
        if (errs)
            out("ERR freeall %d freed=%llu bytes=%llu errors=%llu", first, n, bytes, errs);
        else
            out("OK freeall freed=%llu bytes=%llu", n, bytes);
        break;
    }
    case OP_FREE_BOGUS:
        r = FN(cuMemFree_v2)((CUdeviceptr)0xdead0000ULL);
        out("OK free_bogus code=%d", (int)r);
        break;
    case OP_FILL: {
        unsigned long long count = 0, bytes = 0;
        const unsigned long long cap_bytes = 512ULL << 30;
        int err = -1; /* -1: stopped by MAXCOUNT or the 512 GiB cap, not by an error */
        while (count < op->a[1] && bytes + op->a[0] <= cap_bytes) {
            r = alloc_kind(op->kind, op->a[0], &a, &failed);
            if (r != CUDA_SUCCESS) {
                err = (int)r;
                break;
            }
            push(&a);
            count++;
            bytes += a.size;
        }
        if (err > 0 && failed)
            out("OK fill %s count=%llu bytes=%llu err=%d at=%s", kind_names[op->kind], count, bytes, err, failed);
        else
            out("OK fill %s count=%llu bytes=%llu err=%d", kind_names[op->kind], count, bytes, err);
        break;
    }
    case OP_TRIM: {
        /* best effort: a function this lookup path lacks (gpa at an old VER) is skipped */
        CUmemoryPool def = NULL;
        CUresult first = CUDA_SUCCESS;
        int skipped = 0;
        if ((r = get_dev()) != CUDA_SUCCESS) {
            err_line("trim", r, "cuDeviceGet");
            break;
        }
        if (!fnp[FN_cuMemPoolTrimTo] || !fnp[FN_cuDeviceGetDefaultMemPool]) {
            skipped++;
        } else {
            if (own_pool && (r = FN(cuMemPoolTrimTo)(own_pool, 0)) != CUDA_SUCCESS && !first)
                first = r, failed = "cuMemPoolTrimTo(own)";
            if ((r = FN(cuDeviceGetDefaultMemPool)(&def, dev)) == CUDA_SUCCESS) {
                if ((r = FN(cuMemPoolTrimTo)(def, 0)) != CUDA_SUCCESS && !first)
                    first = r, failed = "cuMemPoolTrimTo(default)";
            } else if (!first) {
                first = r, failed = "cuDeviceGetDefaultMemPool";
            }
        }
        if (!fnp[FN_cuDeviceGraphMemTrim])
            skipped++;
        else if ((r = FN(cuDeviceGraphMemTrim)(dev)) != CUDA_SUCCESS && !first)
            first = r, failed = "cuDeviceGraphMemTrim";
        if (first)
            err_line("trim", first, failed);
        else if (skipped)
            out("OK trim skipped=%d", skipped);
        else
            out("OK trim");
        break;
    }
    case OP_SYNC:
        r = FN(cuCtxSynchronize)();
        if (r != CUDA_SUCCESS)
            err_line("sync", r, NULL);
        else
            out("OK sync");
        break;
    case OP_MEMINFO: {
        size_t fr = 0, tot = 0;
        r = FN(cuMemGetInfo_v2)(&fr, &tot);
        if (r != CUDA_SUCCESS)
            err_line("meminfo", r, NULL);
        else
            out("OK meminfo free=%zu total=%zu", fr, tot);
        break;
    }
    case OP_TOTALMEM: {
        size_t tot = 0;
        if ((r = get_dev()) == CUDA_SUCCESS)
            r = FN(cuDeviceTotalMem_v2)(&tot, dev);
        if (r != CUDA_SUCCESS)
            err_line("totalmem", r, NULL);
        else
            out("OK totalmem %zu", tot);
        break;
    }
    case OP_NVML:
        op_nvml(0);
        break;
    case OP_NVML2:
        op_nvml(1);
        break;
    case OP_NVMLCOUNT:
        op_nvml_raw("nvmlcount", "nvmlDeviceGetCount_v2");
        break;
    case OP_NVMLSHUTDOWN:
        op_nvml_raw("nvmlshutdown", "nvmlShutdown");
        break;
    case OP_POOLINFO: {
        CUmemoryPool pool = own_pool;
        cuuint64_t res = 0, used = 0, thr = 0;
        if (!pool) {
            if ((r = get_dev()) == CUDA_SUCCESS)
                r = FN(cuDeviceGetDefaultMemPool)(&pool, dev);
            if (r != CUDA_SUCCESS) {
                err_line("poolinfo", r, "cuDeviceGetDefaultMemPool");
                break;
            }
        }
        if ((r = FN(cuMemPoolGetAttribute)(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &res)) != CUDA_SUCCESS ||
            (r = FN(cuMemPoolGetAttribute)(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used)) != CUDA_SUCCESS ||
            (r = FN(cuMemPoolGetAttribute)(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr)) != CUDA_SUCCESS) {
            err_line("poolinfo", r, "cuMemPoolGetAttribute");
            break;
        }
        out("OK poolinfo pool=%s reserved=%" PRIu64 " used=%" PRIu64 " threshold=%" PRIu64,
            own_pool ? "own" : "default", res, used, thr);
        break;
    }
    case OP_GRAPHMEM: {
        cuuint64_t used = 0, res = 0;
        if ((r = get_dev()) != CUDA_SUCCESS ||
            (r = FN(cuDeviceGetGraphMemAttribute)(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used)) != CUDA_SUCCESS ||
            (r = FN(cuDeviceGetGraphMemAttribute)(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &res)) !=
                CUDA_SUCCESS) {
            err_line("graphmem", r, NULL);
            break;
        }
        out("OK graphmem used=%" PRIu64 " reserved=%" PRIu64, used, res);
        break;
    }
    case OP_STACK: {
        unsigned long long bytes = 0;
        size_t n;
        pthread_mutex_lock(&stack_lock);
        n = stack_len;
        for (size_t i = 0; i < stack_len; i++)
            bytes += stack[i].size;
        pthread_mutex_unlock(&stack_lock);
        out("OK stack count=%zu bytes=%llu", n, bytes);
        break;
    }
    case OP_ATEXIT:
    case OP_ATEXIT_HELD:
        atexit_alloc = op->a[0];
        atexit_held = op->type == OP_ATEXIT_HELD;
        atexit(at_exit_teardown);
        out("OK atexit");
        break;
    case OP_AT: {
        /* at:NS - sleep until CLOCK_MONOTONIC reads NS (a start shared by several probes);
         * prints how late it woke (or how late it already was). */
        unsigned long long now = mono_ns();
        while (now < op->a[0]) {
            unsigned long long left = op->a[0] - now;
            struct timespec ts;
            ts.tv_sec = (time_t)(left / 1000000000ULL);
            ts.tv_nsec = (long)(left % 1000000000ULL);
            nanosleep(&ts, NULL);
            now = mono_ns();
        }
        out("OK at late_ns=%llu", now - op->a[0]);
        break;
    }
    case OP_SLEEP: {
        struct timespec ts;
        ts.tv_sec = (time_t)(op->a[0] / 1000);
        ts.tv_nsec = (long)(op->a[0] % 1000) * 1000000L;
        while (nanosleep(&ts, &ts) && errno == EINTR)
            ;
        out("OK sleep %llu", op->a[0]);
        break;
    }
    case OP_HOLD:
        op_hold();
        break;
    case OP_THREADS:
        op_threads(op);
        break;
    case OP_ECHO:
        out("OK echo %s", op->text);
        break;
    case OP_EXIT:
        fflush(stdout);
        exit((int)op->a[0]);
    case OP_KILL:
        fflush(stdout);
        raise(SIGKILL);
        break;
    case OP_CHURN: {
        /* churn:SIZE:MS - a busy neighbour: allocate SIZE and free it again, for MS ms. */
        char spec[100], *fld[2];
        unsigned long long size = 0, ms = 0, n = 0, end;
        CUdeviceptr p = 0;
        snprintf(spec, sizeof spec, "%s", op->text);
        fld[0] = spec;
        if (split(spec, fld + 1, 1) != 1 || parse_size(fld[0], &size) || parse_size(fld[1], &ms)) {
            out("ERR churn %d usage", (int)CUDA_ERROR_INVALID_VALUE);
            break;
        }
        end = mono_ns() + ms * 1000000ULL;
        r = CUDA_SUCCESS;
        while (r == CUDA_SUCCESS && mono_ns() < end) {
            r = FN(cuMemAlloc_v2)(&p, (size_t)size);
            if (r == CUDA_SUCCESS)
                r = FN(cuMemFree_v2)(p);
            n++;
        }
        if (r != CUDA_SUCCESS)
            err_line("churn", r, NULL);
        else
            out("OK churn n=%llu", n);
        break;
    }
    case OP_SIMUSED: {
        /* The simulated driver's own count of the device's memory in use (physical truth). */
        void *h = dlopen("libcuda.so.1", RTLD_NOW);
        unsigned long long (*used)(int) = h ? (unsigned long long (*)(int))dlsym(h, "vgpuSimDeviceUsed") : NULL;
        if (!used)
            out("ERR simused %d", (int)CUDA_ERROR_NOT_FOUND);
        else
            out("OK simused used=%llu", used(opt_device));
        break;
    }
    case OP_KERNELS: {
        /* kernels:NAME:BLOCKS:COUNT:SYNC - launch COUNT kernels NAME (from a module loaded
         * from a dummy image: the simulator times them by name) of BLOCKS blocks on the NULL
         * stream; SYNC N > 0 synchronises after every N. Prints the wall time. BLOCKS may be
         * A-B: launch i has A + i % (B - A + 1) blocks (as many launch keys; up to 132 blocks
         * the simulator runs each in one wave, the same time). NAME "=spin_10us": the
         * function an earlier op named so (one module for the process), not a new one. */
        char spec[200], *fld[4];
        CUfunction fn = NULL;
        unsigned long long i, count, blocks, blocks_to, t0, t1;
        int sync, nf, api = 0;
        CUlaunchConfig cfg;
        snprintf(spec, sizeof spec, "%s", op->text);
        nf = split(spec, fld, 4);
        if (nf == 4)
            api = atoi(fld[3]); /* :API - 0 cuLaunchKernel, 1 cuLaunchKernelEx, 2 cuLaunchCooperativeKernel */
        if ((nf != 3 && nf != 4) || api < 0 || api > 2) {
            out("ERR kernels %d usage", (int)CUDA_ERROR_INVALID_VALUE);
            break;
        }
        parse_blocks(fld[0], &blocks, &blocks_to);
        count = strtoull(fld[1], NULL, 10);
        sync = atoi(fld[2]);
        r = sim_function(spec, &fn);
        if (r != CUDA_SUCCESS) {
            err_line("kernels", r, "module");
            break;
        }
        t0 = mono_ns();
        for (i = 0; i < count && r == CUDA_SUCCESS; i++) {
            unsigned grid = (unsigned)(blocks + i % (blocks_to - blocks + 1));
            if (api == 1) {
                memset(&cfg, 0, sizeof cfg);
                cfg.gridDimX = grid;
                cfg.gridDimY = cfg.gridDimZ = cfg.blockDimX = cfg.blockDimY = cfg.blockDimZ = 1;
                r = FN(cuLaunchKernelEx)(&cfg, fn, NULL, NULL);
            } else if (api == 2) {
                r = FN(cuLaunchCooperativeKernel)(fn, grid, 1, 1, 1, 1, 1, 0, NULL, NULL);
            } else {
                r = FN(cuLaunchKernel)(fn, grid, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
            }
            if (r == CUDA_SUCCESS && sync && (i + 1) % (unsigned long long)sync == 0)
                r = FN(cuStreamSynchronize)(NULL);
        }
        if (r == CUDA_SUCCESS)
            r = FN(cuCtxSynchronize)();
        t1 = mono_ns();
        if (r != CUDA_SUCCESS)
            err_line("kernels", r, NULL);
        else
            out("OK kernels n=%llu wall_ns=%llu", count, t1 - t0);
        break;
    }
    case OP_OTHERSYNC: {
        /* othersync:NAME:COUNT:DEVICE - COUNT launches of NAME on a stream of the current
         * context, then DEVICE's primary context made current and the stream synchronised from
         * there (a program that waits for one device's stream while another is current); the
         * context current before is current again after, so that the op can be repeated. */
        char spec[128];
        char *fld[3];
        CUfunction fn = NULL;
        CUstream st = NULL;
        CUcontext other = NULL, was = NULL;
        CUdevice odev = 0;
        unsigned long long count, i, t0, t1;
        snprintf(spec, sizeof spec, "%s", op->text);
        if (split(spec, fld, 3) != 2) {
            out("ERR othersync %d usage", (int)CUDA_ERROR_INVALID_VALUE);
            break;
        }
        count = strtoull(fld[0], NULL, 10);
        if ((r = sim_function(spec, &fn)) != CUDA_SUCCESS || (r = FN(cuStreamCreate)(&st, 0)) != CUDA_SUCCESS ||
            (r = FN(cuDeviceGet)(&odev, atoi(fld[1]))) != CUDA_SUCCESS ||
            (r = FN(cuDevicePrimaryCtxRetain)(&other, odev)) != CUDA_SUCCESS) {
            err_line("othersync", r, "setup");
            break;
        }
        if ((r = FN(cuCtxGetCurrent)(&was)) != CUDA_SUCCESS) {
            err_line("othersync", r, "current");
            break;
        }
        t0 = mono_ns();
        for (i = 0; i < count && r == CUDA_SUCCESS; i++)
            r = FN(cuLaunchKernel)(fn, 1, 1, 1, 1, 1, 1, 0, st, NULL, NULL);
        if (r == CUDA_SUCCESS)
            r = FN(cuCtxSetCurrent)(other);
        if (r == CUDA_SUCCESS)
            r = FN(cuStreamSynchronize)(st);
        t1 = mono_ns();
        if (r == CUDA_SUCCESS)
            r = FN(cuCtxSetCurrent)(was);
        if (r != CUDA_SUCCESS)
            err_line("othersync", r, NULL);
        else
            out("OK othersync n=%llu wall_ns=%llu", count, t1 - t0);
        break;
    }
    case OP_WAITVALUE: {
        /* waitvalue:NAME:BLOCKS:COUNT - a stream of its own waits for a word of pinned host
         * memory (cuStreamWaitValue32, GEQ 1); COUNT kernels NAME (BLOCKS as in kernels:) are
         * launched behind the wait, and only then does the host write the word. Prints the
         * wall time from the wait to the stream's end. */
        char spec[200], *fld[3];
        CUfunction fn = NULL;
        CUstream st = NULL;
        CUdeviceptr dword = 0;
        void *word = NULL;
        unsigned long long i, count, blocks, blocks_to, t0, t1;
        snprintf(spec, sizeof spec, "%s", op->text);
        if (split(spec, fld, 3) != 2) {
            out("ERR waitvalue %d usage", (int)CUDA_ERROR_INVALID_VALUE);
            break;
        }
        parse_blocks(fld[0], &blocks, &blocks_to);
        count = strtoull(fld[1], NULL, 10);
        if ((r = sim_function(spec, &fn)) != CUDA_SUCCESS || (r = FN(cuStreamCreate)(&st, 0)) != CUDA_SUCCESS ||
            (r = FN(cuMemHostAlloc)(&word, 4, 0x2 /* DEVICEMAP */)) != CUDA_SUCCESS ||
            (r = FN(cuMemHostGetDevicePointer_v2)(&dword, word, 0)) != CUDA_SUCCESS) {
            err_line("waitvalue", r, "setup");
            break;
        }
        *(volatile unsigned *)word = 0;
        t0 = mono_ns();
        r = FN(cuStreamWaitValue32_v2)(st, dword, 1, CU_STREAM_WAIT_VALUE_GEQ);
        for (i = 0; i < count && r == CUDA_SUCCESS; i++)
            r = FN(cuLaunchKernel)(fn, (unsigned)(blocks + i % (blocks_to - blocks + 1)), 1, 1, 1, 1, 1, 0, st, NULL,
                                   NULL);
        __atomic_store_n((unsigned *)word, 1u, __ATOMIC_RELEASE);
        if (r == CUDA_SUCCESS)
            r = FN(cuStreamSynchronize)(st);
        t1 = mono_ns();
        FN(cuMemFreeHost)(word);
        if (r != CUDA_SUCCESS)
            err_line("waitvalue", r, NULL);
        else
            out("OK waitvalue n=%llu wall_ns=%llu", count, t1 - t0);
        break;
    }
    case OP_BUSY: {
        /* busy:NAME:MS:SYNC - launch kernels NAME (one block) for MS ms of wall time,
         * synchronising after every SYNC (> 0); prints how many ran to completion, when (ns
         * from the start) the first synchronisation that found some done returned (0: none
         * did), and the longest wait for the next (from the start for the first, to the
         * window's end for the last). */
        char spec[200], *fld[3];
        CUfunction fn = NULL;
        unsigned long long n = 0, done = 0, first = 0, last = 0, gap = 0, ms, t0, t1, el;
        int sync, nf;
        snprintf(spec, sizeof spec, "%s", op->text);
        nf = split(spec, fld, 2);
        if (nf != 2 || atoi(fld[1]) <= 0) {
            out("ERR busy %d usage", (int)CUDA_ERROR_INVALID_VALUE);
            break;
        }
        ms = strtoull(fld[0], NULL, 10);
        sync = atoi(fld[1]);
        r = sim_function(spec, &fn);
        if (r != CUDA_SUCCESS) {
            err_line("busy", r, "module");
            break;
        }
        t0 = mono_ns();
        while (r == CUDA_SUCCESS && mono_ns() - t0 < ms * 1000000ULL) {
            r = FN(cuLaunchKernel)(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
            n++;
            if (r == CUDA_SUCCESS && n % (unsigned long long)sync == 0) {
                r = FN(cuStreamSynchronize)(NULL);
                el = mono_ns() - t0;
                if (r == CUDA_SUCCESS && el <= ms * 1000000ULL) {
                    if (!done)
                        first = el;
                    if (el - last > gap)
                        gap = el - last;
                    last = el;
                    done = n;
                }
            }
        }
        /* The wait from the last completed synchronisation to the window's end counts too. */
        if (ms * 1000000ULL - last > gap)
            gap = ms * 1000000ULL - last;
        if (r == CUDA_SUCCESS)
            r = FN(cuCtxSynchronize)();
        t1 = mono_ns();
        if (r != CUDA_SUCCESS)
            err_line("busy", r, NULL);
        else
            out("OK busy n=%llu launched=%llu wall_ns=%llu first_ns=%llu gap_ns=%llu", done, n,
                t1 - t0, first, gap);
        break;
    }
    case OP_STREAM: {
        /* stream:NAME:LAUNCHES:GAP_US:SYNC_EVERY[:SHAPES] - a host-bound launch stream (eager
         * framework code, a decode loop): LAUNCHES kernels NAME (one block, NULL stream), each
         * followed by GAP_US us of host work (a busy spin, not a sleep), a stream
         * synchronisation after every SYNC_EVERY launches (0: only at the end). SHAPES (default
         * 1): launch i runs 1 + i % SHAPES threads, the same GPU time over that many launch
         * shapes (a framework's kernels over ever new sizes). Prints launches per second and
         * the wall time per launch (ns and us). */
        char spec[200], *fld[5];
        CUfunction fn = NULL;
        unsigned long long i, n, gap, every, shapes = 1, t0, t1, until, wall;
        int nf;
        snprintf(spec, sizeof spec, "%s", op->text);
        nf = split(spec, fld, 4);
        if (nf == 4) {
            shapes = strtoull(fld[3], NULL, 10);
            nf = shapes && shapes <= 1024 ? 3 : 0;
        }
        n = nf == 3 ? strtoull(fld[0], NULL, 10) : 0;
        if (!n) {
            out("ERR stream %d usage", (int)CUDA_ERROR_INVALID_VALUE);
            break;
        }
        gap = strtoull(fld[1], NULL, 10) * 1000ULL;
        every = strtoull(fld[2], NULL, 10);
        r = sim_function(spec, &fn);
        if (r != CUDA_SUCCESS) {
            err_line("stream", r, "module");
            break;
        }
        t0 = mono_ns();
        for (i = 0; i < n && r == CUDA_SUCCESS; i++) {
            r = FN(cuLaunchKernel)(fn, 1, 1, 1, (unsigned)(1 + i % shapes), 1, 1, 0, NULL, NULL, NULL);
            for (until = mono_ns() + gap; gap && mono_ns() < until;)
                ;
            if (r == CUDA_SUCCESS && every && (i + 1) % every == 0)
                r = FN(cuStreamSynchronize)(NULL);
        }
        if (r == CUDA_SUCCESS)
            r = FN(cuStreamSynchronize)(NULL);
        t1 = mono_ns();
        wall = t1 > t0 ? t1 - t0 : 1;
        if (r != CUDA_SUCCESS)
            err_line("stream", r, NULL);
        else
            out("OK stream n=%llu wall_ns=%llu launches_per_s=%llu ns_per_launch=%llu us_per_launch=%.2f", n, wall,
                n * 1000000000ULL / wall, wall / n, (double)wall / 1000.0 / (double)n);
        break;
    }
    case OP_REQUESTS: {
        /* requests:NAME:KERNELS:PERIOD_US:COUNT[:copy|copy2d|copy3d|copy3dpeer|copyatoh|
         * copydefault|copyd2d|copy2ddefault|copy2dd2d] - an open-loop service: a request every PERIOD_US (due times
         * fixed from the start), each KERNELS kernels NAME then a stream synchronisation (with
         * "copy", a synchronous copy of its 4-byte answer to the host, cuMemcpyDtoH, as
         * cudaMemcpy programs wait; "copy2d", "copy3d" and "copy3dpeer" the same by cuMemcpy2D /
         * cuMemcpy3D / cuMemcpy3DPeer, as cudaMemcpy2D / 3D / 3DPeer do; "copyatoh" out of a
         * 4-byte array by cuMemcpyAtoH; "copydefault" by cuMemcpy, as cudaMemcpy with
         * cudaMemcpyDefault does; "copyd2d" a cuMemcpy of the answer to another device
         * allocation, which does not wait, then a stream synchronisation; "copy2ddefault" by
         * cuMemcpy2D with both ends CU_MEMORYTYPE_UNIFIED, as cudaMemcpy2D with
         * cudaMemcpyDefault does, and "copy2dd2d" so to another device allocation, then a stream
         * synchronisation); a request's latency
         * runs from its due time to the sync's return. Prints the 50th, 90th and 99th
         * percentiles and the maximum. */
        char spec[200], *fld[5];
        CUfunction fn = NULL;
        CUdeviceptr answer = 0, answer2 = 0;
        unsigned int host_answer = 0;
        unsigned long long i, k, kernels, period, count, t0, *lat;
        int nf, copy; /* 0: a stream synchronisation; 1, 2, 3, 5: a 1D, 2D, 3D or 3D peer copy;
                       * 4: an array's; 6, 7: a unified 1D copy to the host, to the device;
                       * 8, 9: the same in 2D */
        CUarray arr = NULL;
        CUDA_MEMCPY2D c2 = {0};
        CUDA_MEMCPY3D c3 = {0};
        CUDA_MEMCPY3D_PEER cp = {0};
        snprintf(spec, sizeof spec, "%s", op->text);
        nf = split(spec, fld, 4);
        copy = nf != 4                     ? 0
               : !strcmp(fld[3], "copy")   ? 1
               : !strcmp(fld[3], "copy2d") ? 2
               : !strcmp(fld[3], "copy3d") ? 3
               : !strcmp(fld[3], "copyatoh") ? 4
               : !strcmp(fld[3], "copy3dpeer") ? 5
               : !strcmp(fld[3], "copydefault") ? 6
               : !strcmp(fld[3], "copyd2d") ? 7
               : !strcmp(fld[3], "copy2ddefault") ? 8
               : !strcmp(fld[3], "copy2dd2d") ? 9
                                           : -1;
        if ((nf != 3 && !copy) || copy < 0) {
            out("ERR requests %d usage", (int)CUDA_ERROR_INVALID_VALUE);
            break;
        }
        kernels = strtoull(fld[0], NULL, 10);
        period = strtoull(fld[1], NULL, 10) * 1000ULL;
        count = strtoull(fld[2], NULL, 10);
        if (!count || !(lat = calloc(count, sizeof *lat))) {
            out("ERR requests %d usage", (int)CUDA_ERROR_INVALID_VALUE);
            break;
        }
        r = sim_function(spec, &fn);
        if (r != CUDA_SUCCESS) {
            err_line("requests", r, "module");
            free(lat);
            break;
        }
        if (copy && copy != 4
            && (r = FN(cuMemAlloc_v2)(&answer, sizeof host_answer)) != CUDA_SUCCESS) {
            err_line("requests", r, "answer");
            free(lat);
            break;
        }
        if ((copy == 7 || copy == 9)
            && (r = FN(cuMemAlloc_v2)(&answer2, sizeof host_answer)) != CUDA_SUCCESS) {
            err_line("requests", r, "answer");
            (void)FN(cuMemFree_v2)(answer);
            free(lat);
            break;
        }
        if (copy == 4) {
            CUDA_ARRAY_DESCRIPTOR ad = {sizeof host_answer, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1};
            if ((r = FN(cuArrayCreate_v2)(&arr, &ad)) != CUDA_SUCCESS) {
                err_line("requests", r, "array");
                free(lat);
                break;
            }
        }
        /* The answer as one row of 4 bytes (2D), or one row of one slice (3D). */
        c2.srcMemoryType = c3.srcMemoryType = CU_MEMORYTYPE_DEVICE;
        c2.srcDevice = c3.srcDevice = answer;
        c2.srcPitch = c3.srcPitch = sizeof host_answer;
        c2.dstMemoryType = c3.dstMemoryType = CU_MEMORYTYPE_HOST;
        c2.dstHost = c3.dstHost = &host_answer;
        c2.dstPitch = c3.dstPitch = sizeof host_answer;
        c2.WidthInBytes = c3.WidthInBytes = sizeof host_answer;
        c2.Height = c3.Height = c3.Depth = 1;
        c3.srcHeight = c3.dstHeight = 1;
        cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
        cp.srcDevice = answer;
        cp.dstMemoryType = CU_MEMORYTYPE_HOST;
        cp.dstHost = &host_answer;
        cp.srcPitch = cp.dstPitch = cp.WidthInBytes = sizeof host_answer;
        cp.Height = cp.Depth = cp.srcHeight = cp.dstHeight = 1;
        if (copy == 8 || copy == 9) {
            /* Unified ends: the answer's device address, and the host buffer's (copy 8) or
             * another allocation's (copy 9) address. */
            c2.srcMemoryType = c2.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
            c2.dstHost = NULL;
            c2.dstDevice = copy == 8 ? (CUdeviceptr)(uintptr_t)&host_answer : answer2;
        }
        t0 = mono_ns();
        for (i = 0; i < count && r == CUDA_SUCCESS; i++) {
            unsigned long long due = t0 + i * period, now = mono_ns();
            if (now < due) {
                struct timespec ts = {(time_t)((due - now) / 1000000000ULL), (long)((due - now) % 1000000000ULL)};
                while (nanosleep(&ts, &ts) && errno == EINTR)
                    ;
            }
            for (k = 0; k < kernels && r == CUDA_SUCCESS; k++)
                r = FN(cuLaunchKernel)(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
            if (r == CUDA_SUCCESS)
                r = copy == 1 ? FN(cuMemcpyDtoH_v2)(&host_answer, answer, sizeof host_answer)
                    : copy == 2 || copy == 8 || copy == 9 ? FN(cuMemcpy2D_v2)(&c2)
                    : copy == 3   ? FN(cuMemcpy3D_v2)(&c3)
                    : copy == 4   ? FN(cuMemcpyAtoH_v2)(&host_answer, arr, 0, sizeof host_answer)
                    : copy == 5   ? FN(cuMemcpy3DPeer)(&cp)
                    : copy == 6   ? FN(cuMemcpy)((CUdeviceptr)(uintptr_t)&host_answer, answer,
                                                 sizeof host_answer)
                    : copy == 7   ? FN(cuMemcpy)(answer2, answer, sizeof host_answer)
                                  : FN(cuStreamSynchronize)(NULL);
            if (r == CUDA_SUCCESS && (copy == 7 || copy == 9))
                r = FN(cuStreamSynchronize)(NULL);
            lat[i] = mono_ns() - due;
        }
        if (arr)
            (void)FN(cuArrayDestroy)(arr);
        if (answer)
            (void)FN(cuMemFree_v2)(answer);
        if (answer2)
            (void)FN(cuMemFree_v2)(answer2);
        if (r != CUDA_SUCCESS) {
            err_line("requests", r, NULL);
        } else {
            /* Insertion sort: a few hundred values. */
            for (i = 1; i < count; i++)
                for (k = i; k > 0 && lat[k - 1] > lat[k]; k--) {
                    unsigned long long t = lat[k];
                    lat[k] = lat[k - 1];
                    lat[k - 1] = t;
                }
            out("OK requests n=%llu p50_ns=%llu p90_ns=%llu p99_ns=%llu max_ns=%llu", count, lat[(count - 1) / 2],
                lat[(count * 90 + 99) / 100 - 1], lat[(count * 99 + 99) / 100 - 1], lat[count - 1]);
        }
        free(lat);
        break;
    }
    case OP_CAPTURE: {
        /* capture:NAME:BLOCKS:COUNT[:MODE[:GAP_US[:MIXED]]] - capture COUNT launches into a
         * graph on a new stream in capture mode MODE (0 global, 1 thread-local, 2 relaxed: the
         * default), sleeping GAP_US between launches (timed: capturing runs nothing), then launch
         * the graph once and wait (timed). MIXED=1: every other launch goes to a second stream
         * that is not captured (it runs now, and the compute limit governs it). */
        char spec[200], *fld[5];
        CUfunction fn = NULL;
        CUstream st = NULL, other = NULL;
        CUgraph g = NULL;
        CUgraphExec ex = NULL;
        unsigned long long i, count, blocks, t0, t1, t2, gap_us = 0;
        int mode = 2, mixed = 0, nf;
        snprintf(spec, sizeof spec, "%s", op->text);
        nf = split(spec, fld, 5);
        if (nf < 2 || nf > 5) {
            out("ERR capture %d usage", (int)CUDA_ERROR_INVALID_VALUE);
            break;
        }
        blocks = strtoull(fld[0], NULL, 10);
        count = strtoull(fld[1], NULL, 10);
        if (nf >= 3)
            mode = atoi(fld[2]);
        if (nf >= 4)
            gap_us = strtoull(fld[3], NULL, 10);
        if (nf == 5)
            mixed = atoi(fld[4]);
        r = sim_function(spec, &fn);
        if (r == CUDA_SUCCESS)
            r = FN(cuStreamCreate)(&st, 0);
        if (r == CUDA_SUCCESS && mixed)
            r = FN(cuStreamCreate)(&other, 0);
        t0 = mono_ns();
        if (r == CUDA_SUCCESS)
            r = FN(cuStreamBeginCapture_v2)(st, mode);
        for (i = 0; i < count && r == CUDA_SUCCESS; i++) {
            if (gap_us && i)
                usleep((useconds_t)gap_us);
            r = FN(cuLaunchKernel)(fn, (unsigned)blocks, 1, 1, 1, 1, 1, 0,
                                   mixed && (i & 1) ? other : st, NULL, NULL);
        }
        if (r == CUDA_SUCCESS)
            r = FN(cuStreamEndCapture)(st, &g);
        if (r == CUDA_SUCCESS)
            r = FN(cuGraphInstantiateWithFlags)(&ex, g, 0);
        t1 = mono_ns();
        if (r == CUDA_SUCCESS)
            r = FN(cuGraphLaunch)(ex, st);
        if (r == CUDA_SUCCESS)
            r = FN(cuStreamSynchronize)(st);
        t2 = mono_ns();
        if (r != CUDA_SUCCESS)
            err_line("capture", r, NULL);
        else
            out("OK capture capture_ns=%llu graph_ns=%llu", t1 - t0, t2 - t1);
        break;
    }
    case OP_NOCTX: {
        /* A kernel launched from a thread that has no current context: the driver refuses it
         * (CUDA_ERROR_INVALID_CONTEXT); nothing may hang on the way. */
        static CUfunction nf;
        pthread_t th;
        r = sim_function("spin_1000us", &nf);
        if (r != CUDA_SUCCESS) {
            err_line("noctxlaunch", r, "module");
            break;
        }
        noctx_fn = nf;
        pthread_create(&th, NULL, noctx_thread, NULL);
        pthread_join(th, NULL);
        out("OK noctxlaunch code=%d", (int)noctx_result);
        break;
    }
    case OP_POOLDESTROY:
        /* pooldestroy - destroys the probe's own pool, whatever it still holds (its live
         * allocations stay until freed); the next poolasync makes a new one. */
        pthread_mutex_lock(&state_lock);
        r = own_pool ? FN(cuMemPoolDestroy)(own_pool) : CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS)
            own_pool = NULL;
        pthread_mutex_unlock(&state_lock);
        if (r != CUDA_SUCCESS)
            err_line("pooldestroy", r, NULL);
        else
            out("OK pooldestroy");
        break;
    case OP_BADARGS: {
        /* Calls whose arguments the driver refuses whatever the size, each asking for 4 GiB
         * (more than the tests' limits): what each returns, which must be what the driver says
         * of the arguments, not OUT_OF_MEMORY. */
        const size_t big = (size_t)4 << 30;
        CUdeviceptr p = 0;
        size_t pitch = 0;
        CUmemGenericAllocationHandle h = 0;
        CUmemAllocationProp prop;
        CUresult a, m0, m7, cf, cn, cu, as, pe, an;
        if ((r = get_dev()) != CUDA_SUCCESS) {
            err_line("badargs", r, "cuDeviceGet");
            break;
        }
        memset(&prop, 0, sizeof prop);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = dev;
        a = FN(cuMemAlloc_v2)(NULL, big);
        m0 = FN(cuMemAllocManaged)(&p, big, 0);
        m7 = FN(cuMemAllocManaged)(&p, big, 7);
        cf = FN(cuMemCreate)(&h, big, &prop, 1);
        cn = FN(cuMemCreate)(NULL, big, &prop, 0);
        cu = FN(cuMemCreate)(&h, big + 4096, &prop, 0);
        /* A made-up stream handle: the simulator refuses it; the real driver dereferences it
         * (the probe died of SIGSEGV on the H200 without vgpu), so it is asked only there. */
        {
            void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
            as = lib && dlsym(lib, "vgpuSimDeviceUsed")
                     ? FN(cuMemAllocAsync)(&p, big, (CUstream)0x5eed)
                     : CUDA_ERROR_INVALID_HANDLE;
        }
        pe = FN(cuMemAllocPitch_v2)(&p, &pitch, (size_t)1 << 20, 4096, 3);
        {
            /* a 64 GiB array (65536 x 65536 float4) into a NULL out-pointer */
            CUDA_ARRAY_DESCRIPTOR ad;
            memset(&ad, 0, sizeof ad);
            ad.Width = 65536;
            ad.Height = 65536;
            ad.Format = CU_AD_FORMAT_FLOAT;
            ad.NumChannels = 4;
            an = FN(cuArrayCreate_v2)(NULL, &ad);
        }
        out("OK badargs alloc_null=%d managed_flags0=%d managed_flags7=%d create_flags=%d "
            "create_null=%d create_unaligned=%d async_stream=%d pitch_elem=%d array_null=%d",
            (int)a, (int)m0, (int)m7, (int)cf, (int)cn, (int)cu, (int)as, (int)pe, (int)an);
        break;
    }
    case OP_CAPALLOC: {
        /* capalloc:N:SIZE - N cuMemAllocAsync of SIZE bytes captured on a stream of its own
         * (nothing is allocated: the graph gets memory nodes), the graph launched, then the
         * memory freed. Prints what cuMemGetInfo says is free before the capture, after it
         * and after the launch: "OK capalloc before=B captured=C launched=L launch=R". */
        unsigned long long n = strtoull(op->text, NULL, 10), size;
        const char *sz = strchr(op->text, ':');
        CUstream st = NULL;
        CUgraph g = NULL;
        CUgraphExec e = NULL;
        CUdeviceptr ptrs[16];
        size_t fb = 0, fc = 0, fl = 0, total = 0;
        CUresult lr = CUDA_ERROR_NOT_READY;
        if (!sz || n == 0 || n > 16 || parse_size(sz + 1, &size) != 0 ||
            (r = FN(cuStreamCreate)(&st, 0)) != CUDA_SUCCESS) {
            out("ERR capalloc %d", (int)CUDA_ERROR_INVALID_VALUE);
            break;
        }
        (void)FN(cuMemGetInfo_v2)(&fb, &total);
        r = FN(cuStreamBeginCapture_v2)(st, 0 /* CU_STREAM_CAPTURE_MODE_GLOBAL */);
        for (unsigned long long i = 0; i < n && r == CUDA_SUCCESS; i++)
            r = FN(cuMemAllocAsync)(&ptrs[i], size, st);
        if (r != CUDA_SUCCESS) {
            err_line("capalloc", r, "cuMemAllocAsync");
            break;
        }
        if ((r = FN(cuStreamEndCapture)(st, &g)) != CUDA_SUCCESS) {
            err_line("capalloc", r, "cuStreamEndCapture");
            break;
        }
        (void)FN(cuMemGetInfo_v2)(&fc, &total);
        if (FN(cuGraphInstantiateWithFlags)(&e, g, 0) == CUDA_SUCCESS) {
            lr = FN(cuGraphLaunch)(e, st);
            (void)FN(cuStreamSynchronize)(st);
            (void)FN(cuMemGetInfo_v2)(&fl, &total);
            if (lr == CUDA_SUCCESS) {
                for (unsigned long long i = 0; i < n; i++)
                    (void)FN(cuMemFreeAsync)(ptrs[i], st);
                (void)FN(cuStreamSynchronize)(st);
            }
            (void)FN(cuGraphExecDestroy)(e);
        }
        (void)FN(cuGraphDestroy)(g);
        out("OK capalloc before=%zu captured=%zu launched=%zu launch=%d", fb, fc, fl, (int)lr);
        break;
    }
    case OP_KEEP: {
        /* keep:SIZE - the release threshold of the probe's own pool and of the device's default
         * pool: they keep up to SIZE bytes reserved at a synchronisation (the default, 0,
         * gives everything free back). */
        unsigned long long v = 0;
        CUmemoryPool own = NULL, def = NULL;
        r = CUDA_ERROR_INVALID_VALUE;
        if (parse_size(op->text, &v) != 0 || (r = get_pool(&own)) != CUDA_SUCCESS ||
            (r = FN(cuDeviceGetDefaultMemPool)(&def, dev)) != CUDA_SUCCESS ||
            (r = FN(cuMemPoolSetAttribute)(own, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v)) != CUDA_SUCCESS ||
            (r = FN(cuMemPoolSetAttribute)(def, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v)) != CUDA_SUCCESS) {
            err_line("keep", r, NULL);
            break;
        }
        out("OK keep threshold=%llu", v);
        break;
    }
    case OP_GRAPHALLOCS: {
        /* graphallocs:N:SIZE[:upload][:child][:cond] - one graph of N memory allocation nodes
         * of SIZE bytes each (each fits alone; together they may not), instantiated (and
         * uploaded) and launched; the memory is then freed and the graph destroyed. With
         * :child the nodes are in a child graph of an otherwise empty one (CUDA 13 allows
         * memory nodes in a child whose ownership moved to its parent; the simulator,
         * always). With :cond the graph also has a conditional node (an IF with an empty
         * body, its condition 0). Prints each step's result and the simulated device's use
         * after the launch: "OK graphallocs add=R upload=R launch=R simused=B". */
        char spec[64];
        char *up, *ch, *cond;
        unsigned long long n, size;
        const char *sz;
        CUresult ur = CUDA_SUCCESS;
        snprintf(spec, sizeof spec, "%s", op->text);
        cond = strstr(spec, ":cond");
        if (cond)
            *cond = '\0';
        ch = strstr(spec, ":child");
        if (ch)
            *ch = '\0';
        up = strstr(spec, ":upload");
        if (up)
            *up = '\0';
        n = strtoull(spec, NULL, 10);
        sz = strchr(spec, ':');
        CUgraph g = NULL, c = NULL;
        CUgraphExec e = NULL;
        CUdeviceptr ptrs[16];
        CUresult add = CUDA_SUCCESS, lr = CUDA_ERROR_NOT_READY;
        unsigned long long used = 0, made = 0;
        void *h = dlopen("libcuda.so.1", RTLD_NOW);
        unsigned long long (*simused)(int) = h ? (unsigned long long (*)(int))dlsym(h, "vgpuSimDeviceUsed") : NULL;
        CUdevice where;
        if (!sz || n == 0 || n > 16 || parse_size(sz + 1, &size) != 0 || get_dev() != CUDA_SUCCESS ||
            FN(cuGraphCreate)(&g, 0) != CUDA_SUCCESS || (ch && FN(cuGraphCreate)(&c, 0) != CUDA_SUCCESS)) {
            out("ERR graphallocs %d", (int)CUDA_ERROR_INVALID_VALUE);
            break;
        }
        /* --vmm-device names the nodes' device too (else the current context's) */
        where = dev;
        if (opt_vmm_device >= 0 && FN(cuDeviceGet)(&where, opt_vmm_device) != CUDA_SUCCESS)
            where = dev;
        for (; made < n && add == CUDA_SUCCESS; made++) {
            CUDA_MEM_ALLOC_NODE_PARAMS params;
            CUgraphNode node = NULL;
            memset(&params, 0, sizeof params);
            params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
            params.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            params.poolProps.location.id = where;
            params.bytesize = size;
            add = FN(cuGraphAddMemAllocNode)(&node, c ? c : g, NULL, 0, &params);
            ptrs[made] = params.dptr;
        }
        if (c && add == CUDA_SUCCESS) {
            /* A real driver takes memory nodes in a child graph only with its ownership moved
             * to the parent (cuGraphAddNode, CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE, CUDA 12.9 and
             * later); cuGraphAddChildGraphNode clones it and refuses them. (The simulator
             * takes them either way; without cuGraphAddNode, the clone is tried.) */
            CUgraphNode node = NULL;
            typedef CUresult (*add_node_fn)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, void *);
            add_node_fn add_node = h ? (add_node_fn)dlsym(h, "cuGraphAddNode") : NULL;
            if (add_node) {
                /* CUgraphNodeParams (256 bytes): type, 3 reserved ints, then the union, whose
                 * child-graph member is { CUgraph graph; int ownership; }. */
                union { long long words[32]; struct { int type; int reserved[3]; CUgraph graph; int ownership; } child; } np;
                memset(&np, 0, sizeof np);
                np.child.type = 4;      /* CU_GRAPH_NODE_TYPE_GRAPH */
                np.child.graph = c;
                np.child.ownership = 1; /* CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE */
                add = add_node(&node, g, NULL, 0, &np);
                if (add == CUDA_SUCCESS)
                    c = NULL; /* the parent owns it now */
                out("OK graphallocs-child via=move add=%d", (int)add);
            } else {
                add = FN(cuGraphAddChildGraphNode)(&node, g, NULL, 0, c);
                out("OK graphallocs-child via=clone add=%d", (int)add);
            }
        }
        if (c)
            (void)FN(cuGraphDestroy)(c);
        if (cond && add == CUDA_SUCCESS) {
            /* CUgraphNodeParams with its conditional member: { handle u64; type int; size
             * uint; CUgraph *phGraph_out; CUcontext ctx; } after the 16-byte header. */
            typedef CUresult (*handle_fn)(unsigned long long *, CUgraph, CUcontext, unsigned, unsigned);
            typedef CUresult (*add_node_fn)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, void *);
            typedef CUresult (*get_ctx_fn)(CUcontext *);
            handle_fn mk = h ? (handle_fn)dlsym(h, "cuGraphConditionalHandleCreate") : NULL;
            add_node_fn add_node = h ? (add_node_fn)dlsym(h, "cuGraphAddNode") : NULL;
            get_ctx_fn get_ctx = h ? (get_ctx_fn)dlsym(h, "cuCtxGetCurrent") : NULL;
            CUcontext cx = NULL;
            unsigned long long handle = 0;
            if (!mk || !add_node || !get_ctx || get_ctx(&cx) != CUDA_SUCCESS) {
                add = CUDA_ERROR_NOT_SUPPORTED;
            } else if ((add = mk(&handle, g, cx, 0, 1 /* CU_GRAPH_COND_ASSIGN_DEFAULT */)) == CUDA_SUCCESS) {
                union { long long words[32]; struct { int type; int reserved[3]; unsigned long long handle; int kind; unsigned size; CUgraph *bodies; CUcontext ctx; } cond; } np;
                CUgraphNode node = NULL;
                memset(&np, 0, sizeof np);
                np.cond.type = 13; /* CU_GRAPH_NODE_TYPE_CONDITIONAL */
                np.cond.handle = handle;
                np.cond.kind = 0;  /* CU_GRAPH_COND_TYPE_IF */
                np.cond.size = 1;
                np.cond.ctx = cx;
                add = add_node(&node, g, NULL, 0, &np);
                if (add == CUDA_SUCCESS && !np.cond.bodies)
                    add = CUDA_ERROR_INVALID_VALUE;
            }
            out("OK graphallocs-cond add=%d", (int)add);
        }
        if (add == CUDA_SUCCESS && FN(cuGraphInstantiateWithFlags)(&e, g, 0) == CUDA_SUCCESS) {
            if (up) {
                ur = FN(cuGraphUpload)(e, NULL);
                (void)FN(cuStreamSynchronize)(NULL);
            }
            lr = FN(cuGraphLaunch)(e, NULL);
            (void)FN(cuStreamSynchronize)(NULL);
            used = simused ? simused(opt_vmm_device >= 0 ? opt_vmm_device : opt_device) : 0;
            if (lr == CUDA_SUCCESS) {
                for (unsigned long long i = 0; i < n; i++)
                    (void)FN(cuMemFreeAsync)(ptrs[i], NULL);
                (void)FN(cuStreamSynchronize)(NULL);
            }
        }
        if (e)
            (void)FN(cuGraphExecDestroy)(e);
        (void)FN(cuGraphDestroy)(g);
        out("OK graphallocs add=%d upload=%d launch=%d simused=%llu", (int)add, (int)ur, (int)lr, used);
        break;
    }
    case OP_FORKHOLD: {
        /* A child that only lives (inheriting the parent's mappings) for MS milliseconds; the
         * parent goes on without waiting, so it can exit while the child lives. */
        long ms = atol(op->text);
        pid_t pid;
        fflush(stdout);
        pid = fork();
        if (pid == 0) {
            int devnull = open("/dev/null", O_RDWR);
            if (devnull >= 0) { /* let the parent's reader see EOF when the parent exits */
                dup2(devnull, 1);
                dup2(devnull, 2);
            }
            usleep((useconds_t)ms * 1000);
            _exit(0);
        }
        out("OK forkhold child=%d", (int)pid);
        break;
    }
    case OP_FORK: {
        /* A child that forks without exec and allocates: vgpu must give it a slot of its own
         * in the container's budget. The child prints its own line, holds 300 ms, exits. */
        unsigned long long size = strtoull(op->text, NULL, 10);
        const char *suf = op->text + strspn(op->text, "0123456789");
        pid_t pid;
        int status = 0;
        if (*suf == 'k' || *suf == 'K') size <<= 10;
        if (*suf == 'm' || *suf == 'M') size <<= 20;
        if (*suf == 'g' || *suf == 'G') size <<= 30;
        fflush(stdout);
        pid = fork();
        if (pid == 0) {
            CUdeviceptr p = 0;
            CUresult cr = FN(cuMemAlloc_v2)(&p, (size_t)size);
            if (cr == CUDA_SUCCESS)
                out("OK forkchild size=%llu", size);
            else
                out("ERR forkchild %d", (int)cr);
            fflush(stdout);
            usleep(300000);
            _exit(0);
        }
        waitpid(pid, &status, 0);
        out("OK fork child=%d", (int)pid);
        break;
    }
    case OP_SIMKERNEL: {
        void *h = dlopen("libcuda.so.1", RTLD_NOW);
        unsigned long long (*ns)(int) = h ? (unsigned long long (*)(int))dlsym(h, "vgpuSimKernelNs") : NULL;
        if (!ns)
            out("ERR simkernel %d", (int)CUDA_ERROR_NOT_FOUND);
        else
            out("OK simkernel ns=%llu", ns(opt_device));
        break;
    }
    case OP_CALLS: {
        /* How often the simulated driver's exported symbol TEXT was entered. */
        void *h = dlopen("libcuda.so.1", RTLD_NOW);
        unsigned long long (*calls)(const char *) =
            h ? (unsigned long long (*)(const char *))dlsym(h, "vgpuSimCallCount") : NULL;
        if (!calls)
            out("ERR calls %d", (int)CUDA_ERROR_NOT_FOUND);
        else
            out("OK calls %s n=%llu", op->text, calls(op->text));
        break;
    }
    case OP_RTLDNEXT: {
        /* dlsym(RTLD_NEXT) from this executable must search from the object after it: the
         * first preloaded library. An interposed dlsym that calls the real one itself would
         * make the search start after *itself* instead. */
        void *next = dlsym(RTLD_NEXT, "cuInit");
        void *first = dlsym(RTLD_DEFAULT, "cuInit");
        Dl_info a, b;
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        dladdr(next, &a);
        dladdr(first, &b);
        out("OK rtldnext same=%d next=%s default=%s", next == first,
            a.dli_fname ? a.dli_fname : "?", b.dli_fname ? b.dli_fname : "?");
        break;
    }
    }
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: probe [--via MODE] [--device N] [--vmm-device N] [--ptds] OP...\n"
            "--vmm-device N: vmm allocations, the own pool and graphallocs name device N (default: --device's)\n"
            "MODE: link | dlsym | gpa:VER:FLAGS | gpa1:VER:FLAGS | cudart\n"
            "OPs (SIZE: bytes with optional k/m/g/t binary suffix):\n"
            "  init ctx ctxcreate ctxdestroy\n"
            "  alloc:SIZE alloc_v1:SIZE managed:SIZE async:SIZE poolasync:SIZE vmm:SIZE vmmrel:SIZE\n"
            "  graphalloc:SIZE (vmmrel: cuMemRelease right after cuMemMap) graphallocs:N:SIZE[:upload]\n"
            "  pitch:W:H:ELEM array:W:H array3d:W:H:D mipmap:W:H:LEVELS\n"
            "  free freeall free_bogus fill:KIND:CHUNK[:MAXCOUNT] threads:N:KIND:CHUNK:COUNT\n"
            "  trim sync meminfo totalmem nvml nvml2 nvmlcount nvmlshutdown poolinfo graphmem stack\n"
            "  sleep:MS at:NS hold echo:TEXT exit:CODE kill atexit:SIZE atexit_held:SIZE churn:SIZE:MS kernels:NAME:BLOCKS:COUNT:SYNC[:API]\n"
            "  waitvalue:NAME:BLOCKS:COUNT\n"
            "  othersync:NAME:COUNT:DEVICE\n"
            "  stream:NAME:LAUNCHES:GAP_US:SYNC_EVERY (a host-bound stream: each launch of NAME, then GAP_US us of\n"
            "    host work, a sync every SYNC_EVERY; prints launches_per_s and us_per_launch)\n"
            "KIND: alloc alloc_v1 pitch managed async poolasync vmm vmmrel graphalloc\n");
}

static int parse_via(const char *s)
{
    unsigned long long ver = 0, flags = 0;
    opt_via_text = s;
    if (!strcmp(s, "link")) {
        opt_via = VIA_LINK;
        return 0;
    }
    if (!strcmp(s, "dlsym")) {
        opt_via = VIA_DLSYM;
        return 0;
    }
    if (!strcmp(s, "cudart")) {
        opt_via = VIA_CUDART;
        return 0;
    }
    if (!strncmp(s, "gpa:", 4) || !strncmp(s, "gpa1:", 5)) {
        char buf[64];
        char *f[3];
        if (strlen(s) >= sizeof buf)
            return -1;
        strcpy(buf, s);
        if (split(buf, f, 2) != 2 || parse_size(f[0], &ver) || parse_size(f[1], &flags) || ver > 1000000)
            return -1;
        opt_via = buf[3] == '1' ? VIA_GPA1 : VIA_GPA;
        opt_ver = (int)ver;
        opt_flags = flags;
        return 0;
    }
    return -1;
}

int main(int argc, char **argv)
{
    struct op *ops = calloc((size_t)argc + 1, sizeof *ops);
    int nops = 0;
    struct sigaction sa;

    if (!ops)
        return 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--ptds")) {
            opt_ptds = 1;
            continue;
        }
        if (!strcmp(a, "--via") || !strcmp(a, "--device") || !strcmp(a, "--vmm-device")) {
            if (i + 1 >= argc) {
                usage(stderr);
                return 2;
            }
            val = argv[++i];
        } else if (!strncmp(a, "--via=", 6) || !strncmp(a, "--device=", 9) || !strncmp(a, "--vmm-device=", 13)) {
            val = strchr(a, '=') + 1;
        }
        if (val) {
            if (!strncmp(a, "--via", 5)) {
                if (parse_via(val)) {
                    fprintf(stderr, "probe: bad --via %s\n", val);
                    return 2;
                }
            } else {
                unsigned long long d;
                if (parse_size(val, &d) || d > 4096) {
                    fprintf(stderr, "probe: bad %s %s\n", a, val);
                    return 2;
                }
                if (!strncmp(a, "--vmm-device", 12))
                    opt_vmm_device = (int)d;
                else
                    opt_device = (int)d;
            }
            continue;
        }
        if (parse_op(a, &ops[nops])) {
            fprintf(stderr, "probe: bad op '%s'\n", a);
            usage(stderr);
            return 2;
        }
        nops++;
    }

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: a read() in hold returns EINTR */
    sigaction(SIGTERM, &sa, NULL);

    resolve_all();
    for (int i = 0; i < nops; i++)
        run_op(&ops[i]);
    free(ops);
    return 0;
}
