"""How long `latency-divide trace FIGURE` takes (the figure's trials back to DVC's manifest).

Run it on a re-analysed checkout (after `dvc pull` and `snakemake --cores 1 all`):

    .venv/bin/python bench/bench_trace.py --repo . --runs 5

Prints each run's wall time and the median; the trace lines themselves are not printed.
"""

import argparse
import statistics
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", default=".", help="a checkout with results/figures (default .)")
    ap.add_argument("--figure", default="results/figures/delay_tput.pdf")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--files", action="store_true", help="trace --files (every file's md5)")
    ap.add_argument("--cli", default=str(ROOT / ".venv/bin/latency-divide"),
                    help="the latency-divide to time (another checkout's, to compare)")
    args = ap.parse_args()
    argv = [args.cli, "trace", args.figure]
    if args.files:
        argv.insert(2, "--files")
    times = []
    for i in range(args.runs):
        t0 = time.perf_counter()
        p = subprocess.run(argv, cwd=args.repo, capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        if p.returncode != 0:
            raise SystemExit(f"trace failed ({p.returncode}): {p.stderr.strip()[-500:]}")
        print(f"run {i + 1}: {times[-1]:.2f} s ({len(p.stdout.splitlines())} lines)")
    print(f"median {statistics.median(times):.2f} s over {args.runs} runs")


if __name__ == "__main__":
    main()
