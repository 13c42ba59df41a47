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

A run of live broadcasts (issue 58, item 4; docs/live.md; its table has
analysis.population.LIVE_METRICS: :func:`table_app`) plots Facebook's own per-broadcast
metrics instead of the bulk trials' columns (:data:`LIVE_METRIC_LABELS`, the columns of
analysis.facebook.LIVE_METRIC_OF), Facebook's numbers as the same diamonds on the column that
is its definition, and its RTX overhead, which the deck gives in words only (slide "RTX
Overhead", IETF 106 ICCRG "Copa at Facebook": :data:`FACEBOOK_STATED`), as open triangles on
the 0 line pointing to the side of Cubic's it states (:func:`stated_marks`): a direction, not a
value. A bulk run's figures are what they were.

Plot functions take the table and return a ``ggplot`` (no I/O), like analysis.figures.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from latency_divide.analysis.answer import APPS
from latency_divide.analysis.facebook import FACEBOOK, FACEBOOK_STATED, LIVE_METRIC_OF, VARIANT_OF
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
    LIVE_METRICS,
    MIN_RESAMPLES,
    has_live,
    percentile_table,
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

#: Facet labels of a live run's metrics: the columns that are Facebook's own per-broadcast
#: definitions (analysis.facebook.LIVE_METRIC_OF; docs/live.md, "The columns"), in Facebook's
#: order: transport RTT, application RTT of the pings on their own priority stream, goodput =
#: application bytes of the frames acknowledged / broadcast, RTX overhead.
LIVE_METRIC_LABELS = {
    "transport_rtt_mean_ms": "transport RTT",
    "app_rtt_mean_ms": "app RTT (priority ping)",
    "goodput_fb_kbps": "goodput (frames acked)",
    "rtx_overhead": "RTX overhead",
}

#: The mark of a row Facebook states in words (analysis.facebook.Stated.sign): a triangle
#: pointing down (below Cubic's) or up (above), drawn at 0 %: no number is claimed.
STATED_SHAPE = {-1: "v", +1: "^"}

#: What a live figure's marks are (its caption).
LIVE_CAPTION = (
    "open diamonds (uplink panels): Facebook's production A/B test, Live video uploads (IETF "
    "106),\nbeside our variant for its group: Copa δ 0.04 as copa-0.04, BBR as bbr; open "
    "triangles on the\n0 line (RTX overhead): Facebook's words, no number (\"lower for 90% of "
    "broadcasts\", \"grows\nrapidly for the last 10%\"): pointing down, Copa's below "
    "Cubic's; up, above")


def build_percentiles(trials_path: Path | str, out: Path | str, *, seed: int,
                      n_resamples: int = MIN_RESAMPLES) -> pd.DataFrame:
    """The percentile table of the trials in ``trials_path``, equal household weights (module
    docstring), written atomically to ``out``."""
    from latency_divide.analysis.tables import read_table

    trials = read_table(trials_path, "trials")
    table = percentile_table(trials.assign(weight=1.0), seed=seed, n_resamples=n_resamples)
    write_percentiles(table, out)
    return table


def table_app(pct: pd.DataFrame) -> str:
    """The application of a run from its percentile table (analysis.answer.APPS): ``live`` when
    it has Facebook's per-broadcast metrics (analysis.population.metrics_for adds them for a run
    with a live broadcast), else ``bulk``."""
    return "live" if set(LIVE_METRICS) & set(pct["metric"]) else "bulk"


def _labels(app: str) -> tuple[dict[str, str], dict[str, str]]:
    """(the table's metric -> facet label, Facebook's metric -> that label) of ``app``."""
    if app not in APPS:
        raise FigureError(f"percentiles: app {app!r}, not one of {', '.join(APPS)}")
    if app == "bulk":
        return METRIC_LABELS, METRIC_LABELS
    return LIVE_METRIC_LABELS, {fb: LIVE_METRIC_LABELS[col] for fb, col in LIVE_METRIC_OF.items()}


def _frame(pct: pd.DataFrame, buckets: bool, labels: dict[str, str] = METRIC_LABELS
           ) -> pd.DataFrame:
    d = pct[pct["variant"] != BASELINE]
    d = d[(d["bucket"] != ALL) if buckets else (d["bucket"] == ALL)]
    d = d[d["metric"].isin(list(labels))]
    d = d[np.isfinite(d["change_group"])]
    if d.empty:
        raise FigureError("percentiles: no variant has a change against "
                          f"{BASELINE} ({'per price bucket' if buckets else 'whole sample'})")
    d = d.assign(change_pct=100 * d["change_group"], lo_pct=100 * d["ci_low_group"],
                 hi_pct=100 * d["ci_high_group"],
                 metric=d["metric"].map(labels),
                 pct_label="p" + d["percentile"].round().astype(int).astype(str))
    d = _cat(d, "metric", [m for m in labels.values() if m in set(d["metric"])])
    if buckets:
        d = _cat(d, "bucket", bucket_order(d["bucket"]))
    return d


def facebook_marks(d: pd.DataFrame, offset: dict[str, float], buckets: bool,
                   published=FACEBOOK, labels: dict[str, str] = METRIC_LABELS) -> pd.DataFrame:
    """Facebook's published changes as rows of the figure's frame ``d`` (:func:`_frame`): one per
    number of ``published`` whose variant (``VARIANT_OF``) and metric (its facet label:
    ``labels``, Facebook's metric -> label) are in ``d``, in the uplink panels only (with
    ``buckets``, once per bucket that has an uplink panel), at ``x`` = percentile + the
    variant's dodge ``offset``, ``change_pct`` = 100 x the change."""
    rows = [{"change_pct": 100 * fb.change} for fb in published]
    return _marks(d, offset, buckets, published, rows, labels, ["change_pct"])


def stated_marks(d: pd.DataFrame, offset: dict[str, float], buckets: bool,
                 stated=FACEBOOK_STATED, labels: dict[str, str] | None = None) -> pd.DataFrame:
    """Facebook's rows in words (analysis.facebook.Stated) as rows of the figure's frame, placed
    as :func:`facebook_marks` places its numbers, but at ``change_pct`` 0 (no number is
    claimed) with their ``sign`` and ``shape`` (:data:`STATED_SHAPE`: the side of Cubic's)."""
    labels = _labels("live")[1] if labels is None else labels
    for s in stated:
        if s.sign not in STATED_SHAPE:
            raise FigureError(f"Facebook's stated row {s.metric} p{s.percentile:g} {s.variant}: "
                              f"sign {s.sign!r}, not -1 (below Cubic's) or +1 (above)")
    rows = [{"change_pct": 0.0, "sign": s.sign, "shape": STATED_SHAPE[s.sign], "says": s.says}
            for s in stated]
    return _marks(d, offset, buckets, stated, rows, labels,
                  ["change_pct", "sign", "shape", "says"])


def _marks(d: pd.DataFrame, offset: dict[str, float], buckets: bool, facebook, values,
           labels: dict[str, str], columns: list[str]) -> pd.DataFrame:
    """The rows of ``facebook`` (each with its ``values``) whose metric and variant ``d``'s
    uplink panels have, placed in them (:func:`facebook_marks`)."""
    up = d[d["direction"].astype(str) == FACEBOOK_DIRECTION]
    have = {str(m) for m in up["metric"]}
    variants = {str(v) for v in up["variant"]}
    rows = [{"metric": labels[fb.metric], "percentile": float(fb.percentile),
             "group": fb.variant, "variant": VARIANT_OF[fb.variant], **vals,
             "x": float(fb.percentile) + offset[VARIANT_OF[fb.variant]]}
            for fb, vals in zip(facebook, values)
            if labels.get(fb.metric) in have and VARIANT_OF.get(fb.variant) in variants]
    m = pd.DataFrame(rows, columns=["metric", "percentile", "group", "variant", *columns, "x"])
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


def percentiles_plot(pct: pd.DataFrame, buckets: bool = False, app: str | None = None):
    """Change against Cubic (%) per percentile; ``buckets``: one column per price bucket.
    ``app`` (analysis.answer.APPS; default: :func:`table_app`): ``live`` plots Facebook's own
    per-broadcast metrics and its stated RTX-overhead rows (module docstring)."""
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
        scale_shape_identity,
        scale_x_continuous,
        theme,
    )

    app = table_app(pct) if app is None else app
    labels, fb_labels = _labels(app)
    if app == "live" and not set(LIVE_METRICS) & set(pct["metric"]):
        raise FigureError(
            "percentiles: a live run's figure plots Facebook's per-broadcast metrics "
            f"({', '.join(LIVE_METRICS)}); the table has only "
            f"{', '.join(sorted(set(pct['metric'])))} (build_percentiles makes them)")
    d = _frame(pct, buckets, labels)
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
    fb = facebook_marks(d, offset, buckets, labels=fb_labels)
    plot = (
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
               caption=FACEBOOK_CAPTION if app == "bulk" else LIVE_CAPTION)
        + _theme()
        + theme(axis_text_x=element_text(rotation=45, ha="right", size=7))
    )
    if app == "live":  # Facebook's words: open triangles at 0 %, pointing to their side
        plot = (plot + geom_point(stated_marks(d, offset, buckets, labels=fb_labels),
                                  aes(shape="shape"), fill="none", size=3.2, stroke=0.8,
                                  show_legend=False)
                + scale_shape_identity())
    return plot


