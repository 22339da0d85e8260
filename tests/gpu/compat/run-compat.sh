#!/usr/bin/env bash
# Every CUDA tool users run in a container, under vgpu (issue 24 item 10).
#
#   OUT=/path/to/results bash tests/gpu/compat/run-compat.sh [LIB]
#
# Each case runs three ways: plain (no vgpu), under a memory limit (LD_PRELOAD=LIB
# CUDA_DEVICE_MEMORY_LIMIT=4g) and under an SM limit (CUDA_DEVICE_SM_LIMIT=50), each vgpu run
# with a region file of its own. A case passes under vgpu when it exits 0 within its timeout
# (no hang), prints the plain run's checksum (same result), and the limit is visible: the
# region records the limit and what vgpu saw (memory: the limit and a charge; SM: the limit and
# counted launches, read with `vgpu status --json`), and the stack's own view of the total is
# the limit where it has one. LD_PRELOAD covers the whole command (the tool and the program
# it starts), as /etc/ld.so.preload does under HAMi.
#
# Cases: PyTorch eager, torch.compile, CUDA graphs (also with the cudaMallocAsync backend); JAX; CuPy; Triton; numba-cuda;
# cuda-python (cuda.bindings.driver); a transformers generate (GPT-2 built from a config, no
# download); torch.cuda.mem_get_info against pynvml's nvmlDeviceGetMemoryInfo; compute-sanitizer
# (memcheck), ncu and cuda-gdb (batch) on a small kernel; a program built with
# `nvcc --default-stream per-thread`; a program under MPS (the daemon started here, stopped at
# the end).
#
# LIB: the argument, else $VGPU_LIB, else dist/libvgpu.so if present, else
# target/release/libvgpu.so. The vgpu command: $VGPU_BIN, else `vgpu` beside LIB, else
# target/release/vgpu or dist/vgpu. Knobs: VGPU_COMPAT_LIMIT (4g), VGPU_COMPAT_SM (50),
# VGPU_COMPAT_BUDGET (seconds, default 450: cases past it are skipped, so that the run keeps
# to about 8 minutes), VGPU_COMPAT_CASES (a space-separated subset).
#
# Output: $OUT/compat.txt (everything: environment, each run's output and region status) and
# $OUT/compat-table.md (one row per case and mode: pass, fail or skip, with the reason).
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
cd "$ROOT" || exit 1
: "${OUT:=$ROOT/out/compat}"
mkdir -p "$OUT/logs"
export PYTHONUNBUFFERED=1

