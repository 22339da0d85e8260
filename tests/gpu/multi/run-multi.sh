#!/usr/bin/env bash
# vgpu on a machine with two GPUs (issues 6 and 25): per-device limits, device identity under
# CUDA_VISIBLE_DEVICES, NCCL jobs under the limits, per-device compute limits at once, and what
# users run on two GPUs: a tensor-parallel decode and a torchrun DDP training loop.
#
#   OUT=/path/to/results bash tests/gpu/multi/run-multi.sh
#
# Needs libvgpu.so and vgpu (VGPU_LIB, VGPU_BIN; default target/release/, else dist/; built
# elsewhere), nvidia-smi, python3 with torch (CUDA, NCCL, torch.distributed.run), nvcc for
# item 4. About 6 minutes; never past VGPU_MULTI_BUDGET seconds (default 540, later steps are
# skipped) plus one step's timeout. VGPU_MULTI_PHASES (default "1 2 3 4 5 6") runs a part. A
# failing or hanging step never stops the others. Writes $OUT/multi.txt (one PASS/FAIL/SKIP/INFO
# line per check: summarize_multi.py) and $OUT/multi-logs.tgz (every step's output,
# results/*.json, runs/*.out, env): two files.
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
#      device, so physical GPU 1 is `_1` in both processes). (4c) both processes see both GPUs
#      as CUDA_VISIBLE_DEVICES=1,0: the one on physical GPU 0 runs `--device 1` and must get
#      `_0`'s 30 %. (4t) the same as 4c under PyTorch (train_dev.py: train.py on a chosen
#      device). Shares are per 1 s window against unlimited runs of both GPUs at once.
#   5. tensor-parallel decode (tp_decode.py: a Llama-like model built in the script, TP=2 over
#      NCCL, batch 1, KV cache, greedy; NCCL_CUMEM_ENABLE=0 as vLLM sets it): without vgpu
#      (the reference: its logits are kept), under vgpu with no limit, with
#      CUDA_DEVICE_MEMORY_LIMIT_0=4g _1=6g, and with CUDA_DEVICE_SM_LIMIT=50: tokens/s, p50/p99
#      step time, tokens identical and the largest |logit difference| against the reference;
#      each rank's mem_get_info and the region while both hold the model.
#   6. DDP training (ddp_train.py under torchrun, 2 processes, an MLP, NCCL): without vgpu, then
#      CUDA_DEVICE_SM_LIMIT=50 with CUDA_DEVICE_MEMORY_LIMIT_0=12g _1=16g, NCCL_CUMEM_ENABLE=1
#      (NCCL's buffers from cuMemCreate), the same under CUDA_VISIBLE_DEVICES=1,0, and with
#      NCCL_CUMEM_ENABLE=0: each GPU's share (its steps/s against the unlimited run's, ±2
#      points of 50), NCCL's memory charged to the rank's own GPU (the region against
#      nvidia-smi's per-process use), the region sampled while it trains.
# Never uses NVLink multicast (NVLS): the variables below are exported first.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../../.." || exit 1
ROOT=$PWD
HERE=$ROOT/tests/gpu/multi
: "${OUT:=$ROOT/out/multi}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# the library and CLI: VGPU_LIB / VGPU_BIN, else target/release/ when built there, else dist/
first() { local f; for f in "$@"; do [ -e "$f" ] && { echo "$f"; return; }; done; echo "$1"; }
LIB=${VGPU_LIB:-$(first "$ROOT/target/release/libvgpu.so" "$ROOT/dist/libvgpu.so")}
VGPU=${VGPU_BIN:-$(first "$ROOT/target/release/vgpu" "$ROOT/dist/vgpu")}
BUDGET=${VGPU_MULTI_BUDGET:-540}
S=${VGPU_MULTI_SECONDS:-6}
DS=${VGPU_MULTI_DDP_SECONDS:-8}
PHASES=" ${VGPU_MULTI_PHASES:-1 2 3 4 5 6} "
want() { [[ $PHASES == *" $1 "* ]]; }
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
    timeout 60 python3 "$HERE/summarize_multi.py" "$LOGS" --seconds "$S" --ddp-seconds "$DS" --out "$WORK/multi.txt" \
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
    echo "== date: $(date -u +%FT%TZ)   host: $(hostname)   budget: ${BUDGET}s   window seconds: $S   phases:$PHASES"
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
if want 1; then
    vg_env fill-both
    step 1.both 120 "${VG[@]}" "${MEM[@]}" python3 "$HERE/fill.py" --vgpu "$VGPU" --result "$LOGS/results/1.both.json"
    checkpoint