def make_population_figure(name: str, tables_dir: Path | str, inputs=None):
    """(plot, trials used, tables read) for a population figure, like figures.make_figure
    (``inputs``: analysis.figinputs.FigureInputs, as there)."""
    from latency_divide.analysis.figinputs import FigureInputs

    t = inputs if inputs is not None else FigureInputs(tables_dir)
    if name not in POPULATION_FIGURES:
        raise FigureError(f"unknown population figure {name!r}; known: "
                          f"{', '.join(POPULATION_FIGURES)}")
    pct = t.table("percentiles")
    trials = t.table("trials")
    app = "live" if has_live(trials) else "bulk"
    if table_app(pct) != app:  # population.metrics_for: live metrics iff a live broadcast
        raise FigureError(
            f"{t.path('percentiles')} is a {table_app(pct)} run's table but "
            f"{t.path('trials')} has {'a' if app == 'live' else 'no'} live broadcast: "
            "rebuild the percentile table from these trials")
    plot = percentiles_plot(pct, buckets=name == "percentiles_buckets", app=app)
    return plot, trials, [t.path("trials"), t.path("percentiles")]


def figure_size(name: str, plot) -> tuple[float, float]:
    """(width, height) in inches of population figure ``name``: 6 in high for up to 3 metric
    rows (a bulk run's), 2 in a row beyond (a live run's 4: 8 in)."""
    rows = len(plot.data["metric"].cat.categories)
    return (14.0 if name == "percentiles_buckets" else WIDTH_IN), max(6.0, 2.0 * rows)


def build_population_figure(name: str, tables_dir: Path | str, pdf: Path | str,
                            png: Path | str, sidecar: Path | str, inputs=None) -> dict:
    """Draw population figure ``name`` and write PDF, PNG and the provenance sidecar (as
    figures.build_figure does for the run's figures)."""
    from latency_divide.analysis.figinputs import FigureInputs
    from latency_divide.analysis.provenance import write_sidecar

    inputs = inputs if inputs is not None else FigureInputs(tables_dir)
    plot, used, tables = make_population_figure(name, tables_dir, inputs)
    outputs = save(plot, pdf, png, *figure_size(name, plot))
    rec = inputs.sidecar(pdf, outputs, used, tables=tables)
    write_sidecar(rec, sidecar)
    return rec
