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
from gpu_util import common_fields, emit, real_used_mib  # noqa: E402

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


def run_single(probe, name, args, limit, result_dir, env=None, extra_checks=None, info=False):
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--probe", required=True)
    ap.add_argument("--results", required=True, help="directory for the JSON results")
    ap.add_argument("--budget", type=float, default=240, help="seconds; later runs are skipped")
    ap.add_argument("--work", default=None, help="scratch dir for shared-region files")
    args = ap.parse_args()
    limit = parse_size(os.environ.get("CUDA_DEVICE_MEMORY_LIMIT", "")) or 0
    work = args.work or tempfile.mkdtemp(prefix="vgpu-probe-")
    os.makedirs(args.results, exist_ok=True)
    t0 = time.time()
    skipped = []

    def budget_ok(name):
        if time.time() - t0 > args.budget:
            skipped.append(name)
            print(f"[{name}] SKIPPED (budget)", flush=True)
            return False
        return True

    common = ["init", "ctx", "meminfo", "totalmem", "nvml"]
    # meminfo after freeall (pools with release threshold 0 give memory back at the sync) and
    # after trim (cuMemPoolTrimTo + cuDeviceGraphMemTrim): the check uses the last one
    tail = ["meminfo", "hold", "freeall", "meminfo", "trim", "meminfo"]
    for mode, via in MODES:
        for kind in KINDS:
            name = f"{mode}-{kind}"
            if budget_ok(name):
                run_single(args.probe, name, via + common + [f"fill:{kind}:256m"] + tail, limit, args.results)
    for mode, via in EXTRA_MODES:
        for kind in ("alloc", "vmm"):
            name = f"{mode}-{kind}"
            if budget_ok(name):
                run_single(args.probe, name, via + common + [f"fill:{kind}:256m"] + tail, limit, args.results)
    for mode, via in MODES:
        name = f"{mode}-denial"
        if budget_ok(name):
            ops = ["init", "ctx", "fill:alloc:256m", "fill:alloc:2m", "hold"] + DENIAL_OPS
            ops += ["meminfo", "freeall", "trim", "meminfo", "alloc:1g", "free"]
            run_single(args.probe, name, via + ops, limit, args.results, extra_checks=denial_checks)
    # the legacy 32-bit cuMemAlloc (v1) once the limit is reached: informational (the real
    # driver may not support it in a 64-bit process at all)
    for mode, via in MODES[:2]:
        name = f"{mode}-alloc_v1"
        if budget_ok(name):
            run_single(args.probe, name, via + ["init", "ctx", "fill:alloc:256m", "fill:alloc:2m", "hold",
                                                 "alloc_v1:4m", "freeall"], limit, args.results, info=True)
    if budget_ok("threads"):
        run_single(args.probe, "threads", ["init", "ctx", "threads:8:alloc:64m:16", "hold", "freeall"], limit,
                   args.results)
    if budget_ok("threads-vmm"):
        run_single(args.probe, "threads-vmm", ["--via", "cudart", "init", "ctx", "threads:8:vmm:64m:16", "hold",
                                                "freeall"], limit, args.results)

    # Two processes of one container share the limit (HAMi semantics): A fills, then B fills.
    if budget_ok("two-procs"):
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
    if budget_ok("reclaim-after-kill"):
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
