#!/usr/bin/env bash
# How much the small, host-bound training loop's own rate moves between runs, with no vgpu at
# all: ROUNDS rounds of one free run and one run pinned to CPUS (taskset), 6 s each, with the
# GPU's SM clock sampled meanwhile. Target 2's "of share" divides by this rate, so its spread is
# the benchmark's resolution.
#   [TRAIN_ARGS="--hidden 2048 --depth 4 --batch 1024"] [CPUS=2-5] bash tests/gpu/compute/train_noise.sh [ROUNDS]
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../../.." || exit 1
ROUNDS=${1:-4}; CPUS=${CPUS:-2-5}
read -r -a TA <<< "${TRAIN_ARGS:---hidden 2048 --depth 4 --batch 1024}"
W=$(mktemp -d /tmp/vgpu-noise.XXXXXX)
mean() { awk '$1 == "window" && $2 >= 1 { s += $3; n++ } END { if (n) printf "%.1f", s / n }' "$1"; }
for r in $(seq 1 "$ROUNDS"); do
    for mode in free pinned; do
        pre=(); [ $mode = pinned ] && pre=(taskset -c "$CPUS")
        nvidia-smi --query-gpu=clocks.sm --format=csv,noheader,nounits -lms 200 > "$W/$mode.$r.clk" 2>/dev/null &
        smi=$!
        "${pre[@]}" python3 tests/gpu/compute/train.py 6 "${TA[@]}" > "$W/$mode.$r.out" 2> "$W/$mode.$r.err"
        kill $smi 2>/dev/null; wait $smi 2>/dev/null
        clk=$(awk '{ s += $1; n++ } END { if (n) printf "%.0f", s / n }' "$W/$mode.$r.clk")
        echo "$mode.$r: $(mean "$W/$mode.$r.out") steps/s ($(awk '$1 == "window" { printf "%s ", $3 }' "$W/$mode.$r.out")) sm clock ${clk:-?} MHz"
    done
done
