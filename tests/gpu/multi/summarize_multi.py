"""Verdicts of run-multi.sh (stdlib only): one table, a PASS/FAIL/SKIP line per check and
INFO lines for the figures (tokens/s, step times, memory).

    python3 summarize_multi.py LOGS_DIR --out multi.txt [--seconds S] [--ddp-seconds S]

LOGS_DIR: results/*.json (fill.py, allreduce.py, tp_decode.py), results/6.*.d/rank*.json
(ddp_train.py), runs/*.out (sm_bench and train.py windows), runs/6.*.status*.json, rcs.tsv
(name, rc, seconds), gpus.txt (nvidia-smi's index and UUID of each GPU). Limits of items 1-2:
CUDA_DEVICE_MEMORY_LIMIT_0=2g, _1=6g (by the container's index). Item 3: 4 GiB per GPU. Item 4:
every 1 s window after the first within ±3 points of 30 % (GPU 0) and 70 % (GPU 1) of the same
GPU's unlimited rate. Item 5: tokens identical to the run without vgpu and logits within
LOGIT_TOL; _0=4g _1=6g. Item 6: each GPU's steps/s within ±2 points of 50 % of the run without
vgpu; _0=12g _1=16g; the memory NCCL takes charged to the rank's own GPU.
"""
import argparse
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import norm_uuid as norm, region_process as region_of  # noqa: E402

GIB, MIB = 1 << 30, 1 << 20
LIMITS = {0: 2 * GIB, 1: 6 * GIB}  # by the container's device index = NVML index (items 1, 2)
SLACK_MIB = 64                     # real use may pass vgpu's count by lazily loaded module memory
TOL = 3.0                          # points per window (the compute-limit issue's target)
DDP_TOL = 2.0                      # points, each GPU's share of a DDP job (issue 25)
LOGIT_TOL = 0.05                   # |logit difference|: a few bf16 steps of logits of order 1-4
TP_LIMITS = {0: 4 * GIB, 1: 6 * GIB}
DDP_LIMITS = {0: 12 * GIB, 1: 16 * GIB}
COUNT_SLACK_MIB = 128              # real per-process use past the region's count: module images
lines = []


def verdict(ok, name, detail):
    v = "SKIP" if ok is None else ("PASS" if ok else "FAIL")
    lines.append(f"{v:4}  {name:34} {detail}")


def info(name, detail):
    lines.append(f"INFO  {name:34} {detail}")


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
    if not r.get("devices"):
        verdict(False, name + ".devices", f"no device filled: {r.get('device_count')} visible")
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


def check_shares(runs, seconds, what, base_tags, cases):
    """per-window shares of pairs run at once (runs/sm.TAG.gpuG.out, G the physical GPU) against
    the mean window of the unlimited pairs base_tags"""
    base = {}
    for g in (0, 1):
        vals = []
        for n in base_tags:
            w = windows(os.path.join(runs, f"sm.{n}.gpu{g}.out"))
            vals += [w[i] for i in range(1, seconds) if i in w]
        base[g] = statistics.mean(vals) if vals else None
    info(what + ".baseline", f"units per 1 s window, unlimited: GPU0 {base[0]} GPU1 {base[1]}")
    for tag, label in cases:
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


def check_compute(logs, seconds):
    runs = os.path.join(logs, "runs")
    check_shares(runs, seconds, "4.sm_bench", ("base1", "base2"),
                 (("lim", "4.per-device-vars"), ("cvd", "4b.visible-devices"), ("cvd10", "4c.visible-1,0")))
    check_shares(runs, seconds, "4t.torch", ("tbase",), (("tcvd10", "4t.torch-visible-1,0"),))


def physical(logs):
    """{normalised UUID: nvidia-smi index} from gpus.txt"""
    out = {}
    try:
        with open(os.path.join(logs, "gpus.txt")) as f:
            for ln in f:
                p = [x.strip() for x in ln.split(",")]
                if len(p) >= 3 and p[0].isdigit():
                    out[norm(p[2])] = int(p[0])
    except OSError:
        pass
    return out


def mib(b):
    return None if b is None else b / MIB


