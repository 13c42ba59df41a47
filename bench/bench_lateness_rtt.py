#!/usr/bin/env python3
"""The delay line's lateness bound against the link's base RTT (trial.health.PER_RTT): which
trials of the verdict fit and which failed attempts of a sweep each candidate fraction keeps.

    .venv/bin/python bench/bench_lateness_rtt.py \\
        --fit bench/baselines/verdict-fit-2026-12-01.json \\
        --sweep CLONE/results/raw --log CLONE.log --fractions 0,0.0625,0.125,0.25

``--fit``: bench_verdict_fit.py's rows (each trial's wait, lateness p99 and whether it agreed
with a published repetition), their base RTTs from the household data set. ``--sweep`` and
``--log``: a sweep's trials (their capacity and RTT) and its log, whose lines "attempt K: ...
the emulation did not hold: REASONS" hold every failed attempt's numbers (a failed attempt
leaves no directory). For each fraction f, a trial passes the lateness bound at max(1 ms, 2
packet times, f x RTT), the other bounds as today (trial.health.BOUNDS).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from _trials import ROOT  # noqa: F401  (puts src/ on the path)

from latency_divide.data.households import get_household
from latency_divide.trial import health as H
from latency_divide.trial import rawio
from latency_divide.trial.packs import every_trial

LATE = "delayline_late_p99_us"
FAILED = re.compile(r"trial (\S+)/(rep\d+) attempt (\d+): trial \S+: the emulation did not "
                    r"hold: (.*?); measuring")
REASON = re.compile(r"(\w+) = ([0-9.]+) [<>] ([0-9.]+)")


def bound(packet_us: float, rtt_ms: float, frac: float) -> float:
    """The lateness bound with ``frac`` of the RTT in place of trial.health.PER_RTT's."""
    return max(H.bound_for(LATE, packet_us), frac * rtt_ms * 1000.0)


def fit_rows(path: Path, frac: float, rtts: dict) -> tuple[int, int, int]:
    """(kept, kept that disagree, failed that agree) of the fit's rows under fraction ``frac``."""
    kept = bad = lost = 0
    for r in json.loads(path.read_text()):
        hh = int(r["trial"].split("/")[0])
        wait_ok = r["wait_us"] <= H.bound_for("tool_wait_per_slice_us", r["packet_us"])
        ok = wait_ok and r["late_p99_us"] <= bound(r["packet_us"], rtts[hh], frac)
        kept += ok
        bad += ok and r["agrees"] is False
        lost += (not ok) and bool(r["agrees"])
    return kept, bad, lost


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fit", type=Path, required=True)
    ap.add_argument("--sweep", type=Path)
    ap.add_argument("--log", type=Path)
    ap.add_argument("--fractions", default="0,0.0625,0.125,0.25")
    a = ap.parse_args()
    fracs = [float(f) for f in a.fractions.split(",")]
    fit = json.loads(a.fit.read_text())
    rtts = {hh: float(get_household(hh).rtt_ms)
            for hh in {int(r["trial"].split("/")[0]) for r in fit}}
    n_fit = len(fit)
    print(f"verdict fit ({a.fit}, {n_fit} trials): kept / kept that disagree with both published "
          "repetitions / failed that agree")
    for f in fracs:
        kept, bad, lost = fit_rows(a.fit, f, rtts)
        print(f"  f = {f:<6g} {kept:3d} / {bad} / {lost}")
    if not (a.sweep and a.log):
        return 0
    links = {}
    for d in every_trial(a.sweep):
        meta = json.loads(rawio.read_text(d, "meta.json"))
        p = d.relative_to(a.sweep).parts
        links[f"{p[1]}/{p[2]}/{p[3]}"] = (meta["capacity_kbps"], H.rtt_of(meta))
    attempts = []
    for line in a.log.read_text(errors="replace").splitlines():
        m = FAILED.search(line)
        if m:
            reasons = {k: float(v) for k, v, _b in REASON.findall(m.group(4))}
            attempts.append((m.group(1), int(m.group(3)), reasons))
    n = len(links)
    print(f"\nsweep {a.sweep}: {n} trials, {len(attempts)} failed attempts in {a.log}")
    print("  f        failed attempts left / of them first attempts (share of the trials)")
    for f in fracs:
        left = [(t, k) for t, k, r in attempts
                if set(r) != {LATE} or r[LATE] > bound(H.packet_time_us(links[t][0]),
                                                      links[t][1], f)]
        first = sum(k == 1 for _t, k in left)
        print(f"  f = {f:<6g} {len(left):3d} / {first} ({100 * first / n:.1f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
