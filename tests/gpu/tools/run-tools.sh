#!/usr/bin/env bash
# The live monitor on a real job: a PyTorch matmul loop holding 2 GiB under a 4 GiB memory
# limit and SM 40 %, seen by `vgpu top --once` (text and JSON), `vgpu status`, `vgpu metrics`
# (one exposition, and served over HTTP), then `vgpu limit --sm 20` on the live job and `top`
# again. The job prints its steps per second, so the change shows in its own rate too.
#
#   OUT=/path VGPU_LIB=.gpu/libvgpu.so VGPU_BIN=.gpu/vgpu bash tests/gpu/tools/run-tools.sh
#
# Writes $OUT/tools.txt (everything, in order).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../../.." || exit 1
LIB=$(readlink -f "${VGPU_LIB:-target/release/libvgpu.so}")
VGPU=$(readlink -f "${VGPU_BIN:-target/release/vgpu}")
OUT=${OUT:-$(mktemp -d /tmp/vgpu-tools.XXXXXX)}
W=$(mktemp -d /tmp/vgpu-tools-w.XXXXXX)
mkdir -p "$OUT"
R=$W/region.cache
exec > >(tee "$OUT/tools.txt") 2>&1
say() { echo "== $(date -u +%T) $*"; }
cat > "$W/job.py" <<'PY'
import sys, time, torch
secs = float(sys.argv[1])
held = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")  # 2 GiB
a = torch.randn(4096, 4096, device="cuda")
t0 = last = time.time(); n = done = 0
while time.time() - t0 < secs:
    for _ in range(8):
        a = a @ a
        a = a / a.norm()
    torch.cuda.synchronize()
    n += 1
    if time.time() - last >= 1:
        print("second %d steps %d" % (int(time.time() - t0), n - done), flush=True)
        done, last = n, time.time()
print("total steps %d" % n, flush=True)
PY
say "job under CUDA_DEVICE_MEMORY_LIMIT=4g CUDA_DEVICE_SM_LIMIT=40"
env LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_SHARED_CACHE="$R" CUDA_DEVICE_MEMORY_LIMIT=4g \
    CUDA_DEVICE_SM_LIMIT=40 timeout 90 python3 "$W/job.py" 26 > "$W/job.log" 2>&1 &
job=$!
sleep 10
say "vgpu top --once"; timeout 20 "$VGPU" top --once --region "$R"
say "vgpu top --once --json"; timeout 20 "$VGPU" top --once --json --region "$R"
say "vgpu status"; timeout 20 "$VGPU" status --region "$R"
say "vgpu metrics --once"; timeout 20 "$VGPU" metrics --once --region "$R" | grep -v '^#' | head -40
say "vgpu metrics --listen (served)"
timeout 30 "$VGPU" metrics --listen 127.0.0.1:19431 --region "$R" > "$W/metrics.log" 2>&1 &
srv=$!
sleep 1
if command -v curl > /dev/null; then
    timeout 10 curl -s http://127.0.0.1:19431/metrics | grep -v '^#' | head -12
else
    timeout 10 python3 -c "import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:19431/metrics').read().decode()[:1500])"
fi
kill "$srv" 2> /dev/null
say "vgpu limit --sm 20 (live)"; timeout 20 "$VGPU" limit --region "$R" --sm 20
sleep 6
say "vgpu top --once --json after the change"; timeout 20 "$VGPU" top --once --json --region "$R"
wait "$job"; echo "job rc $?"
say "the job's own rate"; cat "$W/job.log"
rm -rf "$W"
