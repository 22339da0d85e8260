// bench_ops.cu - host-side cost of a few CUDA operations, to compare runs with and without
// libvgpu.so preloaded (see ../run-bench.sh, which runs both alternately).
//
//   nvcc -O2 -arch=sm_90 -std=c++17 -o bench_ops bench_ops.cu
//   bench_ops MODE[:N] ...
//
// MODE      what one op is                                          default N
// launch    enqueue of an empty kernel <<<1,1>>> on one stream       60000
//           (host time of the launch loops only; the stream is synchronized every 256
//           launches, outside the timed part, so that the launch queue never fills)
// launch4   the same from 4 std::threads, each on its own stream;   40000 per thread
//           wall time of the whole / (4 N), the per-256 syncs included
// malloc    cudaMalloc + cudaFree of 1 MiB                           4000
// meminfo   cudaMemGetInfo                                           60000
// launchmed each empty-kernel launch timed on its own; prints the median  60000
//           ("launchmed") and the mean of the launches under 50 us ("launchtrim"):
//           under a compute limit the few launches that wait for a window are the
//           throttling itself, not overhead, and land above that cut
//
// Every mode is warmed up first.  Output, one line each: "info total_mib=T free_mib=F" once,
// then "MODE ns_per_op" per mode.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

__global__ void empty_kernel() {}

using clk = std::chrono::steady_clock;
static double secs(clk::time_point a, clk::time_point b) { return std::chrono::duration<double>(b - a).count(); }

static const long BATCH = 256;

// Launches n empty kernels on s in batches; returns the host seconds spent in the launch loops.
static double launch_batches(cudaStream_t s, long n) {
    double t = 0;
    for (long done = 0; done < n;) {
        long b = std::min(BATCH, n - done);
        auto t0 = clk::now();
        for (long i = 0; i < b; i++) empty_kernel<<<1, 1, 0, s>>>();
        auto t1 = clk::now();
        t += secs(t0, t1);
        CK(cudaStreamSynchronize(s));
        done += b;
    }
    CK(cudaGetLastError());
    return t;
}

static double bench_launch(long n) {
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    launch_batches(s, 5000);
    double t = launch_batches(s, n);
    CK(cudaStreamDestroy(s));
    return t / n * 1e9;
}

static double bench_launch4(long n) {
    const int T = 4;
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> th;
    for (int i = 0; i < T; i++) {
        th.emplace_back([&] {
            CK(cudaSetDevice(0));
            cudaStream_t s;
            CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
            launch_batches(s, 2000);  // warm-up
            ready++;
            while (!go.load()) std::this_thread::yield();
            for (long done = 0; done < n;) {
                long b = std::min(BATCH, n - done);
                for (long k = 0; k < b; k++) empty_kernel<<<1, 1, 0, s>>>();
                CK(cudaStreamSynchronize(s));
                done += b;
            }
            CK(cudaStreamDestroy(s));
        });
    }
    while (ready.load() < T) std::this_thread::yield();
    auto t0 = clk::now();
    go = true;
    for (auto &t : th) t.join();
    auto t1 = clk::now();
    CK(cudaGetLastError());
    return secs(t0, t1) / (double(n) * T) * 1e9;
}

static double bench_malloc(long n) {
    void *p = nullptr;
    for (int i = 0; i < 200; i++) {
        CK(cudaMalloc(&p, 1 << 20));
        CK(cudaFree(p));
    }
    auto t0 = clk::now();
    for (long i = 0; i < n; i++) {
        CK(cudaMalloc(&p, 1 << 20));
        CK(cudaFree(p));
    }
    auto t1 = clk::now();
    return secs(t0, t1) / n * 1e9;
}

static double bench_meminfo(long n) {
    size_t f, t;
    for (int i = 0; i < 1000; i++) CK(cudaMemGetInfo(&f, &t));
    auto t0 = clk::now();
    for (long i = 0; i < n; i++) CK(cudaMemGetInfo(&f, &t));
    auto t1 = clk::now();
    return secs(t0, t1) / n * 1e9;
}

// Per-launch host times (ns) of n empty kernels, synchronising every BATCH outside the timing.
static void bench_launch_each(long n, double *median, double *trimmed) {
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    launch_batches(s, 5000);
    std::vector<double> t;
    t.reserve(n);
    for (long done = 0; done < n;) {
        long b = std::min(BATCH, n - done);
        for (long i = 0; i < b; i++) {
            auto t0 = clk::now();
            empty_kernel<<<1, 1, 0, s>>>();
            auto t1 = clk::now();
            t.push_back(secs(t0, t1) * 1e9);
        }
        CK(cudaStreamSynchronize(s));
        done += b;
    }
    CK(cudaGetLastError());
    CK(cudaStreamDestroy(s));
    double sum = 0;
    long k = 0;
    for (double x : t)
        if (x < 50000.0) {
            sum += x;
            k++;
        }
    *trimmed = k ? sum / k : 0;
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    *median = t[t.size() / 2];
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_ops launch|launch4|malloc|meminfo[:N] ...\n");
        return 2;
    }
    CK(cudaSetDevice(0));
    CK(cudaFree(nullptr));  // create the context outside any timing
    size_t fr = 0, tot = 0;
    CK(cudaMemGetInfo(&fr, &tot));
    printf("info total_mib=%zu free_mib=%zu\n", tot >> 20, fr >> 20);
    fflush(stdout);
    for (int i = 1; i < argc; i++) {
        std::string arg = argv[i], mode = arg;
        long n = 0;
        size_t colon = arg.find(':');
        if (colon != std::string::npos) {
            mode = arg.substr(0, colon);
            n = atol(arg.c_str() + colon + 1);
        }
        double ns;
        if (mode == "launch") ns = bench_launch(n > 0 ? n : 60000);
        else if (mode == "launch4") ns = bench_launch4(n > 0 ? n : 40000);
        else if (mode == "malloc") ns = bench_malloc(n > 0 ? n : 4000);
        else if (mode == "meminfo") ns = bench_meminfo(n > 0 ? n : 60000);
        else if (mode == "launchmed") {
            double med = 0, trim = 0;
            bench_launch_each(n > 0 ? n : 60000, &med, &trim);
            printf("launchtrim %.1f\n", trim);
            ns = med;
        }
        else {
            fprintf(stderr, "unknown mode %s\n", mode.c_str());
            return 2;
        }
        printf("%s %.1f\n", mode.c_str(), ns);
        fflush(stdout);
    }
    return 0;
}
