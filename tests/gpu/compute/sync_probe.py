#!/usr/bin/env python3
"""Which of PyTorch's ways to wait for the GPU vgpu's synchronisation hooks see.

    LD_PRELOAD=libvgpu.so CUDA_DEVICE_SM_LIMIT=50 LIBCUDA_LOG_LEVEL=4 \\
        python3 tests/gpu/compute/sync_probe.py 2> probe.err

For each way, 20 rounds of: about 1 ms of GPU work (three 2048 x 2048 matmuls), the wait, then
6 ms of host sleep. The work must end well within 2 ms of the last launch: a wait the hooks see
then ends the window *quiet*, 0.5 ms after it returns; one they do not see ends it *idle*, 2 ms
after the last launch. (With longer work both end idle: once the last launch is 2 ms old, a
window closes idle the moment a seen wait returns, so the H200's training trace of run 27
could not tell.) It prints a marker line to stderr before each way, so that the controller's
debug lines that follow (one per window) can be counted per way.
"""
import sys
import time

import torch

x = torch.randn(2048, 2048, device="cuda")
ways = {
    "torch.cuda.synchronize": torch.cuda.synchronize,
    "stream.synchronize": lambda: torch.cuda.current_stream().synchronize(),
    "event.synchronize": None,
    "tensor.item": None,
}
for name in ways:
    print("=== %s" % name, file=sys.stderr, flush=True)
    time.sleep(0.05)
    for _ in range(20):
        y = x
        for _ in range(3):
            y = y @ x
        if name == "event.synchronize":
            e = torch.cuda.Event()
            e.record()
            e.synchronize()
        elif name == "tensor.item":
            y[0, 0].item()
        else:
            ways[name]()
        time.sleep(0.006)
    time.sleep(0.05)
print("done", file=sys.stderr, flush=True)
