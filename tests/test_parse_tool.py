"""The traffic tool's log parser, on real captured tquic-perf output (tests/data/tool/, from
5-second transfers over a 4 Mbit/s, 20 ms topology), on real captured mvfst tperf output
(tests/data/tool/tperf-*, see its README.md) and on a tperf-format example.

The sender's RTT report (sender.json, sender.log): on the captured logs (before tquic-perf
reported RTT samples), on the output of the real binary (target/release/tquic-perf, a short
transfer over loopback, no namespaces needed) and, for mvfst, on the real tperf qlog
(tests/data/qlog/)."""

import gzip
import json
import re
import shutil
import socket

import pytest
from conftest import ROOT, TEST_DATA

from latency_divide.analysis.metrics import sender_loss_pct_of, transport_rtt_of
from latency_divide.trial import rawio
from latency_divide.parsers.tool import (
    Batching,
    Interval,
    SenderRtt,
    ToolParseError,
    parse_batching_json,
    parse_sender_json,
    parse_sender_log,
    parse_tool_log,
)
from latency_divide.testbed.runners import LocalRunner, wait_for

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

DATA = TEST_DATA / "tool"
TOOL = ROOT / "target" / "release" / "tquic-perf"


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


# Real mvfst tperf output (commit 979f26a9, glog 0.6; tests/data/tool/README.md). glog >= 0.5
# prints the year in the prefix ("I20261123 05:20:43.455539 ..."); the summary's duration is
# tperf's configured -duration in whole seconds and a third line "Average per Stream
# throughput: ..." follows. Numbers below are copied from the files, not computed.
@pytest.mark.parametrize("name, received, duration_s, printed_mibps, goodput_kbps", [
    ("tperf-glog-year-client-cubic.stderr", 746316767, 3.0, 1897.98, 1990178.0453333),
    ("tperf-glog-year-client-copa.stderr", 3725918, 3.0, 9.4755, 9935.7813333),
])
def test_real_tperf_logs_with_year_in_glog_prefix(name, received, duration_s, printed_mibps,
                                                  goodput_kbps):
    text = (DATA / name).read_text()
    assert text.startswith("I2026") and "Average per Stream throughput" in text
    log = parse_tool_log(text)
    assert log.complete
    assert log.received_bytes == received
    assert log.duration_s == duration_s
    assert log.throughput_mibps == printed_mibps
    assert log.goodput_kbps == pytest.approx(goodput_kbps, rel=1e-9)
    assert log.intervals == [] and log.errors == []


def _drop_year(text: str) -> str:
    """The year-less prefix glog prints with -log_year_in_prefix=false (I20261123 -> I1123)."""
    return re.sub(r"^([IWEF])2026(\d{4} )", r"\1\2", text, flags=re.MULTILINE)


@pytest.mark.parametrize("name", [
    "tperf-glog-year-client-cubic.stderr",
    "tperf-glog-year-client-copa.stderr",
    "tperf-glog-year-server-cubic.stderr",
])
def test_tperf_logs_without_year_parse_identically(name):
    text = (DATA / name).read_text()
    yearless = _drop_year(text)
    assert "I2026" not in yearless and yearless.count("\nI1123 ") >= 4
    assert parse_tool_log(yearless) == parse_tool_log(text)


def test_real_tperf_trial_receiver_log_without_year():
    # receiver.log.gz of a 20 s trial on the local testbed, tperf with 2021-like flags and
    # -log_year_in_prefix=false.
    text = gzip.decompress((DATA / "tperf-2021flags-receiver.log.gz").read_bytes()).decode()
    assert text.startswith("I1123 ")
    log = parse_tool_log(text)
    assert log.complete
    assert log.received_bytes == 3269932
    assert log.duration_s == 20.0
    assert log.throughput_mibps == 1.24738
    assert log.goodput_kbps == pytest.approx(1307.9728, rel=1e-9)
    assert log.errors == []


