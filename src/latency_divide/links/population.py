"""A population sample: n households of the whole data set, weighted by their population
weight, then sorted into the price buckets (config ``households.population_sample``).

In the links stage because a household that cannot make a link plan is excluded before the draw
(links.plan); the buckets themselves are data.buckets.

Algorithm (``population_draw``)
-------------------------------
Instead of a number per bucket, n households drawn from the whole data set, so that every
technology and price is represented as the population weights give them; the buckets then only
sort the drawn households by price (each bucket lists only ``name``, ``min``, ``max``).

1. Candidates: one row per household (last-row rule), in file order. A household is
   **excluded**, with the first reason that applies, if
   (a) its price ``monthly.charge`` is missing (not a finite number) or in no configured bucket;
   (b) its weight is missing or not > 0 (it could never be drawn);
   (c) its record cannot make a link plan: ``links.plan.make_linkplan(record, qfactor)`` with
       the config's qfactor refuses it, i.e. an upload or download rate below 1 kbit/s after
       truncation, an RTT that is not a finite number > 0, or a queue of less than one byte.
   The exclusions are listed with their reason (``latency-divide sample --config FILE``, and
   results/tables/population_sample.parquet written by the households stage).
2. Inclusion probabilities proportional to weight: pi_i = n * w_i / W (W = the eligible
   households' total weight). A household with pi_i >= 1 is taken with certainty and the rest
   recomputed with n and W reduced, until every pi_i < 1 (none in the real data set at n = 240:
   the largest is 0.36).
3. Randomised systematic sampling (Hartley & Rao 1962): ``rng = numpy.random.default_rng(seed)``;
   the uncertain households in the random order ``rng.permutation``; their pi laid end to end
   on [0, m) (m = n minus the certain ones); one ``u = rng.random()``; the household whose
   interval holds u + j, for j = 0 .. m-1. As every pi_i < 1 and the points are 1 apart, no
   household is hit twice: exactly n distinct households. The draw order (``draw_rank``) is the
   certain households, then the order of the points.
4. Each drawn household goes to the bucket holding its price; within a bucket in draw order.
5. ``repeat: {share: s, repetitions: R}``: k = max(1, floor(s * n + 1/2)) of the drawn
   households, chosen uniformly without replacement (the sample is already weighted) by
   ``numpy.random.default_rng([seed, 1]).choice(n, k, replace=False)``, run repetitions R
   instead of trial.repetitions.
6. ``subset: {n: k, seed: t}``: the run measures a seeded k of the n, spread over the buckets
   in proportion, and ``repeat`` applies to them (links.subset; the draw is the same).

Not A-ES, as for buckets: its successive weighted draws include a heavy household less than in
proportion to its weight (20.0 of 240 from $0-30 on average where the weights give 22.6).
Systematic sampling includes every household with exactly pi_i: the sample is self-weighting,
an unweighted mean over it estimates the population mean. The weight column is ``weight``, the
data set's per-household population weight (popWeight.normalized / sampleWeight.normalized of
the household's technology and cost cell); the others are per-cell shares or counts, which would
over-represent the cells the FCC panel sampled most (docs/population-method.md explains both).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from latency_divide.data.buckets import Bucket, bucket_of, validate_buckets
from latency_divide.errors import ConfigError
from latency_divide.links import drawcache
from latency_divide.links.subset import Subset, repeated_households

#: The data set's weight columns and what each is; only ``weight`` weights a household.
WEIGHT_COLUMNS: dict[str, str] = {
    "weight": "per-household population weight: popWeight.normalized / "
              "sampleWeight.normalized of its technology and cost cell",
    "popWeight.normalized": "the cell's share of US households (the same for every household "
                            "of the cell)",
    "sampleWeight.normalized": "the cell's share of the data set's rows",
    "sampleWeight": "the cell's share of the rows, scaled",
    "sampleFreq": "the number of rows in the cell",
}
#: Columns a population sample may be weighted by.
POPULATION_WEIGHTS: tuple[str, ...] = ("weight",)


@dataclass(frozen=True)
class Repeat:
    """A seeded share of the drawn households that runs other repetitions."""

    share: float  # in (0, 1]
    repetitions: int | tuple[int, ...]  # as configured: a count N (1..N) or the numbers

    def count(self, n: int) -> int:
        """How many of n drawn households repeat: max(1, floor(share * n + 1/2))."""
        return max(1, math.floor(self.share * n + 0.5))


@dataclass(frozen=True)
class PopulationSample:
    """households.population_sample: n households weighted by ``weight`` from the whole data
    set (exclusions aside), sorted into the buckets by price."""

    n: int
    weight: str = "weight"
    repeat: Repeat | None = None
    subset: Subset | None = None  # the run measures these of the n (links.subset)

    @classmethod
    def from_dict(cls, d: dict, where: str = "households.population_sample") -> "PopulationSample":
        """The config's form, checked: errors name the key, the value and what is allowed (the
        schema checked the keys and types; the repetitions are checked by config.py)."""
        from latency_divide import limits

        if not isinstance(d, dict):
            raise ConfigError(f"{where} = {d!r}: allowed is a mapping of n, weight, repeat, subset")
        n = d.get("n")
        limits.check("sample", n, f"{where}.n")
        weight = d.get("weight", "weight")
        if weight not in POPULATION_WEIGHTS:
            what = WEIGHT_COLUMNS.get(weight) if isinstance(weight, str) else None
            why = f" ({weight} is {what})" if what else " (not a weight column of the data set)"
            allowed = ", ".join(map(repr, POPULATION_WEIGHTS))
            raise ConfigError(f"{where}.weight = {weight!r}: allowed is {allowed}, the data"
                              f" set's per-household population weight{why}")
        repeat = None
        if d.get("repeat") is not None:
            r = d["repeat"]
            if not isinstance(r, dict) or "share" not in r or "repetitions" not in r:
                raise ConfigError(f"{where}.repeat = {r!r}: allowed is a mapping with share"
                                  " and repetitions")
            share = r["share"]
            if (isinstance(share, bool) or not isinstance(share, (int, float))
                    or not math.isfinite(share) or not 0 < share <= 1):
                raise ConfigError(
                    f"{where}.repeat.share = {share!r}: allowed is a number more than 0 and at"
                    " most 1 (the share of the drawn households that repeat)")
            reps = r["repetitions"]
            repeat = Repeat(float(share), tuple(reps) if isinstance(reps, list) else reps)
        sub = d.get("subset")
        return cls(n, weight, repeat, None if sub is None else Subset.from_dict(sub, n, where))

    def to_dict(self) -> dict:
        d: dict = {"n": self.n, "weight": self.weight}
        if self.repeat is not None:
            reps = self.repeat.repetitions
            d["repeat"] = {"share": self.repeat.share,
                           "repetitions": list(reps) if isinstance(reps, tuple) else reps}
        if self.subset is not None:
            d["subset"] = self.subset.to_dict()
        return d


@dataclass(frozen=True)
class PopulationDraw:
    """The result of a population draw (``population_draw``)."""

    spec: PopulationSample
    seed: int
    buckets: tuple[Bucket, ...]  # the configured buckets (name, min, max)
    drawn: tuple[int, ...]  # household IDs in draw order (all n, with a subset too)
    by_bucket: dict[str, list[int]]  # bucket name -> the run's IDs (draw order), every bucket
    repeated: tuple[int, ...]  # the run's households that repeat (draw order)
    eligible: tuple[dict, ...]  # data rows (last-row rule) that may be drawn, file order
    excluded: tuple[tuple[dict, str], ...]  # (row, reason), file order
    subset: tuple[int, ...] | None = None  # the run's households if a subset (draw order)

    def resolved_buckets(self) -> tuple[Bucket, ...]:
        """The buckets with the run's households (drawn, or the subset's) as ``ids``: what the
        rest of the workflow sees (as for a config that lists IDs)."""
        return tuple(Bucket(b.name, b.min_usd, b.max_usd, tuple(self.by_bucket[b.name]))
                     for b in self.buckets)


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def exclusion_reason(row: dict, buckets: Sequence[Bucket], qfactor: float = 2.0,
                     weight: str = "weight") -> str | None:
    """Why a household (its last data row) cannot be part of a population sample, or None:
    the first of (a) price missing or in no bucket, (b) weight missing or not > 0, (c) no link
    plan (module docstring)."""
    from latency_divide.data.households import _record
    from latency_divide.errors import HouseholdError
    from latency_divide.links.plan import make_linkplan

    price = row.get("monthly.charge")
    if not _finite(price):
        return f"no price: monthly.charge = {price!r}"
    if bucket_of(price, buckets) is None:
        spans = ", ".join(f"{b.name} {b.interval()}" for b in buckets)
        return f"price ${price:.2f} is in no bucket ({spans})"
    w = row.get(weight)
    if not _finite(w) or not w > 0:
        return f"{weight} = {w!r}: not a number > 0, the household could never be drawn"
    for col, what in (("medianUp", "upload rate"), ("medianDown", "download rate"),
                      ("medianLatency", "RTT")):
        if not _finite(row.get(col)):
            return f"no link plan: {what} missing ({col} = {row.get(col)!r})"
    try:
        make_linkplan(_record(row, buckets), qfactor=qfactor)
    except (ConfigError, HouseholdError, ValueError, OverflowError) as e:
        return f"no link plan: {e}"
    return None


@functools.lru_cache(maxsize=8)
def _eligibility(path: Path, spans: tuple, weight: str, qfactor: float
                 ) -> tuple[tuple[dict, ...], tuple[tuple[dict, str], ...]]:
    from latency_divide.data.source import unique_rows

    buckets = [Bucket(name, lo, hi) for name, lo, hi in spans]
    eligible, excluded = [], []
    for row in unique_rows(path).values():
        reason = exclusion_reason(row, buckets, qfactor, weight)
        if reason is None:
            eligible.append(row)
        else:
            excluded.append((row, reason))
    return tuple(eligible), tuple(excluded)


def population_draw(spec: PopulationSample, buckets: Sequence[Bucket], seed: int,
                    data: str | Path | None = None, qfactor: float = 2.0) -> PopulationDraw:
    """n distinct households of the whole data set, weighted by ``spec.weight``, after the
    stated exclusions, sorted into ``buckets`` by price (module docstring). Deterministic for
    the seed, data, buckets and qfactor. A subset: the same draw, its households the run's."""
    if spec.subset is not None:
        whole = PopulationSample(spec.n, spec.weight, spec.repeat)
        return spec.subset.apply(population_draw(whole, buckets, seed, data, qfactor), spec)
    from latency_divide import limits
    from latency_divide.data.source import _data_path, unique_rows

    limits.check("sample", spec.n, "households.population_sample.n")
    limits.check("seed", seed)
    buckets = tuple(Bucket(b.name, b.min_usd, b.max_usd) for b in buckets)  # ids not used
    validate_buckets(buckets, population=True)
    spans = tuple((b.name, b.min_usd, b.max_usd) for b in buckets)
    path = _data_path(data).resolve()
    key = drawcache.draw_key(path, {"sample": spec.to_dict(), "buckets": spans,
                                    "seed": int(seed), "qfactor": float(qfactor)})
    cached = drawcache.load(key)
    if cached is not None:  # the same draw by an earlier process (links.drawcache)
        rows = unique_rows(path)
        return PopulationDraw(spec, seed, buckets, tuple(cached["drawn"]), cached["by_bucket"],
                              tuple(cached["repeated"]), tuple(rows[i] for i in cached["eligible"]),
                              tuple((rows[i], why) for i, why in cached["excluded"]))
    eligible, excluded = _eligibility(path, spans, spec.weight, float(qfactor))
    if spec.n > len(eligible):
        raise ConfigError(
            f"households.population_sample.n = {spec.n}: allowed is 1 to {len(eligible)}, the"
            f" households of the data set that can be drawn ({len(excluded)} excluded; "
            "`latency-divide sample --config FILE` lists them)")
    import numpy as np

    weights = np.array([row[spec.weight] for row in eligible], dtype=float)
    drawn = tuple(int(eligible[i]["unit_id"]) for i in _systematic_pps(weights, spec.n, seed))
    price = {int(r["unit_id"]): r["monthly.charge"] for r in eligible}
    by_bucket: dict[str, list[int]] = {b.name: [] for b in buckets}
    for hid in drawn:
        by_bucket[bucket_of(price[hid], buckets)].append(hid)
    repeated = repeated_households(drawn, spec.repeat, seed)
    drawcache.store(key, drawn, by_bucket, repeated, [int(r["unit_id"]) for r in eligible],
                    [(int(r["unit_id"]), why) for r, why in excluded])
    return PopulationDraw(spec, seed, buckets, drawn, by_bucket, repeated, eligible, excluded)


