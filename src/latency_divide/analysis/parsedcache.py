"""The parsed cache of a pack: its trials' rows and time series as the tables job parses them,
kept beside the pack and read instead of the logs while the parsing code is the same.

Parsing costs about 11 ms a trial (bench/bench_reanalysis.py); reading a pack's cache about
0.5 ms (bench/bench_packs.py). Beside ``pack-NNNN.tar.xz``:

    pack-NNNN.parsed.json          the code key, and per trial: "ok" with its row's and series'
                                   positions, or "skip" with the reason it is left out
    pack-NNNN.trials.parquet       the rows (analysis.schemas.TRIALS_SCHEMA, ``trial_path`` of
                                   the trial as it is read)
    pack-NNNN.{ping,queue,throughput}.parquet   the series, key columns left out

The cache is used only when its code key is :func:`code_key` of the code reading it: the
sha256 of every module in :data:`CODE_MODULES` (the parsing, the row, the health and
host checks, the link plan and definition they rebuild) and the versions of numpy, pandas and
pyarrow. After any edit of those, the tables job parses the pack's logs instead (same tables,
slower) and says so, until ``latency-divide publish`` writes the caches again
(analysis.packing).
tests/test_parsedcache.py checks that the tables are the same either way, and that
CODE_MODULES lists every module of ours that parsing a trial loads.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from latency_divide.fsio import json_text
from latency_divide.trial.packs import _cache_files, read_index

#: The modules whose code makes a trial's row and series (tests/test_parsedcache.py checks that
#: parsing loads no other module of ours).
CODE_MODULES = (
    "latency_divide",
    "latency_divide.analysis",
    "latency_divide.analysis.metrics",
    "latency_divide.analysis.parsedcache",
    "latency_divide.analysis.reader",
    "latency_divide.analysis.schemas",
    "latency_divide.analysis.tables",
    "latency_divide.config",
    "latency_divide.data",
    "latency_divide.data.buckets",
    "latency_divide.data.households",
    "latency_divide.data.source",
    "latency_divide.errors",
    "latency_divide.fsio",
    "latency_divide.limits",
    "latency_divide.links",
    "latency_divide.links.plan",
    "latency_divide.ops",
    "latency_divide.ops.admission",
    "latency_divide.parsers",
    "latency_divide.parsers.live",
    "latency_divide.parsers.ping",
    "latency_divide.parsers.qlog",
    "latency_divide.parsers.queue",
    "latency_divide.parsers.tool",
    "latency_divide.paths",
    "latency_divide.testbed",
    "latency_divide.testbed.hostrecord",
    "latency_divide.testbed.rxnapi",
    "latency_divide.trial",
    "latency_divide.trial.definition",
    "latency_divide.trial.health",
    "latency_divide.trial.instrument",
    "latency_divide.trial.layout",
    "latency_divide.trial.packs",
    "latency_divide.trial.rawio",
    "latency_divide.vocab",
)
SERIES = ("ping", "queue", "throughput")
FORMAT = 1


def code_key() -> str:
    """The sha256 of the parsing code (CODE_MODULES' sources) and its libraries' versions."""
    h = hashlib.sha256()
    for name in CODE_MODULES:
        spec = importlib.util.find_spec(name)
        h.update(name.encode() + b"\0" + Path(spec.origin).read_bytes() + b"\0")
    for lib in (np, pd, pa):
        h.update(f"{lib.__name__}={lib.__version__}\0".encode())
    return h.hexdigest()


def _path(archive: Path, part: str) -> Path:
    return archive.with_name(archive.name.removesuffix(".tar.xz") + f".{part}")


def files(archive: Path) -> list[Path]:
    """The cache's files of a pack (present or not; trial.packs names them too)."""
    return _cache_files(archive)


def _parquet(df: pd.DataFrame) -> bytes:
    """``df`` as zstd Parquet, float columns byte-stream-split (their bytes grouped by
    significance, no dictionary: 25 % smaller series than plain zstd on the published
    trials)."""
    table = pa.Table.from_pandas(df, preserve_index=False)
    floats = [f.name for f in table.schema if pa.types.is_floating(f.type)]
    others = [n for n in table.column_names if n not in floats]
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd", compression_level=19,
                   use_dictionary=others or False, use_byte_stream_split=floats or False)
    return sink.getvalue().to_pybytes()


