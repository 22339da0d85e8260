#!/bin/bash
# The compute limit with its controller starved of CPU, on the GPU, the libraries under test
# ($VGPU_LIB, and if given $VGPU_LIB_B and $VGPU_LIB_C) in interleaved rounds, each with and
# without busy loops on every core (2 per core).
#  shift (default): shift_bench.py (tiny ops, then 1,200 new expensive matrix products) alone,
#    plain and under CUDA_DEVICE_SM_LIMIT=50: the second phase's wall should be about twice its
#    GPU time (share ≈ 50 %) with or without the busy loops.
#  pair: two shift_bench.py processes of 2,000 products in two containers at 50/50 (one node
#    directory), started together, and the same two plain (time-slicing): the GPU kept busy
#    while both ran is the sum of their GPU times over their second phases' union; a turn
#    handed on late leaves the GPU idle (the controllers taking turns).
# Results under $OUT/starved.txt, one line per run: "<mode> <round> shift wall_ms=... ..." (pair:
# one line per process, then "<mode> <round> pair busy=<percent>").
# Usage (GPU machine, repository root):
#   OUT=... VGPU_LIB=$PWD/.gpu/libvgpu.so [VGPU_LIB_B=...] [VGPU_LIB_C=...] \
#     bash tests/gpu/gen3/starved.sh [rounds] [shift|pair]
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
rounds=${1:-4}
what=${2:-shift}
hogs=()
stop_hogs() { for p in "${hogs[@]}"; do kill "$p" 2>/dev/null; done; hogs=(); }
trap stop_hogs EXIT
start_hogs() { for _ in $(seq $((2 * $(nproc)))); do (while :; do :; done) & hogs+=($!); done; }
bench() { # lib node-dir [launches]
  if [ -n "$1" ]; then
    LD_PRELOAD=$1 CUDA_DEVICE_SM_LIMIT=50 VGPU_NODE_DIR=$2 CUDA_DEVICE_MEMORY_SHARED_CACHE=$(mktemp -u).cache \
      timeout 120 python3 tests/gpu/gen3/shift_bench.py ${3:-} 2>>"$OUT/starved-err.txt"
  else
    timeout 120 python3 tests/gpu/gen3/shift_bench.py ${3:-} 2>>"$OUT/starved-err.txt"
  fi
}
run() { # mode lib hog
  local mode=$1 lib=$2 hog=$3 line
  [ "$hog" = 1 ] && start_hogs
  line=$(bench "$lib" "$(mktemp -d)")
  stop_hogs
  echo "$mode $r $line" | tee -a "$OUT/starved.txt"
}
pair() { # mode lib hog
  local mode=$1 lib=$2 hog=$3 dir a b
  dir=$(mktemp -d)
  [ "$hog" = 1 ] && start_hogs
  bench "$lib" "$dir" 2000 > "$dir/a" &
  bench "$lib" "$dir" 2000 > "$dir/b" &
  wait %1 %2 2>/dev/null; wait
  stop_hogs
  for m in a b; do echo "$mode $r $(cat "$dir/$m")" | tee -a "$OUT/starved.txt"; done
  python3 - "$dir/a" "$dir/b" <<'PY' | sed "s/^/$mode $r /" | tee -a "$OUT/starved.txt"
import re, sys
v = [dict(re.findall(r"(\w+)=([\d.]+)", open(f).read())) for f in sys.argv[1:]]
if all("t0" in x for x in v):
    span = max(float(x["t1"]) for x in v) - min(float(x["t0"]) for x in v)
    gpu = sum(float(x["gpu_ms"]) for x in v) / 1e3
    print(f"pair busy={100 * gpu / span:.1f} span_s={span:.2f}")
else:
    print("pair busy=? (a run failed)")
PY
}
step=run
[ "$what" = pair ] && step=pair
for r in $(seq "$rounds"); do
  $step plain "" 0
  [ "$what" = pair ] && $step plain-starved "" 1
  $step vgpu-50 "$VGPU_LIB" 0
  $step vgpu-50-starved "$VGPU_LIB" 1
  if [ -n "${VGPU_LIB_B:-}" ]; then
    $step b-50 "$VGPU_LIB_B" 0
    $step b-50-starved "$VGPU_LIB_B" 1
  fi
  if [ -n "${VGPU_LIB_C:-}" ]; then
    $step c-50 "$VGPU_LIB_C" 0
    $step c-50-starved "$VGPU_LIB_C" 1
  fi
done
