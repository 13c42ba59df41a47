#!/usr/bin/env python3
"""How long does the companion figures job draw, per source tree and number of processes, and
are its figures the same bytes (issue 59)?

Rule companion_figures (rules/figures.smk, workflow/scripts/companion_figures.py) draws every
companion data set's figures in one job, from the tables under results/companions/<name>/tables
(present after `dvc pull` and `snakemake all`; a companion without them is left out). This bench
runs that job's body in a fresh process per source tree (``--src``, put first on PYTHONPATH; a
tree without analysis.jobs.draw_figures runs figures_job per companion, as its script did),
with SOURCE_DATE_EPOCH=0, into a temporary directory, the trees interleaved over ``--runs`` so
that their medians are comparable on a noisy host, and prints per tree and process count:

  draw      median wall seconds of the drawing (after the imports), and its ratio to the first
            tree's (the "before");
  job       median wall seconds of the whole process (Python, imports, drawing);
  cpu       median CPU seconds of the process and its children (user + system);
  same      whether every PDF and PNG is byte-identical to the first tree's, and every sidecar
            but for its paths, its time and the git revision.

``--processes 1,2``: a tree with draw_figures is run with each (the rule's threads; Snakemake
caps them at --cores, so `--cores 1` draws in one process). Without ``--src``, the trees are the
revision before issue 59 (``--before``, extracted with git archive) and this checkout's src.

    .venv/bin/python bench/bench_figures.py --runs 3 --processes 1,2
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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: the last revision before issue 59 made the figures job faster
BEFORE = "c95fe9041c25dab527081a705cfc455104c43436"

CHILD = r"""
import json, logging, sys, time
spec = json.loads(sys.argv[1])
logging.basicConfig(filename=spec["log"], level=logging.INFO, format="%(asctime)s %(message)s")
t0 = time.monotonic()
from latency_divide.analysis import jobs
t1 = time.monotonic()
def out(c):
    return lambda n: c["out"] + "/" + n.rsplit("_", 1)[0] + (
        ".provenance.json" if n.endswith("_provenance") else "." + n.rsplit("_", 1)[1])
cs = spec["companions"]
if hasattr(jobs, "draw_figures"):  # as workflow/scripts/companion_figures.py does since issue 59
    jobs.draw_figures([t for c in cs for t in jobs.figure_tasks(
        c["figures"], c["trials"], out(c), household=c["household"],
        household_order=c["household_order"])], spec["processes"])
else:  # as it did before
    for c in cs:
        jobs.figures_job(c["figures"], c["trials"], out(c), household=c["household"],
                         household_order=c["household_order"])
