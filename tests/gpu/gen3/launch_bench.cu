// Launch-path cost: N empty-kernel launches from one thread, timed on the host.
//   nvcc -O2 -arch=sm_90 -o launch_bench launch_bench.cu
//   launch_bench N [POOLS]  prints: launch ns_per_launch=X (the median burst of 256)
//                                   sync ns_per_round=Y (the median burst of 64 rounds of
//                                   one launch and a cudaStreamSynchronize)
// With POOLS, that many memory pools of its own each had 1 MiB allocated and freed on the stream
// first (where vgpu, under a memory limit, re-reads the pools a synchronisation may have
// trimmed: the synchronisation's cost with pools in use).
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
    int pools = argc > 2 ? atoi(argv[2]) : 0;
    cudaStream_t s;
    cudaStreamCreate(&s);
    for (int p = 0; p < pools; p++) {
        cudaMemPoolProps props = {};
        props.allocType = cudaMemAllocationTypePinned;
        props.location.type = cudaMemLocationTypeDevice;
        props.location.id = 0;
        cudaMemPool_t pool;
        void* d = nullptr;
        if (cudaMemPoolCreate(&pool, &props) != cudaSuccess ||
            cudaMallocFromPoolAsync(&d, 1 << 20, pool, s) != cudaSuccess || cudaFreeAsync(d, s) != cudaSuccess)
            return 5;
    }
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
    // One launch and a synchronisation, in bursts of 64 rounds: the synchronisation hook's
    // cost (a decode service synchronises every token).
    const int rounds = 64;
    long sb = n / 16 / rounds > 0 ? n / 16 / rounds : 1;
    if (sb > bursts) sb = bursts;
    for (long b = 0; b < sb; b++) {
        double t0 = mono();
        for (int i = 0; i < rounds; i++) {
            empty<<<1, 1, 0, s>>>();
            cudaStreamSynchronize(s);
        }
        per[b] = (mono() - t0) * 1e9 / rounds;
    }
    if (cudaGetLastError() != cudaSuccess) return 4;
    qsort(per, sb, sizeof(double), [](const void* a, const void* b) {
        double x = *(const double*)a, y = *(const double*)b;
        return x < y ? -1 : x > y ? 1 : 0;
    });
    printf("sync ns_per_round=%.1f bursts=%ld pools=%d\n", per[sb / 2], sb, pools);
    free(per);
    return 0;
}
