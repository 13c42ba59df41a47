"""Emulation health (trial.health, testbed.schedwatch): the numbers from real kernel counters
and real files, and the verdict against its bounds."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time

import pytest

from latency_divide.testbed.schedwatch import SchedWatch, psi_avg10, read_psi_some_us
from latency_divide.trial import health as H

SPIN = "import time\nt = time.time()\nwhile time.time() - t < {s}: pass\n"


def _spinner(seconds: float, cpu: int) -> subprocess.Popen:
    return subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c",
                             SPIN.format(s=seconds)])


def test_schedwatch_sees_a_process_wait_for_its_cpu():
    """Two busy loops on one CPU: each waits about half the time; a sleeper waits ~never."""
    a, b = _spinner(1.5, 0), _spinner(1.5, 0)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    try:
        w = SchedWatch(interval_s=0.25)
        w.add("a", a.pid)
        w.add("sleeper", sleeper.pid)
        w.add("gone", 2 ** 22 + 7)  # no such process: no numbers, no error
        w.start()
        time.sleep(1.0)
        w.stop()
    finally:
        for p in (a, b, sleeper):
            p.wait()
    s = w.summary()["processes"]
    assert 250 < s["a"]["wait_ms_per_s"] < 750, s["a"]
    assert s["a"]["wait_ms_per_s_worst"] >= s["a"]["wait_ms_per_s"]
    assert s["sleeper"]["wait_ms_per_s"] < 20, s["sleeper"]
    assert s["gone"]["slices"] == 0


def test_psi_is_read_from_the_kernel():
    if not os.path.exists("/proc/pressure/cpu"):
        pytest.skip("this kernel has no PSI")
    t0 = read_psi_some_us()
    a, b, c = _spinner(0.5, 0), _spinner(0.5, 0), _spinner(0.5, 0)
    for p in (a, b, c):
        p.wait()
    assert read_psi_some_us() > t0
    assert psi_avg10() is not None


def test_delayline_lateness_takes_the_worst_direction():
    line = ("delayline usage cpu_s=1.000 user_s=0.5 sys_s=0.5 wall_s=60 rx_timestamps=kernel "
            "rx_ts_kernel=5 rx_ts_user=0 late_ab_p50_us=20.0 late_ab_p99_us=90.0 "
            "late_ab_max_us=400.5 late_ba_p50_us=30.0 late_ba_p99_us=na late_ba_max_us=2500.0")
    assert H.delayline_lateness(line) == {"p50": 30.0, "p99": 90.0, "max": 2500.0}
    assert H.delayline_lateness("delayline usage cpu_s=1") == {"p50": None, "p99": None,
                                                               "max": None}


def test_queue_sampling_counts_missed_samples_and_gaps(tmp_path):
    times = [100.0 + 0.1 * i for i in range(101)]
    del times[40:60]  # 2 s without a sample
    f = tmp_path / "queue.jsonl.gz"
    with gzip.open(f, "wt") as out:
        for t in times:
            out.write(json.dumps({"t_unix": t, "dev": "ld-gc", "qdisc": []}) + "\n")
    pct, gap = H.queue_sampling(tmp_path / "queue.jsonl", 100.0, 110.0, 0.1)
    assert pct == pytest.approx(81.0, abs=0.5)
    assert gap == pytest.approx(2.1, abs=0.01)


def test_verdict_names_each_broken_bound_and_what_it_could_not_check():
    good = {"tool_wait_ms_per_s": 1.0, "tool_wait_per_slice_us": 5.0,
            "delayline_late_p99_us": 50.0, "queue_samples_pct": 99.0}
    assert H.verdict(good) == {"verdict": "pass", "reasons": [], "unchecked": []}
    bad = dict(good, tool_wait_per_slice_us=255.5, queue_samples_pct=50.0)
    v = H.verdict(bad)
    assert v["verdict"] == "fail"
    assert any("tool_wait_per_slice_us = 255.5 >" in r for r in v["reasons"])
    assert any("queue_samples_pct = 50 <" in r for r in v["reasons"])
    remote = dict(good, tool_wait_ms_per_s=None, tool_wait_per_slice_us=None)
    v = H.verdict(remote)
    assert v["verdict"] == "pass"
    assert v["unchecked"] == ["tool_wait_per_slice_us"]


def test_bounds_table_lists_every_bound():
    table = H.bounds_table()
    for name in H.BOUNDS:
        assert f"`{name}`" in table
