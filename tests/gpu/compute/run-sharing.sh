#!/usr/bin/env bash
# Two compute-limit behaviours that the main suite does not measure, on a real GPU:
#   1. one container, two processes: both `large` at once in ONE region under CUDA_DEVICE_SM_LIMIT=50
#      must share 50 % between them (the share is the container's, not each process's);
#   2. the opt-in work-conserving mode: container A (30 %, VGPU_SM_WORK_CONSERVING=true) alone
#      runs past its share; once container B (70 %, not work-conserving) runs beside it, A is
#      back near 30 % and B gets about 70 %.
#
#   OUT=/path/to/results bash tests/gpu/compute/run-sharing.sh
#
# Shares are work per 1 s window / mean work per window of an unlimited `large` run in the same
# session, over windows 1.. (window 0 is left out, as in run-compute.sh). Writes $OUT/sharing.txt.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../../.." || exit 1
ROOT=$PWD
: "${OUT:=$ROOT/out/sharing}"
mkdir -p "$OUT"
LIB=${VGPU_LIB:-$ROOT/target/release/libvgpu.so}
S=${VGPU_SHARING_SECONDS:-6}
W=$(mktemp -d /tmp/vgpu-sharing.XXXXXX)
unset LD_PRELOAD CUDA_DEVICE_MEMORY_SHARED_CACHE CUDA_DISABLE_CONTROL VGPU_NODE_DIR VGPU_SM_WORK_CONSERVING
for v in $(env | sed -n 's/^\(CUDA_DEVICE_\(MEMORY\|SM\)_LIMIT[^=]*\)=.*/\1/p'); do unset "$v"; done
exec > >(tee "$OUT/sharing.txt") 2>&1
echo "== $(date -u +%FT%TZ) run-sharing.sh, $S windows a run; $(ls -la "$LIB" 2>&1)"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
timeout 180 "$NVCC" -O2 -arch=sm_90 -o "$W/sm_bench" tests/gpu/compute/sm_bench.cu -lpthread || {
    echo "sm_bench did not build"; exit 1; }
B=$W/sm_bench

# windows FILE: the units of windows 1.. of a run, space-separated
windows() { awk '$1 == "window" && $2 >= 1 { printf "%s ", $3 }' "$1"; }
# share FILE BASE: mean and min/max of windows 1.. as % of BASE units per second
share() {
    awk -v base="$2" '$1 == "window" && $2 >= 1 { v = 100 * $3 / base; s += v; n++;
        if (n == 1 || v < lo) lo = v; if (n == 1 || v > hi) hi = v }
        END { if (n) printf "mean %5.1f%%  min %5.1f%%  max %5.1f%%", s / n, lo, hi; else printf "no data" }' "$1"
}

timeout 60 "$B" large "$S" > "$W/plain.out" 2> "$W/plain.err"
ITERS=$(sed -n 's/^info .*iters=\([0-9][0-9]*\) .*/\1/p' "$W/plain.out" | head -1)
BASE=$(awk '$1 == "window" && $2 >= 1 { s += $3; n++ } END { if (n) printf "%.2f", s / n }' "$W/plain.out")
echo "-- unlimited large: $BASE kernels/s (windows: $(windows "$W/plain.out")), iters=$ITERS"
[ -n "$BASE" ] && [ -n "$ITERS" ] || { echo "no baseline"; cat "$W/plain.err"; exit 1; }

echo "== 1. two processes of one container (one region) at CUDA_DEVICE_SM_LIMIT=50"
mkdir -p "$W/node1"
ONE=(LD_PRELOAD="$LIB" CUDA_DEVICE_SM_LIMIT=50 CUDA_DEVICE_MEMORY_SHARED_CACHE="$W/one.cache" VGPU_NODE_DIR="$W/node1")
env "${ONE[@]}" timeout 60 "$B" large "$S" "$ITERS" > "$W/one.a.out" 2> "$W/one.a.err" &
PA=$!
env "${ONE[@]}" timeout 60 "$B" large "$S" "$ITERS" > "$W/one.b.out" 2> "$W/one.b.err" &
PB=$!
wait $PA $PB
paste -d' ' <(awk '$1 == "window" && $2 >= 1 { print $3 }' "$W/one.a.out") \
    <(awk '$1 == "window" && $2 >= 1 { print $3 }' "$W/one.b.out") > "$W/one.sum"
echo "process a: $(share "$W/one.a.out" "$BASE")   windows: $(windows "$W/one.a.out")"
echo "process b: $(share "$W/one.b.out" "$BASE")   windows: $(windows "$W/one.b.out")"
awk -v base="$BASE" '{ v = 100 * ($1 + $2) / base; s += v; n++; if (n == 1 || v < lo) lo = v; if (n == 1 || v > hi) hi = v }
    END { if (n) printf "together: mean %5.1f%%  min %5.1f%%  max %5.1f%%  (target 50)\n", s / n, lo, hi }' "$W/one.sum"

echo "== 2. work-conserving: A (30 %, VGPU_SM_WORK_CONSERVING=true) alone, then B (70 %) beside it"
mkdir -p "$W/node2"
A=(LD_PRELOAD="$LIB" CUDA_DEVICE_SM_LIMIT=30 VGPU_SM_WORK_CONSERVING=true CUDA_DEVICE_MEMORY_SHARED_CACHE="$W/a.cache" VGPU_NODE_DIR="$W/node2")
BB=(LD_PRELOAD="$LIB" CUDA_DEVICE_SM_LIMIT=70 CUDA_DEVICE_MEMORY_SHARED_CACHE="$W/b.cache" VGPU_NODE_DIR="$W/node2")
env "${A[@]}" timeout 60 "$B" large "$S" "$ITERS" > "$W/wc.alone.out" 2> "$W/wc.alone.err"
echo "A alone:      $(share "$W/wc.alone.out" "$BASE")   windows: $(windows "$W/wc.alone.out")"
env "${A[@]}" timeout 60 "$B" large "$S" "$ITERS" > "$W/wc.a.out" 2> "$W/wc.a.err" &
PA=$!
env "${BB[@]}" timeout 60 "$B" large "$S" "$ITERS" > "$W/wc.b.out" 2> "$W/wc.b.err" &
PB=$!
wait $PA $PB
echo "A beside B:   $(share "$W/wc.a.out" "$BASE")   windows: $(windows "$W/wc.a.out")"
echo "B beside A:   $(share "$W/wc.b.out" "$BASE")   windows: $(windows "$W/wc.b.out")"
for f in "$W"/*.err; do [ -s "$f" ] && { echo "-- $(basename "$f")"; tail -3 "$f"; }; done
rm -rf "$W"
