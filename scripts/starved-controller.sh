#!/usr/bin/env bash
# The compute limit with its controllers starved of CPU, on the simulator: busy loops fill the
# host's cores while probes run under CUDA_DEVICE_SM_LIMIT=50.
#
#   scripts/starved-controller.sh [shift|pair] [RUNS] [LOOPS]   (defaults: shift, 40 runs, 8 loops)
#
# shift: one probe runs 2,000 kernels of 20 µs, synchronises, makes its context again and runs
#   1,500 launches of 40 new 1 ms kernels (the scenario of crates/vgpu-tests/tests/compute.rs's
#   a_context_made_again_gets_its_launches_timed_again). 1.5 s of GPU work at 50 % takes about
#   3 s; a run under 2.4 s ran past its share. Exits 1 if any did.
# pair: two containers at 50/50 on one simulated GPU, 1,500 kernels of 1 ms each (they take
#   turns): each takes about 3 s when the GPU is kept busy. Prints both wall times a run.
#
# Builds the debug workspace first; VGPU_TEST_LIB names another library to run. The busy loops
# die with the script.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MODE=${1:-shift}
RUNS=${2:-40}
LOOPS=${3:-8}
TARGET=$(realpath -m "${CARGO_TARGET_DIR:-target}")
cargo build -q --workspace --all-targets
# The probe and the simulator's library directory, as the test harness builds them.
cargo test -q -p vgpu-tests --test compute a_context_made_again >/dev/null
SIM=$TARGET/debug/vgpu-tests/sim
PROBE=$TARGET/debug/vgpu-tests/probe
LIB=${VGPU_TEST_LIB:-$TARGET/debug/libvgpu.so}
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
# probe NODE_DIR REGION OPS...: one limited probe's output.
probe() {
    local node=$1 region=$2
    shift 2
    env -i PATH="$PATH" LD_LIBRARY_PATH="$SIM" VGPU_SIM_MEM=16g LD_PRELOAD="$LIB" \
        CUDA_DEVICE_SM_LIMIT=50 VGPU_NODE_DIR="$node" VGPU_SIM_STATE="$node/sim.state" \
        CUDA_DEVICE_MEMORY_SHARED_CACHE="$region" timeout 120 "$PROBE" "$@" 2>/dev/null || true
}
wall() { sed -n "s/^OK kernels n=$1 wall_ns=//p"; }
past=0
for i in $(seq "$RUNS"); do
    node=$WORK/node$i
    mkdir -p "$node"
    case $MODE in
    shift)
        w=$(probe "$node" "$node/r" init ctx kernels:spin_20us:1:2000:0 sync ctxdestroy ctx \
            kernels:spin_1000us:1-40:1500:0 | wall 1500)
        echo "run $i: ${w:-failed}"
        if [[ -z $w || $w -lt 2400000000 ]]; then
            past=$((past + 1))
        fi
        ;;
    pair)
        probe "$node" "$node/a" init ctx kernels:spin_1000us:1:1500:0 >"$node/a.txt" &
        a=$!
        probe "$node" "$node/b" init ctx kernels:spin_1000us:1:1500:0 >"$node/b.txt" &
        b=$!
        wait "$a" "$b"
        echo "run $i: $(wall 1500 <"$node/a.txt") $(wall 1500 <"$node/b.txt")"
        ;;
    *)
        echo "unknown mode $MODE (shift or pair)" >&2
        exit 2
        ;;
    esac
    rm -rf "$node"
done
if [[ $MODE == shift ]]; then
    echo "$past of $RUNS ran past the share"
    [[ $past -eq 0 ]]
fi
