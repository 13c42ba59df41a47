"""The percentile view of a population run as a table job and two figures (issue 24, section 4;
docs/population.md).

- :func:`build_percentiles`: trials table -> ``percentiles.parquet``
  (:func:`latency_divide.analysis.population.percentile_table`). A population sample drawn with
  probability proportional to the data set's weight (``households.population_sample``) is
  self-weighting, so every household gets the same analysis weight (1): weighting by the data
  set's weight again would count it twice (analysis.population, "Weights").
- ``percentiles``: Facebook's shape: each variant's change against Cubic (%) at p10 ... p95 of
  its per-household means (the group view), 95 % bootstrap intervals, one panel per metric and
  direction; the "best" connections (p10-p50) and the "worst" (p75-p95) shaded apart.
- ``percentiles_buckets``: the same per price bucket (the digital-divide question), one column
  per bucket.

Both draw Facebook's published changes (analysis.facebook, :data:`FACEBOOK`) as open diamonds
in the uplink panels (Facebook measured uploads; every bucket's uplink panel in the bucket
figure, the same reference), in the colour of our variant standing for the group
(:data:`~latency_divide.analysis.facebook.VARIANT_OF`) and at that variant's dodged x
(:func:`facebook_marks`).

Plot functions take the table and return a ``ggplot`` (no I/O), like analysis.figures.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from latency_divide.analysis.facebook import FACEBOOK, VARIANT_OF
from latency_divide.analysis.figures import (
    WIDTH_IN,
    FigureError,
    _cat,
    _theme,
    bucket_order,
    save,
)
from latency_divide.analysis.population import (
    ALL,
    BASELINE,
    MIN_RESAMPLES,
    percentile_table,
    read_percentiles,
    write_percentiles,
)
from latency_divide.vocab import POPULATION_FIGURES  # a population run's figures (config)

#: Width (percentile points) over which the variants stand side by side at each percentile.
DODGE = 2.0

#: The direction Facebook measured (uploads): its marks are drawn in these panels only.
FACEBOOK_DIRECTION = "uplink"

#: What Facebook's mark is (the figures' caption).
FACEBOOK_CAPTION = ("open diamonds (uplink panels): Facebook's production A/B test, Live video "
                    "uploads (IETF 106),\nbeside our variant for its group: Copa δ 0.04 as "
                    "copa-0.04, BBR as bbr")

#: Facet labels of the metrics (trials-table columns), in Facebook's order.
METRIC_LABELS = {
    "transport_rtt_mean_ms": "transport RTT",
    "rtt_mean_ms": "application RTT (ping)",
    "goodput_kbps": "goodput",
}


def build_percentiles(trials_path: Path | str, out: Path | str, *, seed: int,
                      n_resamples: int = MIN_RESAMPLES) -> pd.DataFrame:
    """The percentile table of the trials in ``trials_path``, equal household weights (module
    docstring), written atomically to ``out``."""
    from latency_divide.analysis.tables import read_table

    trials = read_table(trials_path, "trials")
    table = percentile_table(trials.assign(weight=1.0), seed=seed, n_resamples=n_resamples)
    write_percentiles(table, out)
    return table


def _frame(pct: pd.DataFrame, buckets: bool) -> pd.DataFrame:
    d = pct[pct["variant"] != BASELINE]
    d = d[(d["bucket"] != ALL) if buckets else (d["bucket"] == ALL)]
    d = d[d["metric"].isin(list(METRIC_LABELS))]
    d = d[np.isfinite(d["change_group"])]
    if d.empty:
        raise FigureError("percentiles: no variant has a change against "
                          f"{BASELINE} ({'per price bucket' if buckets else 'whole sample'})")
    d = d.assign(change_pct=100 * d["change_group"], lo_pct=100 * d["ci_low_group"],
                 hi_pct=100 * d["ci_high_group"],
                 metric=d["metric"].map(METRIC_LABELS),
                 pct_label="p" + d["percentile"].round().astype(int).astype(str))
    d = _cat(d, "metric", [m for m in METRIC_LABELS.values() if m in set(d["metric"])])
    if buckets:
        d = _cat(d, "bucket", bucket_order(d["bucket"]))
    return d


def facebook_marks(d: pd.DataFrame, offset: dict[str, float], buckets: bool,
                   published=FACEBOOK) -> pd.DataFrame:
    """Facebook's published changes as rows of the figure's frame ``d`` (:func:`_frame`): one per
    number of ``published`` whose variant (``VARIANT_OF``) and metric are in ``d``, in the
    uplink panels only (with ``buckets``, once per bucket that has an uplink panel), at
    ``x`` = percentile + the variant's dodge ``offset``, ``change_pct`` = 100 x the change."""
    up = d[d["direction"].astype(str) == FACEBOOK_DIRECTION]
    labels = {str(m) for m in up["metric"]}
    variants = {str(v) for v in up["variant"]}
    rows = [{"metric": METRIC_LABELS[fb.metric], "percentile": float(fb.percentile),
             "group": fb.variant, "variant": VARIANT_OF[fb.variant],
             "change_pct": 100 * fb.change,
             "x": float(fb.percentile) + offset[VARIANT_OF[fb.variant]]}
            for fb in published
            if METRIC_LABELS.get(fb.metric) in labels and VARIANT_OF.get(fb.variant) in variants]
    m = pd.DataFrame(rows, columns=["metric", "percentile", "group", "variant", "change_pct", "x"])
    m = m.assign(direction=FACEBOOK_DIRECTION)
    if buckets:  # the same reference in every bucket's uplink panel
        bs = pd.DataFrame({"bucket": [b for b in d["bucket"].cat.categories
                                      if b in set(up["bucket"].astype(str))]})
        m = m.merge(bs, how="cross")
        m = _cat(m, "bucket", list(d["bucket"].cat.categories))
    m = _cat(m, "metric", list(d["metric"].cat.categories))
    if isinstance(d["variant"].dtype, pd.CategoricalDtype):
        m = _cat(m, "variant", list(d["variant"].cat.categories))
    if isinstance(d["direction"].dtype, pd.CategoricalDtype):
        m = _cat(m, "direction", list(d["direction"].cat.categories))
    return m


