"""The verdicts of run-compat.sh: OUT/compat-table.md, one row per case and mode.

    python3 summarize_compat.py OUT --limit-bytes N --sm PCT

Reads OUT/runs.tsv (case, mode, exit status or `budget`/`missing`, seconds[, reason]) and
OUT/logs/CASE.MODE.log (the run's output, with its `RESULT {json}` or `SKIP why` line) and
CASE.MODE.status (`vgpu status --json` of the run's region). A run passes when:
  * it exited 0 (77 with a SKIP line is a skip; 124/137 is a timeout: a hang) and printed
    RESULT;
  * plain: that is all (it is the reference);
  * under vgpu: its checksum is the plain run's (same result), and the limit is visible:
    memory: the region's limit is N and vgpu charged something (peak > 0), and the stack's
    own total (RESULT's `total`, JAX's `bytes_limit`) is N, at most N for JAX; SM: the
    region's SM limit is PCT and vgpu counted launches.
Tool cases have their own checks: compute-sanitizer reports 0 errors, ncu no ==ERROR==,
nvml-agree says `agree` in every mode, mps ran a server.
"""
import argparse
import json
import os
import re
import sys


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def result_of(log):
    # The program's line, wherever it starts: a debugger's own messages share the terminal
    # (cuda-gdb printed "[RESULT {...}" with its "[Thread ... exited]" cut around it).
    m = re.search(r"RESULT (\{[^\n]*?\})", log)
    if not m:
        return None
    try:
        return json.loads(m.group(1))
    except ValueError:
        return None


def skip_of(log):
    m = re.search(r"^SKIP (.*)$", log, re.M)
    return m.group(1) if m else None


def last_lines(log, n=2):
    lines = [l.strip() for l in log.splitlines() if l.strip()]
    return " / ".join(lines[-n:])[:200]


def status_of(path):
    try:
        s = json.loads(read(path))
        return s["devices"][0] if s.get("devices") else {}
    except (ValueError, KeyError, TypeError):
        return None


def tool_check(case, log):
    """A tool case's own verdict on its output (None: fine)."""
    if case == "compute-sanitizer" and not re.search(r"ERROR SUMMARY: 0 errors", log):
        return "compute-sanitizer reported errors (or no summary)"
    if case == "ncu" and "==ERROR==" in log:
        return "ncu: " + next(l for l in log.splitlines() if "==ERROR==" in l)[:160]
    return None


def verdict(case, mode, rc, log, status, plain, args, out):
    if rc == "budget":
        return "skip", "time budget used"
    if rc == "missing":
        return "skip", None  # the reason is in runs.tsv
    rc = int(rc)
    if rc == 77 or (rc == 0 and skip_of(log) and not result_of(log)):
        return "skip", skip_of(log) or "skipped"
    if rc in (124, 137):
        return "fail", f"timeout (hang?) after the case's limit; last: {last_lines(log)}"
    if rc != 0:
        return "fail", f"exit {rc}: {last_lines(log)}"
    res = result_of(log)
    if res is None:
        return "fail", f"no RESULT line: {last_lines(log)}"
    bad = tool_check(case, log)
    if bad:
        return "fail", bad
    if case == "nvml-agree" and not res.get("agree"):
        return "fail", (
            f"torch free/total {res.get('torch_free')}/{res.get('torch_total')} vs NVML "
            f"{res.get('nvml_free')}/{res.get('nvml_total')}"
        )
    if case == "mps" and not re.search(r"\d", read(os.path.join(out, "logs", "mps.servers"))):
        return "fail", "no MPS server ran (get_server_list empty)"
    if mode == "plain":
        return "pass", f"checksum {res.get('checksum')}"
    notes = []
    if plain is None:
        notes.append("no plain result to compare with")
    elif res.get("checksum") != plain.get("checksum"):
        return "fail", f"checksum {res.get('checksum')} != plain {plain.get('checksum')}"
    else:
        notes.append("same checksum")
    n = args.limit_bytes
    if status is None:
        notes.append("region not read (no vgpu binary?)")
    elif mode == "mem":
        if status.get("limit") != n:
            return "fail", f"the region's limit is {status.get('limit')}, not {n}"
        if not status.get("peak"):
            return "fail", "vgpu charged nothing (peak 0): the allocations went around it"
        notes.append(f"region limit {n >> 20} MiB, peak {status['peak'] >> 20} MiB")
    elif mode == "sm":
        if status.get("sm_limit") != args.sm:
            return "fail", f"the region's SM limit is {status.get('sm_limit')}, not {args.sm}"
        if not status.get("launches"):
            return "fail", "vgpu counted no launch: the kernels went around it"
        notes.append(
            f"SM {args.sm}%, {status['launches']} launches, "
            f"throttled {(status.get('throttled_ns') or 0) / 1e9:.2f} s"
        )
    if mode == "mem":
        total = res.get("total")
        if total is not None:
            if total != n:
                return "fail", f"the stack sees {total} bytes in total, not the {n} limit"
            notes.append("the stack sees the limit")
        bl = res.get("bytes_limit")
        if bl is not None:
            if bl > n:
                return "fail", f"JAX's bytes_limit {bl} is above the {n} limit"
            notes.append(f"JAX bytes_limit {bl >> 20} MiB")
    return "pass", "; ".join(notes)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--limit-bytes", type=int, required=True)
    ap.add_argument("--sm", type=int, required=True)
    args = ap.parse_args()
    rows, plain = [], {}
    for line in read(os.path.join(args.out, "runs.tsv")).splitlines():
        f = line.split("\t")
        if len(f) < 4:
            continue
        case, mode, rc, secs = f[:4]
        reason = f[4] if len(f) > 4 else None
        name = f"{case}.{mode}"
        log = read(os.path.join(args.out, "logs", name + ".log"))
        status = status_of(os.path.join(args.out, "logs", name + ".status"))
        v, why = verdict(case, mode, rc, log, status, plain.get(case), args, args.out)
        if mode == "plain" and v == "pass":
            plain[case] = result_of(log)
        rows.append((case, mode, v, secs, reason or why or ""))
    counts = {k: sum(1 for r in rows if r[2] == k) for k in ("pass", "fail", "skip")}
    table = [
        f"Memory limit {args.limit_bytes >> 20} MiB, SM limit {args.sm} %: "
        f"{counts['pass']} pass, {counts['fail']} fail, {counts['skip']} skip.",
        "",
        "| case | mode | result | s | detail |",
        "| --- | --- | --- | ---: | --- |",
    ]
    for case, mode, v, secs, why in rows:
        why = why.replace("|", "\\|")
        table.append(f"| {case} | {mode} | {v} | {secs} | {why} |")
    text = "\n".join(table) + "\n"
    with open(os.path.join(args.out, "compat-table.md"), "w") as f:
        f.write(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
