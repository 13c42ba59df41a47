"""The admission that learns the host (testbed.loadgate, trial.retry; issue 57): a failed
verdict lowers the real-time cores admitted at once, passing trials raise them slowly, a trial
that failed every attempt is measured once more alone, and the gate's state is shared by real
processes and survives the death of one."""

import json
import os
import signal
import subprocess
import time

import pytest

from latency_divide.config import ToolSettings, Variant
from latency_divide.data.households import get_household
from latency_divide.errors import ConfigError
from latency_divide.testbed import loadgate, netns
from latency_divide.trial import health as H
from latency_divide.trial.rawio import full_meta
from latency_divide.trial.spec import TrialSpec

from conftest import ROOT, VENV_BIN


@pytest.fixture
def gate_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(netns, "STATE_DIR", tmp_path)
    monkeypatch.delenv(loadgate.ENV, raising=False)
    monkeypatch.setattr(loadgate, "POLL_S", 0.05)
    return tmp_path


HOLDER = """
import sys, time
from pathlib import Path
from latency_divide.testbed import loadgate, netns
netns.STATE_DIR = Path(sys.argv[1])
rec = loadgate.acquire("holder", float(sys.argv[2]), float(sys.argv[3]),
                       exclusive=sys.argv[5] == "alone")
print("admitted", flush=True)
time.sleep(float(sys.argv[4]))
loadgate.release(sys.argv[6] if sys.argv[6] != "none" else None, sys.argv[5] == "alone")
"""


