"""Price buckets: half-open intervals [min, max) of the estimated monthly charge (US $),
each holding either a fixed list of household IDs or a weighted random sample, or sorting by
price the households of a population sample (links.population).

Sampling algorithm (``sample_bucket``)
-------------------------------------
1. Candidates: one row per household (the last row with its ID, as for lookups), kept if
   min <= monthly.charge < max, in file order.
2. ``rng = numpy.random.default_rng(seed)``; one uniform ``u_i`` in (0, 1) per candidate,
   drawn in candidate order; key ``k_i = log(u_i) / w_i`` with ``w_i`` the ``weight`` column.
3. The n households with the largest keys, in decreasing key order.

This is Efraimidis & Spirakis' weighted sampling without replacement ("A-ES", 2006): the
result has the distribution of n successive draws, each choosing among the households not
yet drawn with probability proportional to weight. It is reproducible for the same seed,
data and bucket, and needs no renormalisation loop. Every bucket uses its own generator
seeded with the same seed, so ``latency-divide sample --bucket B -n N --seed S`` gives
exactly the IDs a config with ``seed: S`` and ``sample: N`` for bucket B gives.

A population sample (the whole data set, sorted into the buckets by price afterwards):
latency_divide.links.population.
"""


from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from latency_divide.errors import ConfigError

#: The paper's published sample (EXPERIMENT.md), 38 households.
PAPER_IDS: dict[str, tuple[int, ...]] = {
    "0-30": (799254, 11406, 13570, 7884, 797760, 13013, 28928, 9747, 799322, 32648),
    "30-40": (9254, 615514, 615016, 12512, 6046, 216020, 10232, 10428, 10373, 615520),
    "40-50": (27082, 5781, 12334, 619832, 1290, 12491, 9960, 13133, 215248),
    "50+": (8268, 214030, 5749, 12430, 27337, 11750, 734, 32501, 12251),
}


@dataclass(frozen=True)
class Bucket:
    """[min_usd, max_usd) with max_usd None meaning no upper bound."""

    name: str
    min_usd: float
    max_usd: float | None
    ids: tuple[int, ...] | None = None
    sample: int | None = None

    def contains(self, price: float) -> bool:
        return self.min_usd <= price and (self.max_usd is None or price < self.max_usd)

    def interval(self) -> str:
        hi = "inf)" if self.max_usd is None else f"{self.max_usd:g})"
        return f"[{self.min_usd:g}, {hi}"

    def to_dict(self) -> dict:
        d: dict = {"name": self.name, "min": self.min_usd, "max": self.max_usd}
        if self.ids is not None:
            d["ids"] = list(self.ids)
        if self.sample is not None:
            d["sample"] = self.sample
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Bucket":
        """The inverse of :meth:`to_dict` (and the config's bucket form)."""
        return cls(d["name"], d["min"], d["max"], tuple(d["ids"]) if "ids" in d else None,
                   d.get("sample"))


DEFAULT_BUCKETS: tuple[Bucket, ...] = (
    Bucket("0-30", 0, 30, PAPER_IDS["0-30"]),
    Bucket("30-40", 30, 40, PAPER_IDS["30-40"]),
    Bucket("40-50", 40, 50, PAPER_IDS["40-50"]),
    Bucket("50+", 50, None, PAPER_IDS["50+"]),
)


_RANGE = re.compile(r"^(\d+(?:\.\d+)?)(?:-(\d+(?:\.\d+)?)|(\+))$")


def parse_bucket(spec: str, buckets: Sequence[Bucket] = DEFAULT_BUCKETS) -> Bucket:
    """A bucket from the command line: the name of one of ``buckets``, or "LO-HI" / "LO+"."""
    for b in buckets:
        if b.name == spec:
            return b
    m = _RANGE.match(spec.strip())
    if not m:
        names = ", ".join(b.name for b in buckets)
        raise ConfigError(
            f"bucket {spec!r} is neither a bucket name ({names}) nor a price range LO-HI or LO+"
        )
    lo = float(m.group(1))
    hi = None if m.group(3) else float(m.group(2))
    if hi is not None and hi <= lo:
        raise ConfigError(f"bucket {spec!r}: the upper price {hi:g} must exceed the lower {lo:g}")
    return Bucket(spec.strip(), lo, hi)


def validate_buckets(buckets: Sequence[Bucket], population: bool = False) -> None:
    """Names unique, min < max, listed in increasing order, no overlaps; only the last may be
    unbounded. Each bucket has exactly one of ``ids`` or ``sample``, or neither where a
    population sample (``population``) draws the households. Raises ConfigError naming the
    bucket."""
    if not buckets:
        raise ConfigError("households.buckets: at least one bucket is required")
    seen: set[str] = set()
    for i, b in enumerate(buckets):
        key = f"households.buckets[{i}] ({b.name!r})"
        if b.name in seen:
            raise ConfigError(f"{key}: bucket name {b.name!r} is repeated")
        seen.add(b.name)
        if b.min_usd < 0:
            raise ConfigError(f"{key}: min {b.min_usd:g} must be >= 0")
        if b.max_usd is not None and b.max_usd <= b.min_usd:
            raise ConfigError(f"{key}: max {b.max_usd:g} must be greater than min {b.min_usd:g}")
        if population:
            if b.ids is not None or b.sample is not None:
                given = "ids" if b.ids is not None else "sample"
                raise ConfigError(
                    f"{key}: '{given}' is not allowed with households.population_sample, which"
                    " draws the households of every bucket; give only name, min, max (and"
                    " repetitions)")
        elif (b.ids is None) == (b.sample is None):
            raise ConfigError(f"{key}: give exactly one of 'ids' or 'sample'"
                              " (or households.population_sample for a population draw)")
        if b.sample is not None and b.sample < 1:
            raise ConfigError(f"{key}: sample {b.sample} must be >= 1")
        if i > 0:
            prev = buckets[i - 1]
            if prev.max_usd is None:
                raise ConfigError(
                    f"{key}: follows the unbounded bucket {prev.name!r} {prev.interval()};"
                    " buckets overlap or are out of order"
                )
            if b.min_usd < prev.max_usd:
                what = "overlaps" if b.min_usd >= prev.min_usd else "is out of order with"
                raise ConfigError(
                    f"{key}: {b.interval()} {what} the previous bucket {prev.name!r}"
                    f" {prev.interval()}; list buckets in increasing, non-overlapping order"
                )


