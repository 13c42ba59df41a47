"""An admission that learns the host it runs on (issue 57, "An admission that learns the host").

Snakemake admits trial jobs by their expected share of the host (ops.admission, the
``host_load`` budget); that model is a cost per Mbit/s times the host's measured cost factor,
and a host can still be worse than its host check said (the hypervisor stealing the CPU in
chunks on a busy day). So every local trial also passes this gate before it measures: the
trials measuring on this host at once may together ask for at most ``cap`` real-time cores
(ops.admission.spec_rt_cores), and the cap follows what the host shows:

- a trial that fails its health verdict for its neighbours' sake (trial.health: a bound of
  :data:`CONTENTION` broken, i.e. its threads waited for a CPU others held) beside other trials
  lowers the cap at once to :data:`DECREASE` x the load it ran in, its own included
  (multiplicative decrease); one that failed with nothing beside it, or on the delay line's
  lateness alone (a stall of the host: see :data:`CONTENTION`), leaves the cap alone (fewer
  neighbours would not help it);
- every trial that passes raises it by :data:`INCREASE_CORES` (additive increase), up to the
  calibrated ``ceiling`` (the host's real-time capacity);
- an idle host admits any one trial, whatever the cap: at the bottom, trials run one at a time.

A trial measured "alone" (``exclusive``: the last attempt of one that failed for the host's
sake every time, trial.retry) waits until nothing else measures and keeps the host to itself;
while it waits no new trial is admitted.

The state is one JSON file in the testbed's state directory (``STATE_DIR/load-gate.json``),
read and written under an flock, so it holds across Snakemake jobs; a holder that died is
dropped (its PID and start time no longer match). ``LATENCY_DIVIDE_LOAD_GATE``: ``off`` (no
gate), or a number of cores: a fixed cap, set by hand, that the feedback never moves (a budget
set by hand still wins). Each trial records what the gate said with its set-up records
(``host.admission`` in setup.json: the cap and the load when it started, how long it waited,
and why; meta.json has ``alone: true`` for an attempt alone).
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import time
from contextlib import contextmanager
from pathlib import Path

from latency_divide.errors import ConfigError
from latency_divide.testbed import netns

ENV = "LATENCY_DIVIDE_LOAD_GATE"
STATE_NAME = "load-gate.json"
LOCK_NAME = "load-gate.lock"

#: The cap after a host-bound failure, as a fraction of the load that failure ran beside.
DECREASE = 0.5
#: The verdict's bounds that neighbours break: the tool ends' run-queue wait per wake-up (the
#: CPU shared with other trials' threads; every failure of the fc-v669 sweeps of 2026-11-29 was
#: this one) and the queue sampler's missed samples. The delay line's lateness alone, with these
#: within their bounds, is a stall of the host (the hypervisor, or a higher-priority thread such
#: as the stall injector's, holding a CPU for milliseconds at once): the delay line is a
#: SCHED_FIFO thread, which no neighbour's ordinary thread delays, and other trials' delay lines
#: take microseconds per frame; every failure of the injector's sweep of 2026-12-01 was a
#: lateness of 20-24 ms with the waits within bounds. Halving the load does not shorten a stall.
CONTENTION = ("tool_wait_per_slice_us", "queue_samples_pct")
#: Real-time cores the cap gains with each passing trial (about half a slow link's trial).
INCREASE_CORES = 0.025
#: How often a waiting trial looks again (s): cheap beside a trial's own wake-ups.
POLL_S = 0.5


def mode(env: dict | None = None) -> float | str:
    """"auto" (the feedback), "off", or a fixed cap in cores, from :data:`ENV`."""
    raw = (os.environ if env is None else env).get(ENV, "auto").strip()
    if raw in ("", "auto"):
        return "auto"
    if raw == "off":
        return "off"
    try:
        v = float(raw)
    except ValueError:
        v = math.nan
    if not v > 0 or math.isinf(v):
        raise ConfigError(f"{ENV}={raw!r}: must be 'auto', 'off' or a positive number of "
                          "real-time cores (a fixed cap)")
    return v


def _path(name: str) -> Path:
    return netns.STATE_DIR / name


def _started(pid: int) -> str | None:
    """A process's start time in clock ticks (field 22 of /proc/PID/stat), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


