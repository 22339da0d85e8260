"""Summarize run-bench.sh's bench_raw.tsv (stdlib only): per mode, the medians with and without
libvgpu, their ratio and difference, and the target beside each."""
import argparse
import statistics
from collections import defaultdict

# mode -> (what is compared, limit)
TARGETS = {
    "launch": ("ratio", 1.01),
    "launch4": ("ratio", 1.01),
    "malloc": ("ratio", 1.03),
    "meminfo": ("delta_ns", 500.0),
    # Under a compute limit: host time a launch costs while its window is open.
    "launchmed": ("delta_ns", 300.0),
    "launchtrim": ("delta_ns", 300.0),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("raw")
    ap.add_argument("--out")
    args = ap.parse_args()
    vals = defaultdict(list)            # (mode, variant) -> [ns]
    by_round = defaultdict(dict)        # (mode, round) -> {variant: ns}
    totals = defaultdict(set)           # variant -> {total_mib seen}
    failed = defaultdict(int)
    with open(args.raw) as f:
        header = f.readline().rstrip("\n").split("\t")
        for line in f:
            row = dict(zip(header, line.rstrip("\n").split("\t")))
            if row.get("total_mib", "NA") != "NA":
                totals[row["variant"]].add(row["total_mib"])
            try:
                v = float(row["ns_per_op"])
            except ValueError:
                failed[(row["mode"], row["variant"])] += 1
                continue
            vals[(row["mode"], row["variant"])].append(v)
            by_round[(row["mode"], row["round"])][row["variant"]] = v

    out = []
    out.append("vgpu overhead benchmark: medians over alternating runs (ns per op, host time)")
    out.append(f"total memory seen (MiB): plain {sorted(totals['plain'])}, vgpu {sorted(totals['vgpu'])}"
               "  (vgpu should show the limit: proof the limiter was loaded)")
    out.append("")
    out.append(f"{'mode':8} {'n':>5} {'plain':>10} {'vgpu':>10} {'ratio':>7} {'delta_ns':>9} "
               f"{'paired':>7} {'plain min..max':>19} {'vgpu min..max':>19}  target  verdict")
    all_ok = True
    present = {m for (m, _) in vals} | {m for (m, _) in failed}
    for mode in [m for m in TARGETS if m in present]:
        p, g = vals.get((mode, "plain"), []), vals.get((mode, "vgpu"), [])
        if not p or not g:
            out.append(f"{mode:8} no data (failed runs: plain {failed[(mode, 'plain')]}, vgpu {failed[(mode, 'vgpu')]})")
            all_ok = False
            continue
        mp, mg = statistics.median(p), statistics.median(g)
        ratio, delta = (mg / mp if mp > 0 else float("inf")), mg - mp
        paired = [r["vgpu"] / r["plain"] for (m, _), r in by_round.items()
                  if m == mode and len(r) == 2 and r["plain"] > 0]
        pr = statistics.median(paired) if paired else float("nan")
        kind, lim = TARGETS[mode]
        # Ratio targets are judged on the paired statistic (median over rounds of the ratio of
        # the two runs of one round), which cancels the drift between rounds; delta targets on
        # the difference of the medians.
        val = pr if kind == "ratio" else delta
        ok = val <= lim
        all_ok &= ok
        tgt = f"{kind}<={lim:g}"
        out.append(f"{mode:8} {len(p):>2}/{len(g):<2} {mp:>10.1f} {mg:>10.1f} {ratio:>7.4f} {delta:>9.1f} "
                   f"{pr:>7.4f} {min(p):>9.1f}..{max(p):<9.1f} {min(g):>9.1f}..{max(g):<9.1f}  "
                   f"{tgt:14} {'PASS' if ok else 'FAIL'}")
        if failed[(mode, "plain")] or failed[(mode, "vgpu")]:
            out.append(f"{'':8} failed runs: plain {failed[(mode, 'plain')]}, vgpu {failed[(mode, 'vgpu')]}")
    out.append("")
    out.append("ratio = median(vgpu) / median(plain); paired = median over rounds of vgpu/plain of the same round")
    out.append("verdicts: ratio targets use `paired`; delta targets use median(vgpu) - median(plain)")
    out.append(f"overall: {'PASS' if all_ok else 'FAIL'}")
    text = "\n".join(out) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
