"""Queue sampler: ``tc -s -j qdisc show dev DEV`` every INTERVAL seconds, one timestamped
JSON object per line (``{"t_unix": ..., "dev": ..., "qdisc": [...]}``), until SIGTERM.

Standard library only, so the same file runs on a remote testbed node with the system
python3 (``python3 qsampler.py --dev IF --interval 0.1 > FILE``). Ticks are scheduled on
absolute times, so the cadence does not drift with the cost of each ``tc`` call; a tick that
falls more than one interval behind is skipped (and counted), never bunched.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time

_stop = False


def _on_term(signum, frame):  # noqa: ARG001
    global _stop
    _stop = True


def sample_once(dev: str) -> list:
    out = subprocess.run(["tc", "-s", "-j", "qdisc", "show", "dev", dev],
                         capture_output=True, text=True, check=True, timeout=5).stdout
    return json.loads(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dev", required=True, help="interface whose qdiscs are sampled")
    ap.add_argument("--interval", type=float, default=0.1, help="seconds between samples (>0)")
    ap.add_argument("--out", default="-", help="output file (JSON lines); - for stdout (default)")
    a = ap.parse_args(argv)
    if not a.interval > 0:
        ap.error(f"--interval must be > 0 seconds, got {a.interval}")
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_term)
    skipped = 0
    n = 0
    f = sys.stdout if a.out == "-" else open(a.out, "w", buffering=1)
    with f:
        try:
            sample_once(a.dev)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, json.JSONDecodeError,
                FileNotFoundError) as e:
            print(f"qsampler: cannot read qdiscs of {a.dev}: {e}", file=sys.stderr)
            return 2
        print(f"qsampler ready dev={a.dev} interval={a.interval}", file=sys.stderr, flush=True)
        next_t = time.time()
        while not _stop:
            now = time.time()
            if now < next_t:
                time.sleep(min(next_t - now, 0.05))
                continue
            if now - next_t > a.interval:
                late = int((now - next_t) // a.interval)
                skipped += late
                next_t += late * a.interval
            t = time.time()
            try:
                q = sample_once(a.dev)
            except (subprocess.CalledProcessError, json.JSONDecodeError,
                    subprocess.TimeoutExpired) as e:
                print(f"qsampler: sample failed: {e}", file=sys.stderr)
                q = None
            f.write(json.dumps({"t_unix": round(t, 6), "dev": a.dev, "qdisc": q},
                               separators=(",", ":")) + "\n")
            f.flush()
            n += 1
            next_t += a.interval
    print(f"qsampler stats samples={n} skipped={skipped}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
