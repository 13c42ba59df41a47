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
    assert H.verdict(good) == {"verdict": "pass", "reasons": [], "unchecked": [],
                               "bounds": {"tool_wait_per_slice_us": 150.0,
                                          "delayline_late_p99_us": 1000.0,
                                          "queue_samples_pct": 90.0},
                               "packet_time_us": None}
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


# --- bounds in the link's own units (issue 57) ----------------------------------------------

#: A 1.1 Mbit/s uplink of the $0-30 bucket on 2026-12-01's noisy host: kept with a failed
#: verdict by a hair (a wait of 151-211 µs against 150, lateness p99 1.0-5.1 ms against 1.0)
#: although its numbers agreed with both published repetitions (issue 57).
BY_A_HAIR = {"tool_wait_per_slice_us": 185.0, "delayline_late_p99_us": 3100.0,
             "queue_samples_pct": 100.0}


def test_a_slow_link_failing_by_a_hair_of_host_time_passes_in_its_own_units():
    v = H.verdict(BY_A_HAIR, capacity_kbps=1100)
    assert v["verdict"] == "pass", v["reasons"]
    assert v["packet_time_us"] == pytest.approx(10909.1, abs=0.1)
    # without the link (an old record), the floors alone: it fails as it did
    assert H.verdict(BY_A_HAIR)["verdict"] == "fail"


def test_a_fast_link_keeps_the_floors():
    # at 50 Mbit/s a packet takes 240 µs: the same wait and lateness are many packets late
    v = H.verdict(BY_A_HAIR, capacity_kbps=50_000)
    assert v["verdict"] == "fail"
    assert v["bounds"]["tool_wait_per_slice_us"] == 150.0
    assert v["bounds"]["delayline_late_p99_us"] == 1000.0
    assert len(v["reasons"]) == 2


#: 12430's 64.9 Mbit/s downlink (base RTT 29.3 ms), Copa δ 0.5, under the stall injector at its
#: defaults (2026-12-01, a fresh clone's sweep): kept after four attempts, the last alone, with
#: the delay line's lateness p99 3.32 ms against the 1 ms floor, its waits within bounds, and its
#: numbers within the per-trial bounds of a published repetition.
STALLED_FAST = {"tool_wait_per_slice_us": 40.0, "delayline_late_p99_us": 3320.0,
                "queue_samples_pct": 100.0}


def test_a_fast_link_held_up_by_stalls_a_small_part_of_its_rtt_passes():
    v = H.verdict(STALLED_FAST, capacity_kbps=64_925, rtt_ms=29.3)
    assert v["verdict"] == "pass", v["reasons"]
    assert v["bounds"]["delayline_late_p99_us"] == pytest.approx(3662.5)
    # without its RTT (the bound of before): the floor, and it fails
    assert H.verdict(STALLED_FAST, capacity_kbps=64_925)["verdict"] == "fail"
    # rejudge reads the RTT from the household meta.json records
    meta = {"capacity_kbps": 64_925, "household": {"unit_id": 12430, "rtt_ms": 29.3},
            "health": dict(STALLED_FAST, verdict="fail")}
    assert H.rejudge(meta)["verdict"] == "pass"


def test_a_lateness_that_went_with_a_disagreement_still_fails():
    # 6046's 11.3 Mbit/s downlink (RTT 33.5 ms) at three times the injector's duty: lateness
    # p99 9.5 ms, 0.28 of its RTT, and a self-delay of 36.9 ms against 8.1-8.7 published
    v = H.verdict({"tool_wait_per_slice_us": 12.7, "delayline_late_p99_us": 9520.0,
                   "queue_samples_pct": 100.0}, capacity_kbps=11_340, rtt_ms=33.5)
    assert v["verdict"] == "fail" and v["bounds"]["delayline_late_p99_us"] == 4187.5


def test_bounds_grow_with_the_packet_time_above_the_floor():
    slow, mid = H.packet_time_us(500), H.packet_time_us(5000)
    assert slow == pytest.approx(24000.0) and mid == pytest.approx(2400.0)
    for name, (kind, floor, per_packet, _what) in H.BOUNDS.items():
        if per_packet is None:
            assert H.bound_for(name, slow) == floor
            continue
        assert H.bound_for(name, slow) == pytest.approx(max(floor, per_packet * slow))
        assert H.bound_for(name, slow) >= H.bound_for(name, mid) >= floor
        assert H.bound_for(name, None) == floor
    assert H.packet_time_us(0) is None and H.packet_time_us(None) is None


def test_rejudge_uses_the_recorded_capacity():
    meta = {"capacity_kbps": 733, "health": dict(BY_A_HAIR, verdict="fail")}
    assert H.rejudge(meta)["verdict"] == "pass"
    assert H.rejudge({"capacity_kbps": 733}) is None
