"""Benchmark: parse and aggregate a full sweep (304 trials of 60 s) into the tables.

The sweep is made by replicating one real trial directory (a 60-s trial made by
``latency-divide trial``) into a temporary directory 304 times: 38 households (the paper's
set, config/config.yaml) x 2 directions x 4 variants. Each copy keeps the real logs byte for
byte; only meta.json's keys (household, direction, variant, repetition) are rewritten so the
copies are distinct trials. Timed: ``tables.collect`` (parse every trial, derive its row and
time series) + ``tables.summary`` + writing all Parquet tables; the median of --runs runs.

    .venv/bin/python bench/bench_analysis.py --source results/raw/9254/downlink/cubic/rep1
    .venv/bin/python bench/bench_analysis.py            # no source: runs one 60-s trial first
                                                        # (root, target/release/tquic-perf)

Budget: at most 20 s per run on the 2-core development machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from latency_divide.analysis.tables import build_tables

REPO = Path(__file__).resolve().parents[1]
BUDGET_S = 20.0
DIRECTIONS = ("uplink", "downlink")
VARIANTS = [
    {"name": "cubic", "cc": "cubic", "delta": None},
    {"name": "copa-0.2", "cc": "copa", "delta": 0.2},
    {"name": "copa-0.5", "cc": "copa", "delta": 0.5},
    {"name": "copa-0.8", "cc": "copa", "delta": 0.8},
]


def cpu_s() -> float:
    """User + system CPU seconds of this process and its reaped worker processes."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def paper_households() -> list[tuple[int, str]]:
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    return [(int(i), b["name"]) for b in cfg["households"]["buckets"] for i in b["ids"]]


def make_source(tmp: Path) -> Path:
    """One real 60-s trial (household 9254, downlink, cubic)."""
    cli = Path(sys.executable).with_name("latency-divide")
    out = tmp / "source"
    print("bench: no --source given; running one real 60-s trial (household 9254, downlink, "
          "cubic) ...", flush=True)
    subprocess.run([str(cli), "trial", "9254", "--direction", "downlink", "--cc", "cubic",
                    "--duration", "60", "--out", str(out)], check=True)
    return out / "9254" / "downlink" / "cubic" / "rep1"


def replicate(source: Path, root: Path) -> list[Path]:
    meta = json.loads((source / "meta.json").read_text())
    dirs = []
    for hh, bucket in paper_households():
        for direction in DIRECTIONS:
            for v in VARIANTS:
                d = root / str(hh) / direction / v["name"] / "rep1"
                shutil.copytree(source, d)
                m = dict(meta)
                m["household"] = {**meta["household"], "unit_id": hh, "price_bucket": bucket}
                m["direction"] = direction
                m["variant"] = v
                m["repetition"] = 1
                m["trial_id"] = f"{hh}/{direction}/{v['name']}/rep1"
                (d / "meta.json").write_text(json.dumps(m))
                dirs.append(d)
    return dirs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, help="a real 60-s trial directory to replicate")
    ap.add_argument("--raw", type=Path, help="a real sweep's raw directory (e.g. results/raw "
                    "after `dvc pull`): time it as is instead of replicating one trial")
    ap.add_argument("--runs", type=int, default=3, help="timed runs (median reported)")
    ap.add_argument("--jobs", type=int, default=2,
                    help="worker processes (default 2, as the workflow's analysis rule)")
    a = ap.parse_args(argv)
    if a.runs < 1 or a.jobs < 1:
        ap.error(f"--runs and --jobs must be >= 1, got {a.runs}, {a.jobs}")

    with tempfile.TemporaryDirectory(prefix="ld-bench-analysis-") as tmp:
        tmp = Path(tmp)
        if a.raw:
            dirs = sorted(p.parent for p in a.raw.rglob("meta.json"))
            size = sum(f.stat().st_size for f in a.raw.rglob("*") if f.is_file())
            print(f"sweep: {len(dirs)} real trials under {a.raw} ({size / 1e6:.1f} MB on disk)")
        else:
            source = a.source or make_source(tmp)
            if not (source / "meta.json").is_file():
                ap.error(f"--source {source} is not a trial directory (no meta.json)")
            src_meta = json.loads((source / "meta.json").read_text())
            dirs = replicate(source, tmp / "raw")
            size = sum(f.stat().st_size for f in (tmp / "raw").rglob("*") if f.is_file())
            print(f"sweep: {len(dirs)} trials replicated from {source} "
                  f"({src_meta['duration_s']:g} s transfer, {size / 1e6:.1f} MB on disk) "
                  f"into a temporary directory")
        times, cpu = [], []
        for i in range(a.runs):
            t0, c0 = time.perf_counter(), cpu_s()
            t = build_tables(dirs, tmp / f"tables{i}", jobs=a.jobs)
            times.append(time.perf_counter() - t0)
            cpu.append(cpu_s() - c0)
            print(f"run {i + 1}: {times[-1]:.2f} s wall, {cpu[-1]:.2f} s CPU (with workers) "
                  f"({len(t.trials)} trials, {len(t.ping)} ping, {len(t.queue)} queue, "
                  f"{len(t.throughput)} throughput rows)", flush=True)
        med = statistics.median(times)
        print(f"median parse+aggregate+write, {a.jobs} job(s), {a.runs} runs: {med:.2f} s wall "
              f"(budget {BUDGET_S:.0f} s: {'OK' if med <= BUDGET_S else 'OVER'}); "
              f"{1000 * med / len(dirs):.1f} ms per trial; median CPU {statistics.median(cpu):.2f} s; "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        return 0 if med <= BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
