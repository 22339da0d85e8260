"""The kernel sequence of one step of train.py, for the model's training workload.

    python3 step_trace.py [--hidden 4096 --depth 4 --batch 4096] [--steps 5] [--json PATH]

Runs train.py's step (same model, same AdamW, bf16 autocast, one synchronize per step) 20 times
to warm up, then profiles --steps steps with torch.profiler (CUDA activity) and prints, for the
middle profiled step:
    step kernels=<n> gpu_busy_us=<sum of kernel times> span_us=<first start to last end>
    kernel <i> <duration µs> <gap before it on the GPU, µs> <host launch to start, µs> <name>
then a summary line of the kernel durations (count over 100 µs, their sum). --json also writes
the chrome trace.
"""
import argparse
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()

    import torch
    from torch.profiler import ProfilerActivity, profile

    from train import make_step

    step = make_step(a.hidden, a.depth, a.batch)

    for _ in range(20):
        step()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(a.steps):
            with torch.profiler.record_function("vgpu_step"):
                step()
    if a.json:
        prof.export_chrome_trace(a.json)

    evs = prof.events()
    steps = sorted(
        (e.time_range.start, e.time_range.end) for e in evs if e.name == "vgpu_step"
    )
    kernels = sorted(
        (e for e in evs if e.device_type == torch.autograd.DeviceType.CUDA),
        key=lambda e: e.time_range.start,
    )
    launches = sorted(
        (e.time_range.start for e in evs if "LaunchKernel" in e.name or "cuLaunch" in e.name)
    )
    mid = steps[len(steps) // 2]
    nxt = steps[len(steps) // 2 + 1][0] if len(steps) // 2 + 1 < len(steps) else float("inf")
    mine = [k for k in kernels if mid[0] <= k.time_range.start < nxt]
    host = [t for t in launches if mid[0] <= t < nxt]
    busy = sum(k.time_range.elapsed_us() for k in mine)
    span = mine[-1].time_range.end - mine[0].time_range.start if mine else 0
    print("step kernels=%d gpu_busy_us=%.1f span_us=%.1f host_step_us=%.1f launches=%d"
          % (len(mine), busy, span, mid[1] - mid[0], len(host)))
    prev_end = None
    for i, k in enumerate(mine):
        d = k.time_range.elapsed_us()
        gap = 0.0 if prev_end is None else k.time_range.start - prev_end
        lead = k.time_range.start - host[i] if i < len(host) else float("nan")
        prev_end = k.time_range.end
        print("kernel %d %.1f %.1f %.1f %s" % (i, d, gap, lead, k.name[:60]))
    long = [k.time_range.elapsed_us() for k in mine if k.time_range.elapsed_us() > 100]
    print("summary long=%d long_sum_us=%.1f short=%d short_sum_us=%.1f"
          % (len(long), sum(long), len(mine) - len(long), busy - sum(long)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
