#!/usr/bin/env python3
"""Builds docs/GPU-RESULTS.md (the table of current GPU figures) from the run files.

Each run is one file, docs/gpu-results/run-NN.md, that starts with a front-matter block:

    ---
    run: 45                       # or [36, 37, 38] for one file that records several runs
    date: 2026-12-02
    library: "abc1234 (`make dist`, `.gpu/h4`)"
    figures:                      # optional: what this run measured, for the table
      - metric: latency.alone-50  # <group>.<name>; the groups are GROUPS below
        what: "Light service alone under 50 %: p50, p99 against plain"
        value: "1.00× / 0.99×"
    ---
    # 2026-12-02, run 45: the title of the run

Strings are written as JSON strings (a quoted string is also valid YAML). The table takes, for
each metric, the figure of the highest-numbered run that lists it, and names the earlier runs
that list it as the ones it supersedes.

    python3 scripts/gpu-results-table.py          # rewrite docs/GPU-RESULTS.md
    python3 scripts/gpu-results-table.py --check  # exit 1 if it is not what the runs give

Python 3 standard library only.
"""

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "docs" / "gpu-results"
TABLE = ROOT / "docs" / "GPU-RESULTS.md"

# Metric groups, in the table's order: id prefix -> heading.
GROUPS = [
    ("memory", "Memory limit"),
    ("overhead", "Overhead"),
    ("alone", "Compute limit: one container alone"),
    ("shares", "Compute limit: containers together"),
    ("latency", "Compute limit: a latency-sensitive service"),
    ("frameworks", "Compute limit under frameworks"),
    ("hami", "HAMi's protocol"),
    ("tools", "The `vgpu` command"),
    ("multi", "Two GPUs"),
    ("compat", "Compatibility: CUDA tools under vgpu"),
]
FIGURE_KEYS = ("metric", "what", "value")
TOP_KEYS = ("run", "date", "library", "figures")


class Bad(Exception):
    pass


def scalar(text, where):
    text = text.strip()
    if text.startswith(("\"", "[")):
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise Bad(f"{where}: {e}") from None
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return text


def parse(path):
    """The front matter of one run file, checked; plus its title line."""
    lines = path.read_text(encoding="utf-8").split("\n")
    if not lines or lines[0] != "---":
        raise Bad(f"{path.name}: does not start with a '---' front-matter line")
    try:
        end = lines.index("---", 1)
    except ValueError:
        raise Bad(f"{path.name}: the front matter has no closing '---'") from None
    meta, figures, current = {}, None, None
    for n, line in enumerate(lines[1:end], start=2):
        where = f"{path.name}:{n}"
        if not line.strip():
            continue
        if figures is not None and line.startswith("  "):
            m = re.fullmatch(r"  (- |  )(\w+): (.*)", line)
            if not m:
                raise Bad(f"{where}: expected '  - key: value' or '    key: value'")
            if m.group(1) == "- ":
                current = {}
                figures.append(current)
            elif current is None:
                raise Bad(f"{where}: a figure's field before its '- '")
            key = m.group(2)
            if key not in FIGURE_KEYS:
                raise Bad(f"{where}: unknown figure field {key!r} (known: {', '.join(FIGURE_KEYS)})")
            if key in current:
                raise Bad(f"{where}: {key!r} twice in one figure")
            current[key] = scalar(m.group(3), where)
            continue
        m = re.fullmatch(r"(\w+):(?: (.*))?", line)
        if not m or m.group(1) not in TOP_KEYS:
            raise Bad(f"{where}: expected one of {', '.join(TOP_KEYS)} as 'key: value'")
        key = m.group(1)
        if key in meta:
            raise Bad(f"{where}: {key!r} twice")
        if key == "figures":
            if m.group(2):
                raise Bad(f"{where}: 'figures:' takes its items on the lines below")
            figures = meta["figures"] = []
        else:
            figures = None
            meta[key] = scalar(m.group(2) or "", where)
    for key in ("run", "date", "library"):
        if key not in meta:
            raise Bad(f"{path.name}: no {key!r} in the front matter")
    runs = meta["run"] if isinstance(meta["run"], list) else [meta["run"]]
    if not runs or not all(isinstance(r, int) and r > 0 for r in runs):
        raise Bad(f"{path.name}: 'run' must be a run number or a list of them")
    expected = f"run-{runs[0]:02d}.md" if len(runs) == 1 else f"run-{runs[0]:02d}-{runs[-1]:02d}.md"
    if path.name != expected:
        raise Bad(f"{path.name}: a file for {runs} must be named {expected}")
    if not re.fullmatch(r"\d{4}-\d\d-\d\d", str(meta["date"])):
        raise Bad(f"{path.name}: 'date' must be YYYY-MM-DD")
    groups = {g for g, _ in GROUPS}
    seen = set()
    for f in meta.get("figures", []):
        for key in FIGURE_KEYS:
            if not isinstance(f.get(key), str) or not f[key].strip():
                raise Bad(f"{path.name}: a figure without a {key!r} string: {f}")
        if f["metric"].split(".", 1)[0] not in groups or "." not in f["metric"]:
            raise Bad(f"{path.name}: metric {f['metric']!r} is not '<group>.<name>' with a group of "
                      f"{', '.join(sorted(groups))} (add a group to GROUPS in {Path(__file__).name})")
        if f["metric"] in seen:
            raise Bad(f"{path.name}: metric {f['metric']!r} twice")
        seen.add(f["metric"])
    title = next((l for l in lines[end + 1:] if l.startswith("# ")), None)
    if title is None:
        raise Bad(f"{path.name}: no '# ' title line after the front matter")
    meta["runs"], meta["title"], meta["file"] = runs, title[2:].strip(), path.name
    return meta


def cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def link(run, by_run):
    return f"[{run}](gpu-results/{by_run[run]['file']})"


def build():
    files = sorted(RUNS.glob("run-*.md"))
    if not files:
        raise Bad(f"no run files in {RUNS}")
    by_run = {}
    for path in files:
        meta = parse(path)
        for r in meta["runs"]:
            if r in by_run:
                raise Bad(f"run {r} is in both {by_run[r]['file']} and {meta['file']}")
            by_run[r] = meta
    # metric -> [(run, position, figure)], oldest first
    history = {}
    for r in sorted(by_run):
        meta = by_run[r]
        if meta["runs"][0] != r:
            continue
        for i, f in enumerate(meta.get("figures", [])):
            history.setdefault(f["metric"], []).append((r, i, f))

    out = [
        "# GPU results",
        "",
        "<!-- Generated by scripts/gpu-results-table.py from docs/gpu-results/run-*.md; edit those and",
        "     run the script (crates/vgpu-tests/tests/docs.rs checks that this file is up to date). -->",
        "",
        "What vgpu's runs on a real GPU show today: for each figure, the latest run that measured it,",
        "with a link to that run's command, output and library, and the earlier runs it supersedes.",
        "Every run has its own file in [gpu-results/](gpu-results/README.md), which describes the",
        "machine and how to add a run.",
        "",
        "## Current figures",
    ]
    if not history:
        out += ["", "No run lists a figure yet."]
    for group, heading in GROUPS:
        metrics = sorted((m for m in history if m.split(".", 1)[0] == group),
                         key=lambda m: history[m][0][:2])
        if not metrics:
            continue
        out += ["", f"### {heading}", "", "| figure | value | run | supersedes |", "| --- | --- | --- | --- |"]
        for m in metrics:
            r, _, f = history[m][-1]
            earlier = ", ".join(link(e, by_run) for e, _, _ in reversed(history[m][:-1])) or "—"
            out.append(f"| {cell(f['what'])} | {cell(f['value'])} | {link(r, by_run)} | {earlier} |")
    out += ["", "## Every run", "", "| run | date | library | what it ran |", "| --- | --- | --- | --- |"]
    for r in sorted(by_run):
        meta = by_run[r]
        title = re.sub(r"^\d{4}-\d\d-\d\d, run \d+: ", "", meta["title"])
        out.append(f"| {link(r, by_run)} | {meta['date']} | {cell(meta['library'])} | {cell(title)} |")
    return "\n".join(out) + "\n"


def main(argv):
    check = argv[1:] == ["--check"]
    if argv[1:] and not check:
        print(f"usage: {argv[0]} [--check]", file=sys.stderr)
        return 2
    try:
        text = build()
    except Bad as e:
        print(f"gpu-results-table: {e}", file=sys.stderr)
        return 1
    if check:
        old = TABLE.read_text(encoding="utf-8") if TABLE.exists() else ""
        if old != text:
            print(f"gpu-results-table: {TABLE.relative_to(ROOT)} is not what the run files give; "
                  f"run python3 scripts/gpu-results-table.py", file=sys.stderr)
            return 1
        print(f"gpu-results-table: {TABLE.relative_to(ROOT)} is up to date")
        return 0
    TABLE.write_text(text, encoding="utf-8")
    print(f"gpu-results-table: wrote {TABLE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
