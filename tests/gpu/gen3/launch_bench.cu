// Launch-path cost: N empty-kernel launches from one thread, timed on the host.
//   nvcc -O2 -arch=sm_90 -o launch_bench launch_bench.cu
//   launch_bench N        prints: launch ns_per_launch=X
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
    double t0 = mono();
    for (long i = 0; i < n; i++) {
        empty<<<1, 1, 0, s>>>();
        // Keep the queue short, as a real program's is: the launch cost, not the queue's.
        if ((i & 1023) == 1023) cudaStreamSynchronize(s);
    }
    double t1 = mono();
    cudaStreamSynchronize(s);
    if (cudaGetLastError() != cudaSuccess) return 4;
    printf("launch ns_per_launch=%.1f\n", (t1 - t0) * 1e9 / n);
    return 0;
}
