"""Tests on a noisy host (issue 57): the full tier must pass with the stall injector running
throughout (`latency-divide stalls -- bash .ci/run`, docs/testing.md). Its wrapper sets
:data:`latency_divide.testbed.stalls.UNDER_ENV` for everything it runs, tests included.

- A test that measures the host against itself (a quiet probe against a noisy one) has no quiet
  probe there: :func:`skip_under_injector` skips it, saying why.
- A test that checks the host record's caching, not the host, drops the variable from the
  environment it gives the check (:func:`hermetic_env`).
- A test that runs real trials holds: a trial that failed its verdict on the host's stalls alone
  is left out, as the tables leave it out (:func:`passing_trials`), and named.
"""

from __future__ import annotations

import os

import pytest

from latency_divide.testbed.hostrecord import FACTOR_ENV
from latency_divide.testbed.stalls import UNDER_ENV

#: The injector's arguments when this test run is under `latency-divide stalls`, else None.
UNDER_INJECTOR = os.environ.get(UNDER_ENV) or None
#: The verdict's bounds the delay line's lateness sets (trial.health.BOUNDS): alone among a
#: failed verdict's reasons, the host held the path up (testbed.loadgate.CONTENTION).
STALL_REASON = "delayline_late_"


def hermetic_env(*drop: str, **extra: str) -> dict[str, str]:
    """This process's environment without the injector's mark, a cost factor set by hand and
    ``drop``, plus ``extra``."""
    gone = {UNDER_ENV, FACTOR_ENV, *drop}
    return {**{k: v for k, v in os.environ.items() if k not in gone}, **extra}


def skip_under_injector(what: str) -> None:
    """Skip a test that needs a quiet host to compare with, when the whole run is noisy."""
    if UNDER_INJECTOR:
        pytest.skip(f"{what} needs a quiet probe of this host, and this test run is under the "
                    f"stall injector throughout ({UNDER_ENV}={UNDER_INJECTOR!r})")


def host_stalled(health: dict) -> bool:
    """A failed verdict whose every reason is the delay line's lateness."""
    reasons = health.get("reasons") or []
    return (health.get("verdict") == "fail" and bool(reasons)
            and all(r.startswith(STALL_REASON) for r in reasons))


def passing_trials(healths: dict, *, at_least: float = 0.5) -> set:
    """The keys of ``healths`` (key -> meta.json ``health``) whose verdict passed.

    Any other failed verdict fails the test. Under the stall injector a verdict that failed on
    the host's stalls alone is left out and printed; when fewer than ``at_least`` of the trials
    are left, the test skips, naming them: this host, under the injector, cannot show the rest.
    """
    failed = {k: h for k, h in healths.items() if h.get("verdict") != "pass"}
    wrong = {k: h.get("reasons") for k, h in failed.items()
             if not (UNDER_INJECTOR and host_stalled(h))}
    assert not wrong, f"failed verdicts: {wrong}"
    kept = set(healths) - set(failed)
    if failed:
        named = "; ".join(f"{k}: {h['reasons']}" for k, h in sorted(failed.items(), key=str))
        print(f"left out, failed on the injector's stalls alone: {named}")
        if len(kept) < at_least * len(healths):
            pytest.skip(f"{len(failed)} of {len(healths)} trials failed on the stall "
                        f"injector's stalls alone ({UNDER_ENV}={UNDER_INJECTOR!r}): {named}")
    return kept
