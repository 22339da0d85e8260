"""A program whose kernels turn expensive: eager PyTorch, 2,000 tiny element-wise ops and a
synchronisation, then 1,200 float32 matrix products of 40 shapes it never ran before (each its own
kernel key for the limiter, 0.3-3 ms on an H200), launched without synchronising, then one
synchronisation. Prints the second phase's wall time and GPU time (CUDA events around it).

Under CUDA_DEVICE_SM_LIMIT=50 the second phase should take about twice its GPU time: the new
kernels are charged the tiny ops' mean price until a bracket prices each, and a limiter that
admits on that guess runs them past the share (the simulator did, with its controller starved
of CPU: scripts/starved-controller.sh).

  python3 shift_bench.py [launches]
Output: one line "shift wall_ms=... gpu_ms=... share=... t0=... t1=..." (share: GPU time / wall
time, %; t0 and t1: the second phase's start and end on CLOCK_MONOTONIC, s, comparable across
processes).
"""
import sys
import time

import torch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1200
torch.backends.cuda.matmul.allow_tf32 = False
dev = torch.device("cuda")
small = torch.ones(1024, device=dev)
for _ in range(2000):
    small.add_(1.0)
torch.cuda.synchronize()
sizes = [1024 + 96 * i for i in range(40)]
mats = {s: torch.randn(s, s, device=dev) for s in sizes}
outs = {s: torch.empty(s, s, device=dev) for s in sizes}
torch.cuda.synchronize()
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
t0 = time.monotonic()
start.record()
for i in range(n):
    s = sizes[i % len(sizes)]
    torch.matmul(mats[s], mats[s], out=outs[s])
end.record()
torch.cuda.synchronize()
wall = (time.monotonic() - t0) * 1e3
gpu = start.elapsed_time(end)
print(f"shift wall_ms={wall:.1f} gpu_ms={gpu:.1f} share={100 * gpu / wall:.1f} "
      f"t0={t0:.3f} t1={t0 + wall / 1e3:.3f}", flush=True)
