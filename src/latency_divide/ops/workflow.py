"""The trial rule's job (workflow/scripts/run_trial.py): config and wildcards to one complete
trial directory, on the testbed the config names (testbed.factory), with a progress line.

Kept here, not in workflow/scripts/, so it can be imported and tested.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from latency_divide.paths import RUN_START
from latency_divide.testbed.runners import interrupt_on_sigterm

#: Set (to anything but "" or 0) to make every trial job fail at once: re-analysis of pulled
#: data, and the tests of it, must never start a measurement (README, docs/data.md).
FORBID_TRIALS_ENV = "LATENCY_DIVIDE_FORBID_TRIALS"


def trials_forbidden() -> bool:
    return os.environ.get(FORBID_TRIALS_ENV, "") not in ("", "0")


def run_trial_job(smk) -> None:
    """The trial rule: config + wildcards -> one complete trial directory."""
    if trials_forbidden():
        raise SystemExit(f"[latency-divide] refusing to measure {smk.output.meta}: "
                         f"{FORBID_TRIALS_ENV} is set (this run was meant to re-analyse existing "
                         "trials only; a trial it wants is missing or was asked for again)")
    # Snakemake stops jobs with SIGTERM: turn it into an exception so `finally` blocks tear
    # the topology down and remove the temporary trial directory.
    interrupt_on_sigterm()
    with open(smk.log[0], "a", buffering=1) as log:
        _trial_job(smk, log)


def plan_trial(config: dict, wildcards, meta: Path) -> tuple:
    """What a trial job does before its trial (bench/bench_trial_job.py measures its CPU): the
    config loaded and checked, the trial's spec (its definition must be the one in the path),
    and the progress line. Returns (cfg, spec, raw root, progress line)."""
    from latency_divide.config import config_hash, load_config
    from latency_divide.data.households import get_household
    from latency_divide.ops.progress import progress
    from latency_divide.testbed.startgate import spacing_s
    from latency_divide.trial.layout import trial_meta_path
    from latency_divide.trial.meta import live_topologies
    from latency_divide.trial.sweep import nominal_trial_s, spec_from_config, trial_ids

    cfg = load_config(dict(config))
    spacing_s()  # a wrong LATENCY_DIVIDE_START_SPACING stops the job before anything starts
    w = wildcards
    household = get_household(int(w.household), cfg.buckets)
    raw_root = meta.parents[5]
    spec = spec_from_config(cfg, household, w.direction, w.variant, int(w.rep),
                            config_hash=config_hash(dict(config)))
    wanted = spec.definition_id(cfg.testbed.kind)
    if wanted != w.definition:
        raise SystemExit(f"[latency-divide] {meta}: this config defines variant {w.variant!r} "
                         f"as {wanted}, not {w.definition}: a trial of another definition is "
                         "measured only by the config that defines it")
    expected = [trial_meta_path(raw_root, *t) for t in trial_ids(cfg)]
    # before the first trial of the run ends, trials running now stand in for the parallelism
    running = live_topologies()
    line = progress(expected, RUN_START, nominal_trial_s(cfg), parallel=running + 1,
                    running=running).line(f"{wanted}/{spec.trial_id}")
    return cfg, spec, raw_root, line


def _trial_job(smk, log) -> None:
    from latency_divide.ops.admission import retries_for, rt_ceiling
    from latency_divide.ops.hostcost import learn_from, spec_rt_cores
    from latency_divide.ops.slurmnode import check_node, node_name, under_slurm
    from latency_divide.testbed.factory import open_testbed
    from latency_divide.trial.layout import META
    from latency_divide.trial.retry import run_trial_with_retries

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)
        print(msg, file=log)

    meta = Path(smk.output.meta)
    cfg, spec, raw_root, line = plan_trial(smk.config, smk.wildcards, meta)
    say(line)
    try:
        with open_testbed(cfg.testbed.kind, cfg.testbed.inventory, any_free_slice=True,
                          log=say) as testbed:
            if under_slurm():  # a cluster node: check it before anything starts, name it
                check_node(spec, testbed, raw_root)
                say(f"[latency-divide] trial {spec.trial_id}: Slurm job "
                    f"{os.environ.get('SLURM_JOB_ID')} on node {node_name()}")
            retries = retries_for(spec, cfg.trial.retries, cfg.testbed.kind, log=say)
            d = run_trial_with_retries(spec, raw_root, retries=retries, log=say,
                                       testbed=testbed,
                                       expected_rt_cores=spec_rt_cores(spec, cfg.testbed.kind),
                                       rt_ceiling=rt_ceiling(cfg.testbed.kind),
                                       learn=learn_from)
    except BaseException:
        final = meta.parent
        if final.is_dir() and not any(final.iterdir()):
            final.rmdir()  # Snakemake made it for the output; leave nothing that looks like a trial
        raise
    m = json.loads((d / META).read_text())
    t = m["timing"]
    wall = f"{time.time() - t['started_unix']:.1f} s" if "started_unix" in t else "?"
    say(f"[latency-divide] trial {spec.trial_id} done in {wall} (setup {t['setup_s']:.2f} s, "
        f"teardown {t['teardown_s']:.2f} s)")
