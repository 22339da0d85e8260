#!/usr/bin/env python3
"""What the limiter's debug lines (gen3_bench.py --debug) say of synchronisations, per member
log of a run's gen3-logs.tgz (or a folder of its logs): the synchronisations a process began
and how many its rhythm foretold, and how long a heavy or low-priority one was held in a
peer's synchronisations, for its announced ones, and passed over behind its share (and of
that, where its lines say, how long it was further than LIGHT_LAG behind and held so); and how
often it timed a launch (brackets a second, the median of its lines) and the restart it
believed (the least and the most of its lines: a restart near 20 µs charges kernels half);
and the share of the GPU it was charged (the median of its lines: a heavy process below its
share is not held for a light peer's announced synchronisations, run 119); and how many times
its queue was held on the GPU and how many of those holds the watchdog lifted (summed; lines
before 2026-12-06's queue hold have none); and what it was charged after the fact, and of that
what synchronisations that waited longer than their launches were charged made (summed; lines
before 2026-12-07's waits have no such part); and how long its launches waited at its gate a
second (the median of its lines) and at how many looks it was held for its credit and on the
GPU (summed): a heavy process behind its share is held on the GPU only, ahead of it mostly for
its credit at its gate; and what a synchronisation waited on average, of those foretold and of
the others (lines since `Rhythm::waits_of`).

    python3 tests/gpu/gen3/counters.py run106/g/gen3-logs.tgz
"""
import io
import os
import re
import sys
import tarfile

# (Before 2026-12-06's priority counters the line said "in a light peer's syncs".)
LINE = re.compile(r"sm device \d+: .*?(\d+) syncs \((\d+) foretold\); held ([\d.]+) ms in a "
                  r"(?:light )?peer's syncs, ([\d.]+) ms for its announced ones, ([\d.]+) ms of "
                  r"them passed over")


BRACKETS = re.compile(r"sm device \d+: .*?(\d+) brackets \(")
RESTART = re.compile(r"sm device \d+: .*?restart ([\d.]+) us")
CHARGED = re.compile(r"sm device \d+: ([\d.]+) % of the GPU charged")
QUEUE = re.compile(r"sm device \d+: .*; (\d+) queue holds \((\d+) lifted late\)")
# What it charged after the fact, and of that what synchronisations made (lines since
# 2026-12-07's `Limiter::charge_waits`).
WAITS = re.compile(r"sm device \d+: .*corrected ([\d.]+) ms \(([\d.]+) ms by waits\)")
# Where its launches were held, and how long they waited at the gate.
GATE = re.compile(r"sm device \d+: .*\(held: credit (\d+) queue (\d+) peer \d+ blocked \d+; "
                  r"launches waited ([\d.]+) ms\)")
# Of the time passed over, how long it was further than LIGHT_LAG behind its share and how long
# of that it was held on the GPU on its allowance (lines since 2026-12-06's FAR_HOLD_PART).
FAR = re.compile(r"sm device \d+: .*passed over behind share \(([\d.]+) ms far behind, "
                 r"([\d.]+) ms held so\)")
# How long it was not held for its peers' synchronisations because they had held it
# PEER_HOLD_MAX in a row (lines since 2026-12-07's 5fbb46b).
CUT = re.compile(r"sm device \d+: .*held so\), ([\d.]+) ms past the hold limit;")
# What its synchronisations waited, those foretold and the others (lines since 2026-12-07's
# `Rhythm::waits_of`): whether the unforetold ones are what a light service waits in.
SYNC_WAITS = re.compile(r"sm device \d+: .*; sync waits: (\d+) foretold ([\d.]+) ms, (\d+) not "
                        r"([\d.]+) ms")


