#!/usr/bin/env python3
"""A fresh clone's sweep against issue 57's targets, in one row: its trials, the share whose
first attempt failed, the share kept with a failed verdict, how many are lower than the
envelope of the published repetitions by more than 0.05 in normalized throughput, and the
trials' wall time against the host's floor (the final attempts' CPU, meta.json ``cpu_s``,
over the cores).

    .venv/bin/python bench/bench_sweep_targets.py CLONE/results/raw results/raw \\
        --make-log CLONE.log --cores 2

(the reference: the published run, `dvc pull`; every repetition of a trial there makes its
envelope). Trials are matched by definition, household, direction and variant. The trials'
wall time runs from the first trial job's start to the last trial's end (meta.json timing,
ops.sweeptiming); ``--make-log``, a log whose last line holds ``end=UNIX`` and whose file
beside it, ``.start``, the run's start, adds the whole command's wall time (set-up, host
check and analysis included).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from _trials import ROOT  # noqa: F401  (puts src/ on the path)

from latency_divide.analysis.metrics import summarize_trial
from latency_divide.ops.sweeptiming import sweep_timing
from latency_divide.trial import rawio
from latency_divide.trial.health import beyond_every, rejudge
from latency_divide.trial.layout import parse_trial_path
from latency_divide.trial.packs import every_trial

#: Issue 57's targets for the sweep.
MAX_KEPT_FAILED = 0.02
MAX_FIRST_FAILED = 0.05
MAX_LOWER = 3
MAX_WALL_RATIO = 1.3


def load(raw: Path, only: set | None = None) -> dict:
    """(definition, household, direction, variant) -> list of (row, meta) per repetition;
    ``only``: those keys alone (the reference's trials of the sweep's definitions)."""
    out: dict = {}
    for d in every_trial(raw):
        key = parse_trial_path(d.relative_to(raw))._replace(repetition=0)
        if only is not None and key not in only:
            continue
        meta = json.loads(rawio.read_text(d, "meta.json"))
        out.setdefault(key, []).append((summarize_trial(d), meta))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("new", type=Path, help="the sweep's raw directory")
    ap.add_argument("reference", type=Path, help="the published raw directory")
    ap.add_argument("--cores", type=int, default=os.cpu_count())
    ap.add_argument("--make-log", type=Path, help="the run's log (see above)")
    ap.add_argument("--rejudge", action="store_true",
                    help="judge the kept trials by today's bounds (trial.health.rejudge), not "
                         "by the verdict they recorded")
    a = ap.parse_args()
    new = load(a.new)
    ref = load(a.reference, set(new))
    metas = [m for reps in new.values() for _r, m in reps]
    n = len(metas)
    if not n:
        print(f"no trials under {a.new}", file=sys.stderr)
        return 2
    again = sum(int(m.get("attempt", 1)) > 1 for m in metas)
    alone = sum(bool(m.get("alone")) for m in metas)
    def verdict(m: dict) -> dict:
        return (rejudge(m) or {}) if a.rejudge else (m.get("health") or {})

    kept = [(key, m) for key, reps in new.items() for _r, m in reps
            if verdict(m).get("verdict") == "fail"]
    lower = []
    matched = 0
    for key, reps in new.items():
        if key not in ref:
            continue
        matched += 1
        floor_nt = min(r["norm_tput"] for r, _m in ref[key])
        for r, m in reps:
            if r["norm_tput"] < floor_nt - 0.05:
                lower.append((key, r["norm_tput"], floor_nt, m["health"].get("verdict")))
    cpu = sum(v for m in metas for v in (m.get("cpu_s") or {}).values()
              if isinstance(v, (int, float)))
    floor_s = cpu / a.cores
    span_s = sweep_timing(a.new)["span_s"]
    print(f"trials: {n} ({matched} matched in the reference)")
    print(f"first attempt failed: {again} ({100 * again / n:.1f} %, target <= "
          f"{100 * MAX_FIRST_FAILED:g} %); {alone} measured once more alone")
    print(f"kept with a failed verdict: {len(kept)} ({100 * len(kept) / n:.1f} %, target <= "
          f"{100 * MAX_KEPT_FAILED:g} %)")
    for key, m in kept:
        row = next(r for r, mm in new[key] if mm is m)
        agrees = ("no reference" if key not in ref else
                  "beyond the per-trial bounds against every published repetition"
                  if beyond_every(row, [r for r, _m in ref[key]])
                  else "within the per-trial bounds of a published repetition")
        print(f"  {key.household} {key.direction} {key.variant} (attempt {m.get('attempt')}"
              f"{', alone' if m.get('alone') else ''}, {m.get('capacity_kbps')} kbit/s): "
              + "; ".join(verdict(m).get("reasons", [])) + f"; {agrees}")
    print(f"lower than the published envelope by > 0.05 in normalized throughput: {len(lower)} "
          f"(target <= {MAX_LOWER})")
    for key, nt, fl, verdict in lower:
        print(f"  {key.household} {key.direction} {key.variant}: {nt:.3f} vs {fl:.3f} "
              f"({verdict})")
    print(f"trials' wall time {span_s / 60:.1f} min against the host's floor {floor_s / 60:.1f} "
          f"min ({cpu:.0f} CPU s over {a.cores} cores): {span_s / floor_s:.2f} x (target <= "
          f"{MAX_WALL_RATIO:g} x)")
    if a.make_log:
        start = float(a.make_log.with_suffix(".start").read_text())
        last = a.make_log.read_text().strip().splitlines()[-1]
        fields = dict(f.split("=", 1) for f in last.split() if "=" in f)
        print(f"whole command: rc={fields.get('rc')}, {(float(fields['end']) - start) / 60:.1f} "
              "min (set-up, host check, trials, analysis)")
    ok = (len(kept) <= MAX_KEPT_FAILED * n and again <= MAX_FIRST_FAILED * n
          and len(lower) <= MAX_LOWER and span_s <= MAX_WALL_RATIO * floor_s)
    print("targets: " + ("met" if ok else "NOT met"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
