#!/bin/bash
# Issue 23's GPU run: builds HAMi-core from .hami/ (if carried), then runs gen3_bench.py's
# groups. Usage (on the GPU machine, from the repository root, .gpu/ and .hami/ carried):
#   bash tests/gpu/gen3/run.sh GROUP [GROUP...] [-- extra gen3_bench.py arguments]
# The library is .gpu/libvgpu.so (a dist build); results under $OUT (the GPU's clocks through
# the run in clocks.csv). A variant build, if carried, runs the variant scenarios
# (gen3_bench.py's VARIANT modes): .gpu/libvgpu-b.so (this tree with a patch under test
# applied, e.g. turnwork.patch) or .gpu/libvgpu-overlap.so (overlap.patch);
# .gpu/libvgpu-c.so, a second variant, runs the "varc" modes. The machine, the kit and the
# HAMi-core build go to one file, machine.txt (the device brings back at most eight files: a
# call that also runs overhead.py into $OUT keeps its output).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
groups=(); extra=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then shift; extra=("$@"); break; fi
  groups+=("$1"); shift
done
machine="$OUT/machine.txt"
nvidia-smi --query-gpu=name,driver_version,utilization.gpu,memory.used --format=csv > "$machine" 2>&1
# The kit names its build (.gpu/commit.txt); the device copy's git head may lag it.
cat .gpu/commit.txt >> "$machine" 2>/dev/null || true
git log -1 --format='the device copy'"'"'s git head %H %cd' >> "$machine" 2>/dev/null || true
hami=""
if [ -d .hami ]; then
  if [ ! -f /tmp/hami/libvgpu.so ]; then
    { echo "--- HAMi-core build"; bash .hami/build-hami-core.sh .hami /tmp/hami/libvgpu.so; } \
      >> "$machine" 2>&1 || echo "HAMi-core build failed (see machine.txt)"
  fi
  [ -f /tmp/hami/libvgpu.so ] && hami=/tmp/hami/libvgpu.so
fi
# The GPU's clocks through the run, every 500 ms, to set beside gen3.txt's scenario times
# (run 118: the SM clock stays at its top through a limited run; it drops after ~2 s idle).
clocks=""
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu \
    --format=csv -lms 500 > "$OUT/clocks.csv" 2>&1 &
  clocks=$!
  trap '[ -n "$clocks" ] && kill "$clocks" 2> /dev/null' EXIT
fi
lib2=""
[ -f .gpu/libvgpu-overlap.so ] && lib2="$PWD/.gpu/libvgpu-overlap.so"
[ -f .gpu/libvgpu-b.so ] && lib2="$PWD/.gpu/libvgpu-b.so"
lib3=""
[ -f .gpu/libvgpu-c.so ] && lib3="$PWD/.gpu/libvgpu-c.so"
PYTHONUNBUFFERED=1 python3 tests/gpu/gen3/gen3_bench.py "${groups[@]}" --lib "$PWD/.gpu/libvgpu.so" \
  --lib2 "$lib2" --lib3 "$lib3" --hami "$hami" --out "$OUT" "${extra[@]}"
# Issue 23's bars against this run.
python3 tests/gpu/gen3/summarize.py "$OUT/gen3.txt" | tee "$OUT/summary.txt"
