#!/usr/bin/env python3
"""Issue 23's framework-shaped benchmarks, side by side: plain, vgpu, HAMi-core and MPS.

    python3 tests/gpu/gen3/gen3_bench.py GROUP [GROUP...] --lib LIB [--hami LIB] [--out DIR]
            [--seconds S] [--only REGEX]

Groups (each a list of scenarios; a scenario runs its members at once, one process each, every
member a "container" with its own region file; all of a scenario's containers share one node
directory):
  alone    host-bound stream (5/20/100 us gaps) and the decode service alone: plain, vgpu at 50
           and 25 % (the decode service also with VGPU_HOLD_BRACKETS=false, "unheld"),
           HAMi-core, MPS (target 1)
  cnn      the ResNet-50 training loop alone at 50/25 % (also unheld), and two of them at 30/70 and 50/50:
           plain time-slicing, vgpu, vgpu work-conserving, HAMi-core, MPS, and the --lib2
           variant ("overlap") (target 2)
  beside   the host-bound stream beside a saturating 11 ms / 50 us kernel loop at 50/50, the
           decode service beside the training loop at 50/50 and 30/70, and with priorities
           (targets 3 and 4)
  t13      the decode service alone (plain, vgpu 30 %, twice, interleaved) and beside the
           training loop (plain, vgpu 30/70 and 50/50, MPS 30/70), with the loop alone
  val      the decode service alone (plain twice, vgpu 25/50/30) and beside the training loop
           at 30/70 (vgpu, MPS), with the loop alone: targets 1 and 3 in the fewest seconds
  diag     the decode service at 30 % alone and beside the loop at 30/70 (for --trace)
  cost     the decode service plain, with the library loaded and no limit, at 25 % held and
           unheld, interleaved (what the library costs a service it never holds)
  keep     two saturating kernel loops at 30/70 and 50/50, and 11 ms beside 50 us kernels at
           50/50 (the first generation's exact cases)
  close1   targets 1 and 2 in one device call (decode and streams alone, the loop alone and
           in pairs, work-conserving and MPS)
  close2   targets 3 and 4 in one device call (stream beside loops, decode beside the loop:
           vgpu, work-conserving, MPS, priorities; each alone in the same run)
  close3   target 3's work-conserving clause and target 4 without limits, with MPS and plain
           co-location, the service and the loop alone twice
  close4   target 4 without limits twice, work-conserving and MPS at 50/50, plain co-location,
           the service and the loop alone twice
  close5   the 5 us stream at 25 % and the ResNet pair at 30/70, each beside two plain runs
  close6   the ResNet pair at 30/70 (twice) and 50/50 on --lib and on the --lib2 variant
           ("varb"), interleaved, with plain time-slicing and the loop alone twice
  close7   close6's 30/70 pairs, and the decode service beside the loop at 30/70, on both
  close8   target 4 (priorities without limits) on both libraries, twice each, interleaved
  close9   the 11 ms loop pair at 30/70 on both libraries, twice each, interleaved
  close10  target 4, the 5 us stream beside 50 us kernels and decode beside the loop at 50/50
           on both libraries, interleaved
  close11  keep's loop pairs on both libraries, twice each, interleaved, and 64 loops at 10 %
           on each
  close13  a light (high-priority) peer's synchronisation holding a heavy (low) process:
           this library against --lib2 and --lib3, the stream beside 50 us kernels, decode
           beside the loop at 50/50 with MPS, and priorities
  close14  the decode service beside the loop at 50/50 and 30/70 on this library and the
           --lib2 variant (MPS at 50/50), the ResNet pair at 30/70 on this library and --lib3
  close15  the decode service alone at 25/50 %, the 5 us stream beside 50 us kernels at 50/50
           and target 4 (priorities) on this library and --lib3, interleaved
  close16  one call: decode alone at 50/25 %, beside the loop at 50/50 (this library, --lib2,
           MPS), the ResNet pair at 30/70 (this library, --lib3)
  close17  target 3 in rounds: the decode service alone, beside the loop at 50/50 on this
           library and on MPS, --rounds rounds (3) interleaved (its host time moves up to 1.7x within
           one call, so each round is judged against its own alone run), and on --lib3 if
           given; the service alone at 50 and 25 % after the first
  close18  close17's rounds on this library, --lib2 and --lib3 (an A/B/C), without target 1's
           runs
  close19  targets 3 and 4 in two interleaved rounds: decode beside the loop at 50/50 on this
           library, --lib2 and MPS; at priorities 0 / 1 on this library and --lib3, then
           plain co-location
  close20  target 2 in --rounds interleaved rounds (2 or 3): the ResNet pair at 30/70 on this
           library and --lib3, plain time-slicing's pair, the loop alone; the pair at 50/50
  close21  target 2 whole on this library: the loop alone plain, at 50 and 25 %; the pair plain,
           at 30/70 and 50/50, work-conserving at both, HAMi-core and MPS at 30/70
  close22  target 4 alone in --rounds rounds (2 at most): decode alone, then at priority 0
           beside the loop at 1 on this library, then plain co-location
  close23  target 3's decode clauses at 50/50 and 30/70 in --rounds interleaved rounds
           (alone, beside the loop on this library and on MPS)
  close24  target 4 in two interleaved rounds on this library, --lib2 and --lib3, each
           round ending with plain co-location (the service profiled by CUPTI for the bar)
  close25  targets 3 (both shares) and 4 in two interleaved rounds: this library, --lib2
           and MPS beside the loop; priorities on this library and --lib3, then plain
           co-location
  close26  target 3 (both shares) in --rounds interleaved rounds (2 at most), an A/B/C/MPS:
           this library, --lib2 ("varb"), --lib3 ("varc") and MPS beside the loop
  close27  targets 2, 3 and 4 as an A/B/C: the ResNet pair at 30/70 on this library, --lib2
           ("varb") and --lib3 ("varc") in --rounds interleaved rounds (3 at most), the 5 us
           stream beside 50 us kernels at 50/50 on this library and --lib2 twice, decode
           beside the loop at 30/70 (this library, --lib2, MPS), target 4 (this library, --lib3,
           plain co-location)
  close28  the loop alone; the service alone three ways, one after the other: beside a CPU-bound
           process (no GPU work), plain, on MPS (no neighbour): whether MPS's client or a busy
           core makes MPS's service beside training faster than the service alone; then
           target 3's decode clauses at 30/70 in one round, an A/B/C/MPS
  close29  targets 1 and 2 whole and target 3's stream on this library (8 s windows): alone,
           the service alone plain again, the stream beside loops, close21
  close30  target 3's decode clauses at 50/50 and 30/70 (this library, MPS, work-conserving
           at 50/50) and target 4 (priorities, no limits) in one round: use --seconds 30;
           with the service's GPU time a request by CUPTI on this machine (target 4's bar)
  close31  target 3's decode at 30/70, an A/C/MPS: the loop alone, the service alone, beside
           the loop on this library, on --lib3 ("varc"; fd13906's hungry rule against e868331,
           before it: `scripts/gpu-kit.sh -c e868331`) and on MPS, then plain co-location; use
           --seconds 20 --debug (the trainer's counters say whether it was held)
  close32  targets 4 and 3's work-conserving clause as an A/C (the price re-timing rules,
           `scripts/gpu-kit.sh -b tests/gpu/gen3/lowdepth2.patch -c f917466`): the loop alone,
           the service's CUPTI profile, the service alone; priorities on this library, --lib2
           ("varb") and --lib3 ("varc"), plain co-location;
           work-conserving at 50/50 on this library and --lib3, then MPS at 50/50
  close33  close32, then target 3 at 50/50 and 30/70 on this library and MPS (one round): every
           decode clause from one machine start, about 470 s at --seconds 20
  crowd    64 saturating loops of 50 us kernels, plain and each at 10 % (target 5)
  waits1   a short check of what synchronisations charge on real work (use --debug): the
           decode service plain and at 50 %, the ResNet loop plain and at 50 %, and the
           service's GPU time a request by CUPTI (target 4's bar)

Every member waits for a common start and measures the same window (--seconds), so that
start-up (imports, model builds, warm-up) is outside it: PyTorch members say when they are
ready and start together once all are (barrier.py; at most 8 x --startup s), the C ones at a
fixed time (2 s on, --startup with more than 8 members). Each scenario prints one line
`scenario NAME member=metric ...`, appended to $OUT/gen3.txt as it ends (a member whose
start-up outran the common start by more than half a second says by how much, `late`: its
window overlapped the others' less), with every process's output packed into
$OUT/gen3-logs.tgz after each scenario (a call cut short by its time limit keeps what ran; the
device tool brings back at most 8 files). A member still running --hang seconds after the window is stopped: first SIGABRT (Python's
faulthandler prints every thread's stack), with gdb's backtraces of its threads first where gdb
exists, then SIGKILL; its line says TIMEOUT.
"""
import signal
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
COMPUTE = os.path.join(HERE, "..", "compute")
# The "spin" workload: one core busy in Python for argv[1] seconds from the common start
# (argv[2], the scenario's start file, through barrier.py), no CUDA; prints how long it spun
# and, as the other members, how late it began.
SPIN = """import sys, time
sys.path.insert(0, sys.argv[3])
from barrier import wait_for_start
secs = float(sys.argv[1])
start = wait_for_start(sys.argv[2])
while time.time() < start:
    time.sleep(0.001)
t0 = time.time()
while time.time() < start + secs:
    pass
print("spun_s=%.2f late_s=%.2f" % (time.time() - t0, max(0.0, t0 - start)))
"""
# Target 4's task priorities: the service high (0), the training loop low (1).
PRIORITIES = ({"CUDA_TASK_PRIORITY": "0"}, {"CUDA_TASK_PRIORITY": "1"})


