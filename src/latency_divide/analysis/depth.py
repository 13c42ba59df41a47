"""Buffer depth as a factor (issue 41, step 3; docs/population.md "Buffer depth as a factor: the
sweep"): Facebook's percentile changes against Cubic, step by step of the uplink buffer, per tool.

A sweep per tool (:data:`SWEEP_CONFIGS`; tquic-perf, mvfst's tperf): the uplinks of 40 of the
population's households (those of the tool's fixed-depth configs) under Cubic, BBR and Copa δ
0.04, each step a buffer model: the tool's population run's 2 x BDP (``qfactor``), 100, 200, 500
and 1000 ms of queue at the household's rate (``queue-<N>ms``, config/buffer-depth-<N>ms.yaml,
config/buffer-depth-mvfst-<N>ms.yaml) and, when measured, the FCC panel's buffers
(``mba-2014``). Each step's trials come from its companion's trials table
(results/companions/<name>/tables/trials.parquet). Every tool whose required steps are all
present (:func:`sweep_companions`) has its rows in the table (``tool``).

Per tool and step (:func:`depth_table`):

- **Trials**: the step's uplink trials of the sweep's households, repetition 1 only (the
  population run has repetitions 2 and 3 of 4 of the 40; every other step has one trial per
  household, variant and step), variants Cubic and :data:`VARIANTS`.
- **Changes against Cubic**: :func:`latency_divide.analysis.population.percentile_table` on
  them, over the whole sample (no price buckets): per-household means, equal household weights
  (the 40 are a proportional stratified draw from a self-weighting sample, as
  analysis.population_figures.build_percentiles weights the population), the group change
  (Facebook's: P_p(variant) / P_p(cubic) - 1) and the paired one, each with its 95 % interval
  of the seeded household bootstrap (1,000 resamples; a block's generator depends on the seed
  and the block's name only, so every step resamples the same households alike). Only the
  (metric, percentile) pairs of Facebook's table (analysis.facebook.FACEBOOK): transport RTT
  p75, p90, p95; application RTT (ping) p50, p90; goodput p10, p50. In % (x 100).
- **Depth** (``depth_ms``): N for ``queue-<N>ms`` (``depth_kind`` "fixed"); for a step whose
  FIFO differs by household (2 x BDP, mba-2014) the median over the households of their uplink
  FIFO in ms at their uplink rate, bytes x 8 / rate in kbit/s (``depth_kind`` "median");
  ``depth_p10_ms`` and ``depth_p90_ms`` give the spread. FIFOs from the link plan the trials
  ran with (:func:`uplink_fifos`: links.plan.make_linkplan with the step's model).
- **Loss and queue**: per variant the median over households of the sender's loss rate
  (``sender_loss_pct``), of the mean queue (``queue_mean_bytes``) and of the mean queue as a
  share of the household's FIFO (%), Cubic's beside; NaN where no trial has the column.

A required step of a tool, or a variant at a step, that is missing is an error naming it
(:class:`DepthInputError`); a household without a trial at a step is left out of that step's
percentiles (``n_households``). :func:`write_depth_table` writes the table (Parquet, temp file
then rename), :data:`DEPTH_SCHEMA`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from latency_divide.analysis.facebook import FACEBOOK, VARIANT_OF
from latency_divide.analysis.population import BASELINE, MIN_RESAMPLES, percentile_table
from latency_divide.analysis.schemas import read_versioned, write_versioned
from latency_divide.errors import LatencyDivideError

#: Version of :data:`DEPTH_SCHEMA`; bump on any change of columns, types or meaning.
#: 2: the table holds the sweeps of several tools, one row per tool, step, variant and pair.
DEPTH_SCHEMA_VERSION = 2
TABLE_NAME = "buffer_depth"
#: The variants compared with Cubic (Facebook's groups: Copa δ 0.04 and BBR).
VARIANTS: tuple[str, ...] = ("copa-0.04", "bbr")
DIRECTION = "uplink"
#: The steps every sweep has (buffer models) and the optional one (measured buffers).
REQUIRED_MODELS = ("qfactor", "queue-100ms", "queue-200ms", "queue-500ms", "queue-1000ms")
MEASURED_MODEL = "mba-2014"
#: Per tool (in the table's and figure's order), its sweep's companion configs
#: (config/config.yaml `companions`), one per step, and whether each is needed.
SWEEP_CONFIGS: dict[str, tuple[tuple[str, bool], ...]] = {
    "tquic-perf": (
        ("config/population.yaml", True),
        *((f"config/buffer-depth-{n}ms.yaml", True) for n in (100, 200, 500, 1000)),
        ("config/population-buffers.yaml", False),
    ),
    "tperf": (
        ("config/population-mvfst.yaml", True),
        *((f"config/buffer-depth-mvfst-{n}ms.yaml", True) for n in (100, 200, 500, 1000)),
        ("config/population-mvfst-buffers.yaml", False),
    ),
}
#: Facebook's (metric, percentile) pairs, in its table's order.
PAIRS: tuple[tuple[str, float], ...] = tuple(dict.fromkeys((p.metric, float(p.percentile))
                                                           for p in FACEBOOK))
_FB = {(p.metric, float(p.percentile), VARIANT_OF[p.variant]): 100 * p.change for p in FACEBOOK}

DEPTH_SCHEMA = pa.schema([
    ("step", pa.string()),  # "2 x BDP", "100 ms", ..., "measured (mba-2014)"
    ("buffer_model", pa.string()),  # qfactor, queue-<N>ms, mba-2014
    ("depth_ms", pa.float64()),  # N, or the households' median FIFO in ms (depth_kind)
    ("depth_kind", pa.string()),  # "fixed" or "median"
    ("depth_p10_ms", pa.float64()),
    ("depth_p90_ms", pa.float64()),
    ("tool", pa.string()),  # the sweep's tool (SWEEP_CONFIGS): tquic-perf, tperf
    ("variant", pa.string()),
    ("definition_id", pa.string()),
    ("cubic_definition_id", pa.string()),
    ("metric", pa.string()),  # trials-table column
    ("percentile", pa.float64()),
    ("value", pa.float64()),  # the variant's percentile of its per-household means
    ("cubic_value", pa.float64()),
    ("change_pct", pa.float64()),  # group change against Cubic, % (Facebook's way)
    ("ci_low_pct", pa.float64()),
    ("ci_high_pct", pa.float64()),
    ("change_paired_pct", pa.float64()),  # percentile of variant_h / cubic_h, minus 1, %
    ("ci_low_paired_pct", pa.float64()),
    ("ci_high_paired_pct", pa.float64()),
    ("facebook_pct", pa.float64()),  # Facebook's change for this metric, percentile, group
    ("n_households", pa.int64()),
    ("n_paired", pa.int64()),
    ("loss_median_pct", pa.float64()),  # median over households of sender_loss_pct
    ("cubic_loss_median_pct", pa.float64()),
    ("queue_median_bytes", pa.float64()),  # median over households of queue_mean_bytes
    ("queue_median_share_pct", pa.float64()),  # ... of queue_mean_bytes / the FIFO, %
    ("cubic_queue_median_share_pct", pa.float64()),
    ("n_resamples", pa.int64()),
    ("seed", pa.int64()),
])


class DepthInputError(LatencyDivideError):
    """The sweep's trials cannot give the table (the message names the step and what lacks)."""


