"""mvfst qlog (tperf -server_qlogger_path) -> the RTT samples its Copa sees.

mvfst's Copa (quic/congestion_control/Copa.cpp) estimates queueing delay, by default, as the
latest RTT sample minus the minimum RTT: ``d = latest_rtt - min_rtt``, and aims at a rate of
``1 / (delta * d)`` packets per second. The latest RTT is the raw sample, ack delay included (RFC
9002 subtracts the peer's ack delay only from the smoothed RTT). Copa logs a metrics update
(``quic:recovery_metrics_updated``; ``metric_update`` in older qlog schemas) with
``latest_rtt``, ``min_rtt``, ``smoothed_rtt`` and ``ack_delay`` (ms; the last omitted when 0)
at every ack and also at every packet sent, which repeats the last ack's values: consecutive
repeats are kept once, so there is one sample per ack. The qlog thus shows how much of ``d``
is the peer's ack delay.

:func:`transport_rtt` gives the "transport RTT" of Facebook's Copa study: the number of RTT
samples of the server's traces and the mean of their ``latest_rtt`` (ack delay included, as
mvfst logs it). tquic-perf reports the same for tquic (tools/tquic-perf/README.md, where
tquic's samples are the ones that enter its smoothed RTT: ack delay taken out).
"""

from __future__ import annotations

import gzip
import json
import math
from dataclasses import dataclass
from pathlib import Path

from latency_divide.errors import LatencyDivideError


class QlogError(LatencyDivideError):
    """A qlog that cannot be read as mvfst writes it; the message names what is wrong."""


@dataclass(frozen=True)
class RttSample:
    time_ms: float
    latest_rtt_ms: float
    min_rtt_ms: float
    smoothed_rtt_ms: float
    ack_delay_ms: float
    cwnd_bytes: int | None


def read_qlog(path: str | Path) -> dict:
    p = Path(path)
    opener = gzip.open if p.suffix == ".gz" else open
    try:
        with opener(p, "rt") as f:
            return json.load(f)
    except (OSError, EOFError, json.JSONDecodeError) as e:
        raise QlogError(f"{p}: not a readable qlog (JSON): {e}") from e


def _events(doc: dict, vantage: str | None = None):
    """(time, name, data) of every event, of the traces seen from ``vantage`` ("server",
    "client") if given (a trace that does not say is taken)."""
    try:
        traces = doc["traces"]
    except (KeyError, TypeError) as e:
        raise QlogError("qlog: no 'traces' list") from e
    for trace in traces:
        vp = trace.get("vantage_point") if isinstance(trace, dict) else None
        if vantage is not None and isinstance(vp, dict) and vp.get("type", vantage) != vantage:
            continue
        for ev in trace.get("events", []):
            if isinstance(ev, dict):  # {"time", "name", "data"}
                yield ev.get("time"), ev.get("name"), ev.get("data") or {}
            elif isinstance(ev, list) and len(ev) >= 4:  # [time, category, event, data]
                yield ev[0], ev[2], ev[3] or {}


def rtt_samples(doc: dict, vantage: str | None = None) -> list[RttSample]:
    """One sample per ack: every metrics update that carries an RTT sample, in log order,
    consecutive repeats of the same values kept once; only traces seen from ``vantage`` if
    given (see :func:`_events`)."""
    out: list[RttSample] = []
    for t, name, data in _events(doc, vantage):
        if not str(name).endswith(("metric_update", "metrics_updated")) or \
                "latest_rtt" not in data:
            continue
        try:
            s = RttSample(float(t), float(data["latest_rtt"]), float(data["min_rtt"]),
                          float(data["smoothed_rtt"]), float(data.get("ack_delay", 0.0)),
                          int(data["congestion_window"]) if "congestion_window" in data else None)
        except (KeyError, TypeError, ValueError) as e:
            raise QlogError(f"qlog: metric_update at {t!r} lacks a number: {e}") from e
        if not all(math.isfinite(x) for x in (s.latest_rtt_ms, s.min_rtt_ms, s.ack_delay_ms)):
            raise QlogError(f"qlog: metric_update at {t!r} has a non-finite RTT")
        if s.latest_rtt_ms <= 0:
            continue  # before the first RTT sample
        last = out[-1] if out else None
        if last and (s.latest_rtt_ms, s.min_rtt_ms, s.ack_delay_ms, s.smoothed_rtt_ms) == (
                last.latest_rtt_ms, last.min_rtt_ms, last.ack_delay_ms, last.smoothed_rtt_ms):
            continue  # the same ack's values, logged again at a packet sent
        out.append(s)
    return out


@dataclass(frozen=True)
class TransportRtt:
    samples: int
    #: mean latest_rtt of the samples; None without samples
    mean_ms: float | None


def transport_rtt(docs: dict | list[dict]) -> TransportRtt:
    """The sender's (the server's) RTT samples of one or more qlogs, pooled: how many, and
    the mean of their latest RTT (ms)."""
    samples = [s for d in ([docs] if isinstance(docs, dict) else docs)
               for s in rtt_samples(d, vantage="server")]
    n = len(samples)
    return TransportRtt(n, sum(s.latest_rtt_ms for s in samples) / n if n else None)


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    if not n:
        return math.nan
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def copa_estimate(samples: list[RttSample], skip_ms: float = 0.0) -> dict:
    """What Copa's default estimate is made of: medians over the samples after ``skip_ms``
    (leave out the start-up) of the estimate d = latest - min RTT, the ack delay in it, and d
    without the ack delay; ``ack_delay_share`` = sum of ack delays / sum of d."""
    if not samples:
        raise QlogError("qlog: no metric_update with an RTT (was the server's qlog enabled?)")
    t0 = samples[0].time_ms
    s = [x for x in samples if x.time_ms - t0 >= skip_ms] or samples
    d = [max(0.0, x.latest_rtt_ms - x.min_rtt_ms) for x in s]
    ad = [min(x.ack_delay_ms, dd) for x, dd in zip(s, d)]
    total = sum(d)
    return {
        "samples": len(s),
        "min_rtt_ms": min(x.min_rtt_ms for x in s),
        "estimate_ms_median": _median(d),
        "estimate_ms_mean": total / len(d),
        "ack_delay_ms_median": _median([x.ack_delay_ms for x in s]),
        "ack_delay_ms_mean": sum(x.ack_delay_ms for x in s) / len(s),
        "estimate_without_ack_delay_ms_median": _median([dd - a for dd, a in zip(d, ad)]),
        "ack_delay_share": (sum(ad) / total) if total > 0 else math.nan,
        "acks_with_delay": sum(1 for x in s if x.ack_delay_ms > 0) / len(s),
    }
