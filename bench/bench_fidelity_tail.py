#!/usr/bin/env python3
"""Per-trial fidelity of a sweep: every trial against the same trial run alone, the tail.

Replays the sweep's pattern on a subset: the real workflow (`snakemake --cores 1 trials`,
the workflow profile's executor and CPU budget, its order, its start/end churn, its queue
samplers) runs the paper's definition for the given households in a scratch directory; each
of those trials is compared with the same trial run alone (`latency-divide trial`, one at a
time, reused from --alone DIR when there). It prints, per variant, the share of trials
beyond the per-trial bounds (|Δ norm_tput| > 0.03, or |Δ self-delay| > max(1 ms, 20 %)),
p95 and max of each |Δ|, and how the trials' health verdicts (trial.health) sort the trials
that are beyond the bounds from those that are not. Needs root. Example (about 8 min, plus
23 min for the alone runs the first time):

    .venv/bin/python bench/bench_fidelity_tail.py --alone /var/tmp/ld-alone \\
        --sweep /var/tmp/ld-sweep

--households, --variants and --duration choose the subset (default: 10 households of the
sweep's 3-16 Mbit/s links and the fastest one, cubic, copa-0.5, copa-0.8: 60 trials);
--alone-variants limits the alone runs (default: all of the subset). The sweep as it was
before the fix: --tool-rt-priority 0 --retries 0 (tool ends under the normal scheduler,
unhealthy trials kept). --snakemake passes more arguments to Snakemake (e.g. "--resources
host_load=600").
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml
from _trials import ROOT, VARIANTS, Trial, run_batch, summaries, trial_preconditions

from latency_divide.trial.health import (FIDELITY_NT, FIDELITY_SD_ABS_MS, FIDELITY_SD_REL,
                                         beyond_fidelity)

DEFAULT_HOUSEHOLDS = [1290, 12491, 13133, 12334, 9960, 28928, 615016, 615520, 12512, 27337]
#: Per-trial bounds (docs/emulation.md "Emulation health", issue 22): |Δ norm_tput|, and |Δ self-delay|
#: beyond max(SD_ABS_MS, SD_REL x alone)
NT_BOUND, SD_ABS_MS, SD_REL = FIDELITY_NT, FIDELITY_SD_ABS_MS, FIDELITY_SD_REL
#: Share of trials allowed beyond the bounds
TAIL_SHARE = 0.01
LINKED = ("Snakefile", "rules", "workflow", "config", "profiles", "envs", "resources")


def beyond(a: dict, b: dict) -> tuple[float, float, bool]:
    """Trial ``b`` against the same trial alone, ``a`` (trial.health.beyond_fidelity)."""
    return beyond_fidelity(b, a)


def sweep_config(households: list[int], variants: list[str], duration: float,
                 rt_priority: int, retries: int | None, base: str = "config/config.yaml",
                 repetitions: int = 1) -> dict:
    """The config ``base`` (the paper's: same definitions) restricted to ``households`` and
    ``variants``, the tool ends at SCHED_FIFO ``rt_priority`` (0: the normal scheduler, as
    before the fix)."""
    cfg = yaml.safe_load((ROOT / base).read_text())
    buckets = []
    for b in cfg["households"]["buckets"]:
        ids = [i for i in b["ids"] if i in households]
        if ids:
            buckets.append({**b, "ids": ids})
    cfg["households"]["buckets"] = buckets
    cfg["variants"] = [v for v in cfg["variants"] if v["name"] in variants]
    cfg["trial"]["duration_s"] = duration
    cfg["trial"]["repetitions"] = repetitions
    cfg["companions"] = []
    cfg["testbed"]["tool_rt_priority"] = rt_priority
    if retries is not None:
        cfg["trial"]["retries"] = retries
    return cfg


def run_sweep(scratch: Path, cfg: dict, extra: list[str]) -> float:
    """`snakemake --cores 1 trials` of ``cfg`` in ``scratch`` (the checkout's workflow files
    linked in); returns the wall seconds (0 when every trial was already there)."""
    scratch.mkdir(parents=True, exist_ok=True)
    for name in LINKED:
        link = scratch / name
        if not link.exists():
            link.symlink_to(ROOT / name)
    (scratch / "bench-config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    argv = [str(ROOT / ".venv" / "bin" / "snakemake"), "--cores", "1", "trials",
            "--configfile", "bench-config.yaml", *extra]
    print(f"sweep: {shlex.join(argv)} (in {scratch})", flush=True)
    t0 = time.monotonic()
    subprocess.run(argv, cwd=scratch, check=True)
    return time.monotonic() - t0


def q(x: np.ndarray, p: float) -> float:
    return float(np.percentile(x, p)) if len(x) else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--households", type=int, nargs="+", default=DEFAULT_HOUSEHOLDS)
    ap.add_argument("--variants", nargs="+", default=["cubic", "copa-0.5", "copa-0.8"],
                    choices=list(VARIANTS))
    ap.add_argument("--alone-variants", nargs="+", choices=list(VARIANTS))
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--alone", required=True, help="raw tree of the alone runs (reused)")
    ap.add_argument("--sweep", required=True, help="scratch directory of the sweep (reused "
                    "when its trials are there)")
    ap.add_argument("--tool-rt-priority", type=int, default=5, help="the tool ends' SCHED_FIFO "
                    "priority in the sweep (0: the normal scheduler, as before the fix)")
    ap.add_argument("--retries", type=int, help="trial.retries in the sweep (0: an unhealthy "
                    "trial is kept, not measured again; default: the config's)")
    ap.add_argument("--snakemake", default="", help="more Snakemake arguments")
    a = ap.parse_args()
    if (refused := trial_preconditions()) is not None:
        return refused
    alone_dir, scratch = Path(a.alone), Path(a.sweep)
    alone_variants = a.alone_variants or a.variants
    want = [Trial(h, d, v) for h in a.households for d in ("uplink", "downlink")
            for v in alone_variants]
    have = set(summaries(alone_dir)) if alone_dir.is_dir() else set()
    missing = [t for t in want if t not in have]
    if missing:
        import random

        random.Random(1).shuffle(missing)
        run_batch(missing, alone_dir, duration=a.duration, idle=5.0, window=65536,
                  label="alone", n=1)
    wall = run_sweep(scratch, sweep_config(a.households, a.variants, a.duration,
                                           a.tool_rt_priority, a.retries),
                     shlex.split(a.snakemake))
    A, B = summaries(alone_dir), summaries(scratch / "results" / "raw")
    keys = sorted(set(A) & set(B), key=lambda k: (k.variant, k.household, k.direction))
    print(f"\n{len(B)} sweep trials in {wall:.0f} s, {len(keys)} with an alone run")
    conc = [r["meta"].get("concurrency", 0) for r in B.values()]
    again = sum(1 for r in B.values() if r["meta"].get("attempt", 1) > 1)
    print(f"concurrency median {np.median(conc):.0f}, max {max(conc)}; {again} trials measured "
          "again (a failed attempt or health verdict)")

    ok = True
    result: dict = {"variants": {}, "wall_s": wall, "n": len(keys), "measured_again": again}
    print(f"\n== per variant: |Δ| against alone (bounds: norm_tput {NT_BOUND}, self-delay "
          f"max({SD_ABS_MS:g} ms, {SD_REL:.0%})); at most {TAIL_SHARE:.0%} beyond ==")
    rows = []
    for k in keys:
        dnt, dsd, bad = beyond(A[k], B[k])
        h = B[k]["meta"].get("health", {})
        rows.append((k, dnt, dsd, bad, h))
    for v in sorted({k.variant for k in keys}):
        sel = [r for r in rows if r[0].variant == v]
        nt = np.abs([r[1] for r in sel])
        sd = np.abs([r[2] for r in sel])
        nbad = sum(r[3] for r in sel)
        share = nbad / len(sel)
        ok &= share <= TAIL_SHARE
        result["variants"][v] = {"n": len(sel), "beyond": nbad, "nt_p95": q(nt, 95),
                                 "nt_max": float(nt.max()), "sd_p95": q(sd, 95),
                                 "sd_max": float(sd.max())}
        print(f"{v:9s} n={len(sel):3d} beyond {nbad:2d} ({share:5.1%})  |Δ norm_tput| median "
              f"{np.median(nt):.4f} p95 {q(nt, 95):.4f} max {nt.max():.4f}  |Δ self-delay| "
              f"median {np.median(sd):.2f} p95 {q(sd, 95):.2f} max {sd.max():.2f} ms")
    print("\n== trials beyond the bounds, and their health ==")
    cols = ("tool_wait_ms_per_s", "tool_wait_per_slice_us", "delayline_late_p99_us",
            "cpu_pressure_some_pct", "queue_samples_pct")
    print(f"{'trial':32s} {'Δnt':>7s} {'Δsd':>6s} verdict " + " ".join(f"{c[:14]:>14s}"
                                                                     for c in cols))
    for k, dnt, dsd, bad, h in sorted(rows, key=lambda r: r[1]):
        if bad or h.get("verdict") == "fail":
            name = f"{k.household} {k.direction} {k.variant}"
            print(f"{name:32s} {dnt:+7.3f} {dsd:+6.2f} {h.get('verdict', '?'):7s} "
                  + " ".join(f"{h.get(c) if h.get(c) is not None else float('nan'):14.1f}"
                             for c in cols))
    both = sum(1 for r in rows if r[3] and r[4].get("verdict") == "fail")
    missed = sum(1 for r in rows if r[3] and r[4].get("verdict") != "fail")
    alarm = sum(1 for r in rows if not r[3] and r[4].get("verdict") == "fail")
    result.update(beyond_and_fail=both, beyond_but_pass=missed, within_but_fail=alarm)
    print(f"\nverdicts: {both} beyond the bounds and failed, {missed} beyond but passed, "
          f"{alarm} within but failed")
    print("\n== health of all sweep trials: median / p95 / max ==")
    for c in cols:
        x = np.array([float(r["meta"].get("health", {}).get(c)) for r in B.values()
                      if r["meta"].get("health", {}).get(c) is not None])
        if len(x):
            print(f"{c:26s} {np.median(x):8.2f} {q(x, 95):8.2f} {x.max():8.2f}")
    print(json.dumps(result))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