def step_label(buffer_model: str, qfactor: float = 2.0) -> str:
    """The step's name in tables and figures: "2 x BDP", "100 ms", "measured (mba-2014)"."""
    if buffer_model == "qfactor":
        return f"{qfactor:g} x BDP"
    if buffer_model.startswith("queue-") and buffer_model.endswith("ms"):
        return f"{buffer_model[6:-2]} ms"
    return f"measured ({buffer_model})"


def fixed_depth(buffer_model: str) -> float | None:
    """N of ``queue-<N>ms``, None for a model whose depth differs by household."""
    from latency_divide.links.buffers import fixed_ms

    n = fixed_ms(buffer_model)
    return None if n is None else float(n)


def uplink_fifos(household_ids: Sequence[int], buffer_model: str, qfactor: float = 2.0,
                 data: str | Path | None = None) -> pd.DataFrame:
    """household_id, rate_kbit, fifo_bytes and fifo_ms (bytes x 8 / rate) of each household's
    uplink FIFO under ``buffer_model``, as its link plan gives it (the vendored data set)."""
    from latency_divide.data.households import get_household
    from latency_divide.links.plan import make_linkplan

    rows = []
    for h in household_ids:
        s = make_linkplan(get_household(int(h), data=data), qfactor=qfactor,
                          buffer_model=buffer_model).uplink
        rows.append({"household_id": int(h), "rate_kbit": float(s.rate_kbit),
                     "fifo_bytes": float(s.queue_bytes),
                     "fifo_ms": 8.0 * s.queue_bytes / s.rate_kbit})
    return pd.DataFrame(rows, columns=["household_id", "rate_kbit", "fifo_bytes", "fifo_ms"])


