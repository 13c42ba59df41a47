"""tquic-perf, the project's QUIC bulk-transfer tool (tools/tquic-perf), run for real:
bad input on the command line, and transfers across the four-namespace topology
(src/latency_divide/testbed/local.py, netns.py) with a shaped downlink (htb + bfifo on the gateway, the
userspace delay line or netem for the RTT).

The server sends (as in tperf), so the downlink's sender is the server node and the
bottleneck is the gateway's egress toward the client.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from latency_divide.testbed.local import Topology, resolve_delay_mechanism
from latency_divide.testbed.netns import SERVER_ADDR
from latency_divide.links.plan import LinkPlan, link_plan
from latency_divide.parsers.tool import parse_sender_json, parse_sender_log, parse_tool_log
from latency_divide.testbed.runners import LocalRunner, wait_for

from conftest import ROOT
from netns_util import our_namespaces, require_programs

TOOL = ROOT / "target" / "release" / "tquic-perf"
DELAYLINE = ROOT / "target" / "release" / "delayline"

RATE_KBIT = 4000
RTT_MS = 20.0
QFACTOR = 2.0
PORT = 6666


@pytest.fixture(scope="module")
def tool() -> str:
    if not TOOL.is_file():
        pytest.fail(f"{TOOL} is missing: cargo build --release -p tquic-perf")
    return str(TOOL)


def shaped_plan(rate_kbit: int, rtt_ms: float, qfactor: float = QFACTOR) -> LinkPlan:
    """Both directions at rate_kbit with a qfactor x BDP bfifo (EXPERIMENT.md's formulas)."""
    return link_plan(rate_kbit, rate_kbit, rtt_ms, qfactor, resolve_delay_mechanism("auto"))


@pytest.fixture(scope="module")
def topo():
    require_programs("ip", "tc", "ethtool")
    t = Topology(shaped_plan(RATE_KBIT, RTT_MS), delayline_bin=str(DELAYLINE))
    try:
        t.up()
        yield t
    finally:
        t.down()
        assert our_namespaces(t.tag) == []


def start_server(topo, tool, tmp_path: Path, *args: str):
    proc = topo.runner("srv").start(
        [tool, "-mode", "server", "-host", SERVER_ADDR, "-port", str(PORT), *args],
        stderr=tmp_path / "sender.log")
    # Ready when its UDP socket is bound.
    wait_for(lambda: topo.runner("srv").run(
        ["ss", "-H", "-u", "-l", "-n", "sport", "=", f":{PORT}"], check=False).stdout.strip()
        or proc.poll() is not None, timeout=5, what="the server's UDP socket")
    assert proc.poll() is None, (tmp_path / "sender.log").read_text()
    return proc


# ------------------------------------------------------------------------------------------
# bad input (no namespaces needed)
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, named", [
    (["-congestion", "newreno"], "newreno"),
    (["-congestion=vegas"], "vegas"),
    (["-latency_factor", "0"], "latency_factor 0 is outside (0, 1]"),
    (["-latency_factor", "1.2"], "latency_factor 1.2 is outside (0, 1]"),
    (["-latency_factor", "-0.5"], "latency_factor -0.5 is outside (0, 1]"),
    (["-latency_factor", "abc"], "'abc' is not a number"),
    (["-duration", "0"], "duration 0 s"),
    (["-duration=-5"], "duration -5 s"),
    (["-window", "100"], "window 100 bytes"),
    (["-mode", "proxy"], "proxy"),
])
def test_bad_arguments_fail_clearly_and_write_nothing(tool, tmp_path, args, named):
    out = tmp_path / "summary.json"
    res = LocalRunner().run([tool, "-mode", "client", *args, "-json", str(out)], check=False)
    assert res.returncode != 0
    assert named in res.stderr, res.stderr
    assert "Received" not in res.stderr + res.stdout
    assert not out.exists()


def test_no_server_on_loopback_is_an_error_not_a_hang(tool, tmp_path):
    out = tmp_path / "summary.json"
    t0 = time.monotonic()
    # Port 9 (discard) on ::1: nothing listens, the kernel answers "port unreachable".
    res = LocalRunner().run([tool, "-mode", "client", "-host", "::1", "-port", "9",
                             "-duration", "2", "-idle_timeout_ms", "1000", "-json", str(out)],
                            check=False, timeout=20)
    assert res.returncode == 1
    assert "cannot reach [::1]:9" in res.stderr, res.stderr
    assert time.monotonic() - t0 < 10
    assert parse_tool_log(res.stderr).complete is False
    assert not out.exists()


def test_unresolvable_host(tool):
    res = LocalRunner().run([tool, "-mode", "client", "-host", "no-such-host.invalid",
                             "-duration", "1"], check=False, timeout=20)
    assert res.returncode == 1
    assert "cannot resolve host 'no-such-host.invalid'" in res.stderr, res.stderr


# ------------------------------------------------------------------------------------------
# real transfers over the shaped topology
# ------------------------------------------------------------------------------------------

@pytest.mark.netns
# Copa, the paper's, in the quick tier; the others' transfers in the full tier (issue 59)
@pytest.mark.parametrize("cc", [pytest.param("cubic", marks=pytest.mark.slow), "copa",
                                pytest.param("bbr", marks=pytest.mark.slow),
                                pytest.param("bbr3", marks=pytest.mark.slow)])
