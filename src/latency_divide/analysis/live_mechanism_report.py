"""The per-variant summary of the mechanism check (analysis.live_mechanism, whose module doc
defines every per-broadcast column; docs/live-mechanism.md), its Markdown, and :func:`build`,
which reads the results trees and writes the tables: ``live_mechanism.parquet`` (a row per
broadcast), ``live_mechanism_switches.parquet`` (a row per rung change),
``live_mechanism_rungs.parquet`` (seconds at each rung), ``live_mechanism_summary.parquet``
and ``live_mechanism.md``, each a temporary file renamed into place (analysis.schemas).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import pandas as pd
import pyarrow as pa

from latency_divide.analysis.live_mechanism import (BROADCASTS_SCHEMA, QUEUE_RISE_RTT,
                                                    RUNGS_SCHEMA, SCHEMA_VERSION,
                                                    SWITCHES_SCHEMA, collect, live_trials)

_F, _I, _S = pa.float64(), pa.int64(), pa.string()
SUMMARY_COLUMNS = ["condition", "variant", "households", "bitrate_over_rate",
                   "share_at_rung_below", "share_above", "higher_than_cubic",
                   "bitrate_vs_cubic_pct", "switches_down", "down_queue_led_share",
                   "up_queue_led_share", "down_deep", "deep_queue_led_share",
                   "seconds_queue_high_share", "queue_median_ms", "down_sender_led_share",
                   "deep_sender_led_share", "seconds_sender_high_share",
                   "sender_wait_median_ms", "rtx_overhead", "frames_dropped_pct"]
SUMMARY_SCHEMA = pa.schema([("condition", _S), ("variant", _S), ("households", _I),
                            ("higher_than_cubic", _S)] +
                           [(c, _F) for c in SUMMARY_COLUMNS[3:] if c != "higher_than_cubic"])


def summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Per condition and variant, over households: means of the per-broadcast ratios and
    shares; the ``*_led_share`` columns pooled over the broadcasts' switches (weighted by
    their counts: rows' shares x switches); ``higher_than_cubic`` "k of
    n": households whose mean bitrate is above Cubic's under the same condition, and
    ``bitrate_vs_cubic_pct`` the mean of their changes (%; NaN for Cubic itself)."""
    out = []
    for (cond, var), g in rows.groupby(["condition", "variant"], sort=True):
        cub = rows[(rows["condition"] == cond) & (rows["variant"] == "cubic")]
        m = g.merge(cub[["household_id", "bitrate_mean_kbps"]], on="household_id",
                    suffixes=("", "_cubic"))
        dn, up = g["switches_down"], g["switches_up"]
        led = {f"{k}_{w}_led_share": (g[f"{k}_{w}_led_share"].fillna(0) * n).sum() / n.sum()
               if n.sum() else math.nan for k, n in (("down", dn), ("up", up),
                                                     ("deep", g["down_deep"]))
               for w in ("queue", "sender") if f"{k}_{w}_led_share" in g}
        out.append({"condition": cond, "variant": var, "households": len(g),
                    "bitrate_over_rate": g["bitrate_over_rate"].mean(),
                    "share_at_rung_below": g["share_at_rung_below"].mean(),
                    "share_above": g["share_above"].mean(),
                    "higher_than_cubic": "" if var == "cubic" or m.empty else
                    f"{int((m['bitrate_mean_kbps'] > m['bitrate_mean_kbps_cubic']).sum())} "
                    f"of {len(m)}",
                    "bitrate_vs_cubic_pct": math.nan if var == "cubic" or m.empty else float(
                        (100 * (m["bitrate_mean_kbps"] / m["bitrate_mean_kbps_cubic"] - 1))
                        .mean()),
                    "switches_down": dn.mean(),
                    **led, "sender_wait_median_ms": g["sender_wait_median_ms"].mean(),
                    "seconds_sender_high_share": g["seconds_sender_high_share"].mean(),
                    "down_deep": g["down_deep"].mean(),
                    "seconds_queue_high_share": g["seconds_queue_high_share"].mean(),
                    "queue_median_ms": g["queue_median_ms"].mean(),
                    "rtx_overhead": g["rtx_overhead"].mean(),
                    "frames_dropped_pct": g["frames_dropped_pct"].mean()})
    return pd.DataFrame(out, columns=SUMMARY_COLUMNS)


#: The Markdown's columns: (header, column, decimals; None: as it is); a header-less column
#: joins the one before it in one cell.
_LED = [("queue-led: down, deep, seconds", "down_queue_led_share", 2),
        ("", "deep_queue_led_share", 2), ("", "seconds_queue_high_share", 2),
        ("sender-led: down, deep, seconds", "down_sender_led_share", 2),
        ("", "deep_sender_led_share", 2), ("", "seconds_sender_high_share", 2)]
