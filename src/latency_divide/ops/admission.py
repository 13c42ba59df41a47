"""Admission of trials by CPU budget: how much of the host one trial is expected to use.

A trial's CPU cost grows with the rate it carries: both ends of the traffic tool and the delay
line handle every packet, while the trial job, the ping and the queue sampler cost about the
same at any rate. So 15 slow links fit where 5 fast ones do, and a flat "N at once" is either
too cautious for the cheap buckets or too bold for the expensive ones.

Each trial job asks Snakemake for ``host_load`` (rules/trials.smk), in thousandths of this
host's CPU capacity (1000 = every core busy), computed here from its link plan; the workflow
profile sets the budget (profiles/default/config.yaml, ``resources: host_load=...``), so the
same default serves a 2-core laptop and a 64-core server. Trials have ``threads: 0``: they do
not count against ``--cores``, and ``snakemake --cores 1 all`` runs as many at once as the
budget admits. The model's constants are fitted to measured per-component CPU (meta.json
``cpu_s``; bench/bench_trial_cpu.py prints them).

**The host it runs on.** Those constants are CPU time on the host they were fitted on. What a
trial asks for here (:func:`trial_host_load`, :func:`spec_rt_cores`) is the model's cores times
this host's cost factor (testbed.hostrecord: its CPU per timer wake-up, measured by
`latency-divide host-check`, against the fitted host's; 1.0 without a record of this boot), so
that on a host twice as costly half as many trials run at once under the same budget. The
budget set by hand still wins: the profile's ``host_load`` or ``--resources host_load=N`` bounds
the run, and ``LATENCY_DIVIDE_HOST_FACTOR`` sets the factor (1: no scaling). The model functions
themselves (:func:`rt_cores`, :func:`trial_cores`, :func:`beyond_cores`) stay in the fitted
host's terms: the analysis judges published trials by them, whatever host analyses them.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Mapping

from latency_divide.testbed.hostrecord import host_factor
from latency_divide.testbed.rxnapi import carried_mbit  # noqa: F401 (also ours to name)
from latency_divide.trial.instrument import CURRENT, GENERATIONS, planned_generation

#: The Snakemake resource trials ask for (per mille of the host's CPU capacity).
RESOURCE = "host_load"


#: The whole host: every core busy.
FULL_HOST = 1000


#: One trial never asks for more than the whole host. A trial that needs more than half of it
#: (a link of about 80 Mbit/s or more on 2 cores) so shares the host only with trials that
#: leave it room; Snakemake lowers a request above the budget to the budget, so with the
#: default profile it runs alone. (Until 2026-11-26 requests stopped at 500: two 177 and 236
#: Mbit/s downlinks of the population run were admitted together, each needing more than the
#: whole host, and failed their health checks with their neighbours.)
MAX_REQUEST = FULL_HOST


#: CPU seconds a trial spends once: the trial job's start-up (Python, configuration, checks)
#: and the set-up and teardown commands (ip, tc, ethtool, ss).
FIXED_CPU_S = 0.6


#: Cores a trial uses while it runs, at zero rate: the queue sampler, ping, the idle delay
#: line and the job waiting for its processes.
RUN_CORES = 0.024


#: Further cores per Mbit/s carried: both tool ends and the delay line (each packet is
#: received, queued and sent again in user space).
CORES_PER_MBIT = 0.0085


#: Wall seconds of a trial beyond its idle baseline and transfer (start, tail, teardown).
TRIAL_OVERHEAD_S = 3.0


#: Tool-specific factor on the per-rate part (mvfst's tperf is heavier per byte than
#: tquic-perf).
TOOL_FACTOR = {"tquic-perf": 1.0, "tperf": 1.5}


#: An SSH trial runs its tools on the remote nodes: here only the job and its SSH sessions.
SSH_CORES = 0.03


#: The most a live trial carries (Mbit/s), whatever its link: a live broadcast (tquic-perf's
#: ``-app=live``, docs/live.md) is application-limited by its encoder's top rung, 4000 kbit/s
#: (tools/tquic-perf/src/abr.rs ``LADDER_KBPS``); 8 leaves as much again for retransmissions,
#: which are few where the link is faster than the encoder. On a slower link the link's rate
#: counts, as for a bulk trial (behind a policer Copa's retransmissions can carry several times
#: the link's rate, an RTX overhead up to 10.85 on 220 kbit/s: at such rates the model's floor,
#: ``rt_idle_cores``, is most of the charge, and each of them asked more than it used).
#: Measured (bench/bench_live_admission.py on the 212 broadcasts of config/live-policed.yaml
#: and config/live-traces.yaml, 2026-12-02, cost factor 1.50-1.54, every verdict passing):
#: sender, receiver and delay line used 0.027 real-time cores at the median (at most 0.032) on
#: the 48 uplinks of 8 Mbit/s or more, where their link's rate asked 0.274 of the load gate and
#: the cap asks 0.118; 0.022 below 1.5 Mbit/s (asked 0.047 either way). Every broadcast asks at
#: least 1.1 x what it used (bench/baselines/live-admission-2026-12-02.txt).
LIVE_CARRIED_MBIT = 8.0
#: The tool flag that makes a trial live (config.app_args puts it first in the tool's args).
LIVE_FLAG = "-app=live"


def app_mbit(tool_args) -> float | None:
    """The most a trial's application carries (Mbit/s), or None where the link bounds it (the
    paper's bulk transfer): :data:`LIVE_CARRIED_MBIT` for a live broadcast."""
    return LIVE_CARRIED_MBIT if LIVE_FLAG in tuple(tool_args or ()) else None


