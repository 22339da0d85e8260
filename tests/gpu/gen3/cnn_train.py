#!/usr/bin/env python3
"""A CNN training loop (issue 23): torchvision resnet50 with random weights, bf16 autocast,
batch 96, SGD with momentum, random data; Python overhead between kernels as in real training.

    cnn_train.py [--seconds S] [--start EPOCH] [--batch 96] [--profile STEPS]

Prints: cnn steps=N steps_per_s=X late_s=L   (steps completed in the window, host-synchronised
per step; L: how far past --start the window began, start-up having taken longer)
With --profile: what a step costs the GPU instead (issue 23's pricing check), by CUPTI through
torch.profiler: cnn_profile steps=N wall_ms_per_step=W gpu_ms_per_step=G busy=G/W
kernels_per_step=K, and the ten costliest kernels.
"""
import argparse
import time

import torch
import torchvision

p = argparse.ArgumentParser()
p.add_argument("--seconds", type=float, default=12)
p.add_argument("--start", type=float, default=0)
p.add_argument("--start-file", default="", help="a common start (barrier.py), instead of --start")
p.add_argument("--batch", type=int, default=96)
p.add_argument("--profile", type=int, default=0)
a = p.parse_args()
torch.manual_seed(0)
torch.backends.cudnn.benchmark = True
m = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(a.batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
y = torch.randint(0, 1000, (a.batch,), device="cuda")
lossf = torch.nn.CrossEntropyLoss()


def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = lossf(m(x), y)
    loss.backward()
    opt.step()
    return loss


for _ in range(5):
    step()
torch.cuda.synchronize()
if a.profile:
    import collections
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0 = time.monotonic()
        for _ in range(a.profile):
            step().item()
        wall = time.monotonic() - t0
    kern = collections.defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            k = kern[e.name]
            k[0] += 1
            k[1] += e.device_time if hasattr(e, "device_time") else e.cuda_time
    gpu_us = sum(v[1] for v in kern.values())
    n = sum(v[0] for v in kern.values())
    print("cnn_profile steps=%d wall_ms_per_step=%.2f gpu_ms_per_step=%.2f busy=%.3f "
          "kernels_per_step=%.0f" % (a.profile, 1e3 * wall / a.profile, gpu_us / 1e3 / a.profile,
                                     gpu_us / 1e6 / wall, n / a.profile), flush=True)
    for name, (c, us) in sorted(kern.items(), key=lambda kv: -kv[1][1])[:10]:
        print("  %6.1f/step %8.1f us  %s" % (c / a.profile, us / c, name[:90]))
    raise SystemExit(0)
if a.start_file:
    from barrier import wait_for_start

    a.start = wait_for_start(a.start_file)
while time.time() < a.start:
    time.sleep(0.001)
late = max(0.0, time.time() - a.start) if a.start else 0.0  # start-up outran the common start
t0 = time.monotonic()
n = 0
while time.monotonic() < t0 + a.seconds:
    step().item()  # the loss goes back to the host each step, as a training loop logs it
    n += 1
span = time.monotonic() - t0
print("cnn steps=%d steps_per_s=%.3f late_s=%.2f" % (n, n / span, late), flush=True)
