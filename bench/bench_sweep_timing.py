#!/usr/bin/env python3
"""Where a sweep's wall clock went: job start-up, setup, idle baseline, transfer, tail,
teardown, and the slot time between one trial's end and the next job's start.

Reads the trials' meta.json under a raw directory (default results/raw), so it reports on a
sweep that already ran, e.g. after `make all CORES=10`:

    .venv/bin/python bench/bench_sweep_timing.py results/raw --slots 10

Older trial metadata (before timing.process_started_unix) has no job start-up figure; raw
data pulled by DVC has no file times, so the meta.json write time is n/a there.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from latency_divide.ops.sweeptiming import format_report, sweep_timing


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("raw", nargs="?", default="results/raw", help="raw directory of a sweep")
    ap.add_argument("--slots", type=int, help="N of --cores N (default: most seen at once)")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON too")
    a = ap.parse_args()
    try:
        s = sweep_timing(Path(a.raw), a.slots)
    except FileNotFoundError as e:
        print(f"bench_sweep_timing: {e}", file=sys.stderr)
        return 2
    print(format_report(s))
    if a.json:
        print(json.dumps(s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
