"""Reading one raw trial directory for the tables: its files parsed, nothing derived yet.

:func:`load_trial` reads meta.json (a readable format version, the trial's keys) and parses
the receiver log (parsers.tool), the ping log (parsers.ping) and the queue samples
(parsers.queue); logs may be stored gzip-compressed or, since format 4, packed in the trial's
archive (trial.rawio). A trial that cannot be used
(a file missing or unreadable, a truncated receiver log: the tool failed, an empty transfer
window) raises :class:`TrialInvalid` naming the directory and why; the tables leave it out
and warn with :class:`TrialSkipped`.

The transfer window ("during the transfer", EXPERIMENT.md "Measurements",
:func:`transfer_window`): when the receiver log has interval lines, the window is from the
receiver's first stream byte (first interval's ``t_unix - elapsed_s``) to the last interval
line's ``t_unix``: these are stamped by the receiver itself at the data, whereas meta.json's
``transfer_started_unix`` / ``transfer_ended_unix`` bracket the tool's process (connection
set-up and teardown included). Without interval lines (tperf) the meta.json timing is used.
The source is recorded per trial in the ``window_source`` column.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from latency_divide import READABLE_FORMATS
from latency_divide.errors import LatencyDivideError
from latency_divide.parsers.ping import parse_ping
from latency_divide.parsers.queue import QueueParseError, parse_queue
from latency_divide.trial import rawio
from latency_divide.trial.layout import (
    ARCHIVE,
    META,
    PING_LOG,
    QUEUE_LOG,
    RECEIVER_LOG,
    REQUIRED_LOGS,
    SENDER_LOG,
    parse_trial_path,
)

#: Files every trial needs; logs may be stored as NAME.gz or in the archive (trial.rawio).
REQUIRED_FILES = (META, *REQUIRED_LOGS)


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
    """Text of ``name`` in any of its forms (rawio); TrialInvalid if it cannot be read."""
    try:
        if not rawio.exists(path, name):
            raise TrialInvalid(path, _missing(path, name))
        return rawio.read_text(path, name)
    except rawio.UNREADABLE as e:
        raise TrialInvalid(path, f"cannot read {name}: {e or 'compressed file cut short'}") from None


def _missing(path: Path, name: str) -> str:
    where = f"in {ARCHIVE}" if (path / ARCHIVE).exists() else f"or {name}.gz"
    return f"missing file {name} ({where})"


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
            raise TrialInvalid(path, f"{META} lacks {'.'.join(keys)}")
        cur = cur[k]
    return cur


def load_trial(path: Path | str) -> Trial:
    """Read and parse one trial directory; :class:`TrialInvalid` if it cannot be used."""
    from latency_divide.parsers.tool import ToolParseError, cc_fallback, parse_tool_log

    path = Path(path)
    try:
        packed = not path.is_dir() and rawio.packed(path) is not None
    except (LatencyDivideError, *rawio.UNREADABLE) as e:  # packs.PackError, a damaged pack
        raise TrialInvalid(path, f"its definition's packs cannot be read: {e}") from None
    if not path.is_dir() and not packed:
        raise TrialInvalid(path, "not a directory, nor a trial of its definition's packs")
    if not packed and rawio.find(path, META) is None:
        raise TrialInvalid(path, f"missing file {META}")
    for name in REQUIRED_LOGS:
        try:
            if not rawio.exists(path, name):
                raise TrialInvalid(path, _missing(path, name))
        except rawio.UNREADABLE as e:
            raise TrialInvalid(path, f"cannot read {ARCHIVE}: {e or 'cut short'}") from None
    try:
        meta = json.loads(_read(path, META))
    except json.JSONDecodeError as e:
        raise TrialInvalid(path, f"{META} is not valid JSON ({e.msg}, line {e.lineno})") from None
    if not isinstance(meta, dict):
        raise TrialInvalid(path, f"{META} is not a JSON object")
    version = meta.get("format_version")
    if version not in READABLE_FORMATS:
        raise TrialInvalid(path, f"{META} format_version {version!r}; this code reads "
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
        tool = parse_tool_log(_read(path, RECEIVER_LOG))
    except ToolParseError as e:
        raise TrialInvalid(path, f"{RECEIVER_LOG}: {e}") from None
    if not tool.complete:
        raise TrialInvalid(path, f"{RECEIVER_LOG} is truncated (no complete transfer summary)")
    if rawio.exists(path, SENDER_LOG):
        fallback = cc_fallback(_read(path, SENDER_LOG))
        if fallback:  # not the variant it is filed under
            raise TrialInvalid(path, fallback)
    try:
        queue = parse_queue(_read(path, QUEUE_LOG))
    except QueueParseError as e:
        raise TrialInvalid(path, f"{QUEUE_LOG}: {e}") from None
    trial = Trial(
        path=path,
        meta=meta,
        ping=parse_ping(_read(path, PING_LOG)),
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
        raise TrialInvalid(trial.path, f"no interval lines in {RECEIVER_LOG} and {META} lacks "
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
