#!/usr/bin/env bash
# Accuracy of the compute limit (CUDA_DEVICE_SM_LIMIT) on a real GPU (written for the H200
# machine: driver 580, CUDA 13, nvcc, python3 with torch).
#
#   OUT=/path/to/results bash tests/gpu/compute/run-compute.sh
#
# Achieved share = work per 1 s window under the limit / mean work per window of the same program
# run unlimited in the same session, over every window after the first. Workloads: sm_bench large
# (deep async queue), sync (sync after every kernel), small (4 blocks), short (~20 us kernels) and
# train.py (a PyTorch training loop). Order, most important first:
#   1. per workload: unlimited, limits 10 25 50 75, unlimited again, limit 100
#   2. two containers at once (large at 30 and at 70), then the same pair without vgpu
#   3. preloaded with no limit set (sync, short, train) and a per-device variable (large, _0=25)
#   4. NVIDIA MPS reference (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE 25, 50; the 30/70 pair)
# Runs that would not fit in VGPU_COMPUTE_BUDGET seconds (default 480, counted from the start)
# are skipped. A failing or hanging run never stops the others.
#
# Writes only two files: $OUT/compute.txt (the table; rewritten after each phase) and
# $OUT/compute-logs.tgz (every run's stdout/stderr, runs.tsv, env, build and MPS logs).
# Knobs: VGPU_COMPUTE_SECONDS (S, default 5: each run measures S windows after 0.5-1 s warm-up),
# VGPU_COMPUTE_BUDGET, VGPU_LIB (default target/release/libvgpu.so), VGPU_COMPUTE_MPS=0 (no MPS),
# VGPU_COMPUTE_WORKLOADS (phase 1's workloads, default "large sync small short train"),
# VGPU_COMPUTE_PHASES (default "1 2 3 4").
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../../.." || exit 1
ROOT=$PWD
HERE=$ROOT/tests/gpu/compute
: "${OUT:=$ROOT/out/compute}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
LIB=${VGPU_LIB:-$ROOT/target/release/libvgpu.so}
S=${VGPU_COMPUTE_SECONDS:-5}
BUDGET=${VGPU_COMPUTE_BUDGET:-480}
WANT_MPS=${VGPU_COMPUTE_MPS:-1}
T0=$SECONDS
WORK=$(mktemp -d /tmp/vgpu-compute.XXXXXX)
LOGS=$WORK/compute-logs
mkdir -p "$LOGS/runs" "$WORK/cache" "$WORK/node" "$WORK/pids"
RUNS=$LOGS/runs.tsv
printf 'name\tgroup\tworkload\tmode\tlimit\trc\twall_ms\n' > "$RUNS"
: > "$LOGS/run.log"
# no stray limiter or MPS settings from the caller's environment
unset LD_PRELOAD CUDA_DEVICE_MEMORY_SHARED_CACHE CUDA_DISABLE_CONTROL VGPU_NODE_DIR \
    CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
for v in $(env | sed -n 's/^\(CUDA_DEVICE_\(MEMORY\|SM\)_LIMIT[^=]*\)=.*/\1/p'); do unset "$v"; done

say() { echo "[$(date +%T) +$((SECONDS - T0))s] $*" | tee -a "$LOGS/run.log"; }
left() { echo $(( BUDGET - (SECONDS - T0) )); }

# ---- summary and tarball: after every phase, and on exit ------------------------------------------
checkpoint() {
    timeout 60 python3 "$HERE/summarize.py" "$LOGS" --seconds "$S" --out "$WORK/compute.txt" \
        > "$LOGS/summarize.log" 2>&1 || echo "summarize.py failed, rc=$?" >> "$LOGS/summarize.log"
    if [ -s "$WORK/compute.txt" ]; then
        cp "$WORK/compute.txt" "$OUT/compute.txt.tmp" && mv -f "$OUT/compute.txt.tmp" "$OUT/compute.txt"
    else
        { echo "summarize.py produced nothing; its log:"; cat "$LOGS/summarize.log"; } > "$OUT/compute.txt"
    fi
    tar -C "$WORK" -czf "$OUT/compute-logs.tgz.tmp" compute-logs 2> /dev/null \
        && mv -f "$OUT/compute-logs.tgz.tmp" "$OUT/compute-logs.tgz"
    rm -f "$OUT/compute-logs.tgz.tmp"
}

