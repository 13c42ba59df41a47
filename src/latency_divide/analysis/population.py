"""The percentile view of a population run (issue 24, section 4): per tool, direction and
variant, weighted percentiles across households and each variant's change against Cubic.

Definitions (all pure functions; :func:`write_percentiles` is the only I/O):

- **Per-household mean** (:func:`household_means`): the mean of a metric over a household's
  repetitions of one (tool, definition_id, direction, variant); repetitions without a value
  (a null ``transport_rtt_mean_ms``) are left out of the mean, and a household with no value
  at all has none (NaN). Metrics are trials-table columns, units in their names
  (:data:`METRICS`: transport RTT, application RTT under load = ping RTT during the transfer,
  goodput). A run of live broadcasts (a trial with a ``live_abr``) has Facebook's own
  per-broadcast metrics too (:data:`LIVE_METRICS`, :func:`metrics_for`; docs/live.md): its
  goodput, application RTT of the priority and of the in-band pings, and RTX overhead, which
  may be 0 (:data:`ZERO_ALLOWED`: a change against a Cubic percentile of 0 is +inf, or NaN
  when both are 0).
- **Weighted percentile** (:func:`weighted_percentiles`): the weighted inverted CDF
  (Hyndman & Fan type 1 with weights). With the values sorted, x_(1) <= ... <= x_(n), and
  w_(i) their weights (> 0), the p-th percentile is the smallest x_(k) whose cumulative weight
  reaches p % of the total: sum_{i<=k} w_(i) >= p/100 * sum_i w_(i). It is always one of the
  observed per-household means (no interpolation), and a household of weight 2 counts exactly as
  two households of weight 1. Computed by ``numpy.quantile(..., weights=, method="inverted_cdf")``
  (numpy >= 2.0); in the bootstrap by analysis.wquantile, the same numbers faster.
- **Change against Cubic**, a fraction (-0.25 = 25 % below Cubic; x 100 for percent), two ways:
  ``change_group`` = P_p(variant) / P_p(cubic) - 1, the percentile of each group's
  distribution, as Facebook reported Copa (each group over its own households); and
  ``change_paired`` = P_p(variant_h / cubic_h) - 1, the weighted percentile of the
  per-household ratio over the households measured under both (the ``n_paired``). The two
  differ: the group view compares the p-th household of each distribution, which need not be
  the same household; the paired view asks how the change itself is distributed.
- **Bootstrap** (:func:`percentile_table`): households are resampled with replacement within each
  block (tool x direction x bucket x metric: n households with a value of the metric under at
  least one variant, n drawn; as multinomial counts, ``Generator.multinomial(n, [1/n] * n)``,
  which multiply the households' weights), the same resamples for every variant of the block so
  the pairing is kept; both changes are recomputed in every resample and the 95 % interval is
  the 2.5th and 97.5th percentile of the resampled changes (percentile bootstrap,
  ``numpy.nanquantile``, linear interpolation). A resample in which a variant or Cubic has no
  household gives no change and is left out of that interval. Each block has its own
  generator, ``numpy.random.default_rng([seed, crc32("tool|direction|bucket|metric")])``, so a
  block's intervals do not depend on which other blocks are in the table.
- **Buckets**: ``bucket`` is ``"all"`` (every household) or a ``price_bucket`` of the trials
  table (the households of that bucket only; resampled within it). Trials without a price bucket
  count in ``"all"`` only.
- **Missing values**: a (variant, bucket, metric) without any household value still has its
  rows, with ``value`` and the changes NaN and ``n_households`` 0 (for example tperf trials
  without a transport RTT); where Cubic has no value the changes are NaN. A (tool, direction)
  with no trial of the baseline variant is an error naming them.

Weights. The percentiles weight each household by the ``weight`` column of the table it is
joined from (results/tables/households.parquet, data.households: the data set's population
weight), or of the trials table if it carries one. These must be *analysis* weights: a
population sample drawn with probability proportional to ``weight``
(``households.population_sample``, data.buckets) is already self-weighting, and its analysis
weight is the same for every drawn household; weighting it by ``weight`` again counts that
weight twice. Pass ``households.assign(weight=1.0)`` (or a ``weight_column`` of your own) for
such a sample.

The table (``percentiles.parquet``, :data:`PERCENTILES_SCHEMA`, version
:data:`PERCENTILES_SCHEMA_VERSION` in its Parquet metadata) has one row per tool,
definition_id, direction, variant, bucket, metric and percentile; the baseline's own rows have
changes of exactly 0.
"""

