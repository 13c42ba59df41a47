#!/usr/bin/env python3
"""Repetitions of the same trial against each other: does a definition give one result, or
does it flip between regimes (issue 22: 7884 and 799254 uplink Copa 0.2 lost 60 % of their
packets in a loaded sweep, 23 % in six runs alone, and their health verdicts passed)?

For every trial measured more than once (same definition id, household, direction and
variant; repetitions of one run, or of several raw roots such as the published reference and
config/paper-rerun.yaml's repetition 2), its repetitions are compared pair by pair:

* beyond the per-trial fidelity bounds (docs/emulation.md "Emulation health": |Δ norm_tput| > 0.03 or
  |Δ self-delay| > max(1 ms, 20 %)), and
* a loss-regime flip: the sender's loss rates (sender_loss_pct: packets declared lost per
  packet sent) of two repetitions differ by more than 15 points and by a factor of 1.5.

Prints the share of groups with a repetition beyond the bounds, the flips (with their health
verdicts and how many trials ran at once), and per variant the spread of norm_tput.

    .venv/bin/python bench/bench_repeatability.py RAW [RAW ...] [--definition ID ...]
                                                  [--json out.json]

--definition keeps only the trials of those definition ids (for example one population
companion's four variants, whose repeated tenth is measured three times); the per-variant
lines are then per definition.

Exit 0 always: this is a measurement, not a gate.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from _trials import ROOT  # noqa: F401  (puts src/ on the path)

from latency_divide.analysis.metrics import summarize_trial
from latency_divide.analysis.reader import TrialInvalid
from latency_divide.trial.health import beyond_fidelity
from latency_divide.trial.layout import parse_trial_path
from latency_divide.trial import rawio
from latency_divide.trial.packs import every_trial

#: a loss-regime flip: two repetitions' loss rates this many percentage points apart, and ...
FLIP_POINTS = 15.0
#: ... this factor apart (the larger over the smaller)
FLIP_FACTOR = 1.5
#: a group whose norm_tput range is above this varies by more than the per-trial bound (0.03)
WIDE = 0.03


def load(roots: list[Path], definitions: set[str] | None = None) -> dict[tuple, list[dict]]:
    """summarize_trial() rows grouped by (definition, household, direction, variant)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for raw in roots:
        for d in every_trial(raw):  # loose and packed
            key = parse_trial_path(d.relative_to(raw))
            if definitions and key.definition_id not in definitions:
                continue
            try:
                r = summarize_trial(d)
            except TrialInvalid as e:
                print(f"skipped: {e}", file=sys.stderr)
                continue
            r["verdict"] = (json.loads(rawio.read_text(d, "meta.json")).get("health")
                            or {}).get("verdict", "unknown")
            groups[key._replace(repetition=0)].append(r)
    return {k: v for k, v in groups.items() if len(v) >= 2}


def is_flip(a: float, b: float) -> bool:
    if a != a or b != b:  # NaN: no loss report (tperf)
        return False
    lo, hi = sorted((a, b))
    return hi - lo > FLIP_POINTS and hi > FLIP_FACTOR * max(lo, 1e-9)


def pairs(rows: list[dict]):
    return ((a, b) for i, a in enumerate(rows) for b in rows[i + 1:])


def beyond(a: dict, b: dict) -> bool:
    """Beyond the per-trial bounds whichever of the two is taken as the reference."""
    return beyond_fidelity(a, b)[2] and beyond_fidelity(b, a)[2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("raw", type=Path, nargs="+")
    ap.add_argument("--definition", action="append", metavar="ID",
                    help="only this definition id (repeatable)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    groups = load(a.raw, set(a.definition or ()))

    def label(key) -> str:
        return f"{key.variant} {key.definition_id}" if a.definition else key.variant

    if not groups:
        print("no trial measured more than once"
              + (f" in {', '.join(a.definition)}" if a.definition else ""), file=sys.stderr)
        return 1
    trials = sum(len(v) for v in groups.values())
    print(f"{len(groups)} trials measured more than once ({trials} repetitions)")
    outside, flips, spread = [], [], defaultdict(list)
    for key, rows in sorted(groups.items()):
        spread[label(key)].append(max(r["norm_tput"] for r in rows)
                                   - min(r["norm_tput"] for r in rows))
        if any(beyond(a, b) for a, b in pairs(rows)):
            outside.append(key)
        if any(is_flip(float(a["sender_loss_pct"]), float(b["sender_loss_pct"]))
               for a, b in pairs(rows)):
            flips.append((key, rows))
    print(f"groups with two repetitions beyond the per-trial bounds: {len(outside)} of "
          f"{len(groups)} ({100 * len(outside) / max(len(groups), 1):.1f} %)")
    print(f"loss-regime flips (two repetitions > {FLIP_POINTS:g} points and x{FLIP_FACTOR:g} "
          f"apart): {len(flips)} of {len(groups)}")
    for key, rows in flips:
        reps = "; ".join(f"rep{r['repetition']} loss {r['sender_loss_pct']:.1f} % norm_tput "
                         f"{r['norm_tput']:.3f} ({r['concurrency']} at once, {r['verdict']})"
                         for r in sorted(rows, key=lambda r: r["repetition"]))
        print(f"  {key.definition_id} {key.household} {key.direction} {key.variant}: {reps}")
    print("\nper variant: groups; beyond the bounds; loss flips; norm_tput range within a "
          f"group median / p95 / max; groups whose range > {WIDE:g}")
    for v, xs in sorted(spread.items()):
        xs = sorted(xs)
        p95 = xs[min(len(xs) - 1, int(0.95 * len(xs)))]
        n_out = sum(label(k) == v for k in outside)
        n_flip = sum(label(k) == v for k, _ in flips)
        print(f"  {v:12s} {len(xs):3d}; {n_out:3d}; {n_flip:2d};  {statistics.median(xs):.4f} / "
              f"{p95:.4f} / {xs[-1]:.4f}; {sum(x > WIDE for x in xs)}")
    if a.json:
        a.json.write_text(json.dumps({
            "groups": len(groups), "beyond": len(outside),
            "flips": [{"trial": "/".join(map(str, k[:4])),
                       "repetitions": [{k2: r[k2] for k2 in ("repetition", "sender_loss_pct",
                                                             "norm_tput", "concurrency",
                                                             "verdict")} for r in rows]}
                      for k, rows in flips]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