# ---- MPS daemon (phase 4), always stopped ----------------------------------------------------------
MPS_CTL=$(command -v nvidia-cuda-mps-control || true)
MPS_DIR=$WORK/mps
MPS_ON=0
stop_mps() {
    [ "$MPS_ON" = 1 ] || return 0
    MPS_ON=0
    say "stopping the MPS daemon"
    echo quit | CUDA_MPS_PIPE_DIRECTORY=$MPS_DIR/pipe CUDA_MPS_LOG_DIRECTORY=$MPS_DIR/log \
        timeout 20 "$MPS_CTL" >> "$LOGS/mps-control.out" 2>&1
    local i pid=""
    [ -f "$MPS_DIR/pipe/nvidia-cuda-mps-control.pid" ] && pid=$(cat "$MPS_DIR/pipe/nvidia-cuda-mps-control.pid" 2> /dev/null)
    for ((i = 0; i < 50; i++)); do
        if [ -z "$pid" ] || ! kill -0 "$pid" 2> /dev/null; then break; fi
        sleep 0.2
    done
    if [ -n "$pid" ] && kill -0 "$pid" 2> /dev/null; then
        say "MPS control daemon $pid still up after quit: killing it"
        kill "$pid" 2> /dev/null
    fi
    mkdir -p "$LOGS/mps-log"
    cp -r "$MPS_DIR/log/." "$LOGS/mps-log/" 2> /dev/null
}

