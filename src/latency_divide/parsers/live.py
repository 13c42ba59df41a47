"""Parser for the live mode of our traffic tool (``tquic-perf -app live``; the ``live`` object
of its JSON report, tools/tquic-perf/README.md, "Live mode: the report").

A live broadcast is an application-limited sender: an encoder model whose bitrate an ABR
chooses, frames dropped at the sender when late, and ping frames echoed by the receiver. The
metrics are Facebook's, as its Copa study defined them per broadcast (IETF 106 ICCRG, "Copa at
Facebook"):

- goodput = application bytes successfully sent / duration of the broadcast: here the bytes of
  the video frames the transport acknowledged whole (``app_bytes_acked``) * 8 /
  ``broadcast_s`` / 1000, SI kbit/s (``goodput_fb_kbps``);
- application RTT = the mean RTT of the ping frames the application sends (one a second by
  default): ``app_rtt_mean_ms`` for the pings on a stream of their own at the highest
  priority (they do not wait behind video data in the sender, only for the congestion window
  and in the network), ``app_rtt_inband_mean_ms`` for the pings queued behind the video (they
  wait like a frame);
- transport RTT = the mean of QUIC's RTT samples over the broadcast (``transport_rtt_mean_ms``);
- RTX overhead = bytes retransmitted / bytes acknowledged by the transport: QUIC re-sends the
  frames of the packets it declares lost, so the lost packets' bytes stand for the bytes
  retransmitted (``rtx_overhead`` = ``transport_bytes_lost`` / ``transport_bytes_acked``; None
  when nothing was acknowledged).

The derived columns are computed here from the report's raw counts (so a report that
disagrees with the definitions cannot pass through), the rest are read and checked.

- :func:`parse_live` reads one report, the sender's (role ``server``) or the receiver's
  (``client``), into a flat dict of typed columns with units in their names;
- :func:`parse_live_trial` merges a trial's two reports into one row;
- :func:`bitrate_timeline` returns the bitrate chosen over time as ``(t_s, bitrate_kbps)`` rows
  (the start and every change), :func:`time_at_rung` the seconds spent at each rung,
  :func:`ping_series` each ping's RTT over time (priority or in-band).

A report without a ``live`` object (a bulk transfer) or with a malformed one raises
:class:`LiveParseError` naming the field.
"""

from __future__ import annotations

import json
import math
from typing import Any

Row = dict[str, Any]

#: Sender counters copied as they are (all non-negative integers).
_SENDER_INTS = ("frames_produced", "frames_sent", "frames_acked", "frames_dropped",
                "app_bytes_produced", "app_bytes_sent", "app_bytes_acked", "bitrate_switches",
                "queue_max_frames", "pings_sent", "transport_bytes_acked",
                "transport_bytes_lost")


class LiveParseError(ValueError):
    """A live report that is missing or malformed; the message names the field."""


def _load(text: str) -> tuple[dict, dict]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise LiveParseError(f"live report: not valid JSON ({e.msg}, line {e.lineno})") from None
    if not isinstance(doc, dict):
        raise LiveParseError("live report: not a JSON object")
    live = doc.get("live")
    if not isinstance(live, dict):
        raise LiveParseError("live report: no 'live' object (a bulk transfer's report?)")
    if live.get("app") != "live":
        raise LiveParseError(f"live report: live.app is {live.get('app')!r}, not 'live'")
    return doc, live


def _num(obj: dict, key: str, where: str, *, integer: bool = False,
         optional: bool = False) -> float | int | None:
    v = obj.get(key)
    if v is None:
        if optional:
            return None
        raise LiveParseError(f"{where}.{key} is missing")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and
                                                                  not isinstance(v, int)):
        raise LiveParseError(f"{where}.{key}={v!r} is not a{'n integer' if integer else ' number'}")
    if not math.isfinite(v) or v < 0:
        raise LiveParseError(f"{where}.{key}={v!r} is out of range (finite, >= 0)")
    return v


def _summary(live: dict, key: str, prefix: str, where: str) -> Row:
    s = live.get(key)
    if not isinstance(s, dict):
        raise LiveParseError(f"{where}.{key} is missing")
    w = f"{where}.{key}"
    return {f"{prefix}_samples": _num(s, "samples", w, integer=True),
            f"{prefix}_mean_ms": _num(s, "mean_ms", w, optional=True),
            f"{prefix}_p50_ms": _num(s, "p50_ms", w, optional=True),
            f"{prefix}_p95_ms": _num(s, "p95_ms", w, optional=True)}


def goodput_fb_kbps(app_bytes_acked: int, broadcast_s: float) -> float | None:
    """Facebook's goodput: acknowledged application bytes * 8 / broadcast s / 1000 (kbit/s)."""
    return app_bytes_acked * 8 / broadcast_s / 1000 if broadcast_s > 0 else None


def rtx_overhead(bytes_lost: int, bytes_acked: int) -> float | None:
    """Facebook's RTX overhead: bytes retransmitted (lost) / bytes acknowledged."""
    return bytes_lost / bytes_acked if bytes_acked > 0 else None


