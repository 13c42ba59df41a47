#!/usr/bin/env python3
"""Trials on Slurm: what one job costs, one job per trial against arrays and groups, and a
wall-clock model of a large study on 1, 10 and 100 nodes (docs/cluster.md).

  overhead  brings up the one-host test cluster (latency_divide.ops.slurmlab, its own
            directory and ports) and measures, with trivial jobs (no trial runs):
            - ``sbatch`` per job (N sequential submissions) and one ``sbatch --array`` of N;
            - end to end, N jobs of ``sleep 1`` through Snakemake's Slurm executor (the plugin
              pinned in requirements.lock) three ways: one Slurm job per Snakemake job,
              ``--slurm-array-jobs=all`` and ``--groups`` with ``--group-components``.
  model     reads trials on disk (meta.json ``cpu_s`` and timing; default results/raw) and
            predicts the wall clock of a study of --trials trials on 1, 10 and 100 nodes of
            --node-cores cores each (budget 900 millicores per core), from the measured
            per-trial CPU and wall time, the admission model's request per trial and the
            per-job overheads measured by ``overhead`` (--submit-s, --array-submit-s).

    .venv/bin/python bench/bench_slurm.py overhead --jobs 20      # root; ~3 min
    .venv/bin/python bench/bench_slurm.py model /tmp/ld/fresh/results/raw --trials 12000
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from latency_divide.ops.slurmlab import SlurmLab  # noqa: E402
from latency_divide.trial import rawio  # noqa: E402
from latency_divide.trial.packs import every_trial  # noqa: E402

SNAKEMAKE = ROOT / ".venv" / "bin" / "snakemake"

TOY = """\
N = {n}
rule all:
    input: expand("out/{{i}}.txt", i=range(N))
rule work:
    output: "out/{{i}}.txt"
    threads: 1
    resources: gres="hostload:10", mem_mb=100, runtime=5
    shell: "sleep 1; echo $SLURM_JOB_ID $SLURMD_NODENAME > {{output}}"
