"""The figure of the mechanism check (analysis.live_mechanism; docs/live-mechanism.md):
``live_mechanism``, for each household (rows, by the link's rate) and variant (columns) the
bitrate the ABR chose (a step per rung change, held to the broadcast's end, or to the last
change of a truncated timeline) with the link's
rate as a dashed line, and below it the bottleneck queue as ms of delay at the link's rate,
over the broadcast; one colour per condition (the first results tree's, e.g. 2 x BDP FIFO,
and any other's, e.g. the policed run's broadcasts of the same households beside it).

The clocks are the broadcast's (analysis.live_mechanism's module doc). :func:`mechanism_frame`
and :func:`mechanism_plot` take parsed broadcasts and frames and never read files (testable);
:func:`build_mechanism_figure` writes PDF, PNG and the provenance sidecar (analysis.provenance),
as analysis.live_figures does. Deterministic for a given input with SOURCE_DATE_EPOCH set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd

from latency_divide.analysis.figures import FigureError, _cat, _theme, save, variant_order
from latency_divide.analysis.live_mechanism import Broadcast

NAME = "live_mechanism"
BITRATE = "bitrate kbit/s"
QUEUE = "queue ms"
#: A bitrate row is drawn up to this many times the link's rate (the start-up's first decision
#: reaches the top rung, 4000 kbit/s, for tens of ms): the rungs around the rate stay readable.
CLIP = 2.0


def _row(b: Broadcast, metric: str, condition: str = "") -> str:
    return f"{b.keys['household_id']}\n{b.capacity_kbps:g} kbit/s\n{metric}" + (
        f"\n{condition}" if condition else "")


def mechanism_frame(used: Sequence[Broadcast]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(long frame of row, variant, condition, t_s, metric, value; the link rates' frame of
    row, variant, rate_kbps). Rows, households by increasing rate: a bitrate row per
    condition (values above :data:`CLIP` x the rate drawn at it), then one queue row (every
    condition's); conditions in the order they first appear in ``used``."""
    if not used:
        raise FigureError(f"{NAME}: no broadcast to draw")
    conds = list(dict.fromkeys(b.keys["condition"] for b in used))
    parts, rates = [], []
    for b in used:
        tl, c = b.timeline, b.keys["condition"]
        # a truncated timeline (its first 2000 entries) ends at its last change
        end = tl[-1][0] if b.truncated else max(float(b.live["broadcast_s"]), tl[-1][0])
        base = {"household_id": b.keys["household_id"], "capacity_kbps": b.capacity_kbps,
                "variant": b.keys["variant"], "condition": c}
        row = _row(b, BITRATE, c if len(conds) > 1 else "")
        parts.append(pd.DataFrame({**base, "row": row, "o": conds.index(c), "metric": BITRATE,
                                   "t_s": [t for t, _ in tl] + [end],
                                   "value": [min(k, CLIP * b.capacity_kbps) for _, k in tl]
                                   + [min(tl[-1][1], CLIP * b.capacity_kbps)]}))
        parts.append(pd.DataFrame({**base, "row": _row(b, QUEUE), "o": len(conds),
                                   "metric": QUEUE, "t_s": b.queue["t_s"].to_numpy(),
                                   "value": b.queue["queue_ms"].to_numpy()}))
        rates.append({"row": row, "variant": b.keys["variant"], "rate_kbps": b.capacity_kbps})
    frame = pd.concat(parts, ignore_index=True)
    order = (frame[["row", "capacity_kbps", "household_id", "o"]].drop_duplicates("row")
             .sort_values(["capacity_kbps", "household_id", "o"])["row"].tolist())
    # the first condition drawn last (on top of the others in the queue rows)
    frame = frame.sort_values("o", ascending=False, kind="stable")
    frame = _cat(_cat(frame, "row", order), "condition", conds)
    return frame, _cat(pd.DataFrame(rates).drop_duplicates(["row", "variant"]), "row", order)


def mechanism_plot(frame: pd.DataFrame, rates: pd.DataFrame, variants: Sequence[str]):
    from plotnine import (aes, element_text, facet_grid, geom_hline, geom_line, geom_step,
                          ggplot, labs, scale_colour_manual, theme)

    v = [x for x in variants if x in set(frame["variant"])]
    d, r = _cat(frame, "variant", v), _cat(rates, "variant", v)
    colours = ["#1b6ca8", "#d95f02", "#7570b3", "#1b9e77"][:len(d["condition"].cat.categories)]
    return (
        ggplot(d, aes("t_s", "value", colour="condition"))
        + geom_hline(r, aes(yintercept="rate_kbps"), linetype="dashed", size=0.4,
                     colour="black")
        + geom_step(d[d["metric"] == BITRATE], direction="hv", size=0.3)
        + geom_line(d[d["metric"] == QUEUE], size=0.3)
        + facet_grid("row ~ variant", scales="free_y")
        + scale_colour_manual(values=colours)
        + labs(x="time since the broadcast started (s)", colour="",
               y="bitrate (kbit/s; the link's rate dashed) / queue (ms at the link's rate)",
               title="The rate ABR's bitrate and the bottleneck queue, per household "
               f"(bitrate drawn up to {CLIP:g} x the link's rate)")
        + _theme() + theme(strip_text_y=element_text(angle=0, size=8),
                           legend_position="top")
    )


def build_mechanism_figure(used: Sequence[Broadcast], pdf: Path | str, png: Path | str,
                           sidecar: Path | str, tables: Sequence[Path | str] = ()) -> dict:
    """Draw :data:`NAME` from parsed broadcasts (analysis.live_mechanism.collect's) and write
    PDF, PNG and the provenance sidecar naming their trials and ``tables``."""
    from latency_divide.analysis.provenance import build_sidecar, write_sidecar

    frame, rates = mechanism_frame(used)
    keys = pd.DataFrame([b.keys for b in used])
    plot = mechanism_plot(frame, rates, variant_order(keys))
    n_rows = frame["row"].nunique()
    outputs = save(plot, pdf, png, width=max(7.5, 2.4 * keys["variant"].nunique() + 1.8),
                   height=max(4.0, 1.0 * n_rows + 1.0), dpi=100)
    rec = build_sidecar(pdf, outputs, keys, tables=list(tables))
    write_sidecar(rec, sidecar)
    return rec
