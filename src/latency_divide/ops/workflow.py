"""Entry points for Snakemake scripts that do more than one call (kept here, not in
workflow/scripts/, so they can be imported and tested)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import time
from pathlib import Path

from latency_divide.testbed.runners import interrupt_on_sigterm

RUN_START = Path("logs/run-start.json")


#: One lock file per slice of an SSH inventory: never two trials on one slice at a time.
LOCK_DIR = Path("results/.locks")


@contextlib.contextmanager
def acquire_slice(names, lock_dir: Path = LOCK_DIR, *, poll_s: float = 1.0,
                  timeout_s: float | None = None, log=None):
    """Hold an exclusive lock (flock on ``lock_dir/slice-<name>.lock``) on the first free
    slice of ``names``, waiting while all are busy; yield its name. The kernel drops the lock
    when the holder dies, so a killed job never blocks a slice."""
    lock_dir = Path(lock_dir)
    lock_dir.mkdir(parents=True, exist_ok=True)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    said = False
    while True:
        for name in names:
            f = open(lock_dir / f"slice-{name}.lock", "a")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.close()
                continue
            try:
                yield name
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
                f.close()
            return
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"no free slice among {', '.join(names)} within {timeout_s} s")
        if log and not said:
            log(f"[latency-divide] all slices busy ({', '.join(names)}): waiting")
            said = True
        time.sleep(poll_s)


def _run_on_a_slice(cfg, spec, raw_root: Path, say) -> Path:
    """An SSH trial on the first free slice of the inventory (locked while it runs)."""
    from latency_divide.testbed.inventory import load_inventory
    from latency_divide.testbed.ssh.testbed import SshTestbed
    from latency_divide.trial.run import run_trial_with_retries

    inv = load_inventory(cfg.testbed.inventory)
    with acquire_slice(inv.slice_names(), log=say) as name:
        say(f"[latency-divide] trial {spec.trial_id} on slice {name}")
        tb = SshTestbed(inv, name)
        try:
            return run_trial_with_retries(spec, raw_root, retries=cfg.trial.retries, log=say,
                                          testbed=tb)
        finally:
            tb.close()


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


def _trial_job(smk, log) -> None:
    from latency_divide.config import config_hash, load_config
    from latency_divide.data.households import get_household
    from latency_divide.ops.progress import progress
    from latency_divide.trial.layout import trial_meta_path
    from latency_divide.trial.meta import live_topologies
    from latency_divide.trial.run import run_trial_with_retries
    from latency_divide.trial.sweep import nominal_trial_s, spec_from_config, trial_ids

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)
        print(msg, file=log)

    cfg = load_config(dict(smk.config))
    w = smk.wildcards
    household = get_household(int(w.household), cfg.buckets)
    meta = Path(smk.output.meta)
    raw_root = meta.parents[5]
    spec = spec_from_config(cfg, household, w.direction, w.variant, int(w.rep),
                            config_hash=config_hash(dict(smk.config)))
    wanted = spec.definition_id(cfg.testbed.kind)
    if wanted != w.definition:
        raise SystemExit(f"[latency-divide] {meta}: this config defines variant {w.variant!r} "
                         f"as {wanted}, not {w.definition}: a trial of another definition is "
                         "measured only by the config that defines it")
    expected = [trial_meta_path(raw_root, *t) for t in trial_ids(cfg)]
    # before the first trial of the run ends, trials running now stand in for the parallelism
    say(progress(expected, RUN_START, nominal_trial_s(cfg),
                 parallel=live_topologies() + 1).line(f"{wanted}/{spec.trial_id}"))
    try:
        if cfg.testbed.kind == "ssh":
            d = _run_on_a_slice(cfg, spec, raw_root, say)
        else:
            d = run_trial_with_retries(spec, raw_root, retries=cfg.trial.retries, log=say)
    except BaseException:
        final = meta.parent
        if final.is_dir() and not any(final.iterdir()):
            final.rmdir()  # Snakemake made it for the output; leave nothing that looks like a trial
        raise
    m = json.loads((d / "meta.json").read_text())
    t = m["timing"]
    wall = f"{time.time() - t['started_unix']:.1f} s" if "started_unix" in t else "?"
    say(f"[latency-divide] trial {spec.trial_id} done in {wall} (setup {t['setup_s']:.2f} s, "
        f"teardown {t['teardown_s']:.2f} s)")
