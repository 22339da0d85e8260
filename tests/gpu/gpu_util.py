"""Shared helpers of the H200 memory tests (stdlib only).

`real_used_mib()` reads the device-wide used memory with nvidia-smi run WITHOUT the limiter
(LD_PRELOAD and the CUDA_DEVICE_MEMORY_LIMIT* variables removed from its environment), so that
what the driver really holds -- contexts included -- is visible from outside the limiter.
"""
import json
import os
import subprocess
import sys
import time

GPU_INDEX = os.environ.get("VGPU_TEST_GPU", "0")  # physical index for nvidia-smi -i


def clean_env():
    env = dict(os.environ)
    for k in list(env):
        if k == "LD_PRELOAD" or k.startswith("CUDA_DEVICE_MEMORY_LIMIT"):
            del env[k]
    return env


def real_used_mib():
    """Device-wide memory.used in MiB as nvidia-smi reports it without the limiter, or None."""
    try:
        p = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", GPU_INDEX],
            env=clean_env(), capture_output=True, text=True, timeout=30)
        return int(p.stdout.strip().splitlines()[0])
    except Exception as e:  # noqa: BLE001 - a measurement, never fatal
        print(f"real_used_mib: {type(e).__name__}: {e}", file=sys.stderr)
        return None


def first_line(e):
    lines = str(e).strip().splitlines()
    return lines[0][:400] if lines else ""


def emit(result, path=None):
    """Prints the result as one `RESULT {json}` line and writes it to `path` if given."""
    line = json.dumps(result, sort_keys=True, default=str)
    print("RESULT " + line, flush=True)
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            f.write(line + "\n")


def common_fields(name):
    return {
        "name": name,
        "ld_preload": os.environ.get("LD_PRELOAD", ""),
        "limit": os.environ.get("CUDA_DEVICE_MEMORY_LIMIT", ""),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
