"""testbed.haltpoll: the host's guest halt polling, held while trials run and put back after,
on this machine's real sysfs parameter where it has the haltpoll governor."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from latency_divide.errors import ConfigError
from latency_divide.testbed import haltpoll, netns
from latency_divide.testbed.haltpoll import (
    DEFAULT_NS,
    ENV,
    HOST_DIR,
    PARAM,
    clean_halt_poll,
    halt_polling,
    read_ns,
    wanted_ns,
)

from conftest import ROOT, VENV_BIN

#: with pytest.mark.netns (conftest's gate for root): a host with the governor (a virtual
#: machine's guest), whose real parameter the test writes
needs_governor = pytest.mark.skipif(read_ns() is None,
                                    reason="no haltpoll cpuidle governor on this host")


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setattr(netns, "STATE_DIR", tmp_path)
    return tmp_path


def _no_holder() -> None:
    """The host's parameter is one per host, and so are its holders' records: a test that
    writes it runs while no trial job of any run holds it."""
    HOST_DIR.mkdir(parents=True, exist_ok=True)
    live = [r.name for r in HOST_DIR.iterdir()
            if r.name.isdigit() and os.path.exists(f"/proc/{r.name}")]
    assert not live, f"trial jobs {live} hold the host's halt polling: test later"


@pytest.fixture
def host_value():
    """The host's own value, put back whatever the test does."""
    before = read_ns()
    yield before
    if read_ns() != before:
        PARAM.write_text(f"{before}\n")


def test_the_wanted_value_and_bad_ones():
    assert wanted_ns({}) == DEFAULT_NS == 200_000
    assert wanted_ns({ENV: "off"}) is None and wanted_ns({ENV: "OFF"}) is None
    assert wanted_ns({ENV: "0"}) == 0 and wanted_ns({ENV: "2000000"}) == 2_000_000
    for bad in ("-1", "2000001", "fast", "1e5", ""):
        with pytest.raises(ConfigError, match=f"{ENV}={bad!r}: must be 'off'"):
            wanted_ns({ENV: bad})


def test_a_host_without_the_governor_is_left_alone(state, tmp_path):
    missing = tmp_path / "no-such-param"
    with halt_polling(DEFAULT_NS, param=missing) as rec:
        assert rec == {"halt_poll_ns": None, "host_halt_poll_ns": None}
    assert not missing.exists() and not haltpoll._dir(missing).exists()
    assert clean_halt_poll(param=missing) == ([], None)


