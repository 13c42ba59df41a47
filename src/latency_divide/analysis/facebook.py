"""Facebook's production percentile table of Copa, beside ours (issue 24, section 5).

Facebook's numbers (:data:`FACEBOOK`) are those of its A/B test of Copa and BBR against Cubic
in mvfst for Live video uploads (IETF 106 ICCRG slides, "Copa at Facebook",
../shared/seeds/copa-facebook-ietf106.txt, and Facebook's engineering blog, as quoted in issue
24): each group's percentile of per-upload averages, as a change against Cubic's same
percentile (P_p(group) / P_p(cubic) - 1). Ours, from a population run's
``percentiles.parquet`` (analysis.population), are the same "group" change of per-household
means, with its bootstrap 95 % interval, and the paired per-household change beside it.

:func:`side_by_side` joins the two; :func:`to_markdown` prints them
(``latency-divide percentiles``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import pandas as pd

#: Facebook's metric -> ours (trials-table columns): transport RTT (mean of QUIC's RTT samples),
#: application RTT (ping frames; ours: ping RTT during the transfer), goodput.
METRIC_NAMES = {
    "transport_rtt_mean_ms": "transport RTT",
    "rtt_mean_ms": "application RTT (ping)",
    "goodput_kbps": "goodput",
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

#: Our variant standing for Facebook's group.
VARIANT_OF = {"copa": "copa-0.04", "bbr": "bbr"}


def side_by_side(table: pd.DataFrame, direction: str = "uplink", bucket: str = "all",
                 tool: str | None = None) -> pd.DataFrame:
    """One row per number of :data:`FACEBOOK`: Facebook's change and ours (group change with
    its interval, paired change with its interval, households) for ``direction`` and
    ``bucket`` of a percentiles table (one tool: ``tool``, or the table's only one)."""
    tools = sorted(table["tool"].unique())
    if tool is None:
        if len(tools) != 1:
            raise ValueError(f"the table has tools {tools}: name one")
        tool = tools[0]
    t = table[(table["tool"] == tool) & (table["direction"] == direction)
              & (table["bucket"] == bucket)]
    rows = []
    for fb in FACEBOOK:
        ours = t[(t["metric"] == fb.metric) & (t["percentile"] == fb.percentile)
                 & (t["variant"] == VARIANT_OF[fb.variant])]
        r = ours.iloc[0] if len(ours) else None

        def get(col):
            return float(r[col]) if r is not None else math.nan
        rows.append({"metric": fb.metric, "percentile": fb.percentile, "group": fb.variant,
                     "variant": VARIANT_OF[fb.variant], "facebook": fb.change,
                     "ours": get("change_group"), "ci_low": get("ci_low_group"),
                     "ci_high": get("ci_high_group"), "paired": get("change_paired"),
                     "paired_low": get("ci_low_paired"), "paired_high": get("ci_high_paired"),
                     "n_households": int(r["n_households"]) if r is not None else 0,
                     "agrees": (get("ci_low_group") <= fb.change <= get("ci_high_group"))
                     if r is not None else False})
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
