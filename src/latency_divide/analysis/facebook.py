"""Facebook's production percentile table of Copa, beside ours (issue 24, section 5).

Facebook's numbers (:data:`FACEBOOK`) are those of its A/B test of Copa and BBR against Cubic
in mvfst for Live video uploads (IETF 106 ICCRG slides, "Copa at Facebook",
../shared/seeds/copa-facebook-ietf106.txt, and Facebook's engineering blog, as quoted in issue
24): each group's percentile of per-upload averages, as a change against Cubic's same
percentile (P_p(group) / P_p(cubic) - 1). Its RTX overhead the deck gives in words only
(:data:`FACEBOOK_STATED`: no number, the side of Cubic's on which Copa's lies). Ours, from a
population run's ``percentiles.parquet`` (analysis.population), are the same "group" change of
per-household means, with its bootstrap 95 % interval, and the paired per-household change
beside it; a live run's are Facebook's own per-broadcast metrics (:data:`LIVE_METRIC_OF`).

:func:`side_by_side` joins the two; :func:`to_markdown` prints them
(``latency-divide percentiles``).
"""

from __future__ import annotations

import math
from typing import Mapping, NamedTuple, Sequence

import pandas as pd

#: Facebook's metric -> ours (trials-table columns): transport RTT (mean of QUIC's RTT samples),
#: application RTT (ping frames; ours: ping RTT during the transfer), goodput.
METRIC_NAMES = {
    "transport_rtt_mean_ms": "transport RTT",
    "rtt_mean_ms": "application RTT (ping)",
    "goodput_kbps": "goodput",
    "rtx_overhead": "RTX overhead",
}

#: Facebook's metric (named by the bulk trials' column, as in :data:`FACEBOOK`) -> the column of
#: a live broadcast that is Facebook's own definition (docs/live.md, "The columns"): goodput =
#: application bytes acknowledged / broadcast, application RTT = the pings on their own
#: priority stream (the slides do not say whether Facebook's waited behind video), transport RTT
#: the same column, RTX overhead = bytes retransmitted / bytes acknowledged.
LIVE_METRIC_OF = {
    "transport_rtt_mean_ms": "transport_rtt_mean_ms",
    "rtt_mean_ms": "app_rtt_mean_ms",
    "goodput_kbps": "goodput_fb_kbps",
    "rtx_overhead": "rtx_overhead",
}


class Published(NamedTuple):
    metric: str  # trials-table column
    percentile: float
    variant: str  # "copa" or "bbr"
    change: float  # fraction against Cubic (-0.35: 35 % below)


#: Facebook's published changes against Cubic (fractions). Copa ran at δ = 0.04 with competitive
#: mode off; BBR is v1.
FACEBOOK: tuple[Published, ...] = (
    Published("transport_rtt_mean_ms", 75, "copa", -0.35),
    Published("transport_rtt_mean_ms", 90, "copa", -0.38),
    Published("transport_rtt_mean_ms", 90, "bbr", -0.088),
    Published("transport_rtt_mean_ms", 95, "copa", -0.45),
    Published("rtt_mean_ms", 50, "copa", -0.04),
    Published("rtt_mean_ms", 50, "bbr", -0.08),
    Published("rtt_mean_ms", 90, "copa", -0.27),
    Published("rtt_mean_ms", 90, "bbr", 0.0),
    Published("goodput_kbps", 10, "copa", 0.06),
    Published("goodput_kbps", 10, "bbr", 0.04),
    Published("goodput_kbps", 50, "copa", 0.16),
    Published("goodput_kbps", 50, "bbr", 0.05),
)


class Stated(NamedTuple):
    """A row Facebook gives in words only: the side of Cubic's percentile its group's lies on."""
    metric: str  # trials-table column (Facebook's metric, as in :data:`FACEBOOK`)
    percentile: float
    variant: str  # "copa" or "bbr"
    sign: int  # -1: below Cubic's, +1: above
    says: str  # Facebook's words, short (the table's cell)