def _carried(rate_kbit: float, rtt_ms: float, window_bytes: int | None,
             app: float | None) -> float:
    mbit = carried_mbit(rate_kbit, rtt_ms, window_bytes)
    return mbit if app is None else min(mbit, app)


#: Real-time work: both tool ends and the delay line run under SCHED_FIFO (trial.run), so
#: they take a CPU before anything else and, together, must stay clear of the kernel's
#: real-time throttling (sched_rt_runtime_us: 95 % of each CPU) with room for their bursts.
#: Measured 2026-11-25 on 412 trials under load (the fresh sweep and the fast-links recheck,
#: meta.json ``cpu_s`` of sender + receiver + delay line per second of transfer): 0.009 to
#: 0.012 cores per Mbit/s at 10-40 Mbit/s (p90 0.0121 at 10-20 Mbit/s), 0.025 cores at idle.
#: The constants are the tail of that, not its mean.
RT_IDLE_CORES = 0.02
RT_CORES_PER_MBIT = 0.0105


#: The least real-time cores a trial of a tool takes, at any rate, where that is more than the
#: model above gives at low rates. mvfst's tperf, measured 2026-11-26 (bench/bench_qlog_cost.py,
#: 20 s downlinks alone): 0.031 to 0.046 cores at 0.6-3.6 Mbit/s without its qlog, and with it
#: (tool.qlog) 0.10 to 0.18 for Copa δ 0.04 on links whose FIFO cannot hold its 25-packet
#: target (77 % of the packets sent declared lost: the sender logs each one); in the population
#: run's cheap uplinks such a sender took 3 to 15 CPU seconds per 60 s. With tquic-perf's 0.02
#: the workflow admitted 36 to 47 cheap tperf trials at once and every one failed its health
#: check (tool ends waiting 260 to 670 µs per wake-up, CPU pressure 84 %); at 9 to 16 at once
#: 5 of 60 first attempts failed, just over the bound (160 to 187 µs), and passed when measured
#: again. 0.15 (about 10 at once) covers the qlog's worst case for every tperf trial.
RT_FLOOR_CORES_BY_TOOL = {"tperf": 0.15}


@dataclass(frozen=True)
class Costs:
    """The cost model of one instrument generation (trial.instrument): what a trial measured
    with it costs. The constants above are generation ``v1``'s (every trial published before
    2026-11-27); a published trial is judged by its own generation's model."""

    cores_per_mbit: float
    rt_idle_cores: float
    rt_cores_per_mbit: float
    tool_factor: Mapping[str, float]
    rt_floor_by_tool: Mapping[str, float]
    #: the mean model's CPU seconds once per trial and its cores at zero rate
    fixed_cpu_s: float = FIXED_CPU_S
    run_cores: float = RUN_CORES


