"""Fill the GPU with 256 MiB CuPy arrays until cupy.cuda.memory.OutOfMemoryError; report JSON.

--async uses cupy.cuda.MemoryAsyncPool (cudaMallocAsync, stream-ordered pools).
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
    ap.add_argument("--async", dest="use_async", action="store_true")
    ap.add_argument("--result")
    ap.add_argument("--max", type=int, default=1000)
    args = ap.parse_args()

    res = common_fields("cupy-async" if args.use_async else "cupy")
    res["real_baseline_mib"] = real_used_mib()

    try:
        import cupy
        res["cupy"] = cupy.__version__
        if args.use_async:
            pool = cupy.cuda.MemoryAsyncPool()
            cupy.cuda.set_allocator(pool.malloc)
        else:
            pool = cupy.get_default_memory_pool()
        cupy.zeros(1, cupy.float32)
        cupy.cuda.Device().synchronize()
        res["real_after_init_mib"] = real_used_mib()
        res["mem_get_info_start"] = list(cupy.cuda.runtime.memGetInfo())
        res["total_memory_prop"] = cupy.cuda.runtime.getDeviceProperties(0)["totalGlobalMem"]
    except Exception as e:  # noqa: BLE001
        res["init_error"] = f"{type(e).__name__}: {first_line(e)}"
        emit(res, args.result)
        return 1

    arrays, err = [], None
    t0 = time.time()
    while len(arrays) < args.max:
        try:
            a = cupy.empty(CHUNK_ELEMS, cupy.float32)
            if args.use_async:
                cupy.cuda.get_current_stream().synchronize()
            arrays.append(a)
        except Exception as e:  # noqa: BLE001 - cupy.cuda.memory.OutOfMemoryError expected
            err = e
            break
    a = None  # drop the loop's own reference to the last array (it is in `arrays` too)
    res["fill_seconds"] = round(time.time() - t0, 3)
    res["count"] = len(arrays)
    res["gib_obtained"] = len(arrays) * CHUNK_GIB
    res["error_type"] = f"{type(err).__module__}.{type(err).__name__}" if err else None
    res["error_first_line"] = first_line(err) if err else None
    # the pool's own OOM; with the async pool a raw cudaErrorMemoryAllocation is normal too
    res["oom_normal"] = isinstance(err, cupy.cuda.memory.OutOfMemoryError) or (
        args.use_async and "cudaErrorMemoryAllocation" in str(err))
    res["real_peak_mib"] = real_used_mib()
    try:
        res["mem_get_info_peak"] = list(cupy.cuda.runtime.memGetInfo())
        res["pool_used_bytes"] = pool.used_bytes()
        res["pool_total_bytes"] = pool.total_bytes()
    except Exception as e:  # noqa: BLE001
        res["mem_get_info_peak_error"] = f"{type(e).__name__}: {first_line(e)}"

    recover = {}
    try:
        n = len(arrays)
        half = n // 2
        del arrays[n - half:]
        x = cupy.empty(CHUNK_ELEMS, cupy.float32)
        del x
        recover["cached_realloc"] = True
        cupy.cuda.get_current_stream().synchronize()
        pool.free_all_blocks()
        again = []
        for _ in range(half):
            again.append(cupy.empty(CHUNK_ELEMS, cupy.float32))
        cupy.cuda.get_current_stream().synchronize()
        recover["realloc_after_free_all_blocks"] = f"{len(again)}/{half}"
        recover["compute_ok"] = float(cupy.ones(1000, cupy.float32).sum().item()) == 1000.0
        res["recover_ok"] = bool(recover["compute_ok"]) and len(again) == half
        del again
    except Exception as e:  # noqa: BLE001
        recover["error"] = f"{type(e).__name__}: {first_line(e)}"
        res["recover_ok"] = False
    res["recover"] = recover
    emit(res, args.result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
