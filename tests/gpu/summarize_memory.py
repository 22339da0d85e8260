"""Build $OUT/summary.txt from the JSON results of run-memory.sh (stdlib only).

Criteria (per sub-test; `info` results are listed without a verdict):
  obtained >= min_frac x limit (0.8125: 3.25 GiB of 4; JAX 0.625: 2.5 GiB) and <= the limit,
  real peak - baseline <= limit + 64 MiB (nvidia-smi, without the limiter, device-wide),
  the denial is the framework's normal out-of-memory error (probe: CUDA_ERROR_OUT_OF_MEMORY),
  recover_ok (when present) and every entry of `checks` (when present) true.
"""
import argparse
import glob
import json
import os

SLACK_MIB = 64
MIN_FRAC = 0.8125  # 3.25 GiB of 4


def verdict(r, limit_mib):
    why = []
    if r.get("init_error"):
        return False, ["init: " + r["init_error"]]
    # A run that fills nothing (the escape cases) is judged by its checks and its real peak.
    checks_only = r.get("checks_only", False)
    gib = r.get("gib_obtained")
    min_gib = r.get("min_frac", MIN_FRAC) * limit_mib / 1024
    if checks_only:
        pass
    elif gib is None:
        why.append("no obtained figure")
    else:
        if gib < min_gib:
            why.append(f"obtained {gib:.2f} < {min_gib:.2f} GiB")
        if gib * 1024 > limit_mib:
            why.append(f"obtained {gib:.2f} GiB > limit")
    base, peak = r.get("real_baseline_mib"), r.get("real_peak_mib")
    if base is None or peak is None:
        if not checks_only:
            why.append("no real-used measurement")
    elif peak - base > limit_mib + SLACK_MIB:
        why.append(f"real peak-baseline {peak - base} MiB > {limit_mib}+{SLACK_MIB}")
    if not r.get("oom_normal") and not checks_only:
        why.append(f"denial not the normal OOM ({r.get('error_type') or r.get('error_code')})")
    if r.get("recover_ok") is False:
        why.append(f"no recovery after OOM {r.get('recover')}")
    for k, v in sorted((r.get("checks") or {}).items()):
        if not v:
            why.append(f"check {k} failed")
    if r.get("timed_out"):
        why.append("timed out")
    return not why, why


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--limit-mib", type=int, default=4096)
    args = ap.parse_args()
    results = []
    for path in sorted(glob.glob(os.path.join(args.out, "results", "*.json"))):
        try:
            with open(path) as f:
                results.append(json.loads(f.readline()))
        except Exception as e:  # noqa: BLE001
            results.append({"name": os.path.basename(path), "init_error": f"unreadable: {e}"})
    seen = {r.get("name") for r in results}
    # sub-tests that ran but left no result (crash, timeout): from rcs.txt
    rcs = {}
    try:
        with open(os.path.join(args.out, "rcs.txt")) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2:
                    rcs[parts[0]] = parts[1]
    except OSError:
        pass

    lines = [f"# vgpu memory tests, limit {args.limit_mib} MiB; pass: obtained >= {MIN_FRAC * args.limit_mib / 1024:.2f} GiB "
             f"(jax {0.625 * args.limit_mib / 1024:.2f}) and <= limit, "
             f"real peak - baseline <= limit + {SLACK_MIB} MiB, normal OOM, recovery, checks",
             f"{'name':32} {'verdict':7} {'GiB':>6} {'real+MiB':>8}  details"]
    npass = nfail = 0
    for r in results:
        name = r.get("name", "?")
        base, peak = r.get("real_baseline_mib"), r.get("real_peak_mib")
        delta = f"{peak - base}" if isinstance(base, int) and isinstance(peak, int) else "-"
        gib = r.get("gib_obtained")
        gib_s = f"{gib:.2f}" if isinstance(gib, (int, float)) else "-"
        if r.get("info"):
            detail = {k: r.get(k) for k in ("query_with_limiter", "query_without_limiter", "holder", "skipped", "note")
                      if r.get(k) is not None}
            lines.append(f"{name:32} {'INFO':7} {gib_s:>6} {delta:>8}  {json.dumps(detail)}")
            continue
        ok, why = verdict(r, args.limit_mib)
        npass += ok
        nfail += not ok
        err = r.get("error_first_line") or (f"err={r.get('error_code')}" if "error_code" in r else "")
        detail = ("; ".join(why) if why else "") + (f" | {err}" if err else "")
        lines.append(f"{name:32} {'PASS' if ok else 'FAIL':7} {gib_s:>6} {delta:>8}  {detail.strip(' |')}")
    for name, rc in sorted(rcs.items()):
        has_result = any(s == name or (name == "probe" and s and s.startswith("probe-")) for s in seen)
        if rc == "skipped":
            lines.append(f"{name:32} {'SKIP':7} {'-':>6} {'-':>8}  not run: time budget used up")
        elif rc == "unselected":
            lines.append(f"{name:32} {'SKIP':7} {'-':>6} {'-':>8}  not selected (VGPU_MEM_CASES)")
        elif rc != "0" and not has_result:
            lines.append(f"{name:32} {'FAIL':7} {'-':>6} {'-':>8}  exited {rc} without a result (see logs/{name}.log)")
            nfail += 1
    lines.append(f"# {npass} passed, {nfail} failed")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "summary.txt"), "w") as f:
        f.write(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