NORMAL_CLOSE_ERROR = ("write error with stream=3 error=ApplicationError: No Error, "
                      "Server closed by peer reason=No Error")


@pytest.mark.parametrize("name", [
    "tperf-glog-year-server-cubic.stderr",   # year prefix
    "tperf-2021flags-sender.log",            # year-less prefix
])
def test_real_tperf_server_log_normal_close_error_line(name):
    # The server logs an E line when the client closes (the normal end of a transfer), then
    # folly's SIGTERM banner and stack trace: no summary, no parse error.
    log = parse_tool_log((DATA / name).read_text())
    assert log.complete is False and log.received_bytes is None
    assert log.errors == [NORMAL_CLOSE_ERROR]


def test_error_lines_do_not_make_a_complete_log_incomplete():
    text = (DATA / "tperf-glog-year-client-copa.stderr").read_text()
    text += ("E20261123 05:20:47.547394 25647 TperfServer.cpp:702] write error with stream=3 "
             "error=ApplicationError: No Error, Server closed by peer reason=No Error\n")
    log = parse_tool_log(text)
    assert log.complete and log.received_bytes == 3725918
    assert len(log.errors) == 1 and log.errors[0].startswith("write error with stream=3")


def _tperf_summary(date: str) -> str:
    return (f"I{date} 05:20:47.544029 25649 TperfClient.cpp:68] "
            "Received 3725918 bytes in 3 seconds.\n"
            f"I{date} 05:20:47.544058 25649 TperfClient.cpp:70] Overall throughput: 9.4755Mb/s\n"
            f"E{date} 05:20:47.547394 25647 TperfServer.cpp:702] write error with stream=3\n")


@pytest.mark.parametrize("date, is_prefix", [
    ("1123", True),        # mmdd
    ("20261123", True),    # yyyymmdd
    ("123", False),
    ("11230", False),
    ("261123", False),     # yymmdd: not a glog prefix
    ("2026112", False),
    ("202611230", False),
])
def test_only_4_or_8_digit_dates_are_glog_prefixes(date, is_prefix):
    # A line with a malformed prefix is read whole: not a summary record, not an error line.
    log = parse_tool_log(_tperf_summary(date))
    assert log.complete is is_prefix
    assert log.received_bytes == (3725918 if is_prefix else None)
    assert log.errors == (["write error with stream=3"] if is_prefix else [])


# ------------------------------------------------------------------------------------------
# the sender's RTT report
# ------------------------------------------------------------------------------------------

def test_captured_sender_log_before_rtt_samples_has_none():
    rtt = parse_sender_log((DATA / "copa-server.log").read_text())
    assert rtt == SenderRtt(min_rtt_ms=20.135, srtt_ms=27.211, packets_sent=2075,
                            packets_lost=0)
    assert rtt.rtt_samples is None and rtt.rtt_mean_ms is None
    assert rtt.loss_pct == 0.0
    assert SenderRtt(packets_sent=2075).loss_pct is None
    assert SenderRtt(packets_sent=0, packets_lost=0).loss_pct is None


@pytest.mark.parametrize("name", [
    "tperf-2021flags-sender.log", "tperf-glog-year-server-cubic.stderr", "copa-client.log",
])
def test_logs_without_a_connection_stats_line_give_none(name):
    assert parse_sender_log((DATA / name).read_text()) is None


def test_old_fixture_trial_has_no_transport_rtt():
    # A trial of JSON format 1 (no rtt_* keys) and its sender.log without them.
    trial = TEST_DATA / "trials" / "def-062df6263f" / "9254" / "downlink" / "cubic" / "rep1"
    assert parse_sender_json((trial / "sender.json").read_text()).rtt_samples is None
    assert transport_rtt_of(trial) == (None, None)


