"""trial.instrument: which instrument measured a trial, from the trial's own logs."""

from __future__ import annotations

import json

import pytest

from latency_divide.trial import instrument

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

# The delay line 0.2's lines, as a 20 s trial of 27337's downlink logged them.
V2_LOG = """\
delayline ready a=ld-dg b=ld-dc delay_ab_ms=8.6315 delay_ba_ms=8.6315 limit=50000 spin_us=0 \
rt_priority=10 rx_timestamps=kernel engine=batched window_us=250 early_us=125 frames_per_wake=4
delayline stats a->b frames=113659 bytes=141008396 drops=0 b->a frames=43967 bytes=3417680 drops=0
delayline usage cpu_s=2.661 user_s=0.282 sys_s=2.379 wall_s=23.414 rx_timestamps=kernel \
rx_ts_kernel=157626 rx_ts_user=0 late_ab_p50_us=70.0 late_ab_p99_us=210.0 late_ab_max_us=2122.3 \
late_ba_p50_us=70.0 late_ba_p99_us=210.0 late_ba_max_us=2300.0 engine=batched window_us=250 \
early_us=125 wakeups=69411 wakeups_arrival=37 recv_calls=138854 send_calls=112122 \
early_ab_p99_us=125.0 early_ab_max_us=125.0 early_ba_p99_us=119.9 early_ba_max_us=119.9 version=0.2.0 \
frames_per_wake=4 window_mean_us=231.5
"""
# The delay line 0.1's (a published trial's) lines: no engine, no version.
V1_LOG = """\
delayline ready a=ld-dg b=ld-dc delay_ab_ms=8.6315 delay_ba_ms=8.6315 limit=50000 spin_us=0 \
rt_priority=10 rx_timestamps=kernel
delayline stats a->b frames=100 bytes=150000 drops=0 b->a frames=50 bytes=3000 drops=0
delayline usage cpu_s=0.007 user_s=0.001 sys_s=0.006 wall_s=3.0 rx_timestamps=kernel \
rx_ts_kernel=150 rx_ts_user=0 late_ab_p50_us=30.0 late_ab_p99_us=150.0 late_ab_max_us=300.0 \
late_ba_p50_us=30.0 late_ba_p99_us=160.0 late_ba_max_us=400.0
"""


def test_batched_delay_line_is_the_current_generation():
    rec = instrument.instrument("delayline", V2_LOG, "", "", "tquic-perf", "tquic-perf 0.1.0")
    dl = rec["delay"]["delayline"]
    assert rec["generation"] == instrument.CURRENT == "v2"
    assert dl["engine"] == "batched" and dl["version"] == "0.2.0"
    assert dl["window_us"] == 250 and dl["early_us"] == 125
    assert dl["frames_per_wake"] == 4 and dl["window_mean_us"] == 231.5
    assert dl["frames"] == 113659 + 43967 and dl["wakeups"] == 69411
    assert dl["wakeups_per_frame"] == round(69411 / 157626, 4)
    assert dl["cpu_us_per_frame"] == round(2.661e6 / 157626, 2)
    json.dumps(rec)  # it goes into meta.json


def test_the_two_thread_delay_line_is_legacy():
    rec = instrument.instrument("delayline", V1_LOG, "", "", "tquic-perf", None)
    assert rec["generation"] == "v1"
    assert rec["delay"]["delayline"]["engine"] == "threads"
    assert rec["delay"]["delayline"]["wakeups"] is None
    assert rec["delay"]["delayline"]["frames_per_wake"] is None
    # netem has no user-space delay line: the current generation, no delay-line record
    rec = instrument.instrument("netem", "", "", "", "tperf", None)
    assert rec["generation"] == "v2" and "delayline" not in rec["delay"]


def test_tool_batching_is_read_from_the_json_summary():
    doc = {"format_version": 3, "batching": {"send": "gso", "recv": "recvmmsg"}}
    rec = instrument.instrument("delayline", V2_LOG, json.dumps(doc), "{}", "tquic-perf", None)
    assert rec["tool"]["sender_batching"] == {"send": "gso", "recv": "recvmmsg"}
    assert rec["tool"]["receiver_batching"] is None
    assert instrument.tool_batching("not json") is None


