"""Triton and torch.compile under the compute limit.

    python3 triton_bench.py triton SECONDS [ITERS]
    python3 triton_bench.py compiled SECONDS
    python3 triton_bench.py jax|cupy SECONDS

triton:   a Triton kernel (a chain of dependent FMAs per element, ITERS long; calibrated to ~1 ms
          alone when ITERS is not given) launched back to back, synchronised every 8 launches.
          Triton loads its cubins and launches them through its own compiled launcher, not
          through PyTorch.
compiled: MLP inference compiled with torch.compile(mode="reduce-overhead"): Triton and
          cuBLAS kernels replayed from a CUDA graph that PyTorch captures (GLOBAL capture mode)
          in its warm-up calls; one synchronize per batch.
jax:      a jitted 8192² matmul + tanh (XLA), waited for each time.
cupy:     four 8192² matmuls (cuBLAS) + tanh (CuPy kernels), then a device sync.

After 1 s of warm-up (not counted) prints, like sm_bench:
    info workload=... iters=... unit_ms=...
    window <i> <units completed in [i, i+1) s>     i = 0 .. SECONDS-1
    total <units> <SECONDS>
Units are counted by the host time at which they were seen to complete.
"""
import math
import sys
import time

WARMUP = 1.0


def triton_unit(iters_arg):
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def fma_chain(x_ptr, n, iters, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m)
        for _ in range(iters):
            x = x * 0.999999 + 0.000001
        tl.store(x_ptr + offs, x, mask=m)

    n = 132 * 4 * 256
    x = torch.ones(n, device="cuda")
    grid = (triton.cdiv(n, 256),)

    def launch(iters):
        fma_chain[grid](x, n, iters, BLOCK=256)

    if iters_arg:
        iters = int(iters_arg)
    else:  # calibrate: one kernel alone ~1 ms
        iters = 4096
        for _ in range(20):
            launch(iters)
            torch.cuda.synchronize()
            t = time.monotonic()
            for _ in range(5):
                launch(iters)
            torch.cuda.synchronize()
            ms = (time.monotonic() - t) / 5 * 1e3
            if 0.9 <= ms <= 1.1:
                break
            iters = max(1, int(iters / ms))
    launch(iters)
    torch.cuda.synchronize()

    def unit():  # 8 kernels, then wait: 8 units
        for _ in range(8):
            launch(iters)
        torch.cuda.synchronize()
        return 8

    return unit, "triton iters=%d" % iters


def compiled_unit():
    import torch
    import torch.nn as nn

    model = nn.Sequential(nn.Linear(4096, 4096), nn.GELU(), nn.Linear(4096, 4096), nn.GELU(),
                          nn.Linear(4096, 1000)).cuda().eval()
    x = torch.randn(4096, 4096, device="cuda")
    cmodel = torch.compile(model, mode="reduce-overhead")

    def unit():  # one inference batch, replayed from the recorded CUDA graph
        torch.compiler.cudagraph_mark_step_begin()
        with torch.no_grad():
            cmodel(x)
        torch.cuda.synchronize()
        return 1

    for _ in range(5):  # compile, record the CUDA graph
        unit()
    return unit, "compiled iters=0"


def jax_unit():
    import jax
    import jax.numpy as jnp

    x = jnp.ones((8192, 8192), dtype=jnp.float32)
    f = jax.jit(lambda a: jnp.tanh(a @ a * 1e-4))
    f(x).block_until_ready()  # compile

    def unit():  # one jitted matmul and elementwise op, waited for
        f(x).block_until_ready()
        return 1

    return unit, "jax iters=0"


def cupy_unit():
    import cupy as cp

    a = cp.ones((8192, 8192), dtype=cp.float32)

    def unit():  # four cuBLAS matmuls and elementwise kernels, then a device sync
        b = a
        for _ in range(4):
            b = cp.tanh(b @ a * 1e-4)
        cp.cuda.runtime.deviceSynchronize()
        return 4

    unit()
    return unit, "cupy iters=0"


def main():
    what, seconds = sys.argv[1], max(1, int(sys.argv[2]))
    import torch

    t_proc = time.monotonic()
    if what == "triton":
        unit, desc = triton_unit(sys.argv[3] if len(sys.argv) > 3 else None)
    elif what == "compiled":
        unit, desc = compiled_unit()
    elif what == "jax":
        unit, desc = jax_unit()
    elif what == "cupy":
        unit, desc = cupy_unit()
    else:
        sys.exit("usage: triton_bench.py triton|compiled|jax|cupy SECONDS [ITERS]")
    t_init = time.monotonic() - t_proc
    t0 = time.monotonic()
    t_start, units, printed, warm, late = t0 + WARMUP, [0] * seconds, 0, [], 0
    t_end = t_start + seconds
    announced = False
    while True:
        ts = time.monotonic()
        if ts >= t_end:
            break
        got = unit()
        t = time.monotonic()
        rel = t - t_start
        if rel < 0:
            warm.append((t - ts) / got)
            continue
        if not announced:
            tail = warm[len(warm) // 2:] or [(t - ts) / got]
            print("info workload=%s %s unit_ms=%.3f init_s=%.1f torch=%s" % (
                what, desc.split(" ", 1)[1], 1e3 * sum(tail) / len(tail), t_init,
                torch.__version__), flush=True)
            announced = True
        idx = int(math.floor(rel))
        if idx >= seconds:
            late += got
            idx = seconds
        else:
            units[idx] += got
        while printed < idx:
            print("window %d %d" % (printed, units[printed]), flush=True)
            printed += 1
    while printed < seconds:
        print("window %d %d" % (printed, units[printed]), flush=True)
        printed += 1
    print("total %d %d" % (sum(units), seconds))
    print("extra late_units=%d" % late)
    return 0


if __name__ == "__main__":
    sys.exit(main())
