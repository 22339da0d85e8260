"""The Python cases of run-compat.sh: one small, deterministic job per CUDA stack.

    python3 cases.py CASE

Each case prints one line `RESULT {json}` with
  checksum  what the job computed (rounded so that the same GPU gives the same text: the
            run under vgpu must print the plain run's checksum)
  total     the device memory the stack reports as the total, in bytes (None: it has no such
            view), so run-compat.sh can check that a memory limit is visible
and, for some cases, more fields (`agree` for the NVML case). A missing module prints
`SKIP <reason>` and exits 77; any other failure is a traceback and a non-zero exit.
"""
import json
import os
import sys

SKIP = 77


def emit(checksum, total, **extra):
    print("RESULT " + json.dumps({"checksum": checksum, "total": total, **extra}), flush=True)


def skip(why):
    print(f"SKIP {why}", flush=True)
    sys.exit(SKIP)


def need(module):
    try:
        return __import__(module)
    except ImportError as e:
        skip(f"no {module}: {e}")


def digest(values, places=3):
    """A short text of a list of floats, rounded: the checksum of a job."""
    return ",".join(f"{float(v):.{places}e}" for v in values)


def torch_job(torch, x, w):
    """Four matmuls and nonlinearities: what the torch cases compute."""
    for _ in range(4):
        x = torch.tanh(x @ w) + 0.5 * x
    return x


def torch_inputs(torch):
    g = torch.Generator(device="cpu").manual_seed(1234)
    x = torch.randn(256, 512, generator=g).cuda()
    w = (torch.randn(512, 512, generator=g) / 32).cuda()
    return x, w


def torch_result(torch, y):
    torch.cuda.synchronize()
    return digest([y.sum().item(), y.abs().max().item(), y[0, :4].sum().item()])


def case_torch_eager():
    torch = need("torch")
    x, w = torch_inputs(torch)
    y = torch_job(torch, x, w)
    emit(torch_result(torch, y), torch.cuda.mem_get_info()[1])


def case_torch_compile():
    torch = need("torch")
    x, w = torch_inputs(torch)
    f = torch.compile(lambda a, b: torch_job(torch, a, b))
    y = f(x, w)
    y = f(x, w)  # the compiled graph, not the first trace
    emit(torch_result(torch, y), torch.cuda.mem_get_info()[1])


def case_torch_graphs():
    torch = need("torch")
    x, w = torch_inputs(torch)
    static_x = x.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):  # warm-up on a side stream, as the documentation asks
            torch_job(torch, static_x, w)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_y = torch_job(torch, static_x, w)
    for _ in range(5):
        g.replay()
    emit(torch_result(torch, static_y), torch.cuda.mem_get_info()[1])


def case_torch_graphs_async():
    # PyTorch's cudaMallocAsync backend: a capture turns the allocations into graph memory
    # nodes, charged when the graph is instantiated and launched rather than at cudaMallocAsync.
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
    case_torch_graphs()


def case_jax():
    jax = need("jax")
    import jax.numpy as jnp

    key = jax.random.PRNGKey(1234)
    kx, kw = jax.random.split(key)
    x = jax.random.normal(kx, (256, 512), dtype=jnp.float32)
    w = jax.random.normal(kw, (512, 512), dtype=jnp.float32) / 32

    @jax.jit
    def job(x, w):
        for _ in range(4):
            x = jnp.tanh(x @ w) + 0.5 * x
        return x

    y = job(x, w).block_until_ready()
    dev = jax.devices()[0]
    if dev.platform != "gpu":
        raise SystemExit(f"JAX runs on {dev.platform}, not a GPU")
    stats = dev.memory_stats() or {}
    emit(
        digest([float(y.sum()), float(jnp.abs(y).max()), float(y[0, :4].sum())]),
        None,
        bytes_limit=stats.get("bytes_limit"),
    )


def case_cupy():
    cp = need("cupy")
    rs = cp.random.RandomState(1234)
    x = rs.standard_normal((256, 512), dtype=cp.float32)
    w = rs.standard_normal((512, 512), dtype=cp.float32) / 32
    for _ in range(4):
        x = cp.tanh(x @ w) + 0.5 * x
    cp.cuda.Device().synchronize()
    emit(
        digest([float(x.sum()), float(cp.abs(x).max()), float(x[0, :4].sum())]),
        cp.cuda.runtime.memGetInfo()[1],
    )


def case_triton():
    torch = need("torch")
    triton = need("triton")
    import triton.language as tl

    @triton.jit
    def axpy(x_ptr, y_ptr, out_ptr, n, a, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, a * x + y, mask=mask)

    n = 1 << 20
    g = torch.Generator(device="cpu").manual_seed(1234)
    x = torch.randn(n, generator=g).cuda()
    y = torch.randn(n, generator=g).cuda()
    out = torch.empty_like(x)
    axpy[(triton.cdiv(n, 1024),)](x, y, out, n, 2.0, BLOCK=1024)
    torch.cuda.synchronize()
    emit(digest([out.sum().item(), out.abs().max().item()]), torch.cuda.mem_get_info()[1])


