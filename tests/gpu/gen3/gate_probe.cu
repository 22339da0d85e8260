// What a pair of timing events around one kernel measures, three ways, against the kernel's
// time among its neighbours (N launches back to back, the total over N):
//   idle   — the stream idle: event, launch, event (the launch call's host time taken off);
//   busy   — the same behind a 300 us kernel (the stream busy);
//   gated  — the stream held on a host word (cuStreamWaitValue32), then event, launch, event,
//            then the word written: the three start back to back, as on a busy stream.
// and what the host waits for one launch (its round trip): from the launch call (idle), or
// from the word's write (gated: written at once; late: 200 us after, the GPU waiting on it)
// to the synchronisation's return: whether a held stream resumes late once its word is written.
// Build: nvcc -O2 -o /tmp/gate_probe gate_probe.cu -lcuda
#include <cuda.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

__global__ void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

static double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main() {
  cudaFree(0);
  CUdevice dev;
  cuCtxGetDevice(&dev);
  int wait_ok = 0, nor = 0, clock_khz = 0;
  cuDeviceGetAttribute(&wait_ok, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, dev);
  cuDeviceGetAttribute(&nor, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1, dev);
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  printf("stream mem ops v1 %d, wait nor %d, clock %d kHz\n", wait_ok, nor, clock_khz);
  void *host = nullptr;
  cudaHostAlloc(&host, 64, cudaHostAllocMapped);
  volatile unsigned *flag = static_cast<volatile unsigned *>(host);
  void *dev_ptr = nullptr;
  cudaHostGetDevicePointer(&dev_ptr, host, 0);
  CUdeviceptr dflag = reinterpret_cast<CUdeviceptr>(dev_ptr);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  unsigned seq = 0;
  *flag = 0;
  // Warm up.
  for (int i = 0; i < 100; i++) spin<<<1, 32, 0, s>>>(1000);
  cudaStreamSynchronize(s);
  const long long lens_ns[] = {0, 2000, 5000, 20000, 100000};
  for (long long ns : lens_ns) {
    long long cycles = ns * (long long)clock_khz / 1000000;
    // Among its neighbours.
    const int N = 2000;
    cudaEventRecord(a, s);
    for (int i = 0; i < N; i++) spin<<<1, 32, 0, s>>>(cycles);
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    double among = ms * 1000.0 / N;
    std::vector<double> idle, busy, gated, idle_rt, gated_rt, late_rt;
    for (int i = 0; i < 300; i++) {
      cudaStreamSynchronize(s);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      cudaEventRecord(a, s);
      double t0 = now_us();
      spin<<<1, 32, 0, s>>>(cycles);
      double call = now_us() - t0;
      cudaEventRecord(b, s);
      cudaEventSynchronize(b);
      idle_rt.push_back(now_us() - t0);
      cudaEventElapsedTime(&ms, a, b);
      idle.push_back(ms * 1000.0 - call);
      // busy
      spin<<<1, 32, 0, s>>>(300LL * clock_khz / 1000);
      cudaEventRecord(a, s);
      spin<<<1, 32, 0, s>>>(cycles);
      cudaEventRecord(b, s);
      cudaEventSynchronize(b);
      cudaEventElapsedTime(&ms, a, b);
      busy.push_back(ms * 1000.0);
      // gated
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      seq++;
      CUresult r = cuStreamWaitValue32((CUstream)s, dflag, seq, CU_STREAM_WAIT_VALUE_GEQ);
      if (r != CUDA_SUCCESS) {
        printf("cuStreamWaitValue32: %d\n", (int)r);
        return 1;
      }
      cudaEventRecord(a, s);
      spin<<<1, 32, 0, s>>>(cycles);
      cudaEventRecord(b, s);
      __sync_synchronize();
      double tw = now_us();
      *flag = seq;
      __sync_synchronize();
      cudaEventSynchronize(b);
      gated_rt.push_back(now_us() - tw);
      cudaEventElapsedTime(&ms, a, b);
      gated.push_back(ms * 1000.0);
      // late: the GPU reaches the wait long before the word is written
      seq++;
      cuStreamWaitValue32((CUstream)s, dflag, seq, CU_STREAM_WAIT_VALUE_GEQ);
      spin<<<1, 32, 0, s>>>(cycles);
      cudaEventRecord(b, s);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      __sync_synchronize();
      tw = now_us();
      *flag = seq;
      __sync_synchronize();
      cudaEventSynchronize(b);
      late_rt.push_back(now_us() - tw);
    }
    printf("kernel %6lld ns: among %.2f us, idle %.2f, busy %.2f, gated %.2f (medians of 300); "
           "round trip idle %.2f, gated %.2f, late %.2f (max %.1f)\n",
           ns, among, median(idle), median(busy), median(gated), median(idle_rt),
           median(gated_rt), median(late_rt), *std::max_element(late_rt.begin(), late_rt.end()));
  }
  return 0;
}
