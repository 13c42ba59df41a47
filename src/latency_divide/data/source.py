"""The vendored "digital divide" data set, read once: its rows, and household IDs.

The CSV (resources/digitaldivide/household-internet-data.csv, see its README for units) has
one row per household and measurement year. Like the original tool, a household ID means
the LAST row with that ``unit_id`` in file order (:func:`unique_rows`). Rows are read as the
data set gives them (its units); data.households makes records in ours.

``medianUp``/``medianDown`` are bytes/s; :func:`kbit_from_bytes_per_s` gives kbit/s =
value * 0.008, truncated to an int. We compute it as ``floor(value * 8 / 1000)``, which is
correctly rounded even when the product is a whole number (0.008 has no exact binary form);
on every row of the data set it equals ``int(value * 0.008)`` (tests/test_households.py checks
this).
"""

from __future__ import annotations

import csv
import functools
import math
from dataclasses import dataclass
from pathlib import Path

from latency_divide.errors import HouseholdError
from latency_divide.paths import HOUSEHOLD_DATA

#: The vendored data set (the package is installed editable from the repository).
DEFAULT_DATA = HOUSEHOLD_DATA


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


def kbit_from_bytes_per_s(value: float) -> int:
    """bytes/s -> whole kbit/s (truncated), i.e. int(value * 0.008) computed exactly."""
    return math.floor(value * 8 / 1000)


def _data_path(data: str | Path | None) -> Path:
    return Path(data) if data is not None else DEFAULT_DATA


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