#: Facebook's RTX overhead (bytes re-transmitted / bytes acked by the transport, per broadcast),
#: slide "RTX Overhead" of the ICCRG deck (../shared/seeds/copa-facebook-ietf106.txt): "COPA RTX
#: overhead is lower for 90% of broadcasts [...] Grows rapidly for the last 10%" (and, on the
#: slides after it, "Strong indication that High RTX for last 10% of users in COPA are due to
#: Network policing"). The deck's chart is not in its text: no number, nothing of BBR's; the
#: rows are Copa's side of Cubic's below p90 (p10, p50, p75) and above it (p95).
FACEBOOK_STATED: tuple[Stated, ...] = (
    Stated("rtx_overhead", 10, "copa", -1, "lower"),
    Stated("rtx_overhead", 50, "copa", -1, "lower"),
    Stated("rtx_overhead", 75, "copa", -1, "lower"),
    Stated("rtx_overhead", 95, "copa", +1, "higher, growing fast"),
)

#: Our variant standing for Facebook's group.
VARIANT_OF = {"copa": "copa-0.04", "bbr": "bbr"}


def side_by_side(table: pd.DataFrame, direction: str = "uplink", bucket: str = "all",
                 tool: str | None = None, metric_of: Mapping[str, str] | None = None,
                 stated: Sequence[Stated] = ()) -> pd.DataFrame:
    """One row per number of :data:`FACEBOOK`, then per row of ``stated``
    (:data:`FACEBOOK_STATED`): Facebook's change (NaN for a stated row, whose words are in
    ``says``) and ours (group change with its interval, paired change with its interval, our
    percentiles ``value`` and ``cubic_value``, households) for ``direction`` and ``bucket`` of a
    percentiles table (one tool: ``tool``, or the table's only one). ``metric_of`` maps
    Facebook's metric to the table's (:data:`LIVE_METRIC_OF`; default: the same);
    ``facebook_metric`` is Facebook's, ``metric`` ours. ``agrees``: Facebook's number inside
    our group interval, or, for a stated row, our whole interval on the side it states."""
    tools = sorted(table["tool"].unique())
    if tool is None:
        if len(tools) != 1:
            raise ValueError(f"the table has tools {tools}: name one")
        tool = tools[0]
    t = table[(table["tool"] == tool) & (table["direction"] == direction)
              & (table["bucket"] == bucket)]
    rows = []
    for fb in (*FACEBOOK, *stated):
        metric = (metric_of or {}).get(fb.metric, fb.metric)
        ours = t[(t["metric"] == metric) & (t["percentile"] == fb.percentile)
                 & (t["variant"] == VARIANT_OF[fb.variant])]
        r = ours.iloc[0] if len(ours) else None

        def get(col):
            return float(r[col]) if r is not None else math.nan
        lo, hi = get("ci_low_group"), get("ci_high_group")
        if isinstance(fb, Stated):
            change, says = math.nan, fb.says
            agrees = bool(hi < 0) if fb.sign < 0 else bool(lo > 0)
        else:
            change, says, agrees = fb.change, None, bool(lo <= fb.change <= hi)
        rows.append({"facebook_metric": fb.metric, "metric": metric,
                     "percentile": fb.percentile, "group": fb.variant,
                     "variant": VARIANT_OF[fb.variant], "facebook": change, "says": says,
                     "ours": get("change_group"), "ci_low": lo, "ci_high": hi,
                     "paired": get("change_paired"), "paired_low": get("ci_low_paired"),
                     "paired_high": get("ci_high_paired"), "value": get("value"),
                     "cubic_value": get("cubic_value"),
                     "n_households": int(r["n_households"]) if r is not None else 0,
                     "agrees": agrees})
    return pd.DataFrame(rows)


def _pct(x: float) -> str:
    return "n/a" if x != x else f"{100 * x:+.0f} %"


def to_markdown(df: pd.DataFrame) -> str:
    """The side-by-side table in Markdown (percent, our 95 % intervals in brackets)."""
    out = ["| metric | percentile | group | Facebook | ours (group) [95 % CI] | "
           "ours (paired) [95 % CI] | households | Facebook's inside our CI |",
           "|---|---|---|---|---|---|---|---|"]
    for r in df.itertuples():
        out.append(f"| {METRIC_NAMES.get(r.metric, r.metric)} | p{r.percentile:g} | "
                   f"{r.group} ({r.variant}) | {_pct(r.facebook)} | {_pct(r.ours)} "
                   f"[{_pct(r.ci_low)}, {_pct(r.ci_high)}] | {_pct(r.paired)} "
                   f"[{_pct(r.paired_low)}, {_pct(r.paired_high)}] | {r.n_households} | "
                   f"{'yes' if r.agrees else 'no'} |")
    return "\n".join(out)
