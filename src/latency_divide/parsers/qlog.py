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
import mmap
import os
import re
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


def _sample(t, data: dict) -> RttSample | None:
    """The RTT sample of one metrics update, or None when it carries none (not a metrics
    update, or before the first RTT sample)."""
    try:
        s = RttSample(float(t), float(data["latest_rtt"]), float(data["min_rtt"]),
                      float(data["smoothed_rtt"]), float(data.get("ack_delay", 0.0)),
                      int(data["congestion_window"]) if "congestion_window" in data else None)
    except (KeyError, TypeError, ValueError) as e:
        raise QlogError(f"qlog: metric_update at {t!r} lacks a number: {e}") from e
    if not all(math.isfinite(x) for x in (s.latest_rtt_ms, s.min_rtt_ms, s.ack_delay_ms)):
        raise QlogError(f"qlog: metric_update at {t!r} has a non-finite RTT")
    return s if s.latest_rtt_ms > 0 else None


def _one_per_ack(samples) -> list[RttSample]:
    """Consecutive repeats of the same values (the last ack's, logged again at a packet sent)
    kept once."""
    out: list[RttSample] = []
    for s in samples:
        last = out[-1] if out else None
        if s is None or last and (s.latest_rtt_ms, s.min_rtt_ms, s.ack_delay_ms,
                                  s.smoothed_rtt_ms) == (last.latest_rtt_ms, last.min_rtt_ms,
                                                         last.ack_delay_ms,
                                                         last.smoothed_rtt_ms):
            continue
        out.append(s)
    return out


def _is_metrics(name) -> bool:
    return str(name).endswith(("metric_update", "metrics_updated"))


def rtt_samples(doc: dict, vantage: str | None = None) -> list[RttSample]:
    """One sample per ack: every metrics update that carries an RTT sample, in log order,
    consecutive repeats of the same values kept once; only traces seen from ``vantage`` if
    given (see :func:`_events`)."""
    return _one_per_ack(_sample(t, data) for t, name, data in _events(doc, vantage)
                        if _is_metrics(name) and "latest_rtt" in data)


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


# Reducing a server qlog in a trial ---------------------------------------------------------
# tperf's server writes its qlog as pretty-printed JSON with an event for every packet: about
# 10 MB per second of transfer at 90 Mbit/s. A trial keeps what the analysis needs of it (the
# sender's report, :func:`summarize_server_qlog`) and not the qlog itself.

#: A metrics update as mvfst writes it (sorted keys, one per line): a flat "data" object, then
#: its name and time. Events with nested data (packets) never match.
_METRICS_EVENT = re.compile(
    rb'"data": \{([^{}]*)\},\s*"name": "([A-Za-z_:]*(?:metric_update|metrics_updated))",'
    rb'\s*"time": ([-+0-9.eE]+)')
_NAMES = re.compile(rb'"name": "([A-Za-z_:]+)"')
_FIELD = re.compile(rb'"([a-z_]+)": ([-+0-9.eE]+)')
_LOST = re.compile(rb'"lost_packets": ([0-9]+)')


def _scan_samples(buf) -> tuple[list[RttSample], dict[bytes, int], int]:
    """(RTT samples, events by name, packets declared lost) of one server qlog's bytes."""
    names: dict[bytes, int] = {}
    for m in _NAMES.finditer(buf):
        names[m.group(1)] = names.get(m.group(1), 0) + 1
    samples = []
    for m in _METRICS_EVENT.finditer(buf):
        data = {k.decode(): float(v) for k, v in _FIELD.findall(m.group(1))}
        samples.append(_sample(float(m.group(3)), data) if "latest_rtt" in data else None)
    lost = sum(int(x) for x in _LOST.findall(buf))
    metrics = sum(n for k, n in names.items() if _is_metrics(k.decode()))
    if len(samples) != metrics:
        raise QlogError(f"qlog: {metrics} metrics updates but {len(samples)} in the expected "
                        "form (not pretty-printed JSON as mvfst writes it?)")
    return samples, names, lost


def summarize_server_qlog(paths: list[Path]) -> dict:
    """What a trial keeps of its sender's qlogs (tperf ``-server_qlogger_path``), in the form
    of tquic-perf's sender report (parsers.tool.parse_sender_json reads ``sender``): its RTT
    samples (one per ack, :func:`rtt_samples`) as count, mean, nearest-rank median and 90th
    percentile, min and last smoothed RTT, and the QUIC packets it sent and declared lost; plus
    each qlog's name, size and event counts. The qlogs are read with a scan of their bytes
    (memory-mapped; a 600 MB qlog in seconds), checked against the count of metrics updates."""
    samples: list[RttSample] = []
    sent = lost = 0
    files = []
    for path in sorted(paths):
        p = Path(path)
        try:
            with open(p, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
                try:
                    s, names, n_lost = _scan_samples(buf)
                finally:
                    if size:
                        buf.close()
        except OSError as e:
            raise QlogError(f"{p}: cannot read the qlog: {e}") from e
        except QlogError as e:
            raise QlogError(f"{p}: {e}") from e
        if not s and not names:
            raise QlogError(f"{p}: no qlog events (the server did not finish its qlog?)")
        samples += _one_per_ack(s)
        n_sent = names.get(b"quic:packet_sent", 0) + names.get(b"transport:packet_sent", 0)
        sent += n_sent
        lost += n_lost
        files.append({"name": p.name, "bytes": size,
                      "events": {k.decode(): v for k, v in sorted(names.items())}})
    rtts = sorted(x.latest_rtt_ms for x in samples)
    n = len(rtts)

    def rank(q: float) -> float | None:  # nearest rank, as tquic-perf reports it
        return rtts[max(0, math.ceil(q * n) - 1)] if n else None

    return {"source": "mvfst qlog of the sender (server), reduced by latency_divide.parsers."
                      "qlog.summarize_server_qlog; the qlog itself is not kept",
            "qlogs": files,
            "sender": {"rtt_samples": n, "rtt_mean_ms": sum(rtts) / n if n else None,
                       "rtt_p50_ms": rank(0.5), "rtt_p90_ms": rank(0.9),
                       "min_rtt_ms": min(x.min_rtt_ms for x in samples) if n else None,
                       "srtt_ms": samples[-1].smoothed_rtt_ms if n else None,
                       "packets_sent": sent, "packets_lost": lost}}
