"""Facebook's table beside two buffers (issue 41, step 4; docs/population.md "The answer, side
by side"), for bulk transfers and live broadcasts (issue 58, item 4; docs/live.md "Facebook's
table, live"): every row of Facebook's production table of Copa and BBR
(analysis.facebook.FACEBOOK) with our change against Cubic under each buffer model a population
was measured with, per tool and direction, and for live runs Facebook's RTX-overhead rows, which
its deck gives in words only (analysis.facebook.FACEBOOK_STATED).

Each column is one population run's ``percentiles.parquet`` (analysis.population): the same
households, variants, repetitions and seeded household bootstrap, only the bottleneck's FIFO
differs (``qfactor``: 2 x BDP; ``mba-2014``: the FCC panel's 2014 queue under load,
links.buffers) and the application (``app``: ``bulk`` transfers, or ``live`` broadcasts, whose
columns are Facebook's own per-broadcast metrics: analysis.facebook.LIVE_METRIC_OF). A row of
the table (:data:`ANSWER_SCHEMA`) is one Facebook number under one run: Facebook's change (or
its words, ``facebook_says``), ours (the group change, P_p(variant) / P_p(cubic) - 1, as
Facebook reported it, with its 95 % bootstrap interval, and the two percentiles) and the paired
per-household change with its interval; ``facebook_inside`` says whether Facebook's number lies
inside our group interval (a stated row: our whole interval on the side it states).
:func:`to_markdown` prints one (tool, direction) as Facebook | run 1 | run 2 | ...

The runs paired (:data:`PAIRS`) are named by their config files; a pair is answered when both
of its runs are complete on disk (rules/depth.smk, rule ``buffers_answer``), with the runs
:data:`BESIDE` it that are on disk too (the policed live run). A pair's rows cover the
directions all its runs have; a (tool, direction) shows every pair that has it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd
import pyarrow as pa

from latency_divide.analysis.facebook import (
    FACEBOOK_STATED,
    LIVE_METRIC_OF,
    METRIC_NAMES,
    _pct,
    side_by_side,
)
from latency_divide.analysis.schemas import read_versioned, write_versioned
from latency_divide.errors import LatencyDivideError
from latency_divide.fsio import write_text_atomic

#: Version of :data:`ANSWER_SCHEMA`; bump on any change of columns, types or meaning.
ANSWER_SCHEMA_VERSION = 2
TABLE_NAME = "buffers_answer"

#: (2 x BDP run, measured-buffers run) config files of one tool and app, in the table's order.
PAIRS: tuple[tuple[str, str], ...] = (
    ("config/population.yaml", "config/population-buffers.yaml"),
    ("config/population-mvfst.yaml", "config/population-mvfst-buffers.yaml"),
    ("config/live.yaml", "config/live-buffers.yaml"),
)
#: Further runs of a pair's tool and app, a column each after the pair's two when on disk:
#: the policed live run (40 of the 240 uplinks, each behind a policer at its rate).
BESIDE: dict[tuple[str, str], tuple[str, ...]] = {
    ("config/live.yaml", "config/live-buffers.yaml"): ("config/live-policed.yaml",),
}
#: The applications of a run (:func:`app_of`), in a (tool, direction)'s column order.
APPS = ("bulk", "live")

ANSWER_SCHEMA = pa.schema([
    ("tool", pa.string()),
    ("direction", pa.string()),
    ("app", pa.string()),  # bulk (transfers) or live (broadcasts): APPS
    ("buffer_model", pa.string()),  # links.buffers model: qfactor (2 x BDP), mba-2014, ...
    ("run", pa.string()),  # the population run's name (its config file's stem)
    ("facebook_metric", pa.string()),  # Facebook's metric, named by the bulk trials' column
    ("metric", pa.string()),  # ours: the run's trials-table column (live: LIVE_METRIC_OF)
    ("percentile", pa.float64()),
    ("group", pa.string()),  # Facebook's group: copa or bbr
    ("variant", pa.string()),  # ours standing for it (analysis.facebook.VARIANT_OF)
    ("facebook", pa.float64()),  # Facebook's change against Cubic (fraction; NaN: in words)
    ("facebook_says", pa.string()),  # Facebook's words where it gives no number (else null)
    ("change", pa.float64()),  # ours, group change (fraction)
    ("ci_low", pa.float64()),
    ("ci_high", pa.float64()),
    ("paired", pa.float64()),  # ours, paired per-household change
    ("paired_low", pa.float64()),
    ("paired_high", pa.float64()),
    ("value", pa.float64()),  # ours, the variant's percentile (the metric's unit)
    ("cubic_value", pa.float64()),  # ours, Cubic's percentile
    ("n_households", pa.int64()),
    ("facebook_inside", pa.bool_()),  # Facebook's number inside our group interval
])


class AnswerInputError(LatencyDivideError):
    """The percentile tables cannot be set side by side (the message says why)."""


def answer_pairs(companions, present) -> list[tuple]:
    """The :data:`PAIRS` whose two runs are both present, as (2 x BDP, measured, then each run
    :data:`BESIDE` the pair that is present) Companion objects (rules/common.smk's COMPANIONS
    and COMPANIONS_PRESENT)."""
    here = {Path(c.configfile).as_posix(): c for c in present}
    return [tuple(here[c] for c in (a, b, *BESIDE.get((a, b), ())) if c in here)
            for a, b in PAIRS if a in here and b in here]


def app_of(cfg) -> str:
    """A run's application (:data:`APPS`): ``live`` when a variant of its config broadcasts
    (docs/live.md, "The config"), else ``bulk``."""
    return "live" if any("-app=live" in cfg.tool_for(v).args for v in cfg.variants) else "bulk"


def _run(run) -> tuple[str, str, pd.DataFrame, str]:
    name, model, pct, *app = run
    app = app[0] if app else "bulk"
    if app not in APPS:
        raise AnswerInputError(f"run {name}: app {app!r}, not one of {', '.join(APPS)}")
    return name, model, pct, app


def answer_table(runs: Sequence[tuple]) -> pd.DataFrame:
    """The side-by-side table of ``runs``: (run name, buffer model, its percentiles table[,
    app]), each with one tool; app ``bulk`` when not given. The runs of one tool and app (a
    pair) cover the directions all of them have (mvfst's measured buffers are run on uplinks
    only, Facebook's case; the live runs too). A live run's rows are Facebook's metrics as
    Facebook defined them (:data:`LIVE_METRIC_OF`), and its RTX-overhead rows after them."""
    groups: dict[tuple[str, str], list] = {}
    for run in runs:
        run, model, pct, app = _run(run)
        found = sorted(pct["tool"].unique())
        if len(found) != 1:
            raise AnswerInputError(f"run {run}: its percentile table has tools {found}; one")
        groups.setdefault((found[0], app), []).append((run, model, pct))
    rows = []
    for (tool, app), its in groups.items():
        directions = set.intersection(*(set(pct["direction"]) for _, _, pct in its))
        if not directions:
            raise AnswerInputError(
                f"runs {', '.join(r for r, _, _ in its)} ({tool}) share no direction: "
                + "; ".join(f"{r}: {', '.join(sorted(set(p['direction'])))}" for r, _, p in its))
        live = {"metric_of": LIVE_METRIC_OF, "stated": FACEBOOK_STATED} if app == "live" else {}
        for run, model, pct in its:
            for direction in sorted(directions):
                sbs = side_by_side(pct, direction=direction, tool=tool, **live)
                rows.append(sbs.rename(columns={"ours": "change", "agrees": "facebook_inside",
                                                "says": "facebook_says"})
                            .assign(tool=tool, direction=direction, app=app,
                                    buffer_model=model, run=run))
    if not rows:
        raise AnswerInputError("no run to set side by side")
    out = pd.concat(rows, ignore_index=True)
    out["n_households"] = out["n_households"].astype("int64")
    out["percentile"] = out["percentile"].astype("float64")
    out["facebook_inside"] = out["facebook_inside"].astype(bool)
    out["facebook_says"] = out["facebook_says"].astype("str")  # missing: NaN, as read back
    return out[ANSWER_SCHEMA.names]


def _heading(app: str, model: str, apps: list[str]) -> str:
    """A column's heading: the buffer model, after the app when the (tool, direction) has more
    than bulk runs."""
    label = "2 x BDP" if model == "qfactor" else model
    return f"{label} [95 % CI]" if apps == ["bulk"] else f"{app} {label} [95 % CI]"


def _facebook_cell(r) -> str:
    says = r.facebook_says
    return f"{says} (no number)" if isinstance(says, str) else _pct(r.facebook)


def _cell(r) -> str:
    """Our group change [95 % CI] (``*``: Facebook inside); a stated row has our percentiles
    too: (variant's / Cubic's)."""
    values = "" if not isinstance(r.facebook_says, str) else (
        " (" + " / ".join("n/a" if v != v else f"{v:.3f}" for v in (r.value, r.cubic_value))
        + ")")
    return (f"{_pct(r.change)} [{_pct(r.ci_low)}, {_pct(r.ci_high)}]{values}"
            f"{' *' if r.facebook_inside else ''}")


def to_markdown(df: pd.DataFrame, tool: str, direction: str) -> str:
    """One tool and direction of the table in Markdown: Facebook, then our group change
    [95 % CI] under each run in the table's order, bulk before live (``*``: Facebook's
    number inside our interval); a row a run does not have (RTX overhead of a bulk
    transfer): "not measured"."""
    d = df[(df["tool"] == tool) & (df["direction"] == direction)]
    if d.empty:
        raise AnswerInputError(f"no rows for tool {tool}, direction {direction}")
    apps = [a for a in APPS if a in set(d["app"])]
    columns = [(a, m) for a in apps for m in dict.fromkeys(d.loc[d["app"] == a, "buffer_model"])]
    head = ["metric", "percentile", "group", "Facebook",
            *[_heading(a, m, apps) for a, m in columns]]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    by: dict[tuple, dict] = {col: {} for col in columns}  # (app, model) -> key -> its row
    for r in d.itertuples(index=False):
        by[(r.app, r.buffer_model)].setdefault((r.facebook_metric, r.percentile, r.group), r)
    for key in dict.fromkeys(zip(d["facebook_metric"], d["percentile"], d["group"])):
        here = [by[col].get(key) for col in columns]
        first = next(r for r in here if r is not None)
        cells = ["not measured" if r is None else _cell(r) for r in here]
        out.append("| " + " | ".join([METRIC_NAMES.get(key[0], key[0]), f"p{key[1]:g}", key[2],
                                      _facebook_cell(first), *cells]) + " |")
    return "\n".join(out)


#: Under a (tool, direction) with live runs: what their columns are.
LIVE_NOTE = (
    "Live columns: Facebook's own per-broadcast metrics (docs/live.md, \"The columns\"): "
    "goodput = application bytes acknowledged / broadcast (`goodput_fb_kbps`), application "
    "RTT = the pings on their own priority stream (`app_rtt_mean_ms`), transport RTT, RTX "
    "overhead = bytes retransmitted / bytes acknowledged (`rtx_overhead`). Facebook gives RTX "
    "overhead in words only (slide \"RTX Overhead\", IETF 106 ICCRG \"Copa at Facebook\": "
    "\"lower for 90% of broadcasts\", \"grows rapidly for the last 10%\"): its rows show our "
    "Copa's and Cubic's percentiles in parentheses, and `*` where our whole interval lies on "
    "the side Facebook states.")


def all_markdown(df: pd.DataFrame) -> str:
    """Every (tool, direction) of the table, each under its own heading (with
    :data:`LIVE_NOTE` and each live run's households under one with live runs)."""
    parts = ["Change against Cubic (group view) with 95 % household-bootstrap intervals; "
             "`*`: Facebook's number inside our interval."]
    for tool, direction in df[["tool", "direction"]].drop_duplicates().itertuples(index=False):
        parts += ["", f"## {tool}, {direction}s", "", to_markdown(df, tool, direction)]
        live = df[(df["tool"] == tool) & (df["direction"] == direction) & (df["app"] == "live")]
        if not live.empty:  # the note, and each live run's households (the policed run: 40)
            n = live.groupby("run", sort=False)["n_households"].max()
            parts += ["", LIVE_NOTE + " Households: "
                      + ", ".join(f"{run} {k}" for run, k in n.items()) + "."]
    return "\n".join(parts) + "\n"


def build_answer(runs: Sequence[dict], table_out: Path | str, md_out: Path | str
                 ) -> pd.DataFrame:
    """Read each run's percentile table (``runs``: dicts of name, buffer_model, percentiles
    and app, ``bulk`` when absent), then write the table (Parquet) and its Markdown, each temp
    file then rename."""
    from latency_divide.analysis.population import read_percentiles

    df = answer_table([(r["name"], r["buffer_model"], read_percentiles(r["percentiles"]),
                        r.get("app", "bulk")) for r in runs])
    write_versioned(df, table_out, ANSWER_SCHEMA, name=TABLE_NAME,
                    version=ANSWER_SCHEMA_VERSION)
    write_text_atomic(md_out, all_markdown(df))
    return df


def read_answer(path: Path | str) -> pd.DataFrame:
    """Read the table, checking its name and schema version."""
    return read_versioned(path, version=ANSWER_SCHEMA_VERSION, name=TABLE_NAME)
