#!/usr/bin/env bash
# vgpu overhead benchmarks on a real GPU: launch / launch4 / malloc / meminfo, each run alternately
# without and with libvgpu.so preloaded, R rounds (default 15), the order flipped every round.
#
#   OUT=/path/to/results bash tests/gpu/run-bench.sh
#
# Writes $OUT/bench_raw.tsv (every run), $OUT/bench.txt (medians, ratios, targets), logs.
# Stops starting new runs after VGPU_BENCH_BUDGET seconds (default 390) and summarizes what it has.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
ROOT=$PWD
: "${OUT:=$ROOT/out/bench}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
LIB=${VGPU_LIB:-$ROOT/target/release/libvgpu.so}
LIMIT=${VGPU_TEST_LIMIT:-4g}
ROUNDS=${VGPU_BENCH_ROUNDS:-15}
BUDGET=${VGPU_BENCH_BUDGET:-390}
read -r -a MODES <<< "${VGPU_BENCH_MODES:-launch launch4 malloc meminfo}"
# Extra settings for the vgpu runs (e.g. "CUDA_DEVICE_SM_LIMIT=50"), space separated.
read -r -a VGPU_ENV <<< "${VGPU_BENCH_VGPU_ENV:-}"
T0=$SECONDS
WORK=$(mktemp -d /tmp/vgpu-bench.XXXXXX)
unset LD_PRELOAD CUDA_DEVICE_MEMORY_SHARED_CACHE
for v in $(env | sed -n 's/^\(CUDA_DEVICE_MEMORY_LIMIT[^=]*\)=.*/\1/p'); do unset "$v"; done

say() { echo "[$(date +%T) +$((SECONDS - T0))s] $*" | tee -a "$OUT/bench-run.log"; }

{
    echo "== date: $(date -u +%FT%TZ)   git: $(git -C "$ROOT" log -1 --format='%h %s' 2>&1)"
    echo "== limiter:"; ls -la "$LIB" 2>&1
    echo "== gpu:"; timeout 60 nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used,clocks.sm,clocks.max.sm --format=csv 2>&1
    echo "== nvcc:"; (nvcc --version 2>&1 || /usr/local/cuda/bin/nvcc --version 2>&1) | tail -2
    echo "== cpu: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
} > "$OUT/bench-env.txt" 2>&1
cat "$OUT/bench-env.txt"

NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
BENCH=$WORK/bench_ops
say "building bench_ops"
if ! timeout 300 "$NVCC" -O2 -arch=sm_90 -std=c++17 -o "$BENCH" "$ROOT/tests/gpu/bench/bench_ops.cu" \
        > "$OUT/bench-build.log" 2>&1; then
    say "build failed:"; tail -20 "$OUT/bench-build.log"
    echo "bench_ops did not build; see bench-build.log" > "$OUT/bench.txt"
    exit 0
fi

RAW=$OUT/bench_raw.tsv
printf 'round\tvariant\tmode\tns_per_op\ttotal_mib\trc\n' > "$RAW"

# one_run ROUND VARIANT MODE : one process, one mode; appends a row to $RAW
one_run() {
    local r=$1 v=$2 m=$3 out rc val tot
    local cmd=("$BENCH" "$m")
    if [ "$v" = vgpu ]; then
        cmd=(env LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_LIMIT="$LIMIT"
             CUDA_DEVICE_MEMORY_SHARED_CACHE="$WORK/bench.cache" VGPU_NODE_DIR="$WORK/node"
             "${VGPU_ENV[@]}" "$BENCH" "$m")
    fi
    out=$(timeout -k 5 120 "${cmd[@]}" 2>> "$OUT/bench-stderr.log")
    rc=$?
    val=$(awk -v m="$m" '$1 == m { print $2 }' <<< "$out")
    tot=$(sed -n 's/^info total_mib=\([0-9]*\).*/\1/p' <<< "$out")
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$v" "$m" "${val:-NA}" "${tot:-NA}" "$rc" >> "$RAW"
    if [ "$m" = launchmed ]; then
        val=$(awk '$1 == "launchtrim" { print $2 }' <<< "$out")
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$v" launchtrim "${val:-NA}" "${tot:-NA}" "$rc" >> "$RAW"
    fi
    [ "$rc" = 0 ] || say "round $r $v $m: rc=$rc"
}

say "warm-up (not counted)"
for m in "${MODES[@]}"; do timeout 120 "$BENCH" "$m" > /dev/null 2>&1; done

for ((r = 1; r <= ROUNDS; r++)); do
    if (( SECONDS - T0 > BUDGET )); then
        say "time budget used: stopping after $((r - 1)) rounds"
        break
    fi
    if (( r % 2 )); then order=(plain vgpu); else order=(vgpu plain); fi
    for m in "${MODES[@]}"; do
        for v in "${order[@]}"; do
            one_run "$r" "$v" "$m"
        done
    done
    say "round $r done: $(tail -n $(( 2 * ${#MODES[@]} )) "$RAW" | awk '{printf "%s/%s=%s ", $3, $2, $4}')"
done

python3 "$ROOT/tests/gpu/bench/summarize_bench.py" "$RAW" --out "$OUT/bench.txt"
say "finished in $((SECONDS - T0))s; results in $OUT/bench.txt"
rm -rf "$WORK"
exit 0
