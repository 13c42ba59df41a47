"""What a host record (testbed.hostrecord) means for the run at hand: the host's real-time
capacity, each trial's cost on this host, the links it cannot hold even alone, about how many
trials run at once, and the sweep's expected wall time. Pure: a record and a config in, an
:class:`Assessment` out (ops.hostcheck measures and prints; docs/host.md).

The rules, each in the units the record measures:

* **real-time capacity** = cores x min(admission.RT_HOST_SHARE, the kernel's real-time share
  ``sched_rt_runtime_us / sched_rt_period_us``) - cores x steal: the most SCHED_FIFO work the
  host carries (RT_HOST_SHARE, 0.85 of a core, is where trials of the fitted host began to
  fail; the kernel throttles at 0.95), less what the hypervisor took while the probe ran.
* **a trial's real-time cores** = admission.spec_rt_cores with the record's cost factor.
  Above the capacity, the host cannot hold the link even alone.
* **lateness**: a link tolerates the wake-up lateness its health verdict allows the delay line
  (trial.health.bound_for: max(1 ms, two packet times at its bottleneck, 1500 B x 8 / rate),
  so 24 ms at 1 Mbit/s and 1 ms from 24 Mbit/s up). The record's lateness is the p99
  at the probe's gap nearest that packet time (log scale; the delay line wakes once per frame
  time) among the gaps measured with at least MIN_WAKEUPS_P99 wake-ups per CPU (fewer make the
  p99 a maximum), the worst of the CPUs measured (a trial may land on any).
* **at once**: the profile's budget (host_load) over a trial's host-scaled request, for the
  median trial of the config; the wall time replays the admission: trials start in sweep order
  as the budget admits (first fit, as Snakemake's greedy scheduler), each lasting
  trial.sweep.nominal_trial_s (what the progress line's ETA uses, ops.progress), and it is at
  least the trials' host-scaled CPU (admission.trial_cores) over the budget's cores.
"""

from __future__ import annotations

import heapq
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from latency_divide.ops import admission, hostcost
from latency_divide.paths import CHECKOUT
from latency_divide.testbed.hostrecord import (  # noqa: F401  (MIN_WAKEUPS_P99: hostfit's rule)
    MIN_WAKEUPS_P99,
    lateness_p99_us,
)
from latency_divide.trial.health import bound_for, packet_time_us

#: The workflow profile whose ``resources: host_load`` is the local budget.
PROFILE = CHECKOUT / "profiles" / "default" / "config.yaml"
#: Where to go when this host cannot hold the config's links.
REMEDIES = ("run on a quieter host (fewer other programs, no noisy neighbours: a VM whose steal "
            "is near 0; once it is quiet, measure again: --force, or "
            "LATENCY_DIVIDE_HOST_CHECK=force in the workflow)", "an SSH testbed of dedicated nodes (docs/remote-testbed.md)",
            "a Slurm cluster (docs/cluster.md)",
            "or run anyway with `--go-on` (LATENCY_DIVIDE_HOST_CHECK=go-on in the workflow): "
            "every trial's health verdict is still judged")


def late_limit_us(rate_kbit: float, rtt_ms: float | None = None) -> float:
    """The lateness p99 a link of ``rate_kbit`` and base RTT ``rtt_ms`` tolerates: the health
    verdict's own bound for it (trial.health.bound_for, in the link's packet times and RTT), so
    the host check refuses exactly the links whose verdicts this host's wake-ups would fail
    (without the RTT: the bound of the shortest, the floor or the packet times)."""
    return bound_for("delayline_late_p99_us", packet_time_us(rate_kbit), rtt_ms)


def profile_budget(profile: Path = PROFILE) -> int:
    """The default profile's host_load budget (per mille of this host)."""
    import yaml

    return int(yaml.safe_load(Path(profile).read_text())["resources"]["host_load"])


