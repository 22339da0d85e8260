#!/usr/bin/env bash
# The compute limit under Triton, torch.compile(mode="reduce-overhead") (Triton kernels in CUDA
# graphs), JAX and CuPy, on a real GPU: share = mean units per 1 s window (windows 1..) under the limit /
# the same of the unlimited run, in one session.
#
#   OUT=/path/to/results bash tests/gpu/compute/run-frameworks.sh
#
# VGPU_FRAMEWORKS picks the workloads (default "triton compiled jax cupy").
# Writes $OUT/frameworks.txt (the table, and each run's output).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../../.." || exit 1
ROOT=$PWD
: "${OUT:=$ROOT/out/frameworks}"
mkdir -p "$OUT"
LIB=${VGPU_LIB:-$ROOT/target/release/libvgpu.so}
S=${VGPU_FRAMEWORKS_SECONDS:-4}
W=$(mktemp -d /tmp/vgpu-frameworks.XXXXXX)
unset LD_PRELOAD CUDA_DEVICE_MEMORY_SHARED_CACHE CUDA_DISABLE_CONTROL VGPU_NODE_DIR
for v in $(env | sed -n 's/^\(CUDA_DEVICE_\(MEMORY\|SM\)_LIMIT[^=]*\)=.*/\1/p'); do unset "$v"; done
export PYTHONUNBUFFERED=1
exec > >(tee "$OUT/frameworks.txt") 2>&1
echo "== $(date -u +%FT%TZ) run-frameworks.sh, $S windows a run; $(ls -la "$LIB" 2>&1)"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' 2>&1
python3 -c 'import jax, cupy; print("jax", jax.__version__, "cupy", cupy.__version__)' 2>&1
PY=(python3 tests/gpu/compute/triton_bench.py)

# run NAME [VAR=VALUE...] -- ARGS...
run() {
    local name=$1 envs=()
    shift
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    mkdir -p "$W/node/$name"
    if [ "${#envs[@]}" -gt 0 ]; then
        envs+=(LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_SHARED_CACHE="$W/$name.cache" VGPU_NODE_DIR="$W/node/$name")
    fi
    timeout -k 5 240 env "${envs[@]}" "${PY[@]}" "$@" > "$W/$name.out" 2> "$W/$name.err"
    echo "$name rc=$?: $(grep '^info' "$W/$name.out") | $(awk '$1 == "window" { printf "%s ", $3 }' "$W/$name.out")"
}
mean() { awk '$1 == "window" && $2 >= 1 { s += $3; n++ } END { if (n) printf "%.3f", s / n }' "$1"; }

read -r -a WHAT <<< "${VGPU_FRAMEWORKS:-triton compiled jax cupy}"
for w in "${WHAT[@]}"; do
    run "$w.plain" -- "$w" "$S"
    ITERS=$(sed -n 's/^info .*iters=\([0-9][0-9]*\).*/\1/p' "$W/$w.plain.out")
    for l in 25 50; do run "$w.sm$l" CUDA_DEVICE_SM_LIMIT=$l -- "$w" "$S" ${ITERS:+"$ITERS"}; done
done

echo "== share per run (mean of windows 1.. against the unlimited run; target the limit)"
for w in "${WHAT[@]}"; do
    base=$(mean "$W/$w.plain.out")
    for l in 25 50; do
        m=$(mean "$W/$w.sm$l.out")
        awk -v b="$base" -v m="$m" -v w="$w" -v l="$l" -v f="$W/$w.sm$l.out" 'BEGIN {
            if (b == "" || m == "" || b == 0) { printf "%-9s %3s%%  no data\n", w, l; exit }
            lo = 1e9; hi = 0
            while ((getline line < f) > 0) { split(line, a, " "); if (a[1] == "window" && a[2] >= 1) {
                v = 100 * a[3] / b; if (v < lo) lo = v; if (v > hi) hi = v } }
            printf "%-9s %3s%%  mean %5.1f%%  windows %5.1f-%5.1f%%\n", w, l, 100 * m / b, lo, hi }'
    done
done
for f in "$W"/*.err; do
    if grep -qiE "error|Traceback" "$f"; then echo "-- $(basename "$f")"; tail -5 "$f"; fi
done
rm -rf "$W"
