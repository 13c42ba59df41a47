"""testbed.runners: a local process waited for with a timeout (the trial's receiver, every
monitor's stop) sleeps until it exits, not in 50 ms polls, and keeps its CPU time."""

from __future__ import annotations

import resource
import signal
import subprocess
import time

import pytest

from latency_divide.testbed import runners
from latency_divide.testbed.runners import LocalRunner


def _wait_counting_wakeups(proc, timeout: float) -> tuple[int, int]:
    """(exit code, voluntary context switches of this thread while it waited)."""
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw
    rc = proc.wait(timeout=timeout)
    return rc, resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw - before


def test_a_timed_wait_wakes_when_the_process_exits_not_every_50_ms():
    proc = LocalRunner().start(["sleep", "1.5"])
    t0 = time.monotonic()
    rc, wakeups = _wait_counting_wakeups(proc, timeout=30)
    assert rc == 0 and time.monotonic() - t0 < 3
    # polling backs off to 50 ms: about 35 wake-ups in 1.5 s; the pidfd wait takes one or two
    assert wakeups <= 5, wakeups
    assert proc.cpu_s is not None  # read before it was reaped


def test_a_timed_wait_still_times_out_and_the_process_can_be_stopped():
    proc = LocalRunner().start(["sleep", "30"])
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.3)
    assert 0.3 <= time.monotonic() - t0 < 2
    assert proc.stop(timeout=3) == -signal.SIGTERM


def test_without_pidfds_it_polls_as_before(monkeypatch):
    monkeypatch.setattr(runners, "_pidfd", lambda pid: None)
    proc = LocalRunner().start(["sleep", "1"])
    rc, wakeups = _wait_counting_wakeups(proc, timeout=30)
    assert rc == 0 and proc.cpu_s is not None
    assert wakeups > 5, wakeups  # the polling this module replaced, still there as a fallback