def bucket_of(price: float, buckets: Sequence[Bucket]) -> str | None:
    for b in buckets:
        if b.contains(price):
            return b.name
    return None


def candidates(bucket: Bucket, data: str | Path | None = None) -> list[dict]:
    """One row per household (last-row rule) whose price falls in the bucket, file order."""
    from latency_divide.data.source import _data_path

    return list(_candidates(bucket.min_usd, bucket.max_usd, _data_path(data).resolve()))


def price_span(data: str | Path | None = None) -> str:
    """The data set's price range, "LO-HI" in whole dollars (for error messages)."""
    from latency_divide.data.source import _data_path, unique_rows

    prices = [r["monthly.charge"] for r in unique_rows(_data_path(data).resolve()).values()]
    return f"{min(prices):.0f}-{max(prices):.0f}"


@functools.lru_cache(maxsize=32)
def _candidates(min_usd: float, max_usd: float | None, path: Path) -> tuple[dict, ...]:
    from latency_divide.data.source import unique_rows

    b = Bucket("", min_usd, max_usd)
    return tuple(row for row in unique_rows(path).values() if b.contains(row["monthly.charge"]))


def sample_bucket(bucket: Bucket, n: int, seed: int, data: str | Path | None = None) -> list[int]:
    """n distinct household IDs of the bucket, weighted by ``weight`` (see module docstring)."""
    from latency_divide import limits
    limits.check("sample", n, f"sample size for bucket {bucket.name!r}")
    limits.check("seed", seed)
    import numpy as np  # here, not at the top: a household lookup should not pay for numpy

    rows = candidates(bucket, data)
    if not rows:
        raise ConfigError(
            f"bucket {bucket.name!r} {bucket.interval()} has no household in the data set; "
            f"its buckets: {', '.join(f'{b.name} {b.interval()}' for b in DEFAULT_BUCKETS)} "
            f"(or a price range LO-HI or LO+ within ${price_span(data)})")
    if n > len(rows):
        raise ConfigError(
            f"bucket {bucket.name!r} {bucket.interval()} has {len(rows)} households;"
            f" cannot sample {n} without duplicates"
        )
    weights = np.array([row["weight"] for row in rows], dtype=float)
    if not np.all(weights > 0) or not np.all(np.isfinite(weights)):
        raise ConfigError(f"bucket {bucket.name!r}: the data set has non-positive weights")
    return [int(rows[i]["unit_id"]) for i in _weighted_order(weights, n, seed)]


def _weighted_order(weights, n: int, seed: int) -> list[int]:
    """Indices of the n largest A-ES keys log(u_i) / w_i, in decreasing key order (module
    docstring); ``weights`` finite and > 0."""
    import numpy as np

    rng = np.random.default_rng(seed)
    u = rng.random(len(weights))
    # u is in [0, 1); u == 0 would give -inf, the smallest key: such a household is picked last.
    with np.errstate(divide="ignore"):
        keys = np.log(u) / weights
    return [int(i) for i in np.argsort(-keys, kind="stable")[:n]]


def check_ids_in_bucket(bucket: Bucket, ids: Sequence[int], data: str | Path | None = None) -> None:
    """Every ID exists and its price (last-row rule) falls in the bucket, else ConfigError."""
    from latency_divide.data.source import unique_rows

    rows = unique_rows(data)
    seen: set[int] = set()
    for hid in ids:
        if hid in seen:
            raise ConfigError(f"households.buckets {bucket.name!r}: household ID {hid} is listed twice")
        seen.add(hid)
        if hid not in rows:
            from latency_divide.data.source import _suggest

            raise ConfigError(
                f"households.buckets {bucket.name!r}: unknown household ID {hid};"
                f" valid IDs near it: {', '.join(map(str, _suggest(hid, data)))}"
            )
        price = rows[hid]["monthly.charge"]
        if not bucket.contains(price):
            raise ConfigError(
                f"households.buckets {bucket.name!r}: household ID {hid} costs ${price:.2f},"
                f" outside the bucket's price range {bucket.interval()}"
            )


def resolve_buckets(
    buckets: Sequence[Bucket], seed: int, data: str | Path | None = None
) -> dict[str, list[int]]:
    """Bucket name -> household IDs (listed IDs checked, samples drawn). A household can
    belong to one bucket only, since buckets do not overlap."""
    validate_buckets(buckets)
    out: dict[str, list[int]] = {}
    for b in buckets:
        if b.ids is not None:
            check_ids_in_bucket(b, b.ids, data)
            out[b.name] = list(b.ids)
        else:
            assert b.sample is not None
            out[b.name] = sample_bucket(b, b.sample, seed, data)
    return out
