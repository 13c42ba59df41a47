"""The bodies of the workflow's analysis jobs (workflow/scripts/ calls these): one data set's
tables, one data set's figures. A job for all companions runs them once per companion, in one
process, so that the imports are paid once (rules/analysis.smk, rules/figures.smk); a figures
job with more than one thread draws its figures in that many processes (:func:`draw_figures`)."""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass
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


@dataclass(frozen=True)
class FigureTask:
    """One figure of a figures job: drawn from the tables under ``tables`` into ``paths``
    (PDF, PNG, provenance sidecar)."""
    figure: str
    tables: str
    paths: tuple[str, str, str]
    household: int | None = None
    household_order: tuple[int, ...] = ()


def figure_tasks(figures: Sequence[str], trials_table: str, out: Callable[[str], str],
                 household: int | None = None,
                 household_order: Sequence[int] = ()) -> list[FigureTask]:
    """The tasks of ``figures`` from the tables beside ``trials_table``; ``out(name)`` is the path
    of output ``<figure>_{pdf,png,provenance}``."""
    tables = str(Path(trials_table).parent)
    return [FigureTask(fig, tables, (out(f"{fig}_pdf"), out(f"{fig}_png"),
                                     out(f"{fig}_provenance")),
                       household, tuple(int(h) for h in household_order)) for fig in figures]


#: this process's FigureInputs by tables directory (a figures job's figures of one data set
#: share them: analysis.figinputs)
_INPUTS: dict = {}


def _draw(task: FigureTask) -> tuple[str, int, int, float]:
    """Draw one task: (PDF path, trials, households, seconds)."""
    from latency_divide.analysis.figinputs import FigureInputs
    from latency_divide.analysis.figures import build_figure
    from latency_divide.analysis.population_figures import (
        POPULATION_FIGURES,
        build_population_figure,
    )

    t0 = time.monotonic()
    inputs = _INPUTS.setdefault(task.tables, FigureInputs(task.tables))
    if task.figure in POPULATION_FIGURES:  # a population run's (the percentile view)
        rec = build_population_figure(task.figure, task.tables, *task.paths, inputs=inputs)
    else:
        rec = build_figure(task.figure, task.tables, *task.paths, household=task.household,
                           household_order=task.household_order, inputs=inputs)
    return (task.paths[0], len(rec["trials"]), sum(len(v) for v in rec["households"].values()),
            time.monotonic() - t0)


def draw_figures(tasks: Sequence[FigureTask], processes: int = 1) -> None:
    """Draw every task, each figure as it is drawn alone (bench/bench_figures.py compares the
    bytes), and log each with its time. ``processes`` (the rule's ``threads``, which Snakemake
    caps at ``--cores``): above 1, that many processes forked after the imports draw the tasks
    as each frees up; 1 (``--cores 1``), this process draws them in turn."""
    def log(pdf, n, hh, dt):
        logging.info("%s: %d trials of %d households (%.2f s)", pdf, n, hh, dt)

    _INPUTS.clear()  # the tables may have changed since an earlier job in this process
    try:
        if processes <= 1 or len(tasks) < 2:
            for t in tasks:
                log(*_draw(t))
        else:
            _pool(tasks, processes, log)
    finally:
        _INPUTS.clear()


def _pool(tasks: Sequence[FigureTask], processes: int, log: Callable) -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    import matplotlib.pyplot  # noqa: F401  (imported here once, not in every process forked)
    import plotnine  # noqa: F401

    import latency_divide.analysis.plotgeoms  # noqa: F401
    import latency_divide.analysis.population_figures  # noqa: F401

    with ProcessPoolExecutor(min(processes, len(tasks)),
                             mp_context=multiprocessing.get_context("fork")) as pool:
        futures = [pool.submit(_draw, t) for t in tasks]
        try:
            for f in as_completed(futures):
                log(*f.result())
        except BaseException:
            for f in futures:
                f.cancel()
            raise


def figures_job(figures: Sequence[str], trials_table: str, out: Callable[[str], str],
                household: int | None = None, household_order: Sequence[int] = (),
                processes: int = 1) -> None:
    """Draw ``figures`` from the tables beside ``trials_table`` (:func:`draw_figures`);
    ``out(name)`` is the path of output ``<figure>_{pdf,png,provenance}``."""
    draw_figures(figure_tasks(figures, trials_table, out, household, household_order),
                 processes)
