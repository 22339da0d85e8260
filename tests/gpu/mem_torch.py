"""Fill the GPU with 256 MiB PyTorch tensors until torch.OutOfMemoryError; report JSON.

Run under LD_PRELOAD=libvgpu.so CUDA_DEVICE_MEMORY_LIMIT=4g.  --expandable sets
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (the allocator then maps memory with
cuMemCreate/cuMemMap through the driver API instead of cudaMalloc).
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_util import common_fields, emit, first_line, real_used_mib  # noqa: E402

CHUNK_ELEMS = 64 * 2**20  # float32: 256 MiB
CHUNK_GIB = 0.25


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--expandable", action="store_true")
    ap.add_argument("--result", help="write the JSON result here too")
    ap.add_argument("--max", type=int, default=1000, help="stop after this many tensors")
    args = ap.parse_args()
    if args.expandable:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

    res = common_fields("torch-expandable" if args.expandable else "torch")
    res["alloc_conf"] = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    res["real_baseline_mib"] = real_used_mib()  # before this process touches CUDA

    try:
        import torch
        res["torch"] = torch.__version__
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        res["real_after_init_mib"] = real_used_mib()
        res["mem_get_info_start"] = list(torch.cuda.mem_get_info())
        res["total_memory_prop"] = torch.cuda.get_device_properties(0).total_memory
    except Exception as e:  # noqa: BLE001
        res["init_error"] = f"{type(e).__name__}: {first_line(e)}"
        emit(res, args.result)
        return 1

    tensors, err = [], None
    t0 = time.time()
    while len(tensors) < args.max:
        try:
            tensors.append(torch.empty(CHUNK_ELEMS, dtype=torch.float32, device="cuda"))
        except Exception as e:  # noqa: BLE001 - torch.OutOfMemoryError expected
            err = e
            break
    res["fill_seconds"] = round(time.time() - t0, 3)
    res["count"] = len(tensors)
    res["gib_obtained"] = len(tensors) * CHUNK_GIB
    res["error_type"] = type(err).__name__ if err else None
    res["error_first_line"] = first_line(err) if err else None
    res["oom_normal"] = isinstance(err, torch.OutOfMemoryError)
    res["real_peak_mib"] = real_used_mib()
    try:
        res["mem_get_info_peak"] = list(torch.cuda.mem_get_info())
        res["memory_allocated"] = torch.cuda.memory_allocated()
        res["memory_reserved"] = torch.cuda.memory_reserved()
    except Exception as e:  # noqa: BLE001
        res["mem_get_info_peak_error"] = f"{type(e).__name__}: {first_line(e)}"

    # The allocator must still work after the denial: free half, allocate again.
    recover = {}
    try:
        n = len(tensors)
        half = n // 2
        del tensors[n - half:]
        x = torch.empty(CHUNK_ELEMS, dtype=torch.float32, device="cuda")  # from the cache
        del x
        recover["cached_realloc"] = True
        torch.cuda.empty_cache()  # give the freed half back to the driver (and the limiter)
        again = []
        for _ in range(half):
            again.append(torch.empty(CHUNK_ELEMS, dtype=torch.float32, device="cuda"))
        recover["realloc_after_empty_cache"] = f"{len(again)}/{half}"
        s = torch.ones(1000, device="cuda").sum().item()
        recover["compute_ok"] = s == 1000.0
        res["recover_ok"] = bool(recover["compute_ok"] and len(again) == half)
        del again
    except Exception as e:  # noqa: BLE001
        recover["error"] = f"{type(e).__name__}: {first_line(e)}"
        res["recover_ok"] = False
    res["recover"] = recover
    del tensors
    torch.cuda.empty_cache()
    res["mem_get_info_end"] = list(torch.cuda.mem_get_info())
    emit(res, args.result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
