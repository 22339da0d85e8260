"""Drive crates/vgpu-tests/c/probe (compiled) under the limiter on the GPU; one JSON result per run.

Every run ends its allocation phase with the probe's `hold` op: the probe prints "OK hold" and
waits on stdin, this script then reads the real device-wide used memory with nvidia-smi run
without the limiter, and closes the probe's stdin so that it goes on (freeall, ...).

The limiter's environment (LD_PRELOAD, CUDA_DEVICE_MEMORY_LIMIT) is inherited from the caller.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_util import clean_env, common_fields, emit, real_used_mib  # noqa: E402

GIB = 1 << 30
MODES = [("link", []), ("dlsym", ["--via", "dlsym"]), ("cudart", ["--via", "cudart"]),
         ("cudart-ptds", ["--via", "cudart", "--ptds"])]
EXTRA_MODES = [("gpa12000", ["--via", "gpa:12000:0"]), ("gpa13000", ["--via", "gpa:13000:0"]),
               ("gpa1-11030", ["--via", "gpa1:11030:0"])]
KINDS = ["alloc", "managed", "async", "poolasync", "vmm"]
# after the limit is reached, each of these must be denied with CUDA_ERROR_OUT_OF_MEMORY (2)
DENIAL_OPS = ["array:1024:1024", "array3d:256:256:16", "mipmap:1024:1024:3", "pitch:4096:1024:4",
              "graphalloc:4m", "managed:4m", "async:4m", "poolasync:4m", "vmm:4m", "alloc:4m"]


def parse_size(s):
    m = re.fullmatch(r"(\d+)([kmgt]?)(i?b)?", (s or "").strip().lower())
    if not m:
        return None
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[m.group(2)]


class Probe:
    """One probe process; `lines` collects its stdout; measures real used at `OK hold`."""

    def __init__(self, probe, args, env=None, timeout=120, log_prefix=""):
        self.args = args
        self.lines = []
        self.hold_used = None
        self.held = threading.Event()
        self.log_prefix = log_prefix
        self.stderr = tempfile.TemporaryFile(mode="w+")
        print(f"{log_prefix}$ {' '.join([os.path.basename(probe)] + args)}", flush=True)
        self.p = subprocess.Popen([probe] + args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.stderr, text=True, env=env)
        self.timer = threading.Timer(timeout, self._kill)
        self.timer.start()
        self.timed_out = False
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _kill(self):
        self.timed_out = True
        self.p.kill()

    def _read(self):
        for line in self.p.stdout:
            line = line.rstrip("\n")
            self.lines.append(line)
            print(f"{self.log_prefix}  {line}", flush=True)
            if line.startswith("OK hold"):
                self.held.set()
        self.held.set()  # EOF: never wait forever

    def wait_hold(self, timeout=100):
        self.held.wait(timeout)
        return any(l.startswith("OK hold") for l in self.lines)

    def release(self):
        try:
            self.p.stdin.close()
        except Exception:  # noqa: BLE001
            pass

    def finish(self):
        self.release()
        rc = self.p.wait()
        self.timer.cancel()
        self.reader.join(5)
        self.stderr.seek(0)
        err = self.stderr.read()
        if err.strip():
            tail = err.strip().splitlines()[-20:]
            print("\n".join(f"{self.log_prefix}  [stderr] {l}" for l in tail), flush=True)
        return rc

    # ---- parsing helpers ----
    def find(self, prefix):
        return [l for l in self.lines if l.startswith(prefix)]

    def kv(self, line):
        return dict(t.split("=", 1) for t in line.split()[2:] if "=" in t)


def fill_total(pr):
    gib, err, cnt = 0.0, None, 0
    for l in pr.find("OK fill") + pr.find("OK threads"):
        kv = pr.kv(l)
        gib += int(kv.get("bytes", 0)) / GIB
        cnt += int(kv.get("count", kv.get("ok", 0)))
        err = int(kv.get("err", -1))
    return gib, err, cnt


def totals_checks(pr, limit):
    checks = {}
    mi = pr.find("OK meminfo")
    if mi:
        checks["meminfo_total_eq_limit"] = int(pr.kv(mi[0]).get("total", -1)) == limit
    tm = pr.find("OK totalmem")
    if tm:
        checks["totalmem_eq_limit"] = int(tm[0].split()[2]) == limit
    nv = pr.find("OK nvml ")
    if nv:
        checks["nvml_total_eq_limit"] = int(pr.kv(nv[0]).get("total", -1)) == limit
    if len(mi) >= 3:  # start, peak, after freeall [, after trim]
        f0, f2 = int(pr.kv(mi[0])["free"]), int(pr.kv(mi[-1])["free"])
        checks["free_restored_after_freeall"] = f2 >= f0 - (4 << 20)
    checks["freeall_ok"] = bool(pr.find("OK freeall"))
    return checks


def run_single(probe, name, args, limit, result_dir, env=None, extra_checks=None, info=False,
               checks_only=False):
    base = real_used_mib()
    pr = Probe(probe, args, env=env, log_prefix=f"[{name}] ")
    held = pr.wait_hold()
    peak = real_used_mib() if held else None
    rc = pr.finish()
    gib, err, cnt = fill_total(pr)
    res = common_fields("probe-" + name)
    res.update(args=args, rc=rc, timed_out=pr.timed_out, lines=pr.lines, count=cnt, gib_obtained=gib,
               error_code=err, oom_normal=(err == 2), real_baseline_mib=base, real_peak_mib=peak,
               reached_hold=held)
    checks = totals_checks(pr, limit)
    if extra_checks:
        checks.update(extra_checks(pr))
    checks["exit_0"] = rc == 0
    res["checks"] = checks
    res["checks_only"] = checks_only
    if info:  # listed in the summary without a verdict
        res["info"] = True
        res["note"] = " / ".join(pr.lines[-2:])
    emit(res, os.path.join(result_dir, f"probe-{name}.json"))
    return res


def denial_checks(pr):
    out = {}
    for op in DENIAL_OPS:
        name = op.split(":")[0]
        ln = [l for l in pr.lines if l.split()[:2] in (["OK", name], ["ERR", name])]
        # the first line for this op after the hold
        idx = pr.lines.index("OK hold") if "OK hold" in pr.lines else 0
        after = [l for l in pr.lines[idx:] if l in ln]
        out[f"denied_{name}"] = bool(after) and after[0].startswith(f"ERR {name} 2")
    out["alloc_1g_after_freeall"] = any(l.startswith("OK alloc ptr=") and "size=1073741824" in l for l in pr.lines)
    return out


def codes(pr, op, key):
    """The `key=` values of every `OK op` line, in order."""
    return [int(pr.kv(l).get(key, -1)) for l in pr.find(f"OK {op} ")]


def escape_cases(probe, limit, results, budget_ok):
    """The paths where memory used to escape the limit or be counted wrongly, on the real
    driver (the simulator's tests in crates/vgpu-tests/tests/alloc_paths.rs, sized for the
    limit here: 4 GiB by default). Each run's real peak is judged by the summary as every
    other's (within the limit)."""
    mib = 1 << 20
    # Graph memory nodes: three of 1600 MiB each fit beside the context alone, not together:
    # refused at an upload and at the launch; then two of 1500 MiB fit and run (the graph
    # pool keeps their 3000 MiB reserved through the hold).
    if budget_ok("graph-nodes"):
        run_single(probe, "graph-nodes",
                   ["init", "ctx", "graphallocs:3:1600m:upload", "graphallocs:3:1600m",
                    "graphallocs:2:1500m", "meminfo", "hold", "freeall", "trim", "meminfo"],
                   limit, results, checks_only=True,
                   extra_checks=lambda pr: {"three_refused_at_upload":
                                                codes(pr, "graphallocs", "upload")[:1] == [2],
                                            "three_refused_at_launch":
                                                codes(pr, "graphallocs", "launch")[:2] == [2, 2],
                                            "two_fit_run": codes(pr, "graphallocs", "launch")[2:] == [0]})
    # The same nodes in a child graph whose ownership moved to its parent (cuGraphAddNode,
    # CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE), and beside a conditional node (whose bodies CUDA
    # lets hold no memory nodes): still charged before the launch. The probe says how it
    # added the child (`via=move`) or the conditional node, and that the driver took it.
    for case, opt, made in (("graph-child", "child", {"via": "move", "add": "0"}),
                            ("graph-cond", "cond", {"add": "0"})):
        if not budget_ok(case):
            continue
        def variant(pr, opt=opt, made=made):
            added = [pr.kv(l) for l in pr.find("OK graphallocs-%s " % opt)]
            return {"%s_added" % opt: bool(added) and all(
                        all(v.get(k) == x for k, x in made.items()) for v in added),
                    "three_refused_at_launch": codes(pr, "graphallocs", "launch")[:1] == [2],
                    "two_fit_run": codes(pr, "graphallocs", "launch")[1:] == [0]}
        run_single(probe, case,
                   ["init", "ctx", "graphallocs:3:1600m:" + opt, "graphallocs:2:1500m:" + opt,
                    "meminfo", "hold", "freeall", "trim", "meminfo"],
                   limit, results, checks_only=True, extra_checks=variant)
    # A captured cudaMallocAsync allocates nothing and is charged once, when the graph runs.
    if budget_ok("captured-async"):
        def captured(pr):
            before, cap = codes(pr, "capalloc", "before"), codes(pr, "capalloc", "captured")
            launched, lr = codes(pr, "capalloc", "launched"), codes(pr, "capalloc", "launch")
            if not (before and cap and launched and lr):
                return {"capalloc_ran": False}
            grew = before[0] - launched[0]
            return {"nothing_charged_at_capture": abs(before[0] - cap[0]) <= 2 * mib,
                    "launch_ok": lr[0] == 0,
                    "charged_once_at_launch": 2048 * mib <= grew <= 2048 * mib + 64 * mib}
        run_single(probe, "captured-async",
                   ["init", "ctx", "capalloc:2:1g", "meminfo", "hold", "freeall", "trim", "meminfo"],
                   limit, results, extra_checks=captured, checks_only=True)
    # A pool destroyed with a live allocation keeps it charged until it is freed.
    if budget_ok("pool-destroyed"):
        def destroyed(pr):
            lines = [l for l in pr.lines if l.split()[1:2] == ["poolasync"]]
            return {"second_refused": len(lines) > 1 and lines[1].startswith("ERR poolasync 2"),
                    "fits_after_free": len(lines) > 2 and lines[2].startswith("OK poolasync")}
        run_single(probe, "pool-destroyed",
                   ["init", "ctx", "poolasync:2500m", "pooldestroy", "poolasync:2500m", "hold",
                    "freeall", "poolasync:2500m", "freeall", "meminfo"],
                   limit, results, extra_checks=destroyed, checks_only=True)
    # A VMM handle released while mapped keeps its memory, and its charge, until unmapped.
    if budget_ok("link-vmmrel"):
        run_single(probe, "link-vmmrel",
                   ["init", "ctx", "meminfo", "fill:vmmrel:256m", "meminfo", "hold", "freeall",
                    "meminfo"], limit, results)
    # Arguments the driver refuses whatever the size get the driver's code, not OUT_OF_MEMORY.
    if budget_ok("badargs"):
        bare = Probe(probe, ["init", "ctx", "badargs"], env=clean_env(), log_prefix="[badargs-bare] ")
        rb = bare.finish()
        lim = Probe(probe, ["init", "ctx", "badargs"], log_prefix="[badargs] ")
        rl = lim.finish()
        cb, cl = bare.find("OK badargs"), lim.find("OK badargs")
        res = common_fields("probe-badargs")
        res.update(rc=rl, rc_bare=rb, bare=cb, limited=cl, checks_only=True,
                   checks={"exit_0": rl == 0, "same_codes_as_the_driver": bool(cb) and cb == cl})
        emit(res, os.path.join(results, "probe-badargs.json"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--probe", required=True)
    ap.add_argument("--results", required=True, help="directory for the JSON results")
    ap.add_argument("--budget", type=float, default=240, help="seconds; later runs are skipped")
    ap.add_argument("--work", default=None, help="scratch dir for shared-region files")
    ap.add_argument("--only", default="", help="comma-separated groups: escapes, paths, denial, "
                    "v1, threads, two-procs, reclaim (default: all)")
    args = ap.parse_args()
    limit = parse_size(os.environ.get("CUDA_DEVICE_MEMORY_LIMIT", "")) or 0
    work = args.work or tempfile.mkdtemp(prefix="vgpu-probe-")
    os.makedirs(args.results, exist_ok=True)
    t0 = time.time()
    skipped = []

    only = set(filter(None, args.only.split(",")))

    def group(name):
        return not only or name in only

    def budget_ok(name):
        if time.time() - t0 > args.budget:
            skipped.append(name)
            print(f"[{name}] SKIPPED (budget)", flush=True)
            return False
        return True

    if group("escapes"):
        escape_cases(args.probe, limit, args.results, budget_ok)
    common = ["init", "ctx", "meminfo", "totalmem", "nvml"]
    # meminfo after freeall (pools with release threshold 0 give memory back at the sync) and
    # after trim (cuMemPoolTrimTo + cuDeviceGraphMemTrim): the check uses the last one
    tail = ["meminfo", "hold", "freeall", "meminfo", "trim", "meminfo"]
    for mode, via in MODES if group("paths") else ():
        for kind in KINDS:
            name = f"{mode}-{kind}"
            if budget_ok(name):
                run_single(args.probe, name, via + common + [f"fill:{kind}:256m"] + tail, limit, args.results)
    for mode, via in EXTRA_MODES if group("paths") else ():
        for kind in ("alloc", "vmm"):
            name = f"{mode}-{kind}"
            if budget_ok(name):
                run_single(args.probe, name, via + common + [f"fill:{kind}:256m"] + tail, limit, args.results)
    for mode, via in MODES if group("denial") else ():
        name = f"{mode}-denial"
        if budget_ok(name):
            ops = ["init", "ctx", "fill:alloc:256m", "fill:alloc:2m", "hold"] + DENIAL_OPS
            ops += ["meminfo", "freeall", "trim", "meminfo", "alloc:1g", "free"]
            run_single(args.probe, name, via + ops, limit, args.results, extra_checks=denial_checks)
    # the legacy 32-bit cuMemAlloc (v1) once the limit is reached: informational (the real
    # driver may not support it in a 64-bit process at all)
    for mode, via in MODES[:2] if group("v1") else ():
        name = f"{mode}-alloc_v1"
        if budget_ok(name):
            run_single(args.probe, name, via + ["init", "ctx", "fill:alloc:256m", "fill:alloc:2m", "hold",
                                                 "alloc_v1:4m", "freeall"], limit, args.results, info=True)
    if group("threads") and budget_ok("threads"):
        run_single(args.probe, "threads", ["init", "ctx", "threads:8:alloc:64m:16", "hold", "freeall"], limit,
                   args.results)
    if group("threads") and budget_ok("threads-vmm"):
        run_single(args.probe, "threads-vmm", ["--via", "cudart", "init", "ctx", "threads:8:vmm:64m:16", "hold",
                                                "freeall"], limit, args.results)

    # Two processes of one container share the limit (HAMi semantics): A fills, then B fills.
    if group("two-procs") and budget_ok("two-procs"):
        env = dict(os.environ, CUDA_DEVICE_MEMORY_SHARED_CACHE=os.path.join(work, "two-procs.cache"))
        base = real_used_mib()
        a = Probe(args.probe, ["init", "ctx", "fill:alloc:256m", "hold", "freeall"], env=env, log_prefix="[two-A] ")
        a.wait_hold()
        b = Probe(args.probe, ["init", "ctx", "meminfo", "fill:alloc:256m", "hold", "freeall"], env=env,
                  log_prefix="[two-B] ")
        b.wait_hold()
        peak = real_used_mib()
        rb = b.finish()
        ra = a.finish()
        ga, ea, _ = fill_total(a)
        gb, eb, _ = fill_total(b)
        res = common_fields("probe-two-procs")
        res.update(gib_obtained=ga + gb, gib_a=ga, gib_b=gb, error_code=eb, oom_normal=(ea == 2 and eb == 2),
                   real_baseline_mib=base, real_peak_mib=peak, lines_a=a.lines, lines_b=b.lines,
                   checks={"exit_0": ra == 0 and rb == 0},
                   note="limit shared by the processes of a container (HAMi): A+B within the limit")
        emit(res, os.path.join(args.results, "probe-two-procs.json"))

    # A process killed while holding memory must not keep its share: the next one gets it all.
    if group("reclaim") and budget_ok("reclaim-after-kill"):
        env = dict(os.environ, CUDA_DEVICE_MEMORY_SHARED_CACHE=os.path.join(work, "reclaim.cache"))
        k = Probe(args.probe, ["init", "ctx", "fill:alloc:256m", "kill"], env=env, log_prefix="[killed] ")
        rk = k.finish()
        time.sleep(1)
        run_single(args.probe, "reclaim-after-kill", ["init", "ctx", "fill:alloc:256m", "hold", "freeall"], limit,
                   args.results, env=env,
                   extra_checks=lambda pr: {"first_was_killed": rk in (-9, 137), "first_filled": bool(fill_total(k)[0])})

    print(f"mem_probe: done in {time.time() - t0:.1f}s, skipped={skipped}", flush=True)
    if skipped:
        res = common_fields("probe-skipped")
        res.update(info=True, skipped=skipped)
        emit(res, os.path.join(args.results, "probe-skipped.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
