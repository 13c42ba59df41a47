#!/usr/bin/env python3
"""What live trials ask of the admission against what they use (issue 58: the live population
runs' wall time).

A live broadcast is application-limited (its encoder's top rung is 4 Mbit/s), so the link's
rate overstates what it carries on any link faster than that. For every live trial of a results
tree this prints the link's rate, the real-time cores it used (meta.json ``cpu_s`` of sender,
receiver and delay line over its transfer), the real-time cores the load gate charges it by its
link's rate (the model at its recorded generation times the cost factor of the host record it
ran under, setup.json), and what ops.admission asks now (capped at ``LIVE_CARRIED_MBIT``), with
the same cost factor; then the medians by link-rate class. Reads only; no root.

    .venv/bin/python bench/bench_live_admission.py /work/runs/live-policed/results/raw
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from latency_divide.ops import admission  # noqa: E402
from latency_divide.trial import rawio  # noqa: E402

RT_PARTS = ("sender", "receiver", "delayline")
CLASSES = ((0, 1500, "< 1.5 Mbit/s"), (1500, 4500, "1.5-4.5"), (4500, 8000, "4.5-8"),
           (8000, 10**9, ">= 8"))


def rows(raw: Path):
    for m in sorted(raw.rglob("meta.json")):
        meta = json.loads(m.read_text())
        args = meta["tool"].get("args") or []
        if admission.LIVE_FLAG not in args:
            continue
        t = meta["timing"]
        transfer = t["transfer_ended_unix"] - t["transfer_started_unix"]
        used = sum(meta["cpu_s"][p] for p in RT_PARTS) / transfer
        kbit = float(meta["capacity_kbps"])
        rtt = float(meta["household"].get("rtt_ms") or 20.0)
        gen = meta["instrument"]["generation"]
        w = meta["tool"]["window_bytes"]
        setup = json.loads(rawio.read_text(m.parent, "setup.json"))
        factor = float(setup["host"]["record"]["cost_factor"])
        charged = factor * admission.rt_cores(kbit, rtt, w, generation=gen)  # by its link
        now = factor * admission.rt_cores(kbit, rtt, w, generation=gen,
                                          app=admission.app_mbit(args))
        yield {"trial": "/".join(m.parent.parts[-5:]), "kbit": kbit, "used": used,
               "charged": charged, "now": now, "factor": factor,
               "verdict": meta["health"]["verdict"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("raw", type=Path, nargs="+", help="results/raw trees with live trials")
    ap.add_argument("--each", action="store_true", help="print every trial")
    a = ap.parse_args(argv)
    found = [r for raw in a.raw for r in rows(raw)]
    if not found:
        print(f"no live trial (tool args with {admission.LIVE_FLAG}) under {a.raw}",
              file=sys.stderr)
        return 1
    if a.each:
        for r in found:
            print(f"{r['trial']:<60} {r['kbit']:>8.0f} kbit/s used {r['used']:.3f} "
                  f"charged {r['charged']:.3f} now {r['now']:.3f} ({r['verdict']})")
    print(f"{len(found)} live trials; cost factor when they ran: "
          f"{min(r['factor'] for r in found):.2f}-{max(r['factor'] for r in found):.2f}")
    print(f"{'link rate':<14} {'n':>4} {'used (median, max)':>20} {'by link rate':>16} "
          f"{'asked now':>10}  real-time cores per trial")
    for lo, hi, name in CLASSES:
        sel = [r for r in found if lo <= r["kbit"] < hi]
        if not sel:
            continue
        used = [r["used"] for r in sel]
        print(f"{name:<14} {len(sel):>4} {statistics.median(used):>11.3f}, {max(used):.3f}"
              f" {statistics.median(r['charged'] for r in sel):>16.3f}"
              f" {statistics.median(r['now'] for r in sel):>10.3f}")
    over = [r["charged"] / r["used"] for r in found]
    over_now = [r["now"] / r["used"] for r in found]
    print(f"asked / used, median: {statistics.median(over):.2f} by link rate, "
          f"{statistics.median(over_now):.2f} now; least now {min(over_now):.2f}")
    print(f"verdicts: {sum(r['verdict'] == 'pass' for r in found)} of {len(found)} passing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
