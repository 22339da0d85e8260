#!/usr/bin/env bash
# Issue 26 items 9-11 on a real GPU: the refusal log (a PyTorch allocation past the limit shows
# in `vgpu status` and its JSON with who holds the budget), observe-only mode (PyTorch past an
# injected limit is not refused, the region shows its memory and GPU time), and `vgpu doctor`'s
# library version and measured compute share at 30 % and 50 %. Writes everything under $OUT
# (default: a temporary directory) and prints it.
#
#   bash tests/gpu/explain/run-explain.sh     (repo root; target/release/{libvgpu.so,vgpu},
#                                             or VGPU_LIB / VGPU_BIN)
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../../.." || exit 1
VGPU=${VGPU_BIN:-$PWD/target/release/vgpu}
LIB=${VGPU_LIB:-$PWD/target/release/libvgpu.so}
OUT=${OUT:-$(mktemp -d /tmp/vgpu-explain.XXXXXX)}
W=$(mktemp -d /tmp/vgpu-explain-w.XXXXXX)
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }

# A PyTorch process that takes HOLD GiB, tries MORE GiB more, reports, then sleeps S seconds.
cat > "$W/hold.py" <<'PY'
import sys, time, torch
hold, more, sleep = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
GiB = 1 << 30
x = torch.empty(int(hold * GiB), dtype=torch.uint8, device="cuda")
try:
    y = torch.empty(int(more * GiB), dtype=torch.uint8, device="cuda")
    print(f"allocated {hold} + {more} GiB", flush=True)
except torch.OutOfMemoryError as e:
    print(f"refused {more} GiB: {str(e).splitlines()[0]}", flush=True)
a = torch.randn(4096, 4096, device="cuda")
t = time.time()
while time.time() - t < sleep:
    a = a @ a
    a = a / a.norm()
torch.cuda.synchronize()
print("done", flush=True)
PY

log "$(date -u +%FT%TZ) refusal log: a holder with 2 GiB, then a second process asking 3 GiB under a shared 4 GiB limit"
R=$W/refusal.cache
env LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_LIMIT=4g CUDA_DEVICE_MEMORY_SHARED_CACHE="$R" \
    timeout 120 python3 "$W/hold.py" 2 0.001 30 > "$OUT/holder.log" 2>&1 &
HOLDER=$!
sleep 15
env LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_LIMIT=4g CUDA_DEVICE_MEMORY_SHARED_CACHE="$R" \
    LIBCUDA_LOG_LEVEL=4 timeout 120 python3 "$W/hold.py" 0.5 3 1 > "$OUT/refused.log" 2>&1
log "refused process (LIBCUDA_LOG_LEVEL=4: every refusal is a line):"
grep -E "refused|out of memory" "$OUT/refused.log" | tee -a "$OUT/summary.txt"
"$VGPU" status --region "$R" > "$OUT/refusal-status.txt" 2>&1
"$VGPU" status --region "$R" --json > "$OUT/refusal-status.json" 2>&1
"$VGPU" metrics --region "$R" --once 2>&1 | grep -E '^vgpu_(last_refusal|build_info|alloc_denied)' > "$OUT/refusal-metrics.txt"
cat "$OUT/refusal-status.txt" "$OUT/refusal-metrics.txt" | tee -a "$OUT/summary.txt"
python3 - "$OUT/refusal-status.json" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
j = json.load(open(sys.argv[1]))
r = j["refusals"]
print(f"check: {len(r)} refusal(s) recorded; newest: requested {r[0]['requested'] / 2**30:.2f} GiB, "
      f"in use {r[0]['used'] / 2**30:.2f} of {r[0]['limit'] / 2**30:.2f} GiB, own {r[0]['own'] / 2**30:.2f} GiB, "
      f"holder pid {r[0]['holder_pid']} with {r[0]['holder_used'] / 2**30:.2f} GiB" if r else "check: FAIL no refusal recorded")
PY
wait $HOLDER

log "observe-only: VGPU_OBSERVE=1 with an injected 2 GiB limit and SM 30 %: 3 GiB + 1 GiB and 10 s of matmuls"
O=$W/observe.cache
env LD_PRELOAD="$LIB" VGPU_OBSERVE=1 CUDA_DEVICE_MEMORY_LIMIT=2g CUDA_DEVICE_SM_LIMIT=30 \
    CUDA_DEVICE_MEMORY_SHARED_CACHE="$O" VGPU_NODE_DIR="$W/node" \
    timeout 120 python3 "$W/hold.py" 3 1 10 > "$OUT/observe.log" 2>&1 &
OBS=$!
sleep 18
"$VGPU" status --region "$O" > "$OUT/observe-status.txt" 2>&1
"$VGPU" top --region "$O" --once --interval 1000 > "$OUT/observe-top.txt" 2>&1
wait $OBS
"$VGPU" status --region "$O" --json > "$OUT/observe-after.json" 2>&1
cat "$OUT/observe.log" "$OUT/observe-status.txt" "$OUT/observe-top.txt" | tee -a "$OUT/summary.txt"
python3 - "$OUT/observe-after.json" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
d = json.load(open(sys.argv[1]))["devices"][0]
print(f"check: limit {d['limit']}, denied {d['denied']}, peak {d['peak'] / 2**30:.2f} GiB, "
      f"gpu time {d['gpu_ns'] / 1e9:.2f} s, throttled {d['throttled_ns'] / 1e9:.2f} s, launches {d['launches']}")
PY

for sm in 30 50; do
    log "vgpu doctor --sm $sm"
    timeout 120 "$VGPU" doctor --lib "$LIB" --sm "$sm" 2>&1 | tee "$OUT/doctor-$sm.txt" | tee -a "$OUT/summary.txt"
done
log "vgpu doctor with CUDA_DISABLE_CONTROL=true"
CUDA_DISABLE_CONTROL=true timeout 120 "$VGPU" doctor --lib "$LIB" 2>&1 | tee "$OUT/doctor-disabled.txt" | tee -a "$OUT/summary.txt"
rm -rf "$W"
echo "results in $OUT"
