#!/bin/bash
# The compute limit with its controller starved of CPU, on the GPU: shift_bench.py (tiny ops,
# then 40 new expensive matrix products) alone plain, under CUDA_DEVICE_SM_LIMIT=50, and under
# it beside busy loops on every core (2 per core), with the library under test ($VGPU_LIB) and,
# if given, a baseline ($VGPU_LIB_B), rounds interleaved. Under the limit the second phase's
# wall should be about twice its GPU time (share ≈ 50 %) with or without the busy loops.
# Results under $OUT/starved.txt, one line per run: "<mode> <round> shift wall_ms=... ...".
# Usage (GPU machine, repository root):
#   OUT=... VGPU_LIB=$PWD/.gpu/libvgpu.so [VGPU_LIB_B=...] bash tests/gpu/gen3/starved.sh [rounds]
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
rounds=${1:-4}
hogs=()
stop_hogs() { for p in "${hogs[@]}"; do kill "$p" 2>/dev/null; done; hogs=(); }
trap stop_hogs EXIT
start_hogs() { for _ in $(seq $((2 * $(nproc)))); do (while :; do :; done) & hogs+=($!); done; }
run() { # mode lib hog
  local mode=$1 lib=$2 hog=$3 line
  [ "$hog" = 1 ] && start_hogs
  if [ -n "$lib" ]; then
    line=$(LD_PRELOAD=$lib CUDA_DEVICE_SM_LIMIT=50 VGPU_NODE_DIR=$(mktemp -d) \
      timeout 120 python3 tests/gpu/gen3/shift_bench.py 2>>"$OUT/starved-err.txt")
  else
    line=$(timeout 120 python3 tests/gpu/gen3/shift_bench.py 2>>"$OUT/starved-err.txt")
  fi
  stop_hogs
  echo "$mode $r $line" | tee -a "$OUT/starved.txt"
}
for r in $(seq "$rounds"); do
  run plain "" 0
  run vgpu-50 "$VGPU_LIB" 0
  run vgpu-50-starved "$VGPU_LIB" 1
  if [ -n "${VGPU_LIB_B:-}" ]; then
    run b-50 "$VGPU_LIB_B" 0
    run b-50-starved "$VGPU_LIB_B" 1
  fi
done
