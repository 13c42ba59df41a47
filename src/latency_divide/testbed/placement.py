"""Which CPU a slow trial runs on (all of its processes on one core), and when a local trial
starts (testbed.startgate: starts on one host are spaced).

On the virtual machines this runs on, waking a process on the other core costs an
inter-processor interrupt, and a slow link's frames arrive one at a time: every frame the delay
line releases wakes a tool end, and every ACK wakes the sender. With the trial's processes on
one core those wake-ups stay local, and the delay line (SCHED_FIFO 10, above the tool ends' 5)
finishes its batch before the tool end runs. Measured (bench/bench_instrument_cost.py, a
5 Mbit/s link, 60 s trial, 2026-11-27): 2.75 CPU s for the whole trial on one core against
3.74 s free to migrate; the receiver 0.55 against 0.99 s, the delay line 0.89 against 1.30 s.

A fast trial needs more than a core can give (its real-time work, ops.admission.rt_cores),
so only trials expected to take at most :data:`PIN_MAX_RT_CORES` are placed; the others float,
as do the trials of a tool whose ends run several busy threads (:data:`FLOATING_TOOLS`).
A placed trial takes the core of its allowed set that the live placed trials load least, by
their expected real-time cores, recorded in ``STATE_DIR/cpus/<pid>.json`` while the trial
runs (a record whose process is gone is ignored and removed). ``LATENCY_DIVIDE_PLACEMENT=off``
in the environment turns placement off (to compare, or on a host where one core is not enough).
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from latency_divide.fsio import write_json_atomic
from latency_divide.testbed import netns
from latency_divide.testbed.haltpoll import halt_polling, wanted_ns
from latency_divide.testbed.runners import pid_alive
from latency_divide.testbed.startgate import spaced_start, spacing_s

#: Trials expected to need at most this many real-time cores are placed on one core: about 57
#: Mbit/s carried by tquic-perf under the v2 cost model (0.025 + 0.0065 x Mbit/s). 0.25 (34
#: Mbit/s) until 2026-11-28; on that day's machine, where a wake-up across cores takes 24-29 µs
#: against 3-4 on one core, two unbound downlinks of the fast-links companion placed (27337 at
#: 56.4 Mbit/s, the model's 0.39 cores; 8268 at 0.26) took 40 % less CPU per 60 s trial than
#: floating (19.2-19.9 against 29.9-33.8 s; 14.1-14.5 against 23.1-24.4), with the same
#: transport figures and release lateness (docs/emulation.md, "The machine").
PIN_MAX_RT_CORES = 0.40


#: Tools whose trials float at any rate. mvfst's tperf runs more than one busy thread per end
#: at the same SCHED_FIFO priority (its event base and, with the qlog, folly's file writer,
#: which streams an event per packet), and on one core a thread waits for the other's burst:
#: Copa delta 0.04 with its qlog on 10337's measured-buffer uplink (435 kbit/s), alone, 30 s,
#: 2026-11-28: 158 us of run-queue wait per wake-up of its ends on one core (health bound 150),
#: 0.4 us floating; the delay line late by 510 us at p99 against 160. In the population run
#: with measured buffers 15 of the first 46 tperf attempts on one core failed that bound.
FLOATING_TOOLS = frozenset({"tperf"})


def _records() -> Path:
    return netns.STATE_DIR / "cpus"


def load_by_cpu(cpus: set[int]) -> dict[int, float]:
    """Expected real-time cores of the live placed trials on each of ``cpus``."""
    load = {c: 0.0 for c in cpus}
    d = _records()
    if not d.is_dir():
        return load
    for f in d.glob("*.json"):
        try:
            rec = json.loads(f.read_text())
            pid, cpu, cores = int(rec["pid"]), int(rec["cpu"]), float(rec["rt_cores"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not pid_alive(pid):
            f.unlink(missing_ok=True)
            continue
        if cpu in load:
            load[cpu] += cores
    return load


def choose(rt_cores: float, allowed: set[int] | None = None,
           tool: str = "tquic-perf") -> tuple[int | None, str]:
    """(the core to run on, why) for a trial of ``tool`` expected to take ``rt_cores``; None
    where it floats."""
    allowed = set(allowed if allowed is not None else os.sched_getaffinity(0))
    if len(allowed) < 2:
        return None, "one core allowed: nothing to choose"
    if tool in FLOATING_TOOLS:
        return None, f"{tool}'s ends run several threads: on one core they wait for each other"
    if rt_cores > PIN_MAX_RT_CORES:
        return None, (f"expected real-time cores {rt_cores:.2f} > {PIN_MAX_RT_CORES}: "
                      "more than one core may be needed")
    load = load_by_cpu(allowed)
    cpu = min(sorted(allowed), key=lambda c: load[c])
    return cpu, f"least loaded of {sorted(allowed)} by placed trials ({load[cpu]:.2f} cores)"


@contextmanager
def placed(rt_cores: float, enabled: bool = True, tool: str = "tquic-perf") -> Iterator[dict]:
    """Wait for this host's start gate (testbed.startgate), then run the body (and every
    process it starts) on one core chosen by :func:`choose`, with this process's record of
    it, and with the host's halt polling held (testbed.haltpoll); yields what meta.json records
    (``placement``: the core, why, the start's spacing and wait, the halt polling in force and
    the host's own). Restores the affinity, the halt polling and removes the record afterwards."""
    before = os.sched_getaffinity(0)
    if not enabled:
        yield {"cpu": None, "why": "not a local trial"}
        return
    spacing = spacing_s()  # first: a wrong spacing or halt polling is an error before any wait
    poll_ns = wanted_ns()
    start = {"start_spacing_s": spacing, "start_wait_s": round(spaced_start(spacing), 3)}
    with halt_polling(poll_ns) as poll:
        start.update(poll)
        if os.environ.get("LATENCY_DIVIDE_PLACEMENT", "on") == "off":
            yield {"cpu": None, "why": "LATENCY_DIVIDE_PLACEMENT=off", **start}
            return
        cpu, why = choose(rt_cores, before, tool)
        if cpu is None:
            yield {"cpu": None, "why": why, "rt_cores": round(rt_cores, 4), **start}
            return
        rec = _records() / f"{os.getpid()}.json"
        rec.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(rec, {"pid": os.getpid(), "cpu": cpu, "rt_cores": rt_cores})
        try:
            os.sched_setaffinity(0, {cpu})
            yield {"cpu": cpu, "why": why, "rt_cores": round(rt_cores, 4), **start}
        finally:
            os.sched_setaffinity(0, before)
            rec.unlink(missing_ok=True)