def _holder(state_dir, cores, ceiling, hold_s, alone=False, verdict="none"):
    p = subprocess.Popen([str(VENV_BIN / "python"), "-c", HOLDER, str(state_dir), str(cores),
                          str(ceiling), str(hold_s), "alone" if alone else "trial", verdict],
                         stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert p.stdout.readline().strip() == "admitted"
    return p


def test_a_failed_verdict_halves_the_load_and_passes_raise_it_slowly(gate_dir):
    ceiling = 1.5
    beside = _holder(gate_dir, 0.6, ceiling, 30)
    try:
        rec = loadgate.acquire("t1", 0.2, ceiling)
        assert rec["cap_cores"] == ceiling and rec["load_at_start_cores"] == 0.6
        fb = loadgate.release("fail")
        # it ran beside 0.6 cores and asked 0.2: the cap drops to half of 0.8 at once
        assert fb["cap_after_cores"] == pytest.approx(0.4)
        beside.kill()  # the 0.6 cores beside leave; a run of passing trials follows
        beside.wait()
        caps = []
        for i in range(4):
            loadgate.acquire(f"p{i}", 0.01, ceiling)
            caps.append(loadgate.release("pass")["cap_after_cores"])
        assert caps == pytest.approx([0.4 + loadgate.INCREASE_CORES * k for k in range(1, 5)])
        # a failure with nothing beside it is the link's limit here, not the neighbours'
        loadgate.acquire("lonely", 0.2, ceiling)
        fb = loadgate.release("fail")
        assert fb["cap_after_cores"] == fb["cap_before_cores"] and "nothing beside" in fb["why"]
    finally:
        beside.kill()
        beside.wait()


def test_a_stall_beside_others_leaves_the_cap_and_a_wait_halves_it(gate_dir):
    """Only a failure its neighbours caused lowers the cap: a verdict broken on the delay
    line's lateness alone (the host stalled the real-time thread for milliseconds: the stall
    injector's bursts, the hypervisor) leaves it where it is, even with 0.6 cores beside it;
    the same failure with the tool ends' wait broken halves it."""
    ceiling = 1.5
    beside = _holder(gate_dir, 0.6, ceiling, 30)
    try:
        loadgate.acquire("stalled", 0.2, ceiling)
        fb = loadgate.release("fail", broken=["delayline_late_p99_us"])
        assert fb["cap_after_cores"] == ceiling and "stall of the host" in fb["why"]
        loadgate.acquire("crowded", 0.2, ceiling)
        fb = loadgate.release("fail", broken=["delayline_late_p99_us", "tool_wait_per_slice_us"])
        assert fb["cap_after_cores"] == pytest.approx(0.4)
    finally:
        beside.kill()
        beside.wait()


def test_the_lowered_cap_makes_the_next_trial_wait_until_room(gate_dir):
    ceiling = 1.5
    s = loadgate.state()
    s_path = gate_dir / loadgate.STATE_NAME
    s.update(cap=0.3, ceiling=ceiling)
    s_path.write_text(json.dumps(s))
    holder = _holder(gate_dir, 0.25, ceiling, 1.5, verdict="pass")
    t0 = time.monotonic()
    rec = loadgate.acquire("next", 0.1, ceiling)  # 0.25 + 0.1 > 0.3: waits for the holder
    waited = time.monotonic() - t0
    loadgate.release(None)
    holder.wait(timeout=10)
    assert waited >= 1.0, rec
    assert rec["load_at_start_cores"] == 0.0 and rec["why"].startswith("an idle host")
    # and a trial that fits is admitted at once beside another
    holder = _holder(gate_dir, 0.1, ceiling, 5)
    try:
        t0 = time.monotonic()
        rec = loadgate.acquire("fits", 0.1, ceiling)
        assert time.monotonic() - t0 < 1.0 and rec["running_at_start"] == 1
        loadgate.release(None)
    finally:
        holder.kill()
        holder.wait()


def test_alone_waits_for_the_others_and_keeps_new_trials_out(gate_dir):
    ceiling = 1.5
    other = _holder(gate_dir, 0.05, ceiling, 1.0)
    t0 = time.monotonic()
    rec = loadgate.acquire("lonely", 0.05, ceiling, exclusive=True)
    assert time.monotonic() - t0 >= 0.5 and rec["exclusive"] and rec["running_at_start"] == 0
    other.wait(timeout=10)
    # while it measures alone, a new trial, however small, waits
    with pytest.raises(TimeoutError, match="not admitted"):
        loadgate.acquire("newcomer", 0.001, ceiling, timeout_s=0.5)
    fb = loadgate.release("fail", exclusive=True)
    assert fb["cap_after_cores"] == fb["cap_before_cores"]  # alone: no feedback on the host
    rec = loadgate.acquire("newcomer", 0.001, ceiling, timeout_s=2)
    loadgate.release(None)


def test_a_holder_that_died_is_dropped(gate_dir):
    p = _holder(gate_dir, 1.4, 1.5, 60)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    t0 = time.monotonic()
    rec = loadgate.acquire("after", 0.5, 1.5, timeout_s=5)
    assert time.monotonic() - t0 < 1.0 and rec["load_at_start_cores"] == 0.0
    loadgate.release(None)
    assert loadgate.state()["running"] == {}
    s = loadgate.state()
    s["cap"] = 0.1
    (gate_dir / loadgate.STATE_NAME).write_text(json.dumps(s))
    assert loadgate.new_run() and loadgate.state()["cap"] == 1.5  # a new run: the ceiling
    assert loadgate.clean_gate() and not (gate_dir / loadgate.STATE_NAME).exists()


def test_a_cap_set_by_hand_wins_and_bad_values_are_refused(gate_dir, monkeypatch):
    monkeypatch.setenv(loadgate.ENV, "0.7")
    rec = loadgate.acquire("fixed", 0.2, 1.5)
    assert rec["gate"] == "fixed" and rec["cap_cores"] == 0.7
    assert loadgate.release("fail")["cap_after_cores"] == 0.7
    monkeypatch.setenv(loadgate.ENV, "off")
    assert loadgate.acquire("free", 5.0, 1.5) == {"gate": "off",
                                                   "why": f"{loadgate.ENV}=off"}
    for bad in ("-1", "lots", "inf", "0"):
        monkeypatch.setenv(loadgate.ENV, bad)
        with pytest.raises(ConfigError, match=f"{loadgate.ENV}='{bad}'"):
            loadgate.mode()


@pytest.mark.netns
@pytest.mark.slow
def test_a_trial_failing_every_attempt_is_measured_once_more_alone(tmp_path, gate_dir,
                                                                     monkeypatch):
    """A real trial whose verdict cannot pass (the wait bound set to zero for this test): two
    attempts beside others, then one alone, kept with its failed verdict; the gate's cap fell."""
    d, said = _failing_every_attempt(tmp_path, monkeypatch, "tool_wait_per_slice_us")
    meta = json.loads((d / "meta.json").read_text())
    assert meta["attempt"] == 3 and meta["health"]["verdict"] == "fail" and meta["alone"]
    admission = full_meta(d)["host"]["admission"]  # with the set-up records (setup.json)
    assert admission["exclusive"] is True
    assert admission["why"].startswith("alone")
    assert (d / "meta.json").stat().st_size <= 4096
    assert any("alone, with nothing else measuring" in s for s in said)
    assert any("(the last alone)" in s for s in said)
    st = loadgate.state()
    assert st["running"] == {}  # alone in its gate, so no attempt lowered the cap
    assert [e["verdict"] for e in st["events"]] == ["fail", "fail", "fail"]


def _failing_every_attempt(tmp_path, monkeypatch, bound: str):
    """A real 2 s trial whose verdict fails every attempt on ``bound`` alone (set to zero for
    the test), measured with one retry through the gate: (its directory, what it logged)."""
    from latency_divide.trial.retry import run_trial_with_retries

    monkeypatch.setitem(H.BOUNDS, bound, ("max", 0.0, None, "a bound no trial meets (test)"))
    if bound in H.PER_RTT:
        monkeypatch.delitem(H.PER_RTT, bound)
    for other in set(loadgate.CONTENTION) - {bound}:  # neighbours (other tests) break no other
        kind, *_ = H.BOUNDS[other]
        monkeypatch.setitem(H.BOUNDS, other, (kind, 1e9 if kind == "max" else 0.0, None,
                                              "a bound every trial meets (test)"))
    spec = TrialSpec(household=get_household(11406), direction="uplink",
                     variant=Variant(name="cubic", cc="cubic"), duration_s=2.0, idle_s=1.0,
                     tool=ToolSettings(name="tquic-perf", path=None, window_bytes=65536))
    said = []
    d = run_trial_with_retries(spec, tmp_path / "raw", retries=1, log=said.append,
                               expected_rt_cores=0.05, rt_ceiling=1.5)
    return d, said


@pytest.mark.netns
@pytest.mark.slow
def test_a_trial_failing_on_lateness_alone_is_measured_last_beside_the_others(tmp_path, gate_dir,
                                                                              monkeypatch):
    """A real trial whose every attempt breaks the delay line's lateness bound and nothing else
    (the host's stalls, which neighbours do not cause): its last attempt is not alone (it would
    empty the host for nothing) but beside the others, and it is kept with its failed verdict."""
    d, said = _failing_every_attempt(tmp_path, monkeypatch, "delayline_late_p99_us")
    meta = json.loads((d / "meta.json").read_text())
    assert meta["attempt"] == 3 and meta["health"]["verdict"] == "fail"
    assert not meta.get("alone")
    assert [r.split(" ", 1)[0] for r in meta["health"]["reasons"]] == ["delayline_late_p99_us"]
    assert full_meta(d)["host"]["admission"]["exclusive"] is False
    assert not any("alone, with nothing else measuring" in s for s in said), said
    assert any("its last attempt is measured beside the others, not alone" in s for s in said)
    assert [e["verdict"] for e in loadgate.state()["events"]] == ["fail", "fail", "fail"]


def test_the_gate_is_on_the_trial_command_path():
    # `latency-divide trial` refuses a bad gate setting before anything starts
    env = dict(os.environ, **{loadgate.ENV: "many"})
    r = subprocess.run([str(VENV_BIN / "latency-divide"), "trial", "11406", "--direction",
                        "uplink", "--cc", "cubic", "--duration", "2", "--out", "/nonexistent"],
                       env=env, capture_output=True, text=True, cwd=ROOT)
    assert r.returncode != 0 and f"{loadgate.ENV}='many'" in r.stderr, r.stderr
