#!/usr/bin/env python3
"""Published trials against the same trials run alone: which published definitions carry a
bias from the load they were measured under (issue 22, section 5).

For each config given (a published definition set: the paper's config/config.yaml, a
companion), draws a seeded sample of its trials (repetition ``--repetition``, present in the
reference raw tree), runs each one alone (one `latency-divide trial` at a time, nothing else of
ours running) into ``--out`` (reused: trials already there are not run again), and prints, per
config and variant, the published value beside the alone one, |Δ norm_tput| and |Δ self-delay|
with the per-trial bounds of docs/emulation.md "Emulation health" (0.03; max(1 ms, 20 %)), the share beyond
them, p95 and max. Needs root. Example (12 trials per config, about 15 min each):

    .venv/bin/dvc pull
    .venv/bin/python bench/bench_alone_sample.py --reference results/raw \\
        --out /var/tmp/ld-alone config/config.yaml config/fast-links.yaml
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

import numpy as np
from _trials import CLI, ROOT
from bench_fidelity_tail import beyond

from latency_divide.analysis.metrics import summarize_trial
from latency_divide.config import load_config
from latency_divide.trial import rawio
from latency_divide.trial.layout import trial_meta_path
from latency_divide.trial.sweep import alone_args, alone_variant, trial_ids


def trial_argv(cfg, hid: int, direction: str, variant: str, rep: int, out: Path) -> list[str]:
    """`latency-divide trial` for one trial of ``cfg``: the same definition as its workflow."""
    return [str(CLI), *alone_args(cfg, hid, direction, variant, rep, out)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configs", nargs="+", help="published definition sets (config files)")
    ap.add_argument("--reference", required=True, type=Path, help="published raw tree")
    ap.add_argument("--out", required=True, type=Path, help="raw tree of the alone runs")
    ap.add_argument("--sample", type=int, default=12, help="trials per config")
    ap.add_argument("--seed", type=int, default=22)
    ap.add_argument("--repetition", type=int, default=1)
    ap.add_argument("--variants", nargs="+", help="only these variants")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces)", file=sys.stderr)
        return 2
    rows = defaultdict(list)
    for path in a.configs:
        cfg = load_config(ROOT / path)
        pool = [t for t in trial_ids(cfg) if t[4] == 1
                and (not a.variants or t[3] in a.variants)
                and rawio.exists(trial_meta_path(a.reference, *t[:4], a.repetition).parent,
                                 "meta.json")]
        if not pool:
            print(f"{path}: no published trial of repetition {a.repetition} under "
                  f"{a.reference}", file=sys.stderr)
            return 1
        sample = random.Random(a.seed).sample(pool, min(a.sample, len(pool)))
        t0 = time.monotonic()
        for k, (def_id, hid, direction, variant, _) in enumerate(sample, 1):
            alone = trial_meta_path(a.out, def_id, hid, direction, alone_variant(cfg, variant), 1)
            if not alone.exists():
                p = subprocess.run(trial_argv(cfg, hid, direction, variant, 1, a.out),
                                   capture_output=True, text=True)
                if p.returncode != 0:
                    print(f"  {path} {hid} {direction} {variant}: trial failed: "
                          f"{p.stderr[-400:]}", file=sys.stderr)
                    continue
            el = time.monotonic() - t0
            print(f"  {path}: trial {k} of {len(sample)} alone, elapsed {el:.0f} s, ETA "
                  f"{el / k * (len(sample) - k):.0f} s", flush=True)
            pub = summarize_trial(trial_meta_path(a.reference, def_id, hid, direction, variant,
                                                  a.repetition).parent)
            new = summarize_trial(alone.parent)
            dnt, dsd, bad = beyond(new, pub)
            rows[path].append((variant, hid, direction, float(pub["norm_tput"]),
                               float(new["norm_tput"]), dnt, dsd, bad))
    print("\nΔ = published - alone; bounds |Δ norm_tput| <= 0.03, |Δ self-delay| <= "
          "max(1 ms, 20 % of alone)")
    for path, rs in rows.items():
        print(f"\n== {path}: {len(rs)} trials ==")
        for variant, hid, direction, pub, new, dnt, dsd, bad in sorted(rs):
            print(f"  {variant:12s} {hid:>7d} {direction:8s} published {pub:.3f} alone {new:.3f}"
                  f"  Δnt {dnt:+.3f}  Δsd {dsd:+6.2f} ms{'  BEYOND' if bad else ''}")
        dn = np.abs([r[5] for r in rs])
        share = sum(r[7] for r in rs) / len(rs)
        print(f"  beyond the bounds: {sum(r[7] for r in rs)} of {len(rs)} ({100 * share:.0f} %);"
              f" |Δnt| median {np.median(dn):.3f} p95 {np.percentile(dn, 95):.3f} max "
              f"{dn.max():.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
