#!/usr/bin/env python3
"""Issue 23's bars against one run of gen3_bench (stdlib only).

    python3 tests/gpu/gen3/summarize.py GEN3_TXT [GEN3_TXT...]

GEN3_TXT is the `gen3.txt` a run wrote: lines `scenario NAME member=JSON ...`. Each check
prints its figures, its bar and PASS / MISS; a check whose scenarios the run did not include
prints `--`. Only scenarios of the same run are compared (plain, MPS and vgpu side by side);
a member whose window started late (`late`) is flagged, since its figures overlap the others'
less. Given several runs, it checks each, then pools close17's rounds over all of them (and,
where the decode service printed every request's latency, the requests themselves).
"""
import itertools
import json
import math
import random
import re
import statistics
import sys


def load(path):
    """{scenario: {member: dict or str}}; a scenario run twice is NAME, then NAME#2."""
    out = {}
    with open(path) as f:
        for line in f:
            if not line.startswith("scenario "):
                continue
            name, rest = line.split(None, 2)[1], line.split(None, 2)[2:]
            members = {}
            for m in re.finditer(r"(\w+)=(\{[^}]*\}|\"[^\"]*\")", rest[0] if rest else ""):
                members[m.group(1)] = json.loads(m.group(2))
            # A name run again in one call (close20 then close19 both run `cnn.plain`) is
            # kept as NAME#2, NAME#3, ...: the first keeps the name.
            key, n = name, 1
            while key in out:
                n += 1
                key = "%s#%d" % (name, n)
            out[key] = members
    return out


def late(*ms):
    return " (late start)" if any(isinstance(m, dict) and "late" in m for m in ms) else ""


def get(runs, scen, member, key):
    m = runs.get(scen, {}).get(member)
    return m.get(key) if isinstance(m, dict) else None


def loop_alone(runs):
    """The training loop's alone rate: the mean of all its plain runs in the call. It moves
    ±10 % between runs a minute apart (28.2-34.2 steps/s in run 108, whose plain pairs moved
    0.3 %), so every share of it is of the mean."""
    v = [get(runs, s, "t", "sps") for s in runs if re.fullmatch(r"cnn\.plainb?(#\d+)?", s)]
    v = [x for x in v if x]
    return sum(v) / len(v) if v else None


def builds(form):
    """The scenario names `form` gives for this library ("vgpu") and the --lib2 variant
    ("varb"), each run once or repeated (a repeat ends in "b"): `form` has `{tag}` and `{r}`."""
    return [form.format(tag=tag, r=r) for tag, r in itertools.product(("vgpu", "varb"), ("", "b"))]


def verdict(ok):
    return "PASS" if ok else "MISS"


SHARES = ("50_50", "30_70")
# decode_service.py's period between requests where a run does not say it (its default, and
# gen3_bench.py's before --decode-period), ms.
PERIOD_MS = 250.0


def train_bar(share):
    """Target 3's training clause at `share` ("50_50"): 0.95 x the training container's share,
    in % of the loop's alone rate."""
    return 0.95 * int(share.split("_")[1])


def at(share):
    """How a wait row names `share`: nothing at 50/50 (the rows before 30/70 had rounds)."""
    return "" if share == "50_50" else " at %s" % share


def round_scenarios(tag, share, r):
    """Round `r`'s scenarios at `share`: the service alone, beside training on `tag`, beside
    training on MPS."""
    return ("decode.plain%d" % r, "decode+cnn.%s%sr%d" % (tag, share, r),
            "decode+cnn.mps%sr%d" % (share, r))


def rounds(runs, tag="vgpu", share="50_50"):
    """close17's (or close18's, close23's) rounds in one run, of this library ("vgpu"), the
    --lib2 one ("varb", close18) or the --lib3 one ("varc"), at `share`, for each round whose
    scenarios all ran: (alone p50, p50, p99, MPS p99, the loop's % of alone, a request's wait
    for the GPU in ms (its `sync`), the same beside MPS's loop)."""
    alone = loop_alone(runs)
    out = []
    for r in itertools.count(1):
        al, d, m = round_scenarios(tag, share, r)
        if al not in runs:
            return out
        a, b, t = get(runs, d, "d", "p50"), get(runs, d, "d", "p99"), get(runs, d, "t", "sps")
        mb, ap = get(runs, m, "d", "p99"), get(runs, al, "d", "p50")
        if a and b and t and mb and ap and alone:
            out.append((ap, a, b, mb, 100 * t / alone, get(runs, d, "d", "sync"),
                        get(runs, m, "d", "sync")))


