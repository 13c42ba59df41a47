"""One trial's numbers: its row of the trials table and its time series
(EXPERIMENT.md "Measurements"), from a trial read by analysis.reader.

Idle period: pings with ``t_unix`` before the transfer window's start; ``base_rtt_measured_ms``
is their minimum RTT. Pings and queue samples with ``t_unix`` inside the window are "during the
transfer": the self-induced delay of a ping is its RTT minus that idle base, ``norm_tput`` is
the receiver's goodput over the shaped capacity (meta.json ``capacity_kbps``). A trial with no
idle or no in-transfer RTT sample, or no queue sample during the transfer, raises
:class:`TrialInvalid` (analysis.reader).

Transport RTT (Facebook's Copa study: the mean of the QUIC stack's own RTT samples over the
transfer): ``transport_rtt_mean_ms`` and ``transport_rtt_samples`` come from the sender's
report, tquic-perf's ``sender.json`` or, for tperf run with ``tool.qlog``, the report the trial
made of its sender's qlog (``qlog_summary.json``; parsers.qlog.summarize_server_qlog), else the
``connection closed`` line of tquic-perf's ``sender.log``, else the sender's qlog kept in the
trial directory (mvfst's tperf run by hand with
``-server_qlogger_path`` into it: ``*.qlog[.gz]`` there or one directory down, or packed in the
format-4 archive). Trials without
any of them (measured before tquic-perf reported RTT samples; tperf without a qlog) get None,
as does a report that cannot be read (the next source is tried first). ``sender_loss_pct``:
the packets the sender declared lost per packet sent, from the same reports (NaN without
them: tperf's logs without a qlog).

Live broadcasts (tquic-perf ``-app live``, docs/live.md): Facebook's per-broadcast metrics from
the ``live`` objects of the trial's ``sender.json`` and ``receiver.json`` (parsers.live, whose
docstring has the definitions), :data:`LIVE_COLUMNS`; null for a bulk trial (its sender.json has
no ``live`` object). A live trial whose reports are missing or malformed is invalid. Its
``transport_rtt_mean_ms`` is the same column as a bulk trial's (the mean of QUIC's RTT samples).
Policed links (docs/policing.md): ``policer_drops`` and ``policer_dropped_bytes``, the frames the
delay line's policer dropped in the trial's direction and their bytes (Ethernet frames), from
its usage line (trial.instrument.delayline_facts); null when the link is not policed, or is
policed by the kernel's police action (its counters are not recorded).

The series (ping, queue, throughput) are keyed by ``t_s``, seconds since the transfer started.
``latency-divide summarize`` prints one trial's row (:func:`summarize_trial`,
:func:`format_row`, :func:`row_jsonable`).
"""

from __future__ import annotations

import fnmatch
import gzip
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from latency_divide.analysis.reader import (
    Trial,
    TrialInvalid,
    _iso,
    _meta_get,
    load_trial,
)
from latency_divide.analysis.schemas import HEALTH_COLUMNS, TRIALS_SCHEMA
from latency_divide.ops.admission import beyond_cores
from latency_divide.parsers.live import LiveParseError, parse_live_trial
from latency_divide.parsers.qlog import QlogError, read_qlog, transport_rtt
from latency_divide.parsers.tool import ToolParseError, parse_sender_json, parse_sender_log
from latency_divide.trial import rawio
from latency_divide.trial.health import rejudge
from latency_divide.trial.instrument import delayline_facts, generation_of
from latency_divide.trial.layout import (
    DELAYLINE_LOG,
    QLOG_SUMMARY,
    RECEIVER_JSON,
    SENDER_JSON,
    SENDER_LOG,
    SETUP_JSON,
)

#: Where a trial's sender qlogs may be, relative to the trial directory.
_QLOG_GLOBS = ("*.qlog", "*.qlog.gz", "*/*.qlog", "*/*.qlog.gz")


