"""parse_ping on real ping -D -O output captured in namespaces (tests/data/ping/capture.py)."""

import math

import numpy as np
import pytest
from conftest import TEST_DATA

from latency_divide.parsers.ping import parse_ping

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

DATA = TEST_DATA / "ping"


def load(name):
    return (DATA / name).read_text()


def test_loss_log_rows_and_lost_replies():
    df = parse_ping(load("ping_loss.log"))
    assert list(df.columns) == ["t_unix", "seq", "rtt_ms", "dup_count"]
    assert df["seq"].tolist() == list(range(1, 27))
    lost = df.loc[df["rtt_ms"].isna(), "seq"].tolist()
    assert lost == [11, 12, 13, 14, 15, 16]
    # ping's own summary: 26 transmitted, 20 received
    assert df["rtt_ms"].notna().sum() == 20
    assert df.loc[df["seq"] == 1, "rtt_ms"].item() == pytest.approx(0.084)
    assert df.loc[df["seq"] == 1, "t_unix"].item() == pytest.approx(1795313359.769210)
    # the "no answer yet" line's timestamp for a lost probe
    assert df.loc[df["seq"] == 11, "t_unix"].item() == pytest.approx(1795313362.010567)
    assert df["t_unix"].is_monotonic_increasing


def test_duplicates_are_counted_not_sampled():
    df = parse_ping(load("ping_dup.log"))
    assert df["seq"].tolist() == [1, 2, 3, 4]
    assert df["dup_count"].tolist() == [1, 1, 1, 0]  # ping: "+3 duplicates"
    # the first reply is the RTT sample
    assert df["rtt_ms"].tolist() == pytest.approx([0.074, 0.061, 0.060, 0.061])


def test_ttl_exceeded_is_not_an_rtt_sample():
    df = parse_ping(load("ping_ttl_exceeded.log"))
    assert df["seq"].tolist() == [1, 2, 3]
    assert df["rtt_ms"].isna().all()


def test_late_reply_after_no_answer_yet_counts():
    # Built from real lines: the reply for seq 11 arrives after its "no answer yet" line.
    lines = load("ping_loss.log").splitlines()
    noans = next(l for l in lines if "no answer yet for icmp_seq=11" in l)
    reply = "[1795313362.110000] 64 bytes from 10.77.2.2: icmp_seq=11 ttl=63 time=300 ms"
    df = parse_ping(f"{noans}\n{reply}\n")
    assert df["rtt_ms"].tolist() == [300.0]
    assert df["t_unix"].tolist() == [pytest.approx(1795313362.11)]


def test_partial_last_line_is_ignored():
    text = load("ping_loss.log")
    first = text.splitlines()[1]
    cut = text.splitlines()[2][:40]  # "[1795313359.970647] 64 bytes from 10.77.2" (no newline)
    df = parse_ping(first + "\n" + cut)
    assert df["seq"].tolist() == [1]


def test_sequence_wrap_is_unwrapped():
    text = (
        "[100.0] 64 bytes from 10.0.0.1: icmp_seq=65535 ttl=64 time=1.0 ms\n"
        "[100.1] 64 bytes from 10.0.0.1: icmp_seq=0 ttl=64 time=2.0 ms\n"
        "[100.2] no answer yet for icmp_seq=1\n"
    )
    df = parse_ping(text)
    assert df["seq"].tolist() == [65535, 65536, 65537]
    assert math.isnan(df["rtt_ms"].iloc[2])


def test_empty_and_garbage_give_typed_empty_frame():
    for text in ("", "PING 10.0.0.1 (10.0.0.1) 56(84) bytes of data.\n", "garbage\n\n"):
        df = parse_ping(text)
        assert len(df) == 0
        assert df["rtt_ms"].dtype == np.float64 and df["seq"].dtype == np.int64
