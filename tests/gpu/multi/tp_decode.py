"""Tensor-parallel transformer decode over two GPUs, the shape of vLLM's TP workers (issue 25).

    python3 tp_decode.py --result FILE.json [--tokens 512] [--warmup 32] [--save-logits F.pt]
                         [--ref F.pt] [--vgpu PATH] [--world 2] [--cpu] [model options]

One process per GPU (torch.multiprocessing spawn), torch.distributed over NCCL (tcp rendezvous
on 127.0.0.1, 60 s timeout), rank r on cuda:r. The model is built here: a Llama-like decoder
(RMSNorm, rotary attention, SiLU-gated MLP) in bf16 with Megatron's split: Q/K/V and gate/up
column-parallel (each rank its own heads and its share of the MLP), the attention output and
the MLP down projection row-parallel (one all-reduce each per layer), the LM head split over the
vocabulary (one all-gather). The weights are drawn on the device from fixed seeds, whole, then
sliced, so every run (and every world size) has the same model. Batch 1: a fixed prompt is
prefilled, then --tokens steps of greedy decode with a KV cache; each step ends when its token
is on the host (the argmax's .item()).

Rank 0 writes, in --result (one JSON object, also with every rank's own record):
  tokens (all steps), step times (ms) of the steps after --warmup, tokens/s over them, p50/p99;
  per rank: its device's UUID, torch.cuda.mem_get_info() while the model and cache are held,
  memory_reserved; `vgpu status --json` (with --vgpu) and nvidia-smi's real per-GPU and
  per-process use, taken while both ranks hold everything;
  with --ref (a --save-logits file of an earlier run): whether the tokens are identical and the
  largest |logit difference| over every step (steps up to the first different token).
--save-logits keeps every step's logits (fp32, tokens x vocab) for a later --ref.
--cpu: gloo on the CPU in fp32, for a dry run without a GPU (small model options advised).
Exit status 0 when every rank ended; run it under `timeout` (a hang shows as its exit status).
"""
import argparse
import datetime
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.multicast_off()


def build(torch, a, rank, world, dev, dtype):
    """this rank's slices of the model: a dict of tensors"""
    D, H, F, V, L = a.hidden, a.heads, a.ffn, a.vocab, a.layers
    assert D % H == 0 and H % world == 0 and F % world == 0 and V % world == 0, "shapes must split evenly"
    gen = torch.Generator(device=dev)

    def full(seed, *shape, std=None):  # std 1/sqrt(fan-in): every layer moves the logits
        gen.manual_seed(1000 + seed)
        w = torch.randn(*shape, generator=gen, device=dev, dtype=torch.float32)
        return w * (std if std is not None else shape[-1] ** -0.5)

    def rows(w):  # column-parallel: this rank's output rows
        n = w.shape[0] // world
        return w[rank * n:(rank + 1) * n]

    def cols(w):  # row-parallel: this rank's input columns
        n = w.shape[1] // world
        return w[:, rank * n:(rank + 1) * n]

    m = {"embed": full(0, V, D, std=1.0).to(dtype), "lm_head": rows(full(1, V, D)).to(dtype).contiguous(),
         "norm": torch.ones(D, device=dev, dtype=dtype), "layers": []}
    for i in range(L):
        s = 10 + 10 * i
        q, k, v = rows(full(s, D, D)), rows(full(s + 1, D, D)), rows(full(s + 2, D, D))
        g, u = rows(full(s + 4, F, D)), rows(full(s + 5, F, D))
        m["layers"].append({
            "attn_norm": torch.ones(D, device=dev, dtype=dtype),
            "mlp_norm": torch.ones(D, device=dev, dtype=dtype),
            "qkv": torch.cat([q, k, v]).to(dtype).contiguous(),
            "o": cols(full(s + 3, D, D)).to(dtype).contiguous(),
            "gate_up": torch.cat([g, u]).to(dtype).contiguous(),
            "down": cols(full(s + 6, D, F)).to(dtype).contiguous(),
        })
    return m


