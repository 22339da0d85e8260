"""Verdicts of run-multi.sh (stdlib only): one PASS/FAIL/SKIP line per check.

    python3 summarize_multi.py LOGS_DIR --out multi.txt [--seconds S]

LOGS_DIR: results/*.json (fill.py, allreduce.py), runs/*.out (sm_bench windows), rcs.tsv
(name, rc, seconds). Limits of items 1-2: CUDA_DEVICE_MEMORY_LIMIT_0=2g, _1=6g (by the program's
ordinal). Item 3: 4 GiB per GPU. Item 4: every 1 s window after the first within ±3 points of
30 % (GPU 0) and 70 % (GPU 1) of the same GPU's unlimited rate.
"""
import argparse
import glob
import json
import os
import statistics

GIB, MIB = 1 << 30, 1 << 20
LIMITS = {0: 2 * GIB, 1: 6 * GIB}  # by the container's device index = NVML index (items 1, 2)
SLACK_MIB = 64                     # real use may pass vgpu's count by lazily loaded module memory
TOL = 3.0                          # points per window (the compute-limit issue's target)
lines = []


def verdict(ok, name, detail):
    v = "SKIP" if ok is None else ("PASS" if ok else "FAIL")
    lines.append(f"{v:4}  {name:34} {detail}")


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except Exception:  # noqa: BLE001
        return None


def rcs(logs):
    out = {}
    try:
        with open(os.path.join(logs, "rcs.tsv")) as f:
            for ln in f:
                p = ln.rstrip("\n").split("\t")
                if len(p) >= 2:
                    out[p[0]] = p[1]
    except OSError:
        pass
    return out


def norm(u):
    return (u or "").lower().removeprefix("gpu-")


def rows_by_uuid(smi):
    return {norm(r["uuid"]): r for r in (smi or {}).get("rows", [])}


def status_dev(st, uuid):
    for d in (st or {}).get("devices", []) or []:
        if norm(d.get("uuid")) == norm(uuid):
            return d
    return None


def check_fill(name, r, rc, phys_of_ordinal):
    """item 1/2 checks of one fill.py result; phys_of_ordinal: physical index per program ordinal"""
    if r is None:
        verdict(False, name, f"no result (rc={rc})")
        return
    real_before = {x["index"]: x for x in r.get("smi_real_before", {}).get("rows", [])}
    real_by_index = {x["index"]: x for x in r.get("smi_real", {}).get("rows", [])}
    before_by_uuid = {norm(x["uuid"]): x for x in real_before.values()}
    real = rows_by_uuid(r.get("smi_real"))
    limited = rows_by_uuid(r.get("smi_limited"))
    st = r.get("vgpu_status")
    visible = set()
    for d in r.get("devices", []):
        i = d["ordinal"]
        phys = phys_of_ordinal[i] if i < len(phys_of_ordinal) else None
        # `_<i>` numbers the container's devices (NVML's order), not the program's ordinals
        lim = LIMITS.get(phys if phys is not None else i)
        want_uuid = real_by_index.get(phys, {}).get("uuid")
        u = d.get("uuid")
        visible.add(norm(u))
        tag = f"{name}.cuda:{i}"
        verdict(u is not None and want_uuid is not None and norm(u) == norm(want_uuid), tag + ".uuid",
                f"torch {u} = physical GPU {phys} {want_uuid}")
        got = d.get("obtained", 0)
        verdict(bool(d.get("oom")) and lim - 1.25 * GIB <= got <= lim, tag + ".fill",
                f"{got / GIB:.2f} GiB of {lim / GIB:.0f} GiB, {d.get('error')}: {(d.get('message') or '')[:90]}")
        mgi = d.get("mem_get_info") or [None, None]
        verdict(mgi[1] == lim, tag + ".mem_get_info", f"free={mgi[0]} total={mgi[1]} (want total {lim})")
        lrow = limited.get(norm(u))
        verdict(lrow is not None and lrow["total_mib"] == lim // MIB, tag + ".nvidia-smi",
                f"preloaded nvidia-smi row {lrow and lrow['index']}: total {lrow and lrow['total_mib']} MiB "
                f"used {lrow and lrow['used_mib']} MiB (want total {lim // MIB})")
        rrow, brow = real.get(norm(u)), before_by_uuid.get(norm(u))
        if rrow and brow:
            delta = rrow["used_mib"] - brow["used_mib"]
            verdict(delta <= lim // MIB + SLACK_MIB, tag + ".real",
                    f"real use on GPU {rrow['index']}: +{delta} MiB (<= {lim // MIB}+{SLACK_MIB})")
        else:
            verdict(False, tag + ".real", "no real nvidia-smi row")
        sd = status_dev(st, u)
        verdict(sd is not None and sd.get("limit") == lim and got <= (sd.get("used") or 0) <= lim,
                tag + ".vgpu-status",
                f"region {sd and sd.get('uuid')}: limit={sd and sd.get('limit')} used={sd and sd.get('used')}")
    # nothing on the GPUs the program cannot see: not in nvidia-smi's real use, not in the region
    for uu, rrow in real.items():
        if uu in visible:
            continue
        brow = before_by_uuid.get(uu)
        delta = rrow["used_mib"] - brow["used_mib"] if brow else None
        sd = status_dev(st, uu)
        ok = delta is not None and delta <= 16 and (sd is None or (sd.get("used") or 0) == 0)
        verdict(ok, f"{name}.other-gpu{rrow['index']}",
                f"not visible: real +{delta} MiB, region used {sd and sd.get('used')}")