from __future__ import annotations

import warnings
import zlib
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from latency_divide.analysis.wquantile import resampled_percentiles, weighted_percentiles
from latency_divide.analysis.schemas import read_versioned, write_versioned
from latency_divide.errors import LatencyDivideError

#: Version of :data:`PERCENTILES_SCHEMA`; bump on any change of columns, types or meaning.
PERCENTILES_SCHEMA_VERSION = 1
#: The table name stored in the file's metadata (``latency_divide.table``).
TABLE_NAME = "percentiles"

#: Percentiles of the view (issue 24: Facebook's "best" p10-p50 and "worst" p75-p95).
PERCENTILES: tuple[float, ...] = (10, 25, 50, 75, 90, 95)
#: Trials-table columns summarised: transport RTT (the sender's QUIC RTT samples), application
#: RTT under load (ping RTT during the transfer) and goodput.
METRICS: tuple[str, ...] = ("transport_rtt_mean_ms", "rtt_mean_ms", "goodput_kbps")
#: Facebook's per-broadcast metrics of a live run (docs/live.md, "The columns"), after
#: :data:`METRICS` in its table: goodput (application bytes acknowledged / broadcast),
#: application RTT (pings on their own stream; queued behind the video), RTX overhead.
LIVE_METRICS: tuple[str, ...] = ("goodput_fb_kbps", "app_rtt_mean_ms", "app_rtt_inband_mean_ms",
                                 "rtx_overhead")
#: Metrics whose household means may be 0 (bytes retransmitted / acknowledged: no loss).
ZERO_ALLOWED = frozenset({"rtx_overhead"})
#: The variant every change is against.
BASELINE = "cubic"
#: The bucket label of the whole sample.
ALL = "all"
#: Fewest bootstrap resamples accepted (issue 24: at least 1,000).
MIN_RESAMPLES = 1000
#: The two-sided interval of the percentile bootstrap (fractions).
CI_LEVELS = (0.025, 0.975)

PERCENTILES_SCHEMA = pa.schema(
    [
        ("tool", pa.string()),
        ("definition_id", pa.string()),  # the variant's definition (Cubic's: its own rows)
        ("direction", pa.string()),
        ("variant", pa.string()),
        ("bucket", pa.string()),  # "all" or a price bucket name
        ("metric", pa.string()),  # trials-table column; its unit is in its name
        ("percentile", pa.float64()),  # 10, 25, ... (percent)
        ("value", pa.float64()),  # weighted percentile of the variant's per-household means
        ("cubic_value", pa.float64()),  # the same of the baseline (same tool/direction/bucket)
        ("change_group", pa.float64()),  # value / cubic_value - 1 (fraction)
        ("ci_low_group", pa.float64()),
        ("ci_high_group", pa.float64()),
        ("change_paired", pa.float64()),  # percentile of variant_h / cubic_h, minus 1 (fraction)
        ("ci_low_paired", pa.float64()),
        ("ci_high_paired", pa.float64()),
        ("n_households", pa.int64()),  # households with a value of the variant (behind value)
        ("n_paired", pa.int64()),  # households with a value under the variant and the baseline
        ("n_resamples", pa.int64()),
        ("seed", pa.int64()),
    ]
)

_GROUP = ["tool", "definition_id", "direction", "variant"]
_NEEDED = ("tool", "definition_id", "household_id", "price_bucket", "direction", "variant")


class PercentileInputError(LatencyDivideError):
    """The trials or weights cannot give the percentile view (the message says what is missing)."""


def has_live(trials: pd.DataFrame) -> bool:
    """Is any of a run's trials a live broadcast (a ``live_abr``)?"""
    return bool("live_abr" in trials.columns and trials["live_abr"].notna().any())


def metrics_for(trials: pd.DataFrame) -> tuple[str, ...]:
    """The metrics of a run's table: :data:`METRICS`, and :data:`LIVE_METRICS` after them when
    any of its trials is a live broadcast (:func:`has_live`)."""
    return (*METRICS, *LIVE_METRICS) if has_live(trials) else METRICS


