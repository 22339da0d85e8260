// Does a context whose stream waits on a host word (cuStreamWaitValue32, how vgpu holds a heavy
// process's queue on the GPU) take time-slices from a neighbour the way a busy context does?
// A decode-like token loop (KERNELS tiny kernels, each after ~30 us of host work, then a stream
// synchronisation) is timed alone, beside a process whose stream is blocked on such a wait, and
// beside a process running back-to-back ~1 ms kernels.
//   holdwait token TOKENS KERNELS   prints "token n=... p50_us=... p90_us=... mean_us=...
//                                   calls_p50_us=... sync_p50_us=..." (a token's launch calls
//                                   alone, without the host work, and its synchronisation)
//   holdwait blocked SECONDS        a stream waiting on a pinned word (kernels queued behind it)
//   holdwait busy SECONDS           ~1 ms kernels back to back
// Used by run.sh.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#include <cuda.h>
#include <cuda_runtime.h>

__global__ void tiny(int *out) {
    if (threadIdx.x == 0 && blockIdx.x == 0) *out += 1;
}

__global__ void spin(unsigned long long cycles) {
    unsigned long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

static double now_us() {
    using namespace std::chrono;
    return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

static void host_work(double us) {
    double end = now_us() + us;
    while (now_us() < end) {
    }
}

static int check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        printf("error %s: %s\n", what, cudaGetErrorString(e));
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: holdwait token TOKENS KERNELS | blocked SECONDS | busy SECONDS\n");
        return 2;
    }
    const char *mode = argv[1];
    int *d = nullptr;
    if (check(cudaMalloc(&d, sizeof(int)), "cudaMalloc")) return 1;
    cudaStream_t s;
    if (check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream")) return 1;
    if (!strcmp(mode, "token")) {
        int tokens = atoi(argv[2]), kernels = argc > 3 ? atoi(argv[3]) : 165;
        if (tokens < 1 || kernels < 1) {
            fprintf(stderr, "holdwait: TOKENS and KERNELS must be positive\n");
            return 2;
        }
        // Each token's time, and of it the launches' own time (the calls, not the host work
        // between them) and the synchronisation's: whether a busy neighbour slows the launch
        // path or only the wait for the GPU.
        std::vector<double> t, calls, waits;
        for (int i = 0; i < tokens + 20; i++) {
            double t0 = now_us(), in_calls = 0;
            for (int k = 0; k < kernels; k++) {
                host_work(30);
                double c0 = now_us();
                tiny<<<1, 32, 0, s>>>(d);
                in_calls += now_us() - c0;
            }
            double w0 = now_us();
            if (check(cudaStreamSynchronize(s), "sync")) return 1;
            if (i >= 20) {  // the first 20 warm up
                t.push_back(now_us() - t0);
                calls.push_back(in_calls);
                waits.push_back(now_us() - w0);
            }
        }
        auto p50 = [](std::vector<double> v) {
            std::sort(v.begin(), v.end());
            return v[v.size() / 2];
        };
        double sum = 0;
        for (double x : t) sum += x;
        std::vector<double> sorted = t;
        std::sort(sorted.begin(), sorted.end());
        printf("token n=%zu p50_us=%.0f p90_us=%.0f mean_us=%.0f calls_p50_us=%.0f "
               "sync_p50_us=%.0f\n",
               t.size(), sorted[t.size() / 2], sorted[t.size() * 9 / 10], sum / t.size(),
               p50(calls), p50(waits));
        return 0;
    }
    double seconds = atof(argv[2]);
    if (!strcmp(mode, "busy")) {
        double end = now_us() + seconds * 1e6;
        while (now_us() < end) {
            for (int k = 0; k < 4; k++) spin<<<132, 128, 0, s>>>(1800000ULL);  // ~1 ms each
            if (check(cudaStreamSynchronize(s), "sync")) return 1;
        }
        printf("busy done\n");
        return 0;
    }
    if (!strcmp(mode, "blocked")) {
        unsigned int *word = nullptr;
        if (check(cudaHostAlloc(&word, sizeof *word, cudaHostAllocMapped), "cudaHostAlloc"))
            return 1;
        *word = 0;
        // Load spin's module before the stream waits: a first launch may load it, and loading
        // synchronises the context, which would wait for the word behind the wait (a hang).
        spin<<<1, 1, 0, s>>>(0);
        if (check(cudaStreamSynchronize(s), "warm-up")) return 1;
        CUdeviceptr dw = 0;
        if (cuMemHostGetDevicePointer(&dw, word, 0) != CUDA_SUCCESS) {
            printf("error cuMemHostGetDevicePointer\n");
            return 1;
        }
        CUresult r = cuStreamWaitValue32(s, dw, 1, CU_STREAM_WAIT_VALUE_GEQ);
        if (r != CUDA_SUCCESS) {
            printf("error cuStreamWaitValue32 %d\n", (int)r);
            return 1;
        }
        for (int k = 0; k < 8; k++) spin<<<132, 128, 0, s>>>(1800000ULL);  // queued behind it
        std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
        __atomic_store_n(word, 1u, __ATOMIC_SEQ_CST);
        if (check(cudaStreamSynchronize(s), "sync")) return 1;
        printf("blocked done\n");
        return 0;
    }
    fprintf(stderr, "holdwait: unknown mode %s\n", mode);
    return 2;
}
