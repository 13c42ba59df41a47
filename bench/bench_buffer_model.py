#!/usr/bin/env python3
"""What a measured buffer model gives a population's households, and what the data set can say
about it (links.buffers, docs/population.md "Buffers as measured: the model").

Prints, for a buffer model (default mba-2014) and a config's households (default the 240 of
config/population.yaml):

1. the model: per panel technology and direction, the loaded and idle RTT and their
   difference (the FIFO's delay);
2. per data-set technology and direction over the config's households: how many, the FIFO in
   ms of the link's rate and in bandwidth-delay products (median, p10, p90), how many sit on
   the floor, and the share whose FIFO holds fewer than 25 packets of 1,250 bytes (Copa δ
   0.04's standing queue, tquic-perf's datagrams) under the model and under 2 x BDP;
3. the check that can be made: the panel's idle RTT by technology against the households' own
   idle latency (``medianLatency``): the config's households, and every household of the data
   set whose row is from the panel's year. The loaded side cannot be checked: the data set has
   no latency under load.

    .venv/bin/python bench/bench_buffer_model.py [--config config/population.yaml]
        [--model mba-2014]

Seconds; reads the vendored data only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from latency_divide.config import load_config  # noqa: E402
from latency_divide.data.households import get_household  # noqa: E402
from latency_divide.data.source import unique_rows  # noqa: E402
from latency_divide.links import buffers  # noqa: E402
from latency_divide.links.plan import make_linkplan  # noqa: E402
from latency_divide.vocab import DIRECTIONS  # noqa: E402

#: Copa δ 0.04's standing queue (1/δ packets) of tquic-perf's 1,250-byte datagrams.
COPA_QUEUE_BYTES = 25 * 1250


def _q(values: list[float], p: float) -> float:
    """The p-quantile (0..1) of values, linear between order statistics."""
    v = sorted(values)
    if len(v) == 1:
        return v[0]
    k = p * (len(v) - 1)
    lo = int(k)
    return v[lo] + (v[min(lo + 1, len(v) - 1)] - v[lo]) * (k - lo)


def _spread(values: list[float], fmt: str = "{:.2f}") -> str:
    return " / ".join(fmt.format(_q(values, p)) for p in (0.5, 0.1, 0.9))


def print_model(model: buffers.MeasuredModel) -> None:
    print(f"# 1. model {model.name}: {model.statistic}, 30 days from {model.period_start} "
          f"({model.data.relative_to(ROOT)})")
    print(f"{'panel':<8}{'direction':<10}{'loaded ms':>11}{'idle ms':>9}{'FIFO ms':>9}")
    for tech, panel in model.technologies.items():
        for d in DIRECTIONS:
            loaded = buffers.panel_rtt_ms(model, "latency_under_load", panel, d)
            idle = buffers.panel_rtt_ms(model, "idle", panel)
            print(f"{panel:<8}{d:<10}{loaded:>11.3f}{idle:>9.3f}"
                  f"{buffers.queue_ms(model.name, tech, d):>9.3f}")
    for tech in model.qfactor_fallback:
        print(f"{tech}: no panel number; the configured qfactor x BDP")


def print_population(households, model_name: str, qfactor: float) -> None:
    print(f"\n# 2. the FIFO per household: {len(households)} households; ms of the link's rate "
          f"and x BDP as median / p10 / p90")
    print(f"{'technology':<11}{'direction':<10}{'n':>4}  {'FIFO ms':<24}{'x BDP':<20}"
          f"{'floored':>8}{'<25 pkt':>9}{'<25 pkt 2xBDP':>15}")
    rows = {}
    for hh in households:
        measured = make_linkplan(hh, qfactor=qfactor, buffer_model=model_name)
        default = make_linkplan(hh, qfactor=qfactor)
        for d in DIRECTIONS:
            s, s0 = measured.shaper(d), default.shaper(d)
            ms = s.queue_bytes * 8 / s.rate_kbit
            bdp = hh.rtt_ms * s.rate_kbit / 8
            for key in ((hh.technology, d), ("all", d)):
                rows.setdefault(key, []).append(
                    (ms, s.queue_bytes / bdp, bool(s.buffer and s.buffer.floored),
                     s.queue_bytes < COPA_QUEUE_BYTES, s0.queue_bytes < COPA_QUEUE_BYTES))
    techs = sorted({t for t, _ in rows if t != "all"}) + ["all"]
    for t in techs:
        for d in DIRECTIONS:
            r = rows.get((t, d))
            if not r:
                continue
            n = len(r)
            small, small_2bdp = (100 * sum(x[i] for x in r) / n for i in (3, 4))
            print(f"{t:<11}{d:<10}{n:>4}  {_spread([x[0] for x in r], '{:.0f}'):<24}"
                  f"{_spread([x[1] for x in r]):<20}{sum(x[2] for x in r):>8}"
                  f"{small:>8.0f}%{small_2bdp:>14.0f}%")


def print_idle_check(model: buffers.MeasuredModel, households) -> None:
    year = int(model.period_start[:4])
    print(f"\n# 3. idle RTT: the panel's {model.statistic} against the households' own "
          "medianLatency (median over households, ms)")
    every = [r for r in unique_rows(None).values() if str(r.get("year")) == str(year)]
    print(f"{'technology':<11}{'panel idle':>11}{'drawn n':>9}{'drawn':>8}"
          f"{f'data set {year} n':>18}{f'data set {year}':>16}")
    for tech, panel in model.technologies.items():
        drawn = [h.rtt_ms for h in households if h.technology == tech]
        rows = [float(r["medianLatency"]) / 1000 for r in every
                if r.get("technology") == tech and _number(r.get("medianLatency"))]
        print(f"{tech:<11}{buffers.panel_rtt_ms(model, 'idle', panel):>11.1f}{len(drawn):>9}"
              f"{statistics.median(drawn) if drawn else float('nan'):>8.1f}"
              f"{len(rows):>18}{statistics.median(rows) if rows else float('nan'):>16.1f}")
    print("(the panel's number is the median over tests of each test's largest RTT; the data "
          "set's is each household's median latency: the panel's should sit above it)")
    print("not checkable: the loaded RTT (the data set has no latency under load)")


def _number(x) -> bool:
    try:
        return float(x) > 0
    except (TypeError, ValueError):
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(ROOT / "config" / "population.yaml"),
                    help="the config whose households are checked (default the population's)")
    ap.add_argument("--model", default=buffers.MBA_2014.name,
                    choices=[n for n, m in buffers.MODELS.items() if m is not None],
                    help="the measured buffer model (default %(default)s)")
    a = ap.parse_args()
    cfg = load_config(a.config)
    model = buffers.MODELS[a.model]
    households = [get_household(h, cfg.buckets) for h in cfg.household_ids()]
    print_model(model)
    print_population(households, a.model, cfg.qfactor)
    print_idle_check(model, households)
    return 0


if __name__ == "__main__":
    sys.exit(main())