def log(msg):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


class Bench:
    def __init__(self, a):
        self.a = a
        self.work = tempfile.mkdtemp(prefix="vgpu-gen3.")
        self.logs = os.path.join(self.work, "gen3-logs")
        os.makedirs(self.logs, exist_ok=True)
        self.n = 0
        self.mps = None
        self.built = {}
        self.iters = {}

    def binary(self, w):
        """The C benchmark workload `w` runs (None for the Python ones), compiled at its first
        use: a run of PyTorch scenarios only compiles nothing."""
        if w.startswith("stream"):
            name, src = "stream_bench", os.path.join(HERE, "stream_bench.cu")
        elif w.startswith("loop"):
            name, src = "sm_bench", os.path.join(COMPUTE, "sm_bench.cu")
        else:
            return None
        if name not in self.built:
            nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
            dst = os.path.join(self.work, name)
            r = subprocess.run([nvcc, "-O2", "-arch=sm_90", "-o", dst, src, "-lpthread"],
                               capture_output=True, text=True, timeout=300)
            if r.returncode:
                log("nvcc %s failed: %s" % (src, r.stderr[-1500:]))
                sys.exit(3)
            self.built[name] = dst
        return self.built[name]

    # ---- members ------------------------------------------------------------------------------
    # Modes that run --lib2, a variant build ("overlap": overlap.patch; "vgpu-b": any other
    # patch under test, e.g. turnwork.patch), beside --lib in the same call.
    VARIANT = ("vgpu-overlap", "vgpu-b", "vgpu-b-lib")
    # Modes that run --lib3, a second variant ("varc").
    VARIANT3 = ("vgpu-c", "vgpu-c-lib", "vgpu-c-wc")

    PINS = {"decode": "2,3", "cnn": "4-7", "spin": "8"}

    def pinned(self, w):
        """With --pin, the PyTorch members run on fixed cores (the same in every scenario): the
        VM's scheduler's placement alone moved the decode service's request time 132-212 ms
        between processes of one mode (run 64)."""
        if not self.a.pin or w not in self.PINS or not shutil.which("taskset"):
            return []
        return ["taskset", "-c", self.PINS[w]]

    def command(self, w, secs, start):
        py = sys.executable
        if w.startswith("stream"):
            gap = w[len("stream"):] or "5"
            return [self.binary(w), gap, "256", str(secs), str(start)]
        if w == "decode":
            return [py, os.path.join(HERE, "decode_service.py"), "--seconds", str(secs),
                    "--start-file", start, "--period", str(self.a.decode_period)]
        if w == "decodeprof":
            # What a request costs the GPU by CUPTI on this machine (target 4's bar), alone.
            return [py, os.path.join(HERE, "decode_service.py"), "--profile", "20"]
        if w == "cnn":
            return [py, os.path.join(HERE, "cnn_train.py"), "--seconds", str(secs),
                    "--start-file", start]
        if w == "spin":
            # A CPU-bound neighbour with no GPU work, from the common start for the window.
            return [py, "-c", SPIN, str(secs), start, HERE]
        if w in ("loop11", "loop50us"):
            shape = {"loop11": "k:8448:11:4", "loop50us": "k:528:0.05:4"}[w]
            cmd = [self.binary(w), shape, str(int(secs + (start - time.time())) + 1)]
            if w in self.iters:
                cmd.append(str(self.iters[w]))
            return cmd
        raise SystemExit("unknown workload " + w)

    def env(self, mode, limit, i, extra):
        e = dict(os.environ)
        for k in list(e):
            if k.startswith(("CUDA_DEVICE_", "VGPU_", "CUDA_MPS_", "CUDA_TASK")):
                del e[k]
        e.pop("LD_PRELOAD", None)
        e["PYTHONFAULTHANDLER"] = "1"
        if mode.startswith("vgpu"):
            e["LD_PRELOAD"] = (self.a.lib2 if mode in self.VARIANT else
                               self.a.lib3 if mode in self.VARIANT3 else self.a.lib)
            if mode not in ("vgpu-lib", "vgpu-b-lib", "vgpu-c-lib"):
                e["CUDA_DEVICE_SM_LIMIT"] = str(limit)
            e["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = os.path.join(self.scen, "c%d.cache" % i)
            e["VGPU_NODE_DIR"] = os.path.join(self.scen, "node")
            if mode in ("vgpu-wc", "vgpu-c-wc"):
                e["VGPU_SM_WORK_CONSERVING"] = "true"
            if mode == "vgpu-unheld":
                e["VGPU_HOLD_BRACKETS"] = "false"
            if self.a.debug or self.a.trace:
                e["LIBCUDA_LOG_LEVEL"] = "5" if self.a.trace else "4"
        elif mode == "hami":
            e["LD_PRELOAD"] = self.a.hami
            e["CUDA_REDIRECT"] = self.a.hami
            e["GPU_CORE_UTILIZATION_POLICY"] = "force"
            e["CUDA_DEVICE_SM_LIMIT"] = str(limit)
            e["CUDA_DEVICE_MEMORY_LIMIT"] = "60g"
            e["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = "/tmp/hami-%d-%d.cache" % (self.n, i)
        elif mode == "mps":
            e["CUDA_MPS_PIPE_DIRECTORY"] = self.mps_pipe
            e["CUDA_MPS_LOG_DIRECTORY"] = self.mps_log
            e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(limit)
        e.update(extra)
        return e

    def start_mps(self):
        if self.mps:
            return True
        self.mps_pipe = os.path.join(self.work, "mps-pipe")
        self.mps_log = os.path.join(self.work, "mps-log")
        os.makedirs(self.mps_pipe)
        os.makedirs(self.mps_log)
        e = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=self.mps_pipe,
                 CUDA_MPS_LOG_DIRECTORY=self.mps_log)
        r = subprocess.run(["nvidia-cuda-mps-control", "-d"], env=e, capture_output=True,
                           text=True, timeout=30)
        if r.returncode:
            log("MPS did not start: %s" % r.stderr)
            return False
        self.mps = e
        time.sleep(1)
        return True

    def stop_mps(self):
        if self.mps:
            subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", env=self.mps, text=True,
                           capture_output=True, timeout=30)
            self.mps = None

    # ---- a scenario ---------------------------------------------------------------------------
    def scenario(self, name, members):
        """members: [(label, workload, mode, limit, extra_env)]"""
        if self.a.only and not re.search(self.a.only, name):
            return
        if any(m[2] == "hami" for m in members) and not self.a.hami:
            return
        if any(m[2] in self.VARIANT for m in members) and not self.a.lib2:
            return
        if any(m[2] in self.VARIANT3 for m in members) and not self.a.lib3:
            return
        if any(m[2] == "mps" for m in members) and not self.start_mps():
            return
        self.n += 1
        self.scen = os.path.join(self.work, "s%d" % self.n)
        os.makedirs(os.path.join(self.scen, "node"))
        secs = self.a.seconds
        for m in members:
            self.binary(m[1])  # compiled before the common start time is set
        torch = [m for m in members if m[1] in ("decode", "cnn", "spin")]
        # The PyTorch members start together once all are ready (a barrier: their start-up
        # under a limit varies, and a fixed start let a training member start 11 s late), and
        # the CPU-bound "spin" neighbour with them; the C ones at a fixed time (many members,
        # each a context to create, need longer).
        start_file = os.path.join(self.scen, "start")
        start = time.time() + (self.a.startup if len(members) > 8 else 2.0)
        procs = []
        for i, (label, w, mode, limit, extra) in enumerate(members):
            out = open(os.path.join(self.logs, "%02d-%s-%s.log" % (self.n, name, label)), "w")
            when = start_file if (label, w, mode, limit, extra) in torch else start
            p = subprocess.Popen(self.pinned(w) + self.command(w, secs, when), stdout=subprocess.PIPE,
                                 stderr=out, env=self.env(mode, limit, i, extra), text=True)
            procs.append((label, w, p, out))
        if torch:
            start = self.release(start_file, len(torch), [p for _, _, p, _ in procs])
        res = {}
        deadline = start + secs + self.a.hang
        if any(m[1].startswith("loop") for m in members):
            # sm_bench counts its SECONDS from its own first launch, after its context is up:
            # with many members that took the whole --startup, and the first ones spawned (the
            # longest SECONDS) ran past a deadline without it (run 76's p00 and p01).
            deadline += self.a.startup
        for label, w, p, out in procs:
            try:
                so, _ = p.communicate(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                self.stop_hung(p, out)
                so, _ = p.communicate()
                out.write("\n--- stdout ---\n" + (so or ""))
                out.close()
                res[label] = "TIMEOUT"
                continue
            out.write("\n--- stdout ---\n" + so)
            out.close()
            res[label] = self.parse(w, so, p.returncode)
            if w.startswith("loop") and w not in self.iters:
                m = re.search(r"iters=(\d+)", so)
                if m:
                    self.iters[w] = int(m.group(1))
        kps = [v["kps"] for v in res.values() if isinstance(v, dict) and "kps" in v]
        if len(res) > 8:
            res["all"] = {"n": len(res), "min": min(kps, default=0), "max": max(kps, default=0),
                          "starved": sum(1 for k in kps if k <= 0) + len(res) - len(kps)}
        line = "scenario %s %s" % (name, " ".join(
            "%s=%s" % (k, json.dumps(v, separators=(",", ":"))) for k, v in res.items()))
        log(line)
        with open(os.path.join(self.a.out, "gen3.txt"), "a") as f:
            f.write(line + "\n")
        subprocess.run(["tar", "czf", os.path.join(self.a.out, "gen3-logs.tgz"), "-C", self.work,
                        "gen3-logs"], check=False)

    def release(self, start_file, n, procs):
        """Waits (at most --startup x 8 s) until `n` members said they are ready, or one
        exited, then writes the common start (half a second on) into `start_file`."""
        deadline = time.time() + 8 * self.a.startup
        d = os.path.dirname(start_file)
        while time.time() < deadline and all(p.poll() is None for p in procs):
            ready = [f for f in os.listdir(d) if f.startswith("start.ready.")]
            if len(ready) >= n:
                break
            time.sleep(0.05)
        start = time.time() + 0.5
        with open(start_file + ".tmp", "w") as f:
            f.write(repr(start))
        os.rename(start_file + ".tmp", start_file)
        return start

    @staticmethod
    def stop_hung(p, out):
        """A member past its deadline: where it stands (gdb's backtraces, Python's stacks),
        then killed."""
        gdb = shutil.which("gdb")
        if gdb:
            r = subprocess.run([gdb, "-p", str(p.pid), "-batch", "-ex", "thread apply all bt 25"],
                               capture_output=True, text=True, timeout=60)
            out.write("\n--- gdb ---\n" + r.stdout[-60000:])
        out.flush()
        p.send_signal(signal.SIGABRT)
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()

    @staticmethod
    def parse(w, so, rc):
        r = Bench.metrics(w, so, rc)
        m = re.search(r"late_s=([\d.]+)", so)
        if m and float(m.group(1)) > 0.5:
            r["late"] = float(m.group(1))
        return r

    @staticmethod
    def metrics(w, so, rc):
        if rc:
            return {"rc": rc}
        if w.startswith("stream"):
            m = re.search(r"us_per_launch=([\d.]+)", so)
            return {"us": float(m.group(1))} if m else {"err": so[-200:]}
        if w == "decode":
            m = re.search(r"p50_ms=([\d.]+) p90_ms=([\d.]+) p99_ms=([\d.]+) mean_ms=([\d.]+)", so)
            if not m:
                return {"err": so[-200:]}
            r = {"p50": float(m.group(1)), "p90": float(m.group(2)), "p99": float(m.group(3))}
            c = re.search(r"req_ms=([\d.]+) sync_ms=([\d.]+)", so)
            if c:
                r.update(req=float(c.group(1)), sync=float(c.group(2)))
            per = re.search(r"period_ms=([\d.]+)", so)
            if per:
                r["period"] = float(per.group(1))
            g = re.search(r"gap_ms=([\d.]+)/([\d.]+)/([\d.]+)", so)
            if g:
                # Between two tokens' read-backs: 10th / 50th / 90th percentile (ms).
                r["gap"] = [float(x) for x in g.groups()]
            lat = re.search(r"lat_ms=([\d.,]+)", so)
            if lat:
                # Every request's latency, for summarize.py to pool rounds.
                r["lat"] = [float(x) for x in lat.group(1).split(",")]
            return r
        if w == "decodeprof":
            m = re.search(r"wall_ms_per_request=([\d.]+) gpu_ms_per_request=([\d.]+) "
                          r"kernels_per_request=(\d+)", so)
            return ({"wall": float(m.group(1)), "gpu": float(m.group(2)), "kernels": int(m.group(3))}
                    if m else {"err": so[-200:]})
        if w == "spin":
            m = re.search(r"spun_s=([\d.]+)", so)
            return {"spun": float(m.group(1))} if m else {"err": so[-200:]}
        if w == "cnn":
            m = re.search(r"steps_per_s=([\d.]+)", so)
            return {"sps": float(m.group(1))} if m else {"err": so[-200:]}
        m = re.search(r"total (\d+) (\d+)", so)
        wins = [int(x) for x in re.findall(r"^window \d+ (\d+)", so, re.M)]
        return {"kps": int(m.group(1)) / int(m.group(2)), "win": wins} if m else {"err": so[-300:]}

    # ---- groups -------------------------------------------------------------------------------
    def decode(self, tag, mode="plain", limit=100):
        """The decode service alone: scenario `decode.TAG`."""
        self.scenario("decode." + tag, [("d", "decode", mode, limit, {})])

    def profile(self):
        """What a decode request costs the GPU by CUPTI, plain and alone: `decode.profile`."""
        self.scenario("decode.profile", [("d", "decodeprof", "plain", 100, {})])

    def cnn1(self, tag, mode="plain", limit=100):
        """The training loop alone: scenario `cnn.TAG`."""
        self.scenario("cnn." + tag, [("t", "cnn", mode, limit, {})])

    def decode_cnn(self, tag, mode, a, b, extra=({}, {})):
        """The decode service at `a` beside the training loop at `b`: `decode+cnn.TAG`."""
        self.scenario("decode+cnn." + tag, [("d", "decode", mode, a, extra[0]),
                                            ("t", "cnn", mode, b, extra[1])])

    def cnn_pair(self, tag, mode, a, b):
        """Two training loops at `a` and `b`: `cnnpair.TAG`."""
        self.scenario("cnnpair." + tag, [("a", "cnn", mode, a, {}), ("b", "cnn", mode, b, {})])

    def stream_beside_loops(self):
        """The 5 us stream beside a saturating 11 ms / 50 us kernel loop at 50/50, plain
        co-location first, and each loop alone."""
        for loop in ("loop11", "loop50us"):
            self.scenario("%s.plain" % loop, [("l", loop, "plain", 100, {})])
            self.scenario("stream5+%s.plain" % loop,
                          [("s", "stream5", "plain", 100, {}), ("l", loop, "plain", 100, {})])
            self.scenario("stream5+%s.vgpu50_50" % loop,
                          [("s", "stream5", "vgpu", 50, {}), ("l", loop, "vgpu", 50, {})])

    def alone(self):
        for gap in ("5", "20", "100"):
            s = "stream" + gap
            self.scenario("%s.plain" % s, [("s", s, "plain", 100, {})])
            for lim in (50, 25):
                self.scenario("%s.vgpu%d" % (s, lim), [("s", s, "vgpu", lim, {})])
            self.scenario("%s.hami50" % s, [("s", s, "hami", 50, {})])
        self.decode("plain")
        for lim in (50, 25):
            self.decode("vgpu%d" % lim, "vgpu", lim)
            self.decode("unheld%d" % lim, "vgpu-unheld", lim)
            self.decode("hami%d" % lim, "hami", lim)
        self.decode("mps50", "mps", 50)

    def t13(self):
        """Targets 1 and 3's decode scenarios, the alone ones twice (interleaved)."""
        for r in ("", "b"):
            self.decode("plain" + r)
            self.decode("vgpu30" + r, "vgpu", 30)
        self.cnn1("plain")
        self.decode_cnn("plain", "plain", 100, 100)
        for a_, b_ in ((30, 70), (50, 50)):
            self.decode_cnn("vgpu%d_%d" % (a_, b_), "vgpu", a_, b_)
        self.decode_cnn("mps30_70", "mps", 30, 70)

    def val(self):
        """Targets 1 and 3's decode scenarios in the order they matter, plain interleaved."""
        self.decode("plain")
        self.decode("vgpu25", "vgpu", 25)
        self.decode("vgpu50", "vgpu", 50)
        self.decode("plainb")
        self.decode("vgpu30", "vgpu", 30)
        self.cnn1("plain")
        self.decode_cnn("vgpu30_70", "vgpu", 30, 70)
        self.decode_cnn("mps30_70", "mps", 30, 70)

    def diag(self):
        """The decode service's prices, alone and beside training at 30/70 (with --trace)."""
        self.decode("vgpu30", "vgpu", 30)
        self.decode_cnn("vgpu30_70", "vgpu", 30, 70)

    def cost(self):
        """What the library costs the decode service where the limit never holds it: plain,
        loaded without a limit ("lib"), at 25 % held and unheld, interleaved, plain again."""
        self.decode("plain")
        self.decode("lib", "vgpu-lib", 100)
        self.decode("vgpu25", "vgpu", 25)
        self.decode("unheld25", "vgpu-unheld", 25)
        self.decode("plain2")
        self.decode("vgpu25b", "vgpu", 25)

    def cnn(self):
        self.cnn1("plain")
        for lim in (50, 25):
            self.cnn1("vgpu%d" % lim, "vgpu", lim)
            self.cnn1("unheld%d" % lim, "vgpu-unheld", lim)
        self.cnn_pair("plain", "plain", 100, 100)
        for a_, b_ in ((30, 70), (50, 50)):
            self.cnn_pair("vgpu%d_%d" % (a_, b_), "vgpu", a_, b_)
        self.cnn_pair("vgpuwc30_70", "vgpu-wc", 30, 70)
        for a_, b_ in ((30, 70), (50, 50)):
            self.cnn_pair("overlap%d_%d" % (a_, b_), "vgpu-overlap", a_, b_)
        self.cnn_pair("hami30_70", "hami", 30, 70)
        self.cnn_pair("mps30_70", "mps", 30, 70)

    def beside(self):
        self.stream_beside_loops()
        self.decode_cnn("plain", "plain", 100, 100)
        for a_, b_ in ((50, 50), (30, 70)):
            self.decode_cnn("vgpu%d_%d" % (a_, b_), "vgpu", a_, b_)
            self.decode_cnn("mps%d_%d" % (a_, b_), "mps", a_, b_)
        self.decode_cnn("overlap30_70", "vgpu-overlap", 30, 70)
        self.decode_cnn("hami50_50", "hami", 50, 50)
        self.decode_cnn("vgpuwc50_50", "vgpu-wc", 50, 50)
        self.decode_cnn("prio50", "vgpu", 50, 50, PRIORITIES)

    def close3(self):
        """Target 3's work-conserving clause and target 4 as the issue states it (priorities,
        no compute limit), each beside MPS and plain co-location in the same run, the service
        and the loop alone before and after."""
        self.decode("plain")
        self.cnn1("plain")
        self.decode_cnn("plain", "plain", 100, 100)
        for a_, b_ in ((50, 50), (30, 70)):
            self.decode_cnn("vgpuwc%d_%d" % (a_, b_), "vgpu-wc", a_, b_)
            self.decode_cnn("mps%d_%d" % (a_, b_), "mps", a_, b_)
        self.decode_cnn("prio", "vgpu-lib", 100, 100, PRIORITIES)
        self.decode("plainb")
        self.cnn1("plainb")
        self.cnn_pair("plain", "plain", 100, 100)
        self.cnn_pair("vgpuwc30_70", "vgpu-wc", 30, 70)

    def close4(self):
        """Target 4 (priorities without limits) twice, with work-conserving 50/50 and MPS
        50/50 beside plain co-location, the service and the loop alone before and after."""
        self.decode("plain")
        self.cnn1("plain")
        self.decode_cnn("prio", "vgpu-lib", 100, 100, PRIORITIES)
        self.decode_cnn("plain", "plain", 100, 100)
        self.decode_cnn("mps50_50", "mps", 50, 50)
        self.decode_cnn("vgpuwc50_50", "vgpu-wc", 50, 50)
        self.decode_cnn("priob", "vgpu-lib", 100, 100, PRIORITIES)
        self.decode("plainb")
        self.cnn1("plainb")

    def close5(self):
        """The two closest misses again, interleaved: the 5 us stream alone at 25 % (target 1)
        and the ResNet pair at 30/70 (target 2), each beside two plain runs."""
        for r in ("", "b"):
            self.scenario("stream5.plain" + r, [("s", "stream5", "plain", 100, {})])
            self.scenario("stream5.vgpu25" + r, [("s", "stream5", "vgpu", 25, {})])
        self.cnn1("plain")
        self.cnn_pair("plain", "plain", 100, 100)
        self.cnn_pair("vgpu30_70", "vgpu", 30, 70)
        self.cnn1("plainb")

    def close6(self):
        """The ResNet pair at 30/70 and 50/50 on this library and on the --lib2 variant
        ("vgpu-b"), interleaved, beside plain time-slicing and the loop alone twice."""
        self.cnn1("plain")
        self.cnn_pair("plain", "plain", 100, 100)
        for r in ("", "b"):
            self.cnn_pair("vgpu30_70" + r, "vgpu", 30, 70)
            self.cnn_pair("varb30_70" + r, "vgpu-b", 30, 70)
        self.cnn_pair("vgpu50_50", "vgpu", 50, 50)
        self.cnn_pair("varb50_50", "vgpu-b", 50, 50)
        self.cnn1("plainb")

    def close7(self):
        """close6's 30/70 pairs (twice each, interleaved) and the decode service beside the
        training loop at 30/70, on this library and on the --lib2 variant."""
        self.cnn1("plain")
        self.cnn_pair("plain", "plain", 100, 100)
        for r in ("", "b"):
            self.cnn_pair("vgpu30_70" + r, "vgpu", 30, 70)
            self.cnn_pair("varb30_70" + r, "vgpu-b", 30, 70)
        self.decode("plain")
        self.decode_cnn("vgpu30_70", "vgpu", 30, 70)
        self.decode_cnn("varb30_70", "vgpu-b", 30, 70)
        self.cnn1("plainb")

    def close8(self):
        """Target 4 (priorities, no limits) on this library and on the --lib2 variant
        ("varb"), twice each, interleaved, beside plain co-location; the service and the loop
        alone before and after."""
        self.priorities_ab()
        self.decode("plainb")
        self.cnn1("plainb")

    def priorities_ab(self):
        """Each alone, plain co-location, then target 4 (priorities, no limits) on this
        library and the --lib2 variant, twice each, interleaved."""
        self.decode("plain")
        self.cnn1("plain")
        self.decode_cnn("plain", "plain", 100, 100)
        for r in ("", "b"):
            self.decode_cnn("prio" + r, "vgpu-lib", 100, 100, PRIORITIES)
            self.decode_cnn("varbprio" + r, "vgpu-b-lib", 100, 100, PRIORITIES)

    def close9(self):
        """The first generation's saturating pair (11 ms kernels, a sync every 4) at 30/70 on
        this library and on the --lib2 variant, twice each, interleaved."""
        self.scenario("loop11.plain", [("l", "loop11", "plain", 100, {})])
        for r in ("", "b"):
            for tag, mode in (("vgpu", "vgpu"), ("varb", "vgpu-b")):
                self.scenario("loop11pair.%s30_70%s" % (tag, r),
                              [("a", "loop11", mode, 30, {}), ("b", "loop11", mode, 70, {})])

    def close10(self):
        """This library against the --lib2 variant ("varb"), interleaved, where the controller's
        timed looks matter: target 4 (priorities, no limits), the 5 us stream beside 50 us
        kernels and the decode service beside the loop at 50/50; plain co-location and each
        alone in the same run."""
        self.stream_beside_50us_ab()
        self.priorities_ab()
        self.decode_cnn("vgpu50_50", "vgpu", 50, 50)
        self.decode_cnn("varb50_50", "vgpu-b", 50, 50)
        self.decode("plainb")
        self.cnn1("plainb")

    def stream_beside_50us_ab(self):
        """Each alone, plain co-location, then the 5 us stream beside 50 us kernels at 50/50 on
        this library and the --lib2 variant, twice each, interleaved."""
        self.scenario("loop50us.plain", [("l", "loop50us", "plain", 100, {})])
        self.scenario("stream5.plain", [("s", "stream5", "plain", 100, {})])
        self.scenario("stream5+loop50us.plain",
                      [("s", "stream5", "plain", 100, {}), ("l", "loop50us", "plain", 100, {})])
        for r in ("", "b"):
            for tag, mode in (("vgpu", "vgpu"), ("varb", "vgpu-b")):
                self.scenario("stream5+loop50us.%s50_50%s" % (tag, r),
                              [("s", "stream5", mode, 50, {}), ("l", "loop50us", mode, 50, {})])

    def close13(self):
        """A light peer's synchronisation holding a heavy process, and a high-priority one's
        holding a low one: this library against --lib2 ("varb", tests/gpu/gen3/lightsync.patch:
        a heavy process not held while a light one synchronises) and --lib3 ("varc",
        nosynchold.patch: nor a low-priority one while a high one does), interleaved: the 5 us
        stream beside 50 us kernels, the decode service beside the loop at 50/50 (MPS in the
        same run), target 4 (priorities, no limits); plain co-location and each alone."""
        self.stream_beside_50us_ab()
        self.decode("plain")
        self.cnn1("plain")
        self.decode_cnn("plain", "plain", 100, 100)
        self.decode_cnn("vgpu50_50", "vgpu", 50, 50)
        self.decode_cnn("varb50_50", "vgpu-b", 50, 50)
        self.decode_cnn("mps50_50", "mps", 50, 50)
        for r in ("", "b"):
            self.decode_cnn("prio" + r, "vgpu-lib", 100, 100, PRIORITIES)
            self.decode_cnn("varcprio" + r, "vgpu-c-lib", 100, 100, PRIORITIES)
        self.decode("plainb")
        self.cnn1("plainb")

    def close14(self):
        """The decode service beside the training loop at 50/50 and 30/70 on this library and
        on --lib2 ("varb": tests/gpu/gen3/shareddepth.patch, a heavy process beside an active
        light one keeps 0.2 ms queued instead of 0.5), MPS at 50/50; the ResNet pair at 30/70
        on this library and on --lib3 ("varc": the baseline before it); each alone, the service
        before and after."""
        self.decode("plain")
        self.cnn1("plain")
        self.decode_cnn("plain", "plain", 100, 100)
        self.decode_cnn("vgpu50_50", "vgpu", 50, 50)
        self.decode_cnn("varb50_50", "vgpu-b", 50, 50)
        self.decode_cnn("mps50_50", "mps", 50, 50)
        self.decode_cnn("vgpu30_70", "vgpu", 30, 70)
        self.decode_cnn("varb30_70", "vgpu-b", 30, 70)
        self.cnn_pair("vgpu30_70", "vgpu", 30, 70)
        self.cnn_pair("varc30_70", "vgpu-c", 30, 70)
        self.decode("plainb")

    def close15(self):
        """This library against --lib3 ("varc", an older commit), interleaved: the decode
        service alone at 25 and 50 % (target 1), the 5 us stream beside 50 us kernels at 50/50
        and target 4 (priorities, no limits); plain co-location and each alone in the same
        run, the service before and after."""
        self.decode("plain")
        self.cnn1("plain")
        for lim in (25, 50):
            self.decode("vgpu%d" % lim, "vgpu", lim)
            self.decode("varc%d" % lim, "vgpu-c", lim)
        self.scenario("loop50us.plain", [("l", "loop50us", "plain", 100, {})])
        self.scenario("stream5.plain", [("s", "stream5", "plain", 100, {})])
        self.scenario("stream5+loop50us.plain",
                      [("s", "stream5", "plain", 100, {}), ("l", "loop50us", "plain", 100, {})])
        for tag, mode in (("vgpu", "vgpu"), ("varc", "vgpu-c")):
            self.scenario("stream5+loop50us.%s50_50" % tag,
                          [("s", "stream5", mode, 50, {}), ("l", "loop50us", mode, 50, {})])
        self.decode_cnn("plain", "plain", 100, 100)
        self.decode_cnn("prio", "vgpu-lib", 100, 100, PRIORITIES)
        self.decode_cnn("varcprio", "vgpu-c-lib", 100, 100, PRIORITIES)
        self.decode("plainb")

    def close16(self):
        """One call's check of the targets that move: the decode service alone at 50 and 25 %
        (target 1), beside the training loop at 50/50 on this library, the --lib2 variant
        ("varb") and MPS (target 3), the ResNet pair at 30/70 on this library and --lib3
        ("varc", an older commit; target 2); each alone, the service before and after."""
        self.decode("plain")
        self.cnn1("plain")
        self.decode("vgpu50", "vgpu", 50)
        self.decode("vgpu25", "vgpu", 25)
        self.decode_cnn("plain", "plain", 100, 100)
        self.decode_cnn("vgpu50_50", "vgpu", 50, 50)
        self.decode_cnn("varb50_50", "vgpu-b", 50, 50)
        self.decode_cnn("mps50_50", "mps", 50, 50)
        self.cnn_pair("vgpu30_70", "vgpu", 30, 70)
        self.cnn_pair("varc30_70", "vgpu-c", 30, 70)
        self.decode("plainb")

    def t3_round(self, r, variants, shares=((50, 50),), alone=True):
        """One of target 3's interleaved rounds (close17-19, close23), its scenarios ending in
        `r`: the decode service alone (unless `alone` is false: the caller ran it), then at each
        of `shares` beside the training loop on this library, on each of `variants` ("varb",
        "varc") whose library was given, and on MPS."""
        if alone:
            self.decode("plain%d" % r)
        for a_, b_ in shares:
            at = "%d_%dr%d" % (a_, b_, r)
            self.decode_cnn("vgpu" + at, "vgpu", a_, b_)
            for tag, lib, mode in (("varb", self.a.lib2, "vgpu-b"),
                                   ("varc", self.a.lib3, "vgpu-c")):
                if tag in variants and lib:
                    self.decode_cnn(tag + at, mode, a_, b_)
            self.decode_cnn("mps" + at, "mps", a_, b_)

    def t4_round(self, r, variants):
        """Target 4's runs of round `r` (the second's scenarios end in "b"): the decode service
        at CUDA_TASK_PRIORITY=0 beside the loop at 1, no limits, on this library and on each
        of `variants` ("varb", "varc") whose library was given; then plain co-location (no
        library), which shows whether time-slicing itself reaches the loop's bar."""
        again = "" if r == 1 else "b"
        self.decode_cnn("prio" + again, "vgpu-lib", 100, 100, PRIORITIES)
        for tag, lib, mode in (("varb", self.a.lib2, "vgpu-b-lib"),
                               ("varc", self.a.lib3, "vgpu-c-lib")):
            if tag in variants and lib:
                self.decode_cnn(tag + "prio" + again, mode, 100, 100, PRIORITIES)
        self.decode_cnn("plain" + again, "plain", 100, 100)

    def close17(self):
        """Target 3 in interleaved rounds: the decode service alone, then beside the training
        loop at 50/50 on this library and on MPS, --rounds times (scenarios end in the round's
        number), and on --lib3 ("varc") where given; plain co-location and the loop alone once,
        and after the first round the service alone at 50 and 25 % (target 1)."""
        self.cnn1("plain")
        self.decode_cnn("plain", "plain", 100, 100)
        for r in range(1, self.a.rounds + 1):
            self.t3_round(r, ("varc",))
            if r == 1:
                # Target 1's service alone under a limit, between the rounds' alone runs.
                self.decode("vgpu50", "vgpu", 50)
                self.decode("vgpu25", "vgpu", 25)

    def close18(self):
        """close17's rounds with both variants, for an A/B/C of a change to the service's
        protection: the decode service alone, then beside the training loop at 50/50 on this
        library, on --lib2 ("varb"), on --lib3 ("varc") and on MPS, --rounds times; plain
        co-location and the loop alone once; no target-1 runs. (--debug adds each limiter's
        debug line a second: its synchronisations foretold, a heavy one's time held for them.)"""
        self.cnn1("plain")
        self.decode_cnn("plain", "plain", 100, 100)
        for r in range(1, self.a.rounds + 1):
            self.t3_round(r, ("varb", "varc"))

    def close19(self):
        """Targets 3 and 4 in interleaved rounds (at most two): the decode service alone, beside
        the training loop at 50/50 on this library, on --lib2 ("varb") and on MPS, and at
        CUDA_TASK_PRIORITY=0 beside the loop at 1 without limits on this library and on --lib3
        ("varc"), then plain co-location; the loop alone once."""
        self.cnn1("plain")
        for r in range(1, min(self.a.rounds, 2) + 1):
            self.t3_round(r, ("varb",))
            self.t4_round(r, ("varc",))

    def close20(self):
        """Target 2 in --rounds interleaved rounds, two or three (the second's scenarios end in
        "b", the third's in "c"): the ResNet loop alone, the pair under plain time-slicing, at
        30/70 on this library and on --lib3 ("varc"); then the pair at 50/50 on this library."""
        for again in ("", "b", "c")[:min(max(self.a.rounds, 2), 3)]:
            self.cnn1("plain" + again)
            self.cnn_pair("plain" + again, "plain", 100, 100)
            self.cnn_pair("vgpu30_70" + again, "vgpu", 30, 70)
            if self.a.lib3:
                self.cnn_pair("varc30_70" + again, "vgpu-c", 30, 70)
        self.cnn_pair("vgpu50_50", "vgpu", 50, 50)

    def close21(self):
        """Target 2 whole on this library: the ResNet loop alone plain, at 50 % and 25 %; the
        pair under plain time-slicing, at 30/70 and 50/50, work-conserving at both, HAMi-core
        and MPS at 30/70; the loop alone again last (summarize.py judges every share against
        the mean of the alone runs)."""
        self.target2(((30, 70), (50, 50)), hami=True)
        self.cnn1("plainb")

    def target2(self, wc, hami):
        """Target 2's runs: the ResNet loop alone plain, at 50 % and 25 %; the pair under plain
        time-slicing, at 30/70 and 50/50, work-conserving at each of `wc`'s shares, HAMi-core
        (with `hami`, where built) and MPS at 30/70."""
        self.cnn1("plain")
        for lim in (50, 25):
            self.cnn1("vgpu%d" % lim, "vgpu", lim)
        self.cnn_pair("plain", "plain", 100, 100)
        for a_, b_ in ((30, 70), (50, 50)):
            self.cnn_pair("vgpu%d_%d" % (a_, b_), "vgpu", a_, b_)
            if (a_, b_) in wc:
                self.cnn_pair("vgpuwc%d_%d" % (a_, b_), "vgpu-wc", a_, b_)
        if hami and self.a.hami:
            self.cnn_pair("hami30_70", "hami", 30, 70)
        self.cnn_pair("mps30_70", "mps", 30, 70)

    def close23(self):
        """Target 3's decode clauses at both shares in --rounds interleaved rounds: the decode
        service alone, then beside the training loop at 50/50 and at 30/70, each on this
        library and on MPS; the loop alone and plain co-location once. summarize.py pools each
        share's requests over the rounds (a run's p99 of 4 requests a second is nearly its
        maximum: use --seconds 12 or more)."""
        self.cnn1("plain")
        self.decode_cnn("plain", "plain", 100, 100)
        for r in range(1, self.a.rounds + 1):
            self.t3_round(r, (), ((50, 50), (30, 70)))

    def close22(self):
        """Target 4 alone, --rounds rounds (2 at most): the decode service alone, then at
        priority 0 beside the loop at 1, no limits, on this library, then plain co-location
        (no library)."""
        for r in range(1, min(self.a.rounds, 2) + 1):
            self.decode("plain%d" % r)
            self.t4_round(r, ())

    def close24(self):
        """Target 4 in --rounds interleaved rounds (2 at most): the decode service alone, then
        at CUDA_TASK_PRIORITY=0 beside the loop at 1, no limits, on this library, on --lib2
        ("varb") and on --lib3 ("varc") where given, then plain co-location; the loop alone
        and the service's GPU time a request by CUPTI (the bar's share, on this machine: run
        150 ran without it and its summary took run 64's H200 time) once."""
        self.cnn1("plain")
        self.profile()
        for r in range(1, min(self.a.rounds, 2) + 1):
            self.decode("plain%d" % r)
            self.t4_round(r, ("varb", "varc"))

    def close25(self):
        """Targets 3 and 4 in two interleaved rounds, an A/B/C: the decode service alone, beside
        the training loop at 50/50 and at 30/70 on this library, on --lib2 ("varb") and on MPS,
        then at CUDA_TASK_PRIORITY=0 beside the loop at 1 without limits on this library and
        on --lib3 ("varc"), then plain co-location; the loop alone once."""
        self.cnn1("plain")
        for r in range(1, min(self.a.rounds, 2) + 1):
            self.t3_round(r, ("varb",), ((50, 50), (30, 70)))
            self.t4_round(r, ("varc",))

    def close26(self):
        """Target 3's decode clauses at both shares in --rounds interleaved rounds (2 at most),
        an A/B/C: the decode service alone, then beside the training loop at 50/50 and at 30/70
        on this library, on --lib2 ("varb"), on --lib3 ("varc") and on MPS; the loop alone and
        plain co-location once."""
        self.cnn1("plain")
        self.decode_cnn("plain", "plain", 100, 100)
        for r in range(1, min(self.a.rounds, 2) + 1):
            self.t3_round(r, ("varb", "varc"), ((50, 50), (30, 70)))

    def close27(self):
        """Targets 2, 3 and 4 as an A/B/C, the pairs first: the ResNet loop alone and the pair
        under plain time-slicing, at 30/70 on this library, on --lib2 ("varb") and on --lib3
        ("varc") in --rounds interleaved rounds (3 at most; the second's scenarios end in "b",
        the third's in "c"); the 5 us stream beside 50 us kernels at 50/50 on this library and
        --lib2, twice each; the decode service alone, beside the loop at 30/70 on this library,
        --lib2 and MPS, and at priority 0 beside the loop at 1 on this library and --lib3, then
        plain co-location (target 4's bar's reach)."""
        for again in ("", "b", "c")[:min(max(self.a.rounds, 1), 3)]:
            self.cnn1("plain" + again)
            self.cnn_pair("plain" + again, "plain", 100, 100)
            for tag, lib, mode in (("vgpu", True, "vgpu"), ("varb", self.a.lib2, "vgpu-b"),
                                   ("varc", self.a.lib3, "vgpu-c")):
                if lib:
                    self.cnn_pair(tag + "30_70" + again, mode, 30, 70)
        self.stream_beside_50us_ab()
        self.t3_round(1, ("varb",), ((30, 70),))
        self.t4_round(1, ("varc",))

    def close28(self):
        """Target 3's decode clauses at 30/70 in one round, an A/B/C/MPS (t3_round's
        scenarios, "r1"), the loop alone first; the service alone three ways, one after the
        other: plain beside a CPU-bound process with no GPU work (`decode.spin1`), plain
        (`decode.plain1`) and on MPS with no neighbour (`decode.mps1`). In runs 127-129 the
        service alone had a p99 1.04-1.35x MPS's service beside training, its host gaps between
        tokens longer: these say whether MPS's client or a busy core is the difference."""
        self.cnn1("plain")
        self.scenario("decode.spin1", [("d", "decode", "plain", 100, {}),
                                       ("s", "spin", "plain", 100, {})])
        self.decode("plain1")
        self.decode("mps1", "mps")
        self.t3_round(1, ("varb", "varc"), ((30, 70),), alone=False)

    def close11(self):
        """The first generation's exact cases ("keep") on this library and on the --lib2
        variant ("varb"), twice each, interleaved, each loop alone first; then 64 saturating
        loops at 10 % on each (target 5)."""
        self.scenario("loop11.plain", [("l", "loop11", "plain", 100, {})])
        self.scenario("loop50us.plain", [("l", "loop50us", "plain", 100, {})])
        for r in ("", "b"):
            for tag, mode in (("vgpu", "vgpu"), ("varb", "vgpu-b")):
                self.scenario("loop11+loop50us.%s50_50%s" % (tag, r),
                              [("a", "loop11", mode, 50, {}), ("b", "loop50us", mode, 50, {})])
                for a_, b_ in ((30, 70), (50, 50)):
                    self.scenario("loop11pair.%s%d_%d%s" % (tag, a_, b_, r),
                                  [("a", "loop11", mode, a_, {}), ("b", "loop11", mode, b_, {})])
        self.crowd_ab()

    def close12(self):
        """The keep list's 11 ms-beside-50 us pair and its 11 ms sets (20/30/50, and 4 and 5
        containers, where more than token::CROWD wait) on this library and on the --lib2
        variant ("varb"), twice each, interleaved (the 30/70 and 50/50 pairs once), each loop
        alone first; then 64 saturating loops at 10 % on each (target 5)."""
        self.scenario("loop11.plain", [("l", "loop11", "plain", 100, {})])
        self.scenario("loop50us.plain", [("l", "loop50us", "plain", 100, {})])
        sets = ((20, 30, 50), (25,) * 4, (20,) * 5)
        for r in ("", "b"):
            for tag, mode in (("vgpu", "vgpu"), ("varb", "vgpu-b")):
                self.scenario("loop11+loop50us.%s50_50%s" % (tag, r),
                              [("a", "loop11", mode, 50, {}), ("b", "loop50us", mode, 50, {})])
                for shares in sets + (((30, 70), (50, 50)) if not r else ()):
                    name = "loop11pair" if len(shares) == 2 else "loop11set"
                    self.scenario("%s.%s%s%s" % (name, tag, "_".join(map(str, shares)), r),
                                  [("abcde"[i], "loop11", mode, sh, {})
                                   for i, sh in enumerate(shares)])
        self.crowd_ab()

    def crowd_ab(self):
        """64 saturating loops at 10 % (target 5) on this library, then on the --lib2 variant."""
        for tag, mode in (("vgpu10", "vgpu"), ("varb10", "vgpu-b")):
            self.scenario("crowd64.%s" % tag,
                          [("p%02d" % i, "loop50us", mode, 10, {}) for i in range(64)])

    def keep(self):
        """The first generation's exact cases (issue 23's "keep"): two saturating loops of 11 ms
        kernels at 30/70 and 50/50, and 11 ms kernels beside 50 us kernels at 50/50, each loop
        alone first."""
        self.scenario("loop11.plain", [("l", "loop11", "plain", 100, {})])
        self.scenario("loop50us.plain", [("l", "loop50us", "plain", 100, {})])
        for a_, b_ in ((30, 70), (50, 50)):
            self.scenario("loop11pair.vgpu%d_%d" % (a_, b_),
                          [("a", "loop11", "vgpu", a_, {}), ("b", "loop11", "vgpu", b_, {})])
        self.scenario("loop11+loop50us.vgpu50_50",
                      [("a", "loop11", "vgpu", 50, {}), ("b", "loop50us", "vgpu", 50, {})])

    def crowd(self):
        """Target 5 on the GPU: 64 containers at 10 % (the GPU oversubscribed 6.4 times), each a
        saturating loop of 50 us kernels: every one progresses, about equally (the line's
        `all` says the least and most kernels a second and how many got none)."""
        self.scenario("loop50us.plain", [("l", "loop50us", "plain", 100, {})])
        for mode, limit in (("plain", 100), ("vgpu", 10)):
            self.scenario("crowd64.%s" % (mode if mode == "plain" else "vgpu10"),
                          [("p%02d" % i, "loop50us", mode, limit, {}) for i in range(64)])

    def close29(self):
        """Targets 1 and 2 whole and target 3's stream on this library, on 8 s windows (a
        machine not measured before, in one call of about 9 minutes with HAMi-core's build):
        `alone` (the 5 / 20 / 100 us streams plain, at 50 and 25 % and HAMi-core's at 50 %;
        the decode service plain, at 50 and 25 % held and unheld and HAMi-core's, MPS's at
        50 %), the service alone plain again; the 5 us stream beside 11 ms and 50 us kernel
        loops at 50/50 with plain co-location; then close21 (the ResNet loop alone and in
        pairs, HAMi-core and MPS at 30/70)."""
        self.alone()
        self.decode("plainb")
        self.stream_beside_loops()
        self.close21()

    def close30(self):
        """Target 3's decode clauses at both shares and target 4, one round on this library
        (use --seconds 30: about 120 requests a run): the loop alone, what a request costs
        the GPU by CUPTI (`decode.profile`: target 4's bar), plain co-location, the service
        alone, beside the loop at 50/50 and 30/70 (this library, MPS), both
        work-conserving at 50/50, then priorities without limits and plain co-location."""
        self.cnn1("plain")
        self.profile()
        self.decode_cnn("plain", "plain", 100, 100)
        self.t3_round(1, (), ((50, 50), (30, 70)))
        self.decode_cnn("vgpuwc50_50", "vgpu-wc", 50, 50)
        self.decode_cnn("prio", "vgpu-lib", 100, 100, PRIORITIES)

    def close31(self):
        """Target 3's decode at 30/70 in one round, this library against --lib3 ("varc") and
        MPS (t3_round's scenarios, "r1"): the loop alone, the service alone, then the three
        beside the loop, and plain co-location last. On a host where the trainer cannot use
        its 70 % (run 144: charged 49-56 %, light) this library holds it for the service's
        synchronisations as hungry; the variant without the rule never did."""
        self.cnn1("plain")
        self.t3_round(1, ("varc",), ((30, 70),))
        self.decode_cnn("plain", "plain", 100, 100)

    def close32(self):
        """Both price re-timing rules (ed99c52, 4641b1c) as an A/C in one call, for a device
        that is hard to get (`scripts/gpu-kit.sh -c f917466`): the loop alone and what a
        request costs the GPU by CUPTI (target 4's bar); the service alone; at priority 0
        beside the loop at 1 on this library, on --lib2 ("varb": a candidate for target 4,
        such as `lowdepth2.patch`) and on --lib3 ("varc"), then plain co-location;
        both work-conserving at 50/50 on this library and on --lib3, then on MPS at 50/50 (the
        work-conserving clause's bar)."""
        self.cnn1("plain")
        self.profile()
        self.decode("plain1")
        self.t4_round(1, ("varb", "varc"))
        self.decode_cnn("vgpuwc50_50", "vgpu-wc", 50, 50)
        if self.a.lib3:
            self.decode_cnn("varcwc50_50", "vgpu-c-wc", 50, 50)
        self.decode_cnn("mps50_50r1", "mps", 50, 50)

    def close33(self):
        """Targets 3 and 4 at this library in one call (close32, then target 3's 50/50 and 30/70
        beside the loop on this library and MPS, one round): every decode clause from one
        machine start, about 470 s at --seconds 20."""
        self.close32()
        self.decode_cnn("vgpu50_50r1", "vgpu", 50, 50)
        self.decode_cnn("vgpu30_70r1", "vgpu", 30, 70)
        self.decode_cnn("mps30_70r1", "mps", 30, 70)

    def waits1(self):
        """What the synchronisations charge on real work, in about a minute (use --debug:
        each limiter's line a second says how much of its correction waits made): the decode
        service plain and at 50 %, the ResNet loop plain and at 50 %; then what a request costs
        the GPU by CUPTI (`decode.profile`, as close30 has it first)."""
        self.decode("plain")
        self.decode("vgpu50", "vgpu", 50)
        self.cnn1("plain")
        self.cnn1("vgpu50", "vgpu", 50)
        self.profile()

    def close1(self):
        """Targets 1 and 2 in one call: the decode service alone (plain twice, interleaved), the
        5 and 20 us streams alone, the ResNet loop alone and in pairs (work-conserving and MPS
        beside plain time-slicing)."""
        self.decode("plain")
        self.decode("vgpu25", "vgpu", 25)
        self.decode("vgpu50", "vgpu", 50)
        self.decode("plainb")
        for s in ("stream5", "stream20"):
            self.scenario("%s.plain" % s, [("s", s, "plain", 100, {})])
            for lim in (25, 50):
                self.scenario("%s.vgpu%d" % (s, lim), [("s", s, "vgpu", lim, {})])
        self.target2(((30, 70),), hami=False)

    def close2(self):
        """Targets 3 and 4 in one call: the 5 us stream beside saturating loops, the decode
        service beside the training loop (vgpu, work-conserving, MPS, priorities), with the
        service and the loop alone in the same run."""
        self.stream_beside_loops()
        self.scenario("stream5.plain", [("s", "stream5", "plain", 100, {})])
        self.decode("plain")
        self.cnn1("plain")
        self.decode_cnn("plain", "plain", 100, 100)
        for a_, b_ in ((30, 70), (50, 50)):
            self.decode_cnn("vgpu%d_%d" % (a_, b_), "vgpu", a_, b_)
            self.decode_cnn("mps%d_%d" % (a_, b_), "mps", a_, b_)
        self.decode_cnn("vgpuwc50_50", "vgpu-wc", 50, 50)
        self.decode_cnn("prio50", "vgpu", 50, 50, PRIORITIES)

    def finish(self):
        self.stop_mps()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("groups", nargs="+")
    p.add_argument("--lib", required=True)
    p.add_argument("--hami", default="")
    p.add_argument("--lib2", default="",
                   help="a variant build for the 'overlap' scenarios (tests/gpu/gen3/overlap.patch)")
    p.add_argument("--lib3", default="", help="a second variant build (the 'varc' scenarios)")
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--startup", type=float, default=14)
    p.add_argument("--only", default="")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds of the groups that repeat (close17, 18, 23 as given; close22, "
                        "24-26 two at most; close20 two or three; close27 three at most)")
    p.add_argument("--decode-period", type=float, default=0.25,
                   help="seconds between the decode service's requests (a host where one takes "
                        "most of 0.25 s queues them beside training: run 144)")
    p.add_argument("--debug", action="store_true")
    p.add_argument("--trace", action="store_true",
                   help="vgpu members at LIBCUDA_LOG_LEVEL=5: every timing sample, one line each")
    p.add_argument("--pin", action="store_true",
                   help="run the decode service on cores 2-3 and the training loop on 4-7")
    p.add_argument("--hang", type=float, default=30,
                   help="seconds past the window before a member is stopped as hung")
    a = p.parse_args()
    b = Bench(a)
    try:
        for g in a.groups:
            getattr(b, g)()
    finally:
        b.finish()


if __name__ == "__main__":
    main()