@contextmanager
def _locked():
    """The gate's state under its lock: yields a dict; what it holds at the end is written."""
    lock = _path(LOCK_NAME)
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a+") as lf:
        fcntl.flock(lf, fcntl.LOCK_EX)
        path = _path(STATE_NAME)
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            state = {}
        before = json.dumps(state, indent=1, sort_keys=True)
        state.setdefault("running", {})
        # holders that died (their PID gone, or reused by another process)
        state["running"] = {k: v for k, v in state["running"].items()
                            if _started(int(k.split(":")[0])) == v.get("proc_start")}
        if state.get("exclusive_waiting") and \
                _started(int(state["exclusive_waiting"].split(":")[0])) is None:
            state["exclusive_waiting"] = None
        yield state
        after = json.dumps(state, indent=1, sort_keys=True)
        if after != before or not path.exists():  # a waiting trial's look writes nothing
            tmp = path.with_name(path.name + f".tmp{os.getpid()}")
            tmp.write_text(after)
            os.replace(tmp, path)


def _load(state: dict) -> float:
    return round(sum(v["cores"] for v in state["running"].values()), 4)


def state() -> dict:
    """The gate's state now (cap, ceiling, running trials and their cores, recent events)."""
    with _locked() as s:
        return json.loads(json.dumps(s))


def _holder_key(exclusive: bool) -> str:
    return f"{os.getpid()}:{'alone' if exclusive else 'trial'}"


def acquire(trial: str, cores: float, ceiling: float, *, exclusive: bool = False,
            timeout_s: float = 3600.0, log=None) -> dict:
    """Wait until the gate admits a trial asking ``cores`` real-time cores, register it and
    return the admission record (for meta.json). ``ceiling``: the calibrated cap (the host's
    real-time capacity), where the cap starts and which it never passes."""
    m = mode()
    if m == "off":
        return {"gate": "off", "why": f"{ENV}=off"}
    key = _holder_key(exclusive)
    t0 = time.monotonic()
    said = False
    while True:
        with _locked() as s:
            fixed = m != "auto"
            cap = float(m) if fixed else min(float(s.get("cap", ceiling)), ceiling)
            s["cap"], s["ceiling"] = cap, ceiling
            load = _load(s)
            busy = bool(s["running"])
            someone_alone = any(k.endswith(":alone") for k in s["running"])
            waiting_alone = s.get("exclusive_waiting")
            if exclusive:
                ok = not busy
                if not ok and not waiting_alone:
                    s["exclusive_waiting"] = key
            else:
                ok = not someone_alone and not waiting_alone and (not busy or
                                                                  load + cores <= cap)
            if ok:
                if exclusive and s.get("exclusive_waiting") == key:
                    s["exclusive_waiting"] = None
                s["running"][key] = {"trial": trial, "cores": round(cores, 4),
                                     "proc_start": _started(os.getpid()),
                                     "since": time.time(), "load_at_start": load}
                waited = time.monotonic() - t0
                why = ("alone: measured once more with nothing beside it" if exclusive else
                       "an idle host admits any one trial" if not busy else
                       f"{load:.3f} + {cores:.3f} cores within the cap {cap:.3f}")
                return {"gate": "fixed" if fixed else "auto", "cap_cores": round(cap, 4),
                        "ceiling_cores": round(ceiling, 4), "cores": round(cores, 4),
                        "load_at_start_cores": load, "running_at_start": len(s["running"]) - 1,
                        "exclusive": exclusive, "waited_s": round(waited, 2), "why": why}
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"trial {trial}: not admitted within {timeout_s:.0f} s (cap "
                               f"{cap:.3f} cores, {load:.3f} in use)")
        if log and not said and time.monotonic() - t0 > 5:
            log(f"[latency-divide] trial {trial}: waiting for the host: {load:.3f} real-time "
                f"cores in use, the cap {cap:.3f}"
                + (" (a trial waits to be measured alone)" if waiting_alone else ""))
            said = True
        time.sleep(POLL_S)


