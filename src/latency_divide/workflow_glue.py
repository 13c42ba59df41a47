"""Entry points for Snakemake scripts that do more than one call (kept here, not in
workflow/scripts/, so they can be imported and tested)."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

RUN_START = Path("logs/run-start.json")


def _raise_interrupt(signum, frame):  # noqa: ARG001
    raise KeyboardInterrupt(f"signal {signum}")


def run_trial_job(smk) -> None:
    """The trial rule: household record + config -> one complete trial directory."""
    from .config import load_config
    from .households import Household
    from .progress import progress
    from .provenance import config_hash
    from .trial import (nominal_trial_s, run_trial_with_retries, spec_from_config,
                        trial_ids, trial_meta_path)

    # Snakemake stops jobs with SIGTERM: turn it into an exception so `finally` blocks tear
    # the topology down and remove the temporary trial directory.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    log = open(smk.log[0], "a", buffering=1)

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)
        print(msg, file=log)

    cfg = load_config(dict(smk.config))
    w = smk.wildcards
    household = Household.from_dict(json.loads(Path(smk.input.record).read_text()))
    meta = Path(smk.output.meta)
    raw_root = meta.parents[4]
    spec = spec_from_config(cfg, household, w.direction, w.variant, int(w.rep),
                            config_hash=config_hash(dict(smk.config)))
    expected = [trial_meta_path(raw_root, *t) for t in trial_ids(cfg)]
    say(progress(expected, RUN_START, nominal_trial_s(cfg)).line(spec.trial_id))
    try:
        d = run_trial_with_retries(spec, raw_root, retries=cfg.trial.retries, log=say)
    except BaseException:
        final = meta.parent
        if final.is_dir() and not any(final.iterdir()):
            final.rmdir()  # Snakemake made it for the output; leave nothing that looks like a trial
        raise
    m = json.loads((d / "meta.json").read_text())
    say(f"[latency-divide] trial {spec.trial_id} done in "
        f"{m['timing']['setup_s']:.2f} s setup + transfer, teardown {m['timing']['teardown_s']:.2f} s")