def rank_files(logs, name):
    """the ranks' own records of a run: results/NAME.json's (tp_decode.py), else
    results/NAME[.json].d/rank*.json (ddp_train.py, or a killed tp_decode.py)"""
    r = load(os.path.join(logs, "results", name + ".json"))
    if r and r.get("ranks"):
        return r["ranks"]
    out = []
    for d in (name + ".json.d", name + ".d"):
        for f in sorted(glob.glob(os.path.join(logs, "results", d, "rank*.json"))):
            out.append(load(f) or {})
        if out:
            break
    return sorted(out, key=lambda k: k.get("rank", 0))


def finished(ranks):
    return len(ranks) == 2 and all(k.get("steps") and k["steps"][-1].get("name") == "done" for k in ranks)


def counted(name, k, st, apps_rows, phys):
    """a rank's use in the region (status) against nvidia-smi's real per-process use (apps_rows,
    both taken by rank 0 while both ranks held everything): all of it on its own GPU, nothing on
    the other, nothing (past module images) uncounted"""
    own = norm(k.get("uuid"))
    mine = region_of(st, k.get("pid"))
    tag = f"{name}.rank{k.get('rank')}"
    if mine is None:
        verdict(False, tag + ".own-gpu", f"pid {k.get('pid')} not in the region: {str(st)[:160]}")
        return
    other = {u: b for u, b in mine.items() if u != own and b}
    here = mib(mine.get(own) or 0)
    verdict(bool(mine.get(own)) and not other, tag + ".own-gpu",
            f"region: {here:.0f} MiB on its GPU {phys.get(own)}, on others {other or 0}")
    apps = {norm(r["uuid"]): r["used_mib"] for r in apps_rows or [] if r.get("pid") == k.get("pid")}
    if not apps:
        verdict(None, tag + ".counted", "nvidia-smi listed no memory for this pid")
        return
    real = apps.get(own, 0)
    elsewhere = {phys.get(u, u): m for u, m in apps.items() if u != own}
    verdict(real - here <= COUNT_SLACK_MIB and not elsewhere, tag + ".counted",
            f"real {real} MiB vs region {here:.0f} MiB on GPU {phys.get(own)} "
            f"(<= +{COUNT_SLACK_MIB}); real elsewhere {elsewhere or 0}")


def check_tp(logs, rc):
    phys = physical(logs)
    bare = rank_files(logs, "5.bare")
    b0 = bare[0] if bare else {}
    for name in ("5.bare", "5.nolimit", "5.mem", "5.sm50"):
        if name not in rc and not os.path.exists(os.path.join(logs, "results", name + ".json")):
            verdict(None, name, "not run")
            continue
        ranks = rank_files(logs, name)
        r = load(os.path.join(logs, "results", name + ".json")) or {}
        verdict(finished(ranks) and rc.get(name) == "0", name + ".no-hang",
                f"rc={rc.get(name)} (124: timeout) {r.get('seconds')}s; "
                f"steps {[[s['name'] for s in k.get('steps', [])][-1:] for k in ranks]}")
        k0 = ranks[0] if ranks else {}
        tps, btps = k0.get("tokens_per_s"), b0.get("tokens_per_s")
        rel = f", {100 * tps / btps:.0f} % of no vgpu" if tps and btps else ""
        info(name + ".speed", f"{tps} tokens/s, step p50 {k0.get('p50_ms')} ms p99 {k0.get('p99_ms')} ms{rel}")
        if name == "5.bare":
            continue
        cmp_ = k0.get("compare") or {}
        diff = cmp_.get("max_abs_logit_diff")
        verdict(bool(cmp_.get("tokens_identical")) and diff is not None and diff <= LOGIT_TOL, name + ".outputs",
                f"tokens identical: {cmp_.get('tokens_identical')} (first difference {cmp_.get('first_difference')}), "
                f"max |logit diff| {diff} over {cmp_.get('steps_compared')} steps (<= {LOGIT_TOL}; 0: bitwise)")
        st = k0.get("status_holding")
        if name == "5.mem":  # without a memory limit vgpu charges no memory (pass-through)
            for k in ranks:
                counted(name, k, st, (k0.get("smi_apps") or {}).get("rows"), phys)
            for k in ranks:
                p = phys.get(norm(k.get("uuid")))
                mgi = k.get("mem_get_info") or [None, None]
                verdict(p in TP_LIMITS and mgi[1] == TP_LIMITS[p], f"{name}.rank{k.get('rank')}.mem_get_info",
                        f"GPU {p}: total {mgi[1]} (want {TP_LIMITS.get(p)}), free {mgi[0]}")
        if name == "5.sm50":
            sm = {phys.get(norm(d.get("uuid"))): d.get("sm_limit") for d in (st or {}).get("devices", []) or []}
            verdict(sm.get(0) == 50 and sm.get(1) == 50, name + ".region-sm", f"region SM limits by GPU {sm}")
            verdict(bool(tps and btps) and tps >= 0.45 * btps, name + ".not-starved",
                    f"{tps} tokens/s against {btps} without vgpu (>= 45 %)")