def _sender_reports(path: Path):
    """The sender's reports of a trial directory that can be read, best first."""
    for name, parse in ((SENDER_JSON, parse_sender_json), (QLOG_SUMMARY, parse_sender_json),
                        (SENDER_LOG, parse_sender_log)):
        try:
            if not rawio.exists(path, name):
                continue
            rep = parse(rawio.read_text(path, name))
        except (*rawio.UNREADABLE, ToolParseError):
            continue
        if rep is not None:
            yield rep


def sender_loss_pct_of(path: Path) -> float | None:
    """The sender's packet loss rate over the connection, % (packets it declared lost per
    packet sent: tquic-perf's report); None if no report gives both counts (tperf)."""
    for rep in _sender_reports(path):
        if rep.loss_pct is not None:
            return rep.loss_pct
    return None


def transport_rtt_of(path: Path) -> tuple[float | None, int | None]:
    """(mean ms, number) of the sender's transport RTT samples of a trial directory (module
    docstring); (None, None) if it has no report of them, (None, 0) if it reports none."""
    for rep in _sender_reports(path):
        if rep.rtt_samples is not None:
            return rep.rtt_mean_ms, rep.rtt_samples
    qlogs = sorted({q for g in _QLOG_GLOBS for q in path.glob(g) if q.is_file()})
    try:
        docs = [read_qlog(q) for q in qlogs] or _packed_qlogs(path)
        if docs:
            r = transport_rtt(docs)
            return r.mean_ms, r.samples
    except (QlogError, ValueError, *rawio.UNREADABLE):
        pass
    return None, None


def _packed_qlogs(path: Path) -> list[dict]:
    """The qlogs packed in a format-4 trial's archive (same names as _QLOG_GLOBS)."""
    docs = []
    for name, data in sorted(rawio.members(path).items()):
        if any(fnmatch.fnmatchcase(name, g) for g in _QLOG_GLOBS):
            docs.append(json.loads(gzip.decompress(data) if name.endswith(".gz") else data))
    return docs


#: The trials-table columns of a live broadcast (parsers.live's names; null for bulk trials).
LIVE_COLUMNS = ("live_abr", "broadcast_s", "goodput_fb_kbps", "app_rtt_mean_ms",
                "app_rtt_p95_ms", "app_rtt_inband_mean_ms", "app_rtt_inband_p95_ms",
                "rtx_overhead", "bitrate_mean_kbps", "bitrate_switches", "frames_produced",
                "frames_sent", "frames_dropped", "frames_dropped_pct", "frame_latency_p50_ms",
                "frame_latency_p95_ms")


def live_columns(path: Path) -> dict:
    """A trial's :data:`LIVE_COLUMNS` (module docstring): None each for a bulk trial;
    TrialInvalid for a live one whose reports are missing or malformed."""
    try:
        text = rawio.read_text(path, SENDER_JSON) if rawio.exists(path, SENDER_JSON) else ""
        if '"live"' not in text:  # a bulk transfer's report (or none: tperf, older trials)
            return dict.fromkeys(LIVE_COLUMNS)
        row = parse_live_trial(text, rawio.read_text(path, RECEIVER_JSON))
    except (*rawio.UNREADABLE, LiveParseError) as e:
        raise TrialInvalid(path, f"live broadcast: {e}") from None
    return {k: row[k] for k in LIVE_COLUMNS}


def policer_columns(path: Path, meta: dict, direction: str) -> dict:
    """``policer_drops`` and ``policer_dropped_bytes`` of a trial (module docstring): read
    only for a policed definition, so a trial of any other costs nothing."""
    out = {"policer_drops": None, "policer_dropped_bytes": None}
    model = (meta.get("definition") or {}).get("buffer_model", "")
    if not str(model).startswith("policed"):
        return out
    try:
        facts = delayline_facts(rawio.read_text(path, DELAYLINE_LOG))
    except (*rawio.UNREADABLE, FileNotFoundError):
        return out
    d = ((facts or {}).get("police") or {}).get("ba" if direction == "uplink" else "ab") or {}
    return {"policer_drops": d.get("drops"), "policer_dropped_bytes": d.get("drop_bytes")}


