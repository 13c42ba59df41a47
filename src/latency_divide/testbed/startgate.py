"""When a local trial starts: trial starts on one host are spaced by :data:`SPACING_S`.

A sweep starts its first wave all at once: Snakemake launches every job the admission allows
(26-28 in tests/test_fidelity_tail.py's sweep), their set-ups overlap, and their transfers and
slow starts begin within about a second of each other. Measured on this 2-core host
(2026-11-27, that test's sweep of 48 trials, the 7 downlinks of Copa δ 0.8 that have 3-22 runs
alone to judge them by, trial.health.beyond_every): with every start at once, 1 trial in 7 per
sweep overshot in its slow start where no run alone did (14 sweeps: a 3.5 Mbit/s downlink lost
444 packets, self-delay 11.1 ms against 6.4-7.0 ms in 22 runs alone; one at 3 Mbit/s carried
0.61 of capacity), every health verdict passing. With starts 1 s apart: 0 in 8 sweeps
(bench/bench_start_spacing.py has the figures). A trial's start is spaced, not its
measurement: the wait comes before its namespaces are built, and is recorded in meta.json
(``placement.start_wait_s``).

The gate is a file in the state directory (``STATE_DIR/start-gate``: the last start's time),
locked with flock while a start waits, so it holds across processes and Snakemake jobs and
ends with them; ``latency-divide clean`` removes it when no start holds it.
``LATENCY_DIVIDE_START_SPACING`` (seconds, 0 to 10; 0: no spacing) overrides the default.
"""

from __future__ import annotations

import fcntl
import math
import os
import time

from latency_divide.errors import ConfigError
from latency_divide.testbed import netns

#: Seconds between two trial starts on one host (see the module docstring).
SPACING_S = 1.0
SPACING_ENV = "LATENCY_DIVIDE_START_SPACING"
MAX_SPACING_S = 10.0
GATE_NAME = "start-gate"


def spacing_s(env: dict | None = None) -> float:
    """The spacing in force: :data:`SPACING_S` or the environment's, validated."""
    raw = (os.environ if env is None else env).get(SPACING_ENV)
    if raw is None:
        return SPACING_S
    try:
        v = float(raw)
    except ValueError:
        v = math.nan
    if not (0.0 <= v <= MAX_SPACING_S):
        raise ConfigError(f"{SPACING_ENV}={raw!r}: the seconds between two trial starts on "
                          f"this host must be a number from 0 to {MAX_SPACING_S:g}")
    return v


def spaced_start(spacing: float | None = None) -> float:
    """Wait until ``spacing`` s after this host's previous trial start, then record this one;
    returns the seconds waited."""
    spacing = spacing_s() if spacing is None else spacing
    if spacing <= 0:
        return 0.0
    path = netns.STATE_DIR / GATE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        f.seek(0)
        try:
            last = float(f.read().strip() or 0.0)
        except ValueError:
            last = 0.0  # not a time: as if no start were recorded
        wait = last + spacing - time.time()
        if wait > 0:
            time.sleep(min(wait, spacing))  # a clock set back never blocks longer than this
        f.seek(0)
        f.truncate()
        f.write(f"{time.time():.6f}\n")
        f.flush()
    return time.monotonic() - t0


def clean_gate() -> list[str]:
    """Remove the gate file unless a start holds it; returns what was removed."""
    path = netns.STATE_DIR / GATE_NAME
    if not path.is_file():
        return []
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return []  # a trial is starting now
        path.unlink(missing_ok=True)
    return [GATE_NAME]
