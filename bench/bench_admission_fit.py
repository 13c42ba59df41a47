#!/usr/bin/env python3
"""What the admission must keep bounded: the real-time work of the trials running at once.

The tool ends and the delay line of every trial run under SCHED_FIFO (docs/emulation.md "Emulation
health"). This reads trials already on disk (one or more raw trees, e.g. a sweep's
results/raw) and prints

1. the real-time cores of each trial (meta.json ``cpu_s`` of sender + receiver + delay line per
   second of transfer) against the rate it carried, by rate bin: median and p90 per Mbit/s,
   median, p90 and max in cores, beside latency_divide.ops.admission's tail model (each trial's
   generation's), the cores its admission asks for and the cores the whole trial used;
2. for each trial, the real-time cores of every trial whose transfer overlapped its own,
   averaged over its transfer (and the peak, second by second), binned, with the share of
   trials whose health verdict failed and the delay line's lateness p99 in each bin: the load
   beyond which the emulation stops holding, which RT_HEADROOM keeps the budget below;
3. the same demand as the admission model predicted it (each trial's request at its tail).

No root needed; it runs nothing. Example:

    .venv/bin/python bench/bench_admission_fit.py /var/tmp/sweep/results/raw /var/tmp/recheck/results/raw
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from latency_divide.ops import admission  # noqa: E402
from latency_divide.trial import rawio  # noqa: E402
from latency_divide.trial.packs import every_trial  # noqa: E402

RT_PARTS = ("sender", "receiver", "delayline")
BINS = [0.0, 1.0, 1.2, 1.4, 1.5, 1.6, 1.7, 1.8, 4.0]


def load(raw: Path) -> list[dict]:
    out = []
    for d in every_trial(raw):  # loose and packed
        m = rawio.full_meta(d)  # linkplan: in the archive's setup.json (format 4)
        t, cpu, health = m.get("timing") or {}, m.get("cpu_s") or {}, m.get("health") or {}
        if "transfer_started_unix" not in t or not cpu or not health:
            continue  # measured before cpu_s or the health check
        t0, t1 = t["transfer_started_unix"], t["transfer_ended_unix"]
        window = m["variant"].get("window_bytes") or m["tool"]["window_bytes"]
        rate, rtt, tool = m["capacity_kbps"], m["linkplan"]["rtt_ms"], m["tool"]["name"]
        mbit = admission.carried_mbit(rate, rtt, window)
        model = admission.rt_cores(rate, rtt, window, tool)
        busy = (m.get("idle_s") or 0.0) + (m.get("duration_s") or (t1 - t0))
        # the whole job, from its process's start to the transfer's end (+ its tail)
        wall = t1 + 2.0 - t.get("process_started_unix", t0)
        out.append({"t0": t0, "t1": t1, "mbit": mbit,
                    "rt": sum(cpu.get(k) or 0.0 for k in RT_PARTS) / (t1 - t0),
                    "model": model,
                    "asked": max(admission.trial_cores(rate, rtt, window, tool, busy_s=busy),
                                 admission.RT_HEADROOM * model),
                    "used": sum(v or 0.0 for v in cpu.values()) / wall,
                    "fail": health.get("verdict") == "fail",
                    "p99": health.get("delayline_late_p99_us") or 0.0})
    return out


def overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def demand(trials: list[dict], key: str) -> None:
    """Per trial: mean and peak of ``key`` summed over the trials running beside it."""
    for x in trials:
        span = x["t1"] - x["t0"]
        x[f"{key}_mean"] = sum(y[key] * overlap(x["t0"], x["t1"], y["t0"], y["t1"])
                               for y in trials) / span
        x[f"{key}_peak"] = max(sum(y[key] for y in trials if y["t0"] <= s < y["t1"])
                               for s in np.arange(x["t0"], x["t1"], 1.0))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("raw", type=Path, nargs="+", help="raw trees, each one run")
    a = ap.parse_args()
    runs = {str(r): load(r) for r in a.raw}
    every = [x for trials in runs.values() for x in trials]
    if not every:
        print("no trial with cpu_s and a health verdict", file=sys.stderr)
        return 1

    print(f"== real-time cores per trial vs carried rate ({len(every)} trials) ==")
    print(f"{'Mbit/s':>8s} {'n':>4s} {'cores/Mbit med':>15s} {'p90':>7s} {'cores med':>10s} "
          f"{'p90':>6s} {'max':>6s} {'model (tail)':>13s} {'asked':>6s} {'used':>6s}")
    mbit = np.array([x["mbit"] for x in every])
    rt = np.array([x["rt"] for x in every])
    model = np.array([x["model"] for x in every])
    asked = np.array([x["asked"] for x in every])
    used = np.array([x["used"] for x in every])
    for lo, hi in ((0, 2), (2, 5), (5, 10), (10, 15), (15, 20), (20, 40), (40, 100)):
        s = (mbit >= lo) & (mbit < hi)
        if s.any():
            print(f"{lo:3d}-{hi:<4d} {s.sum():4d} {np.median(rt[s] / mbit[s]):15.4f} "
                  f"{np.percentile(rt[s] / mbit[s], 90):7.4f} {np.median(rt[s]):10.3f} "
                  f"{np.percentile(rt[s], 90):6.3f} {rt[s].max():6.3f} "
                  f"{np.median(model[s]):13.3f} {np.median(asked[s]):6.3f} "
                  f"{np.median(used[s]):6.3f}")
    under = (rt > model).mean()
    print(f"model: each trial's own generation's real-time tail (ops.admission.rt_cores); "
          f"trials above it: {100 * under:.1f} %")
    print("asked: the cores its admission asks for (medians; max of the mean model and the "
          "headroom x the tail); used: every component's CPU over the job's wall time")

    for name, trials in runs.items():
        demand(trials, "rt")
        demand(trials, "model")
        print(f"\n== {name}: {len(trials)} trials, {sum(x['fail'] for x in trials)} failed "
              "health ==")
        print(f"{'RT cores beside':>16s} {'n':>4s} {'failed':>7s} {'late p99 med':>13s} "
              f"{'max':>7s} {'peak':>6s} {'model said':>11s}")
        means = np.array([x["rt_mean"] for x in trials])
        for lo, hi in zip(BINS, BINS[1:]):
            s = [x for x, m in zip(trials, means) if lo <= m < hi]
            if s:
                print(f"{lo:6.1f} - {hi:<6.1f}  {len(s):4d} {sum(x['fail'] for x in s):7d} "
                      f"{np.median([x['p99'] for x in s]):13.0f} "
                      f"{max(x['p99'] for x in s):7.0f} {max(x['rt_peak'] for x in s):6.2f} "
                      f"{np.median([x['model_mean'] for x in s]):11.2f}")
        fails = [x["rt_mean"] for x in trials if x["fail"]]
        ok = [x["rt_mean"] for x in trials if not x["fail"]]
        if fails:
            print(f"lowest demand beside a failed trial {min(fails):.2f} cores; highest beside "
                  f"a passing one {max(ok) if ok else float('nan'):.2f}")
        else:
            print(f"no failed trial; highest demand {max(ok):.2f} cores")
    print(f"\nadmission: a trial asks for max(its cores, {admission.RT_HEADROOM} x its RT cores);"
          f" under a budget B per mille the RT work stays under B / {admission.RT_HEADROOM}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
