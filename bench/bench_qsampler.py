#!/usr/bin/env python3
"""Cost of one queue sample: forking ``tc -s -j qdisc show dev DEV`` (the old sampler) against
one rtnetlink dump from the sampler's own process (latency_divide.testbed.qsampler.sample_once);
with --cadence R, what a sampler process costs at a trial's cadence: the Python module against
the native tools/qsampler (both ``--fifo bfifo --interval 0.1``), R rounds of --seconds each,
alternating which runs first, each process's CPU read from /proc/PID/schedstat once it is ready
and again --seconds later, divided by the samples it wrote in between; and its start-up CPU
(until ready). A sample in a loop costs a tenth of what one costs every 100 ms: the process
wakes cold.

Sets up a namespace of its own (``ldq-`` + random suffix) with a veth under htb root + class +
bfifo, as the gateway has, runs the measurement inside it (``ip netns exec``), and deletes the
namespace at the end. Prints, per way, the median wall time and CPU time per sample (CPU =
time.process_time plus the children's user+system time from getrusage(RUSAGE_CHILDREN)) and
the ratio old/new. Needs root. Example:

    sudo .venv/bin/python bench/bench_qsampler.py --n 500 --cadence 5
"""

from __future__ import annotations

import argparse
import os
import resource
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from latency_divide.testbed import qsampler

DEV, PEER = "ldqa", "ldqb"


def _run(argv: list[str]) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=30)


def setup(ns: str) -> None:
    n, t = ["ip", "-n", ns], ["tc", "-n", ns]
    for argv in (
        n + ["link", "add", DEV, "type", "veth", "peer", "name", PEER],
        n + ["link", "set", DEV, "up"],
        n + ["link", "set", PEER, "up"],
        t + ["qdisc", "replace", "dev", DEV, "root", "handle", "1:", "htb", "default", "3",
             "r2q", "10"],
        t + ["class", "add", "dev", DEV, "parent", "1:", "classid", "1:3", "htb", "rate",
             "3498kbit"],
        t + ["qdisc", "add", "dev", DEV, "parent", "1:3", "handle", "10:", "bfifo", "limit",
             "43725b"],
    ):
        _run(argv)


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def measure(fn, dev: str, n: int) -> tuple[list[float], list[float]]:
    """Per-sample wall and CPU seconds of n calls of fn(dev)."""
    wall, cpu = [], []
    for _ in range(n):
        w0, c0, k0 = time.perf_counter(), time.process_time(), _children_cpu()
        fn(dev)
        w1, c1, k1 = time.perf_counter(), time.process_time(), _children_cpu()
        wall.append(w1 - w0)
        cpu.append((c1 - c0) + (k1 - k0))
    return wall, cpu


def inner(dev: str, n: int) -> None:
    ways = {"old (fork tc)": qsampler.sample_tc, "new (netlink)": qsampler.sample_once}
    keys = ("kind", "handle", "backlog", "qlen", "drops", "bytes", "packets", "options")
    a, b = qsampler.sample_tc(dev), qsampler.sample_once(dev)
    same = [{k: q.get(k) for k in keys} for q in a] == [{k: q.get(k) for k in keys} for q in b]
    for fn in ways.values():  # warm up (page cache, socket)
        measure(fn, dev, 5)
    res = {}
    for name, fn in ways.items():
        wall, cpu = measure(fn, dev, n)
        res[name] = (statistics.median(wall), statistics.median(cpu), sum(cpu) / n)
    print(f"dev {dev}: {len(b)} qdiscs, netlink == tc on the parser's keys: {same}; "
          f"n = {n} samples per way")
    print(f"{'way':<16}{'median wall us':>16}{'median CPU us':>16}{'mean CPU us':>14}")
    for name, (w, c, m) in res.items():
        print(f"{name:<16}{w * 1e6:>16.1f}{c * 1e6:>16.1f}{m * 1e6:>14.1f}")
    (ow, oc, om), (nw, nc, nm) = res["old (fork tc)"], res["new (netlink)"]
    print(f"{'ratio old/new':<16}{ow / nw:>16.1f}{oc / nc if nc else float('inf'):>16.1f}"
          f"{om / nm if nm else float('inf'):>14.1f}")


