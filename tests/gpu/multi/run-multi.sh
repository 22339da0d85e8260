#!/usr/bin/env bash
# vgpu on a machine with two GPUs (issue 6): per-device limits, device identity under
# CUDA_VISIBLE_DEVICES, an NCCL job under the limits, per-device compute limits at once.
#
#   OUT=/path/to/results bash tests/gpu/multi/run-multi.sh
#
# Needs target/release/libvgpu.so and target/release/vgpu (built elsewhere), nvidia-smi, python3
# with torch (CUDA, NCCL), nvcc for item 4. About 4 minutes; never past VGPU_MULTI_BUDGET
# seconds (default 480, later steps are skipped) plus one step's timeout. A failing or hanging
# step never stops the others. Writes $OUT/multi.txt (one PASS/FAIL/SKIP line per check) and
# $OUT/multi-logs.tgz (every step's output, results/*.json, runs/*.out, env).
#   1. CUDA_DEVICE_MEMORY_LIMIT_0=2g _1=6g: fill.py fills cuda:0 and cuda:1 with 256 MiB tensors
#      until OOM; obtained GiB, mem_get_info, nvidia-smi under the limiter (each row its own
#      limit), real use from nvidia-smi without LD_PRELOAD, vgpu status of the region.
#   2. the same with CUDA_VISIBLE_DEVICES=1 and =1,0: limits follow the container's device index
#      (NVML's order: `_1` is physical GPU 1 whatever the program calls it), usage
#      is charged to the physical GPU's UUID, nothing lands on a GPU the program cannot see.
#   3. NCCL all-reduce, 2 ranks (torch.multiprocessing), first without vgpu (control), then under
#      CUDA_DEVICE_MEMORY_LIMIT=4g CUDA_DEVICE_SM_LIMIT=50 in one shared region, under timeout
#      120: right sums, no hang, both ranks in the region, a third process gets only what is left.
#   4. sm_bench `large`, one process per GPU at once. sm_bench always uses device 0, so
#      sm_bench_dev.cu (here) adds `--device N`: one container (one region, one environment)
#      with CUDA_DEVICE_SM_LIMIT_0=30 and CUDA_DEVICE_SM_LIMIT_1=70, the process on GPU 0 runs
#      `--device 0`, the one on GPU 1 `--device 1`. Then (4b) the other way HAMi-style launchers
#      do it: CUDA_VISIBLE_DEVICES=0 with CUDA_DEVICE_SM_LIMIT_0=30 and CUDA_VISIBLE_DEVICES=1
#      with CUDA_DEVICE_SM_LIMIT_1=70 (each process's ordinal 0; `_<i>` names the container's
#      device, so physical GPU 1 is `_1` in both processes). Shares are per 1 s window
#      against unlimited runs of both GPUs at once (before and after).
# Never uses NVLink multicast (NVLS): the variables below are exported first.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../../.." || exit 1
ROOT=$PWD
HERE=$ROOT/tests/gpu/multi
: "${OUT:=$ROOT/out/multi}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
LIB=${VGPU_LIB:-$ROOT/target/release/libvgpu.so}
VGPU=${VGPU_BIN:-$ROOT/target/release/vgpu}
BUDGET=${VGPU_MULTI_BUDGET:-480}
S=${VGPU_MULTI_SECONDS:-6}
T0=$SECONDS
WORK=$(mktemp -d /tmp/vgpu-multi.XXXXXX)
LOGS=$WORK/multi-logs
mkdir -p "$LOGS/results" "$LOGS/runs" "$LOGS/steps" "$WORK/cache" "$WORK/node"
: > "$LOGS/rcs.tsv"
: > "$LOGS/run.log"
# no stray limiter settings from the caller's environment
unset LD_PRELOAD CUDA_DEVICE_MEMORY_SHARED_CACHE CUDA_DISABLE_CONTROL VGPU_NODE_DIR CUDA_VISIBLE_DEVICES
for v in $(env | sed -n 's/^\(CUDA_DEVICE_\(MEMORY\|SM\)_LIMIT[^=]*\)=.*/\1/p'); do unset "$v"; done

