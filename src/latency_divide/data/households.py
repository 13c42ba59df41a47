"""Households: the link profiles of the vendored "digital divide" data set, in our units.

A :class:`Household` is the last data row with its ID (data.source), converted:

- ``medianUp``/``medianDown`` are bytes/s; kbit/s = value * 0.008, truncated to an int
  (data.source.kbit_from_bytes_per_s).
- ``medianLatency`` and the jitters are microseconds; ms = value / 1000.
- ``medianLoss`` is a percentage; ``monthly.charge`` US dollars; ``advertised.*`` Mbit/s.

``price_bucket`` names the configured bucket holding the price (data.buckets). The workflow
writes one record per household (results/households/{id}.json) and all of them as
results/tables/households.parquet.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

from latency_divide.data.source import (
    _data_path,
    _suggest,
    kbit_from_bytes_per_s,
    parse_household_id,
    unique_rows,
)
from latency_divide.errors import HouseholdError
from latency_divide.fsio import atomic_path, write_text_atomic

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from latency_divide.data.buckets import Bucket


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


def _record(row, buckets: Sequence["Bucket"] | None) -> Household:
    from latency_divide.data.buckets import DEFAULT_BUCKETS, bucket_of

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

    from latency_divide import FORMAT_VERSION

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