def inclusion_probabilities(weights, n: int):
    """pi_i = n * w_i / W, with households at pi >= 1 taken with certainty (pi = 1) and the
    rest scaled to the remaining n (module docstring, step 2)."""
    import numpy as np

    w = np.asarray(weights, dtype=float)
    pi = np.zeros(len(w))
    certain = np.zeros(len(w), dtype=bool)
    while True:
        rest = ~certain
        m = n - int(certain.sum())
        pi[rest] = m * w[rest] / w[rest].sum() if m > 0 else 0.0
        big = rest & (pi >= 1)
        if not big.any():
            break
        certain |= big
    pi[certain] = 1.0
    return pi


def _systematic_pps(weights, n: int, seed: int) -> list[int]:
    """Indices of n distinct households, household i included with probability
    ``inclusion_probabilities(weights, n)[i]`` (module docstring, steps 2-3), in draw order."""
    import numpy as np

    pi = inclusion_probabilities(weights, n)
    certain = [int(i) for i in np.flatnonzero(pi >= 1)]
    m = n - len(certain)
    rng = np.random.default_rng(seed)
    order = rng.permutation(np.flatnonzero(pi < 1))
    u = rng.random()
    if m == 0:
        return certain
    cum = np.cumsum(pi[order])
    cum[-1] = m  # the sum is m up to rounding; every point u + j < m then falls in an interval
    picks = np.searchsorted(cum, u + np.arange(m), side="right")
    chosen = certain + [int(order[k]) for k in picks]
    if len(set(chosen)) != n:  # cannot happen with every pi < 1; never return a short sample
        raise AssertionError(f"systematic sample of {n} has repeated households")
    return chosen


