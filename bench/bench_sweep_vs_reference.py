#!/usr/bin/env python3
"""A sweep against a reference run of the same definitions, trial by trial: how many trials
are lower than the reference by more than 0.05 / 0.10 in normalized throughput, the tail of
|Δ norm_tput| and |Δ self-delay| per variant, and the health verdicts of the new trials.

    .venv/bin/python bench/bench_sweep_vs_reference.py NEW/results/raw results/raw

(the reference: the published run, `dvc pull`). Trials are matched by definition id,
household, direction, variant and repetition; only trials present in both count. With
--any-repetition, repetitions are ignored (a re-measurement as another repetition, such as
config/paper-rerun.yaml's repetition 2 against the reference's 1; each side must then hold
one repetition per trial).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
from _trials import ROOT  # noqa: F401  (puts src/ on the path)

from latency_divide.analysis.metrics import summarize_trial
from latency_divide.trial.health import beyond_fidelity
from latency_divide.trial.layout import parse_trial_path
from latency_divide.trial import rawio
from latency_divide.trial.packs import every_trial


def load(raw: Path, any_repetition: bool = False) -> dict:
    out = {}
    for d in every_trial(raw):  # loose and packed
        key = parse_trial_path(d.relative_to(raw))
        if any_repetition:
            key = key._replace(repetition=0)
            if key in out:
                sys.exit(f"{d}: a second repetition of {key}; --any-repetition needs one")
        r = summarize_trial(d)
        r["health"] = json.loads(rawio.read_text(d, "meta.json")).get("health") or {}
        out[key] = r
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("new", type=Path)
    ap.add_argument("reference", type=Path)
    ap.add_argument("--any-repetition", action="store_true")
    a = ap.parse_args()
    new = load(a.new, a.any_repetition)
    ref = load(a.reference, a.any_repetition)
    keys = sorted(set(new) & set(ref))
    print(f"{len(new)} new trials, {len(keys)} matched in the reference")
    verdicts = Counter(new[k]["health"].get("verdict", "unknown") for k in new)
    print(f"health verdicts of the new trials: {dict(verdicts)}")
    lower5 = [k for k in keys if new[k]["norm_tput"] < ref[k]["norm_tput"] - 0.05]
    lower10 = [k for k in keys if new[k]["norm_tput"] < ref[k]["norm_tput"] - 0.10]
    print(f"lower than the reference by > 0.05: {len(lower5)}; by > 0.10: {len(lower10)}")
    for k in lower5:
        print(f"  {k.household} {k.direction} {k.variant}: {new[k]['norm_tput']:.3f} vs "
              f"{ref[k]['norm_tput']:.3f} ({new[k]['health'].get('verdict', 'unknown')})")
    beyond = [k for k in keys if beyond_fidelity(new[k], ref[k])[2]]
    print(f"beyond the per-trial bounds (docs/emulation.md \"Emulation health\"): {len(beyond)} of "
          f"{len(keys)}")
    print("\nper variant: |Δ norm_tput| median / p95 / max; |Δ self-delay| ms median / p95 / max")
    for v in sorted({k.variant for k in keys}):
        ks = [k for k in keys if k.variant == v]
        nt = np.abs([new[k]["norm_tput"] - ref[k]["norm_tput"] for k in ks])
        sd = np.abs([new[k]["self_delay_mean_ms"] - ref[k]["self_delay_mean_ms"] for k in ks])
        print(f"  {v:10s} n={len(ks):3d}  {np.median(nt):.4f} / {np.percentile(nt, 95):.4f} / "
              f"{nt.max():.4f};  {np.median(sd):.2f} / {np.percentile(sd, 95):.2f} / "
              f"{sd.max():.2f}")
    return 0 if not lower10 and len(lower5) <= 3 else 1


if __name__ == "__main__":
    sys.exit(main())
