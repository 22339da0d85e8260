// A host-bound launch stream (issue 23): a short kernel, then GAP_US of host work (a busy spin),
// a cudaStreamSynchronize every SYNC launches: the shape of eager PyTorch decode and of a
// training step's many small ops.
//
//   nvcc -O2 -arch=sm_90 -o stream_bench stream_bench.cu
//   stream_bench GAP_US SYNC SECONDS [START_EPOCH]
//
// It warms up (0.5 s), waits until START_EPOCH (CLOCK_REALTIME seconds, so that processes of
// one scenario measure the same window), then runs SECONDS and prints
//   stream gap_us=G launches=N us_per_launch=X
#include <cuda_runtime.h>
#include <time.h>
#include <cstdio>
#include <cstdlib>

__global__ void tiny(float* x) {
    // About 2-3 us on an H200 (one block, a short dependent chain).
    float v = x[threadIdx.x];
    for (int i = 0; i < 200; i++) v = v * 1.0000001f + 1e-7f;
    x[threadIdx.x] = v;
}

static double mono() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
static double real() {
    timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
static void spin(double us) {
    double end = mono() + us * 1e-6;
    while (mono() < end) {
    }
}

int main(int argc, char** argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s GAP_US SYNC SECONDS [START_EPOCH]\n", argv[0]);
        return 2;
    }
    double gap = atof(argv[1]);
    int sync = atoi(argv[2]);
    double secs = atof(argv[3]);
    double start = argc > 4 ? atof(argv[4]) : 0;
    float* x;
    if (cudaMalloc(&x, 128 * sizeof(float)) != cudaSuccess) return 3;
    cudaStream_t s;
    cudaStreamCreate(&s);
    double w = mono() + 0.5;
    long n = 0;
    while (mono() < w) {
        tiny<<<1, 128, 0, s>>>(x);
        spin(gap);
        if (++n % sync == 0) cudaStreamSynchronize(s);
    }
    cudaStreamSynchronize(s);
    while (real() < start) spin(100);
    double t0 = mono();
    double end = t0 + secs;
    n = 0;
    while (mono() < end) {
        tiny<<<1, 128, 0, s>>>(x);
        spin(gap);
        if (++n % sync == 0) cudaStreamSynchronize(s);
    }
    cudaStreamSynchronize(s);
    double t = mono() - t0;
    if (cudaGetLastError() != cudaSuccess) return 4;
    printf("stream gap_us=%g launches=%ld us_per_launch=%.3f\n", gap, n, t * 1e6 / n);
    return 0;
}