CLEANED=0
cleanup() {
    [ "$CLEANED" = 1 ] && return 0
    CLEANED=1
    local f p
    # runs still going (only after a signal): their `timeout` passes the TERM on
    for f in "$WORK"/pids/*; do
        [ -f "$f" ] || continue
        p=$(cat "$f")
        [ -n "$p" ] && kill -0 "$p" 2> /dev/null && kill "$p" 2> /dev/null
    done
    stop_mps
    say "finished in $((SECONDS - T0))s"
    checkpoint
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'say "signal: stopping"; exit 130' INT TERM HUP

# ---- environment ------------------------------------------------------------------------------------
{
    echo "== date: $(date -u +%FT%TZ)   host: $(hostname)   seconds per run: $S   budget: ${BUDGET}s"
    echo "== git: $(git -C "$ROOT" log -1 --format='%h %s' 2>&1)"
    echo "== limiter:"; ls -la "$LIB" 2>&1
    echo "== gpu:"; timeout 30 nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,compute_mode --format=csv 2>&1
    echo "== nvcc:"; (nvcc --version 2>&1 || /usr/local/cuda/bin/nvcc --version 2>&1) | tail -2
    echo "== mps: ${MPS_CTL:-none}"
    echo "== cpu: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
    echo "== python: $(python3 --version 2>&1)"
} > "$LOGS/env.txt" 2>&1
cat "$LOGS/env.txt"
[ -e "$LIB" ] || say "WARNING: $LIB is missing: every limiter run will fail"

# ---- build ---------------------------------------------------------------------------------------------
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
BENCH=$WORK/sm_bench
say "building sm_bench"
if ! timeout 180 "$NVCC" -O2 -arch=sm_90 -o "$BENCH" "$HERE/sm_bench.cu" -lpthread > "$LOGS/build.log" 2>&1; then
    say "sm_bench did not build (see build.log):"; tail -20 "$LOGS/build.log"
fi

# ---- runs ------------------------------------------------------------------------------------------------
declare -A ITERS=()
# command for workload W measuring SECS windows
wl_cmd() {
    local w=$1 secs=$2
    if [ "$w" = train ]; then
        CMD=(python3 "$HERE/train.py" "$secs")
    else
        CMD=("$BENCH" "$w" "$secs")
        [ -n "${ITERS[$w]:-}" ] && CMD+=("${ITERS[$w]}")
    fi
}
# expected wall time of one run, with process start, warm-up and the end of the queue
need_s() { if [ "$1" = train ]; then echo $(( $2 + 14 )); else echo $(( $2 + 5 )); fi; }

# skip_run NAME GROUP WORKLOAD MODE LIMIT WHY : records a run that was not started
skip_run() {
    say "SKIP $1 $6"
    printf '%s\t%s\t%s\t%s\t%s\tskip\t0\n' "$1" "$2" "$3" "$4" "$5" >> "$RUNS"
}
# start_run NAME GROUP WORKLOAD MODE LIMIT SECS [VAR=VALUE...] : in the background; sets RUN_PID.
# Returns 1 (and records a skip) when the budget has no room for it.
start_run() {
    local name=$1 group=$2 w=$3 mode=$4 limit=$5 secs=$6 need tmo
    shift 6
    need=$(need_s "$w" "$secs")
    if (( $(left) < need )); then
        skip_run "$name" "$group" "$w" "$mode" "$limit" "(needs ~${need}s, $(left)s left)"
        return 1
    fi
    # sm_bench gives up on its queue 12 s after the last window; torch may import slowly
    tmo=$(( secs + 25 ))
    [ "$w" = train ] && tmo=$(( secs + 60 ))
    (( tmo > $(left) + 20 )) && tmo=$(( $(left) + 20 ))
    (( tmo < need + 5 )) && tmo=$(( need + 5 ))
    wl_cmd "$w" "$secs"
    say "run  $name: $* ${CMD[*]}"
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$group" "$w" "$mode" "$limit" > "$LOGS/runs/$name.meta"
    (
        t_a=$(date +%s%N)
        timeout -k 5 "$tmo" env "$@" "${CMD[@]}" > "$LOGS/runs/$name.out" 2> "$LOGS/runs/$name.err" < /dev/null &
        echo $! > "$WORK/pids/$name"
        wait $!
        rc=$?
        t_b=$(date +%s%N)
        echo "$rc $(( (t_b - t_a) / 1000000 ))" > "$LOGS/runs/$name.rc"
    ) &
    RUN_PID=$!
    return 0
}
# finish_run NAME : after its process ended; appends its row to runs.tsv
finish_run() {
    local name=$1 rc=NA ms=0 w
    [ -f "$LOGS/runs/$name.rc" ] && read -r rc ms < "$LOGS/runs/$name.rc"
    printf '%s\t%s\t%s\n' "$(cat "$LOGS/runs/$name.meta")" "$rc" "$ms" >> "$RUNS"
    say "done $name rc=$rc ${ms}ms: $(awk '$1 == "window" { printf "%s ", $3 }' "$LOGS/runs/$name.out" 2> /dev/null)"
    [ "$rc" = 0 ] || tail -3 "$LOGS/runs/$name.err" 2> /dev/null | sed 's/^/    /' | tee -a "$LOGS/run.log"
    rm -f "$WORK/pids/$name"
    # the first unlimited run of a sm_bench workload fixes its iteration count for every later run
    w=$(cut -f3 "$LOGS/runs/$name.meta")
    if [ "$w" != train ] && [ -z "${ITERS[$w]:-}" ] && [ "$(cut -f4 "$LOGS/runs/$name.meta")" = plain ]; then
        ITERS[$w]=$(sed -n 's/^info .*iters=\([0-9][0-9]*\) .*/\1/p' "$LOGS/runs/$name.out" | head -1)
        [ -n "${ITERS[$w]}" ] && say "$w: iters=${ITERS[$w]} for every later run"
    fi
}
# one NAME GROUP WORKLOAD MODE LIMIT SECS [VAR=VALUE...] : in the foreground
one() {
    local name=$1
    start_run "$@" || return 0
    wait "$RUN_PID"
    finish_run "$name"
}
# the environment of one container under vgpu: its own shared region and node directory
vg_env() { # NAME [NODE_DIR]
    local node=${2:-$WORK/node/$1}
    mkdir -p "$node"
    VG=(LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_SHARED_CACHE="$WORK/cache/$1.cache" VGPU_NODE_DIR="$node")
}

read -r -a WORKLOADS <<< "${VGPU_COMPUTE_WORKLOADS:-large sync small short train}"
[ -x "$BENCH" ] || WORKLOADS=(train)
PHASES=" ${VGPU_COMPUTE_PHASES:-1 2 3 4} "
want() { [[ "$PHASES" == *" $1 "* ]]; }

want 1 && say "phase 1: every workload unlimited and at 10 25 50 75 100 %"
want 1 && for w in "${WORKLOADS[@]}"; do
    one "$w.plain1" single "$w" plain - "$S"
    for l in 10 25 50 75; do
        vg_env "$w.sm$l"
        one "$w.sm$l" single "$w" vgpu "$l" "$S" "${VG[@]}" CUDA_DEVICE_SM_LIMIT="$l"
    done
    one "$w.plain2" single "$w" plain - "$S"
    vg_env "$w.sm100"
    one "$w.sm100" single "$w" vgpu 100 "$S" "${VG[@]}" CUDA_DEVICE_SM_LIMIT=100
    checkpoint
done

