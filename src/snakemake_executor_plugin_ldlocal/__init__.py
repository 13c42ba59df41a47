"""Snakemake's local executor with a job pool that does not cap concurrent trials, and a
scheduler that does not multiply its own wake-ups.

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

**One re-evaluation timer** (:func:`single_reevaluation_timer`). With its job rate limiter on
(``--max-jobs-per-timespan``, default 100/1s), Snakemake 9's scheduler ends every scheduling
round that found ready jobs by starting a ``threading.Timer`` that wakes it again one timespan
later, and that round starts the next timer. A job's end starts a round too, so every job that
ends adds one more timer chain that lives as long as jobs wait: in the paper's sweep (304
trials, about 270 waiting) the scheduler ran, near the end, one round a second per trial ended
so far, each looking at every waiting trial. Its main process used 171 CPU s in an 18-minute
sweep, 10 % of the host's busy time, taken from the trials (2026-11-29, py-spy: 60 % of it in
the greedy job selection). The patch keeps at most one timer pending per scheduler: the
periodic re-evaluation the rate limiter needs stays, and a job's end still starts a round of
its own. ``bench/bench_scheduler_cost.py --wide --variant ...`` measures the two.

**Fresh requests** (:func:`fresh_resources`). Snakemake computes a job's resources once, when
it first schedules it; in a sweep that is every trial at the run's start. A trial's
``host_load`` is its model cost times this host's cost factor, and the factor is learned from
the trials this boot has measured (latency_divide.testbed.hostlearn): so the scheduler asks
the waiting trials for their resources again, at most every :data:`REFRESH_S` seconds, and the
budget follows what the run's own trials teach. A job's resources stay as they were when it
was started (Snakemake gives back, at its end, what it took).
"""

from __future__ import annotations

import concurrent.futures
import threading
import time

from snakemake.executors import local as _local

common_settings = _local.common_settings

#: Pool threads: more than any budget admits trials (an idle thread costs nothing).
MIN_WORKERS = 256
#: Seconds between two looks at the waiting trials' resources (each look evaluates every
#: waiting trial's request: about 0.1 ms each).
REFRESH_S = 5.0


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


def single_reevaluation_timer() -> bool:
    """Make Snakemake's job scheduler (this process) keep at most one re-evaluation timer
    pending, instead of one more chain per scheduling round that a job's end started.
    Idempotent; False (and nothing changed) where this Snakemake has no such method."""
    from snakemake.scheduling import job_scheduler

    cls = job_scheduler.JobScheduler
    if getattr(cls, "_latency_divide_one_timer", False):
        return True
    if not callable(getattr(cls, "_schedule_reevalutation", None)):
        return False
    guard = threading.Lock()

    def _schedule_reevalutation(self, delay) -> None:
        with guard:
            if getattr(self, "_latency_divide_timer_pending", False):
                return  # the pending timer wakes the scheduler anyway
            self._latency_divide_timer_pending = True

        def wake() -> None:
            with guard:
                self._latency_divide_timer_pending = False
            self._open_jobs.release()

        threading.Timer(delay, wake).start()

    cls._schedule_reevalutation = _schedule_reevalutation
    cls._latency_divide_one_timer = True
    return True


def fresh_resources(rules: tuple[str, ...] = ("trial",), every_s: float = REFRESH_S) -> bool:
    """Make Snakemake's job scheduler (this process) evaluate the resources of the waiting jobs
    of ``rules`` again before a scheduling round, at most every ``every_s`` seconds. Idempotent;
    False (and nothing changed) where this Snakemake's scheduler or jobs differ."""
    from snakemake.jobs import Job
    from snakemake.scheduling import job_scheduler

    cls = job_scheduler.JobScheduler
    if getattr(cls, "_latency_divide_fresh", False):
        return True
    original = getattr(cls, "job_selector", None)
    if not callable(original) or not callable(getattr(Job, "_get_scheduler_resources", None)):
        return False

    def job_selector(self, jobs):
        now = time.monotonic()
        if now - getattr(self, "_latency_divide_fresh_at", -every_s) >= every_s:
            self._latency_divide_fresh_at = now
            for job in jobs:  # ready, not started: none of their resources is taken yet
                if isinstance(job, Job) and job.rule.name in rules:
                    job._resources = None
                    job._scheduler_resources = None
        return original(self, jobs)

    cls.job_selector = job_selector
    cls._latency_divide_fresh = True
    return True


class Executor(_local.Executor):
    def __post_init__(self):
        super().__post_init__()
        _widen(self)
        single_reevaluation_timer()
        fresh_resources()
