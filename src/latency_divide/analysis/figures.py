"""Figures (plotnine), each written as PDF and PNG with a provenance sidecar.

- ``delay_tput``: the paper's main figure: mean self-induced delay (y) against mean normalized
  throughput (x), one point per variant and price bucket, 95 % CI error bars both ways
  (t over households), faceted by direction; colour = variant, shape = price bucket.
- ``self_delay``: per price bucket and direction, the distribution of the self-induced delay of
  every ping during the transfer, one box per variant.
- ``timeseries``: RTT, bottleneck backlog and receiver goodput against time since transfer start
  for one household (every variant, both directions, repetition 1 or the lowest).
- ``divide``: Copa's self-induced delay reduction relative to Cubic
  (100 * (1 - copa / cubic), per household, repetitions averaged first), mean +- 95 % CI per
  price bucket; one colour per Copa variant, faceted by direction.

Functions taking frames return a ``ggplot`` and never read files, so they are testable;
:func:`save` writes PDF + PNG through temporary files and renames them.
"""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from latency_divide.errors import LatencyDivideError
from latency_divide.fsio import atomic_path
from latency_divide.vocab import RUN_FIGURES as FIGURES


WIDTH_IN = 7.5


HEIGHT_IN = 4.0


class FigureError(LatencyDivideError):
    """A figure cannot be drawn from the given tables."""


def bucket_order(buckets: Sequence[str]) -> list[str]:
    """Price buckets in price order ("0-30" < "30-40" < ... < "50+"), by leading number."""

    def key(b: str):
        m = re.match(r"\$?(\d+(?:\.\d+)?)", str(b))
        return (0, float(m.group(1)), str(b)) if m else (1, math.inf, str(b))

    return sorted({str(b) for b in buckets}, key=key)


def variant_order(trials: pd.DataFrame) -> list[str]:
    """Variants: cubic (and other non-Copa) first, then Copa by increasing delta."""
    v = trials[["variant", "cc", "delta"]].drop_duplicates("variant")
    v = v.assign(_copa=v["cc"] == "copa", _d=v["delta"].fillna(-1.0))
    return v.sort_values(["_copa", "_d", "variant"])["variant"].tolist()


def _cat(df: pd.DataFrame, col: str, order: Sequence[str]) -> pd.DataFrame:
    df = df.copy()
    df[col] = pd.Categorical(df[col].astype(str), categories=list(order), ordered=True)
    return df


def _theme():
    from plotnine import element_text, theme, theme_bw

    return theme_bw() + theme(legend_position="right", strip_text=element_text(size=9))


def delay_tput_plot(summary: pd.DataFrame, variants: Sequence[str] | None = None):
    from plotnine import (
        aes,
        facet_wrap,
        geom_errorbar,
        geom_errorbarh,
        geom_point,
        ggplot,
        labs,
    )

    if summary.empty:
        raise FigureError("delay_tput: the summary table is empty")
    variants = list(variants) if variants else sorted(summary["variant"].unique())
    df = _cat(summary, "variant", variants)
    df = _cat(df, "price_bucket", bucket_order(df["price_bucket"]))
    ci_y = df[np.isfinite(df["self_delay_mean_ms_ci95_lo"])]
    ci_x = df[np.isfinite(df["norm_tput_ci95_lo"])]
    p = (
        ggplot(df, aes("norm_tput_mean", "self_delay_mean_ms_mean", colour="variant"))
        + geom_errorbar(ci_y, aes(ymin="self_delay_mean_ms_ci95_lo",
                                  ymax="self_delay_mean_ms_ci95_hi"), width=0.0, alpha=0.6)
        + geom_errorbarh(ci_x, aes(xmin="norm_tput_ci95_lo", xmax="norm_tput_ci95_hi"),
                         height=0.0, alpha=0.6)
        + geom_point(aes(shape="price_bucket"), size=3)
        + facet_wrap("direction")
        + labs(x="mean normalized throughput (goodput / capacity)",
               y="mean self-induced delay (ms)", colour="variant", shape="price bucket")
        + _theme()
    )
    return p


