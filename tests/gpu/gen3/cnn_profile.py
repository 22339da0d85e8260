#!/usr/bin/env python3
"""What cnn_train.py's step costs the GPU (issue 23's pricing check): kernels per step, the sum
of their GPU times (CUPTI, through torch.profiler) against the step's wall time.

    cnn_profile.py [--steps 10] [--batch 96]

Prints: cnn_profile steps=N wall_ms_per_step=W gpu_ms_per_step=G busy=G/W kernels_per_step=K
        and the ten costliest kernels (name, count per step, mean us).
"""
import argparse
import collections
import time

import torch
import torchvision
from torch.profiler import ProfilerActivity, profile

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=10)
p.add_argument("--batch", type=int, default=96)
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


for _ in range(8):
    step().item()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    t0 = time.monotonic()
    for _ in range(a.steps):
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
      "kernels_per_step=%.0f" % (a.steps, 1e3 * wall / a.steps, gpu_us / 1e3 / a.steps,
                                 gpu_us / 1e6 / wall, n / a.steps), flush=True)
for name, (c, us) in sorted(kern.items(), key=lambda kv: -kv[1][1])[:10]:
    print("  %6.1f/step %8.1f us  %s" % (c / a.steps, us / c, name[:90]))