def test_three_second_transfer_parses_and_goodput_is_plausible(topo, tool, tmp_path, cc):
    server = start_server(topo, tool, tmp_path, "-congestion", cc, "-latency_factor", "0.5",
                          "-once", "-json", str(tmp_path / "sender.json"))
    try:
        res = topo.runner("cli").run(
            [tool, "-mode", "client", "-host", SERVER_ADDR, "-port", str(PORT),
             "-duration", "3", "-congestion", cc, "-json", str(tmp_path / "receiver.json")],
            check=False, timeout=40)
        (tmp_path / "receiver.log").write_text(res.stderr)
        assert res.returncode == 0, res.stderr[-2000:]
        assert server.wait(timeout=15) == 0    # -once: exits after the connection closed
    finally:
        server.stop()

    log = parse_tool_log(res.stderr)
    assert log.complete, res.stderr[-2000:]
    assert 3.0 <= log.duration_s < 3.2
    capacity_kbps = RATE_KBIT
    assert 0.5 * capacity_kbps <= log.goodput_kbps <= 1.05 * capacity_kbps, \
        f"{cc}: goodput {log.goodput_kbps:.0f} kbit/s on a {capacity_kbps} kbit/s link"
    # tperf's unit: 2^20 bit/s, printed to 6 significant digits.
    assert log.throughput_mibps == pytest.approx(log.received_bytes / 131072 / log.duration_s,
                                                 rel=1e-5)
    # Interval lines every 100 ms that add up to the summary.
    assert 27 <= len(log.intervals) <= 32
    assert sum(i.bytes for i in log.intervals) == log.received_bytes
    assert log.intervals[-1].total_bytes == log.received_bytes
    assert all(b.t_unix > a.t_unix for a, b in zip(log.intervals, log.intervals[1:]))

    rj = json.loads((tmp_path / "receiver.json").read_text())
    assert rj["role"] == "client" and rj["bytes"] == log.received_bytes
    assert rj["goodput_kbps"] == pytest.approx(log.goodput_kbps, rel=1e-5)
    assert rj["window"] == 65536 and rj["cc"] == cc
    sj = json.loads((tmp_path / "sender.json").read_text())
    assert sj["role"] == "server" and sj["cc"] == cc
    assert sj["latency_factor"] == (0.5 if cc == "copa" else None)
    assert sj["bytes"] >= log.received_bytes
    assert sj["sender"]["packets_sent"] > log.received_bytes / 1200
    assert sj["sender"]["packets_lost"] >= 0
    assert sj["sender"]["packets_retransmitted"] is None   # tquic does not count them
    assert "connection closed peer=10.10.2.2:" in (tmp_path / "sender.log").read_text()
    # The transport's RTT samples (tools/tquic-perf/README.md, "RTT samples"): about one
    # per ACK, the client ACKs every second packet; their mean lies between the min RTT
    # and the base RTT plus a full bfifo (QFACTOR x BDP = QFACTOR x RTT of queueing delay).
    x = sj["sender"]
    packets = log.received_bytes / 1200
    assert packets / 10 <= x["rtt_samples"] <= x["packets_sent"], x
    assert 0.9 * RTT_MS <= x["min_rtt_ms"] <= x["rtt_mean_ms"], x
    assert x["rtt_mean_ms"] <= (1 + QFACTOR) * RTT_MS * 1.25, x
    assert x["min_rtt_ms"] * 0.995 <= x["rtt_p50_ms"] <= x["rtt_p90_ms"], x
    assert parse_sender_log((tmp_path / "sender.log").read_text()) == \
        parse_sender_json((tmp_path / "sender.json").read_text())


@pytest.mark.netns
def test_vanished_server_ends_the_client_with_an_error(topo, tool, tmp_path):
    server = start_server(topo, tool, tmp_path, "-congestion", "cubic")
    client = None
    try:
        client = topo.runner("cli").start(
            [tool, "-mode", "client", "-host", SERVER_ADDR, "-port", str(PORT),
             "-duration", "60", "-idle_timeout_ms", "2000",
             "-json", str(tmp_path / "receiver.json")],
            stderr=tmp_path / "receiver.log")
        wait_for(lambda: "interval " in (tmp_path / "receiver.log").read_text(), timeout=10,
                 what="the first interval line")
        os.kill(server.pid, signal.SIGSTOP)    # the server stops answering, socket stays open
        t0 = time.monotonic()
        rc = client.wait(timeout=20)
        waited = time.monotonic() - t0
        os.kill(server.pid, signal.SIGCONT)
    finally:
        if client is not None:
            client.stop()
        server.stop()
    text = (tmp_path / "receiver.log").read_text()
    assert rc == 1
    assert "went silent" in text and "idle timeout" in text, text[-1000:]
    assert 1.5 <= waited <= 8, waited
    assert parse_tool_log(text).complete is False
    assert not (tmp_path / "receiver.json").exists()


@pytest.mark.netns
def test_unreachable_host_is_an_error(topo, tool):
    # 10.10.2.77 is on the client's subnet but nobody has it: ARP fails, the kernel reports
    # "no route to host" on the connected socket (or the handshake times out).
    t0 = time.monotonic()
    res = topo.runner("cli").run(
        [tool, "-mode", "client", "-host", "10.10.2.77", "-port", str(PORT), "-duration", "2",
         "-idle_timeout_ms", "3000"], check=False, timeout=30)
    assert res.returncode == 1
    assert "10.10.2.77" in res.stderr and ("cannot reach" in res.stderr
                                           or "handshake timeout" in res.stderr), res.stderr
    assert time.monotonic() - t0 < 15


@pytest.mark.netns
def test_sigterm_ends_an_idle_server_with_exit_code_0(topo, tool, tmp_path):
    server = start_server(topo, tool, tmp_path)
    try:
        rc = server.stop(timeout=5)
    finally:
        server.stop()
    assert rc == 0, (tmp_path / "sender.log").read_text()

