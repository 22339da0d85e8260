#!/bin/bash
# Issue 23's GPU run: builds HAMi-core from .hami/ (if carried), then runs gen3_bench.py's
# groups. Usage (on the GPU machine, from the repository root, .gpu/ and .hami/ carried):
#   bash tests/gpu/gen3/run.sh GROUP [GROUP...] [-- extra gen3_bench.py arguments]
# The library is .gpu/libvgpu.so (a dist build); results under $OUT (the GPU's clocks through
# the run in clocks.csv). A variant build, if carried, runs the variant scenarios
# (gen3_bench.py's VARIANT modes): .gpu/libvgpu-b.so (this tree with a patch under test
# applied, e.g. turnwork.patch) or .gpu/libvgpu-overlap.so (overlap.patch);
# .gpu/libvgpu-c.so, a second variant, runs the "varc" modes.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
groups=(); extra=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then shift; extra=("$@"); break; fi
  groups+=("$1"); shift
done
hami=""
if [ -d .hami ]; then
  if [ ! -f /tmp/hami/libvgpu.so ]; then
    bash .hami/build-hami-core.sh .hami /tmp/hami/libvgpu.so > "$OUT/hami-build.txt" 2>&1 \
      || echo "HAMi-core build failed (see hami-build.txt)"
  fi
  [ -f /tmp/hami/libvgpu.so ] && hami=/tmp/hami/libvgpu.so
fi
nvidia-smi --query-gpu=name,driver_version,utilization.gpu,memory.used --format=csv > "$OUT/gpu.txt" 2>&1
# The GPU's clocks through the run, every 500 ms, to set beside gen3.txt's scenario times
# (does the SM clock drop in a limited run's idle stretches? run 115's restart of 20 µs).
clocks=""
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu \
    --format=csv -lms 500 > "$OUT/clocks.csv" 2>&1 &
  clocks=$!
  trap '[ -n "$clocks" ] && kill "$clocks" 2> /dev/null' EXIT
fi
git log -1 --format='library commit %H %cd' > "$OUT/commit.txt" 2>/dev/null || true
cat .gpu/commit.txt >> "$OUT/commit.txt" 2>/dev/null || true
lib2=""
[ -f .gpu/libvgpu-overlap.so ] && lib2="$PWD/.gpu/libvgpu-overlap.so"
[ -f .gpu/libvgpu-b.so ] && lib2="$PWD/.gpu/libvgpu-b.so"
lib3=""
[ -f .gpu/libvgpu-c.so ] && lib3="$PWD/.gpu/libvgpu-c.so"
PYTHONUNBUFFERED=1 python3 tests/gpu/gen3/gen3_bench.py "${groups[@]}" --lib "$PWD/.gpu/libvgpu.so" \
  --lib2 "$lib2" --lib3 "$lib3" --hami "$hami" --out "$OUT" "${extra[@]}"
# Issue 23's bars against this run.
python3 tests/gpu/gen3/summarize.py "$OUT/gen3.txt" | tee "$OUT/summary.txt"
