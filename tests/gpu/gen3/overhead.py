#!/usr/bin/env python3
"""Launch overhead of vgpu, interleaved with plain runs (issue 23 target 6).

    python3 tests/gpu/gen3/overhead.py --lib LIB [--rounds 15] [--launches 200000] [--pools 8]

Each round runs launch_bench (pinned to one core; the median of its bursts) plain, with only a memory limit, and with an SM limit (100 % work
conserving would be a different path; the SM limit is 90 % so that the gate is on), in a fresh
order per round. Reports, per mode, the median of the per-round differences against the same
round's plain run, with a 95 % bootstrap interval (ns per launch), and the same for a launch and
a synchronisation (ns per round; with --pools, that many memory pools in use, which vgpu
re-reads after a synchronisation under a memory limit). Writes $OUT/overhead.txt.
"""
import argparse
import os
import random
import re
import shutil
import statistics
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
p = argparse.ArgumentParser()
p.add_argument("--lib", required=True)
p.add_argument("--rounds", type=int, default=15)
p.add_argument("--launches", type=int, default=200000)
p.add_argument("--pools", type=int, default=0)
p.add_argument("--out", default=os.environ.get("OUT", "."))
a = p.parse_args()
work = tempfile.mkdtemp(prefix="vgpu-ovh.")
exe = os.path.join(work, "launch_bench")
nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
subprocess.run([nvcc, "-O2", "-arch=sm_90", "-o", exe, os.path.join(HERE, "launch_bench.cu")],
               check=True, timeout=300)
modes = {
    "plain": {},
    "memory": {"LD_PRELOAD": a.lib, "CUDA_DEVICE_MEMORY_LIMIT": "60g"},
    "sm": {"LD_PRELOAD": a.lib, "CUDA_DEVICE_SM_LIMIT": "90"},
}
res = {m: [] for m in modes}
sync = {m: [] for m in modes}
rng = random.Random(1)
for r in range(a.rounds):
    order = list(modes)
    rng.shuffle(order)
    for m in order:
        e = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_DEVICE_", "VGPU_"))}
        e.pop("LD_PRELOAD", None)
        e.update(modes[m])
        e["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = os.path.join(work, "r%d%s.cache" % (r, m))
        e["VGPU_NODE_DIR"] = os.path.join(work, "node")
        # Pinned to one core (the same for every mode and round): the scheduler's placement
        # moved a plain run's rate by 20 % between processes.
        pin = ["taskset", "-c", "3"] if shutil.which("taskset") else []
        o = subprocess.run(pin + [exe, str(a.launches), str(a.pools)], env=e,
                           capture_output=True, text=True, timeout=120)
        v = re.search(r"ns_per_launch=([\d.]+)", o.stdout)
        res[m].append(float(v.group(1)) if v else float("nan"))
        v = re.search(r"ns_per_round=([\d.]+)", o.stdout)
        sync[m].append(float(v.group(1)) if v else float("nan"))


def boot(d):
    meds = []
    for _ in range(2000):
        s = [rng.choice(d) for _ in d]
        meds.append(statistics.median(s))
    meds.sort()
    return meds[50], meds[1949]


def against_plain(head, data, unit):
    """`head`, then each mode's median difference from the same round's plain run, with its
    95 % interval, and every run's figure."""
    out = [head]
    for m in ("memory", "sm"):
        d = [x - y for x, y in zip(data[m], data["plain"])]
        lo, hi = boot(d)
        out.append("%-6s median %+.1f ns per %s (95 %% interval %+.1f .. %+.1f); runs %s" % (
            m, statistics.median(d), unit, lo, hi, " ".join("%.0f" % x for x in data[m])))
    out.append("plain  runs %s" % " ".join("%.0f" % x for x in data["plain"]))
    return out


lines = against_plain("launch_bench %d launches, %d rounds; plain median %.1f ns per launch" % (
    a.launches, a.rounds, statistics.median(res["plain"])), res, "launch")
lines += against_plain("launch + cudaStreamSynchronize, %d pools in use; plain median %.1f ns "
                       "per round" % (a.pools, statistics.median(sync["plain"])), sync, "round")
os.makedirs(a.out, exist_ok=True)
with open(os.path.join(a.out, "overhead.txt"), "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
