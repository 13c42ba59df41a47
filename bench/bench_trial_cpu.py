#!/usr/bin/env python3
"""Where a trial's CPU goes: CPU seconds per trial by component, alone and many at once.

Every trial records its CPU by component in meta.json (``cpu_s``: the traffic tool's sender
and receiver, the delay line, the queue sampler, ping, the set-up/teardown commands, and the
trial job's own Python process). This benchmark

  run   runs a set of trials (default: one household per bucket plus the fastest link of the
        sample, both directions, Cubic and Copa δ=0.5) first one at a time, then admitted by
        CPU budget as the workflow does, and prints per component the median CPU seconds per
        trial and mean cores (CPU seconds per second of trial wall time), then fits the
        admission model (CPU once per trial, plus running cores = base + per_mbit x carried
        Mbit/s) to the alone trials and prints it beside latency_divide.ops.admission's constants;
  raw   prints the same table for trials already on disk (for example a sweep:
        ``bench/bench_trial_cpu.py raw results/raw --since 2026-11-23T12:00``).

Needs root for `run`. Example (about 8 min):

    .venv/bin/python bench/bench_trial_cpu.py run --duration 20
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from _trials import ROOT, Trial, profile_budget, run_batch, summaries

sys.path.insert(0, str(ROOT / "src"))
from latency_divide.ops import admission

COMPONENTS = ("sender", "receiver", "delayline", "qsampler", "ping", "commands", "job")
# $0-30, $30-40, $40-50, $50+ (one each) and 12251, the sample's fastest downlink (64.9 Mbit/s)
DEFAULT_HOUSEHOLDS = [11406, 12512, 12334, 8268, 12251]


def wall_s(meta: dict) -> float:
    t = meta["timing"]
    start = t.get("process_started_unix") or t["started_unix"]
    from datetime import datetime

    end = datetime.fromisoformat(t["ended_at"].replace("Z", "+00:00")).timestamp()
    return max(end - start, 1e-6)


def table(rows: dict, label: str) -> dict:
    """Print per-component medians; return {component: median cores}."""
    metas = [r["meta"] for r in rows.values() if r["meta"].get("cpu_s")]
    if not metas:
        print(f"{label}: no trial with cpu_s in meta.json")
        return {}
    walls = np.array([wall_s(m) for m in metas])
    print(f"\n== {label}: {len(metas)} trials, median wall {np.median(walls):.1f} s, "
          f"median concurrency {np.median([m['concurrency'] for m in metas]):.0f} ==")
    print(f"{'component':10s} {'CPU s/trial':>12s} {'p95':>7s} {'cores':>7s} {'share':>6s}")
    total = np.array([sum(v or 0.0 for k, v in m["cpu_s"].items() if k in COMPONENTS)
                      for m in metas])
    out = {}
    for c in COMPONENTS:
        v = np.array([m["cpu_s"].get(c) or 0.0 for m in metas])
        out[c] = float(np.median(v / walls))
        print(f"{c:10s} {np.median(v):12.2f} {np.percentile(v, 95):7.2f} {out[c]:7.4f} "
              f"{100 * v.sum() / max(total.sum(), 1e-9):5.1f}%")
    print(f"{'total':10s} {np.median(total):12.2f} {np.percentile(total, 95):7.2f} "
          f"{np.median(total / walls):7.4f}")
    return out


def fit(rows: dict) -> None:
    """Fit latency_divide.ops.admission's model to the trials: the once-per-trial CPU (job and
    commands, median) and a least-squares line of the running cores (every other component
    per second of wall time) against the carried Mbit/s."""
    fixed, xs, ys = [], [], []
    for r in rows.values():
        m = r["meta"]
        if not m.get("cpu_s"):
            continue
        c = {k: m["cpu_s"].get(k) or 0.0 for k in COMPONENTS}
        fixed.append(c["job"] + c["commands"])
        xs.append(float(r["goodput_kbps"]) / 1000.0)
        ys.append(sum(v for k, v in c.items() if k not in ("job", "commands")) / wall_s(m))
    if len(xs) < 3:
        return
    per_mbit, run = np.polyfit(np.array(xs), np.array(ys), 1)
    resid = np.array(ys) - (run + per_mbit * np.array(xs))
    print(f"\nfit over {len(xs)} trials: {np.median(fixed):.2f} s once per trial + running "
          f"cores {run:.4f} + {per_mbit:.5f} x Mbit/s (max |residual| "
          f"{np.abs(resid).max():.4f} cores)")
    c = admission.costs()  # the current instrument's mean model
    print(f"admission.py ({admission.CURRENT}): {c.fixed_cpu_s:.2f} s once per trial + running "
          f"cores {c.run_cores:.4f} + {c.cores_per_mbit:.5f} x Mbit/s (tquic-perf)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run trials alone, then admitted by budget")
    r.add_argument("--households", type=int, nargs="+", default=DEFAULT_HOUSEHOLDS)
    r.add_argument("--variants", nargs="+", default=["cubic", "copa-0.5"])
    r.add_argument("--duration", type=float, default=20.0, help="transfer length, s")
    r.add_argument("--idle", type=float, default=5.0, help="idle baseline, s")
    r.add_argument("--window", type=int, default=65536)
    r.add_argument("--budget", type=int, help="host_load budget (default: the profile's)")
    r.add_argument("--keep", help="keep the raw trials under this directory")
    w = sub.add_parser("raw", help="summarize trials already on disk")
    w.add_argument("raw", type=Path)
    w.add_argument("--since", help="only trials started at or after this ISO time (UTC)")
    a = ap.parse_args()

    if a.cmd == "raw":
        rows = summaries(a.raw)
        if a.since:
            import pandas as pd

            since = pd.Timestamp(a.since, tz="UTC")
            rows = {k: v for k, v in rows.items() if v["started_at"] >= since}
        table(rows, f"trials under {a.raw}")
        fit(rows)
        return 0

    if os.geteuid() != 0:
        print("needs root (network namespaces)", file=sys.stderr)
        return 2
    trials = [Trial(h, d, v) for h in a.households for d in ("uplink", "downlink")
              for v in a.variants]
    a.budget = a.budget or profile_budget()
    base = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="ld-bench-cpu-"))
    kw = dict(duration=a.duration, idle=a.idle, window=a.window)
    print(f"{len(trials)} trials of {a.duration:g} s; raw under {base}; "
          f"{os.cpu_count()} CPUs, budget {a.budget}")
    wall_alone = run_batch(trials, base / "alone", n=1, label="alone", **kw)
    wall_budget = run_batch(trials, base / "budget", budget=a.budget,
                            label=f"budget {a.budget}", **kw)
    alone, together = summaries(base / "alone"), summaries(base / "budget")
    table(alone, "alone")
    table(together, f"admitted by budget {a.budget}")
    fit(alone)
    n = len(trials)
    nominal = a.idle + a.duration
    print(f"\nwall clock: alone {wall_alone:.0f} s ({wall_alone / n:.1f} s/trial, nominal "
          f"{nominal:g}); budget {wall_budget:.0f} s ({wall_budget / n:.1f} s/trial)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
