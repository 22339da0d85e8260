"""The verdicts of summarize_multi.py for items 4c/4t, 5 and 6 on synthetic logs (stdlib only,
no GPU): a run that meets every target passes, and each way of getting the per-device mapping
wrong (memory charged to the other GPU, limits swapped under CUDA_VISIBLE_DEVICES=1,0, a share
off by 10 points, NCCL's memory uncounted, different tokens) fails its check.

    python3 -m unittest discover -s tests/gpu/multi -p 'test_*.py'
"""
import copy
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
GIB, MIB = 1 << 30, 1 << 20
UUID = ["GPU-00000000-0000-4000-8000-000000000000", "GPU-11111111-1111-4111-8111-111111111111"]
TP_LIM = {0: 4 * GIB, 1: 6 * GIB}
DDP_LIM = {0: 12 * GIB, 1: 16 * GIB}


def status(procs, limits, sm=None):
    """a `vgpu status --json`: procs = [(pid, {physical: used bytes})]"""
    return {"devices": [{"index": g, "uuid": UUID[g], "limit": limits[g], "sm_limit": sm, "used":
                         sum(u.get(g, 0) for _, u in procs), "gpu_ns": 0} for g in (0, 1)],
            "processes": [{"pid": pid, "devices": [{"index": g, "uuid": UUID[g], "used": u.get(g, 0)}
                                                   for g in (0, 1)]} for pid, u in procs]}


def tp_run(tokens_per_s, phys_of_rank=(0, 1), limits=None, sm=None, compare=True):
    ranks = []
    held = {}
    for r in (0, 1):
        g = phys_of_rank[r]
        held[r] = (100 + r, {g: 1800 * MIB})
        k = {"rank": r, "pid": 100 + r, "uuid": UUID[g], "steps": [{"name": "decode"}, {"name": "done"}],
             "tokens_per_s": tokens_per_s, "p50_ms": 1.0, "p99_ms": 2.0,
             "mem_get_info": [GIB, (limits or {0: 140 * GIB, 1: 140 * GIB})[g]]}
        ranks.append(k)
    if compare:
        ranks[0]["compare"] = {"tokens_identical": True, "first_difference": None, "steps_compared": 512,
                               "max_abs_logit_diff": 0.0}
    ranks[0]["status_holding"] = status(list(held.values()), limits or {0: None, 1: None}, sm)
    ranks[0]["smi_apps"] = {"rows": [{"pid": pid, "uuid": UUID[g], "used_mib": 1850}
                                     for pid, u in held.values() for g in u]}
    return {"seconds": 20, "ranks": ranks}


def ddp_rank(r, g, steps_per_s, limits, vgpu=True):
    def q(region_mib, reserved_mib, real_mib):
        return {"region": {UUID[g][4:].lower(): region_mib * MIB, UUID[1 - g][4:].lower(): 0} if vgpu else None,
                "reserved": reserved_mib * MIB, "real_apps": {UUID[g][4:].lower(): real_mib}}
    return {"rank": r, "pid": 200 + r, "uuid": UUID[g], "steps": [{"name": "memory"}, {"name": "done"}],
            "windows": [steps_per_s] * 8, "steps_per_s": steps_per_s, "step_ms_p50": 1000 / steps_per_s,
            "step_ms_p99": 1100 / steps_per_s, "mem_get_info": [GIB, limits[g] if limits else 140 * GIB],
            "env": {}, "q0": q(520, 0, 500), "q1": q(3900, 3000, 3890), "q2": q(4000, 3100, 3990)}