if [ $# -ge 1 ]; then
    LIB=$1
elif [ -n "${VGPU_LIB:-}" ]; then
    LIB=$VGPU_LIB
elif [ -e "$ROOT/dist/libvgpu.so" ]; then
    LIB=$ROOT/dist/libvgpu.so
else
    LIB=$ROOT/target/release/libvgpu.so
fi
LIB=$(readlink -f "$LIB" 2> /dev/null || echo "$LIB")
VGPU_BIN=${VGPU_BIN:-}
for b in "$(dirname "$LIB")/vgpu" "$ROOT/target/release/vgpu" "$ROOT/dist/vgpu"; do
    [ -z "$VGPU_BIN" ] && [ -x "$b" ] && VGPU_BIN=$b
done
LIMIT=${VGPU_COMPAT_LIMIT:-4g}
SM=${VGPU_COMPAT_SM:-50}
BUDGET=${VGPU_COMPAT_BUDGET:-450}
CASES=${VGPU_COMPAT_CASES:-torch-eager torch-compile torch-graphs torch-graphs-async jax cupy triton numba cuda-python transformers nvml-agree compute-sanitizer ncu cuda-gdb ptds mps}
T0=$SECONDS
WORK=$(mktemp -d /tmp/vgpu-compat.XXXXXX)
LOG=$OUT/compat.txt
RUNS=$OUT/runs.tsv
: > "$LOG"
: > "$RUNS"

# no stray limiter or MPS settings from the caller's environment
unset LD_PRELOAD CUDA_DEVICE_MEMORY_SHARED_CACHE CUDA_DEVICE_SM_LIMIT CUDA_DISABLE_CONTROL \
    CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
for v in $(env | sed -n 's/^\(CUDA_DEVICE_MEMORY_LIMIT[^=]*\)=.*/\1/p'); do unset "$v"; done
LIMIT_BYTES=$(python3 -c "
import re,sys; m=re.fullmatch(r'(\d+)([kmgt]?)', sys.argv[1].lower())
print(int(m.group(1)) * {'':1,'k':1<<10,'m':1<<20,'g':1<<30,'t':1<<40}[m.group(2)])" "$LIMIT")

say() { echo "[$(date +%T) +$((SECONDS - T0))s] $*" | tee -a "$LOG"; }

# ---- MPS, always stopped ---------------------------------------------------------------------
MPS_CTL=$(command -v nvidia-cuda-mps-control || true)
MPS_DIR=$WORK/mps
MPS_ENV=(CUDA_MPS_PIPE_DIRECTORY="$MPS_DIR/pipe" CUDA_MPS_LOG_DIRECTORY="$MPS_DIR/log")
MPS_ON=0
stop_mps() {
    [ "$MPS_ON" = 1 ] || return 0
    MPS_ON=0
    say "stopping the MPS daemon"
    echo quit | env "${MPS_ENV[@]}" timeout 20 "$MPS_CTL" >> "$OUT/logs/mps-control.out" 2>&1
    local i pid=""
    [ -f "$MPS_DIR/pipe/nvidia-cuda-mps-control.pid" ] &&
        pid=$(cat "$MPS_DIR/pipe/nvidia-cuda-mps-control.pid" 2> /dev/null)
    for ((i = 0; i < 50; i++)); do
        if [ -z "$pid" ] || ! kill -0 "$pid" 2> /dev/null; then break; fi
        sleep 0.2
    done
    if [ -n "$pid" ] && kill -0 "$pid" 2> /dev/null; then
        say "MPS control daemon $pid still up after quit: killing it"
        kill "$pid" 2> /dev/null
    fi
    { echo "== MPS logs"; cat "$MPS_DIR"/log/* 2> /dev/null; } >> "$LOG"
}
cleanup() {
    stop_mps
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- environment -----------------------------------------------------------------------------
{
    echo "== date: $(date -u +%FT%TZ)   host: $(hostname)   memory limit: $LIMIT   SM limit: $SM%"
    echo "== git: $(git -C "$ROOT" log -1 --format='%h %s' 2>&1)"
    echo "== library: $LIB"; ls -la "$LIB" 2>&1
    echo "== vgpu: ${VGPU_BIN:-none}"
    echo "== gpu:"; timeout 60 nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used,compute_mode --format=csv 2>&1
    echo "== nvcc: $( (nvcc --version 2>&1 || /usr/local/cuda/bin/nvcc --version 2>&1) | tail -1)"
    for t in compute-sanitizer ncu cuda-gdb nvidia-cuda-mps-control; do
        echo "== $t: $(command -v "$t" || echo none)"
    done
    echo "== python: $(python3 --version 2>&1)"
    for m in torch triton jax cupy numba cuda transformers pynvml; do
        echo "== $m: $(timeout 60 python3 -c "import $m; print(getattr($m, '__version__', 'present'))" 2>&1 | tail -1)"
    done
} >> "$LOG" 2>&1
[ -e "$LIB" ] || say "WARNING: $LIB is missing: every vgpu run will fail"

# ---- the CUDA program of the tool cases --------------------------------------------------------
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
KERNEL=$WORK/kernel
KERNEL_PTDS=$WORK/kernel-ptds
say "building the kernel program (plain and --default-stream per-thread)"
timeout 180 "$NVCC" -O2 -g -lineinfo -o "$KERNEL" "$HERE/kernel.cu" >> "$LOG" 2>&1 ||
    say "kernel.cu did not build (see above)"
timeout 180 "$NVCC" -O2 --default-stream per-thread -o "$KERNEL_PTDS" "$HERE/kernel.cu" >> "$LOG" 2>&1 ||
    say "kernel.cu did not build with --default-stream per-thread (see above)"

# ---- runs ------------------------------------------------------------------------------------
# one CASE MODE TIMEOUT CMD...: one run, its output in logs/CASE.MODE.log and compat.txt, its
# exit status and time in runs.tsv; vgpu runs also get the region's status (CASE.MODE.status).
one() {
    local case=$1 mode=$2 tmo=$3 rc t
    shift 3
    local name=$case.$mode region=$WORK/$case.$mode.cache
    local log=$OUT/logs/$name.log
    local envs=()
    case $mode in
        mem) envs=(LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_LIMIT="$LIMIT" CUDA_DEVICE_MEMORY_SHARED_CACHE="$region") ;;
        sm) envs=(LD_PRELOAD="$LIB" CUDA_DEVICE_SM_LIMIT="$SM" CUDA_DEVICE_MEMORY_SHARED_CACHE="$region") ;;
    esac
    local left=$((BUDGET - (SECONDS - T0)))
    if ((left < 10)); then
        printf '%s\t%s\tbudget\t0\n' "$case" "$mode" >> "$RUNS"
        say "SKIP $name (time budget of ${BUDGET}s used)"
        return 0
    fi
    ((tmo > left + 30)) && tmo=$((left + 30))
    say "run  $name (timeout ${tmo}s)"
    t=$SECONDS
    timeout -k 10 "$tmo" env "${envs[@]}" "$@" > "$log" 2>&1 < /dev/null
    rc=$?
    t=$((SECONDS - t))
    printf '%s\t%s\t%s\t%s\n' "$case" "$mode" "$rc" "$t" >> "$RUNS"
    if [ "$mode" != plain ] && [ -n "$VGPU_BIN" ] && [ -e "$region" ]; then
        timeout 30 "$VGPU_BIN" status --region "$region" --json > "$OUT/logs/$name.status" 2>&1
    fi
    {
        echo "---- $name: rc=$rc in ${t}s: ${envs[*]} $*"
        tail -c 20000 "$log"
        [ -f "$OUT/logs/$name.status" ] && { echo "-- region status:"; cat "$OUT/logs/$name.status"; }
    } >> "$LOG"
    say "done $name rc=$rc ${t}s $(grep -m1 -E '^(RESULT|SKIP)' "$log" | cut -c1-160)"
}

# each CASE TIMEOUT CMD...: the case in every mode.
each() {
    local case=$1 tmo=$2 mode
    shift 2
    for mode in plain mem sm; do
        one "$case" "$mode" "$tmo" "$@"
    done
}

# missing CASE WHY: the case cannot run here (every mode skipped, with the reason).
missing() {
    local mode
    for mode in plain mem sm; do
        printf '%s\t%s\tmissing\t0\t%s\n' "$1" "$mode" "$2" >> "$RUNS"
    done
    say "SKIP $1: $2"
}

# The kernel program printed through a tool: the RESULT line is the program's.
tool_or_missing() {
    local case=$1 tool=$2
    if ! command -v "$tool" > /dev/null; then
        missing "$case" "no $tool"
        return 1
    fi
    if [ ! -x "$KERNEL" ]; then
        missing "$case" "kernel.cu did not build"
        return 1
    fi
}

PY=(python3 "$HERE/cases.py")
for c in $CASES; do
    case $c in
        torch-eager | torch-graphs | torch-graphs-async | jax | cupy | numba | cuda-python | nvml-agree) each "$c" 120 "${PY[@]}" "$c" ;;
        torch-compile | triton | transformers) each "$c" 180 "${PY[@]}" "$c" ;;
        compute-sanitizer)
            tool_or_missing "$c" compute-sanitizer &&
                each "$c" 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$KERNEL"
            ;;
        ncu)
            tool_or_missing "$c" ncu &&
                each "$c" 180 ncu --target-processes all --kernel-name scale --launch-count 1 \
                    --section SpeedOfLight "$KERNEL"
            ;;
        cuda-gdb)
            tool_or_missing "$c" cuda-gdb &&
                each "$c" 180 cuda-gdb -q -batch -ex run -ex quit --args "$KERNEL"
            ;;
        ptds)
            if [ -x "$KERNEL_PTDS" ]; then each "$c" 60 "$KERNEL_PTDS"; else missing "$c" "no --default-stream per-thread build"; fi
            ;;
        mps)
            if [ -z "$MPS_CTL" ]; then
                missing "$c" "no nvidia-cuda-mps-control"
            elif [ ! -x "$KERNEL" ]; then
                missing "$c" "kernel.cu did not build"
            else
                mkdir -p "$MPS_DIR/pipe" "$MPS_DIR/log"
                MPS_ON=1
                if env "${MPS_ENV[@]}" timeout 30 "$MPS_CTL" -d >> "$OUT/logs/mps-control.out" 2>&1; then
                    sleep 1
                    each "$c" 60 env "${MPS_ENV[@]}" "$KERNEL"
                    # The server the clients ran in (it starts at the first client).
                    echo get_server_list | env "${MPS_ENV[@]}" timeout 10 "$MPS_CTL" > "$OUT/logs/mps.servers" 2>&1
                    { echo "== MPS servers:"; cat "$OUT/logs/mps.servers"; } >> "$LOG"
                else
                    missing "$c" "the MPS daemon did not start (logs/mps-control.out)"
                fi
                stop_mps
            fi
            ;;
        *) say "unknown case $c" ;;
    esac
done

# ---- the table -----------------------------------------------------------------------------------
python3 "$HERE/summarize_compat.py" "$OUT" --limit-bytes "$LIMIT_BYTES" --sm "$SM" 2>&1 | tee -a "$LOG"
say "finished in $((SECONDS - T0))s: $OUT/compat-table.md, $OUT/compat.txt"
exit 0