def release(verdict: str | None, exclusive: bool = False,
            broken: list[str] | None = None) -> dict:
    """Unregister this process's trial; feed its verdict back ("pass", "fail", or None for a
    trial that ended without one; ``broken``: the bounds a failed verdict broke, None: not
    known, taken as contention). Returns the cap before and after, and why it moved."""
    key = _holder_key(exclusive)
    with _locked() as s:
        me = s["running"].pop(key, None)
        cap = float(s.get("cap", 0.0))
        ceiling = float(s.get("ceiling", cap))
        before = cap
        fixed = mode() not in ("auto", "off")
        why = "unchanged"
        if me is not None and not fixed and not exclusive:
            # the load it ran beside: what was there when it started, or now, if more
            beside = max(me.get("load_at_start", 0.0), _load(s))
            stall = (verdict == "fail" and broken is not None
                     and not any(b in CONTENTION for b in broken))
            if verdict == "fail" and stall:
                why = (f"trial {me['trial']} failed its verdict on {', '.join(broken) or '?'} "
                       "alone, its waits within bounds: a stall of the host, not its "
                       "neighbours'; cap unchanged")
            elif verdict == "fail" and beside > 0:
                cap = min(cap, DECREASE * (beside + me["cores"]))
                why = (f"trial {me['trial']} failed its verdict beside {beside:.3f} cores: "
                       f"cap x {DECREASE:g}")
            elif verdict == "fail":
                why = (f"trial {me['trial']} failed its verdict with nothing beside it: the "
                       "host's limit for its link, not its neighbours'; cap unchanged")
            elif verdict == "pass":
                cap = min(ceiling, cap + INCREASE_CORES)
                why = f"trial {me['trial']} passed: cap + {INCREASE_CORES:g}"
        s["cap"] = round(cap, 4)
        events = s.setdefault("events", [])
        events.append({"t": round(time.time(), 1), "verdict": verdict, "cap": s["cap"],
                       "trial": me and me["trial"]})
        del events[:-50]
        return {"cap_before_cores": round(before, 4), "cap_after_cores": s["cap"], "why": why}


@contextmanager
def admitted(trial: str, cores: float, ceiling: float, *, exclusive: bool = False, log=None):
    """:func:`acquire` ... :func:`release`: yields the admission record; the caller sets
    ``record["verdict"]`` to the trial's verdict and ``record["broken"]`` to the bounds it broke
    before leaving (the verdict left unset: no feedback)."""
    rec = acquire(trial, cores, ceiling, exclusive=exclusive, log=log)
    try:
        yield rec
    finally:
        if rec.get("gate") != "off":
            rec["feedback"] = release(rec.get("verdict"), exclusive, rec.get("broken"))


def new_run() -> bool:
    """A run starts (the workflow's ``onstart``): the cap goes back to the ceiling, unless a
    trial measures now (another run shares the host: its lesson stands), or where the state
    directory cannot be written (no trial could run here either). True if reset."""
    try:
        return _new_run()
    except OSError:
        return False


def _new_run() -> bool:
    with _locked() as s:
        if s["running"] or "ceiling" not in s:
            return False
        s["cap"] = s["ceiling"]
        s.setdefault("events", []).append({"t": round(time.time(), 1), "verdict": None,
                                           "cap": s["cap"], "trial": "(a new run)"})
        return True


def clean_gate() -> list[str]:
    """Remove the gate's files unless a live trial holds it; returns what was removed."""
    removed = []
    with _locked() as s:
        busy = bool(s["running"])
    if busy:
        return removed
    for name in (STATE_NAME, LOCK_NAME):
        p = _path(name)
        if p.exists():
            p.unlink()
            removed.append(str(p))
    return removed
