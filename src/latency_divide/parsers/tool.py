"""Parser for the traffic tool's receiver log: our ``tquic-perf`` client or mvfst's ``tperf``.

Both log to stderr through glog-style lines (``<sev><date> <hh:mm:ss.micro> <thread>
<file:line>] msg``, sev one of I/W/E/F). The date is ``mmdd`` (our tquic-perf; glog < 0.5;
glog >= 0.5 with ``-log_year_in_prefix=false``) or ``yyyymmdd`` (glog >= 0.5 by default, e.g.
``I20261123 05:20:47.544058 25649 TperfClient.cpp:70] ...``); no other digit count is taken
as a prefix. The parser reads the message after the prefix and also accepts lines without one
(a line whose prefix is malformed is read whole, so it is not a record).

- Summary (both tools): ``Received <N> bytes in <D> seconds.`` and
  ``Overall throughput: <X>Mb/s``, where tperf's "Mb" is 2^20 bits (X = N / 131072 / D),
  printed with 6 significant digits. tquic-perf's D is the measured transfer time (6
  significant digits); tperf's D is its configured ``-duration`` in whole seconds.
- tperf then prints ``Average per Stream throughput: <X>Mb/s over <n> streams`` (and, with
  several streams, a per-stream histogram); these lines are ignored.
- Interval lines (tquic-perf only; tperf prints nothing periodically):
  ``interval t_unix=<s> elapsed_s=<s> bytes=<n> total_bytes=<n>``.

:func:`parse_tool_log` returns a :class:`ToolLog`. ``complete`` is true when both summary
lines are present; a truncated log (killed receiver, lost connection) is reported as
incomplete with ``None`` summary fields, never as an exception. A last line without a
trailing newline (a log cut mid-write) is ignored. A line that starts like one of our
records but does not match its format raises :class:`ToolParseError` naming the line.
Messages of E/F lines are collected in ``errors`` but do not decide ``complete``: tperf's
server logs ``write error with stream=3 error=ApplicationError: No Error, ...`` at E level
whenever the client closes, which is the normal end of a transfer.

The sender's RTT numbers (tquic-perf only; tools/tquic-perf/README.md): its JSON summary
(``sender.json``, key ``sender``) and the ``connection closed peer=... key=value ...`` line
it logs per connection (``sender.log``; ``na`` for a value it does not have). From tquic-perf
0.1's JSON format 2 they include the transport's RTT samples: ``rtt_samples`` (count),
``rtt_mean_ms``, ``rtt_p50_ms``, ``rtt_p90_ms``. :func:`parse_sender_json` and
:func:`parse_sender_log` return a :class:`SenderRtt` with ``None`` for whatever the report
lacks (older reports, tperf's logs), and raise :class:`ToolParseError` for a malformed one.

From JSON format 3 both roles' summaries say how the socket batched (UDP GSO, sendmmsg, GRO,
recvmmsg), what it fell back to and why, and count its syscalls and packets:
:func:`parse_batching_json` returns a :class:`Batching` (None for older reports).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import NamedTuple

#: tperf's throughput unit: bits per "Mb".
BITS_PER_TPERF_MB = 2**20


_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?inf|nan"


#: glog prefix; the date is mmdd or (glog >= 0.5, -log_year_in_prefix, the default) yyyymmdd.
_GLOG = re.compile(
    r"^(?P<sev>[IWEF])(?:\d{8}|\d{4}) \d{2}:\d{2}:\d{2}\.\d{6}\s+\d+ [^\]]*\] ?(?P<msg>.*)$"
)


_RECEIVED = re.compile(rf"^Received (?P<bytes>\d+) bytes in (?P<dur>{_NUM}) seconds\.\s*$")


_THROUGHPUT = re.compile(rf"^Overall throughput: (?P<x>{_NUM}) ?Mb/s\s*$")


_INTERVAL = re.compile(
    r"^interval t_unix=(?P<t>\d+(?:\.\d+)?) elapsed_s=(?P<el>\d+(?:\.\d+)?) "
    r"bytes=(?P<b>\d+) total_bytes=(?P<tot>\d+)\s*$"
)


#: tquic-perf's per-connection stats line on the sender (after the glog prefix).
_CLOSED = re.compile(r"^connection closed (?P<kv>(?:\S+=\S*)(?: \S+=\S*)*)\s*$")


class ToolParseError(ValueError):
    """A line that claims to be a summary or interval record but is malformed."""


class Interval(NamedTuple):
    t_unix: float  # wall clock at the end of the interval
    elapsed_s: float  # seconds since the first stream byte
    bytes: int  # stream bytes received in this interval
    total_bytes: int  # cumulative stream bytes


@dataclass
class ToolLog:
    received_bytes: int | None = None
    duration_s: float | None = None
    #: As printed, in tperf's Mb/s (2^20 bit/s).
    throughput_mibps: float | None = None
    #: received_bytes * 8 / duration_s / 1000 (SI kbit/s), computed, not printed.
    goodput_kbps: float | None = None
    intervals: list[Interval] = field(default_factory=list)
    #: Messages of error-severity (E/F) lines, e.g. tquic-perf's "error: ..." on failure.
    #: Informational only: they do not decide ``complete`` (tperf's server logs an E line at
    #: every normal close).
    errors: list[str] = field(default_factory=list)
    complete: bool = False


def _message(line: str) -> tuple[str, str]:
    m = _GLOG.match(line)
    if m:
        return m["sev"], m["msg"]
    return "", line


def parse_tool_log(text: str) -> ToolLog:
    """Parse a receiver log of tquic-perf or tperf (see the module docstring)."""
    out = ToolLog()
    lines = text.split("\n")
    if lines and lines[-1] != "":
        lines = lines[:-1]  # cut mid-write: not a whole line
    received: tuple[int, float] | None = None
    for lineno, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r")
        if not line.strip():
            continue
        sev, msg = _message(line)
        if sev in ("E", "F"):
            out.errors.append(msg)
            continue
        if msg.startswith("interval "):
            m = _INTERVAL.match(msg)
            if not m:
                raise ToolParseError(f"line {lineno}: malformed interval record: {line!r}")
            out.intervals.append(
                Interval(float(m["t"]), float(m["el"]), int(m["b"]), int(m["tot"]))
            )
        elif msg.startswith("Received ") and " bytes in " in msg:
            m = _RECEIVED.match(msg)
            if not m:
                raise ToolParseError(f"line {lineno}: malformed summary line: {line!r}")
            received = (int(m["bytes"]), float(m["dur"]))
        elif msg.startswith("Overall throughput:"):
            m = _THROUGHPUT.match(msg)
            if not m:
                raise ToolParseError(f"line {lineno}: malformed throughput line: {line!r}")
            if received is None:
                raise ToolParseError(
                    f"line {lineno}: throughput line without a preceding 'Received' line"
                )
            nbytes, dur = received
            out.received_bytes = nbytes
            out.duration_s = dur
            out.throughput_mibps = float(m["x"])
            out.goodput_kbps = nbytes * 8 / dur / 1000 if dur > 0 else float("nan")
            out.complete = True
    return out


@dataclass(frozen=True)
class SenderRtt:
    """The sender's RTT numbers for one connection (milliseconds); None where not reported."""

    #: tquic's minimum and smoothed RTT at the end of the connection
    min_rtt_ms: float | None = None
    srtt_ms: float | None = None
    #: the transport's RTT samples over the connection: count (0: none), mean, nearest-rank
    #: median and 90th percentile (None without samples, and in reports before JSON format 2)
    rtt_samples: int | None = None
    rtt_mean_ms: float | None = None
    rtt_p50_ms: float | None = None
    rtt_p90_ms: float | None = None
    #: QUIC packets the sender sent and declared lost over the connection (its loss rate)
    packets_sent: int | None = None
    packets_lost: int | None = None

    @property
    def loss_pct(self) -> float | None:
        """Packets declared lost per packet sent, %; None where either is not reported."""
        if self.packets_sent is None or self.packets_lost is None or self.packets_sent <= 0:
            return None
        return 100.0 * self.packets_lost / self.packets_sent


