"""JAX with default settings (preallocates 75 % of the total it is shown): report memory_stats,
fill with 256 MiB arrays until an error, and the real device-wide peak seen without the limiter."""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_util import common_fields, emit, first_line, real_used_mib  # noqa: E402

CHUNK_ELEMS = 64 * 2**20  # float32: 256 MiB
CHUNK_GIB = 0.25


def stats(dev):
    try:
        s = dev.memory_stats()
        return {k: v for k, v in (s or {}).items() if isinstance(v, (int, float))}
    except Exception as e:  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {first_line(e)}"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--result")
    ap.add_argument("--max", type=int, default=1000)
    args = ap.parse_args()

    res = common_fields("jax")
    res["xla_env"] = {k: v for k, v in os.environ.items() if k.startswith(("XLA_", "JAX_"))}
    res["real_baseline_mib"] = real_used_mib()
    try:
        import jax
        import jax.numpy as jnp
        res["jax"] = jax.__version__
        dev = jax.devices()[0]
        res["device"] = str(dev)
        res["memory_stats_start"] = stats(dev)
        jnp.zeros((1,), jnp.float32).block_until_ready()
        res["real_after_init_mib"] = real_used_mib()
    except Exception as e:  # noqa: BLE001
        res["init_error"] = f"{type(e).__name__}: {first_line(e)}"
        emit(res, args.result)
        return 1

    arrays, err = [], None
    t0 = time.time()
    while len(arrays) < args.max:
        try:
            a = jnp.ones((CHUNK_ELEMS,), jnp.float32)
            a.block_until_ready()
            arrays.append(a)
        except Exception as e:  # noqa: BLE001 - RESOURCE_EXHAUSTED expected
            err = e
            break
    res["fill_seconds"] = round(time.time() - t0, 3)
    res["count"] = len(arrays)
    res["gib_obtained"] = len(arrays) * CHUNK_GIB
    res["error_type"] = f"{type(err).__module__}.{type(err).__name__}" if err else None
    res["error_first_line"] = first_line(err) if err else None
    msg = str(err) if err else ""
    res["oom_normal"] = bool(err) and ("RESOURCE_EXHAUSTED" in msg or "out of memory" in msg.lower())
    res["real_peak_mib"] = real_used_mib()
    res["memory_stats_peak"] = stats(dev)
    # JAX preallocates 75 % of the total it is shown (the limit): expect about 3 GiB of 4, not 3.25.
    res["min_frac"] = 0.625

    recover = {}
    try:
        n = len(arrays)
        del arrays[n - n // 2:]
        b = jnp.ones((CHUNK_ELEMS,), jnp.float32)
        b.block_until_ready()
        recover["realloc"] = True
        recover["compute_ok"] = float(jnp.ones((1000,), jnp.float32).sum()) == 1000.0
        res["recover_ok"] = bool(recover["compute_ok"])
    except Exception as e:  # noqa: BLE001
        recover["error"] = f"{type(e).__name__}: {first_line(e)}"
        res["recover_ok"] = False
    res["recover"] = recover
    emit(res, args.result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