class Logs:
    """a LOGS_DIR as run-multi.sh leaves it, for items 4c, 4t, 5 and 6"""

    def __init__(self, root):
        self.root = root
        for d in ("results", "runs", "steps"):
            os.makedirs(os.path.join(root, d), exist_ok=True)
        with open(os.path.join(root, "gpus.txt"), "w") as f:
            f.write("index, name, uuid, memory.total [MiB], memory.used [MiB]\n")
            for g in (0, 1):
                f.write(f"{g}, NVIDIA H200, {UUID[g]}, 143771 MiB, 0 MiB\n")
        self.rc = {}

    def windows(self, tag, g, units):
        with open(os.path.join(self.root, "runs", f"sm.{tag}.gpu{g}.out"), "w") as f:
            f.write("".join(f"window {i} {u}\n" for i, u in enumerate(units)))

    def json(self, rel, obj):
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(obj, f)

    def done(self, name, rc=0):
        self.rc[name] = rc

    def summarize(self):
        with open(os.path.join(self.root, "rcs.tsv"), "w") as f:
            f.write("".join(f"{k}\t{v}\t1\n" for k, v in self.rc.items()))
        out = os.path.join(self.root, "multi.txt")
        p = subprocess.run([sys.executable, os.path.join(HERE, "summarize_multi.py"), self.root, "--out", out],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        v = {}
        with open(out) as f:
            for ln in f:
                w = ln.split()
                if len(w) >= 2 and w[0] in ("PASS", "FAIL", "SKIP"):
                    v[w[1]] = w[0]
        return v


def good(root):
    L = Logs(root)
    # 4c / 4t: physical GPU 0 at 30 %, GPU 1 at 70 % of 500 units
    for tag in ("base1", "base2", "tbase"):
        for g in (0, 1):
            L.windows(tag, g, [400] + [500] * 5)
    for tag in ("cvd10", "tcvd10"):
        L.windows(tag, 0, [100] + [150] * 5)
        L.windows(tag, 1, [300] + [350] * 5)
    # 5
    L.json("results/5.bare.json", tp_run(600.0, compare=False))
    L.json("results/5.nolimit.json", tp_run(590.0))
    L.json("results/5.mem.json", tp_run(590.0, limits=TP_LIM))
    L.json("results/5.sm50.json", tp_run(400.0, sm=50))
    for n in ("5.bare", "5.nolimit", "5.mem", "5.sm50"):
        L.done(n)
    # 6: 100 steps/s plain, 50 under SM 50; under CUDA_VISIBLE_DEVICES=1,0 rank 0 is on GPU 1
    for name, phys, rate, lim in (("6.plain", (0, 1), 100, None), ("6.lim", (0, 1), 50, DDP_LIM),
                                  ("6.cvd10", (1, 0), 50, DDP_LIM), ("6.nocumem", (0, 1), 50, DDP_LIM)):
        for r in (0, 1):
            L.json(f"results/{name}.d/rank{r}.json", ddp_rank(r, phys[r], rate, lim, vgpu=lim is not None))
        if lim:
            procs = [(200 + r, {phys[r]: 4000 * MIB}) for r in (0, 1)]
            for i in (1, 2):
                L.json(f"runs/{name}.status{i}.json", status(procs, lim, 50))
                with open(os.path.join(root, "runs", f"{name}.status{i}.time"), "w") as f:
                    f.write(f"{100 + 4 * i}.0\n")
        L.done(name)
    return L


class Summary(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.L = good(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def load(self, rel):
        with open(os.path.join(self.tmp.name, rel)) as f:
            return json.load(f)

    def test_a_run_meeting_every_target_passes(self):
        v = self.L.summarize()
        wanted = [k for k in v if k.startswith(("4c.", "4t.", "5.", "6."))]
        self.assertGreater(len(wanted), 50, v)
        self.assertNotIn("5.nolimit.rank0.own-gpu", v)  # no memory limit: nothing to charge
        self.assertEqual({k: v[k] for k in wanted if v[k] != "PASS"}, {})

    def test_per_device_sm_limits_swapped_fail(self):
        self.L.windows("cvd10", 0, [300] + [350] * 5)  # GPU 0 ran at _1's 70 %
        self.L.windows("cvd10", 1, [100] + [150] * 5)
        v = self.L.summarize()
        self.assertEqual(v["4c.visible-1,0.gpu0.sm30"], "FAIL")
        self.assertEqual(v["4c.visible-1,0.gpu1.sm70"], "FAIL")
        self.assertEqual(v["4t.torch-visible-1,0.gpu0.sm30"], "PASS")

    def test_tp_memory_charged_to_the_other_gpu_fails(self):
        r = self.load("results/5.mem.json")
        procs = r["ranks"][0]["status_holding"]["processes"]
        procs[1]["devices"][0]["used"], procs[1]["devices"][1]["used"] = procs[1]["devices"][1]["used"], 0
        self.L.json("results/5.mem.json", r)
        v = self.L.summarize()
        self.assertEqual(v["5.mem.rank1.own-gpu"], "FAIL")
        self.assertEqual(v["5.mem.rank1.counted"], "FAIL")  # its real use is not counted where it is
        self.assertEqual(v["5.mem.rank0.own-gpu"], "PASS")

    def test_tp_limits_by_ordinal_fail(self):
        r = self.load("results/5.mem.json")
        r["ranks"][0]["mem_get_info"][1] = TP_LIM[1]
        self.L.json("results/5.mem.json", r)
        self.assertEqual(self.L.summarize()["5.mem.rank0.mem_get_info"], "FAIL")

    def test_tp_different_tokens_or_logits_fail(self):
        r = self.load("results/5.sm50.json")
        r["ranks"][0]["compare"].update(tokens_identical=False, first_difference=40)
        self.L.json("results/5.sm50.json", r)
        r = self.load("results/5.nolimit.json")
        r["ranks"][0]["compare"]["max_abs_logit_diff"] = 0.5
        self.L.json("results/5.nolimit.json", r)
        v = self.L.summarize()
        self.assertEqual(v["5.sm50.outputs"], "FAIL")
        self.assertEqual(v["5.nolimit.outputs"], "FAIL")
        self.assertEqual(v["5.mem.outputs"], "PASS")

    def test_tp_starved_under_sm50_fails(self):
        r = self.load("results/5.sm50.json")
        r["ranks"][0]["tokens_per_s"] = 200.0
        self.L.json("results/5.sm50.json", r)
        self.assertEqual(self.L.summarize()["5.sm50.not-starved"], "FAIL")

    def test_ddp_share_off_by_10_points_fails(self):
        for rank in (0, 1):
            k = self.load(f"results/6.lim.d/rank{rank}.json")
            k["steps_per_s"], k["windows"] = 40, [40] * 8
            self.L.json(f"results/6.lim.d/rank{rank}.json", k)
        v = self.L.summarize()
        self.assertEqual(v["6.lim.gpu0.share"], "FAIL")
        self.assertEqual(v["6.lim.gpu1.share"], "FAIL")
        self.assertEqual(v["6.cvd10.gpu0.share"], "PASS")

    def test_ddp_limits_swapped_under_visible_1_0_fail(self):
        # rank 0 is on physical GPU 1: a limiter reading _0 for its ordinal 0 shows 12 GiB
        k = self.load("results/6.cvd10.d/rank0.json")
        k["mem_get_info"][1] = DDP_LIM[0]
        self.L.json("results/6.cvd10.d/rank0.json", k)
        self.assertEqual(self.L.summarize()["6.cvd10.gpu1.mem_get_info"], "FAIL")

    def test_ddp_nccl_memory_uncounted_or_elsewhere_fails(self):
        k = self.load("results/6.lim.d/rank0.json")
        own = UUID[0][4:].lower()
        k["q1"]["region"][own] = k["q0"]["region"][own] + 3000 * MIB  # NCCL's 890 MiB not charged
        self.L.json("results/6.lim.d/rank0.json", k)
        k = self.load("results/6.nocumem.d/rank1.json")
        k["q2"]["region"][UUID[0][4:].lower()] = 64 * MIB  # something of rank 1 on GPU 0
        self.L.json("results/6.nocumem.d/rank1.json", k)
        v = self.L.summarize()
        self.assertEqual(v["6.lim.gpu0.nccl-charged"], "FAIL")
        self.assertEqual(v["6.nocumem.gpu1.own-gpu.after"], "FAIL")
        self.assertEqual(v["6.nocumem.gpu1.own-gpu.first"], "PASS")

    def test_a_hung_run_fails(self):
        self.L.done("6.cvd10", 124)
        k = copy.deepcopy(self.load("results/6.cvd10.d/rank1.json"))
        k["steps"] = k["steps"][:1]
        self.L.json("results/6.cvd10.d/rank1.json", k)
        self.assertEqual(self.L.summarize()["6.cvd10.no-hang"], "FAIL")


if __name__ == "__main__":
    unittest.main()
