"""What a trial costs on this host, learned from the trials it measured (issue 57, "An admission
that learns the host").

The admission asks for a trial's cores from a model fitted on one host (ops.admission), times
this host's cost factor (ops.hostcost). The host check's factor is a timer wake-up's CPU against the fitted
host's (testbed.hostrecord); a trial's CPU is more than its wake-ups (packets through veths,
htb and the delay line's copies), and the two need not move together: on host `vm` (kernel
6.18.44-fc-v1300, 2026-12-07) a wake-up cost 1.23 x the fitted host's while the paper's sweep
used 0.71 of the mean model and 0.56 of the real-time model at the median. So the admission
charged every trial about 1.7 x what it used, and the host stayed more than half idle at full
admission (docs/host.md, "What the trials teach").

Every local trial that is kept adds one line to this boot's **trial log**,
``results/host/<hostname>-<boot_id[:8]>.trials.jsonl`` (beside the host record): its cores
measured (meta.json ``cpu_s``) and the model's at factor 1, for the whole trial (``mean``: all
of its CPU over its wall time, as :func:`ops.admission.trial_cores`) and for its real-time
parts (``rt``: the tool ends and the delay line over the transfer, as
:func:`ops.admission.rt_cores`). Once :data:`MIN_TRIALS` have, each kind's **learned factor** is
the median ratio of the last :data:`WINDOW` over :data:`REFERENCE`, clamped as the wake-up
factor is. The admission takes it in place of the wake-up factor:

- each trial job's real-time cores for the load gate (testbed.loadgate) are computed when the
  job starts;
- each trial's ``host_load`` (the budget's unit) is computed when Snakemake schedules it, and
  the Snakefile has the scheduler ask the waiting trials again every few seconds
  (snakemake_executor_plugin_ldlocal.fresh_resources): both learn within the run.

A factor set by hand (``LATENCY_DIVIDE_HOST_FACTOR``) still wins; ``LATENCY_DIVIDE_HOST_LEARN=off``
keeps the wake-up factor. Trials whose application limits them (a live broadcast) and trials on
an SSH testbed (their tools run elsewhere) teach nothing. The load gate's feedback (a trial
failing for its neighbours' sake halves the cap) still guards the verdicts.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from pathlib import Path

from latency_divide.errors import ConfigError
from latency_divide.paths import HOST_RECORDS
from latency_divide.testbed.hostrecord import FACTOR_MAX, FACTOR_MIN, boot_id, hostname

ENV = "LATENCY_DIVIDE_HOST_LEARN"
SUFFIX = ".trials.jsonl"
KINDS = ("mean", "rt")
#: Trials of this boot before the learned factor replaces the wake-up factor.
MIN_TRIALS = 12
#: The last trials whose median makes the factor (a host's state drifts within a boot).
WINDOW = 200
#: The ratio of measured to model cores at which a trial asks for what it uses: a trial asks
#: the median whole-trial CPU its kind used here (mean 1.0), and its real-time cores with a
#: quarter more (rt 0.8; the model is a tail, and the tool ends' and delay line's cores spread:
#: p90 0.79 against a median 0.56 in the paper's sweep on host vm, 2026-12-07). Those factors
#: were tried by hand first (0.71 and 0.70 there; LATENCY_DIVIDE_HOST_FACTOR=0.67, the paper's
#: sweep on a fresh clone, docs/host.md "What the trials teach"): 12.5 min against 18.5 at the
#: wake-up factor (1.23), the host 74.5 % busy against 43 %, 4 first attempts of 304 failing on
#: the tool ends' wait, every verdict passing. On a day whose trials used all the model asked
#: (2026-11-29, CHANGELOG.md "That day was slow") the same budget failed 36-51 first attempts:
#: there the gate's feedback (testbed.loadgate: a trial failing beside others halves its cap)
#: is what holds the verdicts.
REFERENCE = {"mean": 1.0, "rt": 0.8}
REFERENCE_SOURCE = "docs/host.md, What the trials teach"


def enabled(env: dict | None = None) -> bool:
    raw = (os.environ if env is None else env).get(ENV, "on").strip()
    if raw not in ("", "on", "off"):
        raise ConfigError(f"{ENV}={raw!r}: must be 'on' (learn from this boot's trials) or 'off' "
                          "(the host check's wake-up factor only)")
    return raw != "off"


def log_path(records: Path | None = None) -> Path:
    return Path(records or HOST_RECORDS) / f"{hostname()}-{boot_id()[:8]}{SUFFIX}"


def record(trial: str, model: dict, used: dict, records: Path | None = None) -> dict | None:
    """Add one kept trial to this boot's log: ``model`` and ``used`` cores by kind (KINDS).
    Returns the line written, or None where a figure is missing (nothing learned)."""
    if not all(isinstance(model.get(k), (int, float)) and model[k] > 0 and
               isinstance(used.get(k), (int, float)) and used[k] >= 0 for k in KINDS):
        return None
    line = {"trial": trial, **{f"model_{k}": round(model[k], 5) for k in KINDS},
            **{f"used_{k}": round(used[k], 5) for k in KINDS}}
    path = log_path(records)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (json.dumps(line, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)  # one write of a short line: whole, among concurrent trials
    finally:
        os.close(fd)
    return line


_CACHE: dict = {}


def _ratios(path: Path) -> dict[str, list[float]]:
    try:
        st = path.stat()
    except OSError:
        return {k: [] for k in KINDS}
    key = (str(path), st.st_ino, st.st_mtime_ns, st.st_size)
    if key not in _CACHE:
        out: dict[str, list[float]] = {k: [] for k in KINDS}
        for raw in path.read_text(errors="replace").splitlines():
            try:
                row = json.loads(raw)
                pairs = [(float(row[f"used_{k}"]), float(row[f"model_{k}"])) for k in KINDS]
            except (ValueError, KeyError, TypeError):
                continue  # a torn or foreign line teaches nothing
            if all(m > 0 and u >= 0 and math.isfinite(u / m) for u, m in pairs):
                for k, (u, m) in zip(KINDS, pairs):
                    out[k].append(u / m)
        _CACHE.clear()
        _CACHE[key] = out
    return _CACHE[key]


def learned(kind: str, records: Path | None = None) -> tuple[float, int] | None:
    """(the learned factor of ``kind``, the trials it rests on), or None: learning off, or fewer
    than MIN_TRIALS of this boot."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} is not one of {', '.join(KINDS)}")
    if not enabled():
        return None
    ratios = _ratios(log_path(records))[kind]
    factor = factor_from(ratios, kind)
    return None if factor is None else (factor, min(len(ratios), WINDOW))


def factor_from(ratios: list[float], kind: str) -> float | None:
    """The learned factor of ``kind`` from a log's measured / model ratios in order (the last
    WINDOW), or None below MIN_TRIALS."""
    ratios = ratios[-WINDOW:]
    if len(ratios) < MIN_TRIALS:
        return None
    return min(FACTOR_MAX, max(FACTOR_MIN, statistics.median(ratios) / REFERENCE[kind]))


def summary(records: Path | None = None) -> dict:
    """This boot's log and what it says, for the host check, the run's summary and meta.json."""
    path = log_path(records)
    n = len(_ratios(path)["mean"])
    out = {"log": str(path), "trials": n, "min_trials": MIN_TRIALS, "enabled": enabled()}
    for k in KINDS:
        got = learned(k, records)
        out[k] = None if got is None else round(got[0], 4)
    return out