class Decoder:
    def __init__(self, torch, dist, a, rank, world, dev, dtype):
        self.t, self.dist, self.a, self.world = torch, dist, a, world
        self.m = build(torch, a, rank, world, dev, dtype)
        self.hl = a.heads // world          # this rank's heads
        self.hd = a.hidden // a.heads
        self.max_len = a.prompt + a.tokens + 1
        # KV cache: [layer, k|v, head, position, head_dim]
        self.cache = torch.zeros(a.layers, 2, self.hl, self.max_len, self.hd, device=dev, dtype=dtype)
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2, device=dev, dtype=torch.float32) / self.hd))
        ang = torch.outer(torch.arange(self.max_len, device=dev, dtype=torch.float32), inv)
        self.cos, self.sin = ang.cos().to(dtype), ang.sin().to(dtype)
        self.vl = a.vocab // world

    def rms(self, x, w):
        t = self.t
        xf = x.float()
        return (xf * t.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w

    def rope(self, x, pos):  # x: [heads, n, hd]
        n = x.shape[1]
        c, s = self.cos[pos:pos + n], self.sin[pos:pos + n]
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return self.t.stack([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1).flatten(-2)

    def forward(self, ids, pos):
        """logits (fp32, full vocabulary) of the last of `ids` (positions pos..pos+len-1)"""
        t, F = self.t, self.t.nn.functional
        n = ids.shape[0]
        x = self.m["embed"][ids]                                      # [n, D]
        for li, ly in enumerate(self.m["layers"]):
            h = self.rms(x, ly["attn_norm"])
            q, k, v = (h @ ly["qkv"].t()).view(n, 3, self.hl, self.hd).permute(1, 2, 0, 3)  # [hl, n, hd] each
            q, k = self.rope(q, pos), self.rope(k, pos)
            self.cache[li, 0, :, pos:pos + n] = k
            self.cache[li, 1, :, pos:pos + n] = v
            kc, vc = self.cache[li, 0, :, :pos + n], self.cache[li, 1, :, :pos + n]
            o = F.scaled_dot_product_attention(q[None], kc[None], vc[None], is_causal=n > 1 and pos == 0)[0]
            o = o.transpose(0, 1).reshape(n, self.hl * self.hd) @ ly["o"].t()
            if self.world > 1:
                self.dist.all_reduce(o)                               # row-parallel output
            x = x + o
            h = self.rms(x, ly["mlp_norm"])
            g, u = (h @ ly["gate_up"].t()).chunk(2, dim=-1)
            d = (F.silu(g) * u) @ ly["down"].t()
            if self.world > 1:
                self.dist.all_reduce(d)
            x = x + d
        h = self.rms(x[-1:], self.m["norm"])
        part = (h @ self.m["lm_head"].t()).float()                    # [1, V / world]
        if self.world == 1:
            return part[0]
        parts = [t.empty_like(part) for _ in range(self.world)]
        self.dist.all_gather(parts, part)
        return t.cat(parts, dim=-1)[0]


def rank_main(rank, port, a, outdir):
    import torch
    import torch.distributed as dist
    rec = common.Recorder(outdir, rank)
    res, step = rec.res, rec.step
    try:
        if a.cpu:
            dev, dtype, backend = torch.device("cpu"), torch.float32, "gloo"
            torch.set_num_threads(1)
        else:
            torch.cuda.set_device(rank)
            dev, dtype, backend = torch.device("cuda", rank), torch.bfloat16, "nccl"
            res["uuid"] = common.device_uuid(torch, rank)
        step("set_device", uuid=res.get("uuid"))
        if a.world > 1:
            dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=a.world,
                                    timeout=datetime.timedelta(seconds=60))
        step("init_process_group")
        dec = Decoder(torch, dist, a, rank, a.world, dev, dtype)
        sync = (lambda: None) if a.cpu else torch.cuda.synchronize
        sync()
        step("model", params_per_rank=sum(x.numel() for ly in dec.m["layers"] for x in ly.values())
             + dec.m["lm_head"].numel() + dec.m["embed"].numel())
        prompt = torch.tensor([(7 * i + 3) % a.vocab for i in range(a.prompt)], device=dev)
        with torch.inference_mode():
            logits = dec.forward(prompt, 0)
            nxt = int(torch.argmax(logits).item())
            tokens, times = [], []
            keep = torch.empty(a.tokens, a.vocab, device=dev, dtype=torch.float32) if rank == 0 else None
            pos = a.prompt
            for i in range(a.tokens):
                ts = time.perf_counter()
                logits = dec.forward(torch.tensor([nxt], device=dev), pos)
                nxt = int(torch.argmax(logits).item())
                times.append(time.perf_counter() - ts)
                tokens.append(nxt)
                if keep is not None:
                    keep[i] = logits
                pos += 1
        timed = times[a.warmup:]
        res["tokens"] = tokens
        res["step_ms"] = [round(1000 * x, 4) for x in timed]
        res["tokens_per_s"] = round(len(timed) / sum(timed), 2) if timed else None
        res["p50_ms"] = round(1000 * common.percentile(timed, 50), 4) if timed else None
        res["p99_ms"] = round(1000 * common.percentile(timed, 99), 4) if timed else None
        if not a.cpu:
            free, total = torch.cuda.mem_get_info()
            res["mem_get_info"] = [free, total]
            res["memory_reserved"] = torch.cuda.memory_reserved()
        step("decode", tokens_per_s=res["tokens_per_s"], p50_ms=res["p50_ms"], p99_ms=res["p99_ms"])
        if rank == 0:
            if a.ref:
                ref = torch.load(a.ref, map_location=dev)
                rt = ref["tokens"]
                same = rt == tokens
                first = next((i for i, (x, y) in enumerate(zip(rt, tokens)) if x != y), None)
                upto = len(tokens) if first is None else first + 1  # the logits that chose the first difference
                diff = (keep[:upto] - ref["logits"][:upto].to(dev)).abs().max().item() if upto else 0.0
                res["compare"] = {"ref": a.ref, "tokens_identical": same, "first_difference": first,
                                  "steps_compared": upto, "max_abs_logit_diff": diff}
                step("compare", **res["compare"])
            if a.save_logits:
                torch.save({"tokens": tokens, "logits": keep.cpu()}, a.save_logits)
                step("saved", path=a.save_logits)
        if a.world > 1:
            dist.barrier()
        if rank == 0:  # both ranks hold the model, the cache and NCCL's buffers here
            res["status_holding"] = common.vgpu_status(a.vgpu)
            if not a.cpu:
                res["smi_gpus"] = common.smi_gpus()
                res["smi_apps"] = common.smi_apps()
            step("status_holding")
        if a.world > 1:
            dist.barrier()
            dist.destroy_process_group()
        step("done")
    except Exception as e:  # noqa: BLE001
        rec.failed(e)
        raise


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--result", required=True)
    ap.add_argument("--tokens", type=int, default=512, help="decode steps")
    ap.add_argument("--warmup", type=int, default=32, help="first steps left out of the timing")
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--ffn", type=int, default=5632)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--save-logits", default=None)
    ap.add_argument("--ref", default=None, help="a --save-logits file to compare with")
    ap.add_argument("--vgpu", default=None)
    ap.add_argument("--cpu", action="store_true", help="gloo on the CPU (dry run)")
    a = ap.parse_args(argv)
    if a.tokens <= a.warmup:
        ap.error("--tokens must be more than --warmup")
    if a.hidden % a.heads or (a.hidden // a.heads) % 2 or a.heads % a.world or a.ffn % a.world \
            or a.vocab % a.world:
        ap.error("--hidden/--heads (even), --heads, --ffn and --vocab must split over --world")
    return a


def main():
    a = parse()
    out = common.run_ranks(rank_main, a.world, a, a.result + ".d")
    out["args"] = vars(a)
    err = out["spawn_error"]
    with open(a.result, "w") as f:
        json.dump(out, f)
    r0 = out["ranks"][0]
    print("RESULT " + json.dumps({"seconds": out["seconds"], "spawn_error": err,
                                  "tokens_per_s": r0.get("tokens_per_s"), "p50_ms": r0.get("p50_ms"),
                                  "p99_ms": r0.get("p99_ms"), "compare": r0.get("compare"),
                                  "steps": [[s["name"] for s in r.get("steps", [])] for r in out["ranks"]]}))
    return 0 if err is None else 1


if __name__ == "__main__":
    sys.exit(main())
