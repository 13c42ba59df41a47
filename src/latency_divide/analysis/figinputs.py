"""What the figures of one data set share in a figures job (analysis.jobs): its tables, each
read once, and its figures' provenance, each trial's record built once.

A figures job draws up to six figures from one data set's tables (rules/figures.smk); before
issue 59 each figure read the trials table again, the self-induced delay figure read the whole
ping table (every column of 757,000 rows in a population run: 0.7 s, 0.1 s with the five it
draws), and each sidecar ran git twice and built the same per-trial records again. The
figures are the same either way (bench/bench_figures.py compares them byte for byte).

:class:`FigureInputs` is what analysis.figures.make_figure and
analysis.population_figures.make_population_figure read through; without one, each figure
makes its own (a figure drawn alone, as `latency-divide` and the tests draw them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

import pandas as pd
import pyarrow.parquet as pq

from latency_divide.errors import LatencyDivideError

#: table name -> its file under a data set's tables directory
FILES = {
    "trials": "trials.parquet",
    "summary": "summary.parquet",
    "ping": "timeseries/ping.parquet",
    "queue": "timeseries/queue.parquet",
    "throughput": "timeseries/throughput.parquet",
    "percentiles": "percentiles.parquet",
}


class FigureInputs:
    """The tables under ``tables_dir`` and the provenance of the figures drawn from them, read
    and built once (frames are handed out as copies: pandas copies on write)."""

    def __init__(self, tables_dir: Path | str):
        self.dir = Path(tables_dir)
        self._rev: tuple[str | None] | None = None  # (git revision,) once asked
        self._tables: dict[tuple, pd.DataFrame] = {}
        self._records: dict = {}  # provenance.build_sidecar's per-trial records, by row

    def path(self, name: str) -> Path:
        return self.dir / FILES[name]

    def table(self, name: str, columns: Sequence[str] | None = None,
              household: int | None = None) -> pd.DataFrame:
        """Table ``name`` (schema version and name checked), only ``columns`` if given, only
        ``household``'s rows if given (filtered while reading)."""
        key = (name, tuple(columns) if columns else None, household)
        if key not in self._tables:
            self._tables[key] = self._read(name, columns, household)
        return self._tables[key].copy(deep=False)

    def _read(self, name: str, columns, household) -> pd.DataFrame:
        from latency_divide.analysis.population import (
            PERCENTILES_SCHEMA_VERSION,
            TABLE_NAME,
            read_percentiles,
        )
        from latency_divide.analysis.tables import SCHEMA_VERSION, read_table

        path = self.path(name)
        filters = None if household is None else [("household_id", "=", int(household))]
        if name == TABLE_NAME and columns is None:
            return read_percentiles(path)
        if columns is None:
            return read_table(path, name, filters=filters)
        # schemas.read_versioned's check, for a read of some columns (it reads them all)
        version = PERCENTILES_SCHEMA_VERSION if name == TABLE_NAME else SCHEMA_VERSION
        md = pq.read_schema(path).metadata or {}
        got = md.get(b"latency_divide.table", b"").decode()
        got_version = md.get(b"latency_divide.schema_version", b"").decode()
        if got_version != str(version) or got != name:
            raise LatencyDivideError(
                f"{path}: table {got or 'unnamed'!r} schema version {got_version or 'missing'!r}; "
                f"this code reads {name!r} version {version}")
        return pq.read_table(path, columns=list(columns), filters=filters).to_pandas()

    def sidecar(self, figure: Path | str, outputs: Iterable[Path | str], trials: pd.DataFrame,
                tables: Iterable[Path | str] = ()) -> dict:
        """provenance.build_sidecar, with the git revision asked once and each trial's record
        built once for all the figures of these tables."""
        from latency_divide.analysis.provenance import build_sidecar
        from latency_divide.paths import git_revision

        if self._rev is None:
            self._rev = (git_revision(),)
        # outside a git checkout (None) build_sidecar asks again, and records None
        return build_sidecar(figure, outputs, trials, tables=tables, git_rev=self._rev[0],
                             records=self._records)