@pytest.mark.parametrize("text, match", [
    ("{", "not valid JSON"),
    ("[]", "no 'sender' object"),
    ('{"sender": {"rtt_samples": 1.5}}', "rtt_samples=1.5 is not a number"),
    ('{"sender": {"rtt_mean_ms": "x"}}', "is not a number"),
    ('{"sender": {"rtt_mean_ms": -1}}', "out of range"),
])
def test_malformed_sender_json_raises(text, match):
    with pytest.raises(ToolParseError, match=match):
        parse_sender_json(text)


def test_malformed_or_cut_connection_stats_line():
    line = (DATA / "copa-server.log").read_text().splitlines()[-1]
    with pytest.raises(ToolParseError, match="line 1: srtt_ms='abc'"):
        parse_sender_log(line.replace("srtt_ms=27.211", "srtt_ms=abc") + "\n")
    assert parse_sender_log(line) is None      # no newline: cut mid-write, ignored


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def loopback_run(tmp_path_factory):
    """sender.log and sender.json of a real 2-s Copa transfer over loopback."""
    if not TOOL.is_file():
        pytest.fail(f"{TOOL} is missing: cargo build --release -p tquic-perf")
    d = tmp_path_factory.mktemp("loopback")
    port = str(_free_udp_port())
    server = LocalRunner().start(
        [str(TOOL), "-mode", "server", "-host", "127.0.0.1", "-port", port, "-once",
         "-congestion", "copa", "-latency_factor", "0.5", "-json", str(d / "sender.json")],
        stderr=d / "sender.log")
    try:
        wait_for(lambda: "server listening" in (d / "sender.log").read_text()
                 or server.poll() is not None, timeout=10, what="the server to listen")
        res = LocalRunner().run(
            [str(TOOL), "-mode", "client", "-host", "127.0.0.1", "-port", port,
             "-duration", "2", "-json", str(d / "receiver.json")], check=False, timeout=30)
        assert res.returncode == 0, res.stderr[-2000:]
        assert server.wait(timeout=15) == 0
    finally:
        server.stop()
    return d


def test_real_sender_report_has_rtt_samples_in_json_and_log(loopback_run):
    d = loopback_run
    doc = json.loads((d / "sender.json").read_text())
    assert doc["format_version"] == 3
    js = parse_sender_json((d / "sender.json").read_text())
    log = parse_sender_log((d / "sender.log").read_text())
    # The log line and the JSON report the same connection with the same numbers.
    assert log == js
    assert js.rtt_samples > 10
    assert doc["sender"]["packets_sent"] >= js.rtt_samples
    assert js.min_rtt_ms <= js.rtt_p50_ms * 1.005 <= js.rtt_p90_ms * 1.01
    assert js.min_rtt_ms <= js.rtt_mean_ms < 1000
    assert js.loss_pct == pytest.approx(100.0 * doc["sender"]["packets_lost"]
                                        / doc["sender"]["packets_sent"])
    # The client reports no sender numbers.
    rj = parse_sender_json((d / "receiver.json").read_text())
    assert rj.rtt_samples is None and rj.rtt_mean_ms is None and rj.loss_pct is None


def test_real_reports_say_how_the_socket_batched(loopback_run):
    """Loopback takes UDP GSO: the sender sends several packets per syscall, and the
    receiver reads them (GRO-coalesced) in fewer calls than packets."""
    sender = parse_batching_json((loopback_run / "sender.json").read_text())
    receiver = parse_batching_json((loopback_run / "receiver.json").read_text())
    assert (sender.send_requested, sender.send_mode, sender.send_fallback) == ("gso", "gso", None)
    assert sender.send_packets > 1000 and sender.send_syscalls_per_packet < 0.5
    assert receiver.recv_mode in ("gro", "recvmmsg") and receiver.recv_fallback is None
    assert receiver.recv_syscalls_per_packet < 1
    assert receiver.recv_datagrams <= receiver.recv_packets