@dataclass(frozen=True)
class Step:
    """One step of a tool's sweep: its buffer model, its trials table (any rows: :func:`select`
    picks the sweep's), the households' uplink FIFOs under it (:func:`uplink_fifos`) and its
    tool (None: the one tool of its trials)."""

    buffer_model: str
    trials: pd.DataFrame = field(repr=False)
    fifo: pd.DataFrame = field(repr=False)
    qfactor: float = 2.0
    tool: str | None = None

    @property
    def label(self) -> str:
        return step_label(self.buffer_model, self.qfactor)

    @property
    def where(self) -> str:
        """The step in messages: "step 100 ms" or "tperf's step 100 ms"."""
        return f"{self.tool}'s step {self.label}" if self.tool else f"step {self.label}"


def step_tool(step: Step) -> str:
    """The step's tool: its own, else the one tool of its trials (several: DepthInputError)."""
    if step.tool:
        return step.tool
    tools = sorted(set(step.trials["tool"])) if "tool" in step.trials.columns else []
    if len(tools) != 1:
        raise DepthInputError(f"step {step.label}: trials of {len(tools)} tools "
                              f"({', '.join(tools) or 'none'}); one per step, or the step's tool")
    return tools[0]


def households_of(households: Sequence[int] | Mapping[str, Sequence[int]], tool: str) -> list:
    """The sweep's households of ``tool``: ``households[tool]`` for a mapping of tools, else
    ``households`` (every tool's); sorted, distinct. None: DepthInputError."""
    hh = households.get(tool, ()) if isinstance(households, Mapping) else households
    out = sorted({int(h) for h in hh})
    if not out:
        raise DepthInputError(f"no households for {tool}'s sweep: the sweep's are those of its "
                              "fixed-depth configs (SWEEP_CONFIGS)")
    return out


def select(step: Step, households: Sequence[int], variants: Sequence[str] = VARIANTS,
           repetition: int | None = 1) -> pd.DataFrame:
    """The step's trials the sweep uses: uplinks of ``households``, Cubic and ``variants``,
    ``repetition`` (None: all), of the step's tool when it has one. Raises DepthInputError when
    a variant has none."""
    t = step.trials
    need = [BASELINE, *variants]
    missing = [c for c in ("household_id", "direction", "variant", "repetition", "tool",
                           "definition_id") if c not in t.columns]
    if missing:
        raise DepthInputError(f"{step.where}: the trials table lacks {', '.join(missing)}")
    keep = (t["direction"] == DIRECTION) & t["household_id"].isin([int(h) for h in households])
    if step.tool:
        keep &= t["tool"] == step.tool
    if repetition is not None:
        keep &= t["repetition"] == repetition
    t = t[keep & t["variant"].isin(need)]
    lacking = [v for v in need if v not in set(t["variant"])]
    if lacking:
        raise DepthInputError(
            f"{step.where} (buffer model {step.buffer_model}): no {DIRECTION} trial of "
            f"variant(s) {', '.join(lacking)} of the sweep's {len(households)} households "
            f"(it has {', '.join(sorted(set(t['variant']))) or 'none'}); the sweep compares "
            f"{', '.join(variants)} with {BASELINE}")
    if t["tool"].nunique() != 1:
        raise DepthInputError(f"{step.where}: trials of several tools "
                              f"({', '.join(sorted(t['tool'].unique()))}); one per step")
    defs = t.groupby("variant")["definition_id"].nunique()
    if (defs > 1).any():
        raise DepthInputError(f"{step.where}: variant(s) {', '.join(defs.index[defs > 1])} "
                              "under several definitions; one per variant and step")
    return t


def _median(x: pd.Series) -> float:
    x = pd.to_numeric(x, errors="coerce").dropna()
    return float(np.median(x)) if len(x) else float("nan")


def _side(t: pd.DataFrame, fifo: pd.DataFrame) -> pd.DataFrame:
    """Per variant: median over households (means of their trials) of loss, queue and queue
    share of the FIFO."""
    cols = ["sender_loss_pct", "queue_mean_bytes"]
    t = t.assign(**{c: pd.to_numeric(t[c], errors="coerce") if c in t.columns else np.nan
                    for c in cols})
    hm = t.groupby(["variant", "household_id"])[cols].mean().reset_index()
    hm = hm.merge(fifo[["household_id", "fifo_bytes"]], on="household_id", how="left")
    hm["share"] = 100 * hm["queue_mean_bytes"] / hm["fifo_bytes"]
    return hm.groupby("variant").agg(loss=("sender_loss_pct", _median),
                                     queue=("queue_mean_bytes", _median),
                                     share=("share", _median))