def requests(runs, tag="vgpu", share="50_50"):
    """Every request's latency of the rounds `rounds` takes (those whose runs printed them):
    [(alone, beside training on `tag`, beside training on MPS)], a list of ms each."""
    out = []
    for r in itertools.count(1):
        al, d, m = round_scenarios(tag, share, r)
        if al not in runs:
            return out
        lats = [get(runs, al, "d", "lat"), get(runs, d, "d", "lat"), get(runs, m, "d", "lat")]
        if all(lats) and get(runs, d, "t", "sps"):
            out.append(tuple(lats))


def quantile(xs, f):
    """decode_service.py's quantile: the ceil(f n)-th smallest."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, math.ceil(f * len(xs)) - 1))]


def ratio_interval(xs, ys, f, n=1000):
    """A 95 % bootstrap interval of quantile(xs, f) / quantile(ys, f): each list resampled
    with replacement `n` times (a fixed seed, so one run's summary reads the same each time).
    A pooled p99 of a few hundred requests rests on its few slowest; the interval says how far
    a draw of these same requests moves it (within the sample: it does not resample rounds, so
    it leaves out how far one round differs from the next, and understates the spread)."""
    rng = random.Random(0)
    got = sorted(quantile(rng.choices(xs, k=len(xs)), f) / quantile(rng.choices(ys, k=len(ys)), f)
                 for _ in range(n))
    return got[int(0.025 * n)], got[math.ceil(0.975 * n) - 1]


def pooled_requests(all_requests, all_rounds, row, tag="vgpu", share="50_50"):
    """Target 3 over every request of every round, pooled: the p50 beside training against
    the p50 alone, the p99 against MPS's (a round's p99 of 32 requests is nearly their
    maximum, and moved 0.97-1.14x MPS's between two rounds of one library, run 114), each
    ratio with its 95 % bootstrap interval in brackets (judged on the ratio itself, as the
    target is). The training clause is the median of `all_rounds`' shares, as in `pooled`."""
    if len(all_requests) < 2:
        return
    alone, lib, mps = ([x for r in all_requests for x in r[i]] for i in range(3))
    a, ap = quantile(lib, 0.5), quantile(alone, 0.5)
    b, mb = quantile(lib, 0.99), quantile(mps, 0.99)
    t = statistics.median(x[4] for x in all_rounds) if all_rounds else 0.0
    bar = train_bar(share)
    lo50, hi50 = ratio_interval(lib, alone, 0.5)
    lo99, hi99 = ratio_interval(lib, mps, 0.99)
    row("T3 %s beside training %s, %d requests pooled" % (tag, share, len(lib)),
        "p50 %.0f (alone %.0f, %.2fx [%.2f-%.2f]), p99 %.0f (MPS %.0f, %.2fx [%.2f-%.2f]), "
        "train %.0f %%" % (a, ap, a / ap, lo50, hi50, b, mb, b / mb, lo99, hi99, t),
        "<=1.3x, <=1.0x, >=%.1f" % bar, a <= 1.3 * ap and b <= mb and t >= bar)


def wait_row(row, tag, wait):
    """The median of a request's wait for the GPU over the rounds: the steadiest figure of
    them (runs 100-101: 15.7-20.9 ms on vgpu, 2.0-2.3 on MPS)."""
    wait = [w for w in wait if w is not None]
    if wait:
        row("T3 %s: a request's wait for the GPU" % tag,
            "median %.1f ms over %d rounds (%.1f-%.1f)" % (statistics.median(wait), len(wait),
                                                           min(wait), max(wait)),
            "", None)


def pooled(all_rounds, row, tag="vgpu", share="50_50"):
    """Target 3 over every round of the runs given: the request's wait for the GPU, the
    medians of the rounds' ratios, and the ratios of the figures' medians (the service's alone
    p50 moves 0.75-1.55x between rounds a minute apart, MPS's too, so a round's own alone run
    is a noisy reference)."""
    wait_row(row, tag + at(share), [x[5] for x in all_rounds])
    if len(all_rounds) < 2:
        return
    bar = train_bar(share)
    ratios = [(a / ap, b / mb, t) for ap, a, b, mb, t, _, _ in all_rounds]
    med = [statistics.median(x) for x in zip(*ratios)]
    row("T3 %s beside training %s, median of %d rounds' ratios" % (tag, share, len(ratios)),
        "p50 %.2fx alone, p99 %.2fx MPS's, train %.0f %%" % tuple(med),
        "<=1.3x, <=1.0x, >=%.1f" % bar, med[0] <= 1.3 and med[1] <= 1.0 and med[2] >= bar)
    ap, a, b, mb, t = (statistics.median(x) for x in list(zip(*all_rounds))[:5])
    row("T3 %s beside training %s, medians of %d rounds" % (tag, share, len(ratios)),
        "p50 %.0f (alone %.0f, %.2fx), p99 %.0f (MPS %.0f, %.2fx)" % (a, ap, a / ap, b, mb, b / mb),
        "<=1.3x, <=1.0x, >=%.1f" % bar, a <= 1.3 * ap and b <= mb and t >= bar)


def main():
    rows = []

    def row(what, figures, bar, ok):
        rows.append("%-46s %-44s %-22s %s" % (what, figures, bar,
                                              "--" if ok is None else verdict(ok)))

    # Rounds by (library, share).
    all_rounds = {(tag, share): [] for share in SHARES for tag in ("vgpu", "varb", "varc")}
    all_requests = {key: [] for key in all_rounds}
    for path in sys.argv[1:]:
        if len(sys.argv) > 2:
            rows.append("# " + path)
        runs = load(path)
        checks(runs, row)
        for (tag, share), got in all_rounds.items():
            got += rounds(runs, tag, share)
            all_requests[tag, share] += requests(runs, tag, share)
    for (tag, share), got in all_rounds.items():
        pooled(got, row, tag, share)
        pooled_requests(all_requests[tag, share], got, row, tag, share)
    # MPS runs once a round, beside whichever library.
    for share in SHARES:
        wait_row(row, "mps" + at(share), [x[6] for x in all_rounds["vgpu", share]
                                          or all_rounds["varc", share]])
    for line in rows:
        print(line)
    if not rows:
        print("no checks: the run has none of the scenarios they compare")


def checks(runs, row):
    """Every check this run's scenarios allow, each a `row`."""
    # Target 1: alone, under the share, as fast as plain.
    for gap in (5, 20, 100):
        # The plain runs of this call, averaged (and the vgpu ones: a repeat ends in "b").
        ps = [x for x in (get(runs, "stream%d.plain%s" % (gap, r), "s", "us") for r in ("", "b"))
              if x]
        plain = sum(ps) / len(ps) if ps else None
        for lim in (50, 25):
            vs = [x for x in (get(runs, "stream%d.vgpu%d%s" % (gap, lim, r), "s", "us")
                              for r in ("", "b")) if x]
            v = sum(vs) / len(vs) if vs else None
            if plain and v:
                r = plain / v
                row("T1 stream %d us gaps at %d %%" % (gap, lim), "rate %.2fx plain" % r,
                    ">= 0.95x", r >= 0.95)
    # The service alone: the mean of the plain runs in this call (its host time moves ±15 %
    # between processes, runs 64-65).
    def mean(key, *scens):
        v = [x for x in (get(runs, sc, "d" if "decode" in sc else "t", key) for sc in scens) if x]
        return sum(v) / len(v) if v else None
    alone_runs = [sc for sc in runs if re.fullmatch(r"decode\.plain(b|\d)?(#\d+)?", sc)]
    p50 = mean("p50", *alone_runs)
    p99 = mean("p99", *alone_runs)
    # Each limit's runs are pooled the same way (run 134's close29 ran each twice, the second
    # NAME#2); a run without figures (a member that failed) is left out, as mean() leaves it.
    for lim in (50, 25):
        lim_runs = [sc for sc in runs if re.fullmatch(r"decode\.vgpu%d(#\d+)?" % lim, sc)]
        figs = [(get(runs, sc, "d", "p50"), get(runs, sc, "d", "p99")) for sc in lim_runs]
        figs = [(x, y) for x, y in figs if x and y]
        a = sum(x for x, _ in figs) / len(figs) if figs else None
        b = sum(y for _, y in figs) / len(figs) if figs else None
        if p50 and a and b:
            failed = len(lim_runs) - len(figs)
            each = (" (%d runs: %s)" % (len(figs), ", ".join(
                "%.2f / %.2f" % (x / p50, y / p99) for x, y in figs)) if len(figs) > 1 else "")
            each += " (%d of %d runs failed)" % (failed, len(lim_runs)) if failed else ""
            row("T1 decode alone at %d %%" % lim,
                "p50 %.2fx, p99 %.2fx plain%s" % (a / p50, b / p99, each),
                "<= 1.1x, <= 1.2x", a <= 1.1 * p50 and b <= 1.2 * p99)
    # The service's own request time alone against its period: where it takes most of it, a
    # slowdown beside training queues the requests, and the p50 (from each request's due time)
    # says how far the queue grew (run 144's slow host: 208 ms alone; beside training ~248 ms
    # a request on plain co-location and vgpu alike, p50 1.39x and 1.60x).
    req = mean("req", *alone_runs)
    period = mean("period", *alone_runs) or PERIOD_MS
    if req:
        part = req / period
        row("T3 the service alone: a request's own time",
            "%.1f ms, %.0f %% of its %.0f ms period%s"
            % (req, 100 * part, period, ": beside training, requests queue"
               if part > 0.6 else ""), "", None)
    # Target 2: the training loop alone and in pairs.
    alone = loop_alone(runs)
    for lim in (50, 25):
        v = get(runs, "cnn.vgpu%d" % lim, "t", "sps")
        if alone and v:
            share = 100 * v / alone
            row("T2 ResNet alone at %d %%" % lim, "%.1f %% of alone" % share,
                ">= %d - 2 points" % lim, share >= lim - 2)
    def pair_total(name):
        """A pair's steps/s together (None unless both members have a figure)."""
        pa, pb = (get(runs, name, m, "sps") for m in "ab")
        return pa + pb if pa and pb else None

    def plain_total(scen):
        """Plain time-slicing's pair total in `scen`'s round (close20 and close27 end the
        second and third rounds' names in "b" and "c"), else the first round's."""
        again = scen[-1] if scen[-1] in "bc" else ""
        return pair_total("cnnpair.plain" + again) or pair_total("cnnpair.plain")

    # Each pair with the bar its total must reach against plain time-slicing's in its round
    # (1.0x work-conserving); HAMi-core's and MPS's are shown, not judged.
    for scen, limits, total_bar in (("cnnpair.vgpu30_70", (30, 70), 0.95),
                                    ("cnnpair.vgpu30_70b", (30, 70), 0.95),
                                    ("cnnpair.vgpu30_70c", (30, 70), 0.95),
                                    ("cnnpair.varb30_70", (30, 70), 0.95),
                                    ("cnnpair.varb30_70b", (30, 70), 0.95),
                                    ("cnnpair.varb30_70c", (30, 70), 0.95),
                                    ("cnnpair.varc30_70", (30, 70), 0.95),
                                    ("cnnpair.varc30_70b", (30, 70), 0.95),
                                    ("cnnpair.varc30_70c", (30, 70), 0.95),
                                    ("cnnpair.vgpu50_50", (50, 50), 0.95),
                                    ("cnnpair.varb50_50", (50, 50), 0.95),
                                    ("cnnpair.vgpuwc30_70", (30, 70), 1.0),
                                    ("cnnpair.vgpuwc50_50", (50, 50), 1.0),
                                    ("cnnpair.hami30_70", (30, 70), None),
                                    ("cnnpair.mps30_70", (30, 70), None)):
        a, b = get(runs, scen, "a", "sps"), get(runs, scen, "b", "sps")
        plain = plain_total(scen)
        if not (alone and a and b and plain):
            continue
        sa, sb = 100 * a / alone, 100 * b / alone
        total = (a + b) / plain
        judged = total_bar is not None
        ok = (sa >= 0.95 * limits[0] and sb >= 0.95 * limits[1] and total >= total_bar
              if judged else None)
        row("T2 ResNet pair %s" % scen.split(".")[1],
            "%.1f / %.1f %% of alone, total %.2fx plain" % (sa, sb, total),
            "each >= 0.95 share, >= %.2fx" % total_bar if judged else "", ok)
    # What the pair's bars ask of the GPU: at 30/70 they add up to 95 % of the loop's alone
    # rate, which plain time-slicing's pair may not make (runs 116-121 and 124: 92.4-93.3 %,
    # run 132: 94.4-94.8 %); there a limited pair meets both bars only by beating plain's
    # total (it did in those runs, 1.04-1.07x) and splitting it 30/70. Shown, not judged.
    for again in ("", "b", "c"):
        plain = pair_total("cnnpair.plain" + again)
        if alone and plain:
            together = 100 * plain / alone
            row("T2 plain pair%s: the bars' reach" % again,
                "%.1f %% of alone together, 30/70 of it %.1f / %.1f" % (
                    together, 0.3 * together, 0.7 * together),
                "(bars 28.5 / 66.5)", None)
    # Target 3: the decode service beside training. close10 runs the --lib2 variant ("varb")
    # beside this library instead of MPS: without an MPS run the p99 clause is not judged.
    for lim in SHARES:
        mps = "decode+cnn.mps%s" % lim
        mb = get(runs, mps, "d", "p99")
        for d in builds("decode+cnn.{tag}%s{r}" % lim):
            a, b = get(runs, d, "d", "p50"), get(runs, d, "d", "p99")
            t = get(runs, d, "t", "sps")
            if not (a and p50 and alone and t):
                continue
            name = "T3 decode beside training %s" % d.split(".")[1]
            ok = a <= 1.3 * p50 and 100 * t / alone >= train_bar(lim)
            if mb:
                row(name, "p50 %.2fx alone, p99 %.0f (MPS %.0f), train %.0f %%%s"
                    % (a / p50, b, mb, 100 * t / alone,
                       late(runs[d].get("t"), runs[mps].get("t"))),
                    "<=1.3x, <=MPS, >=0.95 share", ok and b <= mb)
            else:
                row(name, "p50 %.2fx alone, p99 %.0f, train %.0f %%" % (a / p50, b, 100 * t / alone),
                    "<=1.3x, >=0.95 share (no MPS run)", ok)
    # Target 3 in rounds (close17): each round's decode beside training against that round's
    # alone run and MPS run, on this library and on each variant that ran; the pooled figures
    # over every run given follow at the end.
    for share in SHARES:
        bar = train_bar(share)
        for tag in ("vgpu", "varb", "varc"):
            for r, (ap, a, b, mb, t, _, _) in enumerate(rounds(runs, tag, share), 1):
                row("T3 %s beside training %s round %d" % (tag, share, r),
                    "p50 %.2fx alone, p99 %.2fx MPS's, train %.0f %%" % (a / ap, b / mb, t),
                    "<=1.3x, <=1.0x, >=%.1f" % bar, a <= 1.3 * ap and b <= mb and t >= bar)
    # The p99 clause against its baseline: the service alone against MPS's service beside
    # training, each round (on the H100 the service alone had a p99 1.04-1.35x MPS's in runs
    # 127-129: MPS's client kept shorter host gaps between tokens than the service alone).
    for share in SHARES:
        for r in itertools.count(1):
            al, _, m = round_scenarios("vgpu", share, r)
            if al not in runs:
                break
            a99, m99 = get(runs, al, "d", "p99"), get(runs, m, "d", "p99")
            if a99 and m99:
                row("T3 alone p99 against MPS's %s r%d" % (share, r),
                    "the service alone %.0f ms, %.2fx MPS's %.0f" % (a99, a99 / m99, m99),
                    "(the service alone)", None)
    # The service alone two more ways (close28): on MPS with no neighbour, and plain beside a
    # CPU-bound process with no GPU work (a busy core), against the service alone plain:
    # which of the two makes MPS's service beside training faster than the service alone.
    for r in itertools.count(1):
        al = "decode.plain%d" % r
        if al not in runs:
            break
        for other, what in (("decode.mps%d" % r, "on MPS"), ("decode.spin%d" % r,
                                                            "beside a busy core")):
            o50, o99 = get(runs, other, "d", "p50"), get(runs, other, "d", "p99")
            a50, a99 = get(runs, al, "d", "p50"), get(runs, al, "d", "p99")
            if o50 and o99 and a50 and a99:
                gaps = [(runs[x].get("d") or {}).get("gap") for x in (other, al)]
                gap = (", host gap p50 %.2f ms (alone %.2f)" % (gaps[0][1], gaps[1][1])
                       if all(gaps) else "")
                row("T3 alone %s r%d" % (what, r),
                    "p50 %.2fx, p99 %.2fx plain alone%s" % (o50 / a50, o99 / a99, gap),
                    "(the service alone)", None)
    # Target 3, work-conserving: the loop gets at least MPS's throughput, the service keeps
    # its bars.
    for tag, lim in (("vgpu", "50_50"), ("vgpu", "30_70"), ("varc", "50_50")):
        d = "decode+cnn.%swc%s" % (tag, lim)
        # MPS's run at that share: close2's, or the first round's (close30 names it ...r1).
        mps = next((m for m in ("decode+cnn.mps%s" % lim, "decode+cnn.mps%sr1" % lim)
                    if m in runs), None)
        a, b = get(runs, d, "d", "p50"), get(runs, d, "d", "p99")
        mb, mt = get(runs, mps, "d", "p99"), get(runs, mps, "t", "sps")
        t = get(runs, d, "t", "sps")
        if a and p50 and mb and mt and t:
            ok = a <= 1.3 * p50 and b <= mb and t >= mt
            mode = "work-conserving" if tag == "vgpu" else tag + " work-conserving"
            row("T3 %s beside training %s" % (mode, lim),
                "p50 %.2fx, p99 %.0f (MPS %.0f), %.1f sps (MPS %.1f)" % (a / p50, b, mb, t, mt),
                "<=1.3x, <=MPS, >=MPS", ok)
    # Target 3, the stream beside a saturating loop at 50/50.
    # (close10 runs it on both libraries, twice each: "varb" is the --lib2 variant.)
    # The loop counts its 1 s windows from its own first launch, about 2 s before the common
    # start (the C members' fixed start), and runs a second past the stream's end: its first
    # two windows (alone, then partly alone) and its last are left out of "while both ran".
    # Alone, plain co-location's loop runs unlimited and a limited one at its share, which the
    # window's figure mixes in.
    def both_ran(scen):
        w = get(runs, scen, "l", "win")
        return sum(w[2:-1]) / len(w[2:-1]) if w and len(w) > 3 else None
    for loop in ("loop11", "loop50us"):
        sp = get(runs, "stream5+%s.plain" % loop, "s", "us")
        la = get(runs, "%s.plain" % loop, "l", "kps")
        pb = both_ran("stream5+%s.plain" % loop)
        for scen in builds("stream5+%s.{tag}50_50{r}" % loop):
            sv, lv = get(runs, scen, "s", "us"), get(runs, scen, "l", "kps")
            vb = both_ran(scen)
            if sp and sv and la and lv:
                both = (" (%.1f %% while both ran, plain co-location %.1f)" % (100 * vb / la, 100 * pb / la)
                        if vb and pb else "")
                row("T3 stream beside %s %s" % (loop, scen.split(".")[1]),
                    "%.2f us (plain co-location %.2f), loop %.1f %%%s" % (sv, sp, 100 * lv / la, both),
                    "<= plain, loop >= 47.5 %", sv <= sp and lv >= 0.475 * la)
    # Target 4: priorities without limits. The service's share of GPU time is its CUPTI time a
    # request over its period (the run's, else 250 ms): measured in the run where it has
    # `decode.profile`, otherwise run 64's 16.54 ms (an H200).
    prio = ("decode+cnn.prio", "decode+cnn.priob", "decode+cnn.varbprio",
            "decode+cnn.varbpriob", "decode+cnn.varcprio", "decode+cnn.varcpriob")
    gpu_ms = get(runs, "decode.profile", "d", "gpu")
    if any(d in runs for d in prio):
        row("T4 the service's GPU time a request",
            "%.2f ms by CUPTI in this run" % gpu_ms if gpu_ms else "16.54 ms (run 64, an H200)",
            "(sets the training bar)", None)
    t4_bar = 0.9 * alone * (1 - (gpu_ms or 16.54) / period) if alone else None
    for d in prio:
        a, b, t = get(runs, d, "d", "p50"), get(runs, d, "d", "p99"), get(runs, d, "t", "sps")
        if a and p99 and t and alone:
            row("T4 %s: decode high, training low" % d.split(".")[1],
                "p99 %.2fx alone, training %.1f sps" % (b / p99, t),
                "<= 1.2x, >= %.1f sps" % t4_bar, b <= 1.2 * p99 and t >= t4_bar)
    # The training bar's reach: plain co-location (no library, no priorities) in a run with a
    # target-4 round, shown, not judged (on the H100 it left the loop 80-86 % of its alone rate
    # against a bar of 84 %, runs 104, 122, 129).
    if any(d in runs for d in prio):
        for d in ("decode+cnn.plain", "decode+cnn.plainb"):
            b, t = get(runs, d, "d", "p99"), get(runs, d, "t", "sps")
            if b and p99 and t and alone:
                row("T4 %s: plain co-location" % d.split(".")[1],
                    "p99 %.2fx alone, training %.1f sps" % (b / p99, t),
                    "(>= %.1f sps: the bar's reach)" % t4_bar, None)
    # Keep: saturating loops in pairs, each within 2 points of its share of its alone rate.
    # This library's and the variant's ("varb"), a repeat ending in "b".
    l11, l50 = get(runs, "loop11.plain", "l", "kps"), get(runs, "loop50us.plain", "l", "kps")
    # Each member labelled a, b, c... as (its loop's alone rate, its share); sets of 11 ms loops
    # from close12.
    sets = [("loop11pair.{tag}30_70{r}", [(l11, 30), (l11, 70)]),
            ("loop11pair.{tag}50_50{r}", [(l11, 50), (l11, 50)]),
            ("loop11+loop50us.{tag}50_50{r}", [(l11, 50), (l50, 50)])]
    sets += [("loop11set.{tag}%s{r}" % "_".join(map(str, sh)), [(l11, x) for x in sh])
             for sh in ((20, 30, 50), (25,) * 4, (20,) * 5)]
    for form, members in sets:
        for scen in builds(form):
            got = [get(runs, scen, "abcde"[i], "kps") for i in range(len(members))]
            if all(got) and all(rate for rate, _ in members):
                pct = [100 * k / rate for k, (rate, _) in zip(got, members)]
                row("Keep %s" % scen, "%s %% of alone" % " / ".join("%.1f" % x for x in pct),
                    "each within 2 points",
                    all(abs(x - share) <= 2 for x, (_, share) in zip(pct, members)))
    # Target 5: 64 containers at 10 % (close11, close12, crowd): every member progresses.
    for tag in ("vgpu10", "varb10"):
        scen = "crowd64." + tag
        lo, hi, starved = (get(runs, scen, "all", k) for k in ("min", "max", "starved"))
        if lo is not None and starved is not None:
            row("T5 %s" % scen, "%.0f-%.0f kernels/s, %d starved" % (lo, hi or 0, starved),
                "none starved", starved == 0 and lo > 0)


if __name__ == "__main__":
    main()
