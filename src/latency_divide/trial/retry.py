"""A trial measured until its emulation held: attempts, the load gate, and a last one alone.

Each attempt passes the host's load gate (testbed.loadgate) before it measures and feeds its
verdict back: a failed verdict lowers what the host admits at once, passing ones raise it
slowly. An attempt whose health verdict fails (trial.health) leaves nothing and is measured
again once the host's CPU pressure has eased; one that fails for another transient reason (a
tool that exited early, a command that failed) is measured again at once. A trial that failed
its verdict at every attempt is measured once more **alone** (nothing else measures on the
host meanwhile) before it is kept with its failed verdict: a verdict that fails alone is the
host's limit for that link, not its neighbours' (issue 57). Where every failed attempt broke the
delay line's lateness and no bound that neighbours break (testbed.loadgate.CONTENTION), the
last attempt is measured beside the others instead: the host's own stalls stay when the
neighbours go, and an attempt alone empties the host first. Under the stall injector on
2026-12-01, 11 of 14 such trials failed alone again (all 10 of the sweep before), while the
attempts alone and the emptying before each took 22.8 of the sweep's 58.4 minutes
(CHANGELOG.md, 2026-12-01, "The last attempt of a stalled trial").
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from latency_divide.errors import (CommandError, EnvironmentError_, LatencyDivideError,
                                   TrialError, UnhealthyTrial)
from latency_divide.testbed import loadgate
from latency_divide.testbed.schedwatch import psi_avg10
from latency_divide.trial.layout import META
from latency_divide.trial.run import run_trial
from latency_divide.trial.spec import TrialSpec


def run_trial_with_retries(spec: TrialSpec, out_root: Path, retries: int = 2,
                           log=print, testbed=None, expected_rt_cores: float | None = None,
                           rt_ceiling: float | None = None, learn=None) -> Path:
    """Measure ``spec`` until its verdict passes: at most ``retries`` + 1 attempts beside other
    trials and, where the last of them failed its verdict, one more: alone if an attempt broke
    a bound that neighbours break, else beside the others (module docstring); never leave a
    partial trial directory behind. ``rt_ceiling``: the host's real-time capacity in cores
    (ops.admission.rt_ceiling), which puts a local trial through the load gate (None: no gate
    and no attempt alone, e.g. an SSH testbed, whose tools run on other hosts; its last
    attempt keeps a failed verdict). ``learn(spec, meta)``: told of each passing trial through
    the gate (ops.hostcost.learn_from: what it cost here)."""
    gated = rt_ceiling is not None and expected_rt_cores is not None
    last: Exception | None = None
    neighbours = False  # a failed attempt broke a bound that neighbours break
    attempt = 0
    while attempt < retries + 1 + int(gated):
        attempt += 1
        final = gated and attempt == retries + 2
        if final and not isinstance(last, UnhealthyTrial):
            break  # the last attempt is for a trial whose last attempt the host failed
        alone = final and neighbours
        if final and not alone:
            log(f"[latency-divide] trial {spec.trial_id}: every attempt failed on the delay "
                "line's lateness alone (the host's stalls, which stay when its neighbours go): "
                "its last attempt is measured beside the others, not alone")
        keep = final or (not gated and attempt == retries + 1)
        try:
            if gated:
                with loadgate.admitted(spec.trial_id, expected_rt_cores, rt_ceiling,
                                       exclusive=alone, log=log) as adm:
                    d = run_trial(spec, out_root, attempt=attempt, testbed=testbed,
                                  keep_unhealthy=keep, expected_rt_cores=expected_rt_cores,
                                  admission=adm)
            else:
                d = run_trial(spec, out_root, attempt=attempt, testbed=testbed,
                              keep_unhealthy=keep, expected_rt_cores=expected_rt_cores)
        except EnvironmentError_:
            raise  # not transient
        except UnhealthyTrial as e:
            last = e
            broken = set(getattr(e, "broken", ()))  # trial.run sets it
            neighbours = neighbours or not broken or bool(broken & set(loadgate.CONTENTION))
            nxt = ("alone, with nothing else measuring" if gated and attempt == retries + 1
                   and neighbours else "once the host's CPU pressure has eased")
            log(f"[latency-divide] trial {spec.trial_id} attempt {attempt}: {e}; measuring "
                f"it again {nxt}")
            if attempt <= retries:
                wait_for_calm(log=log)
            continue
        except (TrialError, CommandError, TimeoutError, LatencyDivideError) as e:
            last = e
            log(f"[latency-divide] trial {spec.trial_id} attempt {attempt} failed: {e}")
            continue
        meta = json.loads((d / META).read_text())
        h = meta.get("health", {})
        if gated and learn is not None and h.get("verdict") == "pass":
            try:  # what it cost here, for the admission of the trials after it
                learn(spec, meta)
            except OSError as e:
                log(f"[latency-divide] WARNING: trial {spec.trial_id}: its cost not added to "
                    f"this boot's trial log ({e}): the admission keeps its factor")
        if h.get("verdict") == "fail":
            log(f"[latency-divide] WARNING: trial {spec.trial_id} kept after {attempt} attempts "
                f"{'(the last alone) ' if alone else ''}with a failed health verdict "
                f"({'; '.join(h.get('reasons', []))}): the analysis leaves it out and lists it "
                "in exclusions.parquet")
        return d
    raise TrialError(f"trial {spec.trial_id} failed after {attempt} attempts: {last}")


def wait_for_calm(max_s: float = 30.0, pressure_pct: float = 20.0, log=print) -> float:
    """Before measuring an unhealthy trial again: wait (at most ``max_s``) until the host's
    CPU pressure over the last 10 s (PSI some avg10) is below ``pressure_pct``; returns the
    seconds waited."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < max_s:
        avg10 = psi_avg10()
        if avg10 is None or avg10 < pressure_pct:
            break
        time.sleep(1.0)
    return time.monotonic() - t0