def check_ddp(logs, rc, seconds):
    phys = physical(logs)
    plain = {norm(k.get("uuid")): k for k in rank_files(logs, "6.plain")}
    for name, lim in (("6.plain", None), ("6.lim", DDP_LIMITS), ("6.cvd10", DDP_LIMITS),
                      ("6.nocumem", DDP_LIMITS)):
        if name not in rc:
            verdict(None, name, "not run")
            continue
        ranks = rank_files(logs, name)
        verdict(finished(ranks) and rc.get(name) == "0", name + ".no-hang",
                f"rc={rc.get(name)} (124: timeout); steps {[[s['name'] for s in k.get('steps', [])][-1:] for k in ranks]}"
                + "".join(f"; rank {k.get('rank')}: {k['error']}" for k in ranks if k.get("error")))
        try:
            with open(os.path.join(logs, "steps", name + ".log"), errors="replace") as f:
                cumem = sum(1 for ln in f if "NCCL INFO" in ln and "cumem" in ln.lower())
        except OSError:
            cumem = None
        for k in ranks:
            own = norm(k.get("uuid"))
            g = phys.get(own)
            tag = f"{name}.gpu{g}"
            q0, q1, q2 = k.get("q0") or {}, k.get("q1") or {}, k.get("q2") or {}
            info(tag + ".speed", f"rank {k.get('rank')}: {k.get('steps_per_s')} steps/s, p50 {k.get('step_ms_p50')} ms "
                                 f"p99 {k.get('step_ms_p99')} ms, windows {k.get('windows')}")
            ra0, ra1 = (q0.get("real_apps") or {}).get(own), (q1.get("real_apps") or {}).get(own)
            torch_d = mib((q1.get("reserved") or 0) - (q0.get("reserved") or 0))
            if lim is None:
                if ra0 is not None and ra1 is not None:
                    info(tag + ".nccl-real", f"real +{ra1 - ra0} MiB from context to first step, "
                                             f"{ra1 - ra0 - torch_d:.0f} MiB of it beyond PyTorch's allocator")
                continue
            base = plain.get(own) or {}
            if base.get("steps_per_s") and k.get("steps_per_s") is not None:
                share = 100.0 * k["steps_per_s"] / base["steps_per_s"]
                bw = statistics.mean(base["windows"]) if base.get("windows") else None
                ws = [100.0 * w / bw for w in k.get("windows") or []] if bw else []
                worst = max((abs(x - 50) for x in ws), default=None)
                verdict(abs(share - 50) <= DDP_TOL, tag + ".share",
                        f"{share:.1f} % ({k['steps_per_s']} / {base['steps_per_s']} steps/s without vgpu; <= ±{DDP_TOL}); "
                        f"windows {' '.join(f'{x:.1f}' for x in ws)} (worst {worst if worst is None else round(worst, 1)})")
            else:
                verdict(False, tag + ".share", f"no rate: {k.get('steps_per_s')} against {base.get('steps_per_s')}")
            mgi = k.get("mem_get_info") or [None, None]
            verdict(g in lim and mgi[1] == lim[g], tag + ".mem_get_info",
                    f"rank {k.get('rank')} (CUDA_VISIBLE_DEVICES={k.get('env', {}).get('CUDA_VISIBLE_DEVICES')}): "
                    f"total {mgi[1]} (want {lim.get(g)})")
            r0, r1 = (q0.get("region") or {}).get(own), (q1.get("region") or {}).get(own)
            if r0 is None or r1 is None:
                verdict(False, tag + ".nccl-charged", f"no region entry for the rank: {q1.get('region_error') or q1.get('region')}")
            else:
                charged = mib(r1 - r0) - torch_d
                real = None if ra0 is None or ra1 is None else ra1 - ra0
                unc = None if real is None else real - mib(r1 - r0)
                ok = charged > 0 and (unc is None or unc <= COUNT_SLACK_MIB)
                verdict(ok, tag + ".nccl-charged",
                        f"context -> first step: region +{mib(r1 - r0):.0f} MiB, PyTorch's allocator +{torch_d:.0f} MiB: "
                        f"{charged:.0f} MiB charged beyond it (NCCL's); real +{real} MiB, uncounted {unc} MiB "
                        f"(<= {COUNT_SLACK_MIB}); NCCL cuMem log lines {cumem}")
            for q, when in ((q1, "first step"), (q2, "after training")):
                reg = q.get("region") or {}
                other = {phys.get(u, u): b for u, b in reg.items() if u != own and b}
                oreal = {phys.get(u, u): m for u, m in (q.get("real_apps") or {}).items() if u != own}
                verdict(bool(reg.get(own)) and not other and not oreal, f"{tag}.own-gpu.{when.split()[0]}",
                        f"at {when}: region {mib(reg.get(own)) or 0:.0f} MiB on GPU {g}, elsewhere {other or 0}; "
                        f"real elsewhere {oreal or 0}")
        if lim is None:
            continue
        sts = [load(os.path.join(logs, "runs", f"{name}.status{i}.json")) for i in (1, 2)]
        devs = {phys.get(norm(d.get("uuid"))): d for d in (sts[0] or {}).get("devices", []) or []}
        ok = all(devs.get(g, {}).get("limit") == lim[g] and devs.get(g, {}).get("sm_limit") == 50 for g in (0, 1))
        verdict(ok, name + ".region", "limit / SM by GPU " + ", ".join(
            f"{g}: {mib(devs.get(g, {}).get('limit'))} MiB / {devs.get(g, {}).get('sm_limit')}" for g in (0, 1)))
        try:
            ts = []
            for i in (1, 2):
                with open(os.path.join(logs, "runs", f"{name}.status{i}.time")) as f:
                    ts.append(float(f.read().strip()))
            d2 = {phys.get(norm(d.get("uuid"))): d for d in (sts[1] or {}).get("devices", []) or []}
            busy = {g: round(100 * (d2[g]["gpu_ns"] - devs[g]["gpu_ns"]) / 1e9 / (ts[1] - ts[0]), 1) for g in (0, 1)}
            info(name + ".gpu-time", f"region GPU time while training, % of wall time by GPU: {busy}")
        except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
            info(name + ".gpu-time", "no two region samples")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("logs")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=int, default=6)
    ap.add_argument("--ddp-seconds", type=int, default=8)
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
    check_tp(a.logs, rc)
    check_ddp(a.logs, rc, a.ddp_seconds)
    n = {v: sum(1 for ln in lines if ln.startswith(v)) for v in ("PASS", "FAIL", "SKIP")}
    head = [f"# vgpu on two GPUs (issues 6, 25): {n['PASS']} PASS, {n['FAIL']} FAIL, {n['SKIP']} SKIP",
            "# 1: _0=2g _1=6g, both GPUs; 2: CUDA_VISIBLE_DEVICES=1 and =1,0; 3: NCCL all-reduce, 2 ranks, "
            "4g + SM 50 (3.plain: without vgpu); 4: SM _0=30 _1=70 at once (±3 pts per 1 s window; 4b: one GPU "
            "each, 4c: both as 1,0, 4t: 4c under PyTorch)",
            "# 5: TP=2 decode: no vgpu (reference), vgpu unlimited, _0=4g _1=6g, SM 50; 6: torchrun DDP: "
            "no vgpu, SM 50 + _0=12g _1=16g (cuMem NCCL buffers), the same under CUDA_VISIBLE_DEVICES=1,0, "
            "and NCCL_CUMEM_ENABLE=0 (share ±2 pts of 50)"]
    env = os.path.join(a.logs, "gpus.txt")
    if os.path.exists(env):
        with open(env) as f:
            head += ["# " + ln.rstrip() for ln in f if ln.strip()][:6]
    with open(a.out, "w") as f:
        f.write("\n".join(head + lines) + "\n")
    print("\n".join(head + lines))


if __name__ == "__main__":
    main()