#: v2 (delay line 0.2's release windows, tquic-perf's GSO and recvmmsg, slow trials on one
#: core; issue 40). Measured 2026-11-27 with bench/bench_instrument_cost.py (symmetric links,
#: RTT 20 ms, unbound Cubic; sender + receiver + delay line per second of transfer): 0.029
#: cores at 4.7 Mbit/s on one core (0.046 free to migrate), 0.0033 cores per Mbit/s at 52
#: Mbit/s and 0.0032 to 0.0045 at 267-280 Mbit/s (the host busy with other developers'
#: builds); whole 60 s trials 2.3 CPU s at 1 Mbit/s and 2.75 at 5. The constants are above
#: every one of those (the tail, as v1's): 0.025 + 0.0045 x Mbit/s real-time cores (0.0065
#: since delay line 0.2.1, below).
#: The mean model refitted to v2's own fresh sweep (2026-11-27, 304 trials, every verdict
#: passing at the first attempt, at most 1.18 real-time cores beside any trial:
#: `bench/bench_trial_cpu.py raw` fits 0.71 s once per trial + 0.014 cores + 0.0052 per
#: Mbit/s): v1's 0.6 s + 0.024 cores asked a slow trial for a quarter more than it used, and
#: the host stayed 27 % idle. Rounded up: 0.75 s, 0.016 cores, 0.0053 per Mbit/s.
V2_FIXED_CPU_S = 0.75
V2_RUN_CORES = 0.016
V2_MEAN_CORES_PER_MBIT = 0.0053
V2_RT_IDLE_CORES = 0.025
#: Refitted with delay line 0.2.1 (one frame time per wake-up: a 4-frame window took Copa δ 0.5
#: on a 236.5 Mbit/s downlink from 0.92 of the link to 0.42; tools/delayline/README.md, "The
#: window at high rates"), whose wake-ups grow with the rate where frames come faster than the
#: 200 µs cap (bench/bench_instrument_cost.py, 2026-11-27, symmetric links alone: 0.020 cores
#: at 0.93 Mbit/s, 0.039 at 4.7, 0.365 at 52.4, 1.54 at 279.5; the population's downlinks alone:
#: 236.5 Mbit/s held every health bound, 299.7 Mbit/s did not, Cubic late by 3.7 ms at p99).
#: 0.0065 per Mbit/s is above each of those and puts 236.5 Mbit/s under RT_HOST_SHARE x 2 cores
#: (1.56 of 1.70) and 299.7 above it (1.97).
V2_RT_CORES_PER_MBIT = 0.0065
#: mvfst's tperf is not ours and did not change: its ends cost what they did under v1
#: (0.0105 x 1.5 per Mbit/s with the delay line, about 0.011 without it), plus v2's delay
#: line: 2.7 times tquic-perf's v2 rate.
V2_TOOL_FACTOR = {"tquic-perf": 1.0, "tperf": 2.7}
#: v3 (v2 with the receiving veths' NAPI threaded in kernel threads, which are not real-time: links
#: above 250 Mbit/s and the variants checked, testbed.rxnapi.rx_napi_for).
#: bench/bench_instrument_cost.py, symmetric links, unbound Cubic, sender + receiver + delay line
#: per Mbit/s of goodput: 0.0043 at 300 Mbit/s (2026-11-28, 3 runs:
#: bench/baselines/rx-napi-2026-11-28.txt) and 0.0044 at 354 (2 runs); the host as a whole 1.54 and
#: 1.71 cores. The population's downlinks measured alone with v3 (2026-11-28, both buffer models):
#: 299.7 Mbit/s held every bound at the first attempt (8 trials, the delay line late by 90-490 us at
#: p99), 354.5 did not (BBR failed the lateness bound in 6 of 6 attempts, 1.1-4.6 ms at p99; Cubic
#: passed at 970-1000 us, the bound). 0.0050 is above the bench (the tail, as v2's) and says so:
#: 1.52 cores at 299.7 Mbit/s, 1.80 at 354.5, against RT_HOST_SHARE x 2 = 1.70.
V3_RT_CORES_PER_MBIT = 0.0050
#: mvfst's tperf was not measured with v3; its ends dominate its cost, so a tperf trial keeps
#: the real-time cores v2 gives it (2.7 x 0.0065 = 3.5 x 0.0050 per Mbit/s).
V3_TOOL_FACTOR = {"tquic-perf": 1.0, "tperf": 3.5}

COSTS: dict[str, Costs] = {
    "v1": Costs(CORES_PER_MBIT, RT_IDLE_CORES, RT_CORES_PER_MBIT, TOOL_FACTOR,
                RT_FLOOR_CORES_BY_TOOL),
    "v2": Costs(V2_MEAN_CORES_PER_MBIT, V2_RT_IDLE_CORES, V2_RT_CORES_PER_MBIT, V2_TOOL_FACTOR,
                RT_FLOOR_CORES_BY_TOOL, V2_FIXED_CPU_S, V2_RUN_CORES),
    "v3": Costs(V2_MEAN_CORES_PER_MBIT, V2_RT_IDLE_CORES, V3_RT_CORES_PER_MBIT, V3_TOOL_FACTOR,
                RT_FLOOR_CORES_BY_TOOL, V2_FIXED_CPU_S, V2_RUN_CORES),
}
assert set(COSTS) == set(GENERATIONS)


