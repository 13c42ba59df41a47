"""Facebook's table beside two buffers (issue 41, step 4; docs/population.md "The answer, side
by side"): every row of Facebook's production table of Copa and BBR (analysis.facebook.FACEBOOK)
with our change against Cubic under each buffer model a population was measured with, per tool
and direction.

Each column is one population run's ``percentiles.parquet`` (analysis.population): the same
households, variants, repetitions and seeded household bootstrap, only the bottleneck's FIFO
differs (``qfactor``: 2 x BDP; ``mba-2014``: the FCC panel's 2014 queue under load,
links.buffers). A row of the table (:data:`ANSWER_SCHEMA`) is one Facebook number under one
buffer model: Facebook's change, ours (the group change, P_p(variant) / P_p(cubic) - 1, as
Facebook reported it, with its 95 % bootstrap interval) and the paired per-household change
with its interval; ``facebook_inside`` says whether Facebook's number lies inside our group
interval. :func:`to_markdown` prints one (tool, direction) as Facebook | model 1 | model 2.

The runs paired (:data:`PAIRS`) are named by their config files; a pair is answered when both
of its runs are complete on disk (rules/depth.smk, rule ``buffers_answer``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd
import pyarrow as pa

from latency_divide.analysis.facebook import METRIC_NAMES, _pct, side_by_side
from latency_divide.analysis.schemas import read_versioned, write_versioned
from latency_divide.errors import LatencyDivideError
from latency_divide.fsio import write_text_atomic

#: Version of :data:`ANSWER_SCHEMA`; bump on any change of columns, types or meaning.
ANSWER_SCHEMA_VERSION = 1
TABLE_NAME = "buffers_answer"

#: (2 x BDP run, measured-buffers run) config files of one tool, in the table's order.
PAIRS: tuple[tuple[str, str], ...] = (
    ("config/population.yaml", "config/population-buffers.yaml"),
    ("config/population-mvfst.yaml", "config/population-mvfst-buffers.yaml"),
)

ANSWER_SCHEMA = pa.schema([
    ("tool", pa.string()),
    ("direction", pa.string()),
    ("buffer_model", pa.string()),  # links.buffers model: qfactor (2 x BDP), mba-2014, ...
    ("run", pa.string()),  # the population run's name (its config file's stem)
    ("metric", pa.string()),  # trials-table column
    ("percentile", pa.float64()),
    ("group", pa.string()),  # Facebook's group: copa or bbr
    ("variant", pa.string()),  # ours standing for it (analysis.facebook.VARIANT_OF)
    ("facebook", pa.float64()),  # Facebook's change against Cubic (fraction)
    ("change", pa.float64()),  # ours, group change (fraction)
    ("ci_low", pa.float64()),
    ("ci_high", pa.float64()),
    ("paired", pa.float64()),  # ours, paired per-household change
    ("paired_low", pa.float64()),
    ("paired_high", pa.float64()),
    ("n_households", pa.int64()),
    ("facebook_inside", pa.bool_()),  # Facebook's number inside our group interval
])


class AnswerInputError(LatencyDivideError):
    """The percentile tables cannot be set side by side (the message says why)."""


def answer_pairs(companions, present) -> list[tuple]:
    """The :data:`PAIRS` whose two runs are both present, as (2 x BDP, measured) Companion
    objects (rules/common.smk's COMPANIONS and COMPANIONS_PRESENT)."""
    here = {Path(c.configfile).as_posix(): c for c in present}
    return [(here[a], here[b]) for a, b in PAIRS if a in here and b in here]


def answer_table(runs: Sequence[tuple[str, str, pd.DataFrame]]) -> pd.DataFrame:
    """The side-by-side table of ``runs``: (run name, buffer model, its percentiles table),
    each with one tool. A tool's rows cover the directions all of its runs have (mvfst's
    measured buffers are run on uplinks only, Facebook's case)."""
    tools: dict[str, list] = {}
    for run, model, pct in runs:
        found = sorted(pct["tool"].unique())
        if len(found) != 1:
            raise AnswerInputError(f"run {run}: its percentile table has tools {found}; one")
        tools.setdefault(found[0], []).append((run, model, pct))
    rows = []
    for tool, its in tools.items():
        directions = set.intersection(*(set(pct["direction"]) for _, _, pct in its))
        if not directions:
            raise AnswerInputError(
                f"runs {', '.join(r for r, _, _ in its)} ({tool}) share no direction: "
                + "; ".join(f"{r}: {', '.join(sorted(set(p['direction'])))}" for r, _, p in its))
        for run, model, pct in its:
            for direction in sorted(directions):
                sbs = side_by_side(pct, direction=direction, tool=tool)
                rows.append(sbs.rename(columns={"ours": "change", "agrees": "facebook_inside"})
                            .assign(tool=tool, direction=direction, buffer_model=model, run=run))
    if not rows:
        raise AnswerInputError("no run to set side by side")
    out = pd.concat(rows, ignore_index=True)
    out["n_households"] = out["n_households"].astype("int64")
    out["percentile"] = out["percentile"].astype("float64")
    out["facebook_inside"] = out["facebook_inside"].astype(bool)
    return out[ANSWER_SCHEMA.names]


def to_markdown(df: pd.DataFrame, tool: str, direction: str) -> str:
    """One tool and direction of the table in Markdown: Facebook, then our group change
    [95 % CI] under each buffer model in the table's order (``*``: Facebook's number inside
    our interval)."""
    d = df[(df["tool"] == tool) & (df["direction"] == direction)]
    if d.empty:
        raise AnswerInputError(f"no rows for tool {tool}, direction {direction}")
    models = list(dict.fromkeys(d["buffer_model"]))
    head = ["metric", "percentile", "group", "Facebook", *[
        f"{'2 x BDP' if m == 'qfactor' else m} [95 % CI]" for m in models]]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    first = d[d["buffer_model"] == models[0]]
    for key in first[["metric", "percentile", "group"]].itertuples(index=False):
        cells = [METRIC_NAMES.get(key.metric, key.metric), f"p{key.percentile:g}", key.group]
        for i, m in enumerate(models):
            r = d[(d["buffer_model"] == m) & (d["metric"] == key.metric)
                  & (d["percentile"] == key.percentile) & (d["group"] == key.group)].iloc[0]
            if i == 0:
                cells.append(_pct(r.facebook))
            cells.append(f"{_pct(r.change)} [{_pct(r.ci_low)}, {_pct(r.ci_high)}]"
                         f"{' *' if r.facebook_inside else ''}")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def all_markdown(df: pd.DataFrame) -> str:
    """Every (tool, direction) of the table, each under its own heading."""
    parts = ["Change against Cubic (group view) with 95 % household-bootstrap intervals; "
             "`*`: Facebook's number inside our interval."]
    for tool, direction in df[["tool", "direction"]].drop_duplicates().itertuples(index=False):
        parts += ["", f"## {tool}, {direction}s", "", to_markdown(df, tool, direction)]
    return "\n".join(parts) + "\n"


def build_answer(runs: Sequence[dict], table_out: Path | str, md_out: Path | str
                 ) -> pd.DataFrame:
    """Read each run's percentile table (``runs``: dicts of name, buffer_model, percentiles),
    then write the table (Parquet) and its Markdown, each temp file then rename."""
    from latency_divide.analysis.population import read_percentiles

    df = answer_table([(r["name"], r["buffer_model"], read_percentiles(r["percentiles"]))
                       for r in runs])
    write_versioned(df, table_out, ANSWER_SCHEMA, name=TABLE_NAME,
                    version=ANSWER_SCHEMA_VERSION)
    write_text_atomic(md_out, all_markdown(df))
    return df


def read_answer(path: Path | str) -> pd.DataFrame:
    """Read the table, checking its name and schema version."""
    return read_versioned(path, version=ANSWER_SCHEMA_VERSION, name=TABLE_NAME)
