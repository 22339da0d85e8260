#!/bin/bash
# The CNN's pricing under vgpu (issue 23): its GPU time per step by CUPTI (plain), then the
# training loop under VGPU_MEASURE_GPU_TIME and at 50 / 25 % with the controller's debug lines
# (what it charged a second, its holds, prices). Usage, from the repository root, .gpu/ carried:
#   bash tests/gpu/gen3/probe_cnn.sh [SECONDS]      (results under $OUT)
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
secs=${1:-8}
lib=$PWD/.gpu/libvgpu.so
here=tests/gpu/gen3
python3 $here/cnn_train.py --profile 10 > "$OUT/cnn-profile.txt" 2>&1
tail -n 12 "$OUT/cnn-profile.txt"
one() {  # name, env...
  local name=$1; shift
  local d; d=$(mktemp -d)
  env -u LD_PRELOAD "$@" CUDA_DEVICE_MEMORY_SHARED_CACHE=$d/c.cache VGPU_NODE_DIR=$d \
    LIBCUDA_LOG_LEVEL=4 LD_PRELOAD=$lib python3 $here/cnn_train.py --seconds "$secs" \
    > "$OUT/$name.out" 2> "$OUT/$name.err"
  echo "$name: $(cat "$OUT/$name.out")"
  grep -E "sm device" "$OUT/$name.err" | tail -n 4
}
one measure VGPU_MEASURE_GPU_TIME=true
one sm50 CUDA_DEVICE_SM_LIMIT=50
one sm25 CUDA_DEVICE_SM_LIMIT=25
# The kernels' own GPU time per step under the limit (CUPTI), against the charge above.
d=$(mktemp -d)
env CUDA_DEVICE_SM_LIMIT=25 CUDA_DEVICE_MEMORY_SHARED_CACHE=$d/c.cache VGPU_NODE_DIR=$d \
  LIBCUDA_LOG_LEVEL=4 LD_PRELOAD=$lib python3 $here/cnn_train.py --profile 10 > "$OUT/cnn-profile-sm25.txt" \
  2> "$OUT/cnn-profile-sm25.err"
tail -n 11 "$OUT/cnn-profile-sm25.txt" | head -n 1
grep -E "sm device" "$OUT/cnn-profile-sm25.err" | tail -n 2
