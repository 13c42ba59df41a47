#!/usr/bin/env python3
"""Trial starts at once or spaced: does a sweep's first wave bend the slow starts?

Runs the sweep of tests/test_fidelity_tail.py (the real workflow, `snakemake --cores 1
trials`, 12 of the paper's households, Cubic and Copa δ 0.8, 20 s trials: 48 trials, about 28
at once in the first wave) several times, alternating the host's start spacing
(``LATENCY_DIVIDE_START_SPACING``, testbed.startgate: 0 starts every admitted trial at once,
as before; the default spaces starts by 1 s). Each sweep's Copa δ 0.8 downlinks of the
judged households are compared with --alone-reps runs of the same trial alone (one at a time,
reused from --alone): a trial is bent when it is beyond the per-trial bounds against every
alone run (trial.health.beyond_every). Prints per sweep its bent trials (norm_tput,
self-delay, packets lost) and per spacing the totals. Needs root. Example (about 25 min the
first time: 21 alone runs, then 8 sweeps of about 1.5 min):

    .venv/bin/python bench/bench_start_spacing.py --alone /var/tmp/ld-spacing-alone \\
        --scratch /var/tmp/ld-spacing --sweeps 4
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from _trials import Trial, trial_preconditions
from bench_fidelity_tail import run_sweep, sweep_config

from latency_divide.analysis.metrics import summarize_trial
from latency_divide.testbed.startgate import SPACING_ENV, SPACING_S
from latency_divide.trial.health import beyond_every

#: tests/test_fidelity_tail.py's households
HOUSEHOLDS = [11406, 13570, 7884, 797760, 13013, 615514, 615016, 12512, 615520, 1290, 12491,
              27337]
#: the 3-3.5 Mbit/s downlinks whose runs alone repeat (615520's does not: it overshoots alone
#: in about half the runs, tests/test_fidelity_tail.py)
JUDGED = [615514, 615016, 7884, 12512, 13013, 13570, 797760]
DURATION, IDLE = 20.0, 3.0


def alone_runs(out: Path, reps: int) -> dict[int, list[dict]]:
    """At least ``reps`` runs alone of each judged trial, one at a time: every run found under
    ``out/<household>/`` (one raw tree per run, ``run<k>``) counts, the missing ones are run."""
    runs: dict[int, list[dict]] = {}
    for hh in JUDGED:
        found = sorted((out / f"{hh}").glob("*/**/copa-0.8/rep1/meta.json"))
        for k in range(len(found) + 1, reps + 1):
            root = out / f"{hh}" / f"run{k}"
            print(f"alone: {hh} downlink copa-0.8, run {k} of {reps}", flush=True)
            subprocess.run(Trial(hh, "downlink", "copa-0.8").argv(root, DURATION, IDLE, 65536),
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            found += sorted(root.rglob("copa-0.8/rep1/meta.json"))
        runs[hh] = [summarize_trial(m.parent) for m in found]
    return runs


def lost(trial_dir: Path) -> int:
    with tarfile.open(trial_dir / "logs.tar.xz") as t:
        return int(json.load(t.extractfile("sender.json"))["sender"]["packets_lost"])


def judge(raw: Path, alone: dict[int, list[dict]]) -> tuple[list[str], int, int]:
    """(bent trials described, judged trials, max concurrency) of one sweep."""
    bent, n, conc = [], 0, 0
    for m in sorted(raw.rglob("meta.json")):
        meta = json.loads(m.read_text())
        conc = max(conc, meta.get("concurrency", 0))
        if (meta["direction"], meta["variant"]["name"]) != ("downlink", "copa-0.8"):
            continue
        hh = meta["household"]["unit_id"]
        if hh not in alone:
            continue
        n += 1
        got = summarize_trial(m.parent)
        if beyond_every(got, alone[hh]):
            sd = [a["self_delay_mean_ms"] for a in alone[hh]]
            bent.append(f"{hh}: norm_tput {got['norm_tput']:.3f}, self-delay "
                        f"{got['self_delay_mean_ms']:.2f} ms (alone {min(sd):.2f}-{max(sd):.2f}),"
                        f" {lost(m.parent)} packets lost, verdict {meta['health']['verdict']}")
    return bent, n, conc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--alone", required=True, help="the alone runs: DIR/<household>/<run>/ "
                    "raw trees (reused; more are run when fewer than --alone-reps)")
    ap.add_argument("--scratch", required=True, help="a directory per sweep (reused)")
    ap.add_argument("--sweeps", type=int, default=4, help="sweeps per spacing (default 4)")
    ap.add_argument("--alone-reps", type=int, default=3, help="alone runs per trial, at least (3)")
    ap.add_argument("--spacing", type=float, default=SPACING_S,
                    help=f"the spaced sweeps' spacing, s (default {SPACING_S:g})")
    a = ap.parse_args()
    if (refused := trial_preconditions()) is not None:
        return refused
    alone = alone_runs(Path(a.alone), a.alone_reps)
    cfg = sweep_config(HOUSEHOLDS, ["cubic", "copa-0.8"], DURATION, 5, None)
    cfg["trial"]["idle_s"] = IDLE
    totals: dict[float, list[int]] = {}
    for i in range(a.sweeps):
        for spacing in (0.0, a.spacing):
            os.environ[SPACING_ENV] = f"{spacing:g}"
            scratch = Path(a.scratch) / f"spacing-{spacing:g}-{i + 1}"
            wall = run_sweep(scratch, cfg, [])
            bent, n, conc = judge(scratch / "results" / "raw", alone)
            t = totals.setdefault(spacing, [0, 0, 0])
            t[0] += 1
            t[1] += len(bent)
            t[2] += n
            print(f"sweep {i + 1}, spacing {spacing:g} s: {wall:.0f} s, up to {conc} at once, "
                  f"{len(bent)} of {n} judged trials bent" + "".join(f"\n  {b}" for b in bent),
                  flush=True)
    print("\n== spacing: sweeps, judged trials bent (beyond every alone run) ==")
    for spacing, (sweeps, nbent, n) in totals.items():
        print(f"{spacing:4g} s: {sweeps} sweeps, {nbent} of {n} bent "
              f"({nbent / sweeps:.2f} a sweep)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