def test_reports_before_batching_have_none_and_malformed_ones_raise():
    assert parse_batching_json('{"format_version": 2, "sender": {}}') is None
    good = {"send": {"requested": "gso", "mode": "sendmmsg", "fallback_reason": "refused",
                     "syscalls": 10, "packets": 640},
            "recv": {"requested": "gro", "mode": "gro", "fallback_reason": None,
                     "syscalls": 5, "datagrams": 20, "packets": 100}}
    b = parse_batching_json(json.dumps({"batching": good}))
    assert b == Batching("gso", "sendmmsg", "refused", 10, 640, "gro", "gro", None, 5, 20, 100)
    assert (b.send_syscalls_per_packet, b.recv_syscalls_per_packet) == (10 / 640, 0.05)
    for side, key, value, match in [("send", "mode", "gsoo", "not one of"),
                                    ("recv", "packets", -1, "not a count"),
                                    ("recv", "syscalls", 1.5, "not a count"),
                                    ("send", "fallback_reason", 3, "fallback_reason")]:
        bad = json.loads(json.dumps(good))
        bad[side][key] = value
        with pytest.raises(ToolParseError, match=match):
            parse_batching_json(json.dumps({"batching": bad}))


def test_transport_rtt_of_a_trial_from_sender_json_else_sender_log(loopback_run, tmp_path):
    js = parse_sender_json((loopback_run / "sender.json").read_text())
    shutil.copy(loopback_run / "sender.json", tmp_path)
    shutil.copy(loopback_run / "sender.log", tmp_path)
    assert transport_rtt_of(tmp_path) == (js.rtt_mean_ms, js.rtt_samples)
    assert sender_loss_pct_of(tmp_path) == js.loss_pct
    (tmp_path / "sender.json").write_text("{")          # unreadable: the log is used
    assert transport_rtt_of(tmp_path) == (js.rtt_mean_ms, js.rtt_samples)
    assert sender_loss_pct_of(tmp_path) == js.loss_pct
    (tmp_path / "sender.json").unlink()
    assert transport_rtt_of(tmp_path) == (js.rtt_mean_ms, js.rtt_samples)
    (tmp_path / "sender.log").unlink()
    assert sender_loss_pct_of(tmp_path) is None


def test_transport_rtt_of_a_tperf_trial_from_its_qlog(tmp_path):
    # The real tperf server qlog (tests/data/qlog/README.md): 95 acks, one sample each.
    assert transport_rtt_of(tmp_path) == (None, None)
    (tmp_path / "sender.log").write_text((DATA / "tperf-2021flags-sender.log").read_text())
    (tmp_path / "qlog").mkdir()
    shutil.copy(TEST_DATA / "qlog" / "tperf-11406-copa-0.8-3s.qlog.gz", tmp_path / "qlog")
    mean, n = transport_rtt_of(tmp_path)
    assert n == 95
    assert mean == pytest.approx(82.4999, abs=1e-4)
    assert 67.567 <= mean < 200     # above the qlog's min RTT
    assert sender_loss_pct_of(tmp_path) is None     # tperf's logs do not report it
    # format 4: the qlog packed in the trial's archive gives the same numbers
    (tmp_path / "meta.json").write_text("{}")
    assert rawio.pack(tmp_path) == ["qlog/tperf-11406-copa-0.8-3s.qlog.gz", "sender.log"]
    assert transport_rtt_of(tmp_path) == (mean, n)


