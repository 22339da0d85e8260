#!/usr/bin/env python3
"""A CNN training loop (issue 23): torchvision resnet50 with random weights, bf16 autocast,
batch 96, SGD with momentum, random data; Python overhead between kernels as in real training.

    cnn_train.py [--seconds S] [--start EPOCH] [--batch 96]

Prints: cnn steps=N steps_per_s=X   (steps completed in the window, host-synchronised per step)
"""
import argparse
import time

import torch
import torchvision

p = argparse.ArgumentParser()
p.add_argument("--seconds", type=float, default=12)
p.add_argument("--start", type=float, default=0)
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


for _ in range(5):
    step()
torch.cuda.synchronize()
while time.time() < a.start:
    time.sleep(0.001)
t0 = time.monotonic()
n = 0
while time.monotonic() < t0 + a.seconds:
    step().item()  # the loss goes back to the host each step, as a training loop logs it
    n += 1
span = time.monotonic() - t0
print("cnn steps=%d steps_per_s=%.3f" % (n, n / span), flush=True)
