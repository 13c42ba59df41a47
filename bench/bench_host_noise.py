#!/usr/bin/env python3
"""What the stall injector does to this host: hostprobe's numbers (timer lateness and CPU per
wake-up at 100 µs, 1 ms, 5 ms and 20 ms gaps; the ping-pong on one core and across two) with
no injector, with stallinject at its defaults (issue 57's noisy host) and at ten times its
duty, and, where Debian's cyclictest is installed (``apt-get install rt-tests``), cyclictest's
wake-up latency in each state as issue 57 measured it (2 threads, SCHED_FIFO 80, 200 µs
interval, ``-D 20``), to compare with the issue's figures: on the noisy host, cyclictest p99
58-83 µs, p99.9 168-320 µs, max 3-6 ms; with the injector's defaults on a quiet host of that
kind p99 89-131 µs, p99.9 about 1 ms, max about 24 ms.

Needs root (SCHED_FIFO) and the tools built (``cargo build --release -p hostprobe``). About
2 minutes with the defaults (3 states x (20 s hostprobe + 20 s cyclictest)):

    .venv/bin/python bench/bench_host_noise.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from latency_divide.errors import LatencyDivideError  # noqa: E402
from latency_divide.testbed.stalls import DEFAULTS, binary, hostprobe_argv, injecting  # noqa: E402

#: cyclictest as issue 57 ran it; the histogram (µs buckets to 30 ms) gives the percentiles.
CYCLICTEST_ARGS = ["-t", "2", "-p", "80", "-i", "200", "-m", "-q", "-h", "30000"]


def host_line() -> str:
    model = "unknown"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        model = next((ln.split(":", 1)[1].strip() for ln in out.splitlines()
                      if ln.startswith("Model name")), model)
    except (OSError, subprocess.TimeoutExpired):
        pass
    return f"{model}, {os.cpu_count()} CPUs, kernel {platform.release()}"


def cyclictest_percentiles(text: str) -> dict:
    """p50, p99, p999 and max (µs) of cyclictest's ``-h`` histogram output, all threads
    together; a sample above the histogram's range (an overflow) counts as above its last
    bucket, and max comes from its ``# Max Latencies`` line."""
    counts: dict[int, int] = {}
    overflows = 0
    maxima: list[int] = []
    for line in text.splitlines():
        if line.startswith("# Max Latencies:"):
            maxima = [int(v) for v in line.split(":", 1)[1].split()]
        elif line.startswith("# Histogram Overflows:"):
            overflows = sum(int(v) for v in line.split(":", 1)[1].split())
        elif line[:1].isdigit():
            us, *per_thread = line.split()
            counts[int(us)] = sum(int(v) for v in per_thread)
    total = sum(counts.values()) + overflows
    if total == 0:
        raise ValueError("cyclictest printed no histogram")
    top = max(counts) + 1 if counts else 0

    def rank(q: float) -> float:
        need, seen = q * total, 0
        for us in sorted(counts):
            seen += counts[us]
            if seen >= need:
                return float(us)
        return float(top)  # in the overflows

    return {"samples": total, "p50": rank(0.5), "p99": rank(0.99), "p999": rank(0.999),
            "max": float(max(maxima)) if maxima else float(top)}


def run_cyclictest(exe: str, seconds: int) -> dict:
    out = subprocess.run([exe, *CYCLICTEST_ARGS, "-D", str(seconds)], capture_output=True,
                         text=True, timeout=seconds + 60)
    if out.returncode != 0:
        raise SystemExit(f"bench_host_noise: cyclictest failed: {out.stderr.strip()}")
    return cyclictest_percentiles(out.stdout)


def run_hostprobe(seconds: float) -> dict:
    out = subprocess.run(hostprobe_argv(seconds, json=True), capture_output=True, text=True,
                         timeout=seconds + 60)
    if out.returncode != 0:
        raise SystemExit(f"bench_host_noise: hostprobe failed: {out.stderr.strip()}")
    return json.loads(out.stdout)


