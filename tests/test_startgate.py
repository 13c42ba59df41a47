"""The start gate (testbed.startgate): trial starts on one host are spaced, across processes;
a wrong spacing is a clear error; `clean` removes the gate's file only when no start holds it.
(That a sweep's trials start spaced through the real workflow: tests/test_fidelity_tail.py.)"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time

import pytest
from conftest import ROOT

from latency_divide.errors import ConfigError
from latency_divide.testbed import netns, startgate


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setattr(netns, "STATE_DIR", tmp_path)
    monkeypatch.delenv(startgate.SPACING_ENV, raising=False)
    return tmp_path


def test_two_starts_are_spaced(state):
    assert startgate.spaced_start(0.3) < 0.05  # the first start does not wait
    t0 = time.monotonic()
    waited = startgate.spaced_start(0.3)
    assert 0.25 <= time.monotonic() - t0 <= 0.6 and waited >= 0.25
    time.sleep(0.35)
    assert startgate.spaced_start(0.3) < 0.05  # a start after the spacing does not wait


def test_starts_of_separate_processes_are_spaced(state):
    """Four processes asking at once (as Snakemake's jobs do) start 0.25 s apart."""
    code = ("import sys, time; from latency_divide.testbed import startgate; "
            "startgate.spaced_start(); print(time.time())")
    env = {**os.environ, "LATENCY_DIVIDE_STATE_DIR": str(state),
           startgate.SPACING_ENV: "0.25", "PYTHONPATH": str(ROOT / "src")}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              text=True) for _ in range(4)]
    starts = sorted(float(p.communicate(timeout=30)[0]) for p in procs)
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert all(g >= 0.24 for g in gaps), gaps
    assert (state / startgate.GATE_NAME).is_file()


def test_no_spacing_does_not_wait_or_write(state):
    assert startgate.spaced_start(0.0) == 0.0
    assert not (state / startgate.GATE_NAME).exists()


def test_the_spacing_from_the_environment(monkeypatch):
    assert startgate.spacing_s({}) == startgate.SPACING_S == 1.0
    assert startgate.spacing_s({startgate.SPACING_ENV: "0"}) == 0.0
    assert startgate.spacing_s({startgate.SPACING_ENV: "2.5"}) == 2.5
    for bad in ("-1", "11", "nan", "soon", ""):
        with pytest.raises(ConfigError) as e:
            startgate.spacing_s({startgate.SPACING_ENV: bad})
        assert f"{startgate.SPACING_ENV}={bad!r}" in str(e.value)
        assert "from 0 to 10" in str(e.value)


def test_a_gate_file_that_is_not_a_time_is_as_if_no_start(state):
    (state / startgate.GATE_NAME).write_text("garbage\n")
    assert startgate.spaced_start(5.0) < 0.05
    assert float((state / startgate.GATE_NAME).read_text()) == pytest.approx(time.time(), abs=5)


def test_clean_removes_the_gate_only_when_no_start_holds_it(state):
    startgate.spaced_start(0.1)
    gate = state / startgate.GATE_NAME
    with open(gate) as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # a start waiting at the gate
        assert startgate.clean_gate() == [] and gate.exists()
    assert startgate.clean_gate() == [startgate.GATE_NAME] and not gate.exists()
    assert startgate.clean_gate() == []  # safely re-runnable
