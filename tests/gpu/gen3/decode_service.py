#!/usr/bin/env python3
"""An eager PyTorch decode service (issue 23): a small GPT-like transformer built here (no
download), fp16, batch 1, a KV cache, greedy decoding; open-loop requests (one every PERIOD s,
each PROMPT tokens of prefill and NEW tokens of decode); latency runs from a request's due time
to its last token on the host.

    decode_service.py [--seconds S] [--start EPOCH] [--period 0.25] [--layers 12] [--dim 768]
                      [--profile REQUESTS]

With --profile: what a request costs the GPU instead, by CUPTI through torch.profiler:
decode_profile requests=N wall_ms_per_request=W gpu_ms_per_request=G kernels_per_request=K

Prints: decode requests=N p50_ms=.. p90_ms=.. p99_ms=.. mean_ms=.. tokens_per_s=.. ... lat_ms=A,B,..
"""
import argparse
import math
import time

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--seconds", type=float, default=12)
p.add_argument("--start", type=float, default=0)
p.add_argument("--start-file", default="", help="a common start (barrier.py), instead of --start")
p.add_argument("--period", type=float, default=0.25)
p.add_argument("--layers", type=int, default=12)
p.add_argument("--dim", type=int, default=768)
p.add_argument("--heads", type=int, default=12)
p.add_argument("--prompt", type=int, default=64)
p.add_argument("--new", type=int, default=32)
p.add_argument("--vocab", type=int, default=50257)
p.add_argument("--profile", type=int, default=0)
a = p.parse_args()
torch.manual_seed(0)
dev = "cuda"
dt = torch.float16
D, H, L = a.dim, a.heads, a.layers
hd = D // H


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(D)
        self.qkv = torch.nn.Linear(D, 3 * D)
        self.proj = torch.nn.Linear(D, D)
        self.ln2 = torch.nn.LayerNorm(D)
        self.fc = torch.nn.Linear(D, 4 * D)
        self.out = torch.nn.Linear(4 * D, D)

    def forward(self, x, cache, pos):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
        q = q.view(b, t, H, hd).transpose(1, 2)
        k = k.view(b, t, H, hd).transpose(1, 2)
        v = v.view(b, t, H, hd).transpose(1, 2)
        ck, cv = cache
        ck[:, :, pos:pos + t] = k
        cv[:, :, pos:pos + t] = v
        kk, vv = ck[:, :, :pos + t], cv[:, :, :pos + t]
        y = F.scaled_dot_product_attention(q, kk, vv, is_causal=(t > 1))
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, D))
        x = x + self.out(F.gelu(self.fc(self.ln2(x))))
        return x


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(a.vocab, D)
        self.pos = torch.nn.Embedding(1024, D)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(L))
        self.ln = torch.nn.LayerNorm(D)
        self.head = torch.nn.Linear(D, a.vocab, bias=False)

    def forward(self, ids, caches, pos):
        t = ids.shape[1]
        x = self.emb(ids) + self.pos(torch.arange(pos, pos + t, device=dev))[None]
        for blk, c in zip(self.blocks, caches):
            x = blk(x, c, pos)
        return self.head(self.ln(x[:, -1:]))


m = Model().to(dev, dt).eval()
maxlen = a.prompt + a.new


SYNC = [0.0]  # seconds the host waited for tokens (the GPU's share of a request's wall time)
# Seconds between one token's read-back and the next within a request (the service's rhythm of
# synchronisations, as the limiter sees it: how much it moves from token to token).
GAPS = []


@torch.no_grad()
def request(prompt):
    caches = [(torch.empty(1, H, maxlen, hd, device=dev, dtype=dt),
               torch.empty(1, H, maxlen, hd, device=dev, dtype=dt)) for _ in range(L)]
    logits = m(prompt, caches, 0)
    out = []
    pos = prompt.shape[1]
    last = None
    for _ in range(a.new):
        tok = logits.argmax(-1)  # [1, 1]
        t = time.perf_counter()
        if last is not None:
            GAPS.append(t - last)
        last = t
        out.append(int(tok.item()))  # the token goes back to the host, as generate does
        SYNC[0] += time.perf_counter() - t
        logits = m(tok, caches, pos)
        pos += 1
    return out


prompt = torch.randint(0, a.vocab, (1, a.prompt), device=dev)
for _ in range(3):
    request(prompt)  # warm-up (kernels, allocator)
torch.cuda.synchronize()
if a.profile:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0 = time.monotonic()
        for _ in range(a.profile):
            request(prompt)
        wall = time.monotonic() - t0
    ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    gpu_us = sum(e.device_time if hasattr(e, "device_time") else e.cuda_time for e in ev)
    print("decode_profile requests=%d wall_ms_per_request=%.2f gpu_ms_per_request=%.2f "
          "kernels_per_request=%.0f mean_kernel_us=%.2f" % (
              a.profile, 1e3 * wall / a.profile, gpu_us / 1e3 / a.profile,
              len(ev) / a.profile, gpu_us / max(1, len(ev))), flush=True)
    raise SystemExit(0)
if a.start_file:
    from barrier import wait_for_start

    a.start = wait_for_start(a.start_file)
while time.time() < a.start:
    time.sleep(0.001)
late = max(0.0, time.time() - a.start) if a.start else 0.0  # start-up outran the common start
t0 = time.monotonic()
lat = []
busy = 0.0
SYNC[0] = 0.0
GAPS.clear()
i = 0
while True:
    due = t0 + i * a.period
    if due >= t0 + a.seconds:
        break
    while time.monotonic() < due:
        time.sleep(0.0002)
    r0 = time.monotonic()
    request(prompt)
    busy += time.monotonic() - r0
    lat.append((time.monotonic() - due) * 1e3)
    i += 1
lat.sort()


def q(x):
    return lat[min(len(lat) - 1, max(0, math.ceil(x * len(lat)) - 1))]


span = time.monotonic() - t0
GAPS.sort()
gap = [1e3 * GAPS[min(len(GAPS) - 1, int(f * len(GAPS)))] if GAPS else 0.0 for f in (0.1, 0.5, 0.9)]
# req_ms: a request's own duration (no queueing); sync_ms: of it, waiting for the GPU's tokens;
# gap_ms: the 10th, 50th and 90th percentiles of the time from one token's read-back to the next.
# lat_ms: every request's latency (sorted), so that rounds can be pooled (a p99 of 32 is
# nearly their maximum).
print("decode requests=%d p50_ms=%.1f p90_ms=%.1f p99_ms=%.1f mean_ms=%.1f tokens_per_s=%.1f "
      "late_s=%.2f period_ms=%.0f req_ms=%.1f sync_ms=%.1f gap_ms=%.2f/%.2f/%.2f lat_ms=%s" % (
          len(lat), q(0.5), q(0.9), q(0.99), sum(lat) / len(lat), len(lat) * a.new / span, late,
          1e3 * a.period, 1e3 * busy / len(lat), 1e3 * SYNC[0] / len(lat), *gap,
          ",".join("%.1f" % x for x in lat)), flush=True)
