// Work-bound GPU throughput benchmark for the compute limit (CUDA_DEVICE_SM_LIMIT).
//
//   nvcc -O2 -arch=sm_90 -o sm_bench sm_bench.cu -lpthread
//   sm_bench WORKLOAD SECONDS [ITERS]
//
// WORKLOAD is one of
//   large  528 blocks x 256 threads, ~2 ms a kernel, launched back to back, never synchronized
//   sync   528 blocks x 256 threads, ~1 ms a kernel, cudaStreamSynchronize after each
//   small    4 blocks x 256 threads, ~0.5 ms a kernel, async
//   short  132 blocks x 128 threads, ~20 us a kernel, async
//   k:BLOCKS:MS:SYNC  any shape: BLOCKS x 256 threads, MS milliseconds a kernel; SYNC 0 = async,
//          N = cudaStreamSynchronize after every N kernels (1 = after each), e.g. k:8448:11:4
// Every kernel is a chain of dependent FMAs per thread (ITERS of them): its run time is work, not
// a clock, so a kernel that is preempted or slowed takes longer instead of ending on time.
// Without ITERS the iteration count is calibrated at start so that one kernel alone takes the
// target time; pass the count printed by an unlimited run to later runs, so that every run does
// the same work per kernel (a calibration under a limiter would measure the limiter).
//
// Output (stdout):
//   info workload=... blocks=... threads=... iters=N kernel_ms=... mark_every=K seconds=S ...
//   window <i> <kernels completed in [i, i+1) s>     one line per 1 s window, i = 0 .. S-1
//   total <kernels> <S>
//   extra warmup_units=... late_units=... launched=...
//   drain <seconds it took to finish the queued work after the last window>
// Completions are counted by the host time at which they were seen to complete (CLOCK_MONOTONIC),
// not by launch time (sync-every-N shapes: each kernel at its completion on the GPU, from timed
// events against a base event pinned to the host clock); async workloads record an event every K kernels (K so that marks are
// ~2 ms of GPU work apart: a window boundary then splits at most 0.2 % of a second's work) and a
// watcher thread waits for those events in order. The first 0.5 s after the
// first launch is warm-up and not counted.
#include <cuda_runtime.h>

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(call)                                                                              \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            fflush(stdout);                                                                   \
            fprintf(stderr, "sm_bench: CUDA error at %s:%d: %s: %s (%d)\n", __FILE__, __LINE__, \
                    #call, cudaGetErrorString(e_), (int)e_);                                  \
            fflush(stderr);                                                                   \
            _exit(3);                                                                         \
        }                                                                                     \
    } while (0)

static const double kWarmup = 0.5;    // seconds, not counted
static const double kMarkMs = 2.0;    // target spacing of completion marks (GPU time alone)
static const int kRing = 4096;        // events in flight at most
static const double kDrainCap = 12.0; // give up waiting for the queue after this many seconds

static double now_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

__global__ void fma_chain(float* sink, int iters) {
    float a = 1.0f + (float)threadIdx.x * 1e-6f;
    const float b = 0.999999f;
    const float c = 1e-7f;
    for (int i = 0; i < iters; ++i) a = fmaf(a, b, c);  // dependent: each FMA waits for the last
    if (a == -1.0f) sink[blockIdx.x * blockDim.x + threadIdx.x] = a;  // never true; keeps the chain
}

struct Workload {
    const char* name;
    int blocks;
    int threads;
    double target_ms;
    bool sync_each;
    int sync_every;  // >1: cudaStreamSynchronize after every sync_every kernels
};

static const Workload kWorkloads[] = {
    {"large", 528, 256, 2.0, false, 0},
    {"sync", 528, 256, 1.0, true, 0},
    {"small", 4, 256, 0.5, false, 0},
    {"short", 132, 128, 0.02, false, 0},
};

// ---- per-second buckets, printed as soon as each window is complete ---------------------------
struct Windows {
    pthread_mutex_t mu;
    double t_start;  // first counted instant
    int seconds;
    std::vector<long long> units;
    int printed;
    long long warm_units, late_units;

    void init(double start, int s) {
        pthread_mutex_init(&mu, nullptr);
        t_start = start;
        seconds = s;
        units.assign(s, 0);
        printed = 0;
        warm_units = late_units = 0;
    }
    void print_upto_locked(int idx) {  // print windows [printed, idx)
        if (idx > seconds) idx = seconds;
        while (printed < idx) {
            printf("window %d %lld\n", printed, units[printed]);
            ++printed;
        }
        fflush(stdout);
    }
    // units completed, seen at host time t
    void add(double t, long long n) {
        pthread_mutex_lock(&mu);
        double rel = t - t_start;
        if (rel < 0) {
            warm_units += n;
        } else {
            int idx = (int)floor(rel);
            if (idx >= seconds) {
                late_units += n;
            } else {
                units[idx] += n;
            }
            print_upto_locked(idx);  // every window before this one is complete
        }
        pthread_mutex_unlock(&mu);
    }
    void finish() {
        pthread_mutex_lock(&mu);
        print_upto_locked(seconds);
        long long tot = 0;
        for (long long u : units) tot += u;
        printf("total %lld %d\n", tot, seconds);
        printf("extra warmup_units=%lld late_units=%lld\n", warm_units, late_units);
        fflush(stdout);
        pthread_mutex_unlock(&mu);
    }
};

