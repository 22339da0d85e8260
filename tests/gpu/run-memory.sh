#!/usr/bin/env bash
# vgpu memory-limit tests on a real GPU (written for the H200 machine: driver 580, CUDA 13).
#
#   OUT=/path/to/results bash tests/gpu/run-memory.sh
#
# Needs target/release/libvgpu.so (built elsewhere; VGPU_LIB=dist/libvgpu.so for the `make dist`
# build, VGPU_BIN for the CLI listed beside it), gcc, nvidia-smi, python3 with torch, cupy
# and jax.  Every log lands under $OUT (logs/, results/*.json, env.txt, run.log) and the verdicts
# in $OUT/summary.txt.  A failing or hanging sub-test never stops the others; the whole run keeps
# to about 7 minutes (VGPU_TEST_BUDGET seconds, default 400, after which sub-tests are skipped).
# VGPU_MEM_CASES (space-separated sub-test names: torch, cupy-async, probe, ...) runs a subset;
# VGPU_MEM_PROBE_GROUPS (comma-separated: escapes, paths, denial, ...) the probe's groups.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
ROOT=$PWD
: "${OUT:=$ROOT/out/memory}"
mkdir -p "$OUT/logs" "$OUT/results"
export PYTHONUNBUFFERED=1
LIB=${VGPU_LIB:-$ROOT/target/release/libvgpu.so}
LIMIT=${VGPU_TEST_LIMIT:-4g}
BUDGET=${VGPU_TEST_BUDGET:-400}
T0=$SECONDS
WORK=$(mktemp -d /tmp/vgpu-mem.XXXXXX)
: > "$OUT/rcs.txt"
: > "$OUT/run.log"
# no stray limiter settings from the caller's environment
unset LD_PRELOAD CUDA_DEVICE_MEMORY_SHARED_CACHE
for v in $(env | sed -n 's/^\(CUDA_DEVICE_MEMORY_LIMIT[^=]*\)=.*/\1/p'); do unset "$v"; done
LIMIT_MIB=$(python3 -c "
import re,sys; m=re.fullmatch(r'(\d+)([kmgt]?)', sys.argv[1].lower())
print(int(m.group(1)) * {'':1,'k':1<<10,'m':1<<20,'g':1<<30,'t':1<<40}[m.group(2)] >> 20)" "$LIMIT")

say() { echo "[$(date +%T) +$((SECONDS - T0))s] $*" | tee -a "$OUT/run.log"; }

# run NAME TIMEOUT CMD... : output to $OUT/logs/NAME.log, exit status to rcs.txt, never fails.
run() {
    local name=$1 tmo=$2 rc
    shift 2
    if [ -n "${VGPU_MEM_CASES:-}" ] && [[ " $VGPU_MEM_CASES build-probe " != *" $name "* ]]; then
        echo "$name unselected" >> "$OUT/rcs.txt"
        return 0
    fi
    if (( SECONDS - T0 > BUDGET )); then
        say "SKIP $name (time budget of ${BUDGET}s used)"
        echo "$name skipped" >> "$OUT/rcs.txt"
        return 0
    fi
    # never run past the budget by more than 30 s
    (( tmo > BUDGET - (SECONDS - T0) + 30 )) && tmo=$(( BUDGET - (SECONDS - T0) + 30 ))
    say "run  $name (timeout ${tmo}s): $*"
    timeout -k 10 "$tmo" "$@" > "$OUT/logs/$name.log" 2>&1
    rc=$?
    echo "$name $rc" >> "$OUT/rcs.txt"
    say "done $name rc=$rc"
    grep -h '^RESULT' "$OUT/logs/$name.log" | cut -c1-400 | tee -a "$OUT/run.log"
    return 0
}

# vgrun NAME TIMEOUT CMD... : run, under the limiter; each sub-test gets a shared-region file of
# its own (CUDA_DEVICE_MEMORY_SHARED_CACHE=$WORK/NAME.cache)
VG=(env LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_LIMIT="$LIMIT")
vgrun() {
    local name=$1 tmo=$2
    shift 2
    run "$name" "$tmo" "${VG[@]}" CUDA_DEVICE_MEMORY_SHARED_CACHE="$WORK/$name.cache" "$@"
}

# ---- environment facts -----------------------------------------------------------------------
{
    echo "== date: $(date -u +%FT%TZ)   host: $(hostname)   limit: $LIMIT ($LIMIT_MIB MiB)"
    echo "== uname: $(uname -a)"
    echo "== git: $(git -C "$ROOT" log -1 --format='%h %s' 2>&1)"
    echo "== limiter:"; ls -la "$LIB" "${VGPU_BIN:-$ROOT/target/release/vgpu}" 2>&1
    echo "== nvidia-smi:"; timeout 60 nvidia-smi 2>&1
    echo "== gpu:"; timeout 60 nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used --format=csv 2>&1
    echo "== driver:"; cat /proc/driver/nvidia/version 2>&1
    echo "== nvcc:"; (nvcc --version 2>&1 || /usr/local/cuda/bin/nvcc --version 2>&1) | tail -2
    echo "== gcc: $(gcc --version 2>&1 | head -1)"
    echo "== python: $(python3 --version 2>&1)"
    for m in torch cupy jax jaxlib; do
        echo "== $m: $(timeout 60 python3 -c "import $m; print($m.__version__)" 2>&1 | tail -1)"
    done
    echo "== libraries:"; ldconfig -p 2>/dev/null | grep -E 'libcuda\.so|libnvidia-ml\.so|libcudart\.so'
    echo "== env:"; env | grep -E '^(CUDA|NVIDIA|XLA|JAX|PYTORCH|LD_LIBRARY)' | sort
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
[ -e "$LIB" ] || say "WARNING: $LIB is missing: every limiter test will fail"

# ---- build the probe --------------------------------------------------------------------------
find_libcuda_dir() {
    local p d
    p=$(ldconfig -p 2>/dev/null | awk '$1 == "libcuda.so.1" && /x86-64/ { print $NF; exit }')
    for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/cuda/compat; do
        [ -n "$p" ] || { [ -e "$d/libcuda.so.1" ] && p=$d/libcuda.so.1; }
    done
    if [ -n "$p" ] && [ -e "$p" ]; then
        mkdir -p "$WORK/cudalink" && ln -sf "$p" "$WORK/cudalink/libcuda.so" && echo "$WORK/cudalink" && return 0
    fi
    for d in /usr/local/cuda/lib64/stubs /usr/local/cuda/targets/x86_64-linux/lib/stubs; do
        [ -e "$d/libcuda.so" ] && { echo "$d"; return 0; }
    done
    return 1
}
PROBE=$WORK/probe
CUDA_LINK_DIR=${VGPU_TEST_CUDA_LINK_DIR:-$(find_libcuda_dir || echo /usr/local/cuda/lib64/stubs)}
say "linking the probe against $CUDA_LINK_DIR"
run build-probe 120 gcc -std=c99 -O1 -Wall -Wextra -o "$PROBE" "$ROOT/crates/vgpu-tests/c/probe.c" \
    -L"$CUDA_LINK_DIR" -lcuda -ldl -lpthread
if [ -x "$PROBE" ]; then
    # control, without the limiter: the whole GPU
    run probe-plain 120 "$PROBE" init ctx meminfo totalmem nvml nvml2 fill:alloc:1g meminfo freeall meminfo
else
    say "probe did not build (see logs/build-probe.log)"
fi

# ---- frameworks under the limiter ------------------------------------------------------------
T=$ROOT/tests/gpu
R=$OUT/results
vgrun torch            120 python3 "$T/mem_torch.py" --result "$R/torch.json"
vgrun torch-expandable 120 python3 "$T/mem_torch.py" --expandable --result "$R/torch-expandable.json"
vgrun cupy             120 python3 "$T/mem_cupy.py" --result "$R/cupy.json"
vgrun cupy-async       120 python3 "$T/mem_cupy.py" --async --result "$R/cupy-async.json"
vgrun jax              120 python3 "$T/mem_jax.py" --result "$R/jax.json"

# ---- the driver-API probe under the limiter, every lookup path ---------------------------------
if [ -x "$PROBE" ]; then
    left=$(( BUDGET - (SECONDS - T0) - 45 ))
    (( left < 60 )) && left=60
    vgrun probe 300 python3 "$T/mem_probe.py" --probe "$PROBE" --results "$R" \
        --budget "$left" --work "$WORK" --only "${VGPU_MEM_PROBE_GROUPS:-}"
fi

# ---- what nvidia-smi shows under the limiter ----------------------------------------------------
vgrun nvidia-smi-view 120 python3 "$T/smi_view.py" --result "$R/nvidia-smi-view.json"

# ---- summary ---------------------------------------------------------------------------------------
python3 "$T/summarize_memory.py" "$OUT" --limit-mib "$LIMIT_MIB" 2>&1 | tee -a "$OUT/run.log"
say "finished in $((SECONDS - T0))s; summary in $OUT/summary.txt"
rm -rf "$WORK"
exit 0
