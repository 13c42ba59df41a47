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

import pyarrow as pa

#: Version of the table schemas below; bump on any change of columns, types or meaning.
SCHEMA_VERSION = 2


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
    ]
)


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