// ---- async: a ring of completion marks and a watcher thread ------------------------------------
struct Ring {
    pthread_mutex_t mu;
    pthread_cond_t cv;  // any change of head, tail, done, passed_end, finished
    cudaEvent_t ev[kRing];
    long long units[kRing];
    long long head = 0, tail = 0;  // head: next to watch; tail: next to record
    bool done = false;             // producer recorded its last mark
    bool passed_end = false;       // watcher saw a completion at or after t_end, or finished
    bool finished = false;         // watcher drained everything
    double t_end = 0;
    Windows* win = nullptr;
};

static void* watcher(void* arg) {
    Ring* r = (Ring*)arg;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        while (r->head == r->tail && !r->done) pthread_cond_wait(&r->cv, &r->mu);
        if (r->head == r->tail && r->done) {
            r->passed_end = true;
            r->finished = true;
            pthread_cond_broadcast(&r->cv);
            pthread_mutex_unlock(&r->mu);
            return nullptr;
        }
        int slot = (int)(r->head % kRing);
        cudaEvent_t ev = r->ev[slot];
        long long n = r->units[slot];
        pthread_mutex_unlock(&r->mu);

        CK(cudaEventSynchronize(ev));
        double t = now_s();
        r->win->add(t, n);

        pthread_mutex_lock(&r->mu);
        r->head++;
        if (t >= r->t_end) r->passed_end = true;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
    }
}

static double time_kernels(cudaStream_t s, float* sink, const Workload& w, int iters, int n) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0, s));
    for (int i = 0; i < n; ++i) fma_chain<<<w.blocks, w.threads, 0, s>>>(sink, iters);
    CK(cudaGetLastError());
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return (double)ms / n;
}

// iteration count for which one kernel alone takes w.target_ms
static int calibrate(cudaStream_t s, float* sink, const Workload& w, double* kernel_ms) {
    double iters = 1000;
    double est = time_kernels(s, sink, w, (int)iters, 3);  // also warms up the module
    for (int round = 0; round < 10; ++round) {
        int n = (int)ceil(30.0 / (est > 0.001 ? est : 0.001));  // ~30 ms of work per measurement
        if (n < 3) n = 3;
        if (n > 3000) n = 3000;
        est = time_kernels(s, sink, w, (int)iters, n);
        double ratio = w.target_ms / (est > 1e-4 ? est : 1e-4);
        if (round >= 1 && fabs(ratio - 1.0) < 0.02) break;
        if (ratio > 50) ratio = 50;
        iters *= ratio;
        if (iters < 1) iters = 1;
        if (iters > 2e9) iters = 2e9;
        est *= ratio;
    }
    *kernel_ms = est;
    return (int)iters;
}

