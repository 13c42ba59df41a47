#!/usr/bin/env python3
"""What a trial job costs before its trial starts (issue 40, step 4: the rest of a trial).

Every trial is a Snakemake job of its own: a fresh Python process that imports Snakemake's
script preamble and our package, loads the config (a population config draws its sample),
builds the trial's spec and counts the run's trials on disk for its progress line
(ops.workflow.plan_trial), all before the trial's first packet and all on the host that
measures. This bench runs that part in fresh processes, as the job does, for the first trial
of each config (its wildcards and meta.json path as the workflow names them, against this
checkout's results/raw), and prints the median CPU seconds (user + system, the child's rusage)
of

  start     ``python -c "import snakemake.script"``: the interpreter and Snakemake's preamble;
  job       the same plus plan_trial (or, for a tree without plan_trial, the steps the trial job
            ran before it, in the same order) and the modules the job imports to run the
            trial;

per config and per source tree (``--src``, each put first on PYTHONPATH; several trees are
measured in the same run, interleaved, so that their medians are comparable on a noisy host).
A first, untimed run per tree and config fills the population draw cache (links.drawcache,
in a temporary LATENCY_DIVIDE_CACHE_DIR per tree), as the first job of a run does; ``cold`` is
that first run's CPU.

Example (about 1 min; the tree before plan_trial, e.g. a worktree of an older revision, beside
this one):

    .venv/bin/python bench/bench_trial_job.py --src /var/tmp/old/src --src src --runs 7
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys
from types import SimpleNamespace
from pathlib import Path
import snakemake.script  # the preamble of a `script:` job imports it
args = json.loads(sys.argv[1])
if args["what"] == "job":
    config, w, meta = args["config"], SimpleNamespace(**args["wildcards"]), Path(args["meta"])
    try:
        from latency_divide.ops.workflow import plan_trial
    except ImportError:  # a tree from before plan_trial: the steps its trial job ran
        from latency_divide.config import config_hash, load_config
        from latency_divide.data.households import get_household
        from latency_divide.ops.progress import progress
        from latency_divide.paths import RUN_START
        from latency_divide.trial.layout import trial_meta_path
        from latency_divide.trial.meta import live_topologies
        from latency_divide.trial.sweep import nominal_trial_s, spec_from_config, trial_ids

        from latency_divide.testbed.startgate import spacing_s

        def plan_trial(config, w, meta):
            cfg = load_config(dict(config))
            spacing_s()
            hh = get_household(int(w.household), cfg.buckets)
            spec = spec_from_config(cfg, hh, w.direction, w.variant, int(w.rep),
                                    config_hash=config_hash(dict(config)))
            assert spec.definition_id(cfg.testbed.kind) == w.definition
            expected = [trial_meta_path(meta.parents[5], *t) for t in trial_ids(cfg)]
            running = live_topologies()
            return progress(expected, RUN_START, nominal_trial_s(cfg), parallel=running + 1,
                            running=running).line("x")
    plan_trial(config, w, meta)
    # what the trial job imports besides (ops.workflow._trial_job), in either tree
    import latency_divide.ops.admission, latency_divide.ops.slurmnode  # noqa: F401,E401
    import latency_divide.testbed.factory, latency_divide.trial.run  # noqa: F401,E401
"""


def merged_config(repo: Path, configfile: str | None) -> dict:
    """config/config.yaml with ``configfile`` over it, as Snakemake merges --configfile."""
    import yaml
    from snakemake.utils import update_config

    cfg = yaml.safe_load((repo / "config" / "config.yaml").read_text())
    if configfile:
        update_config(cfg, yaml.safe_load((repo / configfile).read_text()))
    return cfg


def first_trial(config: dict) -> tuple[dict, str]:
    from latency_divide.config import load_config
    from latency_divide.trial.layout import trial_meta_path
    from latency_divide.trial.sweep import trial_ids

    t = trial_ids(load_config(dict(config)))[0]
    keys = ("definition", "household", "direction", "variant", "rep")
    return dict(zip(keys, map(str, t))), str(trial_meta_path("results/raw", *t))


def child_cpu(repo: Path, src: str, cache: str, what: str, payload: dict) -> float:
    env = {**os.environ, "PYTHONPATH": src, "LATENCY_DIVIDE_CACHE_DIR": cache}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", CHILD, json.dumps({**payload, "what": what})],
                   cwd=repo, env=env, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", action="append", help="a source tree's src/ (repeatable; "
                    "default: this checkout's)")
    ap.add_argument("--config", action="append",
                    help="a --configfile over config/config.yaml (repeatable; default: the "
                         "paper's run and config/population-buffers.yaml)")
    ap.add_argument("--runs", type=int, default=7, help="timed runs per tree, config and "
                    "measure (default 7)")
    ap.add_argument("--repo", type=Path, default=ROOT, help="the checkout whose configs and "
                    "results/raw the jobs see (default: this one)")
    a = ap.parse_args(argv)
    if a.runs < 1:
        ap.error(f"--runs {a.runs}: at least 1")
    srcs = [str(Path(s).resolve()) for s in (a.src or [ROOT / "src"])]
    for s in srcs:
        if not (Path(s) / "latency_divide" / "__init__.py").is_file():
            ap.error(f"--src {s}: no latency_divide package there")
    configs = a.config or [None, "config/population-buffers.yaml"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="ld-bench-job-") as tmp:
        for configfile in configs:
            config = merged_config(a.repo, configfile)
            wildcards, meta = first_trial(config)
            payload = {"config": config, "wildcards": wildcards, "meta": meta}
            caches = {s: str(Path(tmp) / f"cache-{i}") for i, s in enumerate(srcs)}
            cold = {s: child_cpu(a.repo, s, caches[s], "job", payload) for s in srcs}
            got = {(s, w): [] for s in srcs for w in ("start", "job")}
            for k in range(a.runs):
                for s in srcs:
                    for what in ("start", "job"):
                        got[(s, what)].append(child_cpu(a.repo, s, caches[s], what,
                                                             payload))
                print(f"[bench] {configfile or 'config/config.yaml'}: run {k + 1} of {a.runs}",
                      file=sys.stderr, flush=True)
            for s in srcs:
                start = statistics.median(got[(s, "start")])
                job = statistics.median(got[(s, "job")])
                rows.append((configfile or "config/config.yaml", s, cold[s], start, job))
    print(f"pre-trial CPU of a trial job, median of {a.runs} fresh processes (s)")
    print(f"{'config':34} {'source tree':40} {'cold':>6} {'start':>6} {'job':>6} "
          f"{'ours':>6}")
    for configfile, s, cold, start, job in rows:
        print(f"{configfile:34} {s[-40:]:40} {cold:6.3f} {start:6.3f} {job:6.3f} "
              f"{job - start:6.3f}")
    if len(srcs) > 1:
        for configfile in dict.fromkeys(r[0] for r in rows):
            jobs = [r[4] for r in rows if r[0] == configfile]
            print(f"{configfile}: job CPU {srcs[-1][-30:]} / {srcs[0][-30:]} = "
                  f"{jobs[-1] / jobs[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
