"""gen3_bench.py's CPU-bound "spin" member without a GPU (stdlib only): it waits at the
scenario's barrier like the PyTorch members, spins for its window from the common start, and
its line parses.

    python3 -m unittest discover -s tests/gpu/gen3 -p 'test_*.py'
"""
import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gen3_bench  # noqa: E402  (after the path it is found on)


def die_with_parent():
    """In the child before exec: killed when the test's process dies (PR_SET_PDEATHSIG), so
    that a spinner waiting at its barrier never outlives a killed test run."""
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))


class Spin(unittest.TestCase):
    def test_the_spinner_waits_for_the_barrier_then_spins_its_window(self):
        with tempfile.TemporaryDirectory() as d:
            start_file = os.path.join(d, "start")
            cmd = [sys.executable, "-c", gen3_bench.SPIN, "0.3", start_file, HERE]
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                                 preexec_fn=die_with_parent)
            try:
                # It says it is ready beside the start file and waits for the start.
                deadline = time.time() + 30
                while time.time() < deadline and not any(
                        f.startswith("start.ready.") for f in os.listdir(d)):
                    time.sleep(0.01)
                self.assertTrue([f for f in os.listdir(d) if f.startswith("start.ready.")])
                self.assertIsNone(p.poll())
                start = time.time() + 0.2
                with open(start_file + ".tmp", "w") as f:
                    f.write(repr(start))
                os.rename(start_file + ".tmp", start_file)
                out, _ = p.communicate(timeout=30)
            finally:
                p.kill()
            ended = time.time()
        # It spun from the start for its window, not from its own launch.
        self.assertGreaterEqual(ended, start + 0.3)
        got = gen3_bench.Bench.parse("spin", out, p.returncode)
        self.assertGreaterEqual(got["spun"], 0.29)
        self.assertNotIn("late", got)

    def test_a_spinner_that_failed_reports_its_exit_status(self):
        self.assertEqual(gen3_bench.Bench.parse("spin", "", 1), {"rc": 1})
        self.assertIn("err", gen3_bench.Bench.parse("spin", "nothing here", 0))

    def test_the_services_profile_parses_to_its_gpu_time_a_request(self):
        # decode_service.py --profile's line (run 64's figures).
        out = ("decode_profile requests=20 wall_ms_per_request=185.98 gpu_ms_per_request=16.54 "
               "kernels_per_request=5422 mean_kernel_us=3.05\n")
        self.assertEqual(gen3_bench.Bench.parse("decodeprof", out, 0),
                         {"wall": 185.98, "gpu": 16.54, "kernels": 5422})
        self.assertIn("err", gen3_bench.Bench.parse("decodeprof", "decode requests=3", 0))

    def test_the_spinner_is_a_barrier_member(self):
        # It starts with the PyTorch members (its start argument is the start file).
        bench = gen3_bench.Bench.__new__(gen3_bench.Bench)
        cmd = bench.command("spin", 30, "/x/start")
        self.assertEqual(cmd[-3:], ["30", "/x/start", HERE])


if __name__ == "__main__":
    unittest.main()