def check_allreduce(name, logs, rc, want_budget):
    r = load(os.path.join(logs, "results", name + ".json"))
    ranks = r["ranks"] if r else []
    if not ranks:  # the parent was killed (timeout): read what the ranks wrote
        for f in sorted(glob.glob(os.path.join(logs, "results", name + ".json.d", "rank*.json"))):
            ranks.append(load(f) or {})
    steps = [[s["name"] for s in k.get("steps", [])] for k in ranks]
    done = len(ranks) == 2 and all(s and s[-1] == "done" for s in steps)
    verdict(done and rc == "0", f"{name}.no-hang", f"rc={rc} (124: timeout) {r and r.get('seconds')}s; steps {steps}")
    for k in ranks:
        for s in k.get("steps", []):
            if s["name"].startswith("allreduce"):
                verdict(bool(s.get("ok")), f"{name}.rank{k.get('rank')}.{s['name']}",
                        f"{'right sum' if s.get('ok') else 'WRONG SUM'} {s.get('seconds', '')}s")
    if not want_budget:
        return
    r0 = next((k for k in ranks if k.get("rank") == 0), {})
    st = r0.get("status_holding")
    if not st or not st.get("devices"):
        verdict(False, f"{name}.shared-region", f"no vgpu status: {str(st)[:200]}")
        return
    procs = st.get("processes", [])
    per_dev = [(d.get("uuid"), d.get("limit"), d.get("used")) for d in st["devices"]]
    ok = len(procs) >= 2 and all(lim == 4 * GIB and used and used <= lim for _, lim, used in per_dev)
    verdict(ok and len(per_dev) >= 2, f"{name}.shared-region",
            f"{len(procs)} processes; devices (uuid, limit, used) {per_dev}")
    third = r0.get("third_process") or {}
    for d in third.get("devices", []):
        sd = status_dev(st, d.get("uuid"))
        left = (sd.get("limit") or 0) - (sd.get("used") or 0) if sd else None
        got = d.get("obtained", 0)
        ok = left is not None and bool(d.get("oom")) and got <= left and got >= left - 1.25 * GIB
        verdict(ok, f"{name}.third-process.cuda:{d['ordinal']}",
                f"got {got / GIB:.2f} GiB beside the ranks; budget left {left and left / GIB:.2f} GiB; "
                f"{d.get('error')}")
    if not third.get("devices"):
        verdict(False, f"{name}.third-process", f"no result: {str(third)[:200]}")


def windows(path):
    w = {}
    try:
        with open(path, errors="replace") as f:
            for ln in f:
                p = ln.split()
                if len(p) >= 3 and p[0] == "window":
                    w[int(p[1])] = int(p[2])
    except (OSError, ValueError):
        pass
    return w


def check_compute(logs, seconds):
    runs = os.path.join(logs, "runs")
    base = {}
    for g in (0, 1):
        vals = []
        for n in ("base1", "base2"):
            w = windows(os.path.join(runs, f"sm.{n}.gpu{g}.out"))
            vals += [w[i] for i in range(1, seconds) if i in w]
        base[g] = statistics.mean(vals) if vals else None
    lines.append(f"      compute baseline (units per 1 s window, unlimited): GPU0 {base[0]} GPU1 {base[1]}")
    for tag, label in (("lim", "4.per-device-vars"), ("cvd", "4b.visible-devices")):
        for g, want in ((0, 30), (1, 70)):
            name = f"{label}.gpu{g}.sm{want}"
            w = windows(os.path.join(runs, f"sm.{tag}.gpu{g}.out"))
            got = [w[i] for i in range(1, seconds) if i in w]
            if not base[g] or not got:
                verdict(None if not os.path.exists(os.path.join(runs, f"sm.{tag}.gpu{g}.out")) else False,
                        name, f"baseline {base[g]}, windows {got}")
                continue
            shares = [100.0 * u / base[g] for u in got]
            worst = max(abs(s - want) for s in shares)
            ok = worst <= TOL and len(got) >= seconds - 1
            verdict(ok, name, f"shares {' '.join(f'{s:.1f}' for s in shares)} (worst {worst:.1f} pts, "
                              f"mean {statistics.mean(shares):.1f})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("logs")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=int, default=6)
    a = ap.parse_args()
    rc = rcs(a.logs)
    res = os.path.join(a.logs, "results")
    for name, phys in (("1.both", [0, 1]), ("2.cvd1", [1]), ("2.cvd10", [1, 0])):
        if name in rc or os.path.exists(os.path.join(res, name + ".json")):
            check_fill(name, load(os.path.join(res, name + ".json")), rc.get(name), phys)
        else:
            verdict(None, name, "not run")
    for name, budget in (("3.plain", False), ("3.vgpu", True)):
        if name in rc:
            check_allreduce(name, a.logs, rc.get(name), budget)
        else:
            verdict(None, name, "not run")
    check_compute(a.logs, a.seconds)
    n = {v: sum(1 for ln in lines if ln.startswith(v)) for v in ("PASS", "FAIL", "SKIP")}
    head = [f"# vgpu on two GPUs (issue 6): {n['PASS']} PASS, {n['FAIL']} FAIL, {n['SKIP']} SKIP",
            "# 1: _0=2g _1=6g, both GPUs; 2: CUDA_VISIBLE_DEVICES=1 and =1,0; 3: NCCL all-reduce, 2 ranks, "
            "4g + SM 50 (3.plain: without vgpu); 4: SM _0=30 _1=70 at once (±3 pts per 1 s window)"]
    env = os.path.join(a.logs, "gpus.txt")
    if os.path.exists(env):
        with open(env) as f:
            head += ["# " + ln.rstrip() for ln in f if ln.strip()][:6]
    with open(a.out, "w") as f:
        f.write("\n".join(head + lines) + "\n")
    print("\n".join(head + lines))


if __name__ == "__main__":
    main()
