"""testbed.placement: which core a slow trial's processes run on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from latency_divide.errors import ConfigError
from latency_divide.testbed import netns, placement
from latency_divide.testbed.haltpoll import read_ns


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setattr(netns, "STATE_DIR", tmp_path)
    return tmp_path


def _record(state, pid, cpu, cores):
    d = state / "cpus"
    d.mkdir(exist_ok=True)
    (d / f"{pid}.json").write_text(json.dumps({"pid": pid, "cpu": cpu, "rt_cores": cores}))


def test_a_slow_trial_takes_the_least_loaded_core(state):
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        _record(state, live.pid, 0, 0.2)
        _record(state, os.getpid(), 1, 0.05)
        assert placement.load_by_cpu({0, 1}) == {0: 0.2, 1: 0.05}
        cpu, why = placement.choose(0.1, {0, 1})
        assert cpu == 1 and "least loaded" in why
    finally:
        live.kill()
        live.wait()
    # the record of a process that is gone counts nothing and is removed
    assert placement.load_by_cpu({0, 1}) == {0: 0.0, 1: 0.05}
    assert not (state / "cpus" / f"{live.pid}.json").exists()


def test_a_56_mbit_trial_is_placed(state):
    """27337's unbound downlink (56.4 Mbit/s, 0.39 real-time cores by the v2 model) runs on one
    core: on a machine where a wake-up across cores costs 8 times one on the same core it took
    40 % less CPU so, with the same figures (docs/emulation.md, "The machine"); it floated while
    placement stopped at 0.25."""
    cpu, why = placement.choose(0.3917, {0, 1})
    assert cpu in (0, 1), why


def test_a_fast_trial_or_a_single_core_floats(state):
    cpu, why = placement.choose(placement.PIN_MAX_RT_CORES + 0.01, {0, 1})
    assert cpu is None and "more than one core" in why
    cpu, why = placement.choose(0.01, {3})
    assert cpu is None and "one core allowed" in why


def test_a_trial_of_a_multithreaded_tool_floats_at_any_rate(state):
    assert "tperf" in placement.FLOATING_TOOLS
    cpu, why = placement.choose(0.01, {0, 1}, "tperf")
    assert cpu is None and "several threads" in why
    cpu, _ = placement.choose(0.01, {0, 1}, "tquic-perf")
    assert cpu in {0, 1}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_placed_pins_this_process_and_its_children_then_restores(state):
    before = os.sched_getaffinity(0)
    with placement.placed(0.01) as where:
        assert os.sched_getaffinity(0) == {where["cpu"]}
        child = subprocess.run(
            [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
            capture_output=True, text=True, check=True)
        assert child.stdout.strip() == str([where["cpu"]])
        assert (state / "cpus" / f"{os.getpid()}.json").exists()
    assert os.sched_getaffinity(0) == before
    assert not (state / "cpus" / f"{os.getpid()}.json").exists()
    with placement.placed(0.01, enabled=False) as where:
        assert where["cpu"] is None and os.sched_getaffinity(0) == before


def test_clean_removes_the_records_of_jobs_that_are_gone_only(state):
    # the placement part of `latency-divide clean` (clean() itself also removes namespaces
    # by the real state directory's owner records: not run against a patched one)
    from latency_divide.testbed.clean import clean_placement_records

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    _record(state, gone.pid, 0, 0.1)
    _record(state, os.getpid(), 1, 0.1)
    (state / "cpus" / "notes.json").write_text("{}")  # not ours: left alone
    assert clean_placement_records() == [f"cpus/{gone.pid}.json"]
    assert not (state / "cpus" / f"{gone.pid}.json").exists()
    assert (state / "cpus" / f"{os.getpid()}.json").exists()
    assert (state / "cpus" / "notes.json").exists()
    assert clean_placement_records() == []  # re-runnable


def test_placement_can_be_turned_off(state, monkeypatch):
    monkeypatch.setenv("LATENCY_DIVIDE_PLACEMENT", "off")
    monkeypatch.setenv("LATENCY_DIVIDE_HALT_POLL", "off")  # the host's value, untouched
    before = os.sched_getaffinity(0)
    host_poll = read_ns()
    with placement.placed(0.01) as where:
        assert where == {"cpu": None, "why": "LATENCY_DIVIDE_PLACEMENT=off",
                         "start_spacing_s": 1.0, "start_wait_s": where["start_wait_s"],
                         "halt_poll_ns": host_poll, "host_halt_poll_ns": host_poll}
        assert os.sched_getaffinity(0) == before


def test_a_placed_trial_waits_for_the_start_gate(state, monkeypatch):
    """A local trial passes the host's start gate (testbed.startgate) before its core is
    chosen, and records its spacing and wait; a trial that is not local does not."""
    monkeypatch.setenv("LATENCY_DIVIDE_START_SPACING", "0.3")
    with placement.placed(0.01) as first:
        pass
    t0 = time.monotonic()
    with placement.placed(0.01) as second:
        assert time.monotonic() - t0 >= 0.25
    assert first["start_spacing_s"] == second["start_spacing_s"] == 0.3
    assert first["start_wait_s"] < 0.05 and second["start_wait_s"] >= 0.25
    with placement.placed(0.01, enabled=False) as where:
        assert "start_wait_s" not in where
    monkeypatch.setenv("LATENCY_DIVIDE_START_SPACING", "-1")
    with pytest.raises(ConfigError, match="LATENCY_DIVIDE_START_SPACING='-1'"):
        with placement.placed(0.01):
            pass
