#!/bin/bash
# The machine's probes for the node token's timing: what passing the GPU from one process to
# another costs and where the time goes (handover_probe.cu, run 84), and how late a timed
# sleep wakes with the default timer slack and with 1 ns (timer_probe.c, run 85). Results
# under $OUT/handover.txt.
# Usage (GPU machine, repository root): bash tests/gpu/gen3/handover.sh [rounds] [kernel_us]
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
dir=$(mktemp -d)
nvcc -O2 -o "$dir/handover_probe" tests/gpu/gen3/handover_probe.cu > "$OUT/handover-build.txt" 2>&1 \
  || { echo "handover_probe: build failed"; cat "$OUT/handover-build.txt"; exit 1; }
timeout 120 "$dir/handover_probe" "${1:-400}" "${2:-1000}" | tee "$OUT/handover.txt"
# How late the controller's timed looks wake, with the default timer slack and with 1 ns.
cc -O2 -o "$dir/timer_probe" tests/gpu/gen3/timer_probe.c && "$dir/timer_probe" | tee -a "$OUT/handover.txt"
