#!/usr/bin/env python3
"""Did the faster instrument move the numbers? Published trials against the same trials measured
again with today's instrument, each against the spread of its own repeated runs (issue 40,
step 6).

For each ``CONFIG:N`` given, draws a seeded sample of N published trials of that definition set
(present in the reference raw tree; for a config with fast $40+ downlinks, half the sample is
drawn from those), measures each ``--reps`` times with the instrument of this checkout (the
same definition as its workflow's trial, trial.sweep.alone_args), admitted by the workflow's
CPU budget as a sweep is (ops.admission.trial_host_load against the profile's host_load), into
``--out`` (reused: runs already there are not measured again, so an interrupted run resumes),
and prints, per config and variant:

- the published value beside the new runs' median and spread (max - min) of norm_tput and
  self-induced delay;
- whether the published trial agrees with at least one new run within the per-trial bounds
  (trial.health.beyond_every: |Δ norm_tput| <= 0.03, |Δ self-delay| <= max(1 ms, 20 %)), the
  repetition method of the per-trial fidelity work: a trial whose own runs spread wider than
  the bounds is right when it agrees with one of them;
- the instrument each new run recorded (trial.instrument) and its health verdict.

Needs root and the published raw data (`dvc pull`). Example (40 paper trials and 20 of the
fast-links recheck, 2 runs each; about 40 minutes on 2 cores):

    .venv/bin/python bench/bench_instrument_fidelity.py --reference results/raw \\
        --out /var/tmp/ld-fidelity config/config.yaml:40 config/fast-links-checked.yaml:20

Exit 0 always: this is a measurement, not a gate.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
from _trials import CLI, ROOT, profile_budget, trial_preconditions

from latency_divide.analysis.metrics import summarize_trial
from latency_divide.config import load_config
from latency_divide.data.households import get_household
from latency_divide.links.plan import make_linkplan
from latency_divide.ops.admission import trial_host_load
from latency_divide.trial import rawio
from latency_divide.trial.health import beyond_every, beyond_fidelity
from latency_divide.trial.instrument import generation_of
from latency_divide.trial.layout import trial_meta_path
from latency_divide.trial.sweep import alone_args, alone_variant, trial_ids


def sample(cfg, reference: Path, n: int, seed: int,
           only: set[tuple] | None = None) -> list[tuple]:
    """A seeded sample of ``n`` published trials of ``cfg`` (one repetition each); half of it
    from downlinks of $40 or more where the config has them. ``only``: draw from these
    (household, direction) links, or (household, direction, variant) trials, alone."""
    pool = []
    for t in trial_ids(cfg):
        if only and (t[1], t[2]) not in only and (t[1], t[2], t[3]) not in only:
            continue
        if rawio.exists(trial_meta_path(reference, *t).parent, "meta.json"):
            pool.append(t)
    # one repetition per (household, direction, variant): the lowest published
    first: dict[tuple, tuple] = {}
    for t in sorted(pool, key=lambda t: t[4]):
        first.setdefault(t[:4], t)
    pool = sorted(first.values())
    rng = random.Random(seed)
    dear = [t for t in pool if t[2] == "downlink"
            and cfg.bucket_of_household(t[1]) in ("40-50", "50+")]
    if dear and len(dear) < len(pool):
        k = min(len(dear), n // 2)
        picked = rng.sample(dear, k)
        rest = [t for t in pool if t not in picked]
        return picked + rng.sample(rest, min(n - k, len(rest)))
    return rng.sample(pool, min(n, len(pool)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("samples", nargs="+", metavar="CONFIG:N",
                    help="a published definition set and how many of its trials to draw")
    ap.add_argument("--reference", required=True, type=Path, help="published raw tree")
    ap.add_argument("--out", required=True, type=Path, help="raw tree of the new runs")
    ap.add_argument("--reps", type=int, default=2, help="new runs per trial (default 2)")
    ap.add_argument("--seed", type=int, default=40)
    ap.add_argument("--budget", type=int, default=None,
                    help="host_load budget (default: the workflow profile's)")
    ap.add_argument("--only", action="append", default=[],
                    metavar="HOUSEHOLD:DIRECTION[:VARIANT]",
                    help="draw only from these links or trials (repeatable), e.g. "
                    "798212:downlink or 657938:downlink:copa-0.5")
    a = ap.parse_args()
    only: set[tuple] = set()
    for item in a.only:
        hid, direction, *variant = item.split(":")
        if not hid.isdigit() or direction not in ("uplink", "downlink") or len(variant) > 1:
            ap.error(f"--only {item!r}: want HOUSEHOLD:DIRECTION[:VARIANT], e.g. "
                     "798212:downlink")
        only.add((int(hid), direction, *variant))
    jobs, plans = [], []
    for item in a.samples:
        path, _, n = item.rpartition(":")
        if not path or not n.isdigit() or int(n) < 1:
            ap.error(f"{item!r}: want CONFIG:N, N >= 1 (e.g. config/config.yaml:40)")
        cfg = load_config(ROOT / path)
        picked = sample(cfg, a.reference, int(n), a.seed, only)
        if not picked:
            print(f"{path}: no published trial under {a.reference}", file=sys.stderr)
            return 1
        plans.append((path, cfg, picked))
        for t in picked:
            for r in range(1, a.reps + 1):
                jobs.append((path, cfg, t, r))
    if (rc := trial_preconditions()) is not None:
        return rc
    budget = a.budget or profile_budget()

    def new_meta(cfg, t, r) -> Path:
        def_id, hid, direction, variant, _ = t
        return trial_meta_path(a.out, def_id, hid, direction, alone_variant(cfg, variant), r)

    todo = [j for j in jobs if not new_meta(j[1], j[2], j[3]).exists()]
    load = {}
    for j in todo:
        _, cfg, (def_id, hid, direction, variant, _), _ = j
        tool = cfg.tool_for(cfg.variant(variant))
        load[id(j)] = trial_host_load(make_linkplan(get_household(hid), qfactor=cfg.qfactor),
                                      direction, tool.window_bytes, tool.name,
                                      busy_s=cfg.trial.idle_s + cfg.trial.duration_s)
    print(f"{len(jobs)} runs, {len(jobs) - len(todo)} already in {a.out}; budget {budget}",
          flush=True)
    running: list[tuple[subprocess.Popen, tuple]] = []
    failed = []
    t0, done = time.monotonic(), 0
    while todo or running:
        used = sum(load[id(j)] for _, j in running)
        for j in list(todo):
            if used + load[id(j)] <= budget or not running:
                _, cfg, t, r = j
                argv = [str(CLI), *alone_args(cfg, t[1], t[2], t[3], r, a.out)]
                running.append((subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                                 stderr=subprocess.PIPE, text=True), j))
                todo.remove(j)
                used += load[id(j)]
        for p, j in list(running):
            if p.poll() is None:
                continue
            running.remove((p, j))
            done += 1
            if p.returncode != 0:
                failed.append((j, p.stderr.read()[-300:]))
            el = time.monotonic() - t0
            left = len(todo) + len(running)
            print(f"  run {done} of {done + left}: elapsed {el:.0f} s, ETA "
                  f"{el / done * left:.0f} s, {len(running)} running", flush=True)
        time.sleep(0.2)
    for (path, _, t, r), err in failed:
        print(f"  {path} {t[1]} {t[2]} {t[3]} run {r}: failed: {err}", file=sys.stderr)

    print("\nper trial: published (old instrument) against its new runs; agree = within the "
          "per-trial bounds (|Δnt| <= 0.03, |Δsd| <= max(1 ms, 20 %)) of at least one new run")
    for path, cfg, picked in plans:
        rows = defaultdict(list)
        for t in picked:
            pub = summarize_trial(trial_meta_path(a.reference, *t).parent)
            news = []
            for r in range(1, a.reps + 1):
                m = new_meta(cfg, t, r)
                if m.exists():
                    row = summarize_trial(m.parent)
                    row["instrument"] = generation_of(rawio.full_meta(m.parent))
                    news.append(row)
            if not news:
                continue
            agree = not beyond_every(pub, news)
            nts = [float(x["norm_tput"]) for x in news]
            sds = [float(x["self_delay_mean_ms"]) for x in news]
            best = min((beyond_fidelity(pub, x) for x in news),
                       key=lambda d: (d[2], abs(d[0])))
            rows[t[3]].append((t[1], t[2], float(pub["norm_tput"]), np.median(nts),
                               max(nts) - min(nts), float(pub["self_delay_mean_ms"]),
                               np.median(sds), max(sds) - min(sds), best, agree,
                               ",".join(sorted({x["instrument"] for x in news})),
                               ",".join(str(x["health_verdict"]) for x in news)))
        n = sum(len(v) for v in rows.values())
        bad = sum(not r[9] for v in rows.values() for r in v)
        print(f"\n== {path}: {n} trials, {bad} beyond the bounds of every new run ==")
        for variant, rs in sorted(rows.items()):
            print(f"  {variant}: {sum(r[9] for r in rs)} of {len(rs)} agree")
            for (hid, direction, pnt, nnt, snt, psd, nsd, ssd, best, agree, inst,
                 verdicts) in sorted(rs):
                print(f"    {hid:>7d} {direction:8s} nt {pnt:.3f} | new {nnt:.3f} (spread "
                      f"{snt:.3f})  sd {psd:6.2f} | new {nsd:6.2f} (spread {ssd:5.2f}) ms  "
                      f"closest Δnt {best[0]:+.3f} Δsd {best[1]:+.2f}  {inst} {verdicts}"
                      f"{'' if agree else '  BEYOND'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
