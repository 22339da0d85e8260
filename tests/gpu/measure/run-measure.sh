#!/usr/bin/env bash
# GPU time without a compute limit (VGPU_MEASURE_GPU_TIME), on a real GPU: what it costs, how it
# compares with NVML's utilisation, and that stream capture survives the controller's drains.
#
#   OUT=/path/to/results bash tests/gpu/measure/run-measure.sh
#
# Phases (each bounded; a failing run never stops the others):
#   1. capture: capture_torch.py (PyTorch graphs captured in the default GLOBAL mode while windows
#      are drained) plain, under CUDA_DEVICE_SM_LIMIT=50, and measured only; also under the build
#      before the fix when VGPU_OLD_LIB names one.
#   2. cost: train / large / sync / short, VGPU_MEASURE_ROUNDS rounds (default 2), each round
#      running plain, memory limit only (mem) and memory limit + VGPU_MEASURE_GPU_TIME=1 (measure)
#      back to back; ratio = work per second against the same round's plain run.
#   3. accuracy: measured runs of train / large / sync sampled every 0.5 s: the region's GPU time
#      (vgpu status --json) against nvidia-smi's utilization.gpu over the same seconds.
# VGPU_MEASURE_PHASES picks phases (default "1 2 3").
# Writes $OUT/measure.txt (the summary) and $OUT/measure-logs.tgz (every run's output).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../../.." || exit 1
ROOT=$PWD
HERE=$ROOT/tests/gpu/measure
: "${OUT:=$ROOT/out/measure}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
LIB=${VGPU_LIB:-$ROOT/target/release/libvgpu.so}
VGPU=${VGPU_BIN:-$ROOT/target/release/vgpu}
OLD_LIB=${VGPU_OLD_LIB:-}
ROUNDS=${VGPU_MEASURE_ROUNDS:-2}
S=${VGPU_MEASURE_SECONDS:-4}
W=$(mktemp -d /tmp/vgpu-measure.XXXXXX)
LOGS=$W/measure-logs
mkdir -p "$LOGS/runs"
unset LD_PRELOAD CUDA_DEVICE_MEMORY_SHARED_CACHE CUDA_DISABLE_CONTROL VGPU_NODE_DIR VGPU_MEASURE_GPU_TIME
for v in $(env | sed -n 's/^\(CUDA_DEVICE_\(MEMORY\|SM\)_LIMIT[^=]*\)=.*/\1/p'); do unset "$v"; done
T0=$SECONDS
PHASES=" ${VGPU_MEASURE_PHASES:-1 2 3} "
want() { [[ "$PHASES" == *" $1 "* ]]; }
say() { echo "[$(date +%T) +$((SECONDS - T0))s] $*" | tee -a "$LOGS/run.log"; }

finish() {
    timeout 60 python3 "$HERE/summarize_measure.py" "$LOGS" > "$W/measure.txt" 2> "$LOGS/summarize.err" \
        || { echo "summarize_measure.py failed:"; cat "$LOGS/summarize.err"; } >> "$W/measure.txt"
    cp "$W/measure.txt" "$OUT/measure.txt"
    tar -C "$W" -czf "$OUT/measure-logs.tgz" measure-logs 2> /dev/null
    cat "$OUT/measure.txt"
    rm -rf "$W"
}
trap finish EXIT

{
    echo "== date: $(date -u +%FT%TZ)   host: $(hostname)"
    echo "== git: $(git -C "$ROOT" log -1 --format='%h %s' 2>&1)"
    ls -la "$LIB" "$VGPU" ${OLD_LIB:+"$OLD_LIB"} 2>&1
    timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1
    python3 -c 'import torch; print("torch", torch.__version__)' 2>&1
} > "$LOGS/env.txt" 2>&1
cat "$LOGS/env.txt"

NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
BENCH=$W/sm_bench
timeout 180 "$NVCC" -O2 -arch=sm_90 -o "$BENCH" "$ROOT/tests/gpu/compute/sm_bench.cu" -lpthread \
    > "$LOGS/build.log" 2>&1 || say "sm_bench did not build (build.log)"

# run NAME TIMEOUT VAR=VALUE... -- COMMAND...  (foreground; stdout/stderr/rc/wall kept)
run() {
    local name=$1 tmo=$2 envs=() t_a t_b rc
    shift 2
    while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    say "run $name: ${envs[*]} $*"
    t_a=$(date +%s%N)
    timeout -k 5 "$tmo" env "${envs[@]}" "$@" > "$LOGS/runs/$name.out" 2> "$LOGS/runs/$name.err" < /dev/null
    rc=$?
    t_b=$(date +%s%N)
    echo "$rc $(( (t_b - t_a) / 1000000 ))" > "$LOGS/runs/$name.rc"
    say "  rc=$rc $(( (t_b - t_a) / 1000000 )) ms: $(grep -E '^(total|capture) ' "$LOGS/runs/$name.out" | tr '\n' ' ')"
}
# a container's environment: its own region and node directory
cenv() { mkdir -p "$W/node/$1"; C=(LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_SHARED_CACHE="$W/$1.cache" VGPU_NODE_DIR="$W/node/$1"); }

