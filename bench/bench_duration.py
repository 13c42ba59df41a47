#!/usr/bin/env python3
"""Do 30 s trials measure what 60 s trials do? (issue 24, section 2: a population run may use
shorter trials only if a subset of 40 agrees within the per-trial fidelity bounds of docs/emulation.md.)

A seeded subset of a population config's drawn households (default 10: 5 with Cubic and Copa
δ 0.04, 5 with BBR and Copa δ 0.5, both directions: 40 trials per duration) is swept through
the real workflow (`snakemake --cores 1 trials`, the profile's admission, shuffled order) once
per duration, with the population's definitions otherwise unchanged (window, qfactor,
intervals, tool: the longest duration's definition ids are the population run's). Per trial it
compares each shorter duration with the longest: |Δ norm_tput| against 0.03, |Δ self-delay| against
max(1 ms, 20 %) (docs/emulation.md "Emulation health", trial.health.beyond_fidelity), and the relative
change of the population metrics (transport RTT, ping RTT under load, goodput). Prints the
share beyond the bounds, p95 and max, and every trial beyond. Needs root. Example (about 9 min):

    .venv/bin/python bench/bench_duration.py --scratch /var/tmp/ld-duration
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import numpy as np
import yaml
from _trials import ROOT, Trial, summaries, trial_preconditions
from bench_fidelity_tail import q, run_sweep

from latency_divide.config import load_config
from latency_divide.trial.health import beyond_fidelity

#: The two halves of the subset: each runs two of the population's variants
HALVES = (("cubic", "copa-0.04"), ("bbr", "copa-0.5"))
METRICS = ("transport_rtt_mean_ms", "rtt_mean_ms", "goodput_kbps")


def subset(configfile: str, n: int, seed: int) -> list[list[int]]:
    """``n`` of the config's drawn households (seeded), split into len(HALVES) groups."""
    ids = load_config(ROOT / configfile).household_ids()
    rng = random.Random(seed)
    pick = rng.sample(sorted(ids), n)
    return [pick[i::len(HALVES)] for i in range(len(HALVES))]


def half_config(configfile: str, households: list[int], variants: tuple[str, ...],
                duration: float) -> dict:
    """The population config restricted to ``households`` (by ID, in their price buckets) and
    ``variants``, one repetition of ``duration`` seconds."""
    cfg = yaml.safe_load((ROOT / configfile).read_text())
    loaded = load_config(ROOT / configfile)
    bucket_of = {h: b for b, hs in loaded.households_by_bucket.items() for h in hs}
    cfg["households"].pop("population_sample")  # the subset names its households
    cfg["households"]["buckets"] = [
        {**b, "ids": [h for h in households if bucket_of[h] == b["name"]]}
        for b in cfg["households"]["buckets"]
        if any(bucket_of[h] == b["name"] for h in households)]
    cfg["variants"] = [v for v in cfg["variants"] if v["name"] in variants]
    cfg["trial"].update(duration_s=duration, repetitions=1)
    cfg["companions"] = []
    return cfg


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configfile", default="config/population.yaml")
    ap.add_argument("--households", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--durations", type=float, nargs="+", default=[30.0, 60.0])
    ap.add_argument("--scratch", required=True, help="scratch directory (reused: trials "
                    "already there are not measured again)")
    a = ap.parse_args()
    if (refused := trial_preconditions()) is not None:
        return refused
    groups = subset(a.configfile, a.households, a.seed)
    durations = sorted(a.durations)
    runs: dict[float, dict[Trial, dict]] = {}
    for d in durations:
        scratch = Path(a.scratch) / f"{d:g}s"
        wall = 0.0
        for hh, variants in zip(groups, HALVES):
            wall += run_sweep(scratch, half_config(a.configfile, hh, variants, d), [])
        runs[d] = summaries(scratch / "results" / "raw")
        print(f"{d:g} s: {len(runs[d])} trials, {wall:.0f} s of sweeps", flush=True)
    ref_d = durations[-1]
    ref = runs[ref_d]
    result = {"households": groups, "durations": durations, "against": ref_d, "runs": {}}
    ok = True
    for d in durations[:-1]:
        got = runs[d]
        keys = sorted(set(ref) & set(got), key=lambda k: (k.variant, k.household, k.direction))
        rows = []
        for k in keys:
            dnt, dsd, bad = beyond_fidelity(got[k], ref[k])
            rel = {m: got[k][m] / ref[k][m] - 1 if ref[k].get(m) else float("nan")
                   for m in METRICS}
            rows.append((k, dnt, dsd, bad, rel))
        nbad = sum(r[3] for r in rows)
        ok &= nbad == 0
        nt = np.abs([r[1] for r in rows])
        sd = np.abs([r[2] for r in rows])
        print(f"\n== {d:g} s against {ref_d:g} s: {len(rows)} trials, {nbad} beyond the "
              f"per-trial bounds ==")
        print(f"|Δ norm_tput|  median {np.median(nt):.4f} p95 {q(nt, 95):.4f} max {nt.max():.4f}")
        print(f"|Δ self-delay| median {np.median(sd):.2f} p95 {q(sd, 95):.2f} "
              f"max {sd.max():.2f} ms")
        for m in METRICS:
            x = np.array([r[4][m] for r in rows if np.isfinite(r[4][m])])
            if len(x):
                print(f"{m:22s} relative change median {np.median(x):+.3f} p5 {q(x, 5):+.3f} "
                      f"p95 {q(x, 95):+.3f}")
        print(f"{'trial':34s} {'Δnt':>7s} {'Δsd ms':>7s} "
              + " ".join(f"{m[:14]:>14s}" for m in METRICS))
        for k, dnt, dsd, bad, rel in rows:
            mark = " beyond" if bad else ""
            print(f"{k.household:>8d} {k.direction:9s} {k.variant:15s} {dnt:+7.3f} {dsd:+7.2f} "
                  + " ".join(f"{rel[m]:+14.3f}" for m in METRICS) + mark)
        result["runs"][f"{d:g}"] = {"n": len(rows), "beyond": nbad,
                                    "nt_p95": q(nt, 95), "nt_max": float(nt.max()),
                                    "sd_p95": q(sd, 95), "sd_max": float(sd.max())}
    print(json.dumps(result))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
