#!/usr/bin/env python3
"""A population run's answer for one direction, before the whole run is on disk: its trials
of that direction parsed as the tables do, the percentile table as `snakemake all` builds it
(equal household weights, the config's seed, 1,000 resamples), printed beside Facebook's
numbers (`latency-divide percentiles`), with each variant's loss rate, and which of its rows
were measured alone on the host and which beside other trials of the run (mvfst's Copa δ 0.5
moves with the host's CPU state: docs/population.md, "The same groups alone").

`snakemake all` analyses a companion only once every trial of it is on disk; a population run
is measured over several sessions (docs/population.md), and this gives the answer of a
direction that is complete. It refuses a direction with trials missing, and leaves out (and
counts) the trials the tables leave out.

    .venv/bin/python bench/bench_population_answer.py [--direction uplink] \\
        [--config config/population.yaml] [--raw results/raw] [--jobs 2]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from _trials import ROOT  # noqa: F401  (puts src/ on the path)

from latency_divide.analysis.facebook import side_by_side, to_markdown
from latency_divide.analysis.population import percentile_table
from latency_divide.analysis.reader import TrialSkipped
from latency_divide.analysis.tables import collect
from latency_divide.config import load_config
from latency_divide.trial import rawio
from latency_divide.trial.layout import trial_path
from latency_divide.trial.sweep import trial_ids


#: Reasons for which the tables leave a trial out and list it in exclusions.parquet (a link
#: beyond the host it ran on, measured once; a failed health verdict): any other reason exits.
LEFT_OUT = ("beyond the host it ran on: ", "emulation health failed: ")


def direction_trials(config: str, raw: Path, direction: str, jobs: int = 2,
                     partial: bool = False):
    """(config, trials-table frame) of every trial of ``direction`` of a population config,
    parsed as the tables do; exits naming the first missing (unless ``partial``: those on
    disk) or unusable trial."""
    cfg = load_config(config)
    dirs = [trial_path(raw, *t) for t in trial_ids(cfg) if t[2] == direction]
    missing = [d for d in dirs if not rawio.exists(d, "meta.json")]  # loose or packed
    if partial:
        dirs = [d for d in dirs if d not in missing]
    elif missing:
        sys.exit(f"{len(missing)} of the {len(dirs)} {direction} trials of {config} are not "
                 f"under {raw} (first: {missing[0]})")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TrialSkipped)  # counted below
        t = collect(dirs, jobs=jobs)
    unusable = [e for e in t.skipped if not e.reason.startswith(LEFT_OUT)]
    if unusable:
        sys.exit(f"{len(unusable)} trials cannot be used, first: {unusable[0]}")
    if t.skipped:
        hh = sorted(t.exclusions["household_id"].unique().tolist())
        print(f"{len(t.skipped)} trials left out as the tables leave them out (exclusions."
              f"parquet: beyond the host or its health failed), households {hh}\n")
    return cfg, t.trials


def beside_s(trials: pd.DataFrame, others: pd.DataFrame) -> np.ndarray:
    """Per row of ``trials``: seconds of its transfer during which another trial of ``others``
    (the same run, both directions) was on the host, from set-up to clean-up."""
    a0 = trials["transfer_start_unix"].to_numpy()[:, None]
    a1 = trials["transfer_end_unix"].to_numpy()[:, None]
    b0 = others["started_at"].map(pd.Timestamp.timestamp).to_numpy()[None, :]
    b1 = others["ended_at"].map(pd.Timestamp.timestamp).to_numpy()[None, :]
    same = trials["trial_path"].to_numpy()[:, None] == others["trial_path"].to_numpy()[None, :]
    return np.where(same, 0.0, np.clip(np.minimum(a1, b1) - np.maximum(a0, b0), 0, None)).sum(1)


def print_alone(trials: pd.DataFrame, others: pd.DataFrame) -> None:
    """Per variant: rows measured alone (under 1 s of their transfer beside another published
    trial, and no other trial's testbed up at its start or end: ``concurrency``, which also
    sees trials that failed and were not kept) and beside others, with their households'
    price buckets and median norm_tput."""
    t = trials.assign(beside_s=beside_s(trials, others))
    t["alone"] = (t["beside_s"] < 1.0) & (t["concurrency"] == 1)
    print("\nper variant: rows measured alone on the host / beside other trials of the run "
          "(norm_tput median; price buckets of the alone rows)")
    for variant, g in t.groupby("variant"):
        al, bs = g[g["alone"]], g[~g["alone"]]
        buckets = al["price_bucket"].value_counts().sort_index().to_dict()
        print(f"  {variant:10s} alone {len(al):4d} ({al['norm_tput'].median():.3f})  beside "
              f"{len(bs):4d} ({bs['norm_tput'].median():.3f})  alone by bucket {buckets}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--direction", default="uplink", choices=("uplink", "downlink"))
    ap.add_argument("--config", default="config/population.yaml")
    ap.add_argument("--raw", type=Path, default=Path("results/raw"))
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    t0 = time.monotonic()
    cfg, trials = direction_trials(a.config, a.raw, a.direction, a.jobs)
    table = percentile_table(trials.assign(weight=1.0), seed=cfg.seed)
    print(f"{a.direction}: {len(trials)} trials of {trials['household_id'].nunique()} households "
          f"(health verdicts: {trials['health_verdict'].value_counts().to_dict()}), "
          f"{time.monotonic() - t0:.0f} s\n")
    print(to_markdown(side_by_side(table, a.direction)))
    print("\nper price bucket: change against Cubic (group) at p50 / p90 [95 % CI]")
    sel = table[(table["direction"] == a.direction) & (table["variant"] != "cubic")
                & table["percentile"].isin([50.0, 90.0])]
    for (bucket, metric, variant), g in sel.groupby(["bucket", "metric", "variant"]):
        cells = "; ".join(f"p{r.percentile:g} {100 * r.change_group:+.0f} % "
                          f"[{100 * r.ci_low_group:+.0f}, {100 * r.ci_high_group:+.0f}]"
                          for r in g.sort_values("percentile").itertuples())
        print(f"  {bucket:6s} {metric:22s} {variant:10s} n={g['n_households'].iloc[0]:3d}  "
              f"{cells}")
    print("\nper variant, across households: median of the household means")
    hh = trials.groupby(["variant", "household_id"])[
        ["sender_loss_pct", "norm_tput", "transport_rtt_mean_ms", "rtt_mean_ms"]].mean()
    print(hh.groupby("variant").median().round(3).to_string())
    other = "uplink" if a.direction == "downlink" else "downlink"
    print_alone(trials, pd.concat([trials, direction_trials(a.config, a.raw, other, a.jobs,
                                                            partial=True)[1]]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