want 1 && say "phase 1: graph capture in GLOBAL mode while windows drain"
CAP=(python3 "$HERE/capture_torch.py" 30)
want 1 && run cap.plain 120 -- "${CAP[@]}"
want 1 && { cenv cap.sm50; run cap.sm50 120 "${C[@]}" CUDA_DEVICE_SM_LIMIT=50 -- "${CAP[@]}"; }
want 1 && { cenv cap.sm10; run cap.sm10 120 "${C[@]}" CUDA_DEVICE_SM_LIMIT=10 -- "${CAP[@]}"; }
want 1 && { cenv cap.measure; run cap.measure 120 "${C[@]}" CUDA_DEVICE_MEMORY_LIMIT=64g VGPU_MEASURE_GPU_TIME=1 -- "${CAP[@]}"; }
if want 1 && [ -n "$OLD_LIB" ] && [ -e "$OLD_LIB" ]; then
    cenv cap.old.sm50
    run cap.old.sm50 120 "${C[@]}" LD_PRELOAD="$OLD_LIB" CUDA_DEVICE_SM_LIMIT=50 -- "${CAP[@]}"
fi

declare -A ITERS=()
wl() { # WORKLOAD SECONDS -> CMD
    if [ "$1" = train ]; then CMD=(python3 "$ROOT/tests/gpu/compute/train.py" "$2")
    else CMD=("$BENCH" "$1" "$2"); [ -n "${ITERS[$1]:-}" ] && CMD+=("${ITERS[$1]}"); fi
}
WORKLOADS=(train large sync short)
[ -x "$BENCH" ] || WORKLOADS=(train)

want 2 && say "phase 2: cost of measuring (plain / mem / measure, $ROUNDS rounds of ${S} s)"
want 2 && for w in "${WORKLOADS[@]}"; do
    for ((r = 1; r <= ROUNDS; r++)); do
        for m in plain mem measure; do
            wl "$w" "$S"
            case $m in
                plain) run "cost.$w.$m.$r" 90 -- "${CMD[@]}" ;;
                mem) cenv "cost.$w.$m.$r"; run "cost.$w.$m.$r" 90 "${C[@]}" CUDA_DEVICE_MEMORY_LIMIT=64g -- "${CMD[@]}" ;;
                measure) cenv "cost.$w.$m.$r"
                    run "cost.$w.$m.$r" 90 "${C[@]}" CUDA_DEVICE_MEMORY_LIMIT=64g VGPU_MEASURE_GPU_TIME=1 -- "${CMD[@]}" ;;
            esac
            if [ "$w" != train ] && [ -z "${ITERS[$w]:-}" ]; then
                ITERS[$w]=$(sed -n 's/^info .*iters=\([0-9][0-9]*\) .*/\1/p' "$LOGS/runs/cost.$w.$m.$r.out" | head -1)
            fi
        done
    done
done

want 3 && say "phase 3: the region's GPU time against nvidia-smi utilization.gpu"
want 3 && for w in "${WORKLOADS[@]}"; do
    [ "$w" = short ] && continue
    name=acc.$w
    cenv "$name"
    wl "$w" 6
    : > "$LOGS/runs/$name.vgpu"
    timeout 40 nvidia-smi --query-gpu=timestamp,utilization.gpu --format=csv,noheader,nounits -lms 500 \
        > "$LOGS/runs/$name.smi" 2>&1 &
    SMI=$!
    (
        # the region appears once the job has initialised CUDA
        for ((i = 0; i < 70; i++)); do
            if [ -e "$W/$name.cache" ]; then
                printf '%s ' "$(date +%s.%N)"
                timeout 5 "$VGPU" status --region "$W/$name.cache" --json 2> /dev/null | tr -d '\n '
                echo
            fi
            sleep 0.5
        done
    ) >> "$LOGS/runs/$name.vgpu" &
    SAMPLER=$!
    echo "$(date +%s.%N)" > "$LOGS/runs/$name.start"
    run "$name" 90 "${C[@]}" CUDA_DEVICE_MEMORY_LIMIT=64g VGPU_MEASURE_GPU_TIME=1 -- "${CMD[@]}"
    kill "$SAMPLER" "$SMI" 2> /dev/null
    wait "$SAMPLER" "$SMI" 2> /dev/null
done
say "all phases done in $((SECONDS - T0)) s"