def test_published_trials_without_a_record_are_legacy():
    assert instrument.generation_of({}) == "v1"
    assert instrument.generation_of({"instrument": {"generation": "v2"}}) == "v2"
    with pytest.raises(ValueError, match="'v9' is not one of v1, v2, v3"):
        instrument.generation_of({"instrument": {"generation": "v9"}})
    assert instrument.generation_of({"instrument": None}) == "v1"


def test_meta_keeps_a_compact_record():
    doc = {"batching": {"send": {"mode": "gso", "syscalls": 9},
                        "recv": {"mode": "recvmmsg"}}}
    rec = instrument.instrument("delayline", V2_LOG, json.dumps(doc), "", "tquic-perf",
                                "tquic-perf 0.2.0")
    c = instrument.compact(rec)
    assert c == {"generation": "v2",
                 "delay": {"mechanism": "delayline",
                           "delayline": {"version": "0.2.0", "engine": "batched",
                                         "window_us": 250, "frames_per_wake": 4,
                                         "wakeups_per_frame": round(69411 / 157626, 4)},
                           "rx_napi": "off"},
                 "tool": {"name": "tquic-perf", "version": "tquic-perf 0.2.0",
                          "sender": {"send": "gso", "recv": "recvmmsg"}, "receiver": None}}
    assert instrument.generation_of({"instrument": c}) == "v2"
    assert len(json.dumps(c)) < 600


def test_threaded_receiving_napi_is_generation_v3():
    rec = instrument.instrument("delayline", V2_LOG, "", "", "tquic-perf", None, "threaded")
    assert rec["generation"] == instrument.FAST == "v3"
    assert rec["delay"]["rx_napi"] == "threaded"
    c = instrument.compact(rec)
    assert c["generation"] == "v3" and c["delay"]["rx_napi"] == "threaded"
    assert instrument.generation_of({"instrument": c}) == "v3"
    # the two-thread delay line stays v1 whatever its receivers had; netem has no delay line
    assert instrument.instrument("delayline", V1_LOG, "", "", "tquic-perf", None,
                                 "threaded")["generation"] == "v1"
    rec = instrument.instrument("netem", "", "", "", "tquic-perf", None, "threaded")
    assert rec["generation"] == "v2" and "rx_napi" not in rec["delay"]


def test_receiving_napi_is_threaded_above_250_mbit_for_the_variants_checked():
    assert instrument.rx_napi_for("delayline", 250.0) == "off"
    assert instrument.rx_napi_for("delayline", 236.5, cc="cubic") == "off"
    for cc, delta in (("cubic", None), ("bbr", None), ("copa", 0.04), ("copa", 0.01)):
        assert instrument.rx_napi_for("delayline", 299.7, cc=cc, delta=delta) == "threaded"
    # v3 moved Copa delta 0.5 against v2: its trials stay v2
    assert instrument.rx_napi_for("delayline", 299.7, cc="copa", delta=0.5) == "off"
    assert instrument.rx_napi_for("delayline", 299.7, cc="copa", delta=0.1) == "off"
    assert instrument.rx_napi_for("delayline", 299.7, cc="bbr3") == "off"
    assert instrument.rx_napi_for("netem", 354.5, cc="cubic") == "off"
    assert instrument.rx_napi_for("delayline", 5.0, "threaded", "copa", 0.5) == "threaded"
    assert instrument.rx_napi_for("delayline", 354.5, "off", "cubic") == "off"
    assert instrument.planned_generation(64.9) == "v2"
    assert instrument.planned_generation(299.7) == "v3"
    assert instrument.planned_generation(299.7, cc="copa", delta=0.5) == "v2"
    assert instrument.planned_generation(354.5, "netem") == "v2"
    with pytest.raises(ValueError, match="'fast': use one of auto, off, threaded"):
        instrument.rx_napi_for("delayline", 300.0, "fast")
