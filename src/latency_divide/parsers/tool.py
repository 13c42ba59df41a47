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
"""

from __future__ import annotations

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