def median(pattern, lines, of=float):
    """The median (the upper one of an even count) of `pattern`'s first group over `lines`, or
    None where no line has it."""
    got = sorted(of(m.group(1)) for m in map(pattern.search, lines) if m)
    return got[len(got) // 2] if got else None


def charged(lines):
    """The median share of the GPU (%) a member's debug lines say it was charged, or None."""
    return median(CHARGED, lines)


def timing(lines):
    """(median brackets a second, least restart us, most restart us) over a member's debug
    lines, or None where it printed none."""
    brackets = median(BRACKETS, lines, int)
    restarts = [float(m.group(1)) for m in map(RESTART.search, lines) if m]
    if brackets is None or not restarts:
        return None
    return brackets, min(restarts), max(restarts)


def sums(pattern, lines, of=float):
    """Each of `pattern`'s groups summed over the lines it matches (as `of`), or None where it
    matches none."""
    got = [m.groups() for m in map(pattern.search, lines) if m]
    if not got:
        return None
    return tuple(sum(of(g[i]) for g in got) for i in range(len(got[0])))


def totals(lines):
    """The sums over a member's debug lines: (lines, syncs, foretold, held in syncs ms, held
    for announced ones ms, passed over ms), or None where it printed none."""
    got = sums(LINE, lines)
    if got is None:
        return None
    return (sum(1 for m in map(LINE.search, lines) if m), *got)


def queue_holds(lines):
    """(queue holds, lifted late) summed over a member's debug lines, or None where they have
    none."""
    return sums(QUEUE, lines, int)


def far(lines):
    """(far behind ms, held so ms) summed over a member's debug lines, or None where they have
    none."""
    return sums(FAR, lines)


def cut(lines):
    """Milliseconds past the hold limit summed over a member's debug lines, or None where they
    have no such part."""
    got = sums(CUT, lines)
    return got[0] if got else None


def waits(lines):
    """(corrected ms, of which by waits ms) summed over a member's debug lines, or None where
    they have no such part."""
    return sums(WAITS, lines)


def sync_waits(lines):
    """(foretold synchronisations, their waits ms, the others, their waits ms) summed over a
    member's debug lines, or None where they have no such part."""
    return sums(SYNC_WAITS, lines)


def gate(lines):
    """(median ms a second its launches waited at the gate, looks held for credit, looks held
    with its queue on the GPU) over a member's debug lines, or None where they have none."""
    got = [m.groups() for m in map(GATE.search, lines) if m]
    if not got:
        return None
    waited = sorted(float(g[2]) for g in got)
    return (waited[len(waited) // 2], sum(int(g[0]) for g in got), sum(int(g[1]) for g in got))


def logs(path):
    """(name, lines) of each member log under `path` (a .tgz or a folder), by name."""
    if os.path.isdir(path):
        for name in sorted(os.listdir(path)):
            with open(os.path.join(path, name), errors="replace") as f:
                yield name, f.read().splitlines()
        return
    with tarfile.open(path) as t:
        for m in sorted(t.getmembers(), key=lambda m: m.name):
            if m.isfile() and m.name.endswith(".log"):
                text = io.TextIOWrapper(t.extractfile(m), errors="replace").read()
                yield os.path.basename(m.name), text.splitlines()


def main():
    for path in sys.argv[1:]:
        for name, lines in logs(path):
            t = totals(lines)
            if t is None:
                continue
            n, syncs, foretold, held, announced, behind = t
            share = " (%.0f %%)" % (100 * foretold / syncs) if syncs else ""
            b = timing(lines)
            brackets = "; %4d brackets/s, restart %.1f-%.1f us" % b if b else ""
            c = charged(lines)
            brackets += "; charged %.1f %%" % c if c is not None else ""
            q = queue_holds(lines)
            brackets += "; %d queue holds (%d lifted late)" % q if q else ""
            w = waits(lines)
            brackets += "; corrected %.1f ms (%.1f by waits)" % w if w else ""
            g = gate(lines)
            brackets += ("; launches waited %.0f ms/s (looks held: %d credit, %d queue)" % g
                         if g else "")
            sw = sync_waits(lines)
            if sw and sw[0] + sw[2]:
                mean = lambda n, ms: ms / n if n else 0.0  # noqa: E731
                whole = sw[1] + sw[3]
                brackets += ("; a sync waited %.2f ms foretold, %.2f ms not (%.0f %% of the waiting)"
                             % (mean(sw[0], sw[1]), mean(sw[2], sw[3]),
                                100 * sw[3] / whole if whole else 0.0))
            f = far(lines)
            over = " (%.0f far behind, %.0f held so)" % f if f else ""
            k = cut(lines)
            over += ", %.1f ms past the hold limit" % k if k else ""
            print("%-40s %3d s  %5d syncs, %5d foretold%s; held %5.0f ms in a peer's, "
                  "%5.0f ms for announced ones, %4.0f ms passed over%s%s" % (
                      name, n, syncs, foretold, share, held, announced, behind, over, brackets))


if __name__ == "__main__":
    main()
