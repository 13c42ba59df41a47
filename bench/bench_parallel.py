#!/usr/bin/env python3
"""Fidelity of concurrent trials: the same trials run alone and admitted by CPU budget.

For a fixed set of trials (default: 8 households, two per price bucket, the paper's four
variants, both directions = 64 trials) this runs
  A. every trial alone, one after the other;
  B. the same trials admitted by CPU budget exactly as `snakemake --cores 1 all` admits them
     (latency_divide.ops.admission, budget from profiles/default/config.yaml), or N at a time
     with --n;
  C. a subset alone again, to measure run-to-run noise;
and prints per variant the median and p95 of |B - A| and |C - A| for normalized throughput
and self-induced delay, the delay emulation error (RTT measured at idle minus the set RTT)
in B, overall and on the links of 30 Mbit/s and more, each against the issue's bounds, and
the wall clock of each phase. Needs root. Example (about 40 min with the defaults):

    .venv/bin/python bench/bench_parallel.py --duration 20

Each trial is a separate `latency-divide trial` process, as under Snakemake.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
from _trials import VARIANTS, Trial, profile_budget, run_batch, summaries

DEFAULT_HOUSEHOLDS = [11406, 13570, 12512, 9254, 12334, 215248, 8268, 32501]
#: (metric, bound on the median of |concurrent - alone|) per variant
BOUNDS = {"norm_tput": 0.02, "self_delay_mean_ms": 1.0}
#: delay emulation error (idle RTT measured - set): bounds on median and p99, ms
RTT_ERR_BOUNDS = (0.2, 1.0)


def deltas(a: dict, b: dict, metric: str, variant: str | None = None) -> np.ndarray:
    keys = sorted((k for k in set(a) & set(b) if variant in (None, k.variant)),
                  key=lambda k: (k.household, k.direction, k.variant))
    return np.array([abs(float(b[k][metric]) - float(a[k][metric])) for k in keys])


def fmt(d: np.ndarray) -> str:
    if len(d) == 0:
        return "n/a"
    return f"{np.median(d):.4f} (p95 {np.percentile(d, 95):.4f}, n={len(d)})"


def rtt_errors(rows: dict, min_kbps: float = 0.0) -> np.ndarray:
    return np.array([float(r["base_rtt_measured_ms"]) - float(r["base_rtt_ms"])
                     for r in rows.values() if float(r["capacity_kbps"]) >= min_kbps])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, help="host_load budget in phase B (default: the "
                    "workflow profile's)")
    ap.add_argument("--n", type=int, help="instead of a budget: trials at once in phase B")
    ap.add_argument("--duration", type=float, default=20.0, help="transfer length, s")
    ap.add_argument("--idle", type=float, default=5.0, help="idle baseline, s")
    ap.add_argument("--window", type=int, default=65536, help="receiver window, bytes")
    ap.add_argument("--households", type=int, nargs="+", default=DEFAULT_HOUSEHOLDS)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--noise-subset", type=int, default=8, help="trials re-run alone (phase C)")
    ap.add_argument("--keep", help="keep the raw trials under this directory; given again, "
                    "phases whose trials are all there are reused (another budget reruns B only)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces)", file=sys.stderr)
        return 2
    budget = None if a.n else (a.budget or profile_budget())
    trials = [Trial(h, d, v) for h in a.households for d in ("uplink", "downlink")
              for v in a.variants]
    base = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="ld-bench-parallel-"))
    outs = {"alone": base / "alone", "noise": base / "noise",
            "concurrent": base / (f"concurrent-n{a.n}" if a.n else f"concurrent-{budget}")}
    how = f"N={a.n}" if a.n else f"budget host_load={budget}"
    print(f"{len(trials)} trials of {a.duration:g} s; phase B {how}; {os.cpu_count()} CPUs; "
          f"raw under {base}")
    kw = dict(duration=a.duration, idle=a.idle, window=a.window)
    subset = trials[:: max(1, len(trials) // a.noise_subset)][: a.noise_subset]

    def phase(name: str, batch: list[Trial], label: str, **how_many) -> float:
        """Run a phase, or (--keep DIR given again) reuse it when DIR has all its trials."""
        done = set(summaries(outs[name])) if a.keep and outs[name].is_dir() else set()
        if set(batch) <= done:
            print(f"  {label}: reusing the {len(batch)} trials under {outs[name]}")
            return float("nan")
        return run_batch(batch, outs[name], label=label, **how_many, **kw)

    wall = {"alone": phase("alone", trials, "A alone", n=1),
            "concurrent": phase("concurrent", trials, f"B {how}", n=a.n, budget=budget),
            "noise": phase("noise", subset, "C noise", n=1)}
    A, B, C = (summaries(outs[k]) for k in ("alone", "concurrent", "noise"))

    ok = True
    result: dict = {"how": how, "duration_s": a.duration, "wall_s": wall, "variants": {}}
    print(f"\n== per variant: median |concurrent - alone| (bound) and |alone again - alone| ==")
    for v in a.variants:
        result["variants"][v] = {}
        for m, bound in BOUNDS.items():
            d, n = deltas(A, B, m, v), deltas(A, C, m, v)
            med = float(np.median(d)) if len(d) else float("nan")
            passed = med <= bound
            ok &= passed
            result["variants"][v][m] = {"median": med, "p95": float(np.percentile(d, 95))
                                        if len(d) else None, "bound": bound, "ok": passed}
            print(f"{v:9s} {m:19s} {fmt(d)}  bound {bound:g}: {'ok' if passed else 'FAILS'}"
                  f"   noise {fmt(n)}")
    print("\n== delay emulation error in phase B: idle RTT measured - set RTT (ms) ==")
    for label, min_kbps in (("all links", 0.0), ("links >= 30 Mbit/s", 30000.0)):
        e = rtt_errors(B, min_kbps)
        if not len(e):
            continue
        med, p99 = float(np.median(e)), float(np.percentile(e, 99))
        passed = med <= RTT_ERR_BOUNDS[0] and p99 <= RTT_ERR_BOUNDS[1]
        ok &= passed
        result[f"rtt_error_{int(min_kbps)}"] = {"median": med, "p99": p99, "n": len(e),
                                                "ok": passed}
        print(f"{label:20s} median {med:+.3f}  p99 {p99:+.3f}  (n={len(e)}; bounds "
              f"{RTT_ERR_BOUNDS[0]} / {RTT_ERR_BOUNDS[1]}): {'ok' if passed else 'FAILS'}")
    metas = [r["meta"] for r in B.values()]
    if metas:
        busy = [m["host"]["cpu_busy_pct"] for m in metas if m["host"].get("cpu_busy_pct")]
        conc = [m["concurrency"] for m in metas]
        result["concurrency_median"] = float(np.median(conc))
        print(f"\nphase B: concurrency median {np.median(conc):.0f} (max {max(conc)}), host CPU "
              f"busy median {np.median(busy):.0f}%")
    print("\n== wall clock ==")
    for k, cnt in (("alone", len(trials)), ("concurrent", len(trials)), ("noise", len(subset))):
        print(f"{k:10s} {wall[k]:7.1f} s for {cnt} trials ({wall[k] / cnt:.1f} s/trial; nominal "
              f"idle + transfer {a.idle + a.duration:g} s)")
    print(json.dumps(result))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