def box_stats(d: pd.DataFrame, by: Sequence[str], y: str,
              coef: float = 1.5) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Tukey box statistics of ``y`` per group of ``by``, as plotnine's stat_boxplot computes
    them (linear-interpolated quartiles; whiskers at the furthest observation within ``coef``
    IQR of the box, never inside the box): one row per group with n, lower, middle, upper,
    ymin, ymax, and the outlying rows (``by`` + ``y``). NaN values are left out, and a group
    without values. Drawing the boxes from these few rows is the same figure as geom_boxplot
    over every sample, without passing every sample through the facet mapping."""
    rows, outl = [], []
    for key, s in d.groupby(list(by), observed=True, sort=True)[y]:
        v = s.to_numpy(dtype="float64")
        v = v[~np.isnan(v)]
        if not len(v):
            continue
        q1, med, q3 = np.percentile(v, [25, 50, 75])
        lo_b, hi_b = q1 - coef * (q3 - q1), q3 + coef * (q3 - q1)
        lo, hi = min(v[v >= lo_b].min(), q1), max(v[v <= hi_b].max(), q3)
        rows.append((*key, len(v), q1, med, q3, lo, hi))
        far = v[(v < lo) | (v > hi)]
        outl.append(pd.DataFrame({**{b: [k] * len(far) for b, k in zip(by, key)}, y: far}))
    stats = pd.DataFrame(rows, columns=[*by, "n", "lower", "middle", "upper", "ymin", "ymax"])
    outliers = (pd.concat(outl, ignore_index=True) if outl
                else pd.DataFrame(columns=[*by, y]))
    return stats, outliers


def self_delay_plot(ping_ts: pd.DataFrame, trials: pd.DataFrame):
    """Box plots of the per-ping self-induced delay, one per variant, faceted direction x price
    bucket. Drawn from :func:`box_stats` as a few vectorised layers (boxes, whiskers, medians,
    outliers): the picture of geom_boxplot, whose per-box drawing was most of this figure's time
    (README "Re-analysis time")."""
    from plotnine import (
        aes,
        element_text,
        facet_grid,
        geom_rect,
        geom_segment,
        ggplot,
        labs,
        scale_x_continuous,
        theme,
    )

    from latency_divide.analysis.plotgeoms import geom_cloud

    d = ping_ts[ping_ts["during_transfer"] & ping_ts["self_delay_ms"].notna()]
    if d.empty:
        raise FigureError("self_delay: no ping samples during any transfer")
    buckets = trials[["household_id", "price_bucket"]].drop_duplicates("household_id")
    d = d[["household_id", "direction", "variant", "self_delay_ms"]].merge(
        buckets, on="household_id", how="inner")
    stats, outliers = box_stats(d, ["direction", "price_bucket", "variant"], "self_delay_ms")
    # the variants with samples, in order (a discrete scale would drop the others too)
    variants = [v for v in variant_order(trials) if v in set(stats["variant"])]
    for f in (stats, outliers):  # variant slots 1..k on a continuous x (as a discrete scale)
        f["x"] = f["variant"].map({v: i for i, v in enumerate(variants, start=1)}).astype(float)
    stats = stats.assign(x0=stats["x"] - 0.35, x1=stats["x"] + 0.35)
    whiskers = pd.concat([stats.assign(y0=stats["ymin"], y1=stats["lower"]),
                          stats.assign(y0=stats["upper"], y1=stats["ymax"])], ignore_index=True)
    frames = {"stats": stats, "outliers": outliers, "whiskers": whiskers}
    levels = bucket_order(stats["price_bucket"].unique())
    for k, f in frames.items():
        frames[k] = _cat(_cat(f, "variant", variants), "price_bucket", levels)
    grey = "#333333"  # geom_boxplot's line colour
    return (
        ggplot(frames["stats"])
        + geom_segment(frames["whiskers"], aes(x="x", xend="x", y="y0", yend="y1"),
                       colour=grey, size=0.5)
        + geom_rect(aes(xmin="x0", xmax="x1", ymin="lower", ymax="upper", fill="variant"),
                    colour=grey, size=0.5)
        + geom_segment(aes(x="x0", xend="x1", y="middle", yend="middle"), colour=grey, size=1.0)
        + geom_cloud(frames["outliers"], aes("x", "self_delay_ms"), size=0.3, alpha=0.3,
                     colour=grey, stroke=0.5, raster=True)
        + scale_x_continuous(breaks=list(range(1, len(variants) + 1)), labels=variants,
                             limits=(0.4, len(variants) + 0.6), expand=(0, 0))
        + facet_grid("direction ~ price_bucket")
        + labs(x="variant", y="self-induced delay per ping (ms)")
        + _theme()
        + theme(axis_text_x=element_text(rotation=45, ha="right"), legend_position="none")
    )


def pick_household(trials: pd.DataFrame, household: int | None,
                   order: Sequence[int] | None = None) -> int:
    """The household of the time-series panel: the given one (it must have a valid trial), else
    the first of ``order`` (the configured households) with a valid trial, else the lowest ID."""
    ids = sorted(int(x) for x in trials["household_id"].unique())
    if household is not None:
        if int(household) not in ids:
            raise FigureError(f"timeseries household {household} has no valid trial; households "
                              f"with trials: {', '.join(map(str, ids))}")
        return int(household)
    for h in order or ():
        if int(h) in ids:
            return int(h)
    return ids[0]


def timeseries_frame(ts: dict[str, pd.DataFrame], trials: pd.DataFrame,
                     household: int) -> pd.DataFrame:
    """Long frame (direction, variant, t_s, metric, value) of one household's first repetition."""
    tr = trials[trials["household_id"] == household]
    rep = tr.groupby(["direction", "variant"])["repetition"].min().rename("rep").reset_index()
    parts = []
    spec = (("ping", "rtt_ms", "RTT (ms)"), ("queue", "backlog_bytes", "backlog (bytes)"),
            ("throughput", "goodput_kbps", "goodput (kbit/s)"))
    for table, col, label in spec:
        d = ts[table]
        d = d[d["household_id"] == household].merge(
            rep, left_on=["direction", "variant", "repetition"],
            right_on=["direction", "variant", "rep"], how="inner")
        d = d[d[col].notna()]
        parts.append(pd.DataFrame({"direction": d["direction"], "variant": d["variant"],
                                   "t_s": d["t_s"], "metric": label,
                                   "value": d[col].astype("float64")}))
    out = pd.concat(parts, ignore_index=True)
    out["metric"] = pd.Categorical(out["metric"], categories=[s[2] for s in spec], ordered=True)
    return out


