#!/usr/bin/env bash
# The live monitor on a real GPU: a PyTorch training job runs under a memory and a compute
# limit while `vgpu status`, `vgpu top` (text mode) and `vgpu metrics` read its region.
#
#   bash tests/gpu/monitor.sh      (repo root; target/release/{libvgpu.so,vgpu} built elsewhere)
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
VGPU=$PWD/target/release/vgpu
LIB=$PWD/target/release/libvgpu.so
W=$(mktemp -d /tmp/vgpu-monitor.XXXXXX)
REGION=$W/container.cache
export PYTHONUNBUFFERED=1
echo "== $(date -u +%FT%TZ) monitor: train.py under CUDA_DEVICE_MEMORY_LIMIT=8g CUDA_DEVICE_SM_LIMIT=40"
env LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_LIMIT=8g CUDA_DEVICE_SM_LIMIT=40 \
    CUDA_DEVICE_MEMORY_SHARED_CACHE="$REGION" VGPU_NODE_DIR="$W/node" \
    timeout 60 python3 tests/gpu/compute/train.py 14 > "$W/train.log" 2>&1 &
JOB=$!
sleep 8
echo "== vgpu status --region $REGION"
timeout 20 "$VGPU" status --region "$REGION" 2>&1
echo "== vgpu status --json"
timeout 20 "$VGPU" status --region "$REGION" --json 2>&1
echo "== vgpu top --once (text mode, stdout not a terminal)"
timeout 20 "$VGPU" top --region "$REGION" --once 2>&1
sleep 2
echo "== vgpu metrics --once (an OpenMetrics scrape)"
timeout 20 "$VGPU" metrics --region "$REGION" --once 2>&1
echo "== vgpu limit --sm 20 (live), then 3 s of the job"
timeout 20 "$VGPU" limit --region "$REGION" --sm 20 2>&1
sleep 3
echo "== vgpu top --once after the change"
timeout 20 "$VGPU" top --region "$REGION" --once 2>&1
wait $JOB
echo "== train.py (windows: steps per second; unlimited is about 206/s on this H200, run 3)"
cat "$W/train.log"
echo "== GPU time without a compute limit (opt-in VGPU_MEASURE_GPU_TIME=1): train.py for 8 s"
REGION2=$W/measured.cache
env LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_LIMIT=8g VGPU_MEASURE_GPU_TIME=1 \
    CUDA_DEVICE_MEMORY_SHARED_CACHE="$REGION2" VGPU_NODE_DIR="$W/node2" \
    timeout 60 python3 tests/gpu/compute/train.py 8 > "$W/train2.log" 2>&1 &
JOB2=$!
# torch takes about 10 s to initialise there (init_s in train.py's info line), then 1 s warm-up
sleep 15
echo "-- vgpu top --once while it runs (GPU share with no SM limit)"
timeout 20 "$VGPU" top --region "$REGION2" --once 2>&1
echo "-- vgpu metrics --once while it runs (gpu_time and launches; sm_limit_percent 100)"
timeout 20 "$VGPU" metrics --region "$REGION2" --once 2>&1 | grep -E '^vgpu_(gpu_time|kernel_launches|throttled|sm_limit)' 2>&1
wait $JOB2
echo "-- train.py (steps per second; compare with the unlimited rate, about 200/s)"
cat "$W/train2.log"
echo "-- vgpu status --json after it (gpu_ns and launches must be non-zero)"
timeout 20 "$VGPU" status --region "$REGION2" --json 2>&1
echo "== vgpu doctor (GPU machine, no limit set by the caller)"
timeout 60 "$VGPU" doctor --lib "$LIB" 2>&1; echo "doctor exit=$?"
rm -rf "$W"
