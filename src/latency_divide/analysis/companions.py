"""Companion data sets: runs of other configs, analysed beside the main run.

The main config (config/config.yaml: the paper's run) names, under ``companions``, other
configs whose trials are published beside it (config/fast-links.yaml: the window unbound;
config/mvfst.yaml: mvfst's tperf). ``snakemake all`` analyses a companion, into
``results/companions/<name>/{tables,figures}/``, when every one of its trials is on disk (after
``dvc pull``, or after a run with ``--configfile <its config>``), and never measures one: its
trials are measured only by a run of its own config. A companion with some trials missing is
named in the log and left out (none of its outputs is built), so a half-pulled or half-run data
set never yields tables that look complete.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from latency_divide.config import Config, load_config
from latency_divide.errors import ConfigError
from latency_divide.paths import COMPANIONS, RAW

#: companion name = its config file's stem: a directory name under results/companions
NAME = re.compile(r"\A[a-z0-9][a-z0-9_-]{0,39}\Z")


#: where companions' outputs go: ``<RESULTS>/<name>/{tables,figures}/``
RESULTS = COMPANIONS.as_posix()


TABLES = {
    "trials": "tables/trials.parquet",
    "ping": "tables/timeseries/ping.parquet",
    "queue": "tables/timeseries/queue.parquet",
    "throughput": "tables/timeseries/throughput.parquet",
    "summary": "tables/summary.parquet",
    "exclusions": "tables/exclusions.parquet",
}


def table_files(root: str) -> dict[str, str]:
    """The analysis tables under ``root`` (``results`` for the main run)."""
    return {k: f"{root}/{v}" for k, v in TABLES.items()}


@dataclass(frozen=True)
class Companion:
    name: str
    configfile: str
    cfg: Config
    #: (definition id, household, direction, variant, repetition) of every trial
    trials: tuple[tuple[str, int, str, str, int], ...]

    @property
    def root(self) -> str:
        return f"{RESULTS}/{self.name}"

    def metas(self, raw_root: str = RAW.as_posix()) -> list[str]:
        from latency_divide.trial.layout import trial_meta_path
        return [str(trial_meta_path(raw_root, *t)) for t in self.trials]

    def inputs(self, raw_root: str = RAW.as_posix(), base: Path = Path(".")) -> list[str]:
        """What its tables read: its loose trials' meta.json and its packs' files."""
        from latency_divide.trial.packs import split
        loose, pack_files = split(self.metas(raw_root), base)
        return loose + pack_files

    def missing(self, raw_root: str = RAW.as_posix(), base: Path = Path(".")) -> list[str]:
        """Its trials neither on disk nor in a pack."""
        from latency_divide.trial.packs import split
        loose, _ = split(self.metas(raw_root), base)
        return [m for m in loose if not (base / m).exists()]

    def digest(self) -> str:
        """sha256 of its trials' meta.json paths, one a line: what a tables job's params hold
        in place of the list. Snakemake keeps a job's params in the record of every output it
        writes (.snakemake/metadata): the lists of all companions, kept beside each of the
        job's 133 outputs, were 120 MB of records (CHANGELOG.md, 2026-12-07 (late morning))."""
        return _digest(self.metas())


def companion_metas(configfile: str, digest: str, base: Path = Path(".")) -> list[str]:
    """The meta.json paths of the companion whose config is ``configfile``, loaded again in the
    tables job; ``digest`` (:meth:`Companion.digest`, from the DAG) must match, or the config
    changed after Snakemake planned the job: ConfigError, nothing written."""
    [c] = load_companions([configfile], base)
    metas = c.metas()
    if _digest(metas) != digest:
        raise ConfigError(f"companion {c.name} ({configfile}): its trials are not those "
                          "Snakemake planned the job with (the config changed since): run "
                          "snakemake again")
    return metas


def _digest(metas: list[str]) -> str:
    import hashlib
    return hashlib.sha256("\n".join(metas).encode()).hexdigest()


def load_companions(paths, base: Path = Path("."), data=None) -> list[Companion]:
    """The companions named by a config (its ``companions`` list of config files). Raises
    ConfigError naming the file at fault: missing, invalid, a duplicate name, or a companion
    with companions of its own."""
    from latency_divide.trial.sweep import trial_ids
    out: list[Companion] = []
    for p in paths or ():
        name = Path(p).stem
        if Path(p).suffix != ".yaml" or not NAME.match(name):
            raise ConfigError(f"config: companions: {p!r}: a companion is a config file "
                              "<name>.yaml whose name has 1-40 of a-z, 0-9, '_', '-'")
        if any(c.name == name for c in out):
            raise ConfigError(f"config: companions: {p!r}: a second companion named {name!r}")
        cfg = load_config(base / p, data=data)
        if cfg.companions:
            raise ConfigError(f"config: companions: {p!r} names companions of its own "
                              f"({', '.join(cfg.companions)}); a companion cannot have them")
        out.append(Companion(name, str(p), cfg, tuple(trial_ids(cfg))))
    return out
