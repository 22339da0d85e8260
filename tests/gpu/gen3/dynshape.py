#!/usr/bin/env python3
"""Training over dynamic shapes (the compute limit's unpriced launches): a transformer encoder
(6 layers, d 1024, bf16 autocast, AdamW) on batches whose sequence length is drawn anew each
step, so most steps launch kernels over grids the limiter has never timed.

    dynshape.py [--seconds S] [--lengths 64-1024] [--batch 16] [--fixed]

Prints: dynshape steps=N steps_per_s=X tokens_per_s=T shapes=K
(--fixed: every step at the longest length, the same shapes throughout: the reference for
what a limit should leave of the rate.) Run it plain and under CUDA_DEVICE_SM_LIMIT=25/50:
the limited rate over the plain one should be about the share (GPU-bound), with --fixed and
without. Before the unpriced-launch fix the limiter charged launches of never-timed kernels a
10 us guess, and on the model and the simulator such a program ran unlimited.
"""
import argparse
import random
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--seconds", type=float, default=10)
p.add_argument("--lengths", default="64-1024")
p.add_argument("--batch", type=int, default=16)
p.add_argument("--fixed", action="store_true")
a = p.parse_args()
lo, hi = (int(v) for v in a.lengths.split("-"))
torch.manual_seed(0)
random.seed(0)
layer = torch.nn.TransformerEncoderLayer(1024, 16, 4096, batch_first=True, dropout=0.0)
m = torch.nn.TransformerEncoder(layer, 6).cuda()
opt = torch.optim.AdamW(m.parameters(), lr=1e-4)


def step(length):
    x = torch.randn(a.batch, length, 1024, device="cuda")
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = m(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    return length


def length():
    # Multiples of 8 (as a padding collator makes them), drawn anew each step.
    return hi if a.fixed else random.randrange(lo, hi + 1, 8)


for _ in range(3):
    step(hi)
torch.cuda.synchronize()
steps, tokens, shapes = 0, 0, set()
t0 = time.monotonic()
while time.monotonic() - t0 < a.seconds:
    n = step(length())
    torch.cuda.synchronize()
    steps += 1
    tokens += n * a.batch
    shapes.add(n)
dt = time.monotonic() - t0
print(
    f"dynshape steps={steps} steps_per_s={steps / dt:.3f} tokens_per_s={tokens / dt:.0f} "
    f"shapes={len(shapes)}",
    flush=True,
)
