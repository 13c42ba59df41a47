#!/usr/bin/env python3
"""The population run's loss and delay by bottleneck buffer, in packets: where Copa's standing
queue (1/δ packets: 25 at Facebook's δ = 0.04, 2 at 0.5) fits in the 2 x BDP FIFO and where it
does not (docs/population.md, "Why").

Reads a population run's trials table and its trials' link plans (the bottleneck FIFO's
limit, `linkplan.<direction>.queue_bytes` of meta.json or, format 4, the archive's
setup.json), and prints, per direction and buffer class (< 8, 8-25, >= 25 packets of 1,250
bytes, tquic-perf's datagram size): households, then per variant the median sender loss rate,
norm_tput, transport RTT and mean queue (packets), and the median per-household transport-RTT
change against Cubic. `--by rate` classes the households by the direction's rate instead (< 2,
2-10, >= 10 Mbit/s): with buffers sized in ms (mba-2014) the rate sets the buffer in packets.

    .venv/bin/python bench/bench_population_buffers.py \\
        results/companions/population/tables/trials.parquet
    .venv/bin/python bench/bench_population_buffers.py --direction uplink   # from results/raw
    .venv/bin/python bench/bench_population_buffers.py --direction uplink \
        --config config/population-mvfst.yaml

(the second and third while a run is published in part: one complete direction of a
population config, parsed as bench/bench_population_answer.py does).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from _trials import ROOT  # noqa: F401  (puts src/ on the path)

from latency_divide.trial import rawio

#: bytes of one tquic-perf packet on the wire, for the buffer in packets
PACKET_BYTES = 1250
#: buffer classes in packets: [low, high)
CLASSES = ((0, 8, "< 8"), (8, 25, "8-25"), (25, np.inf, ">= 25"))
#: rate classes in kbit/s: [low, high)
RATE_CLASSES = ((0, 2000, "< 2 Mbit/s"), (2000, 10000, "2-10 Mbit/s"),
                (10000, np.inf, ">= 10 Mbit/s"))


def buffer_bytes(trial_path: str, direction: str) -> int:
    return int(rawio.full_meta(trial_path)["linkplan"][direction]["queue_bytes"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trials", type=Path, nargs="?", help="a trials.parquet")
    ap.add_argument("--direction", choices=("uplink", "downlink"),
                    help="instead: this direction's trials of --config, from results/raw")
    ap.add_argument("--config", default="config/population.yaml",
                    help="the population config of --direction (default config/population.yaml;"
                         " config/population-mvfst.yaml for tperf)")
    ap.add_argument("--by", choices=("buffer", "rate"), default="buffer",
                    help="class households by their FIFO in packets (default) or by the "
                         "direction's rate")
    a = ap.parse_args()
    if (a.trials is None) == (a.direction is None):
        ap.error("give a trials table or --direction")
    if a.trials is not None:
        tr = pd.read_parquet(a.trials)
    else:
        from bench_population_answer import direction_trials

        tr = direction_trials(a.config, Path("results/raw"), a.direction)[1]
    tr["buffer_pkts"] = [buffer_bytes(p, d) / PACKET_BYTES
                         for p, d in zip(tr["trial_path"], tr["direction"])]
    classes, key = (CLASSES, "buffer_pkts") if a.by == "buffer" else (RATE_CLASSES,
                                                                        "capacity_kbps")
    tr["buffer_class"] = ""
    for lo, hi, name in classes:
        tr.loc[(tr[key] >= lo) & (tr[key] < hi), "buffer_class"] = name
    tr["queue_pkts"] = tr["queue_mean_bytes"] / PACKET_BYTES
    hh = tr.groupby(["direction", "household_id", "variant"], as_index=False).agg(
        loss=("sender_loss_pct", "mean"), norm_tput=("norm_tput", "mean"),
        rtt=("transport_rtt_mean_ms", "mean"), queue=("queue_pkts", "mean"),
        fifo=("buffer_pkts", "first"), buffer_class=("buffer_class", "first"))
    cubic = hh[hh["variant"] == "cubic"].set_index(["direction", "household_id"])["rtt"]
    hh["rtt_change"] = [r / cubic.get((d, h), np.nan) - 1
                        for d, h, r in zip(hh["direction"], hh["household_id"], hh["rtt"])]
    variants = sorted(hh["variant"].unique())
    for d in sorted(hh["direction"].unique()):
        print(f"\n{d}: median per household (loss %, norm_tput, transport RTT ms, RTT vs cubic, "
              "mean queue in packets)")
        for _, _, name in classes:
            sel = hh[(hh["direction"] == d) & (hh["buffer_class"] == name)]
            n = sel["household_id"].nunique()
            if not n:
                continue
            fifo = sel.drop_duplicates("household_id")["fifo"].median()
            label = f"buffer {name:>5s} packets" if a.by == "buffer" else f"rate {name}"
            print(f"  {label}: {n} households, FIFO {fifo:.0f} packets at the median")
            for v in variants:
                s = sel[sel["variant"] == v]
                print(f"    {v:10s} loss {s['loss'].median():5.1f} %  norm_tput "
                      f"{s['norm_tput'].median():.3f}  RTT {s['rtt'].median():7.1f}  "
                      f"{100 * s['rtt_change'].median():+5.1f} %  queue "
                      f"{s['queue'].median():5.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
