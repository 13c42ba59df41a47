"""The typed schemas of the Parquet tables under results/tables/ (analysis.tables writes them).

Tables (schema version :data:`SCHEMA_VERSION`, stored in each file's metadata under
``latency_divide.schema_version`` together with the table name):

- ``trials.parquet``: one row per valid trial (:data:`TRIALS_SCHEMA`).
- ``exclusions.parquet``: one row per trial left out, with its reason (:data:`EXCLUSIONS_SCHEMA`).
- ``timeseries/{ping,queue,throughput}.parquet``: long format keyed by definition_id,
  household_id, direction, variant, repetition and ``t_s`` (seconds since the transfer started).
- ``summary.parquet``: per price_bucket x direction x variant, the household count and the mean
  with a 95 % confidence interval (Student t over households, repetitions averaged within a
  household first) of ``norm_tput`` and ``self_delay_mean_ms``.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from latency_divide.errors import LatencyDivideError
from latency_divide.fsio import atomic_path

#: Version of the table schemas below; bump on any change of columns, types or meaning.
SCHEMA_VERSION = 6


KEYS = ("definition_id", "household_id", "direction", "variant", "repetition")


_ts = pa.timestamp("us", tz="UTC")


TRIALS_SCHEMA = pa.schema(
    [
        ("definition_id", pa.string()),
        ("household_id", pa.int64()),
        ("price_bucket", pa.string()),
        ("direction", pa.string()),
        ("variant", pa.string()),
        ("cc", pa.string()),
        ("delta", pa.float64()),
        ("repetition", pa.int64()),
        ("tool", pa.string()),
        ("window_bytes", pa.int64()),
        ("delay_mechanism", pa.string()),
        ("config_hash", pa.string()),
        ("capacity_kbps", pa.float64()),
        ("base_rtt_ms", pa.float64()),
        ("base_rtt_measured_ms", pa.float64()),
        ("duration_s", pa.float64()),
        ("goodput_kbps", pa.float64()),
        ("norm_tput", pa.float64()),
        ("self_delay_mean_ms", pa.float64()),
        ("self_delay_median_ms", pa.float64()),
        ("self_delay_p95_ms", pa.float64()),
        ("rtt_mean_ms", pa.float64()),
        # the sender's transport RTT: mean of the QUIC stack's own RTT samples and their
        # number (analysis.metrics; null where the trial has no report of them)
        ("transport_rtt_mean_ms", pa.float64()),
        ("transport_rtt_samples", pa.int64()),
        # the sender's packet loss rate, % of the packets it sent that it declared lost
        # (analysis.metrics; NaN without a sender report of both counts: tperf)
        ("sender_loss_pct", pa.float64()),
        ("ping_loss_pct", pa.float64()),
        ("queue_mean_bytes", pa.float64()),
        ("queue_p95_bytes", pa.float64()),
        ("drops", pa.int64()),
        ("started_at", _ts),
        ("ended_at", _ts),
        ("concurrency", pa.int64()),
        ("trial_path", pa.string()),
        ("window_source", pa.string()),
        ("transfer_start_unix", pa.float64()),
        ("transfer_end_unix", pa.float64()),
        # emulation health over the transfer (trial.health; NaN / "unknown" for trials
        # measured before it was recorded)
        ("health_verdict", pa.string()),
        ("tool_wait_ms_per_s", pa.float64()),
        ("tool_wait_ms_per_s_worst", pa.float64()),
        ("tool_wait_per_slice_us", pa.float64()),
        ("delayline_wait_ms_per_s", pa.float64()),
        ("delayline_late_p99_us", pa.float64()),
        ("delayline_late_max_us", pa.float64()),
        ("cpu_pressure_some_pct", pa.float64()),
        ("queue_samples_pct", pa.float64()),
        ("queue_gap_max_s", pa.float64()),
        ("tool_cpu_s", pa.float64()),
        # the instrument that measured it (trial.instrument: "v1" for trials published
        # before 2026-11-27) and the delay line's release window, µs (NaN: v1 or netem)
        ("instrument", pa.string()),
        ("delayline_window_us", pa.float64()),
        # a live broadcast (docs/live.md; analysis.metrics.LIVE_COLUMNS, parsers.live has the
        # definitions, Facebook's): its ABR (backlog | rate), the broadcast's length, Facebook's
        # goodput (application bytes acknowledged / broadcast), application RTT of the pings on
        # their own stream (priority) and queued behind the video (in-band), RTX overhead (bytes
        # lost / bytes acknowledged, a ratio), the encoder's bitrate (time-weighted mean, rung
        # changes), frames made, handed to the transport and dropped at the sender, and the
        # frames' capture-to-receipt latency. Null for bulk trials.
        ("live_abr", pa.string()),
        ("broadcast_s", pa.float64()),
        ("goodput_fb_kbps", pa.float64()),
        ("app_rtt_mean_ms", pa.float64()),
        ("app_rtt_p95_ms", pa.float64()),
        ("app_rtt_inband_mean_ms", pa.float64()),
        ("app_rtt_inband_p95_ms", pa.float64()),
        ("rtx_overhead", pa.float64()),
        ("bitrate_mean_kbps", pa.float64()),
        ("bitrate_switches", pa.int64()),
        ("frames_produced", pa.int64()),
        ("frames_sent", pa.int64()),
        ("frames_dropped", pa.int64()),
        ("frames_dropped_pct", pa.float64()),
        ("frame_latency_p50_ms", pa.float64()),
        ("frame_latency_p95_ms", pa.float64()),
        # a policed link (docs/policing.md): frames the delay line's policer dropped in the
        # trial's direction, and their bytes; null when not policed (or the kernel policed)
        ("policer_drops", pa.int64()),
        ("policer_dropped_bytes", pa.int64()),
    ]
)

#: The health numbers of a trials row (meta.json ``health``; trial.health).
HEALTH_COLUMNS = ("tool_wait_ms_per_s", "tool_wait_ms_per_s_worst", "tool_wait_per_slice_us",
                  "delayline_wait_ms_per_s", "delayline_late_p99_us", "delayline_late_max_us",
                  "cpu_pressure_some_pct", "queue_samples_pct", "queue_gap_max_s", "tool_cpu_s")


_KEY_FIELDS = [
    ("definition_id", pa.string()),
    ("household_id", pa.int64()),
    ("direction", pa.string()),
    ("variant", pa.string()),
    ("repetition", pa.int64()),
    ("t_s", pa.float64()),
]


PING_TS_SCHEMA = pa.schema(
    _KEY_FIELDS + [("seq", pa.int64()), ("rtt_ms", pa.float64()), ("self_delay_ms", pa.float64()),
                   ("during_transfer", pa.bool_())]
)


QUEUE_TS_SCHEMA = pa.schema(
    _KEY_FIELDS + [("backlog_bytes", pa.int64()), ("backlog_pkts", pa.int64()),
                   ("drops", pa.int64()), ("during_transfer", pa.bool_())]
)


THROUGHPUT_TS_SCHEMA = pa.schema(
    _KEY_FIELDS + [("interval_s", pa.float64()), ("bytes", pa.int64()),
                   ("goodput_kbps", pa.float64())]
)


_STAT_COLS = ("norm_tput", "self_delay_mean_ms")


SUMMARY_SCHEMA = pa.schema(
    [
        ("price_bucket", pa.string()),
        ("direction", pa.string()),
        ("variant", pa.string()),
        ("definition_id", pa.string()),
        ("households", pa.int64()),
        ("trials", pa.int64()),
    ]
    + [
        (f"{c}_{s}", pa.float64())
        for c in _STAT_COLS
        for s in ("mean", "ci95_lo", "ci95_hi", "sd")
    ]
)


EXCLUSIONS_SCHEMA = pa.schema(
    [
        ("definition_id", pa.string()),
        ("household_id", pa.int64()),
        ("direction", pa.string()),
        ("variant", pa.string()),
        ("repetition", pa.int64()),
        ("trial_path", pa.string()),
        ("reason", pa.string()),
    ]
)


SCHEMAS = {
    "trials": TRIALS_SCHEMA,
    "exclusions": EXCLUSIONS_SCHEMA,
    "ping": PING_TS_SCHEMA,
    "queue": QUEUE_TS_SCHEMA,
    "throughput": THROUGHPUT_TS_SCHEMA,
    "summary": SUMMARY_SCHEMA,
}


def write_versioned(df: pd.DataFrame, path: Path | str, schema: pa.Schema, *, name: str,
                    version: int) -> None:
    """Write ``df``'s columns of ``schema`` as a Parquet table whose metadata names the table
    (``latency_divide.table``), its schema version (``latency_divide.schema_version``) and when
    it was written; temp file then rename (fsio.atomic_path). Every table of ours is written
    so (this module's, analysis.population's percentiles, analysis.depth's buffer depth, ...)."""
    meta = {
        b"latency_divide.table": name.encode(),
        b"latency_divide.schema_version": str(version).encode(),
        b"latency_divide.created_at": datetime.now(timezone.utc).isoformat().encode(),
    }
    table = pa.Table.from_pandas(df[schema.names], schema=schema, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def read_versioned(path: Path | str, *, version: int, name: str | None = None,
                   filters=None) -> pd.DataFrame:
    """Read a table written by :func:`write_versioned`, checking its schema version and, if
    ``name`` is given, its table name; a mismatch is an error naming both. ``filters``:
    pyarrow's row filters (e.g. ``[("household_id", "=", 615016)]``), applied while reading."""
    path = Path(path)
    md = pq.read_schema(path).metadata or {}
    got = md.get(b"latency_divide.table", b"").decode()
    got_version = md.get(b"latency_divide.schema_version", b"").decode()
    if got_version != str(version) or (name is not None and got != name):
        raise LatencyDivideError(
            f"{path}: table {got or 'unnamed'!r} schema version {got_version or 'missing'!r}; "
            f"this code reads {name or 'a table'!r} version {version}")
    return pq.read_table(path, filters=filters).to_pandas()