def test_qlog_summary_is_the_qlogs_numbers(tmp_path):
    # tool.qlog: a trial keeps summarize_server_qlog's report, not the qlog. Its scan of the
    # bytes gives what parsing the JSON gives (the real tperf qlog: 95 acks), and the packets
    # sent and declared lost; the analysis reads the report as the sender's.
    from latency_divide.parsers.qlog import QlogError, read_qlog, rtt_samples, summarize_server_qlog
    from latency_divide.trial.layout import QLOG_SUMMARY

    qlog = tmp_path / "q" / "server.qlog"
    qlog.parent.mkdir()
    qlog.write_bytes(gzip.decompress((TEST_DATA / "qlog" / "tperf-11406-copa-0.8-3s.qlog.gz")
                                     .read_bytes()))
    doc = read_qlog(qlog)
    want = rtt_samples(doc, vantage="server")
    got = summarize_server_qlog([qlog])
    s = got["sender"]
    assert s["rtt_samples"] == len(want) == 95
    assert s["rtt_mean_ms"] == pytest.approx(sum(x.latest_rtt_ms for x in want) / 95, rel=1e-12)
    rtts = sorted(x.latest_rtt_ms for x in want)
    assert (s["rtt_p50_ms"], s["rtt_p90_ms"]) == (rtts[47], rtts[85])   # nearest rank
    assert s["min_rtt_ms"] == min(x.min_rtt_ms for x in want)
    events = [e["name"] for e in doc["traces"][0]["events"]]
    assert s["packets_sent"] == events.count("quic:packet_sent") > 0
    assert s["packets_lost"] == sum(e["data"]["lost_packets"] for e in doc["traces"][0]["events"]
                                    if e["name"] == "quic:packet_lost")
    assert got["qlogs"] == [{"name": "server.qlog", "bytes": qlog.stat().st_size,
                             "events": {n: events.count(n) for n in sorted(set(events))}}]
    (tmp_path / QLOG_SUMMARY).write_text(json.dumps(got))
    assert transport_rtt_of(tmp_path) == (s["rtt_mean_ms"], 95)
    assert sender_loss_pct_of(tmp_path) == pytest.approx(100 * s["packets_lost"] / s["packets_sent"])
    # JSON on one line with the same separators scans alike; another layout is refused
    qlog.write_text(json.dumps(doc))
    assert summarize_server_qlog([qlog])["sender"] == s
    qlog.write_text(json.dumps(doc, separators=(",", ":")))
    with pytest.raises(QlogError, match="no qlog events"):
        summarize_server_qlog([qlog])
    qlog.write_text(json.dumps(doc).replace('"pto_count": 0', '"pto": {"count": 0}'))
    with pytest.raises(QlogError, match="418 metrics updates but 0 in the expected form"):
        summarize_server_qlog([qlog])
    qlog.write_text("")
    with pytest.raises(QlogError, match="no qlog events"):
        summarize_server_qlog([qlog])


def test_a_sender_that_ran_another_congestion_control_is_named():
    from latency_divide.parsers.tool import cc_fallback

    # real: mvfst asked for BBR without pacing runs Cubic, and says so once in its log
    why = cc_fallback((DATA / "tperf-unpaced-bbr-sender.log").read_text())
    assert why is not None and why.startswith("the sender ran Cubic, not BBR")
    for name in ("tperf-glog-year-server-cubic.stderr", "tperf-2021flags-sender.log",
                 "copa-server.log"):
        assert cc_fallback((DATA / name).read_text()) is None, name


def test_the_tables_leave_out_a_trial_whose_sender_ran_another_congestion_control(tmp_path):
    import shutil

    from latency_divide.analysis.reader import TrialInvalid, load_trial

    src = DATA.parent / "trials" / "def-062df6263f" / "9254" / "downlink" / "cubic" / "rep1"
    d = tmp_path / "def-062df6263f" / "9254" / "downlink" / "cubic" / "rep1"
    shutil.copytree(src, d)
    load_trial(d)  # as captured: usable
    with (d / "sender.log").open("a") as f:  # the line mvfst logs, from the real capture
        f.write(next(line for line in (DATA / "tperf-unpaced-bbr-sender.log").read_text()
                     .splitlines(keepends=True) if "Unpaced BBR" in line))
    with pytest.raises(TrialInvalid, match="the sender ran Cubic, not BBR"):
        load_trial(d)
