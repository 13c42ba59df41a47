#!/usr/bin/env python3
"""Does the host's load bend a population companion's trials? The same trials swept through the
workflow at a CPU budget, against each run alone (issue 22's per-trial bound, issue 24's tperf
companion).

Takes ``--config`` (a population run, e.g. config/population-mvfst.yaml) restricted to
``--households`` (explicit IDs instead of its weighted draw, same variants, tool and trial
settings), runs each trial of ``--alone-variants`` alone first into ``--alone`` (one
`latency-divide trial` at a time; reused when there, the layout of bench_alone_sample.py), then
sweeps all of them through the real workflow (`snakemake --cores 1 trials`, the default profile's
admission, `--resources host_load=N` with ``--budget``) in ``--sweep``, and prints every trial
with an alone run beside it: |Δ norm_tput|, |Δ self-delay|, beyond the bounds or not, and the
health numbers of the swept trial. Needs root and the config's tool. Example (the tperf
companion at the default budget and at half of it; about 6 min per sweep of 40 trials):

    .venv/bin/python bench/bench_population_load.py --config config/population-mvfst.yaml \\
        --households 626748 26684 634634 790 27145 --alone /var/tmp/ld-alone \\
        --sweep /var/tmp/ld-load-900 --budget 900
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml
from _trials import ROOT, summaries, trial_preconditions
from bench_alone_sample import trial_argv
from bench_fidelity_tail import beyond, run_sweep

from latency_divide.config import load_config
from latency_divide.data.households import get_households
from latency_divide.trial.layout import trial_meta_path
from latency_divide.trial.sweep import alone_variant, trial_ids

HEALTH = ("concurrency", "tool_wait_ms_per_s", "tool_wait_ms_per_s_worst",
          "tool_wait_per_slice_us", "cpu_pressure_some_pct")


def restricted(base: Path, households: list[int]) -> dict:
    """``base`` with ``households`` as explicit IDs in its price buckets (no weighted draw)."""
    cfg = yaml.safe_load(base.read_text())
    price = {h.unit_id: h.monthly_charge for h in get_households(households)}
    hh = cfg["households"]
    hh.pop("population_sample", None)
    buckets = []
    for b in hh["buckets"]:
        ids = [h for h in households
               if price[h] >= b["min"] and (b["max"] is None or price[h] < b["max"])]
        if ids:
            buckets.append({**b, "ids": ids})
    hh["buckets"] = buckets
    cfg["trial"]["repetitions"] = 1
    cfg["companions"] = []
    return cfg


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=Path("config/population-mvfst.yaml"))
    ap.add_argument("--households", type=int, nargs="+", required=True)
    ap.add_argument("--alone-variants", nargs="+", default=["copa-0.5"])
    ap.add_argument("--alone", type=Path, required=True, help="raw tree of the alone runs")
    ap.add_argument("--sweep", type=Path, required=True, help="scratch directory of the sweep")
    ap.add_argument("--budget", type=int, default=900, help="host_load budget of the sweep")
    a = ap.parse_args()
    if (refused := trial_preconditions()) is not None:
        return refused
    cfg_dict = restricted(ROOT / a.config, a.households)
    a.sweep.mkdir(parents=True, exist_ok=True)
    cfg_path = a.sweep / "alone-config.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg_dict, sort_keys=False))
    cfg = load_config(cfg_path)
    todo = [t for t in trial_ids(cfg) if t[3] in a.alone_variants]
    for k, (def_id, hid, direction, variant, _) in enumerate(todo, 1):
        if trial_meta_path(a.alone, def_id, hid, direction, alone_variant(cfg, variant), 1).exists():
            continue
        print(f"alone {k} of {len(todo)}: {hid} {direction} {variant}", flush=True)
        subprocess.run(trial_argv(cfg, hid, direction, variant, 1, a.alone), check=True,
                       capture_output=True)
    wall = run_sweep(a.sweep, cfg_dict, ["--resources", f"host_load={a.budget}"])
    alone, swept = summaries(a.alone), summaries(a.sweep / "results" / "raw")
    keys = sorted((k for k in swept if k in alone and k.variant in a.alone_variants),
                  key=lambda k: (k.variant, k.household, k.direction))
    print(f"\nsweep at host_load={a.budget}: {len(swept)} trials in {wall:.0f} s; "
          f"{len(keys)} with an alone run")
    print(f"{'trial':30s} {'alone':>6s} {'swept':>6s} {'Δnt':>7s} {'Δsd ms':>7s}       "
          + " ".join(f"{c[:12]:>12s}" for c in HEALTH))
    bad_n, dn = 0, []
    for k in keys:
        dnt, dsd, bad = beyond(alone[k], swept[k])
        bad_n += bad
        dn.append(abs(dnt))
        h = {**swept[k]["meta"].get("health", {}), "concurrency":
             swept[k]["meta"].get("concurrency")}
        print(f"{k.household:>7d} {k.direction:8s} {k.variant:13s} "
              f"{alone[k]['norm_tput']:6.3f} {swept[k]['norm_tput']:6.3f} {dnt:+7.3f} "
              f"{dsd:+7.2f} {'BEYOND' if bad else '      '} "
              + " ".join(f"{float(h[c]) if h.get(c) is not None else float('nan'):12.1f}"
                         for c in HEALTH))
    conc = [r["meta"].get("concurrency", 0) for r in swept.values()]
    print(f"\nbeyond the bounds: {bad_n} of {len(keys)}; |Δ norm_tput| median "
          f"{np.median(dn):.3f} max {max(dn):.3f}; concurrency median {np.median(conc):.0f}, "
          f"max {max(conc)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
