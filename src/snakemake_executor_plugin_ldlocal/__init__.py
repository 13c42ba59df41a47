"""Snakemake's local executor with a job pool that does not cap concurrent trials.

Snakemake's local executor runs jobs on a pool of ``--cores`` + 5 threads, so a rule with
``threads: 0`` (which does not count against ``--cores``) still runs at most 6 jobs at once
under ``snakemake --cores 1``. Trials are admitted by the ``host_load`` resource instead
(latency_divide.admission; budget in profiles/default/config.yaml), so the pool only has to be
large enough never to be the limit. Everything else is the local executor unchanged. Snakemake
finds this module by its name (``snakemake_executor_plugin_*``); the workflow profile selects
it with ``executor: ldlocal``.
"""

from __future__ import annotations

import concurrent.futures
import os
import sys

from snakemake.executors import local as _local
from snakemake_interface_common.exceptions import WorkflowError

common_settings = _local.common_settings

#: Pool threads: more than any budget admits trials (an idle thread costs nothing).
MIN_WORKERS = 256


class Executor(_local.Executor):
    def __post_init__(self):
        super().__post_init__()
        from latency_divide.ops.slurmnode import profile_executor_conflict

        # `snakemake --profile profiles/slurm all` lands here (profiles/default overrides it):
        # refuse rather than measure a cluster's sweep on this host
        conflict = profile_executor_conflict(sys.argv, dict(os.environ), "ldlocal")
        if conflict:
            raise WorkflowError(conflict)
        if self.workers < MIN_WORKERS:
            self.pool.shutdown(wait=False)
            self.workers = MIN_WORKERS
            self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=self.workers)
