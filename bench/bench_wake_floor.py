#!/usr/bin/env python3
"""What one timer wake-up costs on this machine, by how long the process slept before it: the
floor under the instrument's cost per frame (issue 40).

The delay line, the tool ends and the queue sampler each sleep and wake up, and on a virtual
machine a wake-up costs more the longer the CPU sat idle before it (the vCPU halted: a VM exit
and an interrupt to come back; caches gone cold). A 1 Mbit/s link's frames come about 6 ms apart,
a 56 Mbit/s link's about 120 µs, and the queue sampler wakes every 100 ms.

A small C loop (compiled here with the system's cc into a temporary directory) sleeps to
absolute CLOCK_MONOTONIC times GAP apart at SCHED_FIFO 10 (the delay line's priority), alone on
one CPU, and reports its own CPU time per wake-up (CLOCK_PROCESS_CPUTIME_ID) and how late it
woke on average. Each gap runs --rounds times, the gaps interleaved, for about --seconds each;
the table has the medians (and the spread). With guest halt polling as trials hold it
(testbed.haltpoll, the host's governor allowing), unless --halt-poll off.

Needs root (SCHED_FIFO, halt polling) and cc. About 1 minute with the defaults:

    .venv/bin/python bench/bench_wake_floor.py
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from latency_divide.errors import ConfigError  # noqa: E402
from latency_divide.testbed.haltpoll import ENV as HALT_POLL_ENV  # noqa: E402
from latency_divide.testbed.haltpoll import halt_polling, wanted_ns  # noqa: E402

LOOP_C = r"""
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double ns(struct timespec t) { return t.tv_sec * 1e9 + t.tv_nsec; }
int main(int argc, char **argv) {
    long gap = atol(argv[1]);
    int n = atoi(argv[2]);
    struct sched_param sp = {.sched_priority = 10};
    int fifo = sched_setscheduler(0, SCHED_FIFO, &sp) == 0;
    struct timespec t, c0, c1, now;
    double late = 0;
    clock_gettime(CLOCK_MONOTONIC, &t);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
    for (int i = 0; i < n; i++) {
        t.tv_nsec += gap;
        while (t.tv_nsec >= 1000000000) { t.tv_nsec -= 1000000000; t.tv_sec++; }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, 0);
        clock_gettime(CLOCK_MONOTONIC, &now);
        late += ns(now) - ns(t);
    }
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
    printf("%.3f %.3f %d\n", (ns(c1) - ns(c0)) / n / 1e3, late / n / 1e3, fifo);
    return 0;
}
"""

GAPS_MS = (0.1, 0.2, 1.0, 5.0, 20.0, 100.0)


def build(tmp: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("bench_wake_floor: no C compiler (cc/gcc): run scripts/setup.sh")
    src, exe = tmp / "wake.c", tmp / "wake"
    src.write_text(LOOP_C)
    subprocess.run([cc, "-O2", "-o", str(exe), str(src)], check=True)
    return exe


def run(exe: Path, gap_ms: float, seconds: float, cpu: int) -> tuple[float, float, bool]:
    n = max(10, int(seconds * 1e3 / gap_ms))
    out = subprocess.run(["taskset", "-c", str(cpu), str(exe), str(int(gap_ms * 1e6)), str(n)],
                         capture_output=True, text=True, check=True, timeout=seconds * 3 + 30)
    cpu_us, late_us, fifo = out.stdout.split()
    return float(cpu_us), float(late_us), fifo == "1"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="runs per gap (default 3)")
    ap.add_argument("--seconds", type=float, default=3.0, help="length of a run, s (default 3)")
    ap.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)),
                    help="the CPU the loop runs on (default the last one allowed)")
    ap.add_argument("--halt-poll", metavar="NS|off",
                    help="guest halt polling while it runs: as trials set it (default), a "
                    "number of ns, or off (the host's own)")
    a = ap.parse_args()
    if not 1 <= a.rounds <= 50 or not 0.5 <= a.seconds <= 60:
        ap.error("--rounds: 1..50; --seconds: 0.5..60")
    if a.cpu not in os.sched_getaffinity(0):
        ap.error(f"--cpu {a.cpu}: allowed are {sorted(os.sched_getaffinity(0))}")
    if a.halt_poll is not None:
        os.environ[HALT_POLL_ENV] = a.halt_poll
    try:
        poll_ns = wanted_ns()
    except ConfigError as e:
        ap.error(f"--halt-poll: {e}")
    res: dict[float, list[tuple[float, float]]] = {g: [] for g in GAPS_MS}
    fifo = True
    with halt_polling(poll_ns) as poll, tempfile.TemporaryDirectory(prefix="ld-bench-wake-") as tmp:
        exe = build(Path(tmp))
        for r in range(a.rounds):
            for g in (GAPS_MS if r % 2 == 0 else GAPS_MS[::-1]):
                cpu_us, late_us, f = run(exe, g, a.seconds, a.cpu)
                res[g].append((cpu_us, late_us))
                fifo = fifo and f
    polled = ("none (no governor)" if poll["halt_poll_ns"] is None
              else f"{poll['halt_poll_ns']} ns (the host's own {poll['host_halt_poll_ns']})")
    print(f"timer wake-ups on CPU {a.cpu}, {'SCHED_FIFO 10' if fifo else 'normal scheduler'}, "
          f"{a.rounds} runs of about {a.seconds:g} s per gap, interleaved; guest halt polling "
          f"{polled}")
    print(f"{'sleep between wake-ups':>24}{'CPU µs per wake-up':>21}{'(min-max)':>16}"
          f"{'woke late, µs':>15}")
    for g in GAPS_MS:
        cpu = [x[0] for x in res[g]]
        late = statistics.median(x[1] for x in res[g])
        print(f"{g:>21g} ms{statistics.median(cpu):>21.1f}"
              f"{f'({min(cpu):.1f}-{max(cpu):.1f})':>16}{late:>15.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
