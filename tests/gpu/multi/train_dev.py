"""tests/gpu/compute/train.py on a chosen CUDA device, for run-multi.sh's per-device compute
limits under PyTorch (train.py itself always trains on the current device, cuda:0):

    python3 train_dev.py [--device N] SECONDS [train.py's options]

N is the CUDA ordinal as the program sees it (after CUDA_VISIBLE_DEVICES). Output: train.py's
(info, window, total lines), after one `info device_index=N` line.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "compute"))
import common  # noqa: E402

common.multicast_off()


def main():
    argv = sys.argv[1:]
    dev = 0
    if len(argv) >= 2 and argv[0] == "--device":
        try:
            dev = int(argv[1])
        except ValueError:
            sys.exit(f"train_dev.py: bad --device {argv[1]}")
        argv = argv[2:]
    import torch

    torch.cuda.set_device(dev)
    import train

    print(f"info device_index={dev} cuda_visible_devices={os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)')}",
          flush=True)
    sys.argv = [train.__file__] + argv
    return train.main()


if __name__ == "__main__":
    sys.exit(main())
