"""The bodies of the workflow's analysis jobs (workflow/scripts/ calls these): one data set's
tables, one data set's figures. A job for all companions runs them once per companion, in one
process, so that the imports are paid once (rules/analysis.smk, rules/figures.smk)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Callable, Sequence

from latency_divide.errors import LatencyDivideError


def tables_job(metas: Sequence[str], trials_out: str, jobs: int, what: str = "") -> None:
    """Check and parse the trials of ``metas`` into the tables beside ``trials_out``. A finding
    (analysis.integrity) or no usable trial exits with the error, naming ``what`` (a data set)."""
    from latency_divide.analysis.tables import build_tables

    dirs = [Path(m).parent for m in metas]
    try:
        t = build_tables(dirs, Path(trials_out).parent, jobs=jobs)
    except LatencyDivideError as e:
        logging.error("%s%s", f"{what}: " if what else "", e)
        sys.exit(f"[latency-divide] analysis{f' of {what}' if what else ''} stopped: {e}")
    logging.info("%stables from %d of %d trials; %d excluded (exclusions.parquet)",
                 f"{what}: " if what else "", len(t.trials), len(dirs), len(t.skipped))
    for e in t.skipped:
        print(f"[latency-divide] excluded trial {e}", file=sys.stderr)


def figures_job(figures: Sequence[str], trials_table: str, out: Callable[[str], str],
                household: int | None = None, household_order: Sequence[int] = ()) -> None:
    """Draw ``figures`` from the tables beside ``trials_table``; ``out(name)`` is the path of
    output ``<figure>_{pdf,png,provenance}``."""
    from latency_divide.analysis.figures import build_figure
    from latency_divide.analysis.population_figures import (
        POPULATION_FIGURES,
        build_population_figure,
    )

    tables = Path(trials_table).parent
    for fig in figures:
        paths = (out(f"{fig}_pdf"), out(f"{fig}_png"), out(f"{fig}_provenance"))
        if fig in POPULATION_FIGURES:  # a population run's (the percentile view)
            rec = build_population_figure(fig, tables, *paths)
        else:
            rec = build_figure(fig, tables, *paths, household=household,
                               household_order=household_order)
        logging.info("%s: %d trials of %d households", paths[0], len(rec["trials"]),
                     sum(len(v) for v in rec["households"].values()))