def _depth(step: Step, households: Sequence[int]) -> dict:
    f = step.fifo[step.fifo["household_id"].isin([int(h) for h in households])]
    lacking = sorted(set(int(h) for h in households) - set(f["household_id"].astype(int)))
    if lacking:
        raise DepthInputError(f"{step.where}: no uplink FIFO for household(s) "
                              f"{', '.join(map(str, lacking[:10]))}")
    ms = f["fifo_ms"].to_numpy(dtype="float64")
    fixed = fixed_depth(step.buffer_model)
    return {"depth_ms": fixed if fixed is not None else float(np.median(ms)),
            "depth_kind": "fixed" if fixed is not None else "median",
            "depth_p10_ms": float(np.quantile(ms, 0.1)),
            "depth_p90_ms": float(np.quantile(ms, 0.9))}


def depth_table(steps: Sequence[Step],
                households: Sequence[int] | Mapping[str, Sequence[int]], *,
                variants: Sequence[str] = VARIANTS,
                required: Sequence[str] = REQUIRED_MODELS, repetition: int | None = 1,
                n_resamples: int = MIN_RESAMPLES, seed: int = 1) -> pd.DataFrame:
    """The sweeps' table (module docstring): one row per tool, step, variant and (metric,
    percentile) of :data:`PAIRS`, ordered by tool (:data:`SWEEP_CONFIGS`' order) and depth,
    with the columns of :data:`DEPTH_SCHEMA`. ``households``: every tool's, or per tool
    (:func:`households_of`); each tool's steps must hold ``required``."""
    by_tool: dict[str, list[Step]] = {}
    for step in steps:
        by_tool.setdefault(step_tool(step), []).append(step)
    if not by_tool:
        raise DepthInputError(f"no steps: the sweep needs {', '.join(required)}")
    metrics = list(dict.fromkeys(m for m, _ in PAIRS))
    pcts = sorted({p for _, p in PAIRS})
    frames: list[pd.DataFrame] = []
    for tool, tool_steps in by_tool.items():
        hh = households_of(households, tool)
        models = [s.buffer_model for s in tool_steps]
        dup = sorted({m for m in models if models.count(m) > 1})
        if dup:
            raise DepthInputError(f"buffer model(s) {', '.join(dup)} given as several steps "
                                  f"of {tool}'s sweep")
        lacking = [m for m in required if m not in models]
        if lacking:
            raise DepthInputError(
                f"the sweep lacks step(s) {', '.join(lacking)} for {tool} (given: "
                f"{', '.join(models) or 'none'}); it needs {', '.join(required)}")
        frames += [_step_rows(s, hh, variants, repetition, metrics, pcts, n_resamples, seed)
                   for s in tool_steps]
    out = pd.concat(frames, ignore_index=True)
    tools = [t for t in SWEEP_CONFIGS if t in by_tool] + sorted(set(by_tool) - set(SWEEP_CONFIGS))
    order = {p: i for i, p in enumerate(PAIRS)}
    out = out.assign(_t=out["tool"].map({t: i for i, t in enumerate(tools)}),
                     _v=out["variant"].map({v: i for i, v in enumerate(variants)}),
                     _p=[order[(m, float(p))] for m, p in zip(out["metric"], out["percentile"])])
    out = out.sort_values(["_t", "depth_ms", "buffer_model", "_v", "_p"], kind="stable")
    for c in ("n_households", "n_paired", "n_resamples", "seed"):
        out[c] = out[c].astype("int64")
    return out[DEPTH_SCHEMA.names].reset_index(drop=True)


