#!/usr/bin/env python3
"""Does a trial that spreads from repetition to repetition in a run spread alone as well?
(issue 24: mvfst's Copa in the population's repeated tenth, docs/population.md.)

A population config measures a seeded tenth of its households three times, in shuffled order
among the other trials. For each of those groups (household, direction, variant) whose
published repetitions span more than ``--wider-than`` in norm_tput, and as many of the others
drawn with a seed (``--narrow``, the control), this runs the same trial ``--reps`` times alone
(one `latency-divide trial` at a time, nothing else of ours running; the same definition as
the workflow's, trial.sweep.alone_args) into ``--out`` (reused: repetitions already
there are not run again) and prints both spreads side by side. A group that spreads alone too
spreads because of the stack, not because of the host it shared. Needs root. Example (the
wide Copa δ 0.5 groups of the tperf companion, about 3.5 min per group):

    .venv/bin/dvc pull
    .venv/bin/python bench/bench_alone_repeats.py config/population-mvfst.yaml \\
        --reference results/raw --out /var/tmp/ld-alone-rep --variants copa-0.5

Exit 0 always: this is a measurement, not a gate.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from _trials import ROOT
from bench_alone_sample import trial_argv

from latency_divide.analysis.metrics import summarize_trial
from latency_divide.config import load_config
from latency_divide.trial import rawio
from latency_divide.trial.layout import trial_meta_path
from latency_divide.trial.sweep import alone_variant, trial_ids


def published_groups(cfg, reference: Path, variants) -> dict[tuple, list[float]]:
    """(definition, household, direction, variant) -> norm_tput of each published repetition,
    for the groups the config measures more than once and whose repetitions are all there."""
    reps = defaultdict(list)
    for def_id, hid, direction, variant, rep in trial_ids(cfg):
        if not variants or variant in variants:
            reps[(def_id, hid, direction, variant)].append(rep)
    out = {}
    for key, rs in sorted(reps.items()):
        dirs = [trial_meta_path(reference, *key, r).parent for r in sorted(rs)]
        if len(rs) > 1 and all(rawio.exists(d, "meta.json") for d in dirs):
            out[key] = [float(summarize_trial(d)["norm_tput"]) for d in dirs]
    return out


def spread(xs: list[float]) -> float:
    return max(xs) - min(xs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", help="a population config (published definition set)")
    ap.add_argument("--reference", required=True, type=Path, help="published raw tree")
    ap.add_argument("--out", required=True, type=Path, help="raw tree of the alone runs")
    ap.add_argument("--variants", nargs="+", help="only these variants")
    ap.add_argument("--wider-than", type=float, default=0.03,
                    help="a group is wide if its published norm_tput spans more (default 0.03,"
                         " the per-trial bound)")
    ap.add_argument("--wide", type=int, help="at most this many wide groups per variant, drawn "
                    "with the seed (default: all)")
    ap.add_argument("--narrow", type=int, default=2, help="narrow groups run as a control")
    ap.add_argument("--reps", type=int, default=3, help="alone repetitions per group")
    ap.add_argument("--seed", type=int, default=24)
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces)", file=sys.stderr)
        return 2
    if a.wide is not None and a.wide < 1:
        print(f"--wide {a.wide}: give at least 1 (or leave it out for all)", file=sys.stderr)
        return 2
    if a.reps < 2:
        print(f"--reps {a.reps}: a spread needs at least 2 repetitions", file=sys.stderr)
        return 2
    cfg = load_config(ROOT / a.config)
    groups = published_groups(cfg, a.reference, a.variants)
    if not groups:
        print(f"{a.config}: no group with all its repetitions under {a.reference}",
              file=sys.stderr)
        return 1
    all_wide = [k for k, v in groups.items() if spread(v) > a.wider_than]
    narrow = [k for k in groups if k not in all_wide]
    rng = random.Random(a.seed)
    wide = all_wide
    if a.wide is not None:
        by_variant = defaultdict(list)
        for k in all_wide:
            by_variant[k[3]].append(k)
        wide = [k for v in sorted(by_variant) for k in
                sorted(rng.sample(by_variant[v], min(a.wide, len(by_variant[v]))))]
    control = rng.sample(narrow, min(a.narrow, len(narrow)))
    chosen = [(k, "wide") for k in wide] + [(k, "narrow") for k in control]
    print(f"{len(groups)} repeated groups published, {len(all_wide)} wider than {a.wider_than:g}; "
          f"running {len(wide)} wide and {len(control)} narrow groups {a.reps} times alone",
          flush=True)
    total, k, t0 = len(chosen) * a.reps, 0, time.monotonic()
    rows = []
    for key, kind in chosen:
        def_id, hid, direction, variant = key
        alone = []
        for rep in range(1, a.reps + 1):
            k += 1
            meta = trial_meta_path(a.out, def_id, hid, direction, alone_variant(cfg, variant), rep)
            if not meta.exists():
                p = subprocess.run(trial_argv(cfg, hid, direction, variant, rep, a.out),
                                   capture_output=True, text=True)
                if p.returncode != 0:
                    print(f"  {hid} {direction} {variant} rep{rep}: trial failed: "
                          f"{p.stderr[-400:]}", file=sys.stderr)
                    continue
            alone.append(float(summarize_trial(meta.parent)["norm_tput"]))
            el = time.monotonic() - t0
            print(f"  trial {k} of {total} ({hid} {direction} {variant} rep{rep}), elapsed "
                  f"{el:.0f} s, ETA {el / k * (total - k):.0f} s", flush=True)
        if len(alone) >= 2:
            rows.append((kind, key, groups[key], alone))
    print(f"\nnorm_tput of each repetition; spread = max - min; wide = spread > "
          f"{a.wider_than:g}")
    for kind, (def_id, hid, direction, variant), run, alone in rows:
        fmt = ", ".join
        print(f"  {kind:6s} {variant:10s} {hid:>7d} {direction:8s} run {fmt(f'{x:.3f}' for x in run)}"
              f" (spread {spread(run):.3f})  alone {fmt(f'{x:.3f}' for x in alone)}"
              f" (spread {spread(alone):.3f})")
    for kind in ("wide", "narrow"):
        rs = [r for r in rows if r[0] == kind]
        if rs:
            n = sum(spread(r[3]) > a.wider_than for r in rs)
            print(f"{kind} in the run: {n} of {len(rs)} wider than {a.wider_than:g} alone too")
    return 0


if __name__ == "__main__":
    sys.exit(main())
