"""Fill every visible GPU with 256 MiB tensors until out of memory, then report while holding.

    python3 fill.py [--devices 0,1] [--vgpu PATH] [--result FILE.json]

Run under LD_PRELOAD=libvgpu.so with per-device limits and a shared region
(CUDA_DEVICE_MEMORY_SHARED_CACHE). Fills the torch devices in order (cuda:0 until OOM, then
cuda:1, ...), keeps every tensor, and while it holds them records:
  - per device: torch ordinal, UUID (torch, else cuDeviceGetUuid), obtained bytes, the error,
    torch.cuda.mem_get_info(i);
  - `nvidia-smi --query-gpu=index,uuid,memory.total,memory.used --format=csv` run with this
    process's environment (LD_PRELOAD and limits: the limited view) and without LD_PRELOAD and
    the limiter's variables (the real use), plus the real view taken before CUDA was touched;
  - `vgpu status --json` of the region (and `vgpu top --once` text into the log).
Prints one JSON line (and writes it to --result). Exit status 0 unless torch itself is missing.
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.multicast_off()
CHUNK = 256 << 20
real_env = common.real_env


def smi(env):
    """rows of nvidia-smi's memory query: [{index, uuid, total_mib, used_mib}], and the raw text"""
    cmd = ["nvidia-smi", "--query-gpu=index,uuid,memory.total,memory.used", "--format=csv"]
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30)
        text = p.stdout + p.stderr
    except Exception as e:  # noqa: BLE001
        return {"error": repr(e), "rows": []}
    rows = []
    for line in p.stdout.splitlines()[1:]:
        parts = [x.strip() for x in line.split(",")]
        if len(parts) < 4:
            continue
        try:
            rows.append({"index": int(parts[0]), "uuid": parts[1],
                         "total_mib": int(parts[2].split()[0]), "used_mib": int(parts[3].split()[0])})
        except ValueError:
            pass
    return {"rc": p.returncode, "rows": rows, "text": text[-2000:]}


def vgpu_top(vgpu):
    if not vgpu:
        return
    try:
        p = subprocess.run([vgpu, "top", "--once", "--interval", "500"], env=common.region_env(),
                           capture_output=True, text=True, timeout=30)
        sys.stderr.write("== vgpu top --once:\n" + p.stdout + p.stderr)
    except Exception as e:  # noqa: BLE001
        sys.stderr.write(f"vgpu top failed: {e!r}\n")


def uuid_of(torch, i):
    try:
        u = str(torch.cuda.get_device_properties(i).uuid)
        if u:
            return u if u.startswith("GPU-") else "GPU-" + u
    except Exception:  # noqa: BLE001
        pass
    try:  # the driver's answer for the program's ordinal i
        cuda = ctypes.CDLL("libcuda.so.1")
        buf = (ctypes.c_ubyte * 16)()
        if cuda.cuDeviceGetUuid(buf, ctypes.c_int(i)) == 0:
            h = bytes(buf).hex()
            return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    except Exception:  # noqa: BLE001
        pass
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", default=None, help="torch ordinals to fill (default: all visible)")
    ap.add_argument("--vgpu", default=None, help="the vgpu binary (for status --json)")
    ap.add_argument("--result", default=None)
    ap.add_argument("--max-chunks", type=int, default=600, help="per device (600 x 256 MiB = 150 GiB)")
    a = ap.parse_args()
    res = {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
           "limits": {k: v for k, v in sorted(os.environ.items()) if k.startswith("CUDA_DEVICE_")},
           "preloaded": bool(os.environ.get("LD_PRELOAD"))}
    res["smi_real_before"] = smi(real_env())
    import torch
    res["torch"] = torch.__version__
    n = torch.cuda.device_count()
    res["device_count"] = n
    devs = [int(x) for x in a.devices.split(",")] if a.devices else list(range(n))
    held, per = [], []
    for i in devs:
        d = {"ordinal": i}
        if i >= n:
            d["error"] = f"only {n} devices visible"
            per.append(d)
            continue
        d["uuid"] = uuid_of(torch, i)
        d["name"] = torch.cuda.get_device_name(i)
        count, err, t0 = 0, None, time.time()
        try:
            while count < a.max_chunks:
                held.append(torch.empty(CHUNK, dtype=torch.uint8, device=f"cuda:{i}"))
                count += 1
        except Exception as e:  # noqa: BLE001 (torch.OutOfMemoryError, or a RuntimeError at init)
            err = e
        d["count"] = count
        d["obtained"] = count * CHUNK
        d["gib"] = count * CHUNK / 2**30
        d["error"] = type(err).__name__ if err else None
        d["message"] = str(err).splitlines()[0][:300] if err else None
        d["oom"] = bool(err) and ("OutOfMemory" in type(err).__name__ or "out of memory" in str(err))
        d["fill_s"] = round(time.time() - t0, 2)
        per.append(d)
    for i in range(n):
        try:
            torch.cuda.synchronize(i)
        except Exception:  # noqa: BLE001
            pass
    for d in per:
        try:
            free, total = torch.cuda.mem_get_info(d["ordinal"])
            d["mem_get_info"] = [free, total]
        except Exception as e:  # noqa: BLE001
            d["mem_get_info"] = None
            d["mem_get_info_error"] = repr(e)[:300]
    res["devices"] = per
    # while holding everything
    res["smi_limited"] = smi(dict(os.environ))
    res["smi_real"] = smi(real_env())
    res["vgpu_status"] = common.vgpu_status(a.vgpu)
    vgpu_top(a.vgpu)
    res["held_bytes"] = sum(t.numel() for t in held)
    line = json.dumps(res)
    print(line, flush=True)
    if a.result:
        with open(a.result, "w") as f:
            f.write(line + "\n")
    for d in per:
        print(f"RESULT ordinal={d['ordinal']} uuid={d.get('uuid')} gib={d.get('gib')} "
              f"error={d.get('error')} mem_get_info={d.get('mem_get_info')}", flush=True)


if __name__ == "__main__":
    main()