def percentiles_plot(pct: pd.DataFrame, buckets: bool = False):
    """Change against Cubic (%) per percentile; ``buckets``: one column per price bucket."""
    from plotnine import (
        aes,
        annotate,
        element_text,
        facet_grid,
        geom_errorbar,
        geom_hline,
        geom_line,
        geom_point,
        ggplot,
        labs,
        scale_x_continuous,
        theme,
    )

    d = _frame(pct, buckets)
    pcts = sorted(d["percentile"].unique())
    # the variants side by side at each percentile, DODGE wide in all: offsets computed here,
    # the same in every panel (plotnine's position_dodge, per panel and group, was a third of
    # the bucket figure's time)
    present = set(d["variant"])
    order = (d["variant"].cat.categories if isinstance(d["variant"].dtype, pd.CategoricalDtype)
             else sorted(present))  # the colour scale's order
    variants = [v for v in order if v in present]
    step = DODGE / len(variants)
    offset = {v: (i + 0.5) * step - DODGE / 2 for i, v in enumerate(variants)}
    d = d.assign(x=d["percentile"] + d["variant"].map(offset).astype(float))
    facets = "metric ~ direction + bucket" if buckets else "metric ~ direction"
    # one group for every bar of a panel: plotnine draws a geom's groups one by one, and the
    # bars, coloured row by row, need no more (the lines keep a group per variant)
    ci = d[np.isfinite(d["lo_pct"]) & np.isfinite(d["hi_pct"])].assign(bars=0)
    fb = facebook_marks(d, offset, buckets)
    return (
        ggplot(d, aes("x", "change_pct", colour="variant", group="variant"))
        # Facebook's "best connections" (p10-p50) and "worst connections" (p75-p95)
        + annotate("rect", xmin=7, xmax=52.5, ymin=-np.inf, ymax=np.inf, fill="#e8f0e8",
                   alpha=0.6)
        + annotate("rect", xmin=72.5, xmax=97.5, ymin=-np.inf, ymax=np.inf, fill="#f4e6e6",
                   alpha=0.6)
        + geom_hline(yintercept=0, colour="grey")
        + geom_line()
        + geom_point(size=1.2)
        + geom_errorbar(ci, aes(ymin="lo_pct", ymax="hi_pct", group="bars"), width=0.75 * step)
        # Facebook's published numbers: open diamonds over our point, outside the legend
        + geom_point(fb, shape="D", fill="none", size=3.2, stroke=0.8, show_legend=False)
        + scale_x_continuous(breaks=pcts, labels=[f"p{int(round(p))}" for p in pcts])
        + facet_grid(facets, scales="free_y")
        + labs(x="percentile across households (green: best p10-p50, red: worst p75-p95)",
               y=f"change against {BASELINE} (%)", colour="variant",
               caption=FACEBOOK_CAPTION)
        + _theme()
        + theme(axis_text_x=element_text(rotation=45, ha="right", size=7))
    )


def make_population_figure(name: str, tables_dir: Path | str):
    """(plot, trials used, tables read) for a population figure, like figures.make_figure."""
    from latency_divide.analysis.tables import read_table

    tdir = Path(tables_dir)
    if name not in POPULATION_FIGURES:
        raise FigureError(f"unknown population figure {name!r}; known: "
                          f"{', '.join(POPULATION_FIGURES)}")
    pct = read_percentiles(tdir / "percentiles.parquet")
    trials = read_table(tdir / "trials.parquet", "trials")
    plot = percentiles_plot(pct, buckets=name == "percentiles_buckets")
    return plot, trials, [tdir / "trials.parquet", tdir / "percentiles.parquet"]


def build_population_figure(name: str, tables_dir: Path | str, pdf: Path | str,
                            png: Path | str, sidecar: Path | str) -> dict:
    """Draw population figure ``name`` and write PDF, PNG and the provenance sidecar (as
    figures.build_figure does for the run's figures)."""
    from latency_divide.analysis.provenance import build_sidecar, write_sidecar

    plot, used, tables = make_population_figure(name, tables_dir)
    width = 14.0 if name == "percentiles_buckets" else WIDTH_IN
    outputs = save(plot, pdf, png, width=width, height=6.0)
    rec = build_sidecar(pdf, outputs, used, tables=tables)
    write_sidecar(rec, sidecar)
    return rec