def _weights(trials: pd.DataFrame, households: pd.DataFrame | None,
             weight_column: str) -> pd.Series:
    """household_id -> weight, from ``households`` (``unit_id`` or ``household_id``) or from the
    trials table's own weight column; every household of the trials must have one, > 0."""
    if households is None:
        if weight_column not in trials.columns:
            raise PercentileInputError(
                f"no household weights: the trials table has no {weight_column!r} column and no "
                "households table was given (results/tables/households.parquet: unit_id, "
                "weight; for a self-weighting population sample, equal weights)")
        by_hh = trials.groupby("household_id", sort=True)[weight_column]
        count = by_hh.nunique(dropna=False)
        varying = count.index[count > 1]
        if len(varying):
            raise PercentileInputError(
                f"{weight_column!r} differs between trials of household(s) "
                f"{', '.join(map(str, varying[:5]))}")
        weights = pd.to_numeric(by_hh.first(), errors="coerce")
    else:
        if weight_column in trials.columns:
            raise PercentileInputError(
                f"weights given twice: the trials table has a {weight_column!r} column and a "
                "households table was given; pass one")
        idcol = next((c for c in ("household_id", "unit_id") if c in households.columns), None)
        if idcol is None or weight_column not in households.columns:
            raise PercentileInputError(
                "the households table needs a household_id (or unit_id) column and "
                f"{weight_column!r}; it has {', '.join(map(str, households.columns))}")
        h = households[[idcol, weight_column]].drop_duplicates()
        dup = h[idcol][h[idcol].duplicated()]
        if len(dup):
            raise PercentileInputError(
                f"households table: household(s) {', '.join(map(str, dup.unique()[:5]))} have "
                "several weights")
        weights = h.set_index(idcol)[weight_column].astype("float64")
    ids = pd.Index(trials["household_id"].unique())
    lacking = ids.difference(weights.dropna().index)
    if len(lacking):
        raise PercentileInputError(
            f"no {weight_column!r} for {len(lacking)} household(s) of the trials: "
            f"{', '.join(map(str, sorted(lacking)[:10]))}")
    weights = weights.reindex(ids).astype("float64")
    bad = weights[~(np.isfinite(weights) & (weights > 0))]
    if len(bad):
        raise PercentileInputError(
            f"{weight_column!r} must be a finite number > 0; household(s) "
            + ", ".join(f"{i}: {v}" for i, v in bad.head(5).items()))
    weights.index.name = "household_id"
    return weights.rename("weight")


def household_means(trials: pd.DataFrame, households: pd.DataFrame | None = None, *,
                    metrics: Sequence[str] = METRICS, weight_column: str = "weight"
                    ) -> pd.DataFrame:
    """One row per tool, definition_id, direction, variant and household: ``price_bucket``,
    ``weight``, ``trials`` (repetitions) and the mean of each metric over the repetitions that
    have it (NaN if none has).

    Weights come from ``households`` (``household_id`` or ``unit_id``, and ``weight_column``;
    the trials schema has none) or, if it is None, from the trials table's ``weight_column``.
    Metric values must be NaN or finite and > 0 (the changes are ratios; >= 0 for
    :data:`ZERO_ALLOWED`); anything else is an error naming the trials.
    """
    metrics = list(metrics)
    missing = [c for c in (*_NEEDED, *metrics) if c not in trials.columns]
    if missing:
        raise PercentileInputError(f"the trials table lacks column(s) {', '.join(missing)}")
    if trials.empty:
        raise PercentileInputError("the trials table is empty")
    for m in metrics:
        x = pd.to_numeric(trials[m], errors="coerce").astype("float64")
        ok = np.isfinite(x) & ((x >= 0) if m in ZERO_ALLOWED else (x > 0))
        bad = trials.loc[(x.notna() & ~ok) | (x.isna() & trials[m].notna())]
        if len(bad):
            where = bad["trial_path"] if "trial_path" in bad.columns else (
                bad["household_id"].astype(str) + " " + bad["direction"] + " " + bad["variant"])
            raise PercentileInputError(
                f"{m} must be a finite number {'>=' if m in ZERO_ALLOWED else '>'} 0 (or "
                f"missing); not so in {len(bad)} trial(s): "
                f"{', '.join(map(str, where.head(5)))}")
    buckets = trials.groupby("household_id", sort=False)["price_bucket"].nunique(dropna=False)
    if (buckets > 1).any():
        raise PercentileInputError(
            "one household in several price buckets: "
            f"{', '.join(map(str, buckets.index[buckets > 1][:5]))}")
    weights = _weights(trials, households, weight_column)
    t = trials[[*_GROUP, "household_id", "price_bucket", *metrics]].copy()
    for m in metrics:
        t[m] = pd.to_numeric(t[m], errors="coerce").astype("float64")
    keys = [*_GROUP, "household_id"]
    g = t.groupby(keys, sort=True, observed=True, dropna=False)
    out = g[metrics].mean()  # pandas skips NaN: the mean of the repetitions that have a value
    out.insert(0, "trials", g.size())
    out.insert(0, "price_bucket", g["price_bucket"].first())
    out = out.reset_index()
    out.insert(len(keys) + 1, "weight", weights.reindex(out["household_id"]).to_numpy())
    return out