def _sender(live: dict) -> Row:
    w = "live"
    row: Row = {"live_abr": live.get("abr")}
    if row["live_abr"] not in ("backlog", "rate"):
        raise LiveParseError(f"live.abr={live.get('abr')!r} is not 'backlog' or 'rate'")
    row["live_fps"] = _num(live, "fps", w, integer=True)
    row["live_gop_s"] = _num(live, "gop_s", w)
    row["live_keyframe_ratio"] = _num(live, "keyframe_ratio", w)
    row["live_frame_deadline_ms"] = _num(live, "frame_deadline_ms", w, integer=True)
    row["live_seed"] = _num(live, "seed", w, integer=True)
    row["broadcast_s"] = _num(live, "broadcast_s", w)
    for k in _SENDER_INTS:
        row[k] = _num(live, k, w, integer=True)
    if not row["frames_acked"] <= row["frames_sent"] <= row["frames_produced"]:
        raise LiveParseError(f"live: frames acked {row['frames_acked']} <= sent "
                             f"{row['frames_sent']} <= produced {row['frames_produced']} fails")
    row["frames_dropped_pct"] = (100 * row["frames_dropped"] / row["frames_produced"]
                                 if row["frames_produced"] else None)
    row["goodput_fb_kbps"] = goodput_fb_kbps(row["app_bytes_acked"], row["broadcast_s"])
    row["bitrate_mean_kbps"] = _num(live, "bitrate_mean_kbps", w)
    row.update(_summary(live, "app_rtt_ms", "app_rtt", w))
    row.update(_summary(live, "app_rtt_inband_ms", "app_rtt_inband", w))
    row["transport_rtt_mean_ms"] = _num(live, "transport_rtt_mean_ms", w, optional=True)
    row["transport_rtt_samples"] = _num(live, "transport_rtt_samples", w, integer=True,
                                        optional=True)
    row["rtx_overhead"] = rtx_overhead(row["transport_bytes_lost"], row["transport_bytes_acked"])
    return row


def _receiver(doc: dict, live: dict) -> Row:
    w = "live"
    row: Row = {k: _num(live, k, w, integer=True)
                for k in ("frames_received", "key_frames_received", "app_bytes_received",
                          "pings_echoed")}
    duration = _num(doc, "duration_s", "report")
    row["goodput_fb_received_kbps"] = goodput_fb_kbps(row["app_bytes_received"], duration)
    s = live.get("frame_latency_ms")
    if not isinstance(s, dict):
        raise LiveParseError("live.frame_latency_ms is missing")
    for k in ("mean", "p50", "p95", "max"):
        row[f"frame_latency_{k}_ms"] = _num(s, f"{k}_ms", "live.frame_latency_ms", optional=True)
    return row


def parse_live(report_json_text: str) -> Row:
    """The typed columns of one live report (the sender's or the receiver's; module doc)."""
    doc, live = _load(report_json_text)
    role = doc.get("role")
    if role == "server":
        return _sender(live)
    if role == "client":
        return _receiver(doc, live)
    raise LiveParseError(f"live report: role {role!r} is not 'server' or 'client'")


def parse_live_trial(sender_json_text: str, receiver_json_text: str) -> Row:
    """One row for a live trial: the sender's columns and the receiver's."""
    s, r = parse_live(sender_json_text), parse_live(receiver_json_text)
    if "frames_produced" not in s or "frames_received" not in r:
        raise LiveParseError("live trial: give the sender's report first, then the receiver's")
    return {**s, **r}


def bitrate_timeline(report_json_text: str) -> list[tuple[float, float]]:
    """The bitrate chosen over time, ``(t_s, bitrate_kbps)`` rows: the start and each change,
    t_s in seconds from the broadcast's start (the sender's report)."""
    _, live = _load(report_json_text)
    rows = live.get("bitrate_timeline")
    if not isinstance(rows, list) or not rows:
        raise LiveParseError("live.bitrate_timeline is missing or empty (a receiver's report?)")
    out = []
    for i, r in enumerate(rows):
        if not (isinstance(r, list) and len(r) == 2):
            raise LiveParseError(f"live.bitrate_timeline[{i}]={r!r} is not [t_s, kbps]")
        t, k = (_num({"v": x}, "v", f"live.bitrate_timeline[{i}]") for x in r)
        if out and t < out[-1][0]:
            raise LiveParseError(f"live.bitrate_timeline[{i}]: time {t} goes backwards")
        out.append((float(t), float(k)))
    return out


def time_at_rung(report_json_text: str) -> list[tuple[float, float]]:
    """Seconds at each rung of the ladder, ``(bitrate_kbps, s)`` rows (the sender's report)."""
    _, live = _load(report_json_text)
    rows = live.get("time_at_rung_s")
    if not isinstance(rows, list):
        raise LiveParseError("live.time_at_rung_s is missing (a receiver's report?)")
    return [(float(_num({"v": r[0]}, "v", "live.time_at_rung_s")),
             float(_num({"v": r[1]}, "v", "live.time_at_rung_s"))) for r in rows]


def ping_series(report_json_text: str, kind: str = "priority") -> list[tuple[float, float]]:
    """Each ping's RTT over the broadcast, ``(t_s, rtt_ms)`` rows, t_s in seconds from the
    broadcast's start (the sender's report): ``kind`` ``priority`` (``app_rtt_ms``, the pings
    on their own stream) or ``inband`` (``app_rtt_inband_ms``, queued behind the video)."""
    key = {"priority": "app_rtt_ms", "inband": "app_rtt_inband_ms"}.get(kind)
    if key is None:
        raise ValueError(f"ping kind {kind!r} is not 'priority' or 'inband'")
    _, live = _load(report_json_text)
    rows = (live.get(key) or {}).get("series") if isinstance(live.get(key), dict) else None
    if not isinstance(rows, list):
        raise LiveParseError(f"live.{key}.series is missing (a receiver's report?)")
    out = []
    for i, r in enumerate(rows):
        if not (isinstance(r, list) and len(r) == 2):
            raise LiveParseError(f"live.{key}.series[{i}]={r!r} is not [t_s, ms]")
        t, ms = (_num({"v": x}, "v", f"live.{key}.series[{i}]") for x in r)
        out.append((float(t), float(ms)))
    return out
