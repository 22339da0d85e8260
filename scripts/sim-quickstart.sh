#!/usr/bin/env bash
# The quick start on a machine without a GPU (`make sim`): builds vgpu, puts the simulated
# driver under the real driver's names in target/sim, compiles the C probe against it, and runs
# the README's sequence: `vgpu doctor`, a memory limit refusing an allocation, an SM-limited run
# beside the same run without a limit, and `vgpu status`.
#
# The simulator (crates/vgpu-sim-cuda, crates/vgpu-sim-nvml) stands in for libcuda.so.1 and
# libnvidia-ml.so.1: two 16 GiB GPUs, exact memory accounting, a kernel timeline. It is for
# testing only; never install it. CARGO and CC may be overridden.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO=${CARGO:-cargo}
CC=${CC:-cc}
# Cargo's target directory (CARGO_TARGET_DIR, relative or absolute), as an absolute path.
target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
rel=$target/release
sim=$target/sim

echo "== cargo build --release"
"$CARGO" build --release --locked --quiet -p vgpu-preload -p vgpu-cli -p vgpu-sim-cuda -p vgpu-sim-nvml
mkdir -p "$sim"
ln -sf ../release/libvgpu_sim_cuda.so "$sim/libcuda.so.1"
ln -sf ../release/libvgpu_sim_cuda.so "$sim/libcuda.so"
ln -sf ../release/libvgpu_sim_nvml.so "$sim/libnvidia-ml.so.1"
"$CC" -O1 -o "$sim/probe" crates/vgpu-tests/c/probe.c -L"$sim" -lcuda -ldl -lpthread
export LD_LIBRARY_PATH="$sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
vgpu=$rel/vgpu

step() { printf '\n== %s\n' "$*"; }

step "vgpu doctor --sm 30"
"$vgpu" doctor --sm 30

step "vgpu run --memory 1g -- probe ... alloc:600m alloc:600m   (the second 600 MiB must be refused)"
"$vgpu" run --memory 1g -- "$sim/probe" init ctx meminfo alloc:600m alloc:600m nvml

# 200 kernels of 1 ms: about 200 ms without a limit, about 700 ms at 25 % (800 ms of its share,
# less the 100 ms a new container has in hand: limiter::head_start).
for limit in "" "--sm 25"; do
  step "vgpu run ${limit:+$limit }-- probe ... kernels:spin_1000us:1:200:0   (200 kernels of 1 ms)"
  start=$(date +%s%N)
  # shellcheck disable=SC2086 # $limit is empty or two words
  "$vgpu" run $limit -- "$sim/probe" init ctx kernels:spin_1000us:1:200:0 >/dev/null
  echo "took $(( ($(date +%s%N) - start) / 1000000 )) ms"
done

step "vgpu status   (the last run's region)"
"$vgpu" status