def beyond_host_of(trial: Trial) -> str | None:
    """Why the host a trial ran on could not emulate its link even alone, from the trial's own
    records (ops.admission.beyond_cores: its capacity, RTT, tool and window, and the host's
    cores in setup.json), or None. Such a trial's timing checks can pass while the host, not
    the link, limits it (README "Links beyond the host"). Trials whose link fits a one-core
    host are not read further; trials without setup.json (before format 4) are not judged.
    A trial is judged by the cost model of the instrument that measured it (meta.json
    ``instrument``; ``v1`` for trials published before it was recorded), so a trial that was
    host-bound stays excluded whatever today's instrument costs."""
    meta = trial.meta
    tool = meta.get("tool") if isinstance(meta.get("tool"), dict) else {}
    testbed = (meta.get("definition") or {}).get("testbed", "local")
    args = (float(meta.get("capacity_kbps") or 0), float(meta["household"].get("rtt_ms") or 0),
            tool.get("window_bytes"), str(tool.get("name", "tquic-perf")), testbed)
    # the cost model of the instrument that measured it, never today's (trial.instrument)
    gen = generation_of(meta)
    if beyond_cores(*args, cpu_count=1, generation=gen) is None:
        return None
    try:
        setup = json.loads(rawio.read_text(trial.path, SETUP_JSON))
    except (*rawio.UNREADABLE, json.JSONDecodeError):
        return None
    cores = (setup.get("host") or {}).get("cpu_count") if isinstance(setup, dict) else None
    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
        return None
    return beyond_cores(*args, cpu_count=cores, generation=gen)


def trial_row(trial: Trial) -> dict:
    """The trials-table row of one trial (EXPERIMENT.md "Measurements")."""
    path, meta = trial.path, trial.meta
    start, end = trial.window
    ping = trial.ping
    answered = ping["rtt_ms"].notna().to_numpy()
    t = ping["t_unix"].to_numpy()
    idle = answered & (t < start)
    if not idle.any():
        raise TrialInvalid(path, "no ping reply before the transfer started (no idle base RTT)")
    base = float(ping["rtt_ms"].to_numpy()[idle].min())
    during = (t >= start) & (t <= end)
    rtt_during = ping["rtt_ms"].to_numpy()[during & answered]
    if len(rtt_during) == 0:
        raise TrialInvalid(path, "no ping reply during the transfer")
    self_delay = rtt_during - base
    q = trial.queue
    qt = q["t_unix"].to_numpy()
    qin = (qt >= start) & (qt <= end)
    if not qin.any():
        raise TrialInvalid(path, "no queue sample during the transfer")
    backlog = q["backlog_bytes"].to_numpy()[qin].astype("float64")
    capacity = float(_meta_get(path, meta, "capacity_kbps"))
    if not capacity > 0:
        raise TrialInvalid(path, f"capacity_kbps {capacity} is not positive")
    timing = meta.get("timing") or {}
    tool = meta.get("tool") or {}
    hh = meta["household"]
    row = dict(trial.keys)
    row.update(
        tool=str(tool.get("name", "")),
        window_bytes=int(tool.get("window_bytes", 0)),
        delay_mechanism=str(meta.get("delay_mechanism", "")),
        config_hash=str(meta.get("config_hash") or ""),
        capacity_kbps=capacity,
        base_rtt_ms=float(hh.get("rtt_ms", math.nan)),
        base_rtt_measured_ms=base,
        duration_s=trial.duration_s,
        goodput_kbps=trial.goodput_kbps,
        norm_tput=trial.goodput_kbps / capacity,
        self_delay_mean_ms=float(self_delay.mean()),
        self_delay_median_ms=float(np.median(self_delay)),
        self_delay_p95_ms=float(np.percentile(self_delay, 95)),
        rtt_mean_ms=float(rtt_during.mean()),
        ping_loss_pct=float(100.0 * (~answered[during]).sum() / during.sum()),
        queue_mean_bytes=float(backlog.mean()),
        queue_p95_bytes=float(np.percentile(backlog, 95)),
        drops=int(q["drops"].to_numpy()[qin].sum()),
        started_at=_iso(timing.get("started_at")),
        ended_at=_iso(timing.get("ended_at")),
        concurrency=int(meta.get("concurrency", 1)),
        trial_path=path.as_posix(),
        window_source=trial.window_source,
        transfer_start_unix=start,
        transfer_end_unix=end,
    )
    row["transport_rtt_mean_ms"], row["transport_rtt_samples"] = transport_rtt_of(path)
    loss = sender_loss_pct_of(path)
    row["sender_loss_pct"] = math.nan if loss is None else loss
    row.update(live_columns(path))
    row.update(policer_columns(path, meta, row["direction"]))
    health = meta.get("health") if isinstance(meta.get("health"), dict) else {}
    # judged by today's bounds, in the link's own units (trial.health, issue 57), not by those
    # in force when it was measured (`latency-divide rejudge` lists where the two differ)
    today = rejudge(meta)
    row["health_verdict"] = str((today or health).get("verdict", "unknown"))
    for k in HEALTH_COLUMNS:
        v = health.get(k)
        row[k] = float(v) if v is not None else math.nan
    # which instrument measured it (trial.instrument; v1 for trials that recorded none)
    row["instrument"] = generation_of(meta)
    inst = meta.get("instrument") if isinstance(meta.get("instrument"), dict) else {}
    dl = (inst.get("delay") or {}).get("delayline") or {}
    w = dl.get("window_us")
    row["delayline_window_us"] = float(w) if isinstance(w, (int, float)) else math.nan
    return row


