// tests/gpu/compute/sm_bench.cu with a device option, for the per-device compute limits of
// run-multi.sh (sm_bench itself always runs on device 0 and is left unchanged):
//
//   nvcc -O2 -arch=sm_90 -o sm_bench_dev sm_bench_dev.cu -lpthread
//   sm_bench_dev [--device N] large|sync|small|short SECONDS [ITERS]
//
// N is the CUDA ordinal as the program sees it (after CUDA_VISIBLE_DEVICES), so that one
// container can run one process per GPU with CUDA_DEVICE_SM_LIMIT_0 and _1 set differently.
// The benchmark's own cudaSetDevice(0) / cudaGetDeviceProperties(&p, 0) are redirected to N;
// everything else (kernels, windows, output) is sm_bench's. Without --device: device 0.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

static int g_multi_device = 0;

// Defined before the redirections below, so these call the runtime's own functions (whatever
// names its header maps them to).
static cudaError_t multi_set_device(int) { return cudaSetDevice(g_multi_device); }
static cudaError_t multi_get_props(cudaDeviceProp* p, int) {
    return cudaGetDeviceProperties(p, g_multi_device);
}
// The watcher thread waits on events; the runtime's current device is per thread, and a thread
// that never chose one would otherwise get device 0's primary context made for it (a context,
// and memory, on the other GPU). Every thread that waits selects N first.
static cudaError_t multi_event_sync(cudaEvent_t e) {
    static thread_local bool selected = false;
    if (!selected) {
        cudaError_t r = cudaSetDevice(g_multi_device);
        if (r != cudaSuccess) return r;
        selected = true;
    }
    return cudaEventSynchronize(e);
}

#undef cudaSetDevice
#undef cudaGetDeviceProperties
#undef cudaEventSynchronize
#define cudaSetDevice(d) multi_set_device(d)
#define cudaGetDeviceProperties(p, d) multi_get_props(p, d)
#define cudaEventSynchronize(e) multi_event_sync(e)
#define main sm_bench_main
#include "../compute/sm_bench.cu"
#undef main

int main(int argc, char** argv) {
    if (argc >= 3 && strcmp(argv[1], "--device") == 0) {
        char* end = nullptr;
        long d = strtol(argv[2], &end, 10);
        if (!end || *end || d < 0 || d > 63) {
            fprintf(stderr, "sm_bench_dev: bad --device %s\n", argv[2]);
            return 2;
        }
        g_multi_device = (int)d;
        argv[2] = argv[0];
        argv += 2;
        argc -= 2;
    }
    printf("info device_index=%d cuda_visible_devices=%s\n", g_multi_device,
           getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "(unset)");
    fflush(stdout);
    return sm_bench_main(argc, argv);
}
