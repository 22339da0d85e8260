"""counters.py on synthetic member logs: the debug lines' synchronisation counters summed,
their brackets and restarts read, other lines ignored, a member without them left out."""
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import counters  # noqa: E402


def debug(syncs, foretold, held, announced, behind, brackets=50, restart=0.0, charged=6.4):
    return ("vgpu[7]: debug: sm device 0: %.1f %% of the GPU charged over 1.00 s, 208 looks "
            "(held: credit 0 queue 0 peer 0 blocked 0; launches waited 0.0 ms), 0 turns, "
            "1 peers, 56 kernels priced, mean 4.3 us, vt -100.1 ms; %d brackets (0 idle, 0 "
            "long calls, %d held, 0 lifted late) measured 5.0 ms charged 4.0 ms, 0 segments, "
            "1 probes, restart %.2f us, idle lag 0.00 us, corrected 0.01 ms; %d syncs (%d "
            "foretold); held %.1f ms in a light peer's syncs, %.1f ms for its announced ones, "
            "%.1f ms of them passed over behind share"
            % (charged, brackets, brackets, restart, syncs, foretold, held, announced, behind))


class Counters(unittest.TestCase):
    def test_a_members_lines_are_summed_and_the_rest_ignored(self):
        lines = [debug(90, 60, 0, 0, 0), "scenario noise", debug(100, 70, 1.5, 2.0, 0.5)]
        self.assertEqual(counters.totals(lines), (2, 190, 130, 1.5, 2.0, 0.5))
        self.assertIsNone(counters.totals(["no debug line here"]))
        older = debug(10, 5, 1.0, 0, 0).replace("in a light peer's", "in a peer's")
        self.assertEqual(counters.totals([older]), (1, 10, 5, 1.0, 0, 0))

    def test_brackets_are_the_median_of_a_members_lines_and_restarts_their_range(self):
        lines = [debug(1, 0, 0, 0, 0, brackets=b, restart=r)
                 for b, r in ((1900, 20.0), (40, 0.5), (45, 3.25))]
        self.assertEqual(counters.timing(lines + ["scenario noise"]), (45, 0.5, 20.0))
        self.assertIsNone(counters.timing(["no debug line here"]))

    def test_queue_holds_are_summed_over_a_members_lines(self):
        lines = [debug(1, 0, 0, 0, 0) + "; %d queue holds (%d lifted late)" % q
                 for q in ((30, 1), (12, 0))]
        self.assertEqual(counters.queue_holds(lines + ["scenario noise"]), (42, 1))
        self.assertIsNone(counters.queue_holds([debug(1, 0, 0, 0, 0)]))

    def test_far_behind_time_is_summed_where_the_lines_have_it(self):
        lines = [debug(1, 0, 0, 0, 9.0).replace(
            "behind share", "behind share (%.1f ms far behind, %.1f ms held so)" % f)
            for f in ((8.0, 1.0), (4.5, 0.5))]
        self.assertEqual(counters.far(lines + ["scenario noise"]), (12.5, 1.5))
        self.assertEqual(counters.totals(lines)[5], 18.0)
        self.assertIsNone(counters.far([debug(1, 0, 0, 0, 0)]))

    def test_time_past_the_hold_limit_is_summed_where_the_lines_have_it(self):
        far = "behind share (1.0 ms far behind, 0.5 ms held so)"
        lines = [debug(1, 0, 0, 0, 1.0).replace("behind share", far)
                 + ", %.1f ms past the hold limit; 3 queue holds (0 lifted late)" % c
                 for c in (100.5, 0.0)]
        self.assertEqual(counters.cut(lines + ["scenario noise"]), 100.5)
        self.assertEqual(counters.queue_holds(lines), (6, 0))
        self.assertEqual(counters.far(lines), (2.0, 1.0))
        self.assertIsNone(counters.cut([debug(1, 0, 0, 0, 0).replace("behind share", far)]))

    def test_what_waits_charged_is_summed_where_the_lines_have_it(self):
        lines = [debug(1, 0, 0, 0, 0).replace("corrected 0.01 ms;",
                                              "corrected %.2f ms (%.2f ms by waits);" % w)
                 for w in ((3.5, 1.25), (0.5, 0.0))]
        self.assertEqual(counters.waits(lines + ["scenario noise"]), (4.0, 1.25))
        self.assertIsNone(counters.waits([debug(1, 0, 0, 0, 0)]))

    def test_the_share_charged_is_the_median_of_a_members_lines(self):
        lines = [debug(1, 0, 0, 0, 0, charged=c) for c in (25.6, 56.9, 55.0)]
        self.assertEqual(counters.charged(lines + ["scenario noise"]), 55.0)
        self.assertIsNone(counters.charged(["no debug line here"]))

    def test_a_runs_archive_prints_one_line_per_member_with_counters(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "gen3-logs.tgz")
            with tarfile.open(path, "w:gz") as t:
                for name, text in (("01-a-d.log", debug(100, 75, 0, 0, 0, 36, 1.06)),
                                   ("01-a-t.log", debug(160, 8, 20, 80, 3)),
                                   ("02-plain-d.log", "nothing")):
                    data = text.encode()
                    info = tarfile.TarInfo("gen3-logs/" + name)
                    info.size = len(data)
                    t.addfile(info, io.BytesIO(data))
            out = subprocess.run([sys.executable, os.path.join(HERE, "counters.py"), path],
                                 capture_output=True, text=True, check=True).stdout.splitlines()
        self.assertEqual(len(out), 2)
        self.assertIn("100 syncs,    75 foretold (75 %)", out[0])
        self.assertIn("36 brackets/s, restart 1.1-1.1 us; charged 6.4 %", out[0])
        self.assertIn("80 ms for announced ones", out[1])

    def test_sync_waits_are_summed_and_printed_as_a_mean_a_synchronisation(self):
        lines = [debug(1, 0, 0, 0, 0) + "; 3 queue holds (0 lifted late); sync waits: "
                 "%d foretold %.1f ms, %d not %.1f ms" % w for w in ((30, 6.0, 10, 20.0),
                                                                      (20, 4.0, 5, 10.0))]
        self.assertEqual(counters.sync_waits(lines + ["scenario noise"]), (50, 10.0, 15, 30.0))
        self.assertIsNone(counters.sync_waits([debug(1, 0, 0, 0, 0)]))
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "01-a-d.log"), "w") as f:
                f.write("\n".join(lines))
            out = subprocess.run([sys.executable, os.path.join(HERE, "counters.py"), d],
                                 capture_output=True, text=True, check=True).stdout
        # 30 ms of the 40 waited went to the unforetold 15.
        self.assertIn("a sync waited 0.20 ms foretold, 2.00 ms not (75 % of the waiting)", out)

    def test_the_gate_is_read_as_a_median_wait_and_summed_looks(self):
        lines = [debug(1, 0, 0, 0, 0).replace(
            "(held: credit 0 queue 0 peer 0 blocked 0; launches waited 0.0 ms)",
            "(held: credit %d queue %d peer 3 blocked 0; launches waited %.1f ms)" % g)
            for g in ((1525, 702, 536.9), (0, 1843, 341.9), (2063, 709, 563.8))]
        self.assertEqual(counters.gate(lines + ["scenario noise"]), (536.9, 3588, 3254))
        self.assertIsNone(counters.gate(["no debug line here"]))


if __name__ == "__main__":
    unittest.main()