def case_numba():
    need("numba")
    import numpy as np

    # The GPU machine's numba predates NumPy 2.4, which removed np.row_stack (numba's import
    # fails there with or without vgpu): the alias it looks for, as NumPy had it.
    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack
    try:
        from numba import cuda
    except ImportError as e:
        skip(f"no numba.cuda: {e}")

    @cuda.jit
    def scale(a, out):
        i = cuda.grid(1)
        if i < a.size:
            out[i] = 3.0 * a[i] + 1.0

    a = np.arange(1 << 20, dtype=np.float32) / (1 << 20)
    d_a = cuda.to_device(a)
    d_out = cuda.device_array_like(d_a)
    scale[(a.size + 255) // 256, 256](d_a, d_out)
    out = d_out.copy_to_host()
    emit(digest([out.sum(), out.max()]), cuda.current_context().get_memory_info()[1])


KERNEL_SRC = r"""
extern "C" __global__ void affine(float *a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        a[i] = 2.0f * a[i] + 1.0f;
}
"""


def case_cuda_python():
    """The driver API through cuda.bindings: a context, an allocation, a kernel compiled with
    NVRTC and launched with cuLaunchKernel, a copy back."""
    try:
        from cuda.bindings import driver as cu
        from cuda.bindings import nvrtc
    except ImportError:
        try:
            from cuda import cuda as cu  # cuda-python before 12.6
            from cuda import nvrtc
        except ImportError as e:
            skip(f"no cuda.bindings.driver: {e}")
    import ctypes

    import numpy as np

    def ok(r):
        err, *rest = r if isinstance(r, tuple) else (r,)
        if int(err) != 0:
            raise RuntimeError(f"error {err}")
        return rest[0] if len(rest) == 1 else rest

    ok(cu.cuInit(0))
    dev = ok(cu.cuDeviceGet(0))
    ctx = ok(cu.cuDevicePrimaryCtxRetain(dev))
    ok(cu.cuCtxSetCurrent(ctx))
    major = ok(cu.cuDeviceGetAttribute(
        cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
    minor = ok(cu.cuDeviceGetAttribute(
        cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
    prog = ok(nvrtc.nvrtcCreateProgram(KERNEL_SRC.encode(), b"affine.cu", 0, [], []))
    opts = [f"--gpu-architecture=compute_{major}{minor}".encode()]
    ok(nvrtc.nvrtcCompileProgram(prog, len(opts), opts))
    size = ok(nvrtc.nvrtcGetPTXSize(prog))
    ptx = b" " * size
    ok(nvrtc.nvrtcGetPTX(prog, ptx))
    module = ok(cu.cuModuleLoadData(np.char.array(ptx).ctypes.data))
    fn = ok(cu.cuModuleGetFunction(module, b"affine"))
    n = 1 << 20
    ptr = ok(cu.cuMemAlloc(4 * n))
    ok(cu.cuMemsetD32(ptr, 0x3F800000, n))  # 1.0f
    d_arg = np.array([int(ptr)], dtype=np.uint64)
    n_arg = np.array([n], dtype=np.int32)
    args = np.array([d_arg.ctypes.data, n_arg.ctypes.data], dtype=np.uint64)
    ok(cu.cuLaunchKernel(fn, (n + 255) // 256, 1, 1, 256, 1, 1, 0, cu.CUstream(0),
                         args.ctypes.data, 0))
    ok(cu.cuCtxSynchronize())
    host = (ctypes.c_float * n)()
    ok(cu.cuMemcpyDtoH(ctypes.addressof(host), ptr, 4 * n))
    free_total = ok(cu.cuMemGetInfo())
    ok(cu.cuMemFree(ptr))
    ok(cu.cuModuleUnload(module))
    ok(cu.cuDevicePrimaryCtxRelease(dev))
    emit(digest([sum(host[:1024]), host[n - 1]]), int(free_total[1]))


def case_transformers():
    torch = need("torch")
    transformers = need("transformers")
    torch.manual_seed(1234)
    cfg = transformers.GPT2Config(
        n_layer=2, n_head=2, n_embd=64, vocab_size=1000, n_positions=128
    )
    model = transformers.GPT2LMHeadModel(cfg).eval().cuda()
    ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]], device="cuda")
    with torch.no_grad():
        out = model.generate(
            ids,
            max_new_tokens=24,
            do_sample=False,
            pad_token_id=0,
            attention_mask=torch.ones_like(ids),
        )
    emit(" ".join(str(t) for t in out[0].tolist()), torch.cuda.mem_get_info()[1])


def case_nvml_agree():
    """torch.cuda.mem_get_info and NVML's nvmlDeviceGetMemoryInfo agree inside the process
    (vLLM sizes its KV cache from both)."""
    torch = need("torch")
    try:
        import pynvml
    except ImportError as e:
        skip(f"no pynvml (nvidia-ml-py): {e}")
    x = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")  # 256 MiB held
    x.fill_(1)  # and a kernel: the SM-limited run must count a launch
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    m = pynvml.nvmlDeviceGetMemoryInfo(h)
    pynvml.nvmlShutdown()
    # Totals agree to 1 % (NVML and the driver may count a reserve differently on the bare
    # GPU); free memory to 5 % of the total (another process may allocate in between).
    agree = abs(m.total - total) <= total // 100 and abs(m.free - free) <= total // 20
    del x
    emit(
        "agree" if agree else "disagree",
        total,
        agree=agree,
        torch_free=free,
        torch_total=total,
        nvml_free=m.free,
        nvml_total=m.total,
        nvml_used=m.used,
    )


CASES = {
    "torch-eager": case_torch_eager,
    "torch-compile": case_torch_compile,
    "torch-graphs": case_torch_graphs,
    "torch-graphs-async": case_torch_graphs_async,
    "jax": case_jax,
    "cupy": case_cupy,
    "triton": case_triton,
    "numba": case_numba,
    "cuda-python": case_cuda_python,
    "transformers": case_transformers,
    "nvml-agree": case_nvml_agree,
}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        sys.exit(f"usage: cases.py {{{'|'.join(CASES)}}}")
    CASES[sys.argv[1]]()
