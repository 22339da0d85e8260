"""What nvidia-smi shows under the limiter while a PyTorch process (also under it) holds 1 GiB.

Runs `nvidia-smi --query-gpu=memory.total,memory.used --format=csv` and plain `nvidia-smi` WITH
the caller's LD_PRELOAD/CUDA_DEVICE_MEMORY_LIMIT, and the query once more without them.
"""
import argparse
import os
import select
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_util import clean_env, common_fields, emit  # noqa: E402

HOLDER = r"""
import sys, torch
x = torch.empty(2**28, dtype=torch.float32, device="cuda")  # 1 GiB
torch.cuda.synchronize()
print("ready", torch.cuda.mem_get_info(), flush=True)
sys.stdin.read()
"""


def smi(args, env):
    try:
        p = subprocess.run(["nvidia-smi"] + args, env=env, capture_output=True, text=True, timeout=60)
        return {"rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr[-2000:]}
    except Exception as e:  # noqa: BLE001
        return {"rc": None, "error": f"{type(e).__name__}: {e}"}


def parse_query(out):
    """'memory.total [MiB], memory.used [MiB]\\n4096 MiB, 1234 MiB' -> (4096, 1234)."""
    try:
        vals = out["stdout"].strip().splitlines()[-1].split(",")
        return tuple(int(v.strip().split()[0]) for v in vals)
    except Exception:  # noqa: BLE001
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--result")
    args = ap.parse_args()
    res = common_fields("nvidia-smi-view")
    res["info"] = True
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    t0 = time.time()
    ready = ""
    if select.select([holder.stdout], [], [], 90)[0]:
        ready = holder.stdout.readline().strip()
    res["holder"] = ready
    res["holder_seconds"] = round(time.time() - t0, 2)
    q = ["--query-gpu=memory.total,memory.used", "--format=csv"]
    try:
        with_lim = smi(q, dict(os.environ))
        plain_with_lim = smi([], dict(os.environ))
        without = smi(q, clean_env())
    finally:
        holder.stdin.close()
        try:
            holder.wait(60)
        except subprocess.TimeoutExpired:
            holder.kill()
    for label, o in (("query_with_limiter", with_lim), ("plain_with_limiter", plain_with_lim),
                     ("query_without_limiter", without)):
        print(f"===== nvidia-smi {label} (rc={o.get('rc')})\n{o.get('stdout', '')}{o.get('stderr', '')}", flush=True)
    res["query_with_limiter"] = parse_query(with_lim)
    res["query_without_limiter"] = parse_query(without)
    res["plain_with_limiter_rc"] = plain_with_lim.get("rc")
    res["plain_with_limiter_head"] = (plain_with_lim.get("stdout") or "").splitlines()[:14]
    emit(res, args.result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