_SENDER_INTS = ("rtt_samples", "packets_sent", "packets_lost")
_SENDER_FLOATS = ("min_rtt_ms", "srtt_ms", "rtt_mean_ms", "rtt_p50_ms", "rtt_p90_ms")


def _sender_rtt(values: dict, where: str) -> SenderRtt:
    """SenderRtt from raw values (numbers, numeric strings, None or "na")."""
    out = {}
    for k in (*_SENDER_INTS, *_SENDER_FLOATS):
        v = values.get(k)
        if v is None or v == "na":
            out[k] = None
            continue
        try:
            if isinstance(v, bool) or (k in _SENDER_INTS and isinstance(v, float)):
                raise ValueError(v)
            num: float | int = int(v) if k in _SENDER_INTS else float(v)
            ok = math.isfinite(num) and num >= 0
        except (TypeError, ValueError):
            raise ToolParseError(f"{where}: {k}={v!r} is not a number") from None
        if not ok:
            raise ToolParseError(f"{where}: {k}={v!r} is out of range")
        out[k] = num
    return SenderRtt(**out)


def parse_sender_json(text: str) -> SenderRtt:
    """The RTT numbers of tquic-perf's JSON summary (``sender.json``; any format version)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ToolParseError(f"sender JSON: not valid JSON ({e.msg}, line {e.lineno})") from None
    sender = doc.get("sender") if isinstance(doc, dict) else None
    if not isinstance(sender, dict):
        raise ToolParseError("sender JSON: no 'sender' object")
    return _sender_rtt(sender, "sender JSON")


def parse_sender_log(text: str) -> SenderRtt | None:
    """The RTT numbers of the last ``connection closed`` line of a tquic-perf sender log, or
    None if it has none (tperf's logs, a sender killed before the connection closed). As in
    :func:`parse_tool_log`, a last line without a trailing newline is ignored."""
    last = None
    lines = text.split("\n")[:-1]    # the last item: "" or a line cut mid-write
    for lineno, raw in enumerate(lines, start=1):
        _, msg = _message(raw.rstrip("\r"))
        if msg.startswith("connection closed "):
            m = _CLOSED.match(msg)
            if not m:
                raise ToolParseError(f"line {lineno}: malformed connection stats line: {raw!r}")
            last = (lineno, dict(kv.split("=", 1) for kv in m["kv"].split(" ")))
    if last is None:
        return None
    lineno, values = last
    return _sender_rtt(values, f"line {lineno}")


@dataclass(frozen=True)
class Batching:
    """How one tquic-perf process's UDP socket sent and received (JSON format 3's
    ``batching``; tools/tquic-perf/README.md). Modes, best first: send ``gso``, ``sendmmsg``,
    ``sendmsg``; receive ``gro``, ``recvmmsg``, ``recvmsg``. ``*_requested`` is the best the
    flags allowed, ``*_mode`` the one in use at the end, ``*_fallback`` why they differ (None
    if they do not). Counts are over the process's socket (a server's: all its connections)."""

    send_requested: str
    send_mode: str
    send_fallback: str | None
    send_syscalls: int
    send_packets: int
    recv_requested: str
    recv_mode: str
    recv_fallback: str | None
    recv_syscalls: int
    #: datagrams the kernel returned (a GRO-coalesced one counts once) and the QUIC packets
    #: they carried
    recv_datagrams: int
    recv_packets: int

    @property
    def send_syscalls_per_packet(self) -> float | None:
        return self.send_syscalls / self.send_packets if self.send_packets > 0 else None

    @property
    def recv_syscalls_per_packet(self) -> float | None:
        return self.recv_syscalls / self.recv_packets if self.recv_packets > 0 else None


_SEND_MODES = ("gso", "sendmmsg", "sendmsg")
_RECV_MODES = ("gro", "recvmmsg", "recvmsg")


def parse_batching_json(text: str) -> Batching | None:
    """The ``batching`` object of a tquic-perf JSON summary (either role), or None for a
    report without one (JSON format < 3: one syscall per packet, no counts)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ToolParseError(f"tool JSON: not valid JSON ({e.msg}, line {e.lineno})") from None
    if not isinstance(doc, dict):
        raise ToolParseError("tool JSON: not an object")
    if "batching" not in doc:
        return None
    out: dict = {}
    for side, modes in (("send", _SEND_MODES), ("recv", _RECV_MODES)):
        part = doc["batching"].get(side) if isinstance(doc["batching"], dict) else None
        if not isinstance(part, dict):
            raise ToolParseError(f"tool JSON: batching.{side} is not an object")
        for k in ("requested", "mode"):
            if part.get(k) not in modes:
                raise ToolParseError(f"tool JSON: batching.{side}.{k}={part.get(k)!r} is not "
                                     f"one of {', '.join(modes)}")
            out[f"{side}_{k}"] = part[k]
        why = part.get("fallback_reason")
        if why is not None and not isinstance(why, str):
            raise ToolParseError(f"tool JSON: batching.{side}.fallback_reason={why!r}")
        out[f"{side}_fallback"] = why
        counts = ("syscalls", "packets") if side == "send" else ("syscalls", "datagrams",
                                                                  "packets")
        for k in counts:
            v = part.get(k)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ToolParseError(f"tool JSON: batching.{side}.{k}={v!r} is not a count")
            out[f"{side}_{k}"] = v
    return Batching(**out)


#: a sender's log line that says it runs another congestion control than it was asked for ->
#: what it runs instead (mvfst's QuicTransportBaseLite::validateCongestionAndPacing)
CC_FALLBACKS = {"Unpaced BBR isn't supported": "the sender ran Cubic, not BBR: mvfst runs BBR "
                                                "only paced (-pacing)"}


def cc_fallback(sender_log: str) -> str | None:
    """Why the sender did not run the congestion control it was asked for, from its log; None
    when its log says nothing of the kind."""
    for line in sender_log.splitlines():
        for marker, why in CC_FALLBACKS.items():
            if marker in line:
                return f"{why} ({marker!r} in the sender's log)"
    return None
