"""Benchmark: re-analysis of the published data on a fresh clone, as the README says it:

    git clone <repo> c && cd c         (with .venv linked in, as scripts/setup.sh would make it)
    .venv/bin/dvc pull
    .venv/bin/snakemake --cores 1 all

Trial jobs are forbidden (LATENCY_DIVIDE_FORBID_TRIALS=1): the run fails if it would measure.
Prints the wall clock of each step per run and the medians over the runs, and where the time of
`snakemake all` goes: the DAG (a dry run of the same target, timed on its own), the tables jobs
(parsing and checking every trial; with the cost per trial), the figures jobs and the percentile
jobs. The goal (issue 24) is 60 s or less for pull + all on a 2-core machine.

    .venv/bin/python bench/bench_reanalysis.py [--runs 3] [--repo .]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from latency_divide.trial import packs

ROOT = Path(__file__).resolve().parents[1]


def timed(argv: list[str], cwd: Path, env: dict) -> tuple[float, str]:
    t0 = time.monotonic()
    p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    dt = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return dt, p.stdout + p.stderr


def rule_times(log: str) -> dict[str, float]:
    """Seconds per rule from Snakemake's '[timestamp] ... rule X:' / 'Finished jobid' lines."""
    out: dict[str, float] = {}
    current, start = None, None
    stamp = None
    for line in log.splitlines():
        m = re.match(r"\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]", line)
        if m:
            stamp = time.mktime(time.strptime(m.group(1), "%a %b %d %H:%M:%S %Y"))
            continue
        m = re.match(r"\s*(?:local)?rule (\w+):", line)
        if m:
            current, start = m.group(1), stamp
            continue
        m = re.match(r"Finished jobid: \d+ \(Rule: (\w+)\)", line)
        if m and current == m.group(1) and start is not None and stamp is not None:
            out[current] = out.get(current, 0.0) + stamp - start
    return out


def figure_times(clone: Path) -> list[tuple[str, float]]:
    """(figure, seconds) from the figures jobs' logs: since issue 59 each figure's line ends
    with its own time ("(1.23 s)"); before, a line is stamped when it is written, so a figure's
    time is the gap to the line before it (the job's first figure has no line before it and is
    left out: its time includes the imports)."""
    out = []
    for log in ("logs/figures/figures.log", "logs/companions/figures.log"):
        f = clone / log
        if not f.is_file():
            continue
        prev = None
        for line in f.read_text().splitlines():
            m = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) (\S+\.pdf):", line)
            if not m:
                continue
            own = re.search(r"\((\d+\.\d+) s\)$", line)
            if own:
                out.append((m.group(3).removeprefix("results/"), float(own.group(1))))
                continue
            t = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1e3
            if prev is not None:
                out.append((m.group(3).removeprefix("results/"), t - prev))
            prev = t
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--repo", default=str(ROOT), help="repository to clone (default: this one)")
    ap.add_argument("--own-src", action="store_true",
                    help="run the clone's own package (PYTHONPATH=<clone>/src), not the one "
                         "the shared .venv installs: to time another branch")
    args = ap.parse_args()
    env = {**os.environ, "LATENCY_DIVIDE_FORBID_TRIALS": "1", "DVC_NO_ANALYTICS": "1"}
    pulls, alls, totals = [], [], []
    med = statistics.median
    for i in range(1, args.runs + 1):
        with tempfile.TemporaryDirectory(prefix="ld-bench-reanalysis-") as tmp:
            clone = Path(tmp) / "c"
            subprocess.run(["git", "clone", "-q", args.repo, str(clone)], check=True)
            (clone / ".venv").symlink_to(ROOT / ".venv")
            if args.own_src:
                env["PYTHONPATH"] = str(clone / "src")
            t_pull, _ = timed([".venv/bin/dvc", "pull", "-q"], clone, env)
            t_dag, _ = timed([".venv/bin/snakemake", "--cores", "1", "-n", "all"], clone, env)
            t_all, log = timed([".venv/bin/snakemake", "--cores", "1", "all"], clone, env)
            if re.search(r"^\s*trial\s+\d+", log, re.M):
                sys.exit("the run scheduled trials: re-analysis is broken")
            n = len(list((clone / "results/raw").glob("def-*/*/*/*/rep*/meta.json"))) + sum(
                len(packs.read_index(a)["trials"])  # plain or compressed (trial.packs)
                for d in (clone / "results/raw").glob("def-*") for a in packs.archives(d))
            # the trials the tables jobs parsed: a companion not complete on disk is left out
            parsed = sum(pq.read_metadata(t).num_rows
                         for t in (clone / "results").glob("**/tables/trials.parquet"))
            rules = rule_times(log)
            per_rule = ", ".join(f"{k} {v:.0f} s" for k, v in rules.items())
            split = {kind: sum(v for k, v in rules.items() if kind in k)
                     for kind in ("tables", "figures", "percentiles")}
            print(f"run {i}: {n} trials on disk, {parsed} analysed; dvc pull {t_pull:.1f} s, "
                  f"snakemake --cores 1 all {t_all:.1f} s, total {t_pull + t_all:.1f} s",
                  flush=True)
            print(f"  split: DAG (dry run) {t_dag:.1f} s, tables {split['tables']:.0f} s "
                  f"({1000 * split['tables'] / max(parsed, 1):.1f} ms a trial analysed), figures "
                  f"{split['figures']:.0f} s, percentiles {split['percentiles']:.0f} s", flush=True)
            print(f"  per rule: {per_rule}", flush=True)
            figs = sorted(figure_times(clone), key=lambda x: -x[1])
            if figs:
                print(f"  figures: {len(figs)} timed, median {med([x[1] for x in figs]):.1f} s; "
                      "dearest: " + ", ".join(f"{n} {d:.1f} s" for n, d in figs[:6]), flush=True)
            pulls.append(t_pull)
            alls.append(t_all)
            totals.append(t_pull + t_all)
            shutil.rmtree(clone, ignore_errors=True)
    print(f"median of {args.runs}: dvc pull {med(pulls):.1f} s, snakemake --cores 1 all "
          f"{med(alls):.1f} s, total {med(totals):.1f} s (goal <= 60 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
