"""The traffic tool's log parser, on real captured tquic-perf output (tests/data/tool/, from
5-second transfers over a 4 Mbit/s, 20 ms topology) and on a tperf-format example."""

from pathlib import Path

import pytest

from latency_divide.parsers.tool import Interval, ToolParseError, parse_tool_log

DATA = Path(__file__).parent / "data" / "tool"


@pytest.mark.parametrize("name, received, duration_s, printed_mibps", [
    ("cubic-client.log", 2326817, 5.00074, 3.54992),
    ("copa-client.log", 2340440, 5.00083, 3.57063),
    ("bbr3-client.log", 2344030, 5.0008, 3.57613),
])
def test_real_tquic_perf_logs(name, received, duration_s, printed_mibps):
    log = parse_tool_log((DATA / name).read_text())
    assert log.complete
    assert log.received_bytes == received
    assert log.duration_s == duration_s
    assert log.throughput_mibps == printed_mibps
    assert log.goodput_kbps == pytest.approx(received * 8 / duration_s / 1000)
    # tperf's "Mb/s" is 2^20 bit/s, so goodput (SI kbit/s) = Mb/s * 1048.576.
    assert log.goodput_kbps == pytest.approx(printed_mibps * 1048.576, rel=1e-5)
    iv = log.intervals
    assert len(iv) == 50 and isinstance(iv[0], Interval)
    assert sum(i.bytes for i in iv) == received == iv[-1].total_bytes
    assert iv[0].elapsed_s == pytest.approx(0.1, abs=0.01)
    assert iv[-1].elapsed_s == pytest.approx(duration_s, abs=1e-4)
    assert log.errors == []


def test_killed_receiver_log_is_incomplete_not_an_error():
    log = parse_tool_log((DATA / "killed-client.log").read_text())
    assert log.complete is False
    assert log.received_bytes is None and log.goodput_kbps is None
    assert len(log.intervals) == 11 and log.intervals[-1].total_bytes == 509789


def test_vanished_server_log_is_incomplete_and_carries_the_error():
    log = parse_tool_log((DATA / "vanish-client.log").read_text())
    assert log.complete is False
    assert len(log.errors) == 1 and "went silent" in log.errors[0]
    assert log.intervals[-1].bytes == 0


def test_log_cut_mid_line_ignores_the_partial_line():
    text = (DATA / "copa-client.log").read_text()
    cut = text[: text.index("Overall throughput:") + 25]    # inside the last line
    log = parse_tool_log(cut)
    assert log.complete is False and len(log.intervals) == 50
    assert parse_tool_log(text[: text.index("interval t_unix=") + 30]).intervals == []


def test_server_log_has_no_summary():
    log = parse_tool_log((DATA / "copa-server.log").read_text())
    assert log.complete is False and log.intervals == []


# A tperf receiver log, CONSTRUCTED (not captured: mvfst cannot be built here) from
# EXPERIMENT.md's description: glog lines on stderr, no periodic output, and the two summary
# lines with X = bytes / 131072 / D printed with 6 significant digits and no space before
# the unit. 24117248 bytes / 131072 / 10.0003 s = 18.3995 "Mb/s".
TPERF_LOG = """\
WARNING: Logging before InitGoogleLogging() is written to STDERR
I1122 10:00:00.100000 31337 TPerf.cpp:420] Connecting to [10.10.1.1]:5550
I1122 10:00:00.150000 31337 TPerf.cpp:310] Client connected
I1122 10:00:10.150300 31337 TPerf.cpp:360] Received 24117248 bytes in 10.0003 seconds.
I1122 10:00:10.150310 31337 TPerf.cpp:364] Overall throughput: 18.3995Mb/s
"""


def test_tperf_format_constructed_example():
    log = parse_tool_log(TPERF_LOG)
    assert log.complete
    assert log.received_bytes == 24117248 and log.duration_s == 10.0003
    assert log.throughput_mibps == 18.3995
    assert log.goodput_kbps == pytest.approx(24117248 * 8 / 10.0003 / 1000)
    assert log.intervals == []


def test_summary_in_scientific_notation_and_without_glog_prefix():
    log = parse_tool_log("Received 123456789012 bytes in 1.5e+06 seconds.\n"
                         "Overall throughput: 0.627934Mb/s\n")
    assert log.complete and log.duration_s == 1.5e6


@pytest.mark.parametrize("bad", [
    "I1122 10:00:00.000000 1 client.rs:1] interval t_unix=abc elapsed_s=0.1 bytes=1 total_bytes=1\n",
    "I1122 10:00:00.000000 1 client.rs:1] Received many bytes in 10 seconds.\n",
    "I1122 10:00:00.000000 1 client.rs:1] Overall throughput: 5Mb/s\n",   # no Received line
])
def test_malformed_records_raise_with_the_line(bad):
    with pytest.raises(ToolParseError, match="line 1"):
        parse_tool_log(bad)


def test_empty_log():
    log = parse_tool_log("")
    assert log.complete is False and log.intervals == [] and log.errors == []