def _schedstat_s(pid: int) -> float:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


def cadence_run(ns: str, argv: list[str], seconds: float, out: Path) -> tuple[float, float]:
    """(CPU µs per sample at the trial's cadence, start-up CPU ms) of one sampler process."""
    p = subprocess.Popen(["ip", "netns", "exec", ns, *argv, "--dev", DEV, "--interval", "0.1",
                          "--fifo", "bfifo", "--out", str(out)], stderr=subprocess.PIPE,
                         text=True)
    try:
        ready = p.stderr.readline()
        if not ready.startswith("qsampler ready"):
            raise SystemExit(f"bench_qsampler: {argv[0]} did not start: {ready}")
        c0, n0 = _schedstat_s(p.pid), len(out.read_text().splitlines())
        time.sleep(seconds)
        c1, n1 = _schedstat_s(p.pid), len(out.read_text().splitlines())
    finally:
        p.terminate()
        p.wait(timeout=10)
    return (c1 - c0) / max(1, n1 - n0) * 1e6, c0 * 1e3


def cadence(ns: str, rounds: int, seconds: float) -> None:
    native = ROOT / "target" / "release" / "qsampler"
    if not native.exists():
        raise SystemExit(f"bench_qsampler: {native} is missing: run scripts/setup.sh")
    ways = {"python": [sys.executable, "-m", "latency_divide.testbed.qsampler"],
            "native": [str(native)]}
    res: dict[str, list[tuple[float, float]]] = {w: [] for w in ways}
    with tempfile.TemporaryDirectory(prefix="ld-bench-qs-") as tmp:
        for r in range(rounds):
            for w in (list(ways) if r % 2 == 0 else list(ways)[::-1]):
                res[w].append(cadence_run(ns, ways[w], seconds, Path(tmp) / f"{w}{r}.jsonl"))
    print(f"\nat a trial's cadence (one sample per 100 ms): {rounds} rounds of {seconds:g} s "
          f"per way, alternating")
    print(f"{'way':<10}{'CPU us/sample':>15}{'(min-max)':>16}{'start-up CPU ms':>17}"
          f"{'a 60 s trial, CPU s':>21}")
    med = {}
    for w, runs in res.items():
        per, start = [x[0] for x in runs], [x[1] for x in runs]
        med[w] = (statistics.median(per), statistics.median(start))
        trial = (med[w][1] / 1e3) + 650 * med[w][0] / 1e6  # 65 s of idle baseline + transfer
        print(f"{w:<10}{med[w][0]:>15.0f}{f'({min(per):.0f}-{max(per):.0f})':>16}"
              f"{med[w][1]:>17.1f}{trial:>21.3f}")
    print(f"{'ratio python/native':<25}{med['python'][0] / med['native'][0]:>6.2f} per sample, "
          f"{med['python'][1] / med['native'][1]:.1f} at start-up")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=300, help="samples per way (default 300)")
    ap.add_argument("--cadence", type=int, default=0, metavar="R",
                    help="then R rounds of each sampler process at a trial's cadence")
    ap.add_argument("--seconds", type=float, default=10.0,
                    help="length of a --cadence round, s (default 10)")
    ap.add_argument("--inner", metavar="DEV", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.inner:
        inner(a.inner, a.n)
        return 0
    if os.geteuid() != 0:
        print("bench_qsampler: needs root (network namespaces)", file=sys.stderr)
        return 2
    ns = "ldq-" + secrets.token_hex(4)
    _run(["ip", "netns", "add", ns])
    try:
        setup(ns)
        rc = subprocess.run(["ip", "netns", "exec", ns, sys.executable, __file__,
                             "--inner", DEV, "--n", str(a.n)]).returncode
        if rc == 0 and a.cadence > 0:
            cadence(ns, a.cadence, a.seconds)
        return rc
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


if __name__ == "__main__":
    sys.exit(main())
