// What handing the GPU from one process to another costs on this machine, and where the time
// goes (issue 23: the hand-overs of the node token; no vgpu involved).
//
// Two players take turns. Each turn, a player launches one kernel that spins for KERNEL_US by the
// GPU's global timer and writes when it started and ended (global timer, ns) into mapped host
// memory, synchronises, then passes the turn and wakes the other. The GPU's gap between one
// player's kernel ending and the other's starting is the hand-over's cost; host clocks split
// it: the synchronisation's return, the wake-up, the launch call, and the rest (launch latency
// and, between processes, the context switch).
//
//   proc-futex     two processes; the waiter sleeps on a futex (as vgpu's waiters do)
//   proc-spin      two processes; the waiter spins on the word (no wake-up)
//   proc-blocking  proc-futex with cudaDeviceScheduleBlockingSync (the synchronisation sleeps)
//   thread-spin    one process, two threads, one stream each (one context: no context switch)
//   thread-futex   one process, two threads sleeping on a futex
//
// nvcc -O2 -o handover_probe handover_probe.cu && ./handover_probe [rounds] [kernel_us]
// Prints one line per mode: medians and 90th percentiles in µs.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>
#include <cuda_runtime.h>

#define CK(x)                                                                          \
    do {                                                                               \
        cudaError_t e_ = (x);                                                          \
        if (e_ != cudaSuccess) {                                                       \
            fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
            _exit(2);                                                                  \
        }                                                                              \
    } while (0)

static __device__ unsigned long long gtimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void spin(unsigned long long ns, volatile unsigned long long *out) {
    unsigned long long s = gtimer();
    while (gtimer() - s < ns) {
    }
    out[0] = s;
    out[1] = gtimer();
}

__global__ void stamp(volatile unsigned long long *out) { out[0] = gtimer(); }

static long long mono() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

const int MAX_ROUNDS = 4000;

struct Round {
    long long k_start, k_end;   // this player's kernel (host clock, through the offset)
    long long synced;           // its synchronisation returned
    long long woke;             // it woke to its turn
    long long launched;         // its launch call returned
    long long passed;           // it passed the turn (just before the wake call)
};

struct Shared {
    int turn;  // futex word: whose turn (0 or 1); -1 to start
    int pad[15];
    Round r[2][MAX_ROUNDS];
};

static void futex_wait(int *w, int v) {
    syscall(SYS_futex, w, FUTEX_WAIT, v, nullptr, nullptr, 0);
}
static void futex_wake(int *w) { syscall(SYS_futex, w, FUTEX_WAKE, 1, nullptr, nullptr, 0); }

struct Args {
    Shared *sh;
    int me, rounds, kernel_us;
    bool spin_wait, own_device_init;
    unsigned flags;
};

// Host clock minus global timer, ns (the midpoint of a stamp kernel's round trip; the least of
// 50 round trips).
static long long offset_ns(cudaStream_t s, unsigned long long *dev, volatile unsigned long long *host) {
    long long best_rt = 1LL << 62, off = 0;
    for (int i = 0; i < 50; i++) {
        long long a = mono();
        stamp<<<1, 1, 0, s>>>(dev);
        CK(cudaStreamSynchronize(s));
        long long b = mono();
        if (b - a < best_rt) {
            best_rt = b - a;
            off = (a + b) / 2 - (long long)host[0];
        }
    }
    return off;
}

static void *player(void *p) {
    Args *a = (Args *)p;
    if (a->own_device_init) {
        if (a->flags) CK(cudaSetDeviceFlags(a->flags));
        CK(cudaSetDevice(0));
    }
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned long long *host, *dev;
    CK(cudaHostAlloc(&host, 64, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer(&dev, host, 0));
    // Warm up: load the module, fault in the context.
    spin<<<1, 1, 0, s>>>(1000, dev);
    CK(cudaStreamSynchronize(s));
    long long off = offset_ns(s, dev, host);
    Shared *sh = a->sh;
    int me = a->me;
    volatile int *turn = &sh->turn;
    for (int i = 0; i < a->rounds; i++) {
        // Wait for my turn.
        while (__atomic_load_n(turn, __ATOMIC_ACQUIRE) != me) {
            if (!a->spin_wait) futex_wait(&sh->turn, 1 - me);
        }
        Round &r = sh->r[me][i];
        r.woke = mono();
        spin<<<1, 1, 0, s>>>((unsigned long long)a->kernel_us * 1000, dev);
        r.launched = mono();
        CK(cudaStreamSynchronize(s));
        r.synced = mono();
        r.k_start = (long long)host[0] + off;
        r.k_end = (long long)host[1] + off;
        r.passed = mono();
        __atomic_store_n(&sh->turn, 1 - me, __ATOMIC_RELEASE);
        if (!a->spin_wait) futex_wake(&sh->turn);
    }
    return nullptr;
}

static double pct(std::vector<double> v, double q) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, (size_t)(q * v.size()))];
}

