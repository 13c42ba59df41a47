#!/usr/bin/env python3
"""Fidelity of parallel trials: the same trials run alone and alongside N-1 others.

For a set of trials (default: 8 households, two per price bucket, Cubic and Copa δ=0.5, both
directions = 32 trials) this runs
  A. every trial alone, one after the other;
  B. the same trials N at a time (each in its own topology, as `snakemake --cores N` does);
  C. a subset alone again, to measure run-to-run noise;
and prints, per metric, the median and p95 of |B - A| and of |C - A|, plus the wall clock of
each phase and where the time goes. Needs root. Example:

    sudo .venv/bin/python bench/bench_parallel.py --n 4 --duration 20

Each trial is a separate `latency-divide trial` process, as under Snakemake.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CLI = ROOT / ".venv" / "bin" / "latency-divide"
DEFAULT_HOUSEHOLDS = [11406, 13570, 12512, 9254, 12334, 215248, 8268, 32501]
METRICS = ("norm_tput", "self_delay_mean_ms", "base_rtt_measured_ms")


def trial_argv(h, direction, cc, out, duration, idle, window):
    argv = [str(CLI), "trial", str(h), "--direction", direction, "--cc", cc,
            "--duration", str(duration), "--idle", str(idle), "--window", str(window),
            "--out", str(out)]
    if cc == "copa":
        argv += ["--delta", "0.5"]
    return argv


def run_batch(trials, out, n, duration, idle, window, label):
    """Run ``trials`` with at most ``n`` at once; return wall seconds."""
    t0 = time.monotonic()
    pending = list(trials)
    running: list[tuple[subprocess.Popen, tuple]] = []
    done = 0
    while pending or running:
        while pending and len(running) < n:
            t = pending.pop(0)
            p = subprocess.Popen(trial_argv(*t, out, duration, idle, window),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            running.append((p, t))
        for p, t in list(running):
            if p.poll() is not None:
                running.remove((p, t))
                done += 1
                if p.returncode != 0:
                    print(f"  {label}: trial {t} failed: {p.stderr.read()[-300:]}",
                          file=sys.stderr)
                el = time.monotonic() - t0
                print(f"  {label}: {done}/{len(trials)} done, elapsed {el:.0f} s", flush=True)
        time.sleep(0.2)
    return time.monotonic() - t0


def rows(out: Path) -> dict:
    from latency_divide.tables import summarize_trial

    res = {}
    for meta in out.rglob("meta.json"):
        r = summarize_trial(meta.parent)
        key = (int(r["household_id"]), r["direction"], r["variant"])
        res[key] = r
    return res


def deltas(a: dict, b: dict) -> dict[str, np.ndarray]:
    keys = sorted(set(a) & set(b))
    return {m: np.array([abs(float(b[k][m]) - float(a[k][m])) for k in keys]) for m in METRICS}


def fmt(d: np.ndarray) -> str:
    if len(d) == 0:
        return "n/a"
    return f"median {np.median(d):.4f}  p95 {np.percentile(d, 95):.4f}  (n={len(d)})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4, help="trials at once in phase B")
    ap.add_argument("--duration", type=float, default=20.0, help="transfer length, s")
    ap.add_argument("--idle", type=float, default=3.0, help="idle baseline, s")
    ap.add_argument("--window", type=int, default=65536, help="receiver window, bytes")
    ap.add_argument("--households", type=int, nargs="+", default=DEFAULT_HOUSEHOLDS)
    ap.add_argument("--noise-subset", type=int, default=8, help="trials re-run alone (phase C)")
    ap.add_argument("--keep", help="keep the raw trials under this directory")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces)", file=sys.stderr)
        return 2
    trials = [(h, d, cc) for h in a.households for d in ("uplink", "downlink")
              for cc in ("cubic", "copa")]
    base = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="ld-bench-parallel-"))
    outs = {k: base / k for k in ("alone", "parallel", "noise")}
    print(f"{len(trials)} trials of {a.duration:g} s; N={a.n}; raw under {base}")
    wall = {}
    wall["alone"] = run_batch(trials, outs["alone"], 1, a.duration, a.idle, a.window, "A alone")
    wall["parallel"] = run_batch(trials, outs["parallel"], a.n, a.duration, a.idle, a.window,
                                 f"B N={a.n}")
    subset = trials[:: max(1, len(trials) // a.noise_subset)][: a.noise_subset]
    wall["noise"] = run_batch(subset, outs["noise"], 1, a.duration, a.idle, a.window, "C noise")
    A, B, C = (rows(outs[k]) for k in ("alone", "parallel", "noise"))
    dB, dC = deltas(A, B), deltas(A, C)
    print(f"\n== |parallel (N={a.n}) - alone| and |alone again - alone| ==")
    for m in METRICS:
        print(f"{m:22s} parallel: {fmt(dB[m])}")
        print(f"{'':22s} noise:    {fmt(dC[m])}")
    per_trial = a.idle + a.duration
    print("\n== wall clock ==")
    for k, n in (("alone", 1), ("parallel", a.n)):
        cnt = len(trials)
        print(f"{k:9s} {wall[k]:7.1f} s for {cnt} trials: {wall[k] / cnt:.1f} s/trial "
              f"(nominal idle+transfer {per_trial:.1f} s; N={n} -> "
              f"{wall[k] * n / cnt - per_trial:+.1f} s overhead per trial slot)")
    metas = [json.loads(p.read_text()) for p in outs["parallel"].rglob("meta.json")]
    if metas:
        setup = np.median([m["timing"]["setup_s"] for m in metas])
        tear = np.median([m["timing"]["teardown_s"] for m in metas])
        conc = np.median([m["concurrency"] for m in metas])
        busy = [m["host"].get("cpu_busy_pct") for m in metas if m["host"].get("cpu_busy_pct")]
        print(f"parallel phase: median setup {setup:.2f} s, teardown {tear:.2f} s, "
              f"concurrency {conc:.0f}, host CPU busy median {np.median(busy):.0f}%")
    print(json.dumps({"n": a.n, "duration_s": a.duration, "wall_s": wall,
                      "parallel": {m: [float(np.median(dB[m])), float(np.percentile(dB[m], 95))]
                                   for m in METRICS if len(dB[m])},
                      "noise": {m: [float(np.median(dC[m])), float(np.percentile(dC[m], 95))]
                                for m in METRICS if len(dC[m])}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