fi

# ---- 2. CUDA_VISIBLE_DEVICES=1 and =1,0 --------------------------------------------------------
if want 2; then
    vg_env fill-cvd1
    step 2.cvd1 120 "${VG[@]}" "${MEM[@]}" CUDA_VISIBLE_DEVICES=1 python3 "$HERE/fill.py" --vgpu "$VGPU" \
        --result "$LOGS/results/2.cvd1.json"
    vg_env fill-cvd10
    step 2.cvd10 120 "${VG[@]}" "${MEM[@]}" CUDA_VISIBLE_DEVICES=1,0 python3 "$HERE/fill.py" --vgpu "$VGPU" \
        --result "$LOGS/results/2.cvd10.json"
    checkpoint
fi

# ---- 3. NCCL all-reduce, one process per GPU ----------------------------------------------------
NCCL_ENV=(NCCL_DEBUG=INFO "NCCL_DEBUG_SUBSYS=INIT,ENV")
if want 3; then
    step 3.plain 120 env "${NCCL_ENV[@]}" python3 "$HERE/allreduce.py" --result "$LOGS/results/3.plain.json"
    vg_env allreduce
    step 3.vgpu 120 "${VG[@]}" "${NCCL_ENV[@]}" CUDA_DEVICE_MEMORY_LIMIT=4g CUDA_DEVICE_SM_LIMIT=50 \
        python3 "$HERE/allreduce.py" --vgpu "$VGPU" --fill "$HERE/fill.py" --result "$LOGS/results/3.vgpu.json"
    checkpoint
fi

# ---- 4. per-device compute limits at once -------------------------------------------------------
# pair TAG ENV0... -- ENV1... : two commands at once (the first on physical GPU 0, the second on
# GPU 1), each under a timeout; runs/sm.TAG.gpuG.out; with REGION set, the region half-way through
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
if want 4; then
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
        # 4c: one container, both processes see both GPUs as 1,0: physical GPU 0 is their device 1
        vg_env sm-cvd10
        REGION=$WORK/cache/sm-cvd10.cache
        X=("${VG[@]:1}" CUDA_VISIBLE_DEVICES=1,0 CUDA_DEVICE_SM_LIMIT_0=30 CUDA_DEVICE_SM_LIMIT_1=70)
        pair cvd10 "${X[@]}" "${B[@]}" --device 1 large "$S" "$ITERS" -- "${X[@]}" "${B[@]}" --device 0 large "$S" "$ITERS"
        REGION=""
    else
        say "items 4-4c skipped: no sm_bench_dev (see steps/4.build.log) or no calibration"
    fi
    # 4t: 4c under PyTorch (train.py's MLP on each GPU), against both GPUs unlimited at once
    T=(python3 "$HERE/train_dev.py")
    REGION="" pair tbase "${T[@]}" --device 0 "$S" -- "${T[@]}" --device 1 "$S"
    vg_env sm-tcvd10
    REGION=$WORK/cache/sm-tcvd10.cache
    X=("${VG[@]:1}" CUDA_VISIBLE_DEVICES=1,0 CUDA_DEVICE_SM_LIMIT_0=30 CUDA_DEVICE_SM_LIMIT_1=70)
    pair tcvd10 "${X[@]}" "${T[@]}" --device 1 "$S" -- "${X[@]}" "${T[@]}" --device 0 "$S"
    REGION=""
    checkpoint
fi