def costs(generation: str = CURRENT) -> Costs:
    """The cost model of an instrument generation, or a clear error."""
    try:
        return COSTS[generation]
    except KeyError:
        raise ValueError(f"instrument generation {generation!r} is not one of "
                         f"{', '.join(COSTS)}") from None


#: What a trial asks for is at least its real-time cores times this: under the profile's
#: budget of 900 the real-time work of all trials then stays under 900 / 1.15 = 780 per
#: mille (1.57 cores of 2). In the recheck every trial whose transfer overlapped more than
#: 1.7 cores of real-time work on average failed its health check (the delay line late by
#: 2-6 ms at p99, the kernel logging "RT throttling activated"); up to 1.67 cores, none of
#: the 304 trials of the fresh sweep did (bench/bench_admission_fit.py prints both).
RT_HEADROOM = 1.15


#: The real-time work a host can carry at all, per core: in the same recheck, trials whose
#: transfer overlapped more than 1.7 cores of it on 2 cores failed (above). A trial that alone
#: needs more cannot hold its emulation here, whatever else runs (:func:`beyond_host`).
RT_HOST_SHARE = 0.85


def rt_cores(rate_kbit: float, rtt_ms: float, window_bytes: int | None,
             tool: str = "tquic-perf", testbed: str = "local",
             generation: str | None = None, app: float | None = None) -> float:
    """Expected real-time cores of one trial at the tail of its load: the tool ends and the
    delay line, zero where the tools run on other hosts; by the cost model of the instrument
    ``generation`` that measured it (default: the one a new trial at this rate gets,
    trial.instrument.planned_generation). ``app``: the most its application carries
    (:func:`app_mbit`; None: the link bounds it)."""
    if testbed == "ssh":
        return 0.0
    c = costs(generation or planned_generation(carried_mbit(rate_kbit, rtt_ms, window_bytes)))
    factor = c.tool_factor.get(tool, max(c.tool_factor.values()))
    rate_part = c.rt_cores_per_mbit * factor * _carried(rate_kbit, rtt_ms, window_bytes, app)
    return max(c.rt_floor_by_tool.get(tool, 0.0), c.rt_idle_cores + rate_part)


def trial_cores(rate_kbit: float, rtt_ms: float, window_bytes: int | None,
                tool: str = "tquic-perf", testbed: str = "local",
                busy_s: float = 65.0, generation: str | None = None,
                app: float | None = None) -> float:
    """Expected mean CPU cores of one trial on this host over its ``busy_s`` seconds
    (idle baseline + transfer), by the model of ``generation`` (default: as rt_cores);
    ``app`` as for :func:`rt_cores`."""
    if testbed == "ssh":
        return SSH_CORES
    c = costs(generation or planned_generation(carried_mbit(rate_kbit, rtt_ms, window_bytes)))
    per_rate = c.cores_per_mbit * c.tool_factor.get(tool, max(c.tool_factor.values()))
    wall_s = busy_s + TRIAL_OVERHEAD_S
    return (c.fixed_cpu_s / wall_s + c.run_cores
            + per_rate * _carried(rate_kbit, rtt_ms, window_bytes, app))


def host_load(cores: float, cpu_count: int | None = None) -> int:
    """``cores`` in thousandths of this host (at least 1, at most MAX_REQUEST)."""
    n = cpu_count or os.cpu_count() or 1
    return max(1, min(MAX_REQUEST, math.ceil(FULL_HOST * cores / n)))


def beyond_host(plan, direction: str, window_bytes: int | None, tool: str = "tquic-perf",
                testbed: str = "local", cpu_count: int | None = None,
                generation: str | None = None, app: float | None = None) -> str | None:
    """Why this host cannot emulate a trial's link even alone (its real-time work exceeds
    RT_HOST_SHARE of every core), or None. Such a trial is measured once, not retried
    (:func:`retries_for`), and the analysis leaves it out (analysis.metrics.beyond_host_of)."""
    return beyond_cores(plan.shaper(direction).rate_kbit, plan.rtt_ms, window_bytes, tool,
                        testbed, cpu_count, generation, app)