def composition(draw: PopulationDraw, by: str) -> list[dict]:
    """The drawn sample against the weighted population of eligible households, grouped by
    ``by`` ("price_bucket" or "technology"): one dict per group (bucket order, or the largest
    weighted share first) with households (eligible), population_share (their share of the
    total weight), drawn and drawn_share."""
    if by == "price_bucket":
        key = lambda r: bucket_of(r["monthly.charge"], draw.buckets)  # noqa: E731
        groups = [b.name for b in draw.buckets]
    elif by == "technology":
        key = lambda r: r["technology"]  # noqa: E731
        groups = []
    else:
        raise ValueError(f"composition by {by!r}: allowed is price_bucket or technology")
    w = draw.spec.weight
    total = sum(r[w] for r in draw.eligible)
    drawn = set(draw.drawn)
    stats: dict[str, dict] = {g: {"households": 0, "weight": 0.0, "drawn": 0} for g in groups}
    for r in draw.eligible:
        s = stats.setdefault(key(r), {"households": 0, "weight": 0.0, "drawn": 0})
        s["households"] += 1
        s["weight"] += r[w]
        s["drawn"] += int(r["unit_id"]) in drawn
    order = groups or sorted(stats, key=lambda g: -stats[g]["weight"])
    return [{by: g, "households": stats[g]["households"],
             "population_share": stats[g]["weight"] / total, "drawn": stats[g]["drawn"],
             "drawn_share": stats[g]["drawn"] / len(draw.drawn)} for g in order]


