// The CUDA program of run-compat.sh's tool cases (compute-sanitizer, ncu, cuda-gdb, the
// per-thread default stream, MPS): a kernel fills and scales a buffer on the default stream,
// the result is copied back and summed. Prints one line:
//   RESULT {"checksum": "<sum>", "total": <cudaMemGetInfo total>}
// and exits 0, or prints the failing call and exits 1.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(call)                                                                   \
    do {                                                                              \
        cudaError_t e_ = (call);                                                      \
        if (e_ != cudaSuccess) {                                                      \
            std::printf("ERROR %s: %s\n", #call, cudaGetErrorString(e_));             \
            return 1;                                                                 \
        }                                                                             \
    } while (0)

__global__ void fill(float *a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        a[i] = (float)(i % 1000) * 0.5f;
}

__global__ void scale(float *a, int n, float k)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        a[i] = a[i] * k + 1.0f;
}

int main()
{
    const int n = 1 << 22;
    float *d = nullptr;
    CHECK(cudaMalloc(&d, n * sizeof(float)));
    fill<<<(n + 255) / 256, 256>>>(d, n);
    for (int r = 0; r < 8; r++)
        scale<<<(n + 255) / 256, 256>>>(d, n, 0.5f);
    CHECK(cudaGetLastError());
    float *h = (float *)std::malloc(n * sizeof(float));
    CHECK(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += h[i];
    size_t free_b = 0, total_b = 0;
    CHECK(cudaMemGetInfo(&free_b, &total_b));
    CHECK(cudaFree(d));
    std::free(h);
    std::printf("RESULT {\"checksum\": \"%.6e\", \"total\": %zu}\n", sum, total_b);
    return 0;
}