def timeseries_plot(ts: dict[str, pd.DataFrame], trials: pd.DataFrame, household: int):
    from plotnine import aes, facet_grid, geom_line, geom_vline, ggplot, labs

    d = timeseries_frame(ts, trials, household)
    if d.empty:
        raise FigureError(f"timeseries: no samples for household {household}")
    d = _cat(d, "variant", variant_order(trials))
    bucket = trials.loc[trials["household_id"] == household, "price_bucket"].iloc[0]
    return (
        ggplot(d, aes("t_s", "value", colour="variant"))
        + geom_vline(xintercept=0, linetype="dashed", colour="grey")
        + geom_line(size=0.4)
        + facet_grid("metric ~ direction", scales="free_y")
        + labs(x="time since transfer start (s)", y="",
               title=f"household {household} (price bucket {bucket})")
        + _theme()
    )


def baseline_variant(trials: pd.DataFrame, baseline: str = "cubic") -> str:
    """``baseline`` where a variant has that name, else the one variant whose congestion
    control it names (a data set of unbound variants only has ``cubic-1m``)."""
    if baseline in set(trials["variant"]):
        return baseline
    same_cc = sorted(set(trials.loc[trials["cc"] == baseline, "variant"]))
    return same_cc[0] if len(same_cc) == 1 else baseline


def divide_table(trials: pd.DataFrame, baseline: str = "cubic") -> pd.DataFrame:
    """Per price_bucket x direction x Copa variant: households, mean and 95 % CI of the
    per-household reduction 100 * (1 - copa_delay / baseline_delay) of self_delay_mean_ms.

    Households whose baseline delay is not positive cannot give a ratio: they are left out with a
    warning naming them.
    """
    from latency_divide.analysis.tables import t_quantile_975

    per_hh = (trials.groupby(["price_bucket", "direction", "variant", "household_id"],
                             observed=True)["self_delay_mean_ms"].mean().reset_index())
    baseline = baseline_variant(trials, baseline)
    base_rows = trials.loc[trials["variant"] == baseline]
    if base_rows.empty:
        raise FigureError(f"divide: no trials of the baseline variant {baseline!r}")
    base = per_hh[per_hh["variant"] == baseline].rename(
        columns={"self_delay_mean_ms": "base_ms"}).drop(columns="variant")
    copa = set(trials.loc[trials["cc"] == "copa", "variant"])
    other = per_hh[per_hh["variant"].isin(copa)].merge(
        base, on=["price_bucket", "direction", "household_id"], how="inner")
    bad = other[~(other["base_ms"] > 0)]
    if not bad.empty:
        ids = ", ".join(sorted({str(i) for i in bad["household_id"]}))
        warnings.warn(f"divide: households with non-positive {baseline} self-induced delay left "
                      f"out: {ids}", stacklevel=2)
    other = other[other["base_ms"] > 0]
    other = other.assign(reduction_pct=100.0 * (1.0 - other["self_delay_mean_ms"] / other["base_ms"]))
    rows = []
    for (b, d, v), g in other.groupby(["price_bucket", "direction", "variant"], observed=True):
        x = g["reduction_pct"].to_numpy(dtype="float64")
        n = len(x)
        m = float(x.mean())
        half = t_quantile_975(n - 1) * float(x.std(ddof=1)) / math.sqrt(n) if n > 1 else math.nan
        rows.append({"price_bucket": b, "direction": d, "variant": v, "households": n,
                     "reduction_pct_mean": m, "reduction_pct_ci95_lo": m - half,
                     "reduction_pct_ci95_hi": m + half})
    return pd.DataFrame(rows, columns=["price_bucket", "direction", "variant", "households",
                                       "reduction_pct_mean", "reduction_pct_ci95_lo",
                                       "reduction_pct_ci95_hi"])