#: Parquet metadata name of the population sample table.
POPULATION_TABLE = "population_sample"


def population_frame(draw: PopulationDraw):
    """One row per household of the data set (file order): unit_id, technology, monthly_charge,
    price_bucket, weight, status (drawn | not drawn | excluded | not in subset: drawn, not run),
    draw_rank (1 = first drawn), repeated, reason (why excluded)."""
    import pandas as pd

    rank, runs = {h: i + 1 for i, h in enumerate(draw.drawn)}, set(draw.subset or draw.drawn)
    repeated = set(draw.repeated)
    rows = [(r, None) for r in draw.eligible] + list(draw.excluded)
    rows.sort(key=lambda t: t[0]["unit_id"])
    out = []
    for r, reason in rows:
        hid = int(r["unit_id"])
        price = r.get("monthly.charge")
        out.append({
            "unit_id": hid, "technology": r.get("technology"), "monthly_charge": price,
            "price_bucket": bucket_of(price, draw.buckets) if _finite(price) else None,
            "weight": r.get(draw.spec.weight),
            "status": "excluded" if reason else "drawn" if hid in runs else (
                "not in subset" if hid in rank else "not drawn"),
            "draw_rank": rank.get(hid), "repeated": hid in repeated, "reason": reason})
    df = pd.DataFrame(out, columns=["unit_id", "technology", "monthly_charge", "price_bucket",
                                    "weight", "status", "draw_rank", "repeated", "reason"])
    for c in ("technology", "price_bucket", "status", "reason"):
        df[c] = df[c].astype("string")
    df["draw_rank"] = df["draw_rank"].astype("Int64")
    return df


def write_population_table(draw: PopulationDraw, out: str | Path):
    """results/tables/population_sample.parquet (``population_frame``), with the draw's
    settings in the Parquet metadata."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from latency_divide import FORMAT_VERSION
    from latency_divide.fsio import atomic_path

    df = population_frame(draw)
    table = pa.Table.from_pandas(df, preserve_index=False)
    meta = {
        b"latency_divide.table": POPULATION_TABLE.encode(),
        b"latency_divide.format_version": str(FORMAT_VERSION).encode(),
        b"latency_divide.population_sample": json.dumps(
            {**draw.spec.to_dict(), "seed": draw.seed,
             "buckets": [b.to_dict() for b in draw.buckets]}).encode(),
    }
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    with atomic_path(out) as tmp:
        pq.write_table(table, tmp)
    return df


def write_population_sample(population: dict, buckets: Sequence[dict], seed: int, qfactor: float,
                            data: str | Path | None, out: str | Path, log: str | Path) -> None:
    """Rule population_sample (rules/households.smk): draw as the config does (its
    population_sample, buckets, seed, qfactor), write the table and a one-line log."""
    draw = population_draw(PopulationSample.from_dict(population),
                           [Bucket.from_dict(b) for b in buckets], seed, data, qfactor)
    df = write_population_table(draw, out)
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    Path(log).write_text(f"{len(draw.drawn)} drawn, {len(draw.excluded)} excluded, "
                         f"{len(df)} households in {out}\n")
