"""A DDP training loop over two GPUs, started by torchrun (issue 25).

    python3 -m torch.distributed.run --standalone --nproc_per_node=2 ddp_train.py \\
        --result FILE [--seconds 8] [--warmup 2] [--marker PATH] [--vgpu PATH] [--cpu]
        [--hidden 4096 --depth 4 --batch 8192]

Each rank (LOCAL_RANK's GPU, NCCL, env:// rendezvous from torchrun, 60 s timeout) trains the
same MLP as tests/gpu/compute/train.py (bf16 autocast, AdamW, random data, one
torch.cuda.synchronize() per step) wrapped in DistributedDataParallel, so every step all-reduces
the gradients. After --warmup seconds (not counted; rank 0 then creates --marker, for a monitor
outside) each rank counts the steps completed in each 1 s window for --seconds, like train.py:
its `windows` are its rate, and the same windows of an unlimited run give its share. The ranks
agree before each step whether to go on (a 4-byte all-reduce), so they run the same steps.

Memory: each rank reads its own use three times: after its CUDA context exists (q0), after
DDP's first step (q1: NCCL's communicator and buffers exist) and after the timed loop (q2). Each
time: this process's entry in `vgpu status --json` (bytes per GPU UUID, with --vgpu), its real
use from `nvidia-smi --query-compute-apps` (MiB per GPU UUID; the per-GPU totals too) and
torch.cuda.memory_reserved(). What the region charged beyond PyTorch's allocator between q0 and
q1 is NCCL's (and the libraries'); the real use beyond the region's is what vgpu did not count.
Each rank writes FILE.json.d/rank<r>.json (rewritten at every step: what a killed rank reached).
--cpu: gloo on the CPU, a small model, for a dry run without a GPU.
"""
import argparse
import datetime
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.multicast_off()


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--result", required=True)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--marker", default=None, help="rank 0 creates this file when the timed windows start")
    ap.add_argument("--vgpu", default=None)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8192, help="per rank")
    ap.add_argument("--cpu", action="store_true", help="gloo on the CPU (dry run)")
    a = ap.parse_args(argv)
    if a.seconds < 1 or a.warmup < 0:
        ap.error("--seconds must be at least 1 and --warmup not negative")
    return a


def memory(torch, a, pid):
    q = {"t": round(time.time(), 3)}
    st = common.vgpu_status(a.vgpu)
    q["region"] = common.region_process(st, pid) if st else None
    if st and not st.get("devices"):
        q["region_error"] = str(st)[:300]
    if not a.cpu:
        q["reserved"] = torch.cuda.memory_reserved()
        apps = common.smi_apps()
        q["real_apps"] = {common.norm_uuid(r["uuid"]): r["used_mib"] for r in apps["rows"] if r["pid"] == pid}
        q["real_apps_rows"] = len(apps["rows"])
        q["real_gpus"] = {common.norm_uuid(r["uuid"]): r["used_mib"] for r in common.smi_gpus()["rows"]}
    return q


def main():
    a = parse()
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    outdir = a.result + ".d"
    os.makedirs(outdir, exist_ok=True)
    pid = os.getpid()
    rec = common.Recorder(outdir, rank, local_rank=local, world=world, env=common.recorded_env())
    res, step = rec.res, rec.step

    try:
        import torch
        import torch.distributed as dist
        import torch.nn as nn
        import torch.nn.functional as F
        from torch.nn.parallel import DistributedDataParallel as DDP

        if a.cpu:
            dev, backend = torch.device("cpu"), "gloo"
            torch.set_num_threads(1)
            sync = lambda: None  # noqa: E731
        else:
            torch.cuda.set_device(local)
            dev, backend = torch.device("cuda", local), "nccl"
            sync = torch.cuda.synchronize
            res["uuid"] = common.device_uuid(torch, local)
            torch.zeros(1, device=dev)
            sync()
        step("context", uuid=res.get("uuid"))
        res["q0"] = memory(torch, a, pid)
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=60))
        step("init_process_group")
        torch.manual_seed(0)  # the same initial model on every rank (DDP broadcasts rank 0's anyway)
        layers = []
        for _ in range(a.depth):
            layers += [nn.Linear(a.hidden, a.hidden), nn.GELU()]
        layers.append(nn.Linear(a.hidden, 1000))
        model = DDP(nn.Sequential(*layers).to(dev), device_ids=None if a.cpu else [local])
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        g = torch.Generator(device=dev)
        g.manual_seed(1 + rank)  # each rank its own shard of data
        x = torch.randn(a.batch, a.hidden, device=dev, generator=g)
        y = torch.randint(0, 1000, (a.batch,), device=dev, generator=g)

        def train_step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            sync()
            return loss

        loss0 = float(train_step().item())
        dist.barrier()
        step("first_step", loss=loss0)
        res["q1"] = memory(torch, a, pid)
        dist.barrier()
        t0 = time.monotonic()
        t_start = t0 + a.warmup
        t_end = t_start + a.seconds
        units = [0] * a.seconds
        times, marked, late = [], False, 0
        # Every rank must run the same number of steps (DDP's all-reduces pair up, else the last
        # one waits out the timeout): before each step the ranks agree on the phase (0 warm-up,
        # 1 timed, 2 stop) by the furthest of their clocks, a 4-byte all-reduce.
        ph = torch.zeros(1, dtype=torch.int32, device=dev)
        while True:
            now = time.monotonic()
            ph.fill_(0 if now < t_start else 1 if now < t_end else 2)
            dist.all_reduce(ph, op=dist.ReduceOp.MAX)
            phase = int(ph.item())
            if phase == 2:
                break
            ts = time.monotonic()
            train_step()
            t = time.monotonic()
            if phase == 0:
                continue
            if not marked:
                marked = True
                if rank == 0 and a.marker:
                    with open(a.marker, "w") as f:
                        f.write(f"{time.time():.3f}\n")
            times.append(t - ts)
            i = int(math.floor(max(0.0, t - t_start)))
            if i < a.seconds:
                units[i] += 1
            else:
                late += 1
        loss1 = float(train_step().item())
        res["windows"] = units
        res["late"] = late
        res["steps_per_s"] = round(sum(units) / a.seconds, 3)
        res["step_ms_p50"] = round(1000 * common.percentile(times, 50), 3) if times else None
        res["step_ms_p99"] = round(1000 * common.percentile(times, 99), 3) if times else None
        res["loss"] = [loss0, loss1]
        if not a.cpu:
            res["mem_get_info"] = list(torch.cuda.mem_get_info())
        step("trained", windows=units, steps_per_s=res["steps_per_s"], p50=res["step_ms_p50"])
        res["q2"] = memory(torch, a, pid)
        step("memory")
        dist.barrier()
        dist.barrier()
        dist.destroy_process_group()
        step("done")
        if rank == 0:
            print("RESULT " + json.dumps({"steps_per_s": res["steps_per_s"], "p50_ms": res["step_ms_p50"],
                                          "p99_ms": res["step_ms_p99"], "windows": units}), flush=True)
        return 0
    except Exception as e:  # noqa: BLE001
        rec.failed(e)
        return 1


if __name__ == "__main__":
    sys.exit(main())
