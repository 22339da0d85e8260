// A request loop that waits for each request the way CUDA C programs do: a kernel, then a
// synchronous cudaMemcpy of its answer to the host (with "copy2d" a cudaMemcpy2D of it as one
// row, with "copy3d" a cudaMemcpy3D of it, with "default" a cudaMemcpy of kind
// cudaMemcpyDefault, with "default2d" a cudaMemcpy2D of that kind, with "stream" a
// cudaStreamSynchronize instead; with "d2d2d" a cudaMemcpy2D of kind cudaMemcpyDefault to another
// device buffer, which does not wait, then a cudaStreamSynchronize: one synchronisation a
// request, two if vgpu counted the copy).
// Used by run.sh to check that vgpu sees these waits as synchronisations.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

__global__ void spin(unsigned long long cycles, int *out) {
    unsigned long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
    if (threadIdx.x == 0 && blockIdx.x == 0) *out += 1;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 200;
    const char *mode = argc > 2 ? argv[2] : "copy";
    bool d2d2d = !strcmp(mode, "d2d2d"), stream = !strcmp(mode, "stream") || d2d2d,
         default2d = !strcmp(mode, "default2d"),
         copy2d = !strcmp(mode, "copy2d") || default2d, copy3d = !strcmp(mode, "copy3d");
    if (!stream && !copy2d && !copy3d && strcmp(mode, "copy") && strcmp(mode, "default")) {
        fprintf(stderr,
                "copysync: unknown mode %s (copy, copy2d, copy3d, default, default2d, d2d2d, "
                "stream)\n",
                mode);
        return 2;
    }
    cudaMemcpyKind kind = !strcmp(mode, "default") || default2d ? cudaMemcpyDefault
                                                                : cudaMemcpyDeviceToHost;
    int *d = nullptr, *d2 = nullptr, h = 0;
    if (cudaMalloc(&d, sizeof h) != cudaSuccess || cudaMalloc(&d2, sizeof h) != cudaSuccess)
        return 2;
    cudaMemcpy3DParms p3 = {};
    p3.srcPtr = make_cudaPitchedPtr(d, sizeof h, sizeof h, 1);
    p3.dstPtr = make_cudaPitchedPtr(&h, sizeof h, sizeof h, 1);
    p3.extent = make_cudaExtent(sizeof h, 1, 1);
    p3.kind = cudaMemcpyDeviceToHost;
    cudaMemset(d, 0, sizeof h);
    for (int i = 0; i < n; i++) {
        spin<<<1, 32>>>(2000000ULL, d);  // about 1 ms
        cudaError_t e = d2d2d ? cudaMemcpy2D(d2, sizeof h, d, sizeof h, sizeof h, 1,
                                             cudaMemcpyDefault)
                        : cudaSuccess;
        if (e == cudaSuccess)
            e = stream   ? cudaStreamSynchronize(0)
                : copy2d ? cudaMemcpy2D(&h, sizeof h, d, sizeof h, sizeof h, 1, kind)
                : copy3d ? cudaMemcpy3D(&p3)
                         : cudaMemcpy(&h, d, sizeof h, kind);
        if (e != cudaSuccess) { printf("error %s\n", cudaGetErrorString(e)); return 1; }
        struct timespec ts = {0, 4000000};  // 4 ms of host work
        nanosleep(&ts, nullptr);
    }
    if (stream) cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost);
    printf("copysync mode=%s requests=%d answer=%d\n", mode, n, h);
    return h == n ? 0 : 1;
}