static void report(const char *mode, Shared *sh, int rounds) {
    // Hand-over i: player 0's round i ends, player 1's round i begins; then player 1's round i
    // ends and player 0's round i+1 begins. Skip the first 10 rounds.
    std::vector<double> gap, sync, wake, call, rest;
    for (int i = 10; i + 1 < rounds; i++) {
        for (int from = 0; from < 2; from++) {
            const Round &x = sh->r[from][i];
            const Round &y = from == 0 ? sh->r[1][i] : sh->r[0][i + 1];
            gap.push_back((y.k_start - x.k_end) / 1e3);
            sync.push_back((x.synced - x.k_end) / 1e3);
            wake.push_back((y.woke - x.passed) / 1e3);
            call.push_back((y.launched - y.woke) / 1e3);
            rest.push_back((y.k_start - y.woke) / 1e3);
        }
    }
    printf("handover mode=%s n=%zu gap_p50=%.1f gap_p90=%.1f sync_p50=%.1f sync_p90=%.1f "
           "wake_p50=%.1f wake_p90=%.1f call_p50=%.1f launch_to_start_p50=%.1f launch_to_start_p90=%.1f\n",
           mode, gap.size(), pct(gap, .5), pct(gap, .9), pct(sync, .5), pct(sync, .9),
           pct(wake, .5), pct(wake, .9), pct(call, .5), pct(rest, .5), pct(rest, .9));
    fflush(stdout);
}

static Shared *new_shared() {
    void *m = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    memset(m, 0, sizeof(Shared));
    ((Shared *)m)->turn = -1;
    return (Shared *)m;
}

static void run_procs(const char *mode, int rounds, int kernel_us, bool spin_wait, unsigned flags) {
    Shared *sh = new_shared();
    pid_t kids[2];
    for (int me = 0; me < 2; me++) {
        kids[me] = fork();
        if (kids[me] == 0) {
            Args a{sh, me, rounds, kernel_us, spin_wait, true, flags};
            // Both initialised before the first turn: player 0 starts once player 1 is ready.
            player(&a);
            _exit(0);
        }
    }
    // Let both initialise (a context takes ~0.3 s), then start.
    usleep(3000000);
    __atomic_store_n(&sh->turn, 0, __ATOMIC_RELEASE);
    syscall(SYS_futex, &sh->turn, FUTEX_WAKE, 2, nullptr, nullptr, 0);
    for (int me = 0; me < 2; me++) waitpid(kids[me], nullptr, 0);
    report(mode, sh, rounds);
    munmap(sh, sizeof(Shared));
}

static void run_threads(const char *mode, int rounds, int kernel_us, bool spin_wait) {
    pid_t kid = fork();
    if (kid == 0) {
        Shared *sh = new_shared();
        CK(cudaSetDevice(0));
        CK(cudaFree(0));
        pthread_t t[2];
        Args a[2] = {{sh, 0, rounds, kernel_us, spin_wait, false, 0},
                     {sh, 1, rounds, kernel_us, spin_wait, false, 0}};
        for (int i = 0; i < 2; i++) pthread_create(&t[i], nullptr, player, &a[i]);
        usleep(1000000);
        __atomic_store_n(&sh->turn, 0, __ATOMIC_RELEASE);
        syscall(SYS_futex, &sh->turn, FUTEX_WAKE, 2, nullptr, nullptr, 0);
        for (int i = 0; i < 2; i++) pthread_join(t[i], nullptr);
        report(mode, sh, rounds);
        _exit(0);
    }
    waitpid(kid, nullptr, 0);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 400;
    int kernel_us = argc > 2 ? atoi(argv[2]) : 1000;
    rounds = std::min(std::max(rounds, 20), MAX_ROUNDS);
    run_procs("proc-futex", rounds, kernel_us, false, 0);
    run_procs("proc-spin", rounds, kernel_us, true, 0);
    run_procs("proc-blocking", rounds, kernel_us, false, cudaDeviceScheduleBlockingSync);
    run_threads("thread-spin", rounds, kernel_us, true);
    run_threads("thread-futex", rounds, kernel_us, false);
    return 0;
}
