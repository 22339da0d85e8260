"""NCCL all-reduce with one process per GPU (torch.multiprocessing spawn), for run-multi.sh.

    python3 allreduce.py --result FILE.json [--vgpu PATH] [--fill PATH/fill.py] [--hold-mib 1024]

Run it under `timeout`: a hang shows as the timeout's exit status. Every rank:
  1. joins a 2-rank NCCL group (tcp rendezvous on 127.0.0.1, 60 s timeout), device cuda:RANK;
  2. all-reduces an int64 arange(8M) * (rank + 1) (expects arange * 3, exactly) and then 20 times a
     float32 tensor of 16M elements filled with rank + 1 + it (expects 2 * it + 3 everywhere);
  3. holds --hold-mib MiB on its GPU; after a barrier rank 0 records `vgpu status --json` (both
     ranks must be in the container's region, each charged on its own GPU), then runs fill.py as a
     third process of the same container on both GPUs (it must get no more than each GPU's limit
     minus what the ranks use there), records the status again, and a final barrier ends the job.
The parent writes one JSON object with every rank's answer; exit status 0 when every rank ended.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.multicast_off()
WORLD = 2
status = common.vgpu_status


def rank_main(rank, port, args, outdir):
    import torch
    import torch.distributed as dist
    rec = common.Recorder(outdir, rank)
    res, step = rec.res, rec.step
    try:
        torch.cuda.set_device(rank)
        step("set_device", uuid=str(getattr(torch.cuda.get_device_properties(rank), "uuid", "")))
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                                timeout=datetime.timedelta(seconds=60))
        step("init_process_group")
        n = 8 << 20
        x = torch.arange(n, dtype=torch.int64, device="cuda") * (rank + 1)
        dist.all_reduce(x)
        torch.cuda.synchronize()
        want = torch.arange(n, dtype=torch.int64, device="cuda") * 3
        ok_int = bool(torch.equal(x, want))
        del x, want
        step("allreduce_int64", ok=ok_int)
        ok_f, t1 = True, time.time()
        m = 16 << 20
        for it in range(20):
            y = torch.full((m,), float(rank + 1 + it), dtype=torch.float32, device="cuda")
            dist.all_reduce(y)
            ok_f = ok_f and bool((y == float(2 * it + 3)).all().item())
        torch.cuda.synchronize()
        secs = time.time() - t1
        step("allreduce_float_x20", ok=ok_f, seconds=round(secs, 3),
             algbw_gbs=round(20 * m * 4 / secs / 1e9, 2) if secs > 0 else None)
        hold = torch.empty(args.hold_mib << 20, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info()
        step("hold", mib=args.hold_mib, mem_get_info=[free, total])
        dist.barrier()
        if rank == 0:
            res["status_holding"] = status(args.vgpu)
            step("status_holding")
            if args.fill:
                try:
                    p = subprocess.run([sys.executable, args.fill, "--devices", "0,1"], capture_output=True,
                                       text=True, timeout=90)
                    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
                    res["third_process"] = json.loads(lines[-1]) if lines else {"rc": p.returncode,
                                                                               "stderr": p.stderr[-1500:]}
                except Exception as e:  # noqa: BLE001
                    res["third_process"] = {"error": repr(e)}
                step("third_process")
            res["status_after_third"] = status(args.vgpu)
            step("status_after_third")
        dist.barrier()
        del hold
        step("done", ok=ok_int and ok_f)
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001
        rec.failed(e)
        raise


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--result", required=True)
    ap.add_argument("--vgpu", default=None)
    ap.add_argument("--fill", default=None)
    ap.add_argument("--hold-mib", type=int, default=1024)
    args = ap.parse_args()
    out = common.run_ranks(rank_main, WORLD, args, args.result + ".d")
    err = out["spawn_error"]
    with open(args.result, "w") as f:
        json.dump(out, f)
    print("RESULT " + json.dumps({"seconds": out["seconds"], "spawn_error": err,
                                  "steps": [[s["name"] for s in r.get("steps", [])] for r in out["ranks"]]}))
    return 0 if err is None else 1


if __name__ == "__main__":
    sys.exit(main())
