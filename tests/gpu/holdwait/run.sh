#!/usr/bin/env bash
# Does a stream held on the GPU by cuStreamWaitValue32 (vgpu's queue hold) cost a neighbour
# time-slices, as a busy context does? Times a decode-like token loop (holdwait.cu) alone,
# beside a process whose stream waits on a pinned word, and beside one running ~1 ms kernels,
# no vgpu anywhere: if "blocked" is close to "alone", a hold clears the GPU for the service; if
# close to "busy", the held context still takes slices.
#   OUT=/path bash tests/gpu/holdwait/run.sh
set -u
cd "$(dirname "${BASH_SOURCE[0]}")" || exit 1
: "${OUT:=/tmp/holdwait}"
mkdir -p "$OUT"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
# libcuda.so (not only .so.1) for the link: the toolkit's stub where the driver has no dev link.
"$NVCC" -O2 -o "$OUT/holdwait" holdwait.cu -L/usr/local/cuda/lib64/stubs \
    -L/usr/local/cuda/targets/x86_64-linux/lib/stubs -lcuda || exit 1
B=$OUT/holdwait
TOKENS=${HOLDWAIT_TOKENS:-300}
# Modules load at start (a lazy load inside the blocked neighbour would wait for its own word),
# and nothing runs unbounded.
export CUDA_MODULE_LOADING=EAGER
token() { timeout -k 5 60 "$B" token "$TOKENS" 165 || echo "token rc=$?"; }
for round in 1 2; do
    echo "round $round alone:   $(token)"
    for n in blocked busy; do
        timeout -k 5 30 "$B" "$n" 6 > "$OUT/$n.out" 2>&1 &
        pid=$!
        sleep 1
        echo "round $round $n: $(token)"
        wait "$pid"; echo "  neighbour rc=$?: $(cat "$OUT/$n.out")"
    done
done
