#!/usr/bin/env python3
"""Fit the health verdict's bounds in the link's own units (trial.health.BOUNDS, issue 57):
the paper's trials measured on this host in several host states (quiet, the stall injector at
its defaults, at a multiple of its duty), each judged by the per-trial fidelity method against
the two published repetitions of the same trial (config/config.yaml's repetition 1 and
config/paper-rerun.yaml's 2: `dvc pull` first). For each trial it prints the health numbers
in microseconds and in packet times of its link, the verdict under the old absolute bounds and
under today's, and whether its numbers agree with at least one published repetition
(trial.health.beyond_every). The summary says, per state, how many trials each verdict kept
and how many of those disagree: a bound is right when no trial it passes disagrees.

    .venv/bin/python bench/bench_verdict_fit.py                  # about 10 minutes
    .venv/bin/python bench/bench_verdict_fit.py --states quiet,default --parallel 4

Needs root, the setup's CLI and the published raw data. Trials run --parallel at once (as a
sweep's slow trials do), 60 s each (the published trials' length: a shorter one is another
definition, with no published repetitions to judge it by).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _trials import ROOT, Trial, run_batch, trial_preconditions

from latency_divide.analysis.metrics import summarize_trial
from latency_divide.testbed import loadgate
from latency_divide.trial import health as H
from latency_divide.trial import rawio
from latency_divide.trial.layout import parse_trial_path
from latency_divide.trial.packs import every_trial

#: Slow links of the cheap buckets (the trials a noisy host failed by a hair, issue 57) and a
#: few faster downlinks, in Cubic and two Copa variants.
TRIALS = [Trial(h, "uplink", v) for h in (11406, 799322, 12512, 216020)
          for v in ("cubic", "copa-0.5")] + \
    [Trial(h, "downlink", v) for h in (799322, 13570) for v in ("copa-0.2", "copa-0.8")] + \
    [Trial(6046, "downlink", "cubic"), Trial(28928, "downlink", "copa-0.5")]

#: The stall injector's states: name -> its duty (None: no injector).
STATES = {"quiet": None, "default": 0.015, "x3": 0.045, "x10": 0.15}

#: The bounds before issue 57: absolute, for every link.
OLD = {"tool_wait_per_slice_us": 150.0, "delayline_late_p99_us": 1000.0,
       "queue_samples_pct": 90.0}


def old_verdict(h: dict) -> str:
    for name, bound in OLD.items():
        v = h.get(name)
        if v is None:
            continue
        if (name == "queue_samples_pct" and v < bound) or (name != "queue_samples_pct"
                                                            and v > bound):
            return "fail"
    return "pass"


def published(raw: Path) -> dict:
    """Published trials by (definition, household, direction, variant): rows of every
    repetition."""
    out: dict = {}
    for d in every_trial(raw):
        k = parse_trial_path(d.relative_to(raw))
        key = (k.definition_id, k.household, k.direction, k.variant)
        if key[1:] in {(t.household, t.direction, t.variant) for t in TRIALS}:
            out.setdefault(key, []).append(summarize_trial(d))
    return out


def measure(state: str, duty: float | None, out: Path, parallel: int, seed: int) -> float:
    loadgate.new_run()  # each state starts at the host's ceiling, as a workflow run does
    inj = None
    if duty is not None:
        inj = subprocess.Popen([str(ROOT / "target" / "release" / "stallinject"), "--duty",
                                f"{duty:g}", "--seed", str(seed), "--parent-pid",
                                str(os.getpid())],
                               stderr=subprocess.PIPE, text=True)
        inj.stderr.readline()  # its ready line
    try:
        return run_batch(TRIALS, out, duration=60, idle=5, window=65536, label=state,
                         n=parallel)
    finally:
        if inj is not None:
            inj.terminate()
            try:
                inj.wait(timeout=5)
            except subprocess.TimeoutExpired:
                inj.kill()  # it must not outlive the state it was started for
                inj.wait()
            print(f"  {state}: stall injector: {inj.stderr.read().strip()}", flush=True)


def rows_of(state: str, out: Path, refs: dict) -> list[dict]:
    rows = []
    for d in every_trial(out):
        k = parse_trial_path(d.relative_to(out))
        r = summarize_trial(d)
        meta = json.loads(rawio.read_text(d, "meta.json"))
        h, cap = meta.get("health") or {}, meta["capacity_kbps"]
        ref = refs.get((k.definition_id, k.household, k.direction, k.variant), [])
        pkt = H.packet_time_us(cap)
        rows.append({
            "state": state, "trial": f"{k.household}/{k.direction}/{k.variant}",
            "mbit": cap / 1000, "packet_us": pkt,
            "wait_us": h.get("tool_wait_per_slice_us"), "late_p99_us": h.get("delayline_late_p99_us"),
            "late_max_ms": h.get("longest_stall_ms"), "steal_pct": h.get("steal_pct"),
            "old": old_verdict(h), "new": H.verdict(h, cap)["verdict"],
            "refs": len(ref), "agrees": (not H.beyond_every(r, ref)) if ref else None,
            "nt": r["norm_tput"], "sd_ms": r["self_delay_mean_ms"],
            "ref_nt": [round(x["norm_tput"], 3) for x in ref],
            "ref_sd_ms": [round(x["self_delay_mean_ms"], 1) for x in ref]})
    return rows


#: The fractions of a packet time the fit tries (trial.health.BOUNDS' per_packet), each with
#: the floors of the bounds.
WAIT_FRACTIONS = (0.01, 0.02, 0.03, 0.05)
LATE_FRACTIONS = (0.5, 1.0, 2.0, 3.0)


def fit(rows: list[dict], states: list[str]) -> None:
    """Per pair of fractions: in each state, how many trials the verdict would keep, and how
    many of those disagree with both published repetitions (the fit: none, and as many kept as
    can be)."""
    floor_w, floor_l = OLD["tool_wait_per_slice_us"], OLD["delayline_late_p99_us"]
    print("\nthe fit: wait and lateness fractions of a packet time -> per state, kept of all "
          "(kept but disagreeing)")
    for fw in WAIT_FRACTIONS:
        for fl in LATE_FRACTIONS:
            cells = []
            for state in states:
                rs = [r for r in rows if r["state"] == state]
                kept = [r for r in rs
                        if (r["wait_us"] or 0) <= max(floor_w, fw * r["packet_us"])
                        and (r["late_p99_us"] or 0) <= max(floor_l, fl * r["packet_us"])]
                cells.append(f"{state} {len(kept)}/{len(rs)} "
                             f"({sum(r['agrees'] is False for r in kept)})")
            print(f"  wait {fw:4.2f} late {fl:3.1f}:  " + "  ".join(cells))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--states", default="quiet,default,x3",
                    help=f"host states, comma-separated, of {', '.join(STATES)}")
    ap.add_argument("--parallel", type=int, default=6, help="trials at once (default 6)")
    ap.add_argument("--seed", type=int, default=1, help="the stall injector's seed")
    ap.add_argument("--raw", type=Path, default=ROOT / "results" / "raw",
                    help="the published raw data (dvc pull)")
    ap.add_argument("--json", type=Path, help="also write every row here")
    ap.add_argument("--rows", type=Path, help="fit the rows of an earlier run's --json "
                    "instead of measuring")
    a = ap.parse_args()
    if a.rows:
        rows = json.loads(a.rows.read_text())
        fit(rows, list(dict.fromkeys(r["state"] for r in rows)))
        return 0
    if (rc := trial_preconditions()) is not None:
        return rc
    states = a.states.split(",")
    if bad := [s for s in states if s not in STATES]:
        sys.exit(f"--states: {', '.join(bad)} not among {', '.join(STATES)}")
    refs = published(a.raw)
    if not refs:
        sys.exit(f"{a.raw}: none of the bench's trials is published there: run `dvc pull`")
    print(f"host: {os.uname().release}; {len(TRIALS)} trials x {len(states)} states, "
          f"{a.parallel} at once; {time.strftime('%Y-%m-%d %H:%M')}", flush=True)
    rows = []
    for state in states:
        with tempfile.TemporaryDirectory(prefix="ld-verdict-fit-") as tmp:
            wall = measure(state, STATES[state], Path(tmp), a.parallel, a.seed)
            rows += rows_of(state, Path(tmp), refs)
        print(f"  {state}: {wall:.0f} s", flush=True)
    print("\nstate    trial                      Mbit/s  pkt_us  wait_us (pkt)   late_p99_us "
          "(pkt)  stall_ms steal%  old  new  agrees  nt (refs)  sd_ms (refs)")
    for r in rows:
        w, lp = r["wait_us"] or 0.0, r["late_p99_us"] or 0.0
        print(f"{r['state']:8s} {r['trial']:26s} {r['mbit']:6.2f} {r['packet_us']:7.0f} "
              f"{w:7.1f} ({w / r['packet_us']:.3f})  {lp:9.0f} ({lp / r['packet_us']:.3f}) "
              f"{r['late_max_ms'] or 0:8.1f} {r['steal_pct'] or 0:6.1f}  {r['old']:4s} "
              f"{r['new']:4s}  {str(r['agrees']):6s}  {r['nt']:.3f} {r['ref_nt']}  "
              f"{r['sd_ms']:.1f} {r['ref_sd_ms']}")
    print("\nper state: trials kept by each verdict (kept and disagreeing with both published "
          "repetitions)")
    for state in states:
        rs = [r for r in rows if r["state"] == state]
        for which in ("old", "new"):
            kept = [r for r in rs if r[which] == "pass"]
            bad = [r for r in kept if r["agrees"] is False]
            print(f"  {state:8s} {which}: {len(kept)} of {len(rs)} pass, {len(bad)} of those "
                  f"disagree; {sum(r['agrees'] is False for r in rs)} disagree in all")
    fit(rows, states)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