# ---- 5. tensor-parallel decode over both GPUs ---------------------------------------------------
if want 5; then
    TP=(python3 "$HERE/tp_decode.py" --tokens "${VGPU_MULTI_TP_TOKENS:-512}")
    TPE=(NCCL_CUMEM_ENABLE=0 NCCL_DEBUG=INFO "NCCL_DEBUG_SUBSYS=INIT,ENV")
    REF=$WORK/tp-ref.pt
    step 5.bare 150 env "${TPE[@]}" "${TP[@]}" --save-logits "$REF" --result "$LOGS/results/5.bare.json"
    if [ -s "$REF" ]; then
        for c in nolimit "mem CUDA_DEVICE_MEMORY_LIMIT_0=4g CUDA_DEVICE_MEMORY_LIMIT_1=6g" "sm50 CUDA_DEVICE_SM_LIMIT=50"; do
            read -r tag lim <<< "$c"
            vg_env "tp-$tag"
            # shellcheck disable=SC2086 # $lim: zero or more NAME=VALUE words
            step "5.$tag" 150 "${VG[@]}" "${TPE[@]}" $lim "${TP[@]}" --ref "$REF" --vgpu "$VGPU" \
                --result "$LOGS/results/5.$tag.json"
        done
    else
        say "item 5's limited runs skipped: the reference run kept no logits (see steps/5.bare.log)"
    fi
    rm -f "$REF"
    checkpoint
fi

# ---- 6. DDP training with torchrun --------------------------------------------------------------
# ddp TAG REGION CMD... : torchrun ddp_train.py under CMD's environment (CMD: `env ...`), under
# a timeout; with REGION (the run's region file), `vgpu status --json` twice while it trains
ddp() {
    local tag=$1 region=$2 p rc t=$SECONDS tmo=$(( DS + 150 ))
    shift 2
    local name=6.$tag marker=$WORK/6.$tag.marker
    if (( $(left) < DS + 40 )); then
        say "SKIP $name ($(left)s left)"
        printf '%s\tskip\t0\n' "$name" >> "$LOGS/rcs.tsv"
        return 0
    fi
    (( tmo > $(left) + 30 )) && tmo=$(( $(left) + 30 ))
    local vg=()
    [ -n "$region" ] && vg=(--vgpu "$VGPU")
    say "run  $name (timeout ${tmo}s): $*"
    timeout -k 10 "$tmo" "$@" python3 -m torch.distributed.run --standalone --nnodes=1 --nproc_per_node=2 \
        "$HERE/ddp_train.py" --result "$LOGS/results/$name" --seconds "$DS" --marker "$marker" "${vg[@]}" \
        > "$LOGS/steps/$name.log" 2>&1 < /dev/null &
    p=$!; echo $p > "$WORK/ddp.pid"
    if [ -n "$region" ]; then
        while kill -0 $p 2> /dev/null && [ ! -e "$marker" ]; do sleep 0.2; done
        if [ -e "$marker" ]; then
            local k
            for k in 1 2; do
                sleep $(( k == 1 ? 1 : DS / 2 ))
                date +%s.%N > "$LOGS/runs/$name.status$k.time"
                CUDA_DEVICE_MEMORY_SHARED_CACHE=$region timeout 20 "$VGPU" status --json > "$LOGS/runs/$name.status$k.json" 2>&1
            done
        fi
    fi
    wait $p; rc=$?
    rm -f "$WORK/ddp.pid"
    printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t))" >> "$LOGS/rcs.tsv"
    say "done $name rc=$rc in $((SECONDS - t))s"
    grep -h '^RESULT' "$LOGS/steps/$name.log" | cut -c1-300 | tee -a "$LOGS/run.log"
    return 0
}
if want 6; then
    DE=(NCCL_DEBUG=INFO "NCCL_DEBUG_SUBSYS=INIT,ENV,ALLOC")
    DL=(CUDA_DEVICE_SM_LIMIT=50 CUDA_DEVICE_MEMORY_LIMIT_0=12g CUDA_DEVICE_MEMORY_LIMIT_1=16g)
    ddp plain "" env "${DE[@]}" NCCL_CUMEM_ENABLE=1
    vg_env ddp-lim
    ddp lim "$WORK/cache/ddp-lim.cache" "${VG[@]}" "${DE[@]}" "${DL[@]}" NCCL_CUMEM_ENABLE=1
    vg_env ddp-cvd10
    ddp cvd10 "$WORK/cache/ddp-cvd10.cache" "${VG[@]}" "${DE[@]}" "${DL[@]}" NCCL_CUMEM_ENABLE=1 CUDA_VISIBLE_DEVICES=1,0
    vg_env ddp-nocumem
    ddp nocumem "$WORK/cache/ddp-nocumem.cache" "${VG[@]}" "${DE[@]}" "${DL[@]}" NCCL_CUMEM_ENABLE=0
    checkpoint
fi

say "all steps done in $((SECONDS - T0))s"
cleanup
trap - EXIT
cat "$OUT/multi.txt"
exit 0
