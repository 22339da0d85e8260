#!/usr/bin/env bash
# A/B of two libraries on the PyTorch training loop (train.py) alone under a limit, interleaved:
#   OUT=/path [TRAIN_ARGS="--hidden 2048 --depth 4 --batch 1024"] \
#       bash tests/gpu/compute/ab_train.sh LIB_A LIB_B [LIMITS] [ROUNDS]
# Each run's windows (steps per 1 s) and the controller's debug lines (LIBCUDA_LOG_LEVEL=4) go to
# $OUT/ab-train.tgz; the table (share = mean steps of windows 1.. / the plain run's) to stdout.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../../.." || exit 1
A=$(readlink -f "$1"); B=$(readlink -f "$2"); LIMITS=${3:-"25 50"}; ROUNDS=${4:-2}
: "${OUT:=$PWD/out/ab}"
W=$(mktemp -d /tmp/vgpu-ab.XXXXXX)
mkdir -p "$OUT"
mean() { awk '$1 == "window" && $2 >= 1 { s += $3; n++ } END { if (n) printf "%.2f", s / n }' "$1"; }
read -r -a TA <<< "${TRAIN_ARGS:-}"
python3 tests/gpu/compute/train.py 4 "${TA[@]}" > "$W/plain.out" 2> "$W/plain.err"
base=$(mean "$W/plain.out")
echo "plain: $base steps/s ($(awk '$1 == "window" { printf "%s ", $3 }' "$W/plain.out"))"
for r in $(seq 1 "$ROUNDS"); do
    for l in $LIMITS; do
        for v in a b; do
            lib=$A; [ $v = b ] && lib=$B
            n=$v.$l.$r
            mkdir -p "$W/node.$n"
            LD_PRELOAD=$lib CUDA_DEVICE_SM_LIMIT=$l CUDA_DEVICE_MEMORY_SHARED_CACHE=$W/$n.cache \
                VGPU_NODE_DIR=$W/node.$n LIBCUDA_LOG_LEVEL=4 \
                timeout 120 python3 tests/gpu/compute/train.py 4 "${TA[@]}" > "$W/$n.out" 2> "$W/$n.err"
            m=$(mean "$W/$n.out")
            echo "$n: $(awk -v m="$m" -v b="$base" 'BEGIN { printf "%.1f %%", 100 * m / b }') ($(awk '$1 == "window" { printf "%s ", $3 }' "$W/$n.out"))"
        done
    done
done
tar czf "$OUT/ab-train.tgz" -C "$W" .
