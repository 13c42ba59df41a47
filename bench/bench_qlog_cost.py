#!/usr/bin/env python3
"""What tperf's qlog costs a trial: the same trials alone with and without ``--qlog``.

The tperf population companion (config/population-mvfst.yaml) takes Facebook's transport RTT
from the sender's qlog (tool.qlog), which mvfst writes as pretty-printed JSON with an event for
every packet. That costs the sender CPU in its event loop; a measurement it bends would be a
different measurement. This bench runs each trial of a subset alone (`latency-divide trial`,
one at a time), once with the qlog and once without, in alternating order, ``--reps`` times,
and prints per trial the norm_tput and self-delay of both, the sender's CPU, the qlog's size
and whether the pair is beyond the per-trial fidelity bounds (|Δ norm_tput| > 0.03 or |Δ
self-delay| > max(1 ms, 20 %)); then per variant the share of pairs beyond and the mean Δ.
With ``--reps`` > 1 each repetition pairs with the same repetition. Needs root and tperf.

    .venv/bin/python bench/bench_qlog_cost.py --tool-path tperf --out /var/tmp/ld-qlog \\
        [--households 615050,9646,799384,805684] [--variants cubic,bbr,copa-0.04,copa-0.5] \\
        [--direction downlink] [--duration 20] [--reps 1]

Trials already under --out are reused (the bench resumes).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _trials import CLI, trial_preconditions

from latency_divide.analysis.metrics import summarize_trial
from latency_divide.data.households import get_household
from latency_divide.links.plan import make_linkplan
from latency_divide.trial import rawio
from latency_divide.trial.health import beyond_fidelity

VARIANTS = {"cubic": ("cubic", None), "bbr": ("bbr", None), "copa-0.04": ("copa", 0.04),
            "copa-0.5": ("copa", 0.5)}
WINDOW = 16 * 1024 * 1024  # unbound, as config/population-mvfst.yaml


def argv(hh: int, direction: str, variant: str, rep: int, qlog: bool, a) -> list[str]:
    cc, delta = VARIANTS[variant]
    out = a.out / ("qlog" if qlog else "plain")
    cmd = [str(CLI), "trial", str(hh), "--direction", direction, "--cc", cc,
           "--duration", f"{a.duration:g}", "--repetition", str(rep), "--tool", "tperf",
           "--tool-path", a.tool_path, "--window", str(WINDOW), "--out", str(out),
           "--retries", "0"]
    return cmd + (["--delta", f"{delta:g}"] if delta is not None else []) + \
        (["--qlog"] if qlog else [])


def find(out: Path, hh: int, direction: str, variant: str, rep: int) -> Path | None:
    hits = sorted(out.glob(f"def-*/{hh}/{direction}/{variant}/rep{rep}/meta.json"))
    return hits[0].parent if hits else None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tool-path", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--households", default="615050,9646,799384,805684")
    p.add_argument("--variants", default="cubic,bbr,copa-0.04,copa-0.5")
    p.add_argument("--direction", default="downlink", choices=("uplink", "downlink"))
    p.add_argument("--duration", type=float, default=20.0)
    p.add_argument("--reps", type=int, default=1)
    a = p.parse_args()
    if (rc := trial_preconditions()) is not None:
        return rc
    hhs = [int(h) for h in a.households.split(",")]
    variants = a.variants.split(",")
    for v in variants:
        if v not in VARIANTS:
            sys.exit(f"--variants: {v!r} is not one of {', '.join(VARIANTS)}")
    jobs = [(h, v, r, q) for r in range(1, a.reps + 1) for h in hhs for v in variants
            for q in ((False, True) if (h + r) % 2 else (True, False))]
    t0, done = time.monotonic(), 0
    for k, (h, v, r, q) in enumerate(jobs, 1):
        if find(a.out / ("qlog" if q else "plain"), h, a.direction, v, r) is None:
            cmd = argv(h, a.direction, v, r, q, a)
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                print(f"  trial {h} {v} rep{r} qlog={q} failed: {res.stderr[-400:]}",
                      file=sys.stderr)
            done += 1
        el = time.monotonic() - t0
        eta = el / done * (len(jobs) - k) if done else 0.0
        print(f"  {k}/{len(jobs)} trials, elapsed {el:.0f} s, ETA {eta:.0f} s", flush=True)

    print("\nhousehold  Mbit/s  variant    rep  norm_tput plain/qlog  self-delay ms plain/qlog"
          "  sender CPU s plain/qlog  qlog MB  beyond")
    by_variant: dict[str, list[tuple[float, float, bool]]] = {v: [] for v in variants}
    for r in range(1, a.reps + 1):
        for h in hhs:
            mbit = make_linkplan(get_household(h)).shaper(a.direction).rate_kbit / 1000
            for v in variants:
                d0 = find(a.out / "plain", h, a.direction, v, r)
                d1 = find(a.out / "qlog", h, a.direction, v, r)
                if d0 is None or d1 is None:
                    continue
                r0, r1 = summarize_trial(d0), summarize_trial(d1)
                m0, m1 = rawio.full_meta(d0), rawio.full_meta(d1)
                qmb = sum(f["bytes"] for f in json.loads(rawio.read_text(d1, "qlog_summary.json"))
                          ["qlogs"]) / 1e6
                dnt, dsd, bad = beyond_fidelity(r1, r0)
                by_variant[v].append((dnt, dsd, bad))
                print(f"{h:>9}  {mbit:6.1f}  {v:<9}  {r:>3}  {r0['norm_tput']:.3f}/"
                      f"{r1['norm_tput']:.3f}          {r0['self_delay_mean_ms']:7.2f}/"
                      f"{r1['self_delay_mean_ms']:7.2f}      {m0['cpu_s']['sender']:5.1f}/"
                      f"{m1['cpu_s']['sender']:5.1f}             {qmb:6.0f}   "
                      f"{'BEYOND' if bad else ''}")
    print("\nvariant    pairs  beyond  mean Δ norm_tput  mean Δ self-delay ms")
    for v, xs in by_variant.items():
        if xs:
            print(f"{v:<9}  {len(xs):>5}  {sum(b for *_, b in xs):>6}  "
                  f"{statistics.fmean(x[0] for x in xs):+16.3f}  "
                  f"{statistics.fmean(x[1] for x in xs):+20.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
