"""The buffer-depth sweep's figure and its job (issue 41, step 3; analysis.depth).

``buffer_depth``: one panel per tool in the table (tquic-perf, then mvfst's tperf: analysis.depth
.SWEEP_CONFIGS' order), stacked, on one x axis: the change of the transport RTT against Cubic at
p90 (y, %, the group change with its 95 % bootstrap interval) against the uplink buffer depth
(x, ms, log scale), one line with points per variant through the swept steps (2 x BDP at the
households' median FIFO, then 100, 200, 500 and 1000 ms); the measured buffers (mba-2014, at
the households' median FIFO) as a point of its own shape, off the line; in every panel
Facebook's change for the same group and percentile (analysis.facebook.FACEBOOK) as a dashed
horizontal line in the variant's colour, labelled "Facebook".

:func:`depth_plot` takes the table and returns a ``ggplot`` (no I/O); :func:`build_buffer_depth`
is the workflow job (rules/depth.smk): trials tables -> the table, the figure as PDF and PNG,
and its provenance sidecar (analysis.provenance, like every figure's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from latency_divide.analysis.depth import (
    MEASURED_MODEL,
    SWEEP_CONFIGS,
    VARIANTS,
    Step,
    depth_table,
    households_of,
    select,
    step_tool,
    uplink_fifos,
    write_depth_table,
)
from latency_divide.analysis.facebook import FACEBOOK, VARIANT_OF
from latency_divide.analysis.figures import WIDTH_IN, FigureError, _cat, _theme, save
from latency_divide.analysis.population import BASELINE, MIN_RESAMPLES

FIGURE = "buffer_depth"
#: What the figure shows: Facebook's headline worst-connections number.
METRIC, PERCENTILE = "transport_rtt_mean_ms", 90.0
#: Shapes of the steps' kinds.
KINDS = {"fixed": "N ms (fixed)", "qfactor": "2 x BDP (median)",
         MEASURED_MODEL: "measured, mba-2014 (median)"}
#: Colours of the variants (the figure's own: BBR and Copa apart at a glance).
COLOURS = {"copa-0.04": "#1b6ca8", "bbr": "#d9661f"}
#: Half the spread (log10 units) of the variants side by side at one depth.
DODGE = 0.02
#: Height (inches) of the figure with one tool's panel, and of each further tool's panel.
HEIGHT_IN, PANEL_IN = 4.5, 3.0


def _kind(model: str) -> str:
    return KINDS.get(model, KINDS["fixed"])


def depth_plot(table: pd.DataFrame, metric: str = METRIC, percentile: float = PERCENTILE):
    """Change against Cubic (%) at ``percentile`` of ``metric`` against buffer depth, one panel
    per tool."""
    from plotnine import (
        aes,
        facet_wrap,
        geom_errorbar,
        geom_hline,
        geom_line,
        geom_point,
        geom_label,
        ggplot,
        labs,
        scale_colour_manual,
        scale_shape_manual,
        scale_x_log10,
        theme,
    )

    d = table[(table["metric"] == metric) & (table["percentile"] == float(percentile))
              & np.isfinite(table["change_pct"])]
    if d.empty:
        raise FigureError(f"{FIGURE}: no change of {metric} at p{percentile:g} in the table")
    variants = [v for v in VARIANTS if v in set(d["variant"])] + sorted(
        set(d["variant"]) - set(VARIANTS))
    offset = {v: (i - (len(variants) - 1) / 2) * 2 * DODGE for i, v in enumerate(variants)}
    d = d.assign(x=d["depth_ms"] * 10 ** d["variant"].map(offset).astype(float),
                 kind=[_kind(m) for m in d["buffer_model"]])
    tools = [t for t in SWEEP_CONFIGS if t in set(d["tool"])] + sorted(
        set(d["tool"]) - set(SWEEP_CONFIGS))
    d = _cat(_cat(d, "variant", variants), "tool", tools)
    d = _cat(d, "kind", [k for k in KINDS.values() if k in set(d["kind"])])
    line = d[d["buffer_model"] != MEASURED_MODEL]
    steps = d.drop_duplicates(["buffer_model", "depth_ms"]).sort_values("depth_ms")
    labels = [f"{x:.0f}" if k == "fixed" else f"{x:.0f}\n{s.split(' (')[0]}"
              for x, k, s in zip(steps["depth_ms"], steps["depth_kind"], steps["step"])]
    fb = pd.DataFrame([{"variant": VARIANT_OF[p.variant], "y": 100 * p.change}
                       for p in FACEBOOK if p.metric == metric
                       and float(p.percentile) == float(percentile)
                       and VARIANT_OF[p.variant] in variants])
    plot = (ggplot(d, aes("x", "change_pct", colour="variant"))
            + geom_hline(yintercept=0, colour="grey"))
    if not fb.empty:
        fb = _cat(fb, "variant", variants).assign(
            x=float(np.sqrt(steps["depth_ms"].iloc[0] * steps["depth_ms"].iloc[1]))
            if len(steps) > 1 else float(steps["depth_ms"].iloc[0]),
            label=[f"Facebook {v}: {y:+.1f} %" for v, y in zip(fb["variant"], fb["y"])])
        plot += geom_hline(fb, aes(yintercept="y", colour="variant"), linetype="dashed",
                           size=0.8, show_legend=False)
        plot += geom_label(fb, aes("x", "y", label="label", colour="variant"), size=7,
                           fill="white", label_size=0, show_legend=False)
    ci = d[np.isfinite(d["ci_low_pct"]) & np.isfinite(d["ci_high_pct"])]
    return (plot
            + facet_wrap("tool", ncol=1)
            + geom_line(line, aes(group="variant"))
            + geom_errorbar(ci, aes(ymin="ci_low_pct", ymax="ci_high_pct"), width=0.03)
            + geom_point(aes(shape="kind"), size=2.4, fill="white")
            + scale_shape_manual(values={KINDS["fixed"]: "o", KINDS["qfactor"]: "^",
                                         KINDS[MEASURED_MODEL]: "D"})
            + scale_colour_manual(values={v: COLOURS.get(v, "#555555") for v in variants})
            + scale_x_log10(breaks=list(steps["depth_ms"]), labels=labels)
            + labs(x="uplink buffer depth (ms of queue at the household's rate; log scale)",
                   y=f"transport RTT p{percentile:g}\nchange against {BASELINE} (%)"
                   if metric == METRIC else f"{metric} p{percentile:g}\nchange against "
                   f"{BASELINE} (%)",
                   colour="variant", shape="buffer")
            + _theme()
            + theme(legend_position="bottom", legend_box="vertical"))


def build_buffer_depth(steps: Sequence[Mapping],
                       households: Sequence[int] | Mapping[str, Sequence[int]],
                       table_out: Path | str, pdf: Path | str, png: Path | str,
                       sidecar: Path | str, *, seed: int = 1,
                       n_resamples: int = MIN_RESAMPLES) -> dict:
    """The workflow job: each of ``steps`` ({"buffer_model", "qfactor", "tool", "trials": its
    trials table}; no "tool": its trials') read, the table written to ``table_out``, the figure
    to ``pdf`` and ``png`` and its provenance (the trials the table used, the trials tables and
    the table) to ``sidecar``. ``households``: every tool's, or per tool (a mapping)."""
    from latency_divide.analysis.provenance import build_sidecar, write_sidecar
    from latency_divide.analysis.tables import read_table

    built = []
    for s in steps:
        m, trials, q = s["buffer_model"], read_table(s["trials"], "trials"), s.get("qfactor", 2.0)
        tool = step_tool(Step(m, trials, pd.DataFrame(), q, s.get("tool")))
        fifo = uplink_fifos(households_of(households, tool), m, q)
        built.append(Step(m, trials, fifo, q, tool))
    table = depth_table(built, households, seed=seed, n_resamples=n_resamples)
    write_depth_table(table, table_out)
    used = pd.concat([select(s, households_of(households, s.tool)) for s in built],
                     ignore_index=True)
    n_tools = table["tool"].nunique()
    outputs = save(depth_plot(table), pdf, png, width=WIDTH_IN,
                   height=HEIGHT_IN + PANEL_IN * (n_tools - 1))
    rec = build_sidecar(pdf, outputs, used,
                        tables=[*(s["trials"] for s in steps), table_out])
    write_sidecar(rec, sidecar)
    return rec
