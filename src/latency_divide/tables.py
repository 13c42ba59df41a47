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

import json
import math
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from . import READABLE_FORMATS, rawio
from .definition import TrialPath, parse_trial_path
from .errors import LatencyDivideError
from .fsio import atomic_path
from .parsers.ping import parse_ping
from .parsers.queue import QueueParseError, parse_queue

#: Version of the table schemas below; bump on any change of columns, types or meaning.
SCHEMA_VERSION = 2

#: Files every trial needs; logs may be stored gzip-compressed as NAME.gz (see rawio).
REQUIRED_FILES = ("meta.json", "receiver.log", "ping.log", "queue.jsonl")
KEYS = ("definition_id", "household_id", "direction", "variant", "repetition")


class TrialInvalid(LatencyDivideError):
    """A trial directory cannot be used; the message names the directory and why."""

    def __init__(self, path: Path | str, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")

    def __reduce__(self):  # picklable across worker processes
        return (TrialInvalid, (self.path, self.reason))


class TrialSkipped(UserWarning):
    """Warning category for a trial left out of the tables."""


class NoValidTrials(LatencyDivideError):
    """None of the given trial directories could be used."""


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


# ---------------------------------------------------------------------------------------------
# one trial


@dataclass
class Trial:
    """A trial directory, read and parsed (no derived numbers yet)."""

    path: Path
    meta: dict
    ping: pd.DataFrame
    queue: pd.DataFrame
    intervals: pd.DataFrame  # t_unix, elapsed_s, bytes (may be empty)
    received_bytes: int
    duration_s: float
    goodput_kbps: float
    window: tuple[float, float] = (math.nan, math.nan)
    window_source: str = ""
    keys: dict = field(default_factory=dict)


def _read(path: Path, name: str) -> str:
    """Text of ``name`` or ``name.gz`` (rawio); TrialInvalid if neither can be read."""
    if rawio.find(path, name) is None:
        raise TrialInvalid(path, f"missing file {name} (or {name}.gz)")
    try:
        return rawio.read_text(path, name)
    except (OSError, UnicodeDecodeError, EOFError) as e:  # EOFError: a gzip log cut short
        raise TrialInvalid(path, f"cannot read {name}: {e or 'compressed file cut short'}") from None


def _intervals_frame(intervals) -> pd.DataFrame:
    """The tool parser's interval records (``Interval`` named tuples) as a frame
    (t_unix, elapsed_s, bytes)."""
    cols = ["t_unix", "elapsed_s", "bytes"]
    if not intervals:
        return pd.DataFrame({"t_unix": pd.Series(dtype="float64"),
                             "elapsed_s": pd.Series(dtype="float64"),
                             "bytes": pd.Series(dtype="int64")})
    arr = np.array([(i.t_unix, i.elapsed_s, i.bytes) for i in intervals], dtype="float64")
    return pd.DataFrame({"t_unix": arr[:, 0], "elapsed_s": arr[:, 1],
                         "bytes": arr[:, 2].astype("int64")}, columns=cols)


def _meta_get(path: Path, meta: dict, *keys):
    cur = meta
    for k in keys:
        if not isinstance(cur, dict) or k not in cur:
            raise TrialInvalid(path, f"meta.json lacks {'.'.join(keys)}")
        cur = cur[k]
    return cur


def load_trial(path: Path | str) -> Trial:
    """Read and parse one trial directory; :class:`TrialInvalid` if it cannot be used."""
    from .parsers.tool import ToolParseError, parse_tool_log

    path = Path(path)
    if not path.is_dir():
        raise TrialInvalid(path, "not a directory")
    for name in REQUIRED_FILES:
        if rawio.find(path, name) is None:
            raise TrialInvalid(path, f"missing file {name}" + ("" if name == "meta.json" else
                                                                f" (or {name}.gz)"))
    try:
        meta = json.loads(_read(path, "meta.json"))
    except json.JSONDecodeError as e:
        raise TrialInvalid(path, f"meta.json is not valid JSON ({e.msg}, line {e.lineno})") from None
    if not isinstance(meta, dict):
        raise TrialInvalid(path, "meta.json is not a JSON object")
    version = meta.get("format_version")
    if version not in READABLE_FORMATS:
        raise TrialInvalid(path, f"meta.json format_version {version!r}; this code reads "
                                 f"{', '.join(map(str, READABLE_FORMATS))}")
    hh = _meta_get(path, meta, "household")
    variant = _meta_get(path, meta, "variant")
    delta = variant.get("delta") if isinstance(variant, dict) else None
    keys = {
        # the trial's definition: recorded since format 2, else its directory's name
        "definition_id": str(meta.get("definition_id")
                             or getattr(parse_trial_path(path.resolve()), "definition_id", "")),
        "household_id": int(_meta_get(path, meta, "household", "unit_id")),
        # null for a household outside every configured bucket (a one-off `latency-divide
        # trial`): kept in trials.parquet, left out of the per-bucket summaries and figures
        "price_bucket": None if hh.get("price_bucket") is None else str(hh["price_bucket"]),
        "direction": str(_meta_get(path, meta, "direction")),
        "variant": str(_meta_get(path, meta, "variant", "name")),
        "cc": str(_meta_get(path, meta, "variant", "cc")),
        "delta": float(delta) if delta is not None else math.nan,
        "repetition": int(_meta_get(path, meta, "repetition")),
    }

    try:
        tool = parse_tool_log(_read(path, "receiver.log"))
    except ToolParseError as e:
        raise TrialInvalid(path, f"receiver.log: {e}") from None
    if not tool.complete:
        raise TrialInvalid(path, "receiver.log is truncated (no complete transfer summary)")
    try:
        queue = parse_queue(_read(path, "queue.jsonl"))
    except QueueParseError as e:
        raise TrialInvalid(path, f"queue.jsonl: {e}") from None
    trial = Trial(
        path=path,
        meta=meta,
        ping=parse_ping(_read(path, "ping.log")),
        queue=queue,
        intervals=_intervals_frame(getattr(tool, "intervals", None)),
        received_bytes=int(tool.received_bytes),
        duration_s=float(tool.duration_s),
        goodput_kbps=float(tool.goodput_kbps),
        keys=keys,
    )
    trial.window, trial.window_source = transfer_window(trial)
    return trial


def transfer_window(trial: Trial) -> tuple[tuple[float, float], str]:
    """(start, end) in unix seconds of "during the transfer", and where it came from."""
    iv = trial.intervals
    if len(iv) > 0:
        start = float(iv["t_unix"].iloc[0] - iv["elapsed_s"].iloc[0])
        end = float(iv["t_unix"].iloc[-1])
        if end > start:
            return (start, end), "receiver_intervals"
    timing = trial.meta.get("timing") or {}
    try:
        start = float(timing["transfer_started_unix"])
        end = float(timing["transfer_ended_unix"])
    except (KeyError, TypeError, ValueError):
        raise TrialInvalid(trial.path, "no interval lines in receiver.log and meta.json lacks "
                                       "timing.transfer_started_unix/transfer_ended_unix") from None
    if not end > start:
        raise TrialInvalid(trial.path, f"transfer window is empty ({start} .. {end})")
    return (start, end), "meta_timing"


def _iso(value) -> pd.Timestamp:
    if value is None:
        return pd.NaT
    try:
        return pd.Timestamp(value).tz_convert("UTC") if pd.Timestamp(value).tzinfo else \
            pd.Timestamp(value, tz="UTC")
    except (ValueError, TypeError):
        return pd.NaT


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


def _keyed(parts: list[tuple[dict, pd.DataFrame]], schema: pa.Schema) -> pd.DataFrame:
    """Concatenate per-trial frames and prepend the key columns (one np.repeat per key)."""
    if not parts:
        return _empty(schema)
    lengths = np.array([len(df) for _, df in parts])
    body = pd.concat([df for _, df in parts], ignore_index=True)
    keys = {k: np.repeat(np.array([kv[k] for kv, _ in parts]), lengths) for k in KEYS}
    out = pd.concat([pd.DataFrame(keys), body], axis=1)
    return out[schema.names]


def trial_timeseries(trial: Trial, base_rtt_ms: float) -> dict[str, pd.DataFrame]:
    """Long-format ping, queue and throughput series of one trial, keyed, t_s from transfer
    start."""
    keys = {k: trial.keys[k] for k in KEYS}
    return {name: _keyed([(keys, df)], SCHEMAS[name])
            for name, df in _series(trial, base_rtt_ms).items()}


def summarize_trial(path: Path | str) -> dict:
    """One trial's trials-table row (``latency-divide summarize``)."""
    return trial_row(load_trial(path))


# ---------------------------------------------------------------------------------------------
# many trials


@dataclass
class Tables:
    trials: pd.DataFrame
    ping: pd.DataFrame
    queue: pd.DataFrame
    throughput: pd.DataFrame
    skipped: list[TrialInvalid]

    @property
    def exclusions(self) -> pd.DataFrame:
        """One row per trial left out, with its reason."""
        rows = []
        for e in self.skipped:
            p = Path(e.path)
            where = parse_trial_path(p) or TrialPath("", -1, "", "", -1)
            rows.append({"household_id": where.household, **where._asdict(),
                         "trial_path": p.as_posix(), "reason": e.reason})
        return _frame(rows, EXCLUSIONS_SCHEMA)


def _empty(schema: pa.Schema) -> pd.DataFrame:
    return schema.empty_table().to_pandas()


def _frame(rows_or_frames, schema: pa.Schema) -> pd.DataFrame:
    if not rows_or_frames:
        return _empty(schema)
    if isinstance(rows_or_frames[0], dict):
        df = pd.DataFrame.from_records(rows_or_frames)
    else:
        df = pd.concat(rows_or_frames, ignore_index=True)
    return df[schema.names]


def _process(d: Path | str):
    """Parse one trial: ("ok", row, keys, series) or ("skip", TrialInvalid)."""
    try:
        trial = load_trial(d)
        row = trial_row(trial)
        series = _series(trial, row["base_rtt_measured_ms"])
    except TrialInvalid as e:
        return ("skip", e)
    return ("ok", row, {k: trial.keys[k] for k in KEYS}, series)


def collect(trial_dirs: Iterable[Path | str], jobs: int = 1) -> Tables:
    """Parse every trial (in ``jobs`` worker processes when > 1); skip, with a
    :class:`TrialSkipped` warning naming it, every trial that cannot be used."""
    dirs = list(trial_dirs)
    if jobs > 1 and len(dirs) > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=jobs) as ex:
            results = list(ex.map(_process, dirs, chunksize=max(1, len(dirs) // (4 * jobs))))
    else:
        results = map(_process, dirs)
    rows: list[dict] = []
    ts: dict[str, list] = {"ping": [], "queue": [], "throughput": []}
    skipped: list[TrialInvalid] = []
    seen = len(dirs)
    for res in results:
        if res[0] == "skip":
            e = res[1]
            skipped.append(e)
            warnings.warn(f"skipping trial {e}", TrialSkipped, stacklevel=2)
            continue
        _, row, keys, series = res
        rows.append(row)
        for k, v in series.items():
            ts[k].append((keys, v))
    if not rows:
        raise NoValidTrials(
            f"no valid trials among {seen} trial director{'y' if seen == 1 else 'ies'}"
            + (": " + "; ".join(str(e) for e in skipped[:5]) if skipped else "")
        )
    trials = _frame(rows, TRIALS_SCHEMA).sort_values(list(KEYS), kind="stable")
    dup = trials.duplicated(list(KEYS), keep=False)
    if dup.any():
        paths = ", ".join(trials.loc[dup, "trial_path"])
        raise LatencyDivideError(f"several trials share household/direction/variant/repetition: "
                                 f"{paths}")
    defs = trials.groupby("variant")["definition_id"].unique()
    mixed = {v: sorted(d) for v, d in defs.items() if len(d) > 1}
    if mixed:
        raise LatencyDivideError(
            "trials of one variant under different definitions would be mixed in one table: "
            + "; ".join(f"{v}: {', '.join(d)}" for v, d in mixed.items())
            + " (results/raw/<definition id>/definition.json says how they differ)")
    return Tables(
        trials=trials.reset_index(drop=True),
        ping=_keyed(ts["ping"], PING_TS_SCHEMA),
        queue=_keyed(ts["queue"], QUEUE_TS_SCHEMA),
        throughput=_keyed(ts["throughput"], THROUGHPUT_TS_SCHEMA),
        skipped=skipped,
    )


def t_quantile_975(dof: int) -> float:
    """Two-sided 95 % Student-t critical value (scipy.special.stdtrit: the t quantile, without
    importing all of scipy.stats)."""
    from scipy.special import stdtrit

    return float(stdtrit(dof, 0.975))


def summary(trials: pd.DataFrame) -> pd.DataFrame:
    """Per price_bucket x direction x variant: households, trials and mean +- 95 % CI.

    Repetitions are averaged within a household first; the CI is mean +- t(0.975, n-1) * sd/sqrt(n)
    over the n households (NaN when n = 1).
    """
    group = ["price_bucket", "direction", "variant", "definition_id"]
    per_hh = trials.groupby(group + ["household_id"], sort=True, observed=True).agg(
        trials=("repetition", "size"), **{c: (c, "mean") for c in _STAT_COLS}
    ).reset_index()
    out = []
    for key, g in per_hh.groupby(group, sort=True, observed=True):
        n = len(g)
        rec = dict(zip(group, key), households=n, trials=int(g["trials"].sum()))
        for c in _STAT_COLS:
            x = g[c].to_numpy(dtype="float64")
            m = float(x.mean())
            sd = float(x.std(ddof=1)) if n > 1 else math.nan
            half = t_quantile_975(n - 1) * sd / math.sqrt(n) if n > 1 else math.nan
            rec.update({f"{c}_mean": m, f"{c}_ci95_lo": m - half, f"{c}_ci95_hi": m + half,
                        f"{c}_sd": sd})
        out.append(rec)
    return _frame(out, SUMMARY_SCHEMA)


# ---------------------------------------------------------------------------------------------
# Parquet


def write_table(df: pd.DataFrame, path: Path | str, name: str) -> None:
    """Write ``df`` with the typed schema of table ``name``; temp file then rename."""
    schema = SCHEMAS[name]
    meta = {
        b"latency_divide.table": name.encode(),
        b"latency_divide.schema_version": str(SCHEMA_VERSION).encode(),
        b"latency_divide.created_at": datetime.now(timezone.utc).isoformat().encode(),
    }
    table = pa.Table.from_pandas(df[schema.names], schema=schema, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def read_table(path: Path | str, name: str | None = None) -> pd.DataFrame:
    """Read a table, checking its schema version (and name, if given)."""
    path = Path(path)
    md = pq.read_schema(path).metadata or {}
    version = md.get(b"latency_divide.schema_version", b"").decode()
    if version != str(SCHEMA_VERSION):
        raise LatencyDivideError(f"{path}: table schema version {version or 'missing'!r}; this "
                                 f"code reads {SCHEMA_VERSION}")
    got = md.get(b"latency_divide.table", b"").decode()
    if name is not None and got != name:
        raise LatencyDivideError(f"{path}: holds table {got!r}, expected {name!r}")
    return pq.read_table(path).to_pandas()


def build_tables(trial_dirs: Sequence[Path | str], out_dir: Path | str, jobs: int = 1,
                 repo: Path | str | None = ".") -> Tables:
    """Check the trials (latency_divide.integrity, against ``repo``'s dvc.lock), parse them
    and write all tables under ``out_dir`` (results/tables). A failed check raises
    DataIntegrityError before anything is written."""
    from .integrity import require_intact

    require_intact(trial_dirs, repo)
    t = collect(trial_dirs, jobs=jobs)
    out = Path(out_dir)
    write_table(t.exclusions, out / "exclusions.parquet", "exclusions")
    write_table(t.trials, out / "trials.parquet", "trials")
    for name in ("ping", "queue", "throughput"):
        write_table(getattr(t, name), out / "timeseries" / f"{name}.parquet", name)
    write_table(summary(t.trials), out / "summary.parquet", "summary")
    return t


# ---------------------------------------------------------------------------------------------
# `latency-divide summarize`


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