def _series(trial: Trial, base_rtt_ms: float) -> dict[str, dict[str, np.ndarray]]:
    """Ping, queue and throughput series of one trial as columns (no key columns), t_s from
    transfer start; analysis.tables concatenates them column by column (no frame per trial)."""
    start, end = trial.window
    p = trial.ping
    pt = p["t_unix"].to_numpy()
    rtt = p["rtt_ms"].to_numpy()
    ping = {
        "t_s": pt - start,
        "seq": p["seq"].to_numpy(),
        "rtt_ms": rtt,
        "self_delay_ms": rtt - base_rtt_ms,
        "during_transfer": (pt >= start) & (pt <= end),
    }
    q = trial.queue
    qt = q["t_unix"].to_numpy()
    queue = {
        "t_s": qt - start,
        "backlog_bytes": q["backlog_bytes"].to_numpy(),
        "backlog_pkts": q["backlog_pkts"].to_numpy(),
        "drops": q["drops"].to_numpy(),
        "during_transfer": (qt >= start) & (qt <= end),
    }
    iv = trial.intervals
    length = np.diff(iv["elapsed_s"].to_numpy(), prepend=0.0)
    nbytes = iv["bytes"].to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        kbps = np.where(length > 0, nbytes * 8.0 / length / 1000.0, np.nan)
    tput = {"t_s": iv["t_unix"].to_numpy() - start, "interval_s": length, "bytes": nbytes,
            "goodput_kbps": kbps}
    return {"ping": ping, "queue": queue, "throughput": tput}


def summarize_trial(path: Path | str) -> dict:
    """One trial's trials-table row (``latency-divide summarize``)."""
    return trial_row(load_trial(path))


def row_jsonable(row: dict) -> dict:
    """A trials-table row with JSON types (timestamps ISO 8601, NaN -> null)."""
    out = {}
    for k in TRIALS_SCHEMA.names:
        v = row.get(k)
        if isinstance(v, pd.Timestamp):
            v = None if pd.isna(v) else v.isoformat().replace("+00:00", "Z")
        elif isinstance(v, (float, np.floating)):
            v = None if math.isnan(v) else float(v)
        elif isinstance(v, np.integer):
            v = int(v)
        elif v is pd.NaT:
            v = None
        out[k] = v
    return out


def format_row(row: dict) -> str:
    """One trial's row, one ``column: value`` per line (units are in the column names)."""
    rec = row_jsonable(row)
    width = max(len(k) for k in rec)
    lines = []
    for k, v in rec.items():
        if isinstance(v, float):
            v = f"{v:.6g}" if k not in ("transfer_start_unix", "transfer_end_unix") else f"{v:.6f}"
        lines.append(f"{k:<{width}}  {'-' if v is None else v}")
    return "\n".join(lines)
