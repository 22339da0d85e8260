#!/usr/bin/env bash
# The compute limit with its controller starved of CPU, on the simulator: busy loops fill the
# host's cores, and a probe runs 2,000 kernels of 20 µs, synchronises, makes its context again
# and runs 1,500 launches of 40 new 1 ms kernels under CUDA_DEVICE_SM_LIMIT=50 (the scenario of
# crates/vgpu-tests/tests/compute.rs's a_context_made_again_gets_its_launches_timed_again).
# 1.5 s of GPU work at 50 % takes about 3 s; a run under 2.4 s ran past its share.
#
#   scripts/starved-controller.sh [RUNS] [LOOPS]     (defaults: 40 runs, 8 busy loops)
#
# Builds the debug workspace first. Prints each run's wall time (ns) and a closing
# "N of RUNS ran past the share" line; exits 1 if any did. The busy loops die with the script.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RUNS=${1:-40}
LOOPS=${2:-8}
TARGET=$(realpath -m "${CARGO_TARGET_DIR:-target}")
cargo build -q --workspace --all-targets
# The probe and the simulator's library directory, as the test harness builds them.
cargo test -q -p vgpu-tests --test compute a_context_made_again >/dev/null
SIM=$TARGET/debug/vgpu-tests/sim
PROBE=$TARGET/debug/vgpu-tests/probe
LIB=$TARGET/debug/libvgpu.so
WORK=$(mktemp -d)
HOGS=()
cleanup() {
    for p in "${HOGS[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
for _ in $(seq "$LOOPS"); do
    (while :; do :; done) &
    HOGS+=($!)
done
past=0
for i in $(seq "$RUNS"); do
    rm -rf "$WORK/node" && mkdir -p "$WORK/node"
    out=$(env -i PATH="$PATH" LD_LIBRARY_PATH="$SIM" VGPU_SIM_MEM=16g LD_PRELOAD="$LIB" \
        CUDA_DEVICE_SM_LIMIT=50 VGPU_NODE_DIR="$WORK/node" \
        "$PROBE" init ctx kernels:spin_20us:1:2000:0 sync ctxdestroy ctx \
        kernels:spin_1000us:1-40:1500:0 2>/dev/null || true)
    wall=$(sed -n 's/^OK kernels n=1500 wall_ns=//p' <<<"$out")
    echo "run $i: ${wall:-failed}"
    if [[ -z $wall || $wall -lt 2400000000 ]]; then
        past=$((past + 1))
    fi
done
echo "$past of $RUNS ran past the share"
[[ $past -eq 0 ]]