def rt_capacity(record: dict) -> float:
    """Real-time cores this host carries (module docstring)."""
    n = int(record["cores"])
    share = min(admission.RT_HOST_SHARE, float(record.get("rt_share") or 1.0))
    steal = float(record["probe"].get("steal_pct") or 0.0) / 100.0
    return max(0.0, n * (share - steal))


@dataclass
class TrialCost:
    trial: tuple            # (definition, household, direction, variant, repetition)
    rate_kbit: int
    rt_cores: float         # host-scaled
    host_load: int          # host-scaled request
    cpu_s: float            # host-scaled CPU of the whole trial
    packet_us: float
    late_gap_us: float
    late_p99_us: float
    rtt_ms: float | None = None  # the link's base RTT (its verdict's lateness bound)


@dataclass
class Refusal:
    household: int
    direction: str
    rate_kbit: int
    what: str               # the number that fails against its limit


@dataclass
class Assessment:
    factor: float
    factor_source: str
    capacity_cores: float
    fastest_mbit: float
    fastest_why: str
    fastest_by_rt_mbit: float
    budget: int
    at_once: int
    wall_s: float
    cpu_floor_s: float
    trials: list[TrialCost] = field(default_factory=list)
    refusals: list[Refusal] = field(default_factory=list)
    rt_factor: float | None = None  # the real-time parts' factor, where not ``factor``

    @property
    def refused(self) -> bool:
        return bool(self.refusals)


def fastest_alone(record: dict, factor: float, capacity: float, tool: str = "tquic-perf",
                  cc: str | None = None, delta: float | None = None,
                  lateness: bool = True) -> tuple[float, str]:
    """The fastest link (Mbit/s, window not binding) this host holds alone, and which limit binds:
    its real-time cores at the capacity, or (``lateness``) the lateness at its packet time. (A
    slower link may still fail the lateness: the gaps differ; :func:`assess` judges each.)"""
    def held(mbit: float) -> str | None:
        kbit = mbit * 1000.0
        gen = admission.planned_generation(mbit, "delayline", cc, delta)
        rt = factor * admission.rt_cores(kbit, 20.0, None, tool, generation=gen)
        if rt > capacity:
            return "real-time cores"
        if lateness and lateness_p99_us(record, packet_time_us(kbit))[1] > late_limit_us(kbit):
            return "wake-up lateness"
        return None

    lo, hi = 0.0, 2000.0
    if held(hi) is None:
        return hi, "none below 2 Gbit/s"
    why = held(hi)
    for _ in range(40):
        mid = (lo + hi) / 2
        w = held(mid)
        if w is None:
            lo = mid
        else:
            hi, why = mid, w
    return lo, why


def expected_wall_s(costs: list[TrialCost], budget: int, trial_s: float) -> float:
    """The admission replayed: trials in sweep order, each started as soon as its request fits
    the budget (first fit over the waiting ones, as Snakemake's greedy scheduler), each lasting
    ``trial_s``."""
    waiting = [c.host_load for c in costs]
    now, used, ends = 0.0, 0, []
    while waiting:
        started = []
        for i, load in enumerate(waiting):
            if used + min(load, budget) <= budget:
                used += min(load, budget)
                heapq.heappush(ends, (now + trial_s, min(load, budget)))
                started.append(i)
        waiting = [w for i, w in enumerate(waiting) if i not in set(started)]
        if not waiting:
            break
        t, load = heapq.heappop(ends)
        now, used = t, used - load
        while ends and ends[0][0] <= now:
            used -= heapq.heappop(ends)[1]
    return max([now] + [t for t, _ in ends])


