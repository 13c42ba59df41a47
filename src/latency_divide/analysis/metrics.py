"""Raw trial directories -> typed Parquet tables (results/tables/).

Tables (schema version :data:`SCHEMA_VERSION`, stored in each file's metadata under
``latency_divide.schema_version`` together with the table name):

- ``trials.parquet``: one row per valid trial (:data:`TRIALS_SCHEMA`).
- ``timeseries/{ping,queue,throughput}.parquet``: long format keyed by household_id,
  direction, variant, repetition and ``t_s`` (seconds since the transfer started).
- ``summary.parquet``: per price_bucket x direction x variant, the household count and the mean
  with a 95 % confidence interval (Student t over households, repetitions averaged within a
  household first) of ``norm_tput`` and ``self_delay_mean_ms``.

The transfer window ("during the transfer", EXPERIMENT.md "Measurements"):
when the receiver log has interval lines, the window is from the receiver's first stream byte
(first interval's ``t_unix - elapsed_s``) to the last interval line's ``t_unix``: these are
stamped by the receiver itself at the data, whereas meta.json's ``transfer_started_unix`` /
``transfer_ended_unix`` bracket the tool's process (connection set-up and teardown included).
Without interval lines (tperf) the meta.json timing is used. The source is recorded per trial
in the ``window_source`` column.

Idle period: pings with ``t_unix`` before the window start; ``base_rtt_measured_ms`` is their
minimum RTT. Pings and queue samples with ``t_unix`` inside the window are "during the
transfer".

Before anything is parsed, :func:`build_tables` checks every trial directory
(latency_divide.integrity: DVC pins, raw format, identity); a finding stops it with an error
naming the trial and the file, and no table is written. A trial that is intact but invalid by its
own data (truncated receiver log: the tool failed; no idle or no in-transfer RTT sample; no
queue sample; empty transfer window) raises :class:`TrialInvalid` naming the trial directory;
:func:`collect` leaves it out of the measurement tables, lists it with its reason in
``exclusions.parquet`` and warns (:class:`TrialSkipped`). Zero valid trials is an error, and so
are trials of one variant measured under different definitions (they are not one experiment).
"""

from __future__ import annotations

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
from latency_divide.analysis.schemas import TRIALS_SCHEMA


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
    return row


def _series(trial: Trial, base_rtt_ms: float) -> dict[str, pd.DataFrame]:
    """Ping, queue and throughput series of one trial (no key columns), t_s from transfer start."""
    start, end = trial.window
    p = trial.ping
    pt = p["t_unix"].to_numpy()
    rtt = p["rtt_ms"].to_numpy()
    ping = pd.DataFrame({
        "t_s": pt - start,
        "seq": p["seq"].to_numpy(),
        "rtt_ms": rtt,
        "self_delay_ms": rtt - base_rtt_ms,
        "during_transfer": (pt >= start) & (pt <= end),
    })
    q = trial.queue
    qt = q["t_unix"].to_numpy()
    queue = pd.DataFrame({
        "t_s": qt - start,
        "backlog_bytes": q["backlog_bytes"].to_numpy(),
        "backlog_pkts": q["backlog_pkts"].to_numpy(),
        "drops": q["drops"].to_numpy(),
        "during_transfer": (qt >= start) & (qt <= end),
    })
    iv = trial.intervals
    length = np.diff(iv["elapsed_s"].to_numpy(), prepend=0.0)
    nbytes = iv["bytes"].to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        kbps = np.where(length > 0, nbytes * 8.0 / length / 1000.0, np.nan)
    tput = pd.DataFrame({"t_s": iv["t_unix"].to_numpy() - start, "interval_s": length,
                         "bytes": nbytes, "goodput_kbps": kbps})
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
