#!/usr/bin/env python3
"""Does a host-bound training loop lose throughput from being paused, whatever pauses it?

    python3 tests/gpu/compute/pause_train.py [ON_MS OFF_MS]...   (default: 25 25  35 15)

Runs train.py (the latency benchmark's small loop: --hidden 2048 --depth 4 --batch 1024) plain,
then under each duty cycle imposed from outside with SIGSTOP / SIGCONT, without vgpu (the
process runs ON_MS, then is stopped OFF_MS), and prints the steps per second
of each run against ON / (ON + OFF) of the plain run's: a ratio under 1 is what a pause costs
the program by itself. The pauses start after the loop's first output line (its warm-up).
"""
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ["--hidden", "2048", "--depth", "4", "--batch", "1024"]
SECONDS = 5


def run(duty=None):
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "train.py"), str(SECONDS)] + ARGS,
                         stdout=subprocess.PIPE, text=True)
    out = []
    line = p.stdout.readline()  # the info line: the timed part begins
    out.append(line)
    if duty:
        on, off = duty[0] / 1000.0, duty[1] / 1000.0
        import threading

        stop = threading.Event()

        def pauser():
            while not stop.is_set():
                time.sleep(on)
                try:
                    os.kill(p.pid, signal.SIGSTOP)
                    time.sleep(off)
                    os.kill(p.pid, signal.SIGCONT)
                except ProcessLookupError:
                    return

        t = threading.Thread(target=pauser, daemon=True)
        t.start()
    out += p.stdout.readlines()
    p.wait()
    if duty:
        stop.set()
        try:
            os.kill(p.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    wins = [int(m.group(1)) for m in (re.match(r"window \d+ (\d+)", l) for l in out) if m]
    return wins


def mean(w):
    w = w[1:]
    return sum(w) / len(w) if w else float("nan")


def main():
    a = [int(x) for x in sys.argv[1:]] or [25, 25, 35, 15]
    duties = list(zip(a[0::2], a[1::2]))
    base = run()
    print("plain: %.1f steps/s %s" % (mean(base), base), flush=True)
    for on, off in duties:
        w = run((on, off))
        share = on / (on + off)
        print("paused %d/%d ms: %.1f steps/s %s = %.3f of %.2f x plain" % (
            on, off, mean(w), w, mean(w) / (share * mean(base)), share), flush=True)


if __name__ == "__main__":
    main()