def assess(cfg, record: dict | None, factor: float, factor_source: str,
           budget: int | None = None, cpu_count: int | None = None,
           rt_factor: float | None = None) -> Assessment:
    """The run of ``cfg`` on the host of ``record`` (None: no measurement, factor only);
    ``factor`` scales a trial's whole CPU, ``rt_factor`` (None: ``factor``) its real-time parts
    (ops.hostcost.factor_source: learned from this boot's trials, or the wake-up factor)."""
    rt_factor = factor if rt_factor is None else rt_factor
    from latency_divide.data.households import get_household
    from latency_divide.trial.sweep import nominal_trial_s, spec_from_config, trial_ids

    budget = profile_budget() if budget is None else int(budget)
    n = int(cpu_count or (record or {}).get("cores") or 1)
    capacity = rt_capacity(record) if record else n * admission.RT_HOST_SHARE
    trial_s = nominal_trial_s(cfg)
    busy_s = cfg.trial.idle_s + cfg.trial.duration_s
    kind = cfg.testbed.kind
    costs, households = [], {}
    for tid in trial_ids(cfg):
        _, hid, direction, variant, rep = tid
        if hid not in households:
            households[hid] = get_household(hid, cfg.buckets)
        spec = spec_from_config(cfg, households[hid], direction, variant, rep)
        plan = spec.link_plan("netem")
        rate = plan.shaper(direction).rate_kbit
        w, tool = spec.tool.window_bytes, spec.tool.name
        app = admission.app_mbit(spec.tool.args)
        rt = hostcost.spec_rt_cores(spec, kind, factor=rt_factor)
        load = hostcost.trial_host_load(plan, direction, w, tool, kind, n, busy_s, factor=factor,
                                         app=app, rt_factor=rt_factor)
        cpu = factor * admission.trial_cores(rate, plan.rtt_ms, w, tool, kind, busy_s,
                                             app=app) * (busy_s + admission.TRIAL_OVERHEAD_S)
        pkt = packet_time_us(rate)
        gap, late = lateness_p99_us(record, pkt) if record else (pkt, 0.0)
        costs.append(TrialCost(tid, rate, rt, load, cpu, pkt, gap, late, plan.rtt_ms))
    merged: dict = {}
    for c in costs:
        key = (c.trial[1], c.trial[2])
        why = []
        if c.rt_cores > capacity:
            why.append(f"needs {c.rt_cores:.2f} real-time cores (variant {c.trial[3]}; the model's"
                       f" {c.rt_cores / rt_factor:.2f} x cost factor {rt_factor:.2f}) > this "
                       f"host's capacity {capacity:.2f}")
        limit = late_limit_us(c.rate_kbit, c.rtt_ms)
        if record and c.late_p99_us > limit and kind == "local":
            why.append(f"wake-up lateness p99 {c.late_p99_us:.0f} µs (at the "
                       f"{c.late_gap_us:g} µs gap) > the {limit:.0f} µs its verdict allows "
                       f"(packet time {c.packet_us:.0f} µs)")
        if why and (key not in merged or c.rt_cores > merged[key][0]):
            # one line per link: its most costly variant's numbers
            merged[key] = (c.rt_cores, Refusal(c.trial[1], c.trial[2], c.rate_kbit,
                                               "; ".join(why)))
    v0 = cfg.variants[0]
    fastest, fwhy = fastest_alone(record, rt_factor, capacity, cfg.tool_for(v0).name,
                                  v0.cc, v0.delta) if record else (float("nan"), "no record")
    by_rt = fastest_alone(record, rt_factor, capacity, cfg.tool_for(v0).name, v0.cc, v0.delta,
                          lateness=False)[0] if record else float("nan")
    usable = budget / 1000.0 * n
    floor = sum(c.cpu_s for c in costs) / usable if costs else 0.0
    wall = max(expected_wall_s(costs, budget, trial_s), floor) if costs else 0.0
    median_load = statistics.median(c.host_load for c in costs) if costs else 1
    return Assessment(factor, factor_source, capacity, fastest, fwhy, by_rt, budget,
                      max(1, min(len(costs), int(budget // median_load))), wall, floor, costs,
                      [r for _, r in merged.values()], rt_factor)
