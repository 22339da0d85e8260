#!/usr/bin/env bash
# Does vgpu see a synchronous cudaMemcpy as a synchronisation on a real GPU? Builds copysync.cu
# and runs it under the library at 50 % with the controller's debug lines, waiting by
# cudaMemcpy, by cudaMemcpy2D, by cudaMemcpy3D, by cudaMemcpy and cudaMemcpy2D with
# cudaMemcpyDefault and by cudaStreamSynchronize: each line's "N syncs" should be about the
# requests a second in all of them ("default": libcudart reaches cuMemcpy, hooked since run
# 144 counted none there; "default2d": cuMemcpy2D with unified ends, counted since 290b8d2,
# 195-196 a second in run 148; "d2d2d": such a copy between device buffers, then a stream
# synchronisation, should count one a request, not two: 195-197 in run 148).
#   OUT=/path VGPU_LIB=/path/libvgpu.so bash tests/gpu/copysync/run.sh
set -u
cd "$(dirname "${BASH_SOURCE[0]}")" || exit 1
: "${OUT:=/tmp/copysync}" "${VGPU_LIB:?VGPU_LIB: the libvgpu.so to test}"
mkdir -p "$OUT"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
"$NVCC" -O2 -o "$OUT/copysync" copysync.cu || exit 1
for mode in copy copy2d copy3d default default2d d2d2d stream; do
    node=$(mktemp -d)
    env LD_PRELOAD="$VGPU_LIB" CUDA_DEVICE_SM_LIMIT=50 LIBCUDA_LOG_LEVEL=4 VGPU_NODE_DIR="$node" \
        CUDA_DEVICE_MEMORY_SHARED_CACHE="$node/region.cache" \
        timeout -k 5 60 "$OUT/copysync" 600 "$mode" > "$OUT/$mode.out" 2> "$OUT/$mode.err"
    echo "$mode rc=$?: $(cat "$OUT/$mode.out")"
    grep -o '[0-9]* syncs ([0-9]* foretold)' "$OUT/$mode.err" | sed "s/^/  $mode: /"
done