def _block_seed(seed: int, tool: str, direction: str, bucket: str, metric: str) -> list[int]:
    """The entropy of one block's generator: [seed, crc32 of its name]."""
    return [int(seed), zlib.crc32(f"{tool}|{direction}|{bucket}|{metric}".encode())]


def _ci(boot: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """2.5th and 97.5th percentile over axis 1 (the resamples), NaN resamples left out."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices: NaN, as meant
        lo, hi = np.nanquantile(boot, CI_LEVELS, axis=1)
    return lo, hi


def _block(values: np.ndarray, weights: np.ndarray, base: int, percentiles: np.ndarray,
           rng: np.random.Generator, n_resamples: int) -> dict[str, np.ndarray]:
    """Point estimates and bootstrap intervals for one block.

    ``values``: (G, n) per-household means of the G groups (NaN: no value), ``weights``: (n,),
    ``base``: the baseline's row. Returns arrays of shape (G, P)."""
    g, n = values.shape
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = values / values[base]  # (G, n); NaN unless both have a value
    stacked = np.concatenate([values, ratios])  # (2G, n)
    point = weighted_percentiles(stacked, weights, percentiles)  # (2G, P)
    if n:
        counts = rng.multinomial(n, np.full(n, 1.0 / n), size=n_resamples)  # (B, n)
    else:
        counts = np.zeros((n_resamples, 0))
    boot = resampled_percentiles(stacked, counts * weights, percentiles)  # (2G, B, P)
    with np.errstate(divide="ignore", invalid="ignore"):
        change_group = point[:g] / point[base] - 1
        boot_group = boot[:g] / boot[base] - 1  # (G, B, P)
    lo_g, hi_g = _ci(boot_group)
    lo_p, hi_p = _ci(boot[g:] - 1)
    return {
        "value": point[:g], "cubic_value": np.broadcast_to(point[base], point[:g].shape),
        "change_group": change_group, "ci_low_group": lo_g, "ci_high_group": hi_g,
        "change_paired": point[g:] - 1, "ci_low_paired": lo_p, "ci_high_paired": hi_p,
        "n_households": np.broadcast_to(np.isfinite(values).sum(axis=1)[:, None], point[:g].shape),
        "n_paired": np.broadcast_to(np.isfinite(ratios).sum(axis=1)[:, None], point[:g].shape),
    }


def percentile_table(trials: pd.DataFrame, households: pd.DataFrame | None = None, *,
                     percentiles: Sequence[float] = PERCENTILES,
                     metrics: Sequence[str] | None = None, baseline: str = BASELINE,
                     by_bucket: bool = True, n_resamples: int = MIN_RESAMPLES, seed: int = 1,
                     weight_column: str = "weight") -> pd.DataFrame:
    """The percentile view (module docstring): one row per tool, definition_id, direction,
    variant, bucket (``"all"``, then each price bucket if ``by_bucket``), metric and percentile,
    with the columns of :data:`PERCENTILES_SCHEMA`.

    ``metrics``: trials-table columns, by default :func:`metrics_for` the trials;
    ``households`` gives the weights (:func:`household_means`); ``baseline`` names the variant
    the changes are against, which every (tool, direction) must have trials of, under one
    definition; ``n_resamples`` >= :data:`MIN_RESAMPLES` households resamples per block, from
    ``seed``.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise PercentileInputError(f"seed {seed!r}: an integer >= 0")
    if int(n_resamples) < MIN_RESAMPLES:
        raise PercentileInputError(
            f"n_resamples {n_resamples}: at least {MIN_RESAMPLES} bootstrap resamples")
    pct = np.asarray(percentiles, dtype="float64")
    weighted_percentiles(np.ones(1), np.ones(1), pct)  # validates the percentiles
    metrics = list(metrics_for(trials) if metrics is None else metrics)
    means = household_means(trials, households, metrics=metrics, weight_column=weight_column)
    if by_bucket and (means["price_bucket"] == ALL).any():
        raise PercentileInputError(f"a price bucket is named {ALL!r}, the label of the whole "
                                   "sample")
    frames = []
    for (tool, direction), td in means.groupby(["tool", "direction"], sort=True):
        groups = td[["definition_id", "variant"]].drop_duplicates()
        base = groups[groups["variant"] == baseline]
        if base.empty:
            raise PercentileInputError(
                f"no {baseline!r} baseline for tool {tool}, direction {direction}: its trials "
                f"have variant(s) {', '.join(sorted(groups['variant']))}; each change is against "
                f"{baseline!r} trials of the same tool and direction")
        if len(base) > 1:
            raise PercentileInputError(
                f"several {baseline!r} baselines for tool {tool}, direction {direction}: "
                f"definitions {', '.join(sorted(base['definition_id']))}")
        groups = pd.concat([base, groups[groups["variant"] != baseline].sort_values(
            ["variant", "definition_id"])], ignore_index=True)
        gi = {(d, v): i for i, (d, v) in enumerate(zip(groups["definition_id"],
                                                       groups["variant"]))}
        td = td.assign(_g=[gi[k] for k in zip(td["definition_id"], td["variant"])])
        blocks = [(ALL, td)]
        if by_bucket:
            blocks += [(str(b), td[td["price_bucket"] == b])
                       for b in sorted(td["price_bucket"].dropna().unique())]
        for bucket, bd in blocks:
            weight_of = bd.groupby("household_id", sort=True)["weight"].first()
            for metric in metrics:
                wide = bd.pivot(index="household_id", columns="_g", values=metric)
                wide = wide.reindex(index=weight_of.index, columns=range(len(groups)))
                wide = wide[wide.notna().any(axis=1)]
                rng = np.random.default_rng(_block_seed(seed, tool, direction, bucket, metric))
                res = _block(wide.to_numpy(dtype="float64").T,
                             weight_of.reindex(wide.index).to_numpy(dtype="float64"), 0, pct,
                             rng, int(n_resamples))
                n_g, n_p = len(groups), len(pct)
                frame = pd.DataFrame({
                    "tool": tool,
                    "definition_id": np.repeat(groups["definition_id"].to_numpy(), n_p),
                    "direction": direction,
                    "variant": np.repeat(groups["variant"].to_numpy(), n_p),
                    "bucket": bucket, "metric": metric,
                    "percentile": np.tile(pct, n_g),
                    **{k: np.asarray(v).reshape(-1) for k, v in res.items()},
                })
                frames.append(frame)
    out = pd.concat(frames, ignore_index=True)
    out["n_resamples"] = int(n_resamples)
    out["seed"] = int(seed)
    for c in ("n_households", "n_paired", "n_resamples", "seed"):
        out[c] = out[c].astype("int64")
    return out[PERCENTILES_SCHEMA.names]


def write_percentiles(df: pd.DataFrame, path: Path | str) -> None:
    """Write the percentile table with :data:`PERCENTILES_SCHEMA` (table name and schema version
    in the Parquet metadata); temp file then rename (analysis.schemas.write_versioned)."""
    write_versioned(df, path, PERCENTILES_SCHEMA, name=TABLE_NAME,
                    version=PERCENTILES_SCHEMA_VERSION)


def read_percentiles(path: Path | str) -> pd.DataFrame:
    """Read a percentile table, checking its name and schema version."""
    return read_versioned(path, version=PERCENTILES_SCHEMA_VERSION, name=TABLE_NAME)