int main(int argc, char** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s large|sync|small|short|k:BLOCKS:MS:SYNC SECONDS [ITERS]\n", argv[0]);
        return 2;
    }
    const Workload* w = nullptr;
    for (const Workload& c : kWorkloads)
        if (strcmp(c.name, argv[1]) == 0) w = &c;
    static Workload custom;
    if (!w && strncmp(argv[1], "k:", 2) == 0) {
        int blocks = 0, sync = 0;
        double ms = 0;
        if (sscanf(argv[1] + 2, "%d:%lf:%d", &blocks, &ms, &sync) == 3 && blocks > 0 && ms > 0 && sync >= 0) {
            custom = {argv[1], blocks, 256, ms, sync == 1, sync > 1 ? sync : 0};
            w = &custom;
        }
    }
    if (!w) {
        fprintf(stderr, "sm_bench: unknown workload %s\n", argv[1]);
        return 2;
    }
    int seconds = atoi(argv[2]);
    if (seconds < 1) seconds = 1;
    long long fixed_iters = argc > 3 ? atoll(argv[3]) : 0;

    double t_proc = now_s();
    CK(cudaSetDevice(0));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float* sink = nullptr;
    CK(cudaMalloc(&sink, (size_t)w->blocks * w->threads * sizeof(float)));
    double t_init = now_s() - t_proc;

    double kernel_ms = 0;
    int iters;
    const char* how;
    if (fixed_iters > 0) {
        iters = (int)fixed_iters;
        kernel_ms = time_kernels(s, sink, *w, iters, 1);  // one kernel: loads the module
        how = "given";
    } else {
        iters = calibrate(s, sink, *w, &kernel_ms);
        how = "calibrated";
    }
    int mark_every = (int)lround(kMarkMs / (w->target_ms > 0 ? w->target_ms : 1));
    if (mark_every < 1) mark_every = 1;
    if (w->sync_each) mark_every = 1;
    if (w->sync_every > 1) mark_every = w->sync_every;

    printf("info workload=%s blocks=%d threads=%d iters=%d iters_from=%s kernel_ms=%.4f "
           "mark_every=%d seconds=%d warmup_s=%.1f init_s=%.3f device=\"%s\" sms=%d\n",
           w->name, w->blocks, w->threads, iters, how, kernel_ms, mark_every, seconds, kWarmup,
           t_init, prop.name, prop.multiProcessorCount);
    fflush(stdout);

    Windows win;
    double t0 = now_s();
    win.init(t0 + kWarmup, seconds);
    double t_end = t0 + kWarmup + seconds;
    long long launched = 0;

    if (w->sync_every > 1) {
        // Each kernel is counted at its own completion time on the GPU, not at the
        // synchronisation after its group: an event after each kernel, timed against a base
        // event whose completion is pinned to the host clock. (Counting a group of 4 x 11 ms
        // kernels at its sync put up to 4 kernels, 4.4 % of a second, in the wrong window.)
        std::vector<cudaEvent_t> done(w->sync_every);
        for (auto& e : done) CK(cudaEventCreate(&e));
        cudaEvent_t base;
        CK(cudaEventCreate(&base));
        CK(cudaEventRecord(base, s));
        CK(cudaEventSynchronize(base));
        double base_host = now_s();
        while (now_s() < t_end) {
            for (int i = 0; i < w->sync_every; ++i) {
                fma_chain<<<w->blocks, w->threads, 0, s>>>(sink, iters);
                CK(cudaEventRecord(done[i], s));
            }
            CK(cudaGetLastError());
            CK(cudaStreamSynchronize(s));
            launched += w->sync_every;
            for (int i = 0; i < w->sync_every; ++i) {
                float ms = 0;
                CK(cudaEventElapsedTime(&ms, base, done[i]));
                win.add(base_host + ms / 1000.0, 1);
            }
        }
        for (auto& e : done) CK(cudaEventDestroy(e));
        CK(cudaEventDestroy(base));
        win.finish();
        printf("launched %lld\n", launched);
        printf("drain 0.000\n");
        fflush(stdout);
    } else if (w->sync_each) {
        while (now_s() < t_end) {
            fma_chain<<<w->blocks, w->threads, 0, s>>>(sink, iters);
            CK(cudaGetLastError());
            CK(cudaStreamSynchronize(s));
            launched++;
            win.add(now_s(), 1);
        }
        win.finish();
        printf("launched %lld\n", launched);
        printf("drain 0.000\n");
        fflush(stdout);
    } else {
        Ring* r = new Ring();
        pthread_mutex_init(&r->mu, nullptr);
        pthread_cond_init(&r->cv, nullptr);
        for (int i = 0; i < kRing; ++i) CK(cudaEventCreateWithFlags(&r->ev[i], cudaEventDisableTiming));
        r->t_end = t_end;
        r->win = &win;
        pthread_t th;
        if (pthread_create(&th, nullptr, watcher, r) != 0) {
            fprintf(stderr, "sm_bench: pthread_create failed\n");
            return 3;
        }
        long long since = 0;
        auto mark = [&](long long n) {
            pthread_mutex_lock(&r->mu);
            while (r->tail - r->head >= kRing) pthread_cond_wait(&r->cv, &r->mu);
            int slot = (int)(r->tail % kRing);
            pthread_mutex_unlock(&r->mu);
            // only this thread records; the watcher does not touch slot until tail moves past it
            CK(cudaEventRecord(r->ev[slot], s));
            pthread_mutex_lock(&r->mu);
            r->units[slot] = n;
            r->tail++;
            pthread_cond_broadcast(&r->cv);
            pthread_mutex_unlock(&r->mu);
        };
        while (now_s() < t_end) {
            fma_chain<<<w->blocks, w->threads, 0, s>>>(sink, iters);
            launched++;
            if (++since >= mark_every) {
                CK(cudaGetLastError());
                mark(since);
                since = 0;
            }
        }
        CK(cudaGetLastError());
        if (since > 0) mark(since);
        double t_stop = now_s();
        pthread_mutex_lock(&r->mu);
        r->done = true;
        pthread_cond_broadcast(&r->cv);
        while (!r->passed_end) pthread_cond_wait(&r->cv, &r->mu);
        pthread_mutex_unlock(&r->mu);
        win.finish();  // every window is complete: later completions land after t_end
        printf("launched %lld\n", launched);
        fflush(stdout);

        // drain the queue (capped), then exit
        bool finished = false;
        for (;;) {
            pthread_mutex_lock(&r->mu);
            finished = r->finished;
            pthread_mutex_unlock(&r->mu);
            if (finished || now_s() - t_stop > kDrainCap) break;
            usleep(2000);
        }
        if (!finished) {
            printf("drain timeout %.3f\n", now_s() - t_stop);
            fflush(stdout);
            _exit(0);
        }
        pthread_join(th, nullptr);
        printf("drain %.3f\n", now_s() - t_stop);
        fflush(stdout);
        for (int i = 0; i < kRing; ++i) cudaEventDestroy(r->ev[i]);
    }
    CK(cudaStreamSynchronize(s));
    CK(cudaFree(sink));
    CK(cudaStreamDestroy(s));
    return 0;
}
