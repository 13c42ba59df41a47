"""Households: the link profiles of the vendored "digital divide" data set.

The CSV (resources/digitaldivide/household-internet-data.csv, see its README for units) has
one row per household and measurement year. Like the original tool, a household ID means
the LAST row with that ``unit_id`` in file order.

Unit conversions (the data set's units -> ours):
- ``medianUp``/``medianDown`` are bytes/s; kbit/s = value * 0.008, truncated to an int.
  We compute it as ``floor(value * 8 / 1000)``, which is correctly rounded even when the
  product is a whole number (0.008 has no exact binary form); on every row of the data set
  it equals ``int(value * 0.008)`` (tests/test_households.py checks this).
- ``medianLatency`` and the jitters are microseconds; ms = value / 1000.
- ``medianLoss`` is a percentage; ``monthly.charge`` US dollars; ``advertised.*`` Mbit/s.
"""

from __future__ import annotations

import csv
import functools
import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

from .errors import HouseholdError
from .fsio import atomic_path, write_text_atomic

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from .buckets import Bucket

#: The vendored data set (the package is installed editable from the repository).
DEFAULT_DATA = (
    Path(__file__).resolve().parents[2] / "resources" / "digitaldivide" / "household-internet-data.csv"
)

#: Columns we read, and how each is parsed.
_COLUMNS = {
    "unit_id": int,
    "technology": str,
    "isp": str,
    "state": str,
    "year": int,
    "advertised.down": float,
    "advertised.up": float,
    "medianUp": float,
    "medianDown": float,
    "medianLatency": float,
    "medianJitterUp": float,
    "medianJitterDown": float,
    "medianLoss": float,
    "monthly.charge": float,
    "weight": float,
}


@dataclass(frozen=True)
class Household:
    """One household (the last data row with its ID), in our units."""

    unit_id: int
    technology: str
    isp: str
    state: str
    year: int
    upload_kbps: int  # medianUp bytes/s * 0.008, truncated
    download_kbps: int  # medianDown bytes/s * 0.008, truncated
    rtt_ms: float  # medianLatency us / 1000
    jitter_up_ms: float
    jitter_down_ms: float
    loss_pct: float
    monthly_charge: float  # US dollars per month (estimated)
    price_bucket: str | None  # name of the configured bucket holding monthly_charge, or None
    advertised_down_mbps: float
    advertised_up_mbps: float
    weight: float  # the data set's sampling (population) weight

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Household":
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        missing = names - set(d)
        if unknown or missing:
            raise HouseholdError(
                f"household record has unknown keys {sorted(unknown)} / missing keys {sorted(missing)}"
            )
        return cls(**d)

    def describe(self) -> str:
        """A readable summary in the spirit of the original tool's output."""

        def num(x: float) -> str:
            return f"{x:g}"

        bucket = f"bucket {self.price_bucket}" if self.price_bucket else "outside all buckets"
        return "\n".join(
            [
                f"Household {self.unit_id} ({self.year})",
                f"  plan:       {num(self.advertised_down_mbps)} Mbps down / "
                f"{num(self.advertised_up_mbps)} Mbps up (advertised)",
                f"  ISP:        {self.isp}",
                f"  technology: {self.technology}",
                f"  state:      {self.state}",
                f"  price:      ${self.monthly_charge:.2f}/month ({bucket})",
                f"  upload:     {self.upload_kbps} kbit/s",
                f"  download:   {self.download_kbps} kbit/s",
                f"  RTT:        {num(self.rtt_ms)} ms",
                f"  jitter:     {num(self.jitter_up_ms)} ms up / {num(self.jitter_down_ms)} ms down",
                f"  loss:       {num(self.loss_pct)} %",
            ]
        )


def kbit_from_bytes_per_s(value: float) -> int:
    """bytes/s -> whole kbit/s (truncated), i.e. int(value * 0.008) computed exactly."""
    return math.floor(value * 8 / 1000)


def _data_path(data: str | Path | None) -> Path:
    return Path(data) if data is not None else DEFAULT_DATA


# The data set is read with the csv module rather than pandas: a workflow job looks up one
# household, and importing pandas costs seconds per job on a busy machine, more than the
# whole lookup. Rows are dicts keyed by the CSV's column names, values typed per _COLUMNS.


@dataclass(frozen=True)
class _Data:
    rows: tuple[dict, ...]  # every row, file order
    last: dict[int, dict]  # unit_id -> its last row; dict order = file order of those rows


@functools.lru_cache(maxsize=4)
def _load(path: Path) -> _Data:
    if not path.is_file():
        raise HouseholdError(f"household data set not found: {path}")
    rows = []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in _COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise HouseholdError(f"household data set {path} lacks columns {missing}")
        for lineno, raw in enumerate(reader, start=2):
            try:
                row = {c: kind(raw[c]) for c, kind in _COLUMNS.items()}
            except (TypeError, ValueError) as e:
                raise HouseholdError(f"{path}:{lineno}: unreadable value ({e})") from e
            if row["unit_id"] < 0:
                raise HouseholdError(f"{path}:{lineno}: negative unit_id {row['unit_id']}")
            rows.append(row)
    positions = {}
    for i, row in enumerate(rows):
        positions[row["unit_id"]] = i  # later rows overwrite: the last one wins
    last = {rows[i]["unit_id"]: rows[i] for i in sorted(positions.values())}
    return _Data(tuple(rows), last)


