#!/usr/bin/env python3
"""What Snakemake's job scheduler costs the measurement host (issue 40, step 4).

Trials run on the host that schedules them: every CPU second Snakemake spends choosing jobs is
taken from the trials' tool ends and delay lines. Snakemake's default scheduler solves an
integer program (PuLP + CBC, a subprocess) at every scheduling round; `--scheduler greedy`
picks jobs in order and fits them to the resources. This bench runs a throw-away workflow of
--jobs jobs shaped like the trial rule (``threads: 0``, a ``host_load`` resource of 10-120
thousandths drawn with a fixed seed, a budget of 900, each job a ``sleep`` of --sleep s),
once per scheduler, under `snakemake --cores 1` in a temporary directory, and prints per
scheduler: the wall time, the CPU seconds of Snakemake and everything it started (its
rusage children, minus nothing: a sleep costs about 1 ms) and the CPU per job.

Measured 2026-11-27 (`--jobs 300 --sleep 3`, beside a `latency-divide publish`): ILP 121.9 CPU s
(406 ms per job), greedy 14.0 s (47 ms per job), the same wall clock (153 s).

``--wide`` widens Snakemake's job pool as the workflow's Snakefile does
(snakemake_executor_plugin_ldlocal.widen_local_executor), so as many jobs run at once as the
budget admits (about 14 here, 30-36 in the paper's sweep); without it Snakemake's pool of
--cores + 5 threads caps them at 6. ``--variant NAME=ARGS`` (repeatable) runs the greedy
scheduler once per variant with those Snakemake options added (split on spaces); the pseudo
option ``:single-timer`` patches the scheduler as the Snakefile does
(``single_reevaluation_timer``). The rows then name the variants, e.g. ``--variant
snakemake= --variant ours=:single-timer``.

Example (about 2 x (jobs x sleep / concurrency) s; the default takes about 3 min):

    .venv/bin/python bench/bench_scheduler_cost.py --jobs 300 --sleep 20
"""

from __future__ import annotations

import argparse
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = ROOT / ".venv" / "bin" / "snakemake"

SNAKEFILE = """
{head}
LOADS = {loads!r}

rule all:
    input: expand("done/{{i}}", i=range(len(LOADS)))

rule job:
    output: "done/{{i}}"
    threads: 0
    resources:
        host_load=lambda wc: LOADS[int(wc.i)]
    shell: "sleep {sleep} && touch {{output}}"
"""


SINGLE_TIMER = ":single-timer"


def run(scheduler: str, jobs: int, sleep: float, seed: int, extra: tuple = (),
        name: str | None = None, wide: bool = False) -> dict:
    rng = random.Random(seed)
    loads = [rng.randint(10, 120) for _ in range(jobs)]
    with tempfile.TemporaryDirectory(prefix="ld-bench-sched-") as d:
        calls = (["widen_local_executor"] if wide else []) \
            + (["single_reevaluation_timer"] if SINGLE_TIMER in extra else [])
        head = "".join(f"from snakemake_executor_plugin_ldlocal import {c}\n{c}()\n"
                       for c in calls)
        extra = tuple(a for a in extra if a != SINGLE_TIMER)
        Path(d, "Snakefile").write_text(SNAKEFILE.format(head=head, loads=loads, sleep=sleep))
        argv = [str(SNAKEMAKE), "--cores", "1", "--resources", "host_load=900",
                "--scheduler", scheduler, "--quiet", "rules", *extra, "all"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        res = subprocess.run(argv, cwd=d, capture_output=True, text=True)
        wall = time.monotonic() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if res.returncode != 0:
            sys.exit(f"snakemake --scheduler {scheduler} {' '.join(extra)} failed:\n"
                     f"{res.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"scheduler": name or scheduler, "wall_s": wall, "cpu_s": cpu,
            "cpu_per_job_s": cpu / jobs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=300, help="jobs (default 300, the paper's 304)")
    ap.add_argument("--sleep", type=float, default=20.0, help="seconds each job sleeps")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--schedulers", nargs="+", default=["ilp", "greedy"],
                    choices=["ilp", "greedy"])
    ap.add_argument("--wide", action="store_true",
                    help="widen Snakemake's job pool as the workflow does")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=ARGS",
                    help="greedy, with these Snakemake options added (repeatable; replaces "
                    "--schedulers)")
    args = ap.parse_args()
    variants = []
    for v in args.variant:
        name, sep, opts = v.partition("=")
        if not sep or not name:
            ap.error(f"--variant {v!r}: expected NAME=ARGS (ARGS may be empty)")
        variants.append((name, tuple(opts.split())))
    if not SNAKEMAKE.exists():
        sys.exit(f"{SNAKEMAKE} is missing: run scripts/setup.sh")
    if variants:
        rows = [run("greedy", args.jobs, args.sleep, args.seed, opts, name, args.wide)
                for name, opts in variants]
    else:
        rows = [run(s, args.jobs, args.sleep, args.seed, wide=args.wide)
                for s in args.schedulers]
    print(f"{args.jobs} jobs of sleep {args.sleep:g} s, host_load 10-120 of a budget of 900 "
          f"(seed {args.seed}), snakemake --cores 1"
          + (", the pool widened as the workflow does" if args.wide else ""))
    for name, opts in variants:
        print(f"  {name}: --scheduler greedy {' '.join(opts)}")
    print(f"{'run':10s} {'wall s':>8s} {'CPU s':>8s} {'CPU/job ms':>11s}")
    for r in rows:
        print(f"{r['scheduler']:10s} {r['wall_s']:8.1f} {r['cpu_s']:8.1f} "
              f"{1000 * r['cpu_per_job_s']:11.1f}")
    if len(rows) == 2 and rows[1]["cpu_s"] > 0:
        print(f"CPU {rows[0]['scheduler']} / {rows[1]['scheduler']}: "
              f"{rows[0]['cpu_s'] / rows[1]['cpu_s']:.2f}")


if __name__ == "__main__":
    main()
