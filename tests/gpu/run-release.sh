#!/usr/bin/env bash
# The GPU checks of a release build, in parts that each fit one 10-minute device call.
#
#   OUT=/path VGPU_LIB=dist/libvgpu.so VGPU_BIN=dist/vgpu HAMI_MONITOR=.gpu/hami-monitor \
#       bash tests/gpu/run-release.sh PART...
#
# PART is one of
#   compute   = latency shares accuracy (issue 11's benchmarks and the single-container accuracy)
#   keep      = overhead frameworks accuracy captures (what the compute limit must keep)
#   latency   sharing_bench.py latency: the matmul request service alone and beside training
#   shares    sharing_bench.py shares: saturating containers side by side
#   accuracy  run-compute.sh phase 1 for large and train (the single-container accuracy)
#   overhead  the launch overhead under a limit (run-bench.sh launchmed/launch at SM 50 %)
#   frameworks the shares under Triton, torch.compile, JAX and CuPy (run-frameworks.sh)
#   captures  PyTorch graph captures under SM 50 % (30 rounds)
#   hami      tests/gpu/hami/run-priority.sh (HAMi's priority protocol with the monitor model),
#             PyTorch graph captures under SM 50 % (30 rounds) and `vgpu doctor` at SM 30 %
#   memory    tests/gpu/run-memory.sh (every framework's memory limit)
#   multi     tests/gpu/multi/run-multi.sh (needs two GPUs; all of it fits one call with a 600 s
#             timeout, VGPU_MULTI_PHASES runs a part)
# compute fits one 10-minute device call; keep needs two (frameworks alone takes 4-5 minutes: twelve
# runs, JAX's and torch.compile's start-up included); the finer parts let a call mix them.
# Each part writes its own files under $OUT/<part>/ and prints its tables.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
ROOT=$PWD
: "${OUT:=$ROOT/out/release}"
# everything goes to a work folder; $OUT gets one tarball of it and the tables (few files)
FINAL=$OUT
OUT=$(mktemp -d /tmp/vgpu-release.XXXXXX)
export VGPU_LIB=${VGPU_LIB:-$ROOT/dist/libvgpu.so}
export VGPU_BIN=${VGPU_BIN:-$ROOT/dist/vgpu}
export HAMI_MONITOR=${HAMI_MONITOR:-$ROOT/.gpu/hami-monitor}
export PYTHONUNBUFFERED=1
VGPU_LIB=$(readlink -f "$VGPU_LIB"); VGPU_BIN=$(readlink -f "$VGPU_BIN")
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $(nvidia-smi -L | wc -l) GPU(s)"
echo "== library $VGPU_LIB ($(stat -c %s "$VGPU_LIB") bytes), git $(git log -1 --format=%h 2> /dev/null || echo unknown)"
# The parts asked for, with compute and keep spelled out.
parts=()
for part in "$@"; do
    case $part in
    compute) parts+=(latency shares accuracy) ;;
    keep) parts+=(overhead frameworks accuracy captures) ;;
    *) parts+=("$part") ;;
    esac
done
# VGPU_CAPTURE_ROUNDS: rounds of the captures part (30).
captures() {
    local d n=${VGPU_CAPTURE_ROUNDS:-30}
    echo "== captures under CUDA_DEVICE_SM_LIMIT=50, $n rounds"
    d=$(mktemp -d)
    CUDA_DEVICE_MEMORY_SHARED_CACHE=$d/c.cache VGPU_NODE_DIR=$d CUDA_DEVICE_SM_LIMIT=50 LD_PRELOAD=$VGPU_LIB \
        timeout "$1" python3 tests/gpu/measure/capture_torch.py "$n" 2>&1 | tail -4
}
for part in "${parts[@]}"; do
    o=$OUT/$part
    mkdir -p "$o"
    echo "==== part $part"
    case $part in
    latency)
        timeout 290 python3 tests/gpu/compute/sharing_bench.py latency --seconds 6 --lib "$VGPU_LIB" --out "$o" | sed -n '/^latency bench/,$p'
        ;;
    shares)
        timeout 200 python3 tests/gpu/compute/sharing_bench.py shares --seconds 5 --lib "$VGPU_LIB" --out "$o" | sed -n '/^shares bench/,$p'
        ;;
    accuracy)
        OUT=$o VGPU_COMPUTE_PHASES=1 VGPU_COMPUTE_WORKLOADS="large train" VGPU_COMPUTE_SECONDS=4 VGPU_COMPUTE_BUDGET=120 \
            timeout 170 bash tests/gpu/compute/run-compute.sh > "$o/run-compute.log" 2>&1
        sed '/^== runs:/,$d' "$o/compute.txt" 2> /dev/null | tail -25
        ;;
    overhead)
        OUT=$o/bench VGPU_BENCH_MODES="launchmed launch" VGPU_BENCH_VGPU_ENV="CUDA_DEVICE_SM_LIMIT=50" \
            VGPU_BENCH_BUDGET=90 VGPU_BENCH_ROUNDS=8 timeout 150 bash tests/gpu/run-bench.sh > "$o/bench.log" 2>&1
        cat "$o/bench/bench.txt" 2> /dev/null || tail -5 "$o/bench.log"
        ;;
    frameworks)
        OUT=$o timeout 300 bash tests/gpu/compute/run-frameworks.sh > /dev/null 2>&1
        sed -n '/^== share per run/,$p' "$o/frameworks.txt" 2> /dev/null
        ;;
    captures) captures 60 ;;
    hami)
        OUT=$o timeout 120 bash tests/gpu/hami/run-priority.sh
        captures 120
        if [ "${VGPU_RELEASE_DOCTOR:-1}" = 1 ]; then
            echo "== CUDA_DEVICE_SM_LIMIT=30 vgpu doctor"
            CUDA_DEVICE_SM_LIMIT=30 timeout 120 "$VGPU_BIN" doctor --lib "$VGPU_LIB" 2>&1 | tail -12
        fi
        ;;
    memory)
        OUT=$o VGPU_TEST_BUDGET=${VGPU_TEST_BUDGET:-170} timeout 280 bash tests/gpu/run-memory.sh > "$o/run-memory.log" 2>&1
        cat "$o/summary.txt" 2> /dev/null || tail -30 "$o/run-memory.log"
        ;;
    multi)
        OUT=$o VGPU_MULTI_BUDGET=${VGPU_MULTI_BUDGET:-480} timeout 570 bash tests/gpu/multi/run-multi.sh > "$o/run-multi.log" 2>&1
        cat "$o/multi.txt" 2> /dev/null || tail -30 "$o/run-multi.log"
        ;;
    *) echo "unknown part $part" ;;
    esac
done
tar -C "$OUT" -czf "$FINAL/release-$(echo "$@" | tr ' ' '-').tgz" . 2> /dev/null
for f in latency/latency.txt shares/shares.txt accuracy/compute.txt frameworks/frameworks.txt hami/priority.txt memory/summary.txt multi/multi.txt; do
    [ -f "$OUT/$f" ] && cp "$OUT/$f" "$FINAL/$(echo "$f" | tr '/' '-')"
done
