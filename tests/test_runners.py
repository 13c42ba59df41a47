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


def test_ip_and_tc_in_a_namespace_switch_to_it_themselves():
    r = LocalRunner("ld-abc123-gw")
    assert r.wrap(["ip", "link", "set", "lo", "up"]) == ["ip", "-n", "ld-abc123-gw", "link",
                                                        "set", "lo", "up"]
    assert r.wrap(["tc", "qdisc", "show"])[:3] == ["tc", "-n", "ld-abc123-gw"]
    assert r.wrap(["ethtool", "-k", "lo"])[:4] == ["ip", "netns", "exec", "ld-abc123-gw"]
    assert LocalRunner().wrap(["ip", "link"]) == ["ip", "link"]


def test_a_batch_refuses_what_its_reader_would_change():
    r = LocalRunner()
    with pytest.raises(ValueError, match="one program"):
        r.run_batch([["ip", "link"], ["tc", "qdisc", "show"]])
    with pytest.raises(ValueError, match="one program"):
        r.run_batch([["ethtool", "-k", "lo"]])
    for word in ("a b", 'a"', "a#b", "a\\b", ""):
        with pytest.raises(ValueError, match="cannot be passed"):
            r.run_batch([["ip", "link", "show", word]])


@pytest.mark.netns
def test_a_batch_runs_in_order_in_the_namespace_and_names_the_command_that_failed():
    from latency_divide.testbed.netns import new_tag, ns_name, remove_namespaces, \
        write_owner_record

    tag = new_tag()
    ns = ns_name(tag, "gw")
    record = write_owner_record(tag, [ns])
    host = LocalRunner()
    try:
        host.run_batch([["ip", "netns", "add", ns]])
        r = LocalRunner(ns)
        r.run_batch([["ip", "link", "add", "ld-t0", "type", "veth", "peer", "name", "ld-t1"],
                     ["ip", "addr", "add", "10.99.0.1/24", "dev", "ld-t0"],
                     ["ip", "link", "set", "ld-t0", "up"]])
        out = r.run(["ip", "-o", "addr", "show", "dev", "ld-t0"]).stdout
        assert "10.99.0.1/24" in out
        assert "ld-t0" not in host.run(["ip", "-o", "link"]).stdout  # not the host's
        with pytest.raises(runners.CommandError) as e:
            r.run_batch([["ip", "link", "set", "ld-t0", "down"],
                         ["ip", "link", "set", "ld-nosuch", "up"],
                         ["ip", "link", "del", "ld-t0"]])
        assert "ld-nosuch" in str(e.value)
        # it stopped there: the command after the failing one did not run
        assert "state DOWN" in r.run(["ip", "-o", "link", "show", "ld-t0"]).stdout
    finally:
        assert remove_namespaces([ns]) == []
        record.unlink(missing_ok=True)
    assert not LocalRunner().run(["ip", "netns", "list"]).stdout.count(ns)
