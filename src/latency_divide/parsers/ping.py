"""Parser for the output of ``ping -D -O -n`` (iputils).

One row per probe (ICMP sequence number), in order of first appearance:

- ``t_unix``: the ``-D`` timestamp of the probe's first reply line; for a probe that never got
  an answer, the timestamp of its first ``no answer yet for icmp_seq=N`` line (printed by
  ``-O`` when the next probe is due, i.e. about one interval after the probe was sent).
- ``seq``: ICMP sequence number, unwrapped past 65535 so it stays increasing.
- ``rtt_ms``: RTT of the first reply, NaN if no reply arrived before the log ends. A reply that
  arrives after its "no answer yet" line (RTT longer than the interval, common with deep
  queues) counts as answered: "no answer yet" is not "lost".
- ``dup_count``: further replies to the same probe (duplicates), which are not RTT samples.

Error replies (``From A icmp_seq=N Time to live exceeded``, ``Destination Host Unreachable``)
are not RTT samples: the probe counts as unanswered. Header, statistics and warning lines are
ignored. A last line without a trailing newline (a log cut mid-write) is ignored.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

_TS = r"^\[(?P<t>\d+(?:\.\d+)?)\]\s+"


_REPLY = re.compile(_TS + r"\d+ bytes from [^:]+: icmp_seq=(?P<seq>\d+)\b.*?\btime=(?P<rtt>[\d.]+) ms")


_NOANSWER = re.compile(_TS + r"no answer yet for icmp_seq=(?P<seq>\d+)\s*$")


_ERROR = re.compile(_TS + r"From \S+ icmp_seq=(?P<seq>\d+) (?P<what>.+)$")


COLUMNS = ("t_unix", "seq", "rtt_ms", "dup_count")


@dataclass
class _Probe:
    t_unix: float
    rtt_ms: float
    dups: int = 0


def _unwrap(seq: int, last: int | None, offset: int) -> tuple[int, int]:
    """Unwrap a 16-bit sequence number given the last unwrapped one."""
    if last is not None and seq + offset < last - 32768:
        offset += 65536
    return seq + offset, offset


def parse_ping(text: str) -> pd.DataFrame:
    """Rows (t_unix, seq, rtt_ms, dup_count) from ``ping -D -O -n`` output, sorted by seq."""
    lines = text.split("\n")
    if lines and lines[-1] != "":
        lines = lines[:-1]  # partial last line (no newline yet): not trusted
    probes: dict[int, _Probe] = {}
    offset = 0
    last: int | None = None
    for line in lines:
        m = _REPLY.match(line)
        kind = "reply"
        if m is None:
            m = _NOANSWER.match(line)
            kind = "missing"
        if m is None:
            m = _ERROR.match(line)
            kind = "error"
        if m is None:
            continue
        seq, offset = _unwrap(int(m["seq"]), last, offset)
        last = seq if last is None else max(last, seq)
        t = float(m["t"])
        p = probes.get(seq)
        if kind == "reply":
            rtt = float(m["rtt"])
            if p is None:
                probes[seq] = _Probe(t, rtt)
            elif math.isnan(p.rtt_ms):
                p.t_unix, p.rtt_ms = t, rtt  # late reply after "no answer yet"
            else:
                p.dups += 1
        elif p is None:
            probes[seq] = _Probe(t, math.nan)
    seqs = sorted(probes)
    return pd.DataFrame(
        {
            "t_unix": np.array([probes[s].t_unix for s in seqs], dtype="float64"),
            "seq": np.array(seqs, dtype="int64"),
            "rtt_ms": np.array([probes[s].rtt_ms for s in seqs], dtype="float64"),
            "dup_count": np.array([probes[s].dups for s in seqs], dtype="int64"),
        },
        columns=list(COLUMNS),
    )
