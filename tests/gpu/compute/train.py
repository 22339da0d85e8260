"""A small PyTorch training loop, for the compute-limit benchmark.

    python3 train.py SECONDS [--hidden 4096 --depth 4 --batch 4096]

An MLP on random data (bf16 autocast, AdamW, optimizer step included, no data loading), one
torch.cuda.synchronize() per step, as a training loop that logs its loss would. After 1 s of
warm-up (not counted) it prints, like sm_bench:
    info workload=train ... step_ms=...
    window <i> <steps completed in [i, i+1) s>     i = 0 .. SECONDS-1
    total <steps> <SECONDS>
Steps are counted by the host time at which they completed. The model size is fixed (not
calibrated), so every run does the same work per step.
"""
import argparse
import math
import sys
import time

WARMUP = 1.0


def make_step(hidden, depth, batch):
    """The training step (also profiled by step_trace.py): an MLP of `depth` hidden layers on
    random data, bf16 autocast, AdamW, one torch.cuda.synchronize()."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    dev = torch.device("cuda")
    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(hidden, hidden), nn.GELU()]
    layers.append(nn.Linear(hidden, 1000))
    model = nn.Sequential(*layers).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, hidden, device=dev)
    y = torch.randint(0, 1000, (batch,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()

    return step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("seconds", type=int)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--batch", type=int, default=4096)
    a = ap.parse_args()
    seconds = max(1, a.seconds)

    t_proc = time.monotonic()
    import torch

    step = make_step(a.hidden, a.depth, a.batch)

    step()  # first step: cuBLAS and kernel loading
    t_init = time.monotonic() - t_proc

    t0 = time.monotonic()
    t_start = t0 + WARMUP
    t_end = t_start + seconds
    units = [0] * seconds
    printed = 0
    warm = late = 0
    warm_steps_t = []
    announced = False
    while True:
        ts = time.monotonic()
        if ts >= t_end:
            break
        step()
        t = time.monotonic()
        rel = t - t_start
        if rel < 0:
            warm += 1
            warm_steps_t.append(t - ts)
            continue
        if not announced:
            tail = warm_steps_t[len(warm_steps_t) // 2:] or [t - ts]
            print(
                "info workload=train hidden=%d depth=%d batch=%d step_ms=%.3f seconds=%d "
                "warmup_s=%.1f init_s=%.3f device=\"%s\" torch=%s"
                % (a.hidden, a.depth, a.batch, 1000 * sum(tail) / len(tail), seconds, WARMUP,
                   t_init, torch.cuda.get_device_name(0), torch.__version__),
                flush=True,
            )
            announced = True
        idx = int(math.floor(rel))
        if idx >= seconds:
            late += 1
            idx = seconds
        else:
            units[idx] += 1
        while printed < idx:
            print("window %d %d" % (printed, units[printed]), flush=True)
            printed += 1
    while printed < seconds:
        print("window %d %d" % (printed, units[printed]), flush=True)
        printed += 1
    print("total %d %d" % (sum(units), seconds))
    print("extra warmup_units=%d late_units=%d" % (warm, late))
    print("drain 0.000", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