def divide_plot(trials: pd.DataFrame, baseline: str = "cubic"):
    from plotnine import (
        aes,
        facet_wrap,
        geom_col,
        geom_errorbar,
        geom_hline,
        ggplot,
        labs,
        position_dodge,
    )

    baseline = baseline_variant(trials, baseline)
    d = divide_table(trials, baseline)
    if d.empty:
        raise FigureError(f"divide: no household has both {baseline} and Copa trials")
    d = _cat(d, "price_bucket", bucket_order(d["price_bucket"]))
    d = _cat(d, "variant", [v for v in variant_order(trials) if v in set(d["variant"])])
    dodge = position_dodge(width=0.8)
    ci = d[np.isfinite(d["reduction_pct_ci95_lo"])]
    return (
        ggplot(d, aes("price_bucket", "reduction_pct_mean", fill="variant"))
        + geom_hline(yintercept=0, colour="grey")
        + geom_col(position=dodge, width=0.75)
        + geom_errorbar(ci, aes(ymin="reduction_pct_ci95_lo", ymax="reduction_pct_ci95_hi"),
                        position=dodge, width=0.25)
        + facet_wrap("direction")
        + labs(x="price bucket (US$ per month)",
               y=f"self-induced delay reduction vs {baseline} (%)", fill="variant")
        + _theme()
    )


def save(plot, pdf: Path | str, png: Path | str | None = None, width: float = WIDTH_IN,
         height: float = HEIGHT_IN, dpi: int = 150) -> list[Path]:
    """Write the plot as PDF (and PNG) atomically; return the written paths."""
    import matplotlib.pyplot as plt
    from plotnine import theme

    written = []
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module="plotnine")
        # drawn once, saved in both formats (plotnine's save would draw it again per file)
        fig = (plot + theme(figure_size=(width, height), dpi=dpi)).draw()
    try:
        for path in (pdf, png):
            if path is None:
                continue
            path = Path(path)
            with atomic_path(path) as tmp:
                fig.savefig(tmp, dpi=dpi)
            written.append(path)
    finally:
        plt.close(fig)
    return written


def make_figure(name: str, tables_dir: Path | str, household: int | None = None,
                household_order: Sequence[int] | None = None, inputs=None):
    """(plot, trials used, tables read) for figure ``name`` from the tables under ``tables_dir``,
    read through ``inputs`` (analysis.figinputs.FigureInputs; default: one of its own)."""
    from latency_divide.analysis.figinputs import FigureInputs

    t = inputs if inputs is not None else FigureInputs(tables_dir)
    trials = t.table("trials")
    if name == "delay_tput":
        return (delay_tput_plot(t.table("summary"), variant_order(trials)), trials,
                [t.path("trials"), t.path("summary")])
    if name == "self_delay":  # the columns it draws (of ten)
        ping = t.table("ping", ["household_id", "direction", "variant", "self_delay_ms",
                                "during_transfer"])
        return self_delay_plot(ping, trials), trials, [t.path("trials"), t.path("ping")]
    if name == "timeseries":
        hh = pick_household(trials, household, household_order)
        key = ["household_id", "direction", "variant", "repetition", "t_s"]
        ts = {n: t.table(n, key + [col], household=hh)  # one household's rows only
              for n, col in (("ping", "rtt_ms"), ("queue", "backlog_bytes"),
                             ("throughput", "goodput_kbps"))}
        used = trials[trials["household_id"] == hh]
        used = used[used["repetition"] == used.groupby(["direction", "variant"])["repetition"]
                    .transform("min")]
        return timeseries_plot(ts, trials, hh), used, [t.path("trials")] + [t.path(n) for n in ts]
    if name == "divide":
        return divide_plot(trials), trials, [t.path("trials")]
    raise FigureError(f"unknown figure {name!r}; known: {', '.join(FIGURES)} (and a "
                      "population run's, analysis.population_figures)")


def build_figure(name: str, tables_dir: Path | str, pdf: Path | str, png: Path | str,
                 sidecar: Path | str, household: int | None = None,
                 household_order: Sequence[int] | None = None, inputs=None) -> dict:
    """Draw figure ``name`` from the tables and write PDF, PNG and the provenance sidecar
    (``inputs``: as make_figure's, shared by a figures job's figures of one data set)."""
    from latency_divide.analysis.figinputs import FigureInputs
    from latency_divide.analysis.provenance import write_sidecar

    inputs = inputs if inputs is not None else FigureInputs(tables_dir)
    plot, used, tables = make_figure(name, tables_dir, household, household_order, inputs)
    height = 6.0 if name in ("timeseries", "self_delay") else HEIGHT_IN
    outputs = save(plot, pdf, png, height=height)
    rec = inputs.sidecar(pdf, outputs, used, tables=tables)
    write_sidecar(rec, sidecar)
    return rec
