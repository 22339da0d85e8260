"""CUDA-graph capture in PyTorch's default (GLOBAL) capture mode while vgpu's compute controller
drains the device at the end of each window.

    python3 capture_torch.py ROUNDS

Each round runs ~20 ms of real GPU work (so that a compute window is open and will be drained),
then captures a graph of 100 element-wise ops with 0.3 ms of host time between them: the capture
lasts ~30 ms, longer than a window at 50 % (25 ms), so a window's drain falls inside it. In
GLOBAL mode the driver forbids other threads in GLOBAL mode the potentially unsafe calls (such as
cuCtxSynchronize) and invalidates the capture when one is made. The graph is then replayed and its
result checked against eager execution.

Prints one line per failed round and, at the end:
    capture rounds=N ok=K failed=F first_error="..."
Exit status 0 only if every round captured, replayed and matched.
"""
import sys
import time


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    import torch

    dev = torch.device("cuda")
    a = torch.randn(4096, 4096, device=dev)
    x = torch.randn(1 << 20, device=dev)
    side = torch.cuda.Stream()

    def body(t):
        for _ in range(100):
            t = t * 1.0001 + 0.5
            time.sleep(0.0003)
        return t

    # warm-up on a side stream, as PyTorch's documentation asks before capturing
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        body(x)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    want = body(x)
    torch.cuda.synchronize()

    ok = failed = 0
    first_error = ""
    for r in range(rounds):
        try:
            for _ in range(8):  # ~20 ms of matmuls: a window opens and will be drained
                a = (a @ a).clamp_(-1, 1)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):  # capture_error_mode defaults to "global"
                out = body(x)
            g.replay()
            torch.cuda.synchronize()
            if not torch.allclose(out, want):
                raise RuntimeError("replayed graph disagrees with eager execution")
            ok += 1
        except Exception as e:  # noqa: BLE001 - every failure is reported, then the next round
            failed += 1
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            first_error = first_error or msg
            print("round %d failed: %s" % (r, msg), flush=True)
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001 - a sticky error ends the run below
                break
    print('capture rounds=%d ok=%d failed=%d first_error="%s"' % (rounds, ok, failed, first_error))
    return 0 if ok == rounds else 1


if __name__ == "__main__":
    sys.exit(main())