def load_rows(data: str | Path | None = None) -> tuple[dict, ...]:
    """Every row of the data set, in file order (cached; do not modify)."""
    return _load(_data_path(data).resolve()).rows


def unique_rows(data: str | Path | None = None) -> dict[int, dict]:
    """One row per household, the last one in file order: unit_id -> row, ordered by the file
    position of those last rows (cached; do not modify)."""
    return _load(_data_path(data).resolve()).last


def valid_ids(data: str | Path | None = None) -> list[int]:
    return list(unique_rows(data))


def parse_household_id(value) -> int:
    """A household ID from user input: a non-negative integer (int or decimal string)."""
    if isinstance(value, bool):
        raise HouseholdError(f"malformed household ID {value!r}: expected a non-negative integer")
    if isinstance(value, int):
        hid = value
    else:
        text = str(value).strip()
        if not text.isascii() or not text.isdigit():
            raise HouseholdError(
                f"malformed household ID {value!r}: expected a non-negative integer"
                f" such as {', '.join(map(str, _suggest(None)))}"
            )
        hid = int(text)
    if hid < 0:
        raise HouseholdError(
            f"malformed household ID {value!r}: expected a non-negative integer"
            f" such as {', '.join(map(str, _suggest(None)))}"
        )
    return hid


def _suggest(near: int | None, data: str | Path | None = None, k: int = 5) -> list[int]:
    """Five valid IDs to try: the numerically closest to ``near``, or the first in the file."""
    ids = valid_ids(data)
    if near is None:
        return ids[:k]
    return sorted(sorted(ids, key=lambda i: (abs(i - near), i))[:k])


def _record(row, buckets: Sequence["Bucket"] | None) -> Household:
    from .buckets import DEFAULT_BUCKETS, bucket_of

    charge = float(row["monthly.charge"])
    return Household(
        unit_id=int(row["unit_id"]),
        technology=str(row["technology"]),
        isp=str(row["isp"]),
        state=str(row["state"]),
        year=int(row["year"]),
        upload_kbps=kbit_from_bytes_per_s(float(row["medianUp"])),
        download_kbps=kbit_from_bytes_per_s(float(row["medianDown"])),
        rtt_ms=float(row["medianLatency"]) / 1000,
        jitter_up_ms=float(row["medianJitterUp"]) / 1000,
        jitter_down_ms=float(row["medianJitterDown"]) / 1000,
        loss_pct=float(row["medianLoss"]),
        monthly_charge=charge,
        price_bucket=bucket_of(charge, DEFAULT_BUCKETS if buckets is None else buckets),
        advertised_down_mbps=float(row["advertised.down"]),
        advertised_up_mbps=float(row["advertised.up"]),
        weight=float(row["weight"]),
    )


def get_household(
    household_id, buckets: Sequence["Bucket"] | None = None, data: str | Path | None = None
) -> Household:
    """The household with this ID (last row in file order wins).

    ``buckets`` decide ``price_bucket`` (default: the paper's four buckets).
    Raises HouseholdError for a malformed or unknown ID, suggesting five valid IDs.
    """
    hid = parse_household_id(household_id)
    table = unique_rows(data)
    if hid not in table:
        raise HouseholdError(
            f"unknown household ID {hid}: not in {_data_path(data).name};"
            f" valid IDs near it: {', '.join(map(str, _suggest(hid, data)))}"
        )
    return _record(table[hid], buckets)


def get_households(
    ids: Iterable, buckets: Sequence["Bucket"] | None = None, data: str | Path | None = None
) -> list[Household]:
    return [get_household(i, buckets, data) for i in ids]


def households_frame(records: Iterable[Household]) -> "pd.DataFrame":
    """One row per household, one column per record field (in field order)."""
    import pandas as pd

    cols = [f.name for f in fields(Household)]
    df = pd.DataFrame([r.to_dict() for r in records], columns=cols)
    df["price_bucket"] = df["price_bucket"].astype("string")
    for c in ("technology", "isp", "state"):
        df[c] = df[c].astype("string")
    return df


# ---------------------------------------------------------------------------------------------
# Files (workflow stage 1): temp file then rename, so a partial file never looks complete.


def write_record(
    household_id, out: str | Path, buckets: Sequence["Bucket"] | None = None, data: str | Path | None = None
) -> Household:
    """results/households/{id}.json: the record as JSON (keys = Household field names)."""
    h = get_household(household_id, buckets, data)
    write_text_atomic(out, json.dumps(h.to_dict(), indent=2) + "\n")
    return h


def read_record(path: str | Path) -> Household:
    with open(path) as f:
        return Household.from_dict(json.load(f))


#: Parquet metadata of the households table.
TABLE_NAME = "households"


def write_table(records: Sequence[Household], out: str | Path) -> "pd.DataFrame":
    """results/tables/households.parquet: one row per household, every record field."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from . import FORMAT_VERSION

    ids = [r.unit_id for r in records]
    if len(set(ids)) != len(ids):
        raise HouseholdError(f"households table: repeated household IDs in {ids}")
    df = households_frame(records)
    table = pa.Table.from_pandas(df, preserve_index=False)
    meta = {
        b"latency_divide.table": TABLE_NAME.encode(),
        b"latency_divide.format_version": str(FORMAT_VERSION).encode(),
    }
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    with atomic_path(out) as tmp:
        pq.write_table(table, tmp)
    return df
