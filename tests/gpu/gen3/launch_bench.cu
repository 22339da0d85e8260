// Launch-path cost: N empty-kernel launches from one thread, timed on the host.
//   nvcc -O2 -arch=sm_90 -o launch_bench launch_bench.cu
//   launch_bench N        prints: launch ns_per_launch=X (the median burst of 256)
#include <cuda_runtime.h>
#include <time.h>
#include <cstdio>
#include <cstdlib>
__global__ void empty() {}
static double mono() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
int main(int argc, char** argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000;
    cudaStream_t s;
    cudaStreamCreate(&s);
    for (int i = 0; i < 2000; i++) empty<<<1, 1, 0, s>>>();
    cudaStreamSynchronize(s);
    // Bursts of 256 launches into an idle stream, each timed on its own, the synchronisation
    // between bursts outside the timing (the launch call's cost, not the GPU's pace); the
    // median burst is reported (a burst a preemption or an interrupt hit does not move it).
    const int burst = 256;
    long bursts = n / burst > 0 ? n / burst : 1;
    double* per = (double*)malloc(sizeof(double) * bursts);
    for (long b = 0; b < bursts; b++) {
        double t0 = mono();
        for (int i = 0; i < burst; i++) empty<<<1, 1, 0, s>>>();
        double t1 = mono();
        per[b] = (t1 - t0) * 1e9 / burst;
        cudaStreamSynchronize(s);
    }
    if (cudaGetLastError() != cudaSuccess) return 4;
    qsort(per, bursts, sizeof(double), [](const void* a, const void* b) {
        double x = *(const double*)a, y = *(const double*)b;
        return x < y ? -1 : x > y ? 1 : 0;
    });
    printf("launch ns_per_launch=%.1f bursts=%ld\n", per[bursts / 2], bursts);
    free(per);
    return 0;
}
