#!/usr/bin/env bash
# HAMi's priority protocol on a real GPU (issue 12): two containers on one GPU, a model of HAMi's
# node monitor beside them (crates/vgpu-hami-model, binary hami-monitor, built on the CPU
# machine and carried), and vgpu obeying what it writes.
#   container "serve": CUDA_TASK_PRIORITY=0, the open-loop request loop (infer_bench), from
#                      t = 6 s for 8 s
#   container "train": CUDA_TASK_PRIORITY=1, train.py for 24 s
# The monitor observes every second (HAMi: 5 s). While the serving container is active the
# monitor blocks the training one (recentKernel = -1), and vgpu holds its launches: its steps
# per second fall to ~0, then recover within ~2 rounds after the requests stop.
#
#   OUT=/path VGPU_LIB=/path/libvgpu.so HAMI_MONITOR=/path/hami-monitor bash tests/gpu/hami/run-priority.sh
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../../.." || exit 1
ROOT=$PWD
: "${OUT:=$ROOT/out/hami}"
mkdir -p "$OUT"
LIB=${VGPU_LIB:-$ROOT/target/release/libvgpu.so}
MON=${HAMI_MONITOR:-$ROOT/target/release/hami-monitor}
W=$(mktemp -d /tmp/vgpu-hami.XXXXXX)
mkdir -p "$W/serve" "$W/train" "$W/node"
export PYTHONUNBUFFERED=1
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
"$NVCC" -O2 -arch=sm_90 -o "$W/infer_bench" tests/gpu/compute/infer_bench.cu || exit 3
common=(LD_PRELOAD="$LIB" VGPU_NODE_DIR="$W/node" LIBCUDA_LOG_LEVEL=3)
t0=$(date +%s.%N)
env "${common[@]}" CUDA_DEVICE_MEMORY_SHARED_CACHE="$W/train/vgpu.cache" CUDA_TASK_PRIORITY=1 \
    python3 tests/gpu/compute/train.py 24 --hidden 2048 --depth 4 --batch 1024 > "$OUT/train.out" 2> "$OUT/train.err" &
TRAIN=$!
# the monitor starts once both regions can exist; it watches them as they appear
"$MON" --interval-ms 1000 --rounds 40 "$W/serve/vgpu.cache" "$W/train/vgpu.cache" > "$OUT/monitor.log" 2>&1 &
MONPID=$!
# wait for training to be past its warm-up
for _ in $(seq 1 120); do grep -q '^info' "$OUT/train.out" 2> /dev/null && break; sleep 0.25; done
t_train=$(date +%s.%N)
sleep 6
t_serve=$(date +%s.%N)
env "${common[@]}" CUDA_DEVICE_MEMORY_SHARED_CACHE="$W/serve/vgpu.cache" CUDA_TASK_PRIORITY=0 \
    "$W/infer_bench" 20 8 > "$OUT/serve.out" 2> "$OUT/serve.err"
t_serve_end=$(date +%s.%N)
wait $TRAIN
kill $MONPID 2> /dev/null
wait $MONPID 2> /dev/null
{
    echo "timeline (s after training's first counted window): serve starts $(awk "BEGIN{printf \"%.1f\", $t_serve - $t_train - 1}"), serve ends $(awk "BEGIN{printf \"%.1f\", $t_serve_end - $t_train - 1}")"
    echo "training steps per 1 s window:"
    awk '$1=="window"{printf "%s ", $3} END{print ""}' "$OUT/train.out"
    echo "serving: $(grep '^lat' "$OUT/serve.out")"
    echo "monitor (train region):"
    grep train/ "$OUT/monitor.log" | awk -v t0="$t_train" '{printf "  t=%+6.1f active=%s recent_kernel=%s switch=%s\n", $1/1000 - t0 - 1, substr($3,8), substr($4,15), substr($5,8)}'
    echo "monitor (serve region):"
    grep serve/ "$OUT/monitor.log" | awk -v t0="$t_train" '{printf "  t=%+6.1f active=%s recent_kernel=%s switch=%s\n", $1/1000 - t0 - 1, substr($3,8), substr($4,15), substr($5,8)}'
} | tee "$OUT/priority.txt"
rm -rf "$W"