def print_state(name: str, doc: dict, cyc: dict | None, stolen: str) -> None:
    print(f"\n## {name}: steal {doc['steal_pct']:.2f} % over {doc['seconds']:.1f} s; "
          f"{'SCHED_FIFO ' + str(doc['priority']) if doc['fifo'] else 'normal scheduler'}"
          f"{'; injector ' + stolen if stolen else ''}")
    print(f"{'what':<24}{'cpu':>4}{'wakeups':>9}{'cpu_us/wake':>12}{'p50_us':>9}{'p99_us':>9}"
          f"{'p999_us':>10}{'max_us':>10}")
    for r in doc["timer"]:
        p = r["late_us"]
        print(f"{'timer ' + format(r['gap_us'], 'g') + ' us late':<24}{r['cpu']:>4}"
              f"{r['wakeups']:>9}{r['cpu_us_per_wakeup']:>12.1f}{p['p50']:>9.1f}{p['p99']:>9.1f}"
              f"{p['p999']:>10.1f}{p['max']:>10.1f}")
    for side in ("same_core", "cross_core"):
        pp = doc["pingpong"][side]
        if pp is None:
            print(f"{'ping-pong ' + side:<24}   - (one CPU)")
            continue
        p = pp["latency_us"]
        print(f"{'ping-pong ' + side:<24}{'-':>4}{pp['wakeups']:>9}{pp['cpu_us_per_wakeup']:>12.1f}"
              f"{p['p50']:>9.1f}{p['p99']:>9.1f}{p['p999']:>10.1f}{p['max']:>10.1f}")
    if cyc is not None:
        print(f"{'cyclictest (2 thr)':<24}{'-':>4}{cyc['samples']:>9}{'-':>12}{cyc['p50']:>9.0f}"
              f"{cyc['p99']:>9.0f}{cyc['p999']:>10.0f}{cyc['max']:>10.0f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0,
                    help="hostprobe's window per state, s (default 20)")
    ap.add_argument("--cyclictest-seconds", type=int, default=20,
                    help="cyclictest's -D per state, s (default 20, the issue's); 0: skip it")
    ap.add_argument("--seed", type=int, default=57, help="the injector's seed (default 57)")
    a = ap.parse_args()
    if not 1 <= a.seconds <= 600 or not 0 <= a.cyclictest_seconds <= 600:
        ap.error("--seconds: 1..600; --cyclictest-seconds: 0..600")
    if os.geteuid() != 0:
        print("bench_host_noise: needs root (SCHED_FIFO)", file=sys.stderr)
        return 2
    try:
        binary("stallinject"), binary("hostprobe")
    except LatencyDivideError as e:
        print(f"bench_host_noise: {e}", file=sys.stderr)
        return 2
    cyclictest = shutil.which("cyclictest") if a.cyclictest_seconds else None
    states = [("no injector", None),
              ("stallinject defaults", {"seed": a.seed}),
              ("stallinject 10x duty", {"seed": a.seed, "duty": 10 * DEFAULTS["duty"]})]
    print(f"# bench_host_noise, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"host: {host_line()}")
    print(f"# hostprobe --json --seconds {a.seconds:g} per state; cyclictest "
          + (f"{' '.join(CYCLICTEST_ARGS)} -D {a.cyclictest_seconds}" if cyclictest
             else "not run (not installed: apt-get install rt-tests)" if a.cyclictest_seconds
             else "skipped"))
    print(f"# injector defaults: {DEFAULTS} (issue 57); seed {a.seed}")
    for name, params in states:
        ctx = injecting(**params) if params is not None else nullcontext()
        with ctx as inj:
            doc = run_hostprobe(a.seconds)
            cyc = run_cyclictest(cyclictest, a.cyclictest_seconds) if cyclictest else None
        stolen = ""
        if inj is not None:
            stolen = (f"duty {inj.ready['duty']}, stolen_ms {inj.done.get('stolen_ms')}, "
                      f"longest {inj.done.get('longest_ms')} ms")
        print_state(name, doc, cyc, stolen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
