// Open-loop request latency, as a light inference service sees it (issue 11's target 1 and 2).
//
//   nvcc -O2 -arch=sm_90 -o infer_bench infer_bench.cu
//   infer_bench PERIOD_MS SECONDS [KERNELS [KERNEL_MS [ITERS]]]
//
// A request is KERNELS (default 8) work-bound kernels of KERNEL_MS (default 0.2) each, 528 blocks
// x 256 threads, followed by cudaStreamSynchronize: ~1.6 ms of GPU work. Requests fall due every
// PERIOD_MS (default 20: the service needs ~8 % of the GPU), open loop: request i is due at
// t0 + i * PERIOD whatever happened before, and a request that is due while the previous one is
// still running starts when that one ends. Latency = completion time - due time (so queueing
// behind a slow request counts, as a client would see it). The first 1 s is warm-up.
//
// Without ITERS the iteration count is calibrated so that one kernel alone takes KERNEL_MS; pass
// the count printed by a plain run to later runs, so every run does the same work.
//
// Output:
//   info period_ms=... kernels=... kernel_ms=... iters=N request_ms=... seconds=S
//   lat n=<requests> p50=<ms> p90=<ms> p99=<ms> max=<ms> mean=<ms> late=<requests started late>
#include <cuda_runtime.h>

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(call)                                                                                  \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            fflush(stdout);                                                                       \
            fprintf(stderr, "infer_bench: CUDA error at %s:%d: %s: %s (%d)\n", __FILE__, __LINE__, \
                    #call, cudaGetErrorString(e_), (int)e_);                                      \
            _exit(3);                                                                             \
        }                                                                                         \
    } while (0)

static const int kBlocks = 528, kThreads = 256;
static const double kWarmup = 1.0;

static double now_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_until(double t) {
    for (;;) {
        double d = t - now_s();
        if (d <= 0) return;
        struct timespec ts;
        ts.tv_sec = (time_t)d;
        ts.tv_nsec = (long)((d - (double)ts.tv_sec) * 1e9);
        nanosleep(&ts, nullptr);
    }
}

__global__ void fma_chain(float* sink, int iters) {
    float a = 1.0f + (float)threadIdx.x * 1e-6f;
    const float b = 0.999999f;
    const float c = 1e-7f;
    for (int i = 0; i < iters; ++i) a = fmaf(a, b, c);
    if (a == -1.0f) sink[blockIdx.x * blockDim.x + threadIdx.x] = a;
}

static double time_kernels(cudaStream_t s, float* sink, int iters, int n) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0, s));
    for (int i = 0; i < n; ++i) fma_chain<<<kBlocks, kThreads, 0, s>>>(sink, iters);
    CK(cudaGetLastError());
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return (double)ms / n;
}

static int calibrate(cudaStream_t s, float* sink, double target_ms) {
    double iters = 1000;
    double est = time_kernels(s, sink, (int)iters, 3);
    for (int round = 0; round < 10; ++round) {
        est = time_kernels(s, sink, (int)iters, 50);
        double ratio = target_ms / (est > 1e-4 ? est : 1e-4);
        if (round >= 1 && fabs(ratio - 1.0) < 0.02) break;
        if (ratio > 50) ratio = 50;
        iters = std::max(1.0, std::min(2e9, iters * ratio));
    }
    return (int)iters;
}

static double pct(std::vector<double>& v, double p) {
    if (v.empty()) return 0;
    size_t i = (size_t)std::min((double)(v.size() - 1), std::floor(p * (double)(v.size() - 1) + 0.5));
    return v[i];
}

int main(int argc, char** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s PERIOD_MS SECONDS [KERNELS [KERNEL_MS [ITERS]]]\n", argv[0]);
        return 2;
    }
    double period = atof(argv[1]) / 1000.0;
    int seconds = std::max(1, atoi(argv[2]));
    int kernels = argc > 3 ? std::max(1, atoi(argv[3])) : 8;
    double kernel_ms = argc > 4 ? atof(argv[4]) : 0.2;
    long long given = argc > 5 ? atoll(argv[5]) : 0;

    CK(cudaSetDevice(0));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float* sink = nullptr;
    CK(cudaMalloc(&sink, (size_t)kBlocks * kThreads * sizeof(float)));
    int iters = given > 0 ? (int)given : calibrate(s, sink, kernel_ms);
    double measured = time_kernels(s, sink, iters, kernels);
    printf("info period_ms=%.3f kernels=%d kernel_ms=%.4f iters=%d request_ms=%.3f seconds=%d\n",
           period * 1e3, kernels, measured, iters, measured * kernels, seconds);
    fflush(stdout);

    std::vector<double> lat;
    lat.reserve((size_t)(seconds / period) + 16);
    long long late = 0;
    double t0 = now_s() + 0.05;
    double t_start = t0 + kWarmup, t_end = t_start + seconds;
    for (long long i = 0;; ++i) {
        double due = t0 + (double)i * period;
        if (due >= t_end) break;
        if (now_s() > due + 1e-4) late++;
        sleep_until(due);
        for (int k = 0; k < kernels; ++k) fma_chain<<<kBlocks, kThreads, 0, s>>>(sink, iters);
        CK(cudaGetLastError());
        CK(cudaStreamSynchronize(s));
        double done = now_s();
        if (due >= t_start) lat.push_back((done - due) * 1e3);
    }
    std::vector<double> v = lat;
    std::sort(v.begin(), v.end());
    double sum = 0;
    for (double x : v) sum += x;
    printf("lat n=%zu p50=%.3f p90=%.3f p99=%.3f max=%.3f mean=%.3f late=%lld\n", v.size(), pct(v, 0.5),
           pct(v, 0.9), pct(v, 0.99), v.empty() ? 0.0 : v.back(), v.empty() ? 0.0 : sum / (double)v.size(),
           late);
    fflush(stdout);
    CK(cudaFree(sink));
    CK(cudaStreamDestroy(s));
    return 0;
}
