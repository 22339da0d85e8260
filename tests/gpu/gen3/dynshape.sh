#!/bin/bash
# The compute limit over dynamic shapes, on the GPU: dynshape.py (a transformer encoder whose
# sequence length is drawn anew each step) plain, and under CUDA_DEVICE_SM_LIMIT=25 and 50 with
# $VGPU_LIB (and $VGPU_LIB_C, an older library, if given), each with fixed and with drawn
# lengths, in interleaved rounds. The limited rate over the plain one should be about the
# share either way. Results under $OUT/dynshape.txt, one line per run:
#   "<round> <lib> <limit> <fixed|dynamic> dynshape steps=... steps_per_s=..."
# then the ratios to plain per library, limit and mode.
# Usage (GPU machine, repository root):
#   OUT=... VGPU_LIB=$PWD/.gpu/libvgpu.so [VGPU_LIB_C=$PWD/.gpu/libvgpu-c.so] \
#     bash tests/gpu/gen3/dynshape.sh [rounds] [seconds]
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
rounds=${1:-2}
secs=${2:-8}
libs=("vgpu=${VGPU_LIB:?VGPU_LIB names the library}")
[ -n "${VGPU_LIB_C:-}" ] && libs+=("varc=$VGPU_LIB_C")
run() { # round name lib limit mode
  local flag=""
  [ "$5" = fixed ] && flag=--fixed
  if [ -n "$3" ]; then
    line=$(LD_PRELOAD=$3 CUDA_DEVICE_SM_LIMIT=$4 VGPU_NODE_DIR=$(mktemp -d) \
      CUDA_DEVICE_MEMORY_SHARED_CACHE=$(mktemp -u).cache \
      timeout 300 python3 tests/gpu/gen3/dynshape.py --seconds "$secs" $flag 2>>"$OUT/dynshape-err.txt")
  else
    line=$(timeout 300 python3 tests/gpu/gen3/dynshape.py --seconds "$secs" $flag 2>>"$OUT/dynshape-err.txt")
  fi
  echo "$1 $2 $4 $5 ${line:-FAILED}" | tee -a "$OUT/dynshape.txt"
}
for r in $(seq "$rounds"); do
  for mode in dynamic fixed; do
    run "$r" plain "" 100 "$mode"
    for l in "${libs[@]}"; do
      for limit in 25 50; do
        run "$r" "${l%%=*}" "${l#*=}" "$limit" "$mode"
      done
    done
  done
done
python3 - "$OUT/dynshape.txt" <<'PY'
import re, sys, collections
rates = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    m = re.search(r"steps_per_s=([\d.]+)", line)
    if m:
        rates[(f[1], f[2], f[3])].append(float(m.group(1)))
for (name, limit, mode), v in sorted(rates.items()):
    if name == "plain":
        continue
    plain = rates.get(("plain", "100", mode))
    if plain:
        base = sum(plain) / len(plain)
        print(f"{name} at {limit} % {mode}: {sum(v) / len(v) / base:.3f} of plain "
              f"(runs {', '.join(f'{x / base:.3f}' for x in v)}; share {int(limit) / 100:.2f})")
PY
