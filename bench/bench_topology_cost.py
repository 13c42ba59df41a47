#!/usr/bin/env python3
"""What a trial's topology costs to build and tear down (issue 40, step 4: the rest of a trial).

Every trial job is a fresh process that asks the kernel whether it has netem, builds the
four-namespace topology (namespaces, veths, offloads, addresses, routes, the link plan's
qdiscs), starts the delay line, and at the end stops it and deletes the namespaces. This bench
does exactly that (testbed.local.resolve_delay_mechanism, Topology.up and down, the household's
link plan) in fresh processes, one per run, for each source tree given (``--src``, put first on
PYTHONPATH; the trees interleaved, so that their medians compare on a noisy host), and prints
per run (medians):

  programs  programs the process started (each ``subprocess.Popen``: ip, tc, ethtool, ...)
  cpu_s     CPU seconds of the process and every program it started (rusage)
  host_s    CPU seconds of the whole host over the run and the 0.5 s after it (/proc/stat:
            the kernel's own work, e.g. freeing a namespace, included; noisy on a busy host)
  wall_s    the run's wall time, from the process's start to its end

Example (about 1 min; a worktree of the revision before beside this checkout):

    git worktree add /var/tmp/wt-old HEAD~1
    sudo .venv/bin/python bench/bench_topology_cost.py --src /var/tmp/wt-old/src --src src
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, os, resource, subprocess, sys, tempfile
from pathlib import Path
args = json.loads(sys.argv[1])
started = []
_init = subprocess.Popen.__init__
def counting(self, argv, *a, **kw):
    started.append(argv[0] if isinstance(argv, (list, tuple)) else str(argv))
    return _init(self, argv, *a, **kw)
subprocess.Popen.__init__ = counting
from latency_divide.data.households import get_household
from latency_divide.links.plan import make_linkplan
from latency_divide.testbed.local import Topology, resolve_delay_mechanism
mechanism = resolve_delay_mechanism("auto")
plan = make_linkplan(get_household(args["household"]), 2.0, mechanism=mechanism)
with tempfile.TemporaryDirectory() as d:
    with Topology(plan, delayline_bin=args["delayline"], log_dir=Path(d)):
        pass
ru = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
print(json.dumps({"programs": len(started), "by_program": sorted(set(started)),
                  "cpu_s": sum(r.ru_utime + r.ru_stime for r in ru), "mechanism": mechanism}))
"""


def host_busy_s() -> float:
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def one_run(src: Path, household: int, delayline: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONDONTWRITEBYTECODE": "1"}
    h0, t0 = host_busy_s(), time.monotonic()
    out = subprocess.run([sys.executable, "-c", CHILD,
                          json.dumps({"household": household, "delayline": str(delayline)})],
                         capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.monotonic() - t0
    time.sleep(0.5)
    if out.returncode != 0:
        raise SystemExit(f"{src}: the run failed:\n{out.stderr[-2000:]}")
    rec = json.loads(out.stdout.strip().splitlines()[-1])
    return {**rec, "wall_s": wall, "host_s": host_busy_s() - h0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", action="append", type=Path, required=True,
                    help="a source tree (its src/ directory); give several to compare")
    ap.add_argument("--runs", type=int, default=9, help="fresh processes per tree (default 9)")
    ap.add_argument("--household", type=int, default=10232,
                    help="the household whose link plan is applied (default 10232)")
    ap.add_argument("--delayline", type=Path, default=ROOT / "target/release/delayline")
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_topology_cost: needs root (network namespaces)", file=sys.stderr)
        return 2
    if a.runs < 1:
        print(f"--runs {a.runs}: give 1 or more", file=sys.stderr)
        return 2
    for s in a.src:
        if not (s / "latency_divide").is_dir():
            print(f"--src {s}: no latency_divide package there", file=sys.stderr)
            return 2
    print(f"topology of household {a.household}, {a.runs} fresh processes per tree, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    runs: dict[Path, list[dict]] = {s: [] for s in a.src}
    for _ in range(a.runs):
        for s in a.src:
            runs[s].append(one_run(s.resolve(), a.household, a.delayline))
    print(f"{'source tree':40s} {'programs':>8s} {'cpu_s':>7s} {'host_s':>7s} {'wall_s':>7s}")
    med = {}
    for s, rs in runs.items():
        med[s] = {k: statistics.median(r[k] for r in rs)
                  for k in ("programs", "cpu_s", "host_s", "wall_s")}
        m = med[s]
        print(f"{str(s):40s} {m['programs']:8.0f} {m['cpu_s']:7.3f} {m['host_s']:7.3f} "
              f"{m['wall_s']:7.3f}   ({rs[0]['mechanism']}; {', '.join(rs[0]['by_program'])})")
    if len(a.src) > 1:
        base = med[a.src[0]]
        for s in a.src[1:]:
            print(f"{s} / {a.src[0]}: cpu {med[s]['cpu_s'] / base['cpu_s']:.2f}, host "
                  f"{med[s]['host_s'] / base['host_s']:.2f}, programs "
                  f"{med[s]['programs']:.0f} vs {base['programs']:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