# pair MODE PREFIX LIMIT_A LIMIT_B ENV_A... -- ENV_B... : two `large` runs at once, S+2 windows
pair() {
    local group=$1 pfx=$2 la=$3 lb=$4 envs_a=() envs_b=() pa="" pb="" secs=$(( S + 2 )) mode=$5
    shift 5
    while [ $# -gt 0 ] && [ "$1" != -- ]; do envs_a+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    envs_b=("$@")
    if (( $(left) < $(need_s large "$secs") + 5 )); then
        skip_run "$pfx.a" "$group" large "$mode" "$la" "($(left)s left)"
        skip_run "$pfx.b" "$group" large "$mode" "$lb" "($(left)s left)"
        return 0
    fi
    start_run "$pfx.a" "$group" large "$mode" "$la" "$secs" "${envs_a[@]}" && pa=$RUN_PID
    start_run "$pfx.b" "$group" large "$mode" "$lb" "$secs" "${envs_b[@]}" && pb=$RUN_PID
    [ -n "$pa" ] && wait "$pa"
    [ -n "$pb" ] && wait "$pb"
    [ -n "$pa" ] && finish_run "$pfx.a"
    [ -n "$pb" ] && finish_run "$pfx.b"
}

want 2 && say "phase 2: two containers at once, large at 30 and 70"
if want 2 && [ -x "$BENCH" ]; then
    mkdir -p "$WORK/node/pair"
    vg_env pair.vgpu.a "$WORK/node/pair"; A=("${VG[@]}" CUDA_DEVICE_SM_LIMIT=30)
    vg_env pair.vgpu.b "$WORK/node/pair"; B=("${VG[@]}" CUDA_DEVICE_SM_LIMIT=70)
    pair pair-vgpu pair.vgpu 30 70 vgpu "${A[@]}" -- "${B[@]}"
    pair pair-plain pair.plain - - plain -- 
    checkpoint
fi

want 3 && say "phase 3: preloaded without a limit; a per-device limit variable"
want 3 && for w in sync short train large; do
    [ "$w" = train ] || [ -x "$BENCH" ] || continue
    vg_env "$w.unset"
    one "$w.unset" single "$w" unset - "$S" "${VG[@]}"
done
if want 3 && [ -x "$BENCH" ]; then
    vg_env large.idx25
    one large.idx25 single large vgpu-idx 25 "$S" "${VG[@]}" CUDA_DEVICE_SM_LIMIT_0=25
fi
checkpoint

if ! want 4; then
    say "phase 4 (MPS) not asked for: VGPU_COMPUTE_PHASES=$PHASES"
elif [ "$WANT_MPS" != 1 ]; then
    say "phase 4 (MPS) off: VGPU_COMPUTE_MPS=$WANT_MPS"
elif [ -z "$MPS_CTL" ]; then
    say "phase 4 (MPS) skipped: no nvidia-cuda-mps-control"
elif [ ! -x "$BENCH" ]; then
    say "phase 4 (MPS) skipped: no sm_bench"
elif (( $(left) < 3 * $(need_s large "$S") )); then
    say "phase 4 (MPS) skipped: $(left)s left"
else
    say "phase 4: MPS reference"
    mkdir -p "$MPS_DIR/pipe" "$MPS_DIR/log"
    MPS_ENV=(CUDA_MPS_PIPE_DIRECTORY="$MPS_DIR/pipe" CUDA_MPS_LOG_DIRECTORY="$MPS_DIR/log")
    MPS_ON=1
    if env "${MPS_ENV[@]}" timeout 30 "$MPS_CTL" -d > "$LOGS/mps-control.out" 2>&1; then
        sleep 1
        for w in large sync short; do
            one "mps.$w.base" mps "$w" mps - "$S" "${MPS_ENV[@]}"
            for p in 25 50; do
                one "mps.$w.p$p" mps "$w" mps "$p" "$S" "${MPS_ENV[@]}" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="$p"
            done
        done
        pair mps-pair mps.pair 30 70 mps "${MPS_ENV[@]}" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30 -- \
            "${MPS_ENV[@]}" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=70
        echo get_server_list | env "${MPS_ENV[@]}" timeout 10 "$MPS_CTL" >> "$LOGS/mps-control.out" 2>&1
    else
        say "MPS daemon did not start (see mps-control.out)"
    fi
    stop_mps
fi

say "all phases done in $((SECONDS - T0))s"
timeout 30 nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >> "$LOGS/env.txt" 2>&1
cleanup
trap - EXIT
# the tables (the per-run lines are in the file)
sed '/^== runs:/,/^$/d' "$OUT/compute.txt"
exit 0
