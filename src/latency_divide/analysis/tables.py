"""Raw trial directories -> typed Parquet tables (results/tables/; schemas: analysis.schemas).

:func:`build_tables` checks every trial directory (analysis.integrity: DVC pins, raw format,
identity) just before it parses it; a finding stops it with an error naming the trial and the
file, and no table is written. A trial that is intact but invalid by its
own data (truncated receiver log: the tool failed; no idle or no in-transfer RTT sample; no
queue sample; empty transfer window) raises :class:`TrialInvalid` naming the trial directory;
:func:`collect` leaves it out of the measurement tables, lists it with its reason in
``exclusions.parquet`` and warns (:class:`TrialSkipped`). Zero valid trials is an error, and so
are trials of one variant measured under different definitions (they are not one experiment).

:func:`summary` averages the repetitions within a household, then gives the mean and its 95 %
confidence interval over households (Student t) per price bucket, direction and variant.
:func:`write_table` / :func:`read_table` store a table through a temporary file and check its
schema version and name when reading it back.
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from latency_divide.analysis.metrics import _series, beyond_host_of, trial_row
from latency_divide.analysis.reader import TrialInvalid, TrialSkipped, load_trial
from latency_divide.analysis.schemas import (
    _STAT_COLS,
    EXCLUSIONS_SCHEMA,
    KEYS,
    PING_TS_SCHEMA,
    QUEUE_TS_SCHEMA,
    SCHEMA_VERSION,
    SCHEMAS,
    SUMMARY_SCHEMA,
    THROUGHPUT_TS_SCHEMA,
    TRIALS_SCHEMA,
    read_versioned,
    write_versioned,
)
from latency_divide.errors import LatencyDivideError
from latency_divide.trial.health import rejudge
from latency_divide.trial.layout import TrialPath, parse_trial_path


class NoValidTrials(LatencyDivideError):
    """None of the given trial directories could be used."""


def _keyed(parts: list[tuple[dict, dict[str, np.ndarray]]], schema: pa.Schema) -> pd.DataFrame:
    """One table from per-trial column arrays (metrics._series): each column concatenated
    once, the key columns prepended (each value repeated over its trial's rows)."""
    if not parts:
        return _empty(schema)
    lengths = np.array([len(next(iter(cols.values()))) for _, cols in parts])
    rows = np.repeat(np.arange(len(parts)), lengths)
    data = {}
    for k in KEYS:
        vals = [kv[k] for kv, _ in parts]
        if isinstance(vals[0], str):  # taken by Arrow (pandas' str columns are Arrow strings)
            data[k] = pd.array(pa.array(vals, pa.large_string()).take(pa.array(rows)),
                               dtype="str")
        else:
            data[k] = np.array(vals)[rows]
    for name in schema.names:
        if name not in data:
            data[name] = np.concatenate([cols[name] for _, cols in parts])
    return pd.DataFrame(data, columns=schema.names)


@dataclass
class Tables:
    trials: pd.DataFrame
    ping: pd.DataFrame
    queue: pd.DataFrame
    throughput: pd.DataFrame
    skipped: list[TrialInvalid]

    @property
    def exclusions(self) -> pd.DataFrame:
        """One row per trial left out, with its reason."""
        rows = []
        for e in self.skipped:
            p = Path(e.path)
            where = parse_trial_path(p) or TrialPath("", -1, "", "", -1)
            rows.append({"household_id": where.household, **where._asdict(),
                         "trial_path": p.as_posix(), "reason": e.reason})
        return _frame(rows, EXCLUSIONS_SCHEMA)


def _empty(schema: pa.Schema) -> pd.DataFrame:
    return schema.empty_table().to_pandas()


def _frame(rows_or_frames, schema: pa.Schema) -> pd.DataFrame:
    if not rows_or_frames:
        return _empty(schema)
    if isinstance(rows_or_frames[0], dict):
        df = pd.DataFrame.from_records(rows_or_frames)
    else:
        df = pd.concat(rows_or_frames, ignore_index=True)
    return df[schema.names]


#: The integrity checker of the running :func:`collect` (analysis.integrity.Checker), or None;
#: a module global, set in each worker process once by the pool's initializer (its dvc.lock
#: manifests are large: not pickled per task).
_CHECKER = None


def _process(d: Path | str):
    """Check (when a checker is set), then parse one trial: ("ok", row, keys, series),
    ("skip", TrialInvalid), ("findings", [integrity.Finding]) or, with a checker, ("error",
    exception): an unexpected error is raised only after every trial's findings."""
    if _CHECKER is not None:
        found = _CHECKER.check(d)
        if found:
            return ("findings", found)
        try:
            return _parse(d)
        except Exception as e:  # noqa: BLE001  raised after the findings of every trial
            return ("error", e)
    return _parse(d)


def _init_worker(checker) -> None:
    global _CHECKER
    _CHECKER = checker


def _parse(d: Path | str):
    try:
        trial = load_trial(d)
        row = trial_row(trial)
        if row["health_verdict"] == "fail":
            # the emulation did not hold while it measured (trial.health): its numbers are the
            # host's, not the link's; listed with the broken bounds, never averaged in
            reasons = "; ".join((rejudge(trial.meta) or {}).get("reasons", []))
            raise TrialInvalid(trial.path, f"emulation health failed: {reasons}")
        why = beyond_host_of(trial)
        if why:  # the timing held, but the host, not the link, may have limited it
            raise TrialInvalid(trial.path, f"beyond the host it ran on: {why}")
        series = _series(trial, row["base_rtt_measured_ms"])
    except TrialInvalid as e:
        return ("skip", e)
    return ("ok", row, {k: trial.keys[k] for k in KEYS}, series)


def _from_caches(dirs: list, checker) -> list[tuple[int, tuple]]:
    """(index in ``dirs``, result as :func:`_process` gives it) of every packed trial whose
    pack has a parsed cache of this code (analysis.parsedcache); with a ``checker``, each such
    pack is checked once instead of its trials one by one."""
    from latency_divide.analysis import parsedcache
    from latency_divide.trial import packs
    from latency_divide.trial.layout import META

    by_pack: dict[Path, list[tuple[int, Path, str]]] = {}
    by_def: dict[Path, dict] = {}  # a definition's packed trials, read once
    for i, d in enumerate(dirs):
        d = Path(d)
        if len(d.parts) < 5 or (d / META).exists():
            continue
        def_dir = d.parents[3]
        if def_dir not in by_def:
            by_def[def_dir] = packs.trials_in(def_dir)
        if (p := by_def[def_dir].get(packs.trial_key(d))) is not None:
            by_pack.setdefault(p.archive, []).append((i, d, p.key))
    out: list[tuple[int, tuple]] = []
    code = parsedcache.code_key() if by_pack else ""
    for archive, items in by_pack.items():
        cache, why = parsedcache.load(archive, code)
        if cache is None:
            logging.info("%s: %s: parsing its %d trials", archive, why, len(items))
            continue
        found = checker.check_pack(archive) if checker is not None else []
        if found:
            out.extend((i, ("findings", found if n == 0 else [])) for n, (i, _, _) in
                       enumerate(items))
            continue
        records = cache.trials.to_dict("records")
        for i, d, key in items:
            e = cache.entries.get(key)
            if e is None:
                continue  # not in the cache: parsed
            if e["status"] == "skip":
                out.append((i, ("skip", TrialInvalid(d, e["reason"]))))
                continue
            row = dict(records[e["row"]], trial_path=d.as_posix())
            series = {s: {c: v[e[s][0]:e[s][1]] for c, v in cache.series[s].items()}
                      for s in parsedcache.SERIES}
            out.append((i, ("ok", row, {k: row[k] for k in KEYS}, series)))
    return out


def collect(trial_dirs: Iterable[Path | str], jobs: int = 1, checker=None) -> Tables:
    """Parse every trial (in ``jobs`` worker processes when > 1); skip, with a
    :class:`TrialSkipped` warning naming it, every trial that cannot be used. With a
    ``checker`` (analysis.integrity.Checker), each trial is checked just before it is parsed,
    and any finding raises DataIntegrityError listing them all."""
    global _CHECKER
    dirs = list(trial_dirs)
    results: list = [None] * len(dirs)
    for i, res in _from_caches(dirs, checker):
        results[i] = res
    todo = [i for i, r in enumerate(results) if r is None]
    parse = [dirs[i] for i in todo]
    _CHECKER = checker
    try:
        if jobs > 1 and len(parse) > 1:
            from concurrent.futures import ProcessPoolExecutor

            # the checker reaches each worker once, by its initializer (any start method)
            with ProcessPoolExecutor(max_workers=jobs, initializer=_init_worker,
                                     initargs=(checker,)) as ex:
                parsed = list(ex.map(_process, parse,
                                     chunksize=max(1, len(parse) // (4 * jobs))))
        else:
            parsed = [_process(d) for d in parse]
    finally:
        _CHECKER = None
    for i, res in zip(todo, parsed):
        results[i] = res
    findings = [f for res in results if res[0] == "findings" for f in res[1]]
    if findings:
        from latency_divide.analysis.integrity import DataIntegrityError

        raise DataIntegrityError(findings)
    for res in results:
        if res[0] == "error":
            raise res[1]
    rows: list[dict] = []
    ts: dict[str, list] = {"ping": [], "queue": [], "throughput": []}
    skipped: list[TrialInvalid] = []
    seen = len(dirs)
    for res in results:
        if res[0] == "skip":
            e = res[1]
            skipped.append(e)
            warnings.warn(f"skipping trial {e}", TrialSkipped, stacklevel=2)
            continue
        _, row, keys, series = res
        rows.append(row)
        for k, v in series.items():
            ts[k].append((keys, v))
    if not rows:
        raise NoValidTrials(
            f"no valid trials among {seen} trial director{'y' if seen == 1 else 'ies'}"
            + (": " + "; ".join(str(e) for e in skipped[:5]) if skipped else "")
        )
    trials = _frame(rows, TRIALS_SCHEMA).sort_values(list(KEYS), kind="stable")
    dup = trials.duplicated(list(KEYS), keep=False)
    if dup.any():
        paths = ", ".join(trials.loc[dup, "trial_path"])
        raise LatencyDivideError(f"several trials share household/direction/variant/repetition: "
                                 f"{paths}")
    defs = trials.groupby("variant")["definition_id"].unique()
    mixed = {v: sorted(d) for v, d in defs.items() if len(d) > 1}
    if mixed:
        raise LatencyDivideError(
            "trials of one variant under different definitions would be mixed in one table: "
            + "; ".join(f"{v}: {', '.join(d)}" for v, d in mixed.items())
            + " (results/raw/<definition id>/definition.json says how they differ)")
    return Tables(
        trials=trials.reset_index(drop=True),
        ping=_keyed(ts["ping"], PING_TS_SCHEMA),
        queue=_keyed(ts["queue"], QUEUE_TS_SCHEMA),
        throughput=_keyed(ts["throughput"], THROUGHPUT_TS_SCHEMA),
        skipped=skipped,
    )


def t_quantile_975(dof: int) -> float:
    """Two-sided 95 % Student-t critical value (scipy.special.stdtrit: the t quantile, without
    importing all of scipy.stats)."""
    from scipy.special import stdtrit

    return float(stdtrit(dof, 0.975))


def summary(trials: pd.DataFrame) -> pd.DataFrame:
    """Per price_bucket x direction x variant: households, trials and mean +- 95 % CI.

    Repetitions are averaged within a household first; the CI is mean +- t(0.975, n-1) * sd/sqrt(n)
    over the n households (NaN when n = 1).
    """
    group = ["price_bucket", "direction", "variant", "definition_id"]
    per_hh = trials.groupby(group + ["household_id"], sort=True, observed=True).agg(
        trials=("repetition", "size"), **{c: (c, "mean") for c in _STAT_COLS}
    ).reset_index()
    out = []
    for key, g in per_hh.groupby(group, sort=True, observed=True):
        n = len(g)
        rec = dict(zip(group, key), households=n, trials=int(g["trials"].sum()))
        for c in _STAT_COLS:
            x = g[c].to_numpy(dtype="float64")
            m = float(x.mean())
            sd = float(x.std(ddof=1)) if n > 1 else math.nan
            half = t_quantile_975(n - 1) * sd / math.sqrt(n) if n > 1 else math.nan
            rec.update({f"{c}_mean": m, f"{c}_ci95_lo": m - half, f"{c}_ci95_hi": m + half,
                        f"{c}_sd": sd})
        out.append(rec)
    return _frame(out, SUMMARY_SCHEMA)


def write_table(df: pd.DataFrame, path: Path | str, name: str) -> None:
    """Write ``df`` with the typed schema of table ``name``; temp file then rename."""
    write_versioned(df, path, SCHEMAS[name], name=name, version=SCHEMA_VERSION)


def read_table(path: Path | str, name: str | None = None, filters=None) -> pd.DataFrame:
    """Read a table, checking its schema version (and name, if given); ``filters``: pyarrow's
    row filters (e.g. ``[("household_id", "=", 615016)]``), applied while reading."""
    return read_versioned(path, version=SCHEMA_VERSION, name=name, filters=filters)


def build_tables(trial_dirs: Sequence[Path | str], out_dir: Path | str, jobs: int = 1,
                 repo: Path | str | None = ".") -> Tables:
    """Check the trials (analysis.integrity, against ``repo``'s dvc.lock), parse them
    and write all tables under ``out_dir`` (results/tables). A failed check raises
    DataIntegrityError before anything is written."""
    from latency_divide.analysis.integrity import Checker

    t = collect(trial_dirs, jobs=jobs, checker=Checker(repo))
    out = Path(out_dir)
    write_table(t.exclusions, out / "exclusions.parquet", "exclusions")
    write_table(t.trials, out / "trials.parquet", "trials")
    for name in ("ping", "queue", "throughput"):
        write_table(getattr(t, name), out / "timeseries" / f"{name}.parquet", name)
    write_table(summary(t.trials), out / "summary.parquet", "summary")
    return t