def _step_rows(step: Step, households: Sequence[int], variants: Sequence[str],
               repetition: int | None, metrics: Sequence[str], pcts: Sequence[float],
               n_resamples: int, seed: int) -> pd.DataFrame:
    """One step's rows of :func:`depth_table` (before ordering)."""
    t = select(step, households, variants, repetition)
    pct = percentile_table(t.assign(weight=1.0), percentiles=pcts, metrics=metrics,
                           by_bucket=False, n_resamples=n_resamples, seed=seed)
    pct = pct[pct["variant"].isin(variants)
              & pd.Series(list(zip(pct["metric"], pct["percentile"])),
                          index=pct.index).isin(PAIRS)]
    side = _side(t, step.fifo)
    base_def = t.loc[t["variant"] == BASELINE, "definition_id"].iloc[0]
    return pd.DataFrame({
        "step": step.label, "buffer_model": step.buffer_model,
        **_depth(step, households),
        "tool": pct["tool"].to_numpy(), "variant": pct["variant"].to_numpy(),
        "definition_id": pct["definition_id"].to_numpy(), "cubic_definition_id": base_def,
        "metric": pct["metric"].to_numpy(), "percentile": pct["percentile"].to_numpy(),
        "value": pct["value"].to_numpy(), "cubic_value": pct["cubic_value"].to_numpy(),
        **{f"{a}_pct": 100 * pct[b].to_numpy() for a, b in (
            ("change", "change_group"), ("ci_low", "ci_low_group"),
            ("ci_high", "ci_high_group"), ("change_paired", "change_paired"),
            ("ci_low_paired", "ci_low_paired"), ("ci_high_paired", "ci_high_paired"))},
        "facebook_pct": [_FB.get((m, float(p), v), np.nan) for m, p, v in
                         zip(pct["metric"], pct["percentile"], pct["variant"])],
        "n_households": pct["n_households"].to_numpy(),
        "n_paired": pct["n_paired"].to_numpy(),
        "loss_median_pct": side["loss"].reindex(pct["variant"]).to_numpy(),
        "cubic_loss_median_pct": side.at[BASELINE, "loss"],
        "queue_median_bytes": side["queue"].reindex(pct["variant"]).to_numpy(),
        "queue_median_share_pct": side["share"].reindex(pct["variant"]).to_numpy(),
        "cubic_queue_median_share_pct": side.at[BASELINE, "share"],
        "n_resamples": int(n_resamples), "seed": int(seed),
    })


def write_depth_table(df: pd.DataFrame, path: Path | str) -> None:
    """Write the table with :data:`DEPTH_SCHEMA` (name and version in the Parquet metadata);
    temp file then rename (analysis.schemas.write_versioned)."""
    write_versioned(df, path, DEPTH_SCHEMA, name=TABLE_NAME, version=DEPTH_SCHEMA_VERSION)


def read_depth_table(path: Path | str) -> pd.DataFrame:
    """Read the table, checking its name and schema version."""
    return read_versioned(path, version=DEPTH_SCHEMA_VERSION, name=TABLE_NAME)


def sweep_companions(companions, present) -> tuple[list, dict[str, list[str]]]:
    """(the companions to analyse: those of every tool whose required steps are all present, in
    :data:`SWEEP_CONFIGS` order, an optional one (the measured buffers) when present; per tool
    left out, the config files of its required steps not present). ``companions``/``present``:
    analysis.companions' Companion objects (rules/common.smk's COMPANIONS, COMPANIONS_PRESENT).
    A config of a tool's sweep that runs another tool is a DepthInputError."""
    by_file = {Path(c.configfile).as_posix(): c for c in companions}
    here = {Path(c.configfile).as_posix() for c in present}
    chosen, missing = [], {}
    for tool, configs in SWEEP_CONFIGS.items():
        lacking = [f for f, req in configs if req and f not in here]
        if lacking:
            missing[tool] = lacking
            continue
        steps = [by_file[f] for f, _ in configs if f in here]
        wrong = [c.configfile for c in steps if c.cfg.tool.name != tool]
        if wrong:
            raise DepthInputError(f"{tool}'s sweep: {', '.join(wrong)} run(s) another tool")
        chosen += steps
    return chosen, missing


def sweep_households(companions) -> dict[str, list[int]]:
    """Per tool (its configs' ``tool.name``), the sweep's households: those of its fixed-depth
    configs, which must agree."""
    out: dict[str, list[int]] = {}
    for tool in dict.fromkeys(c.cfg.tool.name for c in companions):
        mine = [c for c in companions if c.cfg.tool.name == tool]
        sets = {c.name: sorted(int(h) for h in c.cfg.household_ids()) for c in mine
                if fixed_depth(c.cfg.buffer_model) is not None}
        if not sets:
            raise DepthInputError(f"{tool}'s sweep: no fixed-depth config (buffer_model "
                                  f"queue-<N>ms) among {', '.join(c.name for c in mine)}")
        first = next(iter(sets.values()))
        differ = [n for n, s in sets.items() if s != first]
        if differ:
            raise DepthInputError(f"{tool}'s sweep: its configs list other households: "
                                  f"{', '.join(differ)} against {next(iter(sets))}")
        out[tool] = first
    return out