"""

PROFILE = """\
executor: slurm
jobs: 1000
slurm-status-command: squeue
slurm-init-seconds-before-status-checks: {init}
slurm-no-account: true
latency-wait: 5
"""


def _q(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]


def _wait_empty(lab: SlurmLab, timeout: float = 600) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if not [r for r in lab.squeue("%i %T") if r[1] not in ("COMPLETED", "CANCELLED",
                                                               "FAILED")]:
            return time.monotonic() - t0
        time.sleep(0.2)
    raise TimeoutError("jobs still queued after the timeout")


def sbatch_costs(lab: SlurmLab, n: int, out: Path) -> dict:
    common = ["--gres=hostload:10", "--mem=50", "--cpus-per-task=1", "-o", str(out / "%j.out")]
    each = []
    t_first = time.monotonic()
    for _ in range(n):
        t = time.monotonic()
        lab.sbatch([*common, "--wrap", "true"])
        each.append(time.monotonic() - t)
    drain = _wait_empty(lab)
    single_total = time.monotonic() - t_first
    t = time.monotonic()
    lab.sbatch([*common, f"--array=1-{n}", "-o", str(out / "%A_%a.out"), "--wrap", "true"])
    array_submit = time.monotonic() - t
    array_total = array_submit + _wait_empty(lab)
    return {"n": n, "sbatch_median_s": statistics.median(each), "sbatch_p95_s": _q(each, 0.95),
            "single_jobs_to_empty_s": single_total, "single_drain_after_last_submit_s": drain,
            "array_submit_s": array_submit, "array_to_empty_s": array_total}


def snakemake_run(lab: SlurmLab, n: int, mode: str, init: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="ld-bench-slurm-") as tmp:
        d = Path(tmp)
        (d / "Snakefile").write_text(TOY.format(n=n))
        (d / "profile").mkdir()
        (d / "profile" / "config.yaml").write_text(PROFILE.format(init=init))
        argv = [str(SNAKEMAKE), "--snakefile", str(d / "Snakefile"), "--directory", str(d),
                "--workflow-profile", str(d / "profile"), "--slurm-logdir", str(d / "slurmlogs")]
        if mode == "array":
            argv += ["--slurm-array-jobs", "all"]
        elif mode.startswith("group"):
            size = int(mode[5:])
            argv += ["--groups", "work=g", "--group-components", f"g={size}"]
        t = time.monotonic()
        p = subprocess.run(argv, env=lab.env(), capture_output=True, text=True, timeout=1800)
        wall = time.monotonic() - t
        if p.returncode != 0:
            raise RuntimeError(f"snakemake ({mode}) failed:\n{p.stderr[-3000:]}")
        jobs = {(d / "out" / f"{i}.txt").read_text().split()[0] for i in range(n)}
        nodes = {(d / "out" / f"{i}.txt").read_text().split()[1] for i in range(n)}
        return {"mode": mode, "n": n, "wall_s": wall, "slurm_jobs": len(jobs),
                "nodes": sorted(nodes)}


def overhead(args) -> int:
    lab = SlurmLab(dir=Path(args.dir), ctld_port=args.port, budget=900)
    results: dict = {}
    try:
        lab.up()
        with tempfile.TemporaryDirectory(prefix="ld-bench-slurm-out-") as out:
            results["sbatch"] = sbatch_costs(lab, args.jobs, Path(out))
        s = results["sbatch"]
        print(f"sbatch, one job per call ({s['n']} calls): median {s['sbatch_median_s']*1000:.0f} "
              f"ms, p95 {s['sbatch_p95_s']*1000:.0f} ms per job; submit to empty queue "
              f"{s['single_jobs_to_empty_s']:.1f} s")
        print(f"sbatch --array=1-{s['n']}: {s['array_submit_s']*1000:.0f} ms for the call; "
              f"to empty queue {s['array_to_empty_s']:.1f} s")
        results["snakemake"] = []
        for mode in [] if args.sbatch_only else ("single", "array", f"group{args.group_size}"):
            r = snakemake_run(lab, args.jobs, mode, args.init)
            results["snakemake"].append(r)
            ideal = 1.0 * math.ceil(args.jobs / 1)  # never less than 1 s of work per job slot
            print(f"snakemake --executor slurm, {args.jobs} jobs of `sleep 1`, {mode}: "
                  f"{r['wall_s']:.1f} s wall, {r['slurm_jobs']} Slurm jobs on {r['nodes']} "
                  f"({(r['wall_s'] - 1.0) / args.jobs:.2f} s per job beyond 1 s of work; "
                  f"serial work would be {ideal:.0f} s)")
    finally:
        lab.down()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


def measured_trials(raw: Path) -> list[dict]:
    rows = []
    for d in every_trial(raw):  # loose and packed
        try:
            m = json.loads(rawio.read_text(d, "meta.json"))
            cpu = m["cpu_s"]
            t = m["timing"]
            wall = t["transfer_ended_unix"] - t.get("process_started_unix", t["started_unix"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        total = sum(v for v in cpu.values() if isinstance(v, (int, float)))
        rows.append({"cpu_s": total, "wall_s": wall + t.get("teardown_s", 0.0),
                     "transfer_s": m["duration_s"], "idle_s": m["idle_s"],
                     "household": m["household"]["unit_id"], "direction": m["direction"],
                     "window": m["tool"]["window_bytes"], "tool": m["tool"]["name"]})
    return rows


def model(args) -> int:
    from latency_divide.data.households import get_household
    from latency_divide.links.plan import make_linkplan
    from latency_divide.ops.slurmnode import trial_millicores

    rows = measured_trials(Path(args.raw))
    if not rows:
        print(f"bench_slurm model: no trial with cpu_s and timing under {args.raw}",
              file=sys.stderr)
        return 2
    cpu = [r["cpu_s"] for r in rows]
    wall = [r["wall_s"] for r in rows]
    busy = statistics.median(r["transfer_s"] + r["idle_s"] for r in rows)
    req = [trial_millicores(make_linkplan(get_household(r["household"]), qfactor=2.0),
                            r["direction"], r["window"], r["tool"], busy_s=busy) for r in rows]
    mean_req = statistics.mean(req)
    wall_s = statistics.median(wall)
    print(f"measured: {len(rows)} trials under {args.raw}; CPU per trial median "
          f"{statistics.median(cpu):.1f} s (mean {statistics.mean(cpu):.1f}, p95 {_q(cpu, .95):.1f});"
          f" wall per trial (job start to teardown) median {wall_s:.1f} s; their mean request "
          f"{mean_req:.0f} millicores (admission model), mean measured cores "
          f"{statistics.mean(c / w for c, w in zip(cpu, wall)):.3f}")
    budget = 900 * args.node_cores
    per_node = budget / mean_req
    print(f"a node of {args.node_cores} cores (hostload:{budget}) packs {per_node:.1f} such trials "
          f"at once: {3600 * per_node / wall_s:.0f} trials per hour")
    print(f"study: {args.trials} trials; submission {args.submit_s:.2f} s per job "
          f"({args.submit_threads} submit threads) or {args.array_submit_s:.2f} s per array; "
          f"a finished job is seen at the next status check (every {args.status_s:g} s)")
    slot_s = wall_s + args.status_s / 2  # a job slot is free again only once the check saw it
    print(f"{'nodes':>6} {'slots':>7} {'nodes only':>11} {'jobs=' + str(args.max_jobs):>11} "
          f"{'jobs=slots':>11} {'arrays':>9}")
    for nodes in (1, 10, 100):
        slots = nodes * per_node
        r_nodes = slots / wall_s
        r_submit = args.submit_threads / args.submit_s
        r_array = args.array_limit / args.array_submit_s

        def t(*rates):
            return args.trials / min(rates) + wall_s + args.status_s
        print(f"{nodes:>6} {slots:>7.0f} {_hms(args.trials / r_nodes + wall_s):>11} "
              f"{_hms(t(r_nodes, args.max_jobs / slot_s, r_submit)):>11} "
              f"{_hms(t(r_nodes, slots / slot_s, r_submit)):>11} "
              f"{_hms(t(r_nodes, slots / slot_s, r_array)):>9}")
    print("(nodes only: trials / (nodes x per-node concurrency / wall per trial); jobs=N: "
          "Snakemake keeps at most N jobs submitted (profiles/slurm: 500), each holding its slot "
          "until a status check sees it end, and submits one at a time per thread; arrays: "
          "one sbatch per array of jobs)")
    return 0


def _hms(s: float) -> str:
    h, rem = divmod(int(round(s)), 3600)
    return f"{h}h{rem // 60:02d}m" if h else f"{rem // 60}m{rem % 60:02d}s"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("overhead")
    o.add_argument("--jobs", type=int, default=20)
    o.add_argument("--init", type=int, default=5, help="first status check after (s)")
    o.add_argument("--dir", default="/tmp/ld-slurm-bench")
    o.add_argument("--port", type=int, default=16917)
    o.add_argument("--json", help="also write the figures here")
    o.add_argument("--group-size", type=int, default=2,
                   help="jobs per group job (their threads add up: at most a node's CPUs)")
    o.add_argument("--sbatch-only", action="store_true",
                   help="only the sbatch figures (no Snakemake runs: lighter on the host)")
    m = sub.add_parser("model")
    m.add_argument("raw", nargs="?", default=str(ROOT / "results" / "raw"))
    m.add_argument("--trials", type=int, default=12000,
                   help="trials of the study (default 12000: 500 households x 2 directions x "
                   "4 variants x 3 repetitions)")
    m.add_argument("--node-cores", type=int, default=32)
    m.add_argument("--submit-s", type=float, default=1.0, help="plugin submission per job (s)")
    m.add_argument("--submit-threads", type=int, default=2,
                   help="the plugin's submission threads (2 in 2.8.0)")
    m.add_argument("--array-submit-s", type=float, default=1.0)
    m.add_argument("--array-limit", type=int, default=1000)
    m.add_argument("--status-s", type=float, default=20.0,
                   help="status check interval while jobs finish (profiles/slurm: 20 s)")
    m.add_argument("--max-jobs", type=int, default=500, help="snakemake --jobs (profile: 500)")
    a = ap.parse_args()
    for k in ("jobs", "trials", "node_cores", "submit_threads", "array_limit", "max_jobs",
              "group_size"):
        v = getattr(a, k, None)
        if v is not None and v < 1:
            ap.error(f"--{k.replace('_', '-')} {v}: must be at least 1")
    return overhead(a) if a.cmd == "overhead" else model(a)


if __name__ == "__main__":
    sys.exit(main())
