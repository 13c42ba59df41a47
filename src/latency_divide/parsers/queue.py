"""Parser for queue samples (queue.jsonl): one JSON object per line,
``{"t_unix": float, "dev": str, "qdisc": <tc -s -j qdisc show dev DEV>}``.

One row per sample of the bottleneck FIFO (the qdisc of kind ``bfifo``, or ``kind`` given):
``t_unix``, ``backlog_bytes``, ``backlog_pkts`` (tc's "qlen"), ``drops_total`` (tc's running
counter) and ``drops`` (drops during the interval ending at this sample; 0 for the first).

Counter resets: when the running counter goes down (the qdisc was deleted and re-created, so its
counters restart from 0), the interval's drops are the new counter value, never negative.

A last line that is not valid JSON and has no trailing newline (cut mid-write) is ignored; an
invalid line anywhere else is an error naming the line.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from latency_divide.errors import LatencyDivideError

COLUMNS = ("t_unix", "backlog_bytes", "backlog_pkts", "drops_total", "drops")


class QueueParseError(LatencyDivideError):
    """A queue.jsonl line is not a queue sample."""


def _fifo(qdiscs: list, kind: str, lineno: int) -> dict | None:
    found = [q for q in qdiscs if isinstance(q, dict) and q.get("kind") == kind]
    if len(found) > 1:
        handles = ", ".join(str(q.get("handle")) for q in found)
        raise QueueParseError(f"line {lineno}: {len(found)} qdiscs of kind {kind!r} ({handles}); "
                              "expected one bottleneck FIFO")
    return found[0] if found else None


def drops_per_interval(totals: np.ndarray) -> np.ndarray:
    """Per-interval drops from running totals; first 0; after a reset, the new total."""
    totals = np.asarray(totals, dtype="int64")
    out = np.zeros(len(totals), dtype="int64")
    if len(totals) > 1:
        d = np.diff(totals)
        out[1:] = np.where(d < 0, totals[1:], d)
    return out


def _line_numbers(lines: list[str]) -> list[int]:
    return [i for i, ln in enumerate(lines, start=1) if ln.strip()]


def _parse_lines(lines: list[str]):
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield i, json.loads(line)
        except json.JSONDecodeError as e:
            raise QueueParseError(f"line {i}: not JSON ({e.msg})") from None


_DECODER = json.JSONDecoder()


def _fast_samples(lines: list[str], kind: str) -> list[tuple] | None:
    """(t_unix, backlog, qlen, drops) of every line, reading only ``t_unix`` and the FIFO's own
    object of each line (formats 1-2 list every qdisc: the FIFO is under half a line); None if
    any line is not the sampler's plain form (one object per line from ``{"t_unix":``, closed
    by ``]}``, exactly one qdisc of ``kind``): then the full parse decides, naming bad lines."""
    key = f'{{"kind":"{kind}"'
    out = []
    for line in lines:
        if not line:
            continue
        k = line.find(key)
        if (k < 0 or line.count(f'"{kind}"') != 1 or not line.startswith('{"t_unix":')
                or not line.endswith("]}")):
            return None
        try:
            q, _ = _DECODER.raw_decode(line, k)
            t = float(line[10:line.index(",", 10)])
            out.append((t, int(q.get("backlog", 0)), int(q.get("qlen", 0)),
                        int(q.get("drops", 0))))
        except (ValueError, TypeError, AttributeError):
            return None
    return out


def parse_queue(text: str, kind: str = "bfifo") -> pd.DataFrame:
    """Rows (t_unix, backlog_bytes, backlog_pkts, drops_total, drops) from queue.jsonl text.

    A sample in which the FIFO is missing (e.g. taken while the qdisc was being replaced), or
    whose ``tc`` call failed (the sampler writes ``"qdisc": null``), is skipped; the next
    sample's drops then cover both intervals.
    """
    lines = text.split("\n")
    if lines and lines[-1].strip():
        try:
            json.loads(lines[-1])
        except json.JSONDecodeError:
            lines = lines[:-1]  # last line without newline, cut mid-write
    fast = _fast_samples(lines, kind)
    if fast is not None:
        arr = np.array(fast, dtype="float64").reshape(-1, 4)
        return _frame(arr[:, 0], arr[:, 1].astype("int64"), arr[:, 2].astype("int64"),
                      arr[:, 3].astype("int64"))
    body = [ln for ln in lines if ln.strip()]
    try:  # one C-level parse of all samples
        recs = json.loads("[" + ",".join(body) + "]")
        if len(recs) != len(body):
            raise ValueError("a line holds more than one value")
        numbered = list(zip(_line_numbers(lines), recs))
    except (json.JSONDecodeError, ValueError):
        numbered = list(_parse_lines(lines))  # slow path: names the bad line
    ts, backlog, qlen, drops = [], [], [], []
    for i, rec in numbered:
        if not isinstance(rec, dict) or "t_unix" not in rec or "qdisc" not in rec:
            raise QueueParseError(f"line {i}: expected an object with 't_unix' and 'qdisc'")
        if rec["qdisc"] is None:
            continue  # the sampler's tc call failed for this tick (logged in qsampler.log)
        if not isinstance(rec["qdisc"], list):
            raise QueueParseError(f"line {i}: 'qdisc' is neither a list nor null")
        q = _fifo(rec["qdisc"], kind, i)
        if q is None:
            continue
        ts.append(float(rec["t_unix"]))
        backlog.append(int(q.get("backlog", 0)))
        qlen.append(int(q.get("qlen", 0)))
        drops.append(int(q.get("drops", 0)))
    return _frame(np.array(ts, dtype="float64"), np.array(backlog, dtype="int64"),
                  np.array(qlen, dtype="int64"), np.array(drops, dtype="int64"))


def _frame(ts, backlog, qlen, totals) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "t_unix": ts,
            "backlog_bytes": backlog,
            "backlog_pkts": qlen,
            "drops_total": totals,
            "drops": drops_per_interval(totals),
        },
        columns=list(COLUMNS),
    )