print(json.dumps({"import": t1 - t0, "draw": time.monotonic() - t1}))
"""


def companions(config: str) -> list[dict]:
    """The companion_figures job's data sets, as rules/common.smk finds them, whose tables are
    on disk: name, figures, tables, household and household order."""
    from latency_divide.analysis.companions import load_companions
    from latency_divide.config import load_config

    out = []
    for c in load_companions(load_config(ROOT / config).companions, base=ROOT):
        trials = f"{c.root}/tables/trials.parquet"
        if not c.cfg.figures or not (ROOT / trials).is_file():
            continue
        chosen = (c.cfg.raw.get("figures") or {}).get("timeseries_household")
        out.append({"name": c.name, "figures": list(c.cfg.figures), "trials": trials,
                    "household": int(chosen) if chosen is not None else None,
                    "household_order": [int(h) for h in c.cfg.household_ids()]})
    return out


def run(src: str, processes: int, cs: list[dict], out: Path) -> dict:
    out.mkdir(parents=True)
    spec = {"processes": processes, "log": str(out / "figures.log"),
            "companions": [{**c, "out": str(out / c["name"])} for c in cs]}
    env = {**os.environ, "PYTHONPATH": src, "SOURCE_DATE_EPOCH": "0"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], cwd=ROOT, env=env,
                       capture_output=True, text=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"{src} (processes {processes}) failed:\n{p.stderr[-3000:]}")
    res = json.loads(p.stdout.strip().splitlines()[-1])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"draw": res["draw"], "job": wall, "cpu": cpu}


def differences(a: Path, b: Path) -> list[str]:
    """The figure files of tree ``a`` that ``b`` lacks or draws otherwise (sidecars compared
    but for their own paths, their time and the git revision)."""
    bad = []
    for f in sorted(a.rglob("*")):
        if f.suffix not in (".pdf", ".png", ".json"):
            continue
        g = b / f.relative_to(a)
        if not g.is_file():
            bad.append(f"{g}: missing")
        elif f.suffix == ".json":
            x, y = (json.loads(p.read_text().replace(str(r), "@")) for p, r in ((f, a), (g, b)))
            for k in ("created_at", "git_revision"):
                x.pop(k, None)
                y.pop(k, None)
            if x != y:
                bad.append(f"{f.relative_to(a)}: sidecar differs")
        elif f.read_bytes() != g.read_bytes():
            bad.append(f"{f.relative_to(a)}: bytes differ")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", action="append", default=[],
                    help="a source tree (its src/ directory); the first is the baseline")
    ap.add_argument("--before", default=BEFORE,
                    help="without --src: the baseline's revision (default: before issue 59)")
    ap.add_argument("--processes", default="1,2",
                    help="process counts to run a tree with draw_figures with (default 1,2)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--companion", action="append", default=[],
                    help="only this companion (repeatable; default: every one on disk)")
    a = ap.parse_args()
    cs = [c for c in companions(a.config) if not a.companion or c["name"] in a.companion]
    if not cs:
        sys.exit("no companion's tables on disk: run `dvc pull` and `snakemake --cores 1 all`")
    procs = [int(x) for x in a.processes.split(",")]
    with tempfile.TemporaryDirectory(prefix="ld-bench-figures-") as tmp:
        srcs = a.src
        if not srcs:
            old = Path(tmp) / "before"
            old.mkdir()
            arc = subprocess.run(["git", "archive", a.before, "src"], cwd=ROOT, check=True,
                                 capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(old)], input=arc, check=True)
            srcs = [str(old / "src"), str(ROOT / "src")]
        variants = []
        for s in srcs:
            new = (Path(s) / "latency_divide/analysis/figinputs.py").is_file()
            for n in (procs if new else [1]):
                variants.append((s, n))
        n_figs = sum(len(c["figures"]) for c in cs)
        print(f"{len(cs)} companions, {n_figs} figures; {a.runs} runs of {len(variants)} "
              f"variants, interleaved; {os.cpu_count()} CPUs", flush=True)
        results: dict = {v: [] for v in variants}
        for i in range(a.runs):
            order = variants if i % 2 == 0 else variants[::-1]
            for v in order:
                out = Path(tmp) / f"run{i}" / f"v{variants.index(v)}"
                r = run(v[0], v[1], cs, out)
                results[v].append(r)
                print(f"run {i + 1} {v[0]} x{v[1]}: draw {r['draw']:.1f} s, job {r['job']:.1f} s, "
                      f"cpu {r['cpu']:.1f} s", flush=True)
        med = statistics.median
        base = med(r["draw"] for r in results[variants[0]])
        print(f"\nmedians of {a.runs} (draw: after the imports; job: the whole process; cpu: "
              "its user + system, its children's too)")
        for k, v in enumerate(variants):
            rs = results[v]
            diff = differences(Path(tmp) / "run0" / "v0", Path(tmp) / "run0" / f"v{k}")
            same = "the same bytes" if not diff else f"{len(diff)} differ: {diff[:3]}"
            print(f"  {v[0]} x{v[1]}: draw {med(r['draw'] for r in rs):.1f} s "
                  f"({med(r['draw'] for r in rs) / base:.2f} x the first), job "
                  f"{med(r['job'] for r in rs):.1f} s, cpu {med(r['cpu'] for r in rs):.1f} s; "
                  f"{same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