@pytest.mark.netns
@needs_governor
def test_held_while_any_holder_lives_and_put_back_by_the_last(state, host_value):
    _no_holder()
    low = min(host_value, DEFAULT_NS)
    PARAM.write_text(f"{low}\n")  # a host that polls less than trials ask (0 on ours)
    with halt_polling(DEFAULT_NS) as rec:
        assert rec == {"halt_poll_ns": DEFAULT_NS, "host_halt_poll_ns": low}
        assert read_ns() == DEFAULT_NS
        # a second trial job asks for more while the first holds it
        child = subprocess.Popen(
            [sys.executable, "-c",
             "import time; from latency_divide.testbed.haltpoll import halt_polling\n"
             "with halt_polling(300000) as r:\n print(r, flush=True); time.sleep(60)"],
            env={**os.environ, "LATENCY_DIVIDE_STATE_DIR": str(state),
                 "PYTHONPATH": str(ROOT / "src")},
            stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == (
                f"{{'halt_poll_ns': 300000, 'host_halt_poll_ns': {low}}}")
            assert read_ns() == 300000
        except BaseException:
            child.kill()
            raise
    # the first has left, the second still holds it: not put back
    assert read_ns() == 300000 and not (HOST_DIR / str(os.getpid())).exists()
    child.kill()  # it dies without its finally: its record stays
    child.wait()
    assert (HOST_DIR / str(child.pid)).exists()
    assert clean_halt_poll() == ([f"haltpoll/{child.pid}"], "the host's guest halt polling "
                                 f"(haltpoll guest_halt_poll_ns) back to its own {low} ns")
    assert read_ns() == low and not (HOST_DIR / "host-value").exists()
    assert clean_halt_poll() == ([], None)  # safely re-runnable


@pytest.mark.netns
@needs_governor
def test_a_dead_runs_saved_value_wins(state, host_value):
    """A run that died while holding it left the raised value in force and the host's own value
    saved: the next trial keeps that saved value and puts it back when it leaves."""
    _no_holder()
    low = min(host_value, DEFAULT_NS)
    d = HOST_DIR
    (d / haltpoll.HOST_VALUE).write_text(f"{low}\n")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (d / str(dead.pid)).write_text(f"{DEFAULT_NS}\n")
    PARAM.write_text(f"{DEFAULT_NS}\n")  # what the dead run left in force
    with halt_polling(DEFAULT_NS) as rec:
        assert rec == {"halt_poll_ns": DEFAULT_NS, "host_halt_poll_ns": low}
        assert not (d / str(dead.pid)).exists()
    assert read_ns() == low and not (d / haltpoll.HOST_VALUE).exists()


@pytest.mark.netns
@needs_governor
def test_off_leaves_the_host_alone(state, host_value):
    with halt_polling(None) as rec:
        assert rec == {"halt_poll_ns": host_value, "host_halt_poll_ns": host_value}
        assert read_ns() == host_value
    assert not (HOST_DIR / str(os.getpid())).exists()


@pytest.mark.netns
@needs_governor
def test_the_clean_command_puts_the_host_value_back(host_value):
    """`latency-divide clean`, as the README has users type it, after a trial job died holding
    the halt polling (this host's real state directory: no trial may run meanwhile)."""
    low = min(host_value, DEFAULT_NS)
    d = HOST_DIR
    _no_holder()
    (d / haltpoll.HOST_VALUE).write_text(f"{low}\n")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (d / str(dead.pid)).write_text(f"{DEFAULT_NS}\n")
    PARAM.write_text(f"{DEFAULT_NS}\n")
    out = subprocess.run([str(VENV_BIN / "latency-divide"), "clean"], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"removed stale state file haltpoll/{dead.pid}" in out.stdout
    assert ("restored the host's guest halt polling (haltpoll guest_halt_poll_ns) back to its "
            f"own {low} ns: no live trial job holds it") in out.stdout
    assert read_ns() == low and not (d / haltpoll.HOST_VALUE).exists()
    again = subprocess.run([str(VENV_BIN / "latency-divide"), "clean"], capture_output=True,
                           text=True)
    assert "halt polling" not in again.stdout and read_ns() == low


HOLD = ("import sys, time\nfrom latency_divide.testbed.haltpoll import halt_polling\n"
        "with halt_polling(200000) as r:\n print(r, flush=True); sys.stdin.readline()\n")


@pytest.mark.netns
@needs_governor
def test_runs_with_other_state_directories_share_one_record_of_the_host(tmp_path, host_value):
    """Two runs with different testbed state directories (a test's own beside a sweep, two
    clones) hold the one parameter of the host: the later sees the earlier as a holder, keeps
    the host's own value, and the last to leave puts that back, whichever it is. With the
    records per state directory the later saved the earlier's 200000 as the host's own and put
    it back after both had left (2026-12-01)."""
    _no_holder()
    low = min(host_value, DEFAULT_NS - 1)
    PARAM.write_text(f"{low}\n")
    runs = []
    try:
        for name in ("sweep", "test"):
            p = subprocess.Popen([sys.executable, "-c", HOLD], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True,
                                 env={**os.environ, "PYTHONPATH": str(ROOT / "src"),
                                      "LATENCY_DIVIDE_STATE_DIR": str(tmp_path / name)})
            runs.append(p)
            assert p.stdout.readline().strip() == (
                f"{{'halt_poll_ns': {DEFAULT_NS}, 'host_halt_poll_ns': {low}}}")
        for p in runs:  # the earlier leaves first, then the later
            p.stdin.write("\n")
            p.stdin.flush()
            assert p.wait(timeout=30) == 0
        assert read_ns() == low
    finally:
        for p in runs:
            p.kill()
            p.wait()
