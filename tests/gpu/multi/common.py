"""Helpers shared by the two-GPU scripts of run-multi.sh (stdlib only; importing it imports no
torch). Every script here sets MULTICAST_OFF in its own environment before torch is imported,
so that a script started outside run-multi.sh keeps NVLink multicast off all the same.
"""
import json
import os
import socket
import subprocess
import time
import traceback

# NVLink multicast (NVLS) can put a shared host's GPUs out of service: off in NCCL, PyTorch and
# NVSHMEM, in every environment these scripts make.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# the limiter's variables: removed for the "real" view (nvidia-smi as the host sees it)
LIMITER_VARS = ("LD_PRELOAD", "CUDA_DISABLE_CONTROL")


def multicast_off():
    os.environ.update(MULTICAST_OFF)


def recorded_env():
    """the variables a result records: the limiter's, CUDA's, NCCL's and the multicast ones"""
    return {k: v for k, v in sorted(os.environ.items())
            if k.startswith(("CUDA_", "NCCL_", "VGPU_", "TORCH_SYMM", "NVSHMEM")) or k == "LD_PRELOAD"}


class Recorder:
    """one rank's record, rewritten at every step: what a killed or hung rank reached stays on
    disk (OUTDIR/rank<r>.json) for the summary"""

    def __init__(self, outdir, rank, **fields):
        self.path = os.path.join(outdir, f"rank{rank}.json")
        self.rank = rank
        self.t0 = time.time()
        self.res = {"rank": rank, "pid": os.getpid(), "steps": [], **fields}

    def step(self, name, **kw):
        self.res["steps"].append(dict(name=name, t=round(time.time() - self.t0, 3), **kw))
        with open(self.path, "w") as f:
            json.dump(self.res, f)
        print(f"rank {self.rank}: {name} {json.dumps(kw)[:300]}", flush=True)

    def failed(self, e):
        self.res["error"] = repr(e)[:500]
        self.res["traceback"] = traceback.format_exc()[-3000:]
        self.step("error")


def run_ranks(fn, world, a, outdir):
    """fn(rank, port, a, outdir) in one process per rank (torch.multiprocessing spawn; in this
    process for a world of 1), then this job's result: seconds, the spawn's error, every rank's
    record and the recorded environment"""
    os.makedirs(outdir, exist_ok=True)
    port = free_port()
    t0 = time.time()
    err = None
    try:
        if world == 1:
            fn(0, port, a, outdir)
        else:
            import torch.multiprocessing as mp
            mp.spawn(fn, args=(port, a, outdir), nprocs=world, join=True)
    except Exception as e:  # noqa: BLE001
        err = repr(e)[:1000]
    return {"seconds": round(time.time() - t0, 2), "spawn_error": err, "ranks": collect(outdir, world),
            "env": recorded_env()}


def collect(outdir, world):
    """every rank's record (a placeholder with the error for a rank that wrote none)"""
    out = []
    for r in range(world):
        try:
            with open(os.path.join(outdir, f"rank{r}.json")) as f:
                out.append(json.load(f))
        except Exception as e:  # noqa: BLE001
            out.append({"rank": r, "error": f"no result: {e!r}"})
    return out


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def real_env():
    """this process's environment without the limiter (and without its limits)"""
    return {k: v for k, v in os.environ.items() if k not in LIMITER_VARS and not k.startswith("CUDA_DEVICE_")}


def region_env():
    """without the limiter, but with the region (CUDA_DEVICE_MEMORY_SHARED_CACHE): for `vgpu`"""
    env = real_env()
    if "CUDA_DEVICE_MEMORY_SHARED_CACHE" in os.environ:
        env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = os.environ["CUDA_DEVICE_MEMORY_SHARED_CACHE"]
    return env


def vgpu_status(vgpu):
    """`vgpu status --json` of this container's region (None without a vgpu binary)"""
    if not vgpu:
        return None
    try:
        p = subprocess.run([vgpu, "status", "--json"], env=region_env(), capture_output=True, text=True,
                           timeout=30)
        return json.loads(p.stdout) if p.returncode == 0 else {"rc": p.returncode, "stderr": p.stderr[-800:]}
    except Exception as e:  # noqa: BLE001
        return {"error": repr(e)}


def _csv(args, env):
    try:
        p = subprocess.run(["nvidia-smi", *args, "--format=csv,noheader,nounits"], env=env, capture_output=True,
                           text=True, timeout=30)
    except Exception as e:  # noqa: BLE001
        return None, repr(e)
    rows = [[x.strip() for x in line.split(",")] for line in p.stdout.splitlines() if line.strip()]
    return rows, (p.stdout + p.stderr)[-2000:]


def smi_gpus(env=None):
    """nvidia-smi's rows [{index, uuid, total_mib, used_mib}] (default: the real view)"""
    rows, text = _csv(["--query-gpu=index,uuid,memory.total,memory.used"], real_env() if env is None else env)
    out = []
    for r in rows or []:
        try:
            out.append({"index": int(r[0]), "uuid": r[1], "total_mib": int(r[2]), "used_mib": int(r[3])})
        except (ValueError, IndexError):
            pass
    return {"rows": out, "text": text}


def smi_apps():
    """the real per-process use: [{pid, uuid, used_mib}] from nvidia-smi --query-compute-apps"""
    rows, text = _csv(["--query-compute-apps=pid,gpu_uuid,used_memory"], real_env())
    out = []
    for r in rows or []:
        try:
            out.append({"pid": int(r[0]), "uuid": r[1], "used_mib": int(r[2])})
        except (ValueError, IndexError):
            pass
    return {"rows": out, "text": text}


def norm_uuid(u):
    return (u or "").lower().removeprefix("gpu-")


def region_process(status, pid):
    """this pid's use in a `vgpu status --json`: {uuid: used bytes}, or None if it is not there"""
    for p in (status or {}).get("processes", []) or []:
        if p.get("pid") == pid:
            return {norm_uuid(d.get("uuid")): d.get("used") or 0 for d in p.get("devices", [])}
    return None


def device_uuid(torch, i):
    """the UUID of torch's device i as nvidia-smi writes it (GPU-...), or None"""
    try:
        u = str(torch.cuda.get_device_properties(i).uuid)
        return u if u.startswith("GPU-") else "GPU-" + u
    except Exception:  # noqa: BLE001
        return None


def percentile(xs, q):
    """the q-th percentile (0..100) of xs by linear interpolation, None for no data"""
    if not xs:
        return None
    s = sorted(xs)
    k = (len(s) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)
