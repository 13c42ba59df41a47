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
"""

from __future__ import annotations

import math
import os

#: The Snakemake resource trials ask for (per mille of the host's CPU capacity).
RESOURCE = "host_load"


#: The whole host: every core busy.
FULL_HOST = 1000


#: One trial never asks for more than this (a budget below it could never admit it).
MAX_REQUEST = 500


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


#: Real-time work: both tool ends and the delay line run under SCHED_FIFO (trial.run), so
#: they take a CPU before anything else and, together, must stay clear of the kernel's
#: real-time throttling (sched_rt_runtime_us: 95 % of each CPU) with room for their bursts.
#: Measured 2026-11-25 on 412 trials under load (the fresh sweep and the fast-links recheck,
#: meta.json ``cpu_s`` of sender + receiver + delay line per second of transfer): 0.009 to
#: 0.012 cores per Mbit/s at 10-40 Mbit/s (p90 0.0121 at 10-20 Mbit/s), 0.025 cores at idle.
#: The constants are the tail of that, not its mean.
RT_IDLE_CORES = 0.02
RT_CORES_PER_MBIT = 0.0105


#: What a trial asks for is at least its real-time cores times this: under the profile's
#: budget of 900 the real-time work of all trials then stays under 900 / 1.15 = 780 per
#: mille (1.57 cores of 2). In the recheck every trial whose transfer overlapped more than
#: 1.7 cores of real-time work on average failed its health check (the delay line late by
#: 2-6 ms at p99, the kernel logging "RT throttling activated"); up to 1.67 cores, none of
#: the 304 trials of the fresh sweep did (bench/bench_admission_fit.py prints both).
RT_HEADROOM = 1.15


def carried_mbit(rate_kbit: float, rtt_ms: float, window_bytes: int | None) -> float:
    """The most a trial can carry: the shaped rate, or less when the receiver window binds
    (window per RTT; queueing only lowers it further, so this is an upper bound)."""
    mbit = rate_kbit / 1000.0
    if window_bytes and rtt_ms > 0:
        mbit = min(mbit, window_bytes * 8 / rtt_ms / 1000.0)
    return mbit


def rt_cores(rate_kbit: float, rtt_ms: float, window_bytes: int | None,
             tool: str = "tquic-perf", testbed: str = "local") -> float:
    """Expected real-time cores of one trial at the tail of its load: the tool ends and the
    delay line, zero where the tools run on other hosts."""
    if testbed == "ssh":
        return 0.0
    factor = TOOL_FACTOR.get(tool, max(TOOL_FACTOR.values()))
    return RT_IDLE_CORES + RT_CORES_PER_MBIT * factor * carried_mbit(rate_kbit, rtt_ms,
                                                                    window_bytes)


def trial_cores(rate_kbit: float, rtt_ms: float, window_bytes: int | None,
                tool: str = "tquic-perf", testbed: str = "local",
                busy_s: float = 65.0) -> float:
    """Expected mean CPU cores of one trial on this host over its ``busy_s`` seconds
    (idle baseline + transfer)."""
    if testbed == "ssh":
        return SSH_CORES
    per_rate = CORES_PER_MBIT * TOOL_FACTOR.get(tool, max(TOOL_FACTOR.values()))
    wall_s = busy_s + TRIAL_OVERHEAD_S
    return (FIXED_CPU_S / wall_s + RUN_CORES
            + per_rate * carried_mbit(rate_kbit, rtt_ms, window_bytes))


def host_load(cores: float, cpu_count: int | None = None) -> int:
    """``cores`` in thousandths of this host (at least 1, at most MAX_REQUEST)."""
    n = cpu_count or os.cpu_count() or 1
    return max(1, min(MAX_REQUEST, math.ceil(FULL_HOST * cores / n)))


def trial_host_load(plan, direction: str, window_bytes: int | None, tool: str = "tquic-perf",
                    testbed: str = "local", cpu_count: int | None = None,
                    busy_s: float = 65.0) -> int:
    """The ``host_load`` a trial asks for, from its link plan (links.plan): its expected
    cores, or its real-time cores with their headroom where those are more (fast links)."""
    rate = plan.shaper(direction).rate_kbit
    cores = trial_cores(rate, plan.rtt_ms, window_bytes, tool, testbed, busy_s)
    rt = rt_cores(rate, plan.rtt_ms, window_bytes, tool, testbed)
    return host_load(max(cores, RT_HEADROOM * rt), cpu_count)
