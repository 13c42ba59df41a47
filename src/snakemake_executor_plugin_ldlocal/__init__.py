"""Snakemake's local executor with a job pool that does not cap concurrent trials.

Snakemake's local executor runs jobs on a pool of ``--cores`` + 5 threads, so a rule with
``threads: 0`` (which does not count against ``--cores``) still runs at most 6 jobs at once
under ``snakemake --cores 1``. Trials are admitted by the ``host_load`` resource instead
(latency_divide.admission; budget in profiles/default/config.yaml), so the pool only has to be
large enough never to be the limit.

The workflow widens the local executor itself: the Snakefile calls :func:`widen_local_executor`
before Snakemake creates its executor, so ``snakemake --cores 1 all`` needs no ``executor`` key
in profiles/default. That matters because Snakemake always loads profiles/default as the
workflow profile and lets it override ``--profile`` key by key: with an ``executor`` there,
``snakemake --profile profiles/slurm all`` would run every trial on this host
(docs/cluster.md). Everything else is the local executor unchanged. The same executor is also
a plugin of its own (``--executor ldlocal``; Snakemake finds it by this module's name) for other
Snakefiles.
"""

from __future__ import annotations

import concurrent.futures

from snakemake.executors import local as _local

common_settings = _local.common_settings

#: Pool threads: more than any budget admits trials (an idle thread costs nothing).
MIN_WORKERS = 256


def _widen(executor) -> None:
    if executor.workers < MIN_WORKERS:
        executor.pool.shutdown(wait=False)
        executor.workers = MIN_WORKERS
        executor.pool = concurrent.futures.ThreadPoolExecutor(max_workers=executor.workers)


def widen_local_executor() -> None:
    """Make Snakemake's local executor (this process) start with MIN_WORKERS pool threads.
    Idempotent; call it from the Snakefile, before the run's executor exists."""
    cls = _local.Executor
    if getattr(cls, "_latency_divide_widened", False):
        return
    original = cls.__post_init__

    def __post_init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        _widen(self)

    cls.__post_init__ = __post_init__
    cls._latency_divide_widened = True


class Executor(_local.Executor):
    def __post_init__(self):
        super().__post_init__()
        _widen(self)