say() { echo "[$(date +%T) +$((SECONDS - T0))s] $*" | tee -a "$LOGS/run.log"; }
left() { echo $(( BUDGET - (SECONDS - T0) )); }

checkpoint() {
    timeout 60 python3 "$HERE/summarize_multi.py" "$LOGS" --seconds "$S" --out "$WORK/multi.txt" \
        > "$LOGS/summarize.log" 2>&1 || echo "summarize_multi.py failed, rc=$?" >> "$LOGS/summarize.log"
    if [ -s "$WORK/multi.txt" ]; then
        cp "$WORK/multi.txt" "$OUT/multi.txt.tmp" && mv -f "$OUT/multi.txt.tmp" "$OUT/multi.txt"
    else
        { echo "summarize_multi.py produced nothing; its log:"; cat "$LOGS/summarize.log"; } > "$OUT/multi.txt"
    fi
    tar -C "$WORK" -czf "$OUT/multi-logs.tgz.tmp" multi-logs 2> /dev/null \
        && mv -f "$OUT/multi-logs.tgz.tmp" "$OUT/multi-logs.tgz"
    rm -f "$OUT/multi-logs.tgz.tmp"
}
CLEANED=0
cleanup() {
    [ "$CLEANED" = 1 ] && return 0
    CLEANED=1
    local f p
    for f in "$WORK"/*.pid; do
        [ -f "$f" ] || continue
        p=$(cat "$f")
        [ -n "$p" ] && kill -0 "$p" 2> /dev/null && kill "$p" 2> /dev/null
    done
    say "finished in $((SECONDS - T0))s"
    checkpoint
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'say "signal: stopping"; exit 130' INT TERM HUP

# step NAME TIMEOUT CMD... : output to steps/NAME.log, "NAME rc seconds" to rcs.tsv; never fails
step() {
    local name=$1 tmo=$2 rc t=$SECONDS
    shift 2
    if (( $(left) < 10 )); then
        say "SKIP $name (time budget of ${BUDGET}s used)"
        printf '%s\tskip\t0\n' "$name" >> "$LOGS/rcs.tsv"
        return 0
    fi
    (( tmo > $(left) + 30 )) && tmo=$(( $(left) + 30 ))
    say "run  $name (timeout ${tmo}s): $*"
    timeout -k 10 "$tmo" "$@" > "$LOGS/steps/$name.log" 2>&1 < /dev/null
    rc=$?
    printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t))" >> "$LOGS/rcs.tsv"
    say "done $name rc=$rc in $((SECONDS - t))s"
    grep -h '^RESULT' "$LOGS/steps/$name.log" | cut -c1-300 | tee -a "$LOGS/run.log"
    return 0
}
# the environment of one container under vgpu: its own region and node directory
vg_env() { # NAME
    mkdir -p "$WORK/node/$1"
    VG=(env LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_SHARED_CACHE="$WORK/cache/$1.cache" VGPU_NODE_DIR="$WORK/node/$1")
}

# ---- environment -------------------------------------------------------------------------------
{
    echo "== date: $(date -u +%FT%TZ)   host: $(hostname)   budget: ${BUDGET}s   window seconds: $S"
    echo "== git: $(git -C "$ROOT" log -1 --format='%h %s' 2>&1)"
    echo "== limiter:"; ls -la "$LIB" "$VGPU" 2>&1
    echo "== nvidia-smi:"; timeout 60 nvidia-smi 2>&1
    echo "== topology:"; timeout 30 nvidia-smi topo -m 2>&1
    echo "== nvcc:"; (nvcc --version 2>&1 || /usr/local/cuda/bin/nvcc --version 2>&1) | tail -2
    echo "== python: $(python3 --version 2>&1)"
    echo "== torch: $(timeout 60 python3 -c 'import torch; print(torch.__version__, torch.version.cuda, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())' 2>&1 | tail -1)"
    echo "== env:"; env | grep -E '^(CUDA|NCCL|NVIDIA|TORCH|NVSHMEM|LD_LIBRARY)' | sort
} > "$LOGS/env.txt" 2>&1
cat "$LOGS/env.txt"
timeout 30 nvidia-smi --query-gpu=index,name,uuid,memory.total,memory.used --format=csv > "$LOGS/gpus.txt" 2>&1
NGPU=$(timeout 30 nvidia-smi -L 2> /dev/null | grep -c '^GPU ')
[ "$NGPU" -ge 2 ] || say "WARNING: $NGPU GPU(s) found; these checks need two"
[ -e "$LIB" ] || say "WARNING: $LIB is missing: every limiter step will fail"
[ -x "$VGPU" ] || say "WARNING: $VGPU is missing: no region status"

# ---- 1. per-device memory limits, both GPUs in one program ---------------------------------------
MEM=(CUDA_DEVICE_MEMORY_LIMIT_0=2g CUDA_DEVICE_MEMORY_LIMIT_1=6g)
vg_env fill-both
step 1.both 120 "${VG[@]}" "${MEM[@]}" python3 "$HERE/fill.py" --vgpu "$VGPU" --result "$LOGS/results/1.both.json"
checkpoint

# ---- 2. CUDA_VISIBLE_DEVICES=1 and =1,0 --------------------------------------------------------
vg_env fill-cvd1
step 2.cvd1 120 "${VG[@]}" "${MEM[@]}" CUDA_VISIBLE_DEVICES=1 python3 "$HERE/fill.py" --vgpu "$VGPU" \
    --result "$LOGS/results/2.cvd1.json"
vg_env fill-cvd10
step 2.cvd10 120 "${VG[@]}" "${MEM[@]}" CUDA_VISIBLE_DEVICES=1,0 python3 "$HERE/fill.py" --vgpu "$VGPU" \
    --result "$LOGS/results/2.cvd10.json"
checkpoint

# ---- 3. NCCL all-reduce, one process per GPU ----------------------------------------------------
NCCL_ENV=(NCCL_DEBUG=INFO "NCCL_DEBUG_SUBSYS=INIT,ENV")
step 3.plain 120 env "${NCCL_ENV[@]}" python3 "$HERE/allreduce.py" --result "$LOGS/results/3.plain.json"
vg_env allreduce
step 3.vgpu 120 "${VG[@]}" "${NCCL_ENV[@]}" CUDA_DEVICE_MEMORY_LIMIT=4g CUDA_DEVICE_SM_LIMIT=50 \
    python3 "$HERE/allreduce.py" --vgpu "$VGPU" --fill "$HERE/fill.py" --result "$LOGS/results/3.vgpu.json"
checkpoint

# ---- 4. per-device compute limits at once -------------------------------------------------------
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
BENCH=$WORK/sm_bench_dev
step 4.build 180 "$NVCC" -O2 -arch=sm_90 -o "$BENCH" "$HERE/sm_bench_dev.cu" -lpthread
ITERS=""
if [ -x "$BENCH" ] && (( $(left) > 60 )); then
    # the iteration count of one unlimited kernel of ~2 ms, fixed for every later run
    step 4.calibrate 60 "$BENCH" --device 0 large 1
    ITERS=$(sed -n 's/^info .*iters=\([0-9][0-9]*\) .*/\1/p' "$LOGS/steps/4.calibrate.log" | head -1)
    say "large: iters=${ITERS:-?}"
fi
# pair TAG ENV0... -- ENV1... : sm_bench large on both GPUs at once; runs/sm.TAG.gpuG.out
pair() {
    local tag=$1 e0=() e1=() p0 p1 tmo=$(( S + 30 ))
    shift
    while [ $# -gt 0 ] && [ "$1" != -- ]; do e0+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    e1=("$@")
    if (( $(left) < S + 10 )); then
        say "SKIP sm.$tag ($(left)s left)"
        printf 'sm.%s\tskip\t0\n' "$tag" >> "$LOGS/rcs.tsv"
        return 0
    fi
    say "run  sm.$tag: GPU0: ${e0[*]} | GPU1: ${e1[*]}"
    timeout -k 5 "$tmo" env "${e0[@]}" > "$LOGS/runs/sm.$tag.gpu0.out" 2> "$LOGS/runs/sm.$tag.gpu0.err" < /dev/null &
    p0=$!; echo $p0 > "$WORK/sm0.pid"
    timeout -k 5 "$tmo" env "${e1[@]}" > "$LOGS/runs/sm.$tag.gpu1.out" 2> "$LOGS/runs/sm.$tag.gpu1.err" < /dev/null &
    p1=$!; echo $p1 > "$WORK/sm1.pid"
    # the monitor's view half-way through (limits and GPU time per UUID)
    if [ -n "${REGION:-}" ]; then
        sleep $(( S / 2 + 2 ))
        CUDA_DEVICE_MEMORY_SHARED_CACHE=$REGION timeout 20 "$VGPU" status --json > "$LOGS/runs/sm.$tag.status.json" 2>&1
        CUDA_DEVICE_MEMORY_SHARED_CACHE=$REGION timeout 20 "$VGPU" top --once --interval 1000 > "$LOGS/runs/sm.$tag.top.txt" 2>&1
    fi
    wait $p0; local r0=$?
    wait $p1; local r1=$?
    rm -f "$WORK/sm0.pid" "$WORK/sm1.pid"
    printf 'sm.%s.gpu0\t%s\t0\nsm.%s.gpu1\t%s\t0\n' "$tag" "$r0" "$tag" "$r1" >> "$LOGS/rcs.tsv"
    say "done sm.$tag rc=$r0/$r1: GPU0 $(awk '$1 == "window" { printf "%s ", $3 }' "$LOGS/runs/sm.$tag.gpu0.out") GPU1 $(awk '$1 == "window" { printf "%s ", $3 }' "$LOGS/runs/sm.$tag.gpu1.out")"
}
if [ -x "$BENCH" ] && [ -n "$ITERS" ]; then
    B=("$BENCH")
    REGION="" pair base1 "${B[@]}" --device 0 large "$S" "$ITERS" -- "${B[@]}" --device 1 large "$S" "$ITERS"
    # 4: one container, per-device variables, --device selects the GPU
    vg_env sm-lim
    REGION=$WORK/cache/sm-lim.cache
    L=("${VG[@]:1}" CUDA_DEVICE_SM_LIMIT_0=30 CUDA_DEVICE_SM_LIMIT_1=70)
    pair lim "${L[@]}" "${B[@]}" --device 0 large "$S" "$ITERS" -- "${L[@]}" "${B[@]}" --device 1 large "$S" "$ITERS"
    REGION="" pair base2 "${B[@]}" --device 0 large "$S" "$ITERS" -- "${B[@]}" --device 1 large "$S" "$ITERS"
    # 4b: one container, each process sees one GPU as its device 0
    vg_env sm-cvd
    REGION=$WORK/cache/sm-cvd.cache
    C=("${VG[@]:1}")
    pair cvd "${C[@]}" CUDA_VISIBLE_DEVICES=0 CUDA_DEVICE_SM_LIMIT_0=30 "${B[@]}" large "$S" "$ITERS" -- \
        "${C[@]}" CUDA_VISIBLE_DEVICES=1 CUDA_DEVICE_SM_LIMIT_1=70 "${B[@]}" large "$S" "$ITERS"
    REGION=""
else
    say "item 4 skipped: no sm_bench_dev (see steps/4.build.log) or no calibration"
fi

say "all steps done in $((SECONDS - T0))s"
cleanup
trap - EXIT
cat "$OUT/multi.txt"
exit 0