def write(archive: Path, results: dict[str, tuple]) -> None:
    """Write the cache of ``archive`` from its trials' parse results by key (tables._parse's:
    ("ok", row, keys, series) or ("skip", TrialInvalid)); each file through a temporary name,
    the index (parsed.json) last."""
    from latency_divide.analysis.schemas import (
        KEYS,
        PING_TS_SCHEMA,
        QUEUE_TS_SCHEMA,
        THROUGHPUT_TS_SCHEMA,
        TRIALS_SCHEMA,
    )

    ts_schema = {"ping": PING_TS_SCHEMA, "queue": QUEUE_TS_SCHEMA,
                 "throughput": THROUGHPUT_TS_SCHEMA}
    entries: dict[str, dict] = {}
    rows: list[dict] = []
    cols = {s: {c: [] for c in ts_schema[s].names if c not in KEYS} for s in SERIES}
    at = dict.fromkeys(SERIES, 0)
    for key in sorted(results):
        res = results[key]
        if res[0] == "skip":
            entries[key] = {"status": "skip", "reason": res[1].reason}
            continue
        _, row, _keys, series = res
        e = {"status": "ok", "row": len(rows)}
        rows.append(row)
        for s in SERIES:
            n = len(next(iter(series[s].values())))
            for c in cols[s]:
                cols[s][c].append(np.asarray(series[s][c]))
            e[s] = [at[s], at[s] + n]
            at[s] += n
        entries[key] = e
    trials = (pd.DataFrame.from_records(rows)[TRIALS_SCHEMA.names] if rows
              else TRIALS_SCHEMA.empty_table().to_pandas())
    blobs = {"trials.parquet": _parquet(trials)}
    for s in SERIES:
        frame = {c: (np.concatenate(v) if v else np.array([])) for c, v in cols[s].items()}
        blobs[f"{s}.parquet"] = _parquet(pd.DataFrame(frame))
    blobs["parsed.json"] = json_text({"format": FORMAT, "code": code_key(),
                                      "archive": read_index(archive)["archive"]["sha256"],
                                      "trials": entries}).encode()
    for part, data in blobs.items():  # parsed.json last: the cache is complete once it is there
        dst = _path(archive, part)
        tmp = dst.with_name(f".{dst.name}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, dst)


@dataclass
class Cache:
    """A pack's parsed trials: rows, series columns and per-trial entries."""

    entries: dict[str, dict]
    trials: pd.DataFrame
    series: dict[str, dict[str, np.ndarray]]


def load(archive: Path, key: str | None = None) -> tuple[Cache | None, str]:
    """The cache of ``archive`` if it is for this code (``key``, default :func:`code_key`) and
    this archive, else None; and why not (for the log)."""
    idx = _path(archive, "parsed.json")
    try:
        head = json.loads(idx.read_text())
    except FileNotFoundError:
        return None, "no parsed cache"
    except ValueError as e:
        return None, f"parsed cache unreadable ({e})"
    if head.get("format") != FORMAT or head.get("code") != (key or code_key()):
        return None, "parsed cache of other code"
    if head.get("archive") != read_index(archive)["archive"]["sha256"]:
        return None, "parsed cache of another archive"
    try:
        trials = pq.read_table(_path(archive, "trials.parquet")).to_pandas()
        series = {}
        for s in SERIES:
            t = pq.read_table(_path(archive, f"{s}.parquet"))
            series[s] = {c: t.column(c).to_numpy() for c in t.column_names}
    except (OSError, pa.ArrowException) as e:
        return None, f"parsed cache unreadable ({e})"
    return Cache(head["trials"], trials, series), ""