_SUMMARY_MD = [("condition", "condition", None), ("variant", "variant", None),
               ("households", "households", None), ("bitrate / rate", "bitrate_over_rate", 2),
               ("at rung below, above", "share_at_rung_below", 2), ("", "share_above", 2),
               ("higher than Cubic", "higher_than_cubic", None),
               ("bitrate vs Cubic %", "bitrate_vs_cubic_pct", 1),
               ("down-switches, deep", "switches_down", 0), ("", "down_deep", 0)] + _LED + [
               ("queue median ms", "queue_median_ms", 1),
               ("sender wait median ms", "sender_wait_median_ms", 0),
               ("RTX overhead", "rtx_overhead", 3), ("frames dropped %", "frames_dropped_pct", 2)]
_ROWS_MD = [("condition", "condition", None), ("household", "household_id", None),
            ("rate kbit/s", "capacity_kbps", 0), ("variant", "variant", None),
            ("rung below", "rung_below_kbps", 0), ("at it, above", "share_at_rung_below", 2),
            ("", "share_above", 2), ("bitrate / rate", "bitrate_over_rate", 2),
            ("down, deep", "switches_down", None), ("", "down_deep", None)] + _LED + [
            ("queue p50, p95 ms", "queue_median_ms", 0), ("", "queue_p95_ms", 0),
            ("sender wait p50 ms", "sender_wait_median_ms", 0),
            ("FIFO drops/s before down, all", "down_fifo_drops_per_s", 1),
            ("", "fifo_drops_per_s", 1), ("RTX overhead", "rtx_overhead", 3),
            ("frames dropped", "frames_dropped", None)]


def _md(df: pd.DataFrame, cols) -> list[str]:
    def cell(v, nd):
        if v is None or (isinstance(v, float) and math.isnan(v)) or v == "":
            return "n/a" if nd is not None else "-"
        return str(v) if nd is None else f"{v:.{nd}f}"

    head = [h for h, _, _ in cols if h] or []
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in df.to_dict("records"):
        cells = [cell(r[c], nd) for _, c, nd in cols]
        for k in range(len(cols) - 1, 0, -1):  # a header-less column joins the one before
            if not cols[k][0]:
                cells[k - 1:k + 1] = [f"{cells[k - 1]}, {cells[k]}"]
        out.append("| " + " | ".join(cells) + " |")
    return out


def markdown(rows: pd.DataFrame, summ: pd.DataFrame) -> str:
    """The summary and the per-broadcast table, Markdown."""
    return "\n".join([
        f"Queue-led (sender-led): the second before held >= {QUEUE_RISE_RTT:g} base RTT more "
        "bottleneck queue (in-band minus priority ping RTT) than the broadcast's median; "
        "'seconds': the share of all its seconds that did (the base rate); deep: a "
        "down-switch below the rung below the link. Shares of broadcast time or of "
        "switches (analysis.live_mechanism).", ""] + _md(summ, _SUMMARY_MD) + [
        ""] + _md(rows.sort_values(["condition", "capacity_kbps", "variant"]), _ROWS_MD)) + "\n"


def build(raw_dirs: Sequence[Path | str], out_dir: Path | str,
          households: Sequence[int] | None = None) -> dict:
    """Read the trees' live broadcasts (``households``: only these; None: those of the first
    tree), write ``live_mechanism{,_switches,_rungs,_summary}.parquet`` and
    ``live_mechanism.md`` under ``out_dir`` (temp file, then rename); return the frames."""
    from latency_divide.analysis.schemas import write_versioned
    from latency_divide.fsio import write_text_atomic

    if households is None:
        households = sorted({int(p.parent.parent.parent.name)
                             for p in live_trials(raw_dirs[:1])})
    rows, sw, rungs, used = collect(live_trials(raw_dirs, households))
    summ = summary(rows)
    out = Path(out_dir)
    for name, df, schema in (("live_mechanism", rows, BROADCASTS_SCHEMA),
                             ("live_mechanism_switches", sw, SWITCHES_SCHEMA),
                             ("live_mechanism_rungs", rungs, RUNGS_SCHEMA),
                             ("live_mechanism_summary", summ, SUMMARY_SCHEMA)):
        write_versioned(df, out / f"{name}.parquet", schema, name=name, version=SCHEMA_VERSION)
    write_text_atomic(out / "live_mechanism.md", markdown(rows, summ))
    return {"broadcasts": rows, "switches": sw, "rungs": rungs, "summary": summ, "used": used}