def beyond_cores(rate_kbit: float, rtt_ms: float, window_bytes: int | None,
                 tool: str = "tquic-perf", testbed: str = "local",
                 cpu_count: int | None = None, generation: str | None = None,
                 app: float | None = None) -> str | None:
    """:func:`beyond_host` from a link's rate and RTT and a host's core count (the analysis
    reads them, and the instrument's generation, from a trial's records)."""
    rt = rt_cores(rate_kbit, rtt_ms, window_bytes, tool, testbed, generation, app)
    n = cpu_count or os.cpu_count() or 1
    if rt <= RT_HOST_SHARE * n:
        return None
    return (f"it carries up to {_carried(rate_kbit, rtt_ms, window_bytes, app):.1f} Mbit/s, "
            f"for which its tool ends and delay line need about {rt:.2f} cores of real-time "
            f"work; this host's {n} core(s) hold at most {RT_HOST_SHARE * n:.2f}: measure it on "
            f"a host with {math.ceil(rt / RT_HOST_SHARE)} or more cores, or over SSH")


def factor_here(factor: float | None = None) -> float:
    """``factor``, or this host's cost factor (testbed.hostrecord.host_factor) when None."""
    return host_factor()[0] if factor is None else float(factor)


def spec_rt_cores(spec, testbed: str = "local", factor: float | None = None) -> float:
    """A trial's expected real-time cores on this host, from its spec (what trial.run hands
    testbed.placement): the current cost model times the host's cost factor (``factor``; None:
    this host's, :func:`factor_here`)."""
    plan = spec.link_plan("netem")
    return factor_here(factor) * rt_cores(plan.shaper(spec.direction).rate_kbit, plan.rtt_ms,
                                          spec.tool.window_bytes, spec.tool.name, testbed,
                                          spec_generation(spec), app_mbit(spec.tool.args))


def spec_generation(spec) -> str:
    """The instrument generation a new trial of ``spec`` gets through the delay line (by its
    carried rate and variant: trial.instrument.planned_generation)."""
    plan = spec.link_plan("netem")
    mbit = carried_mbit(plan.shaper(spec.direction).rate_kbit, plan.rtt_ms,
                        spec.tool.window_bytes)
    return planned_generation(mbit, "delayline", spec.variant.cc, spec.variant.delta)


def retries_for(spec, retries: int, testbed: str = "local", log=print) -> int:
    """How often to measure a trial again after a failed health verdict: ``retries``, or 0
    for a trial this host cannot emulate even alone (:func:`beyond_host`; it would fail the
    same way again, and its retries would crowd the trials beside it), saying so."""
    why = beyond_host(spec.link_plan("netem"), spec.direction,
                      spec.tool.window_bytes, spec.tool.name, testbed,
                      generation=spec_generation(spec), app=app_mbit(spec.tool.args))
    if why is None:
        return retries
    log(f"[latency-divide] WARNING: trial {spec.trial_id}: this host cannot hold its emulation: "
        f"{why}. It is measured once, not retried.")
    return 0


def trial_host_load(plan, direction: str, window_bytes: int | None, tool: str = "tquic-perf",
                    testbed: str = "local", cpu_count: int | None = None,
                    busy_s: float = 65.0, factor: float | None = None,
                    app: float | None = None) -> int:
    """The ``host_load`` a trial asks for, from its link plan (links.plan): its expected
    cores, or its real-time cores with their headroom where those are more (fast links), times
    the host's cost factor (``factor``; None: this host's, :func:`factor_here`); ``app`` as for
    :func:`rt_cores`."""
    rate = plan.shaper(direction).rate_kbit
    cores = trial_cores(rate, plan.rtt_ms, window_bytes, tool, testbed, busy_s, app=app)
    rt = rt_cores(rate, plan.rtt_ms, window_bytes, tool, testbed, app=app)
    return host_load(factor_here(factor) * max(cores, RT_HEADROOM * rt), cpu_count)


def rt_ceiling(testbed: str = "local", cpu_count: int | None = None) -> float | None:
    """The load gate's ceiling (testbed.loadgate): the real-time cores this host can carry at
    all, :data:`RT_HOST_SHARE` of each core, less what the budget keeps for the rest (the
    profile's 900 per mille with :data:`RT_HEADROOM`: 1.57 cores of 2); None where trials' tools
    run on other hosts (no gate)."""
    if testbed == "ssh":
        return None
    n = cpu_count or os.cpu_count() or 1
    return round(min(RT_HOST_SHARE * n, 0.9 * n / RT_HEADROOM), 3)
