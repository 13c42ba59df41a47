#!/usr/bin/env python3
"""How close a sweep could have come to its host's floor under the admission, read back from
the sweep: the floors each limit sets, and where the trials' wall time went beyond them.

    .venv/bin/python bench/bench_admission_floor.py CLONE/results/raw \\
        CLONE/results/host/<host>-<boot8>.trials.jsonl --cores 2

Every trial of a local sweep leaves its cores measured and the model's beside them in the
boot's trial log (testbed.hostlearn). From the log's learned factors at the run's end and each
trial's hold (its job's start to its trial's end, meta.json timing), it prints:

* the **CPU floor**: the trials' ``cpu_s`` over the cores (bench_sweep_targets.py's floor);
* the **budget floor**: what the trials asked (ops.hostcost.trial_host_load: the larger of the
  whole trial's cores and the real-time cores with their headroom, at those factors) times
  their holds, over the profile's budget: no schedule under the budget ends sooner;
* the **gate floor**: their real-time cores times their transfers over the load gate's ceiling
  (ops.admission.rt_ceiling);
* the trials' wall time against each, and how the last quarter of it was spent: the share of
  the trials running then that carry 10 Mbit/s or more, and their mean cores measured (a
  sweep whose fast links are left to its end runs them there on a fraction of the host).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from _trials import ROOT  # noqa: F401  (puts src/ on the path)

from latency_divide.ops import admission, hostcost
from latency_divide.ops.hostfit import profile_budget
from latency_divide.ops.sweeptiming import sweep_timing
from latency_divide.testbed import hostlearn
from latency_divide.trial import rawio
from latency_divide.trial.packs import every_trial

#: A link at least this fast is "fast" in the last quarter's account (kbit/s).
FAST_KBIT = 10_000


def learned(log: Path) -> dict[str, float]:
    """The log's learned factors (hostlearn's rule, on this log rather than this boot's)."""
    ratios = hostlearn._ratios(log)
    out = {k: hostlearn.factor_from(ratios[k], k) for k in hostlearn.KINDS}
    if None in out.values():
        raise SystemExit(f"{log}: fewer than {hostlearn.MIN_TRIALS} trials")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("raw", type=Path, help="the sweep's raw directory")
    ap.add_argument("log", type=Path, help="the boot's trial log of that sweep")
    ap.add_argument("--cores", type=int, default=os.cpu_count())
    ap.add_argument("--budget", type=int, help="host_load budget (default: the profile's)")
    a = ap.parse_args()
    if not a.log.is_file():
        print(f"bench_admission_floor: no trial log {a.log}", file=sys.stderr)
        return 2
    f = learned(a.log)
    models = {}
    for raw in a.log.read_text().splitlines():
        try:
            row = json.loads(raw)
            models[row["trial"]] = (float(row["model_mean"]), float(row["model_rt"]))
        except (ValueError, KeyError, TypeError):
            continue
    budget = a.budget or profile_budget()
    cap = admission.rt_ceiling(cpu_count=a.cores)
    trials = []
    for d in every_trial(a.raw):
        m = json.loads(rawio.read_text(d, "meta.json"))
        if m["trial_id"] not in models:
            continue  # an application-limited or remote trial: not in the log
        t = m["timing"]
        mean, rt = models[m["trial_id"]]
        ask = hostcost.ask(mean, rt, f["mean"], f["rt"], a.cores)
        trials.append({"start": t["process_started_unix"], "end": t["transfer_ended_unix"],
                       "t0": t["transfer_started_unix"], "ask": ask, "rt": f["rt"] * rt,
                       "kbit": m["capacity_kbps"],
                       "cpu": sum(v for v in (m.get("cpu_s") or {}).values()
                                  if isinstance(v, (int, float)))})
    if not trials:
        print(f"no trial of {a.log} under {a.raw}", file=sys.stderr)
        return 2
    span = sweep_timing(a.raw)["span_s"]
    cpu_floor = sum(x["cpu"] for x in trials) / a.cores
    budget_floor = sum(x["ask"] * (x["end"] - x["start"]) for x in trials) / budget
    gate_floor = sum(x["rt"] * (x["end"] - x["t0"]) for x in trials) / cap
    print(f"trials: {len(trials)} in the log {a.log.name}; learned factors at the end: whole "
          f"trial {f['mean']:.2f}, real-time parts {f['rt']:.2f}")
    print(f"trials' wall time: {span:.0f} s")
    for name, v in (("CPU floor (cpu_s over the cores)", cpu_floor),
                    (f"budget floor (asks x holds over host_load={budget})", budget_floor),
                    (f"gate floor (real-time cores x transfers over {cap:.3f} cores)",
                     gate_floor)):
        print(f"  {name}: {v:.0f} s = {v / cpu_floor:.2f} x the CPU floor; wall time "
              f"{span / v:.2f} x it")
    first = min(x["start"] for x in trials)
    q = first + 0.75 * span
    late = [x for x in trials if x["end"] > q]
    fast = [x for x in late if x["kbit"] >= FAST_KBIT]
    share = {}
    for x in late:  # each trial's share of the last quarter, by time
        share[id(x)] = (x["end"] - max(q, x["start"])) / (0.25 * span)
    running = sum(share.values())
    cores = sum(share[id(x)] * x["cpu"] / max(1e-9, x["end"] - x["start"]) for x in late)
    fast_running = sum(share[id(x)] for x in fast)
    print(f"last quarter ({0.25 * span:.0f} s): {running:.1f} trials running on average, "
          f"{fast_running:.1f} of them links >= {FAST_KBIT // 1000} Mbit/s "
          f"({100 * fast_running / max(running, 1e-9):.0f} %; "
          f"{100 * sum(x['kbit'] >= FAST_KBIT for x in trials) / len(trials):.0f} % of all "
          f"trials), measured {cores:.2f} cores of {a.cores}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
