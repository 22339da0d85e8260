"""Summary of tests/gpu/measure/run-measure.sh: python3 summarize_measure.py LOGS_DIR"""
import datetime
import json
import os
import re
import statistics
import sys


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def rc_of(runs, name):
    parts = read(os.path.join(runs, name + ".rc")).split()
    return (parts[0], parts[1]) if len(parts) == 2 else ("NA", "0")


def rate(runs, name):
    m = re.search(r"^total (\d+) (\d+)", read(os.path.join(runs, name + ".out")), re.M)
    if not m or int(m.group(2)) == 0:
        return None
    return int(m.group(1)) / int(m.group(2))


def capture(runs, names):
    print("== 1. CUDA-graph capture (GLOBAL mode, 30 rounds) while the controller drains windows")
    print("%-14s %4s  %s" % ("run", "rc", "result"))
    for n in names:
        rc, _ = rc_of(runs, n)
        m = re.search(r"^capture .*$", read(os.path.join(runs, n + ".out")), re.M)
        line = m.group(0) if m else "(no result line) " + read(os.path.join(runs, n + ".err")).strip()[-200:]
        print("%-14s %4s  %s" % (n, rc, line))
    print()


def cost(runs, names):
    print("== 2. cost: work per second against the same round's plain run (1.000 = no cost)")
    groups = {}
    for n in names:
        _, w, m, r = n.split(".")
        groups.setdefault(w, {}).setdefault(int(r), {})[m] = rate(runs, n)
    print("%-6s %-28s %-28s %s" % ("load", "mem limit only: per round", "measure: per round", "plain work/s"))
    for w, rounds in groups.items():
        cols = {"mem": [], "measure": []}
        plains = []
        for r in sorted(rounds):
            p = rounds[r].get("plain")
            plains.append("%.1f" % p if p else "NA")
            for m in cols:
                v = rounds[r].get(m)
                cols[m].append(v / p if v and p else None)

        def fmt(xs):
            got = [x for x in xs if x is not None]
            each = " ".join("%.3f" % x if x is not None else "NA" for x in xs)
            return ("mean %.3f (%s)" % (statistics.mean(got), each)) if got else "NA"

        print("%-6s %-28s %-28s %s" % (w, fmt(cols["mem"]), fmt(cols["measure"]), " ".join(plains)))
    print()


def smi_time(stamp):
    return datetime.datetime.strptime(stamp.strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()


def accuracy(runs, names):
    print("== 3. GPU time in the region (measured, no limit) against nvidia-smi utilization.gpu")
    print("   span: from 1 s after the region first shows GPU time to its last increase")
    print("%-10s %8s %14s %14s %8s" % ("load", "span s", "vgpu busy %", "nvml util %", "diff"))
    for n in names:
        samples = []
        for line in read(os.path.join(runs, n + ".vgpu")).splitlines():
            ts, _, js = line.partition(" ")
            try:
                d = json.loads(js)
                samples.append((float(ts), int(d["devices"][0]["gpu_ns"])))
            except (ValueError, KeyError, IndexError, TypeError):
                continue
        smi = []
        for line in read(os.path.join(runs, n + ".smi")).splitlines():
            parts = line.split(",")
            try:
                smi.append((smi_time(parts[0]), float(parts[1])))
            except (ValueError, IndexError):
                continue
        live = [s for s in samples if s[1] > 0]
        if len(live) < 3 or not smi:
            print("%-10s (too few samples: %d region, %d nvidia-smi)" % (n, len(live), len(smi)))
            continue
        t_a = live[0][0] + 1.0
        start = next((s for s in live if s[0] >= t_a), None)
        last_inc = max((s for s in live if s[1] > live[0][1]), key=lambda s: s[0], default=None)
        if not start or not last_inc or last_inc[0] - start[0] < 1.0:
            print("%-10s (span too short)" % n)
            continue
        span = last_inc[0] - start[0]
        busy = 100.0 * (last_inc[1] - start[1]) / 1e9 / span
        u = [x for t, x in smi if start[0] <= t <= last_inc[0]]
        util = statistics.mean(u) if u else float("nan")
        print("%-10s %8.2f %14.1f %14.1f %+8.1f" % (n, span, busy, util, busy - util))
    print()


def main():
    logs = sys.argv[1]
    runs = os.path.join(logs, "runs")
    names = sorted(f[:-3] for f in os.listdir(runs) if f.endswith(".rc"))
    print(read(os.path.join(logs, "env.txt")).strip())
    print()
    capture(runs, [n for n in names if n.startswith("cap.")])
    order = {"train": 0, "large": 1, "sync": 2, "short": 3}
    cost(runs, sorted((n for n in names if n.startswith("cost.")),
                      key=lambda n: (order.get(n.split(".")[1], 9), n)))
    accuracy(runs, [n for n in names if n.startswith("acc.")])
    print("== runs (name rc wall_ms)")
    for n in names:
        print("  %s %s %s" % ((n,) + rc_of(runs, n)))


if __name__ == "__main__":
    main()
