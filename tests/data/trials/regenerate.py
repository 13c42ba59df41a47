"""Regenerate the real trial fixtures in this directory with ``latency-divide trial`` (needs
root and target/release/tquic-perf; about 10 s per trial). Short trials keep the set under
300 KB: 5 s transfer, 1.5 s idle ping, ping every 0.2 s (queue sampled every 0.1 s, the
default).

    sudo .venv/bin/python tests/data/trials/regenerate.py

Set: households 799254 and 13570 (price bucket 0-30), uplink, cubic and copa (delta 0.5) each;
household 9254 (30-40), downlink, cubic.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLI = Path(sys.executable).with_name("latency-divide")
SET = [
    (799254, "uplink", ["--cc", "cubic"]),
    (799254, "uplink", ["--cc", "copa", "--delta", "0.5"]),
    (13570, "uplink", ["--cc", "cubic"]),
    (13570, "uplink", ["--cc", "copa", "--delta", "0.5"]),
    (9254, "downlink", ["--cc", "cubic"]),
]


def main() -> int:
    for d in sorted(p for p in HERE.iterdir() if p.is_dir() and p.name.isdigit()):
        shutil.rmtree(d)
    for household, direction, cc in SET:
        argv = [str(CLI), "trial", str(household), "--direction", direction, *cc,
                "--duration", "5", "--idle", "1.5", "--ping-interval", "0.2", "--retries", "1",
                "--out", str(HERE)]
        subprocess.run(argv, check=True)
    total = sum(f.stat().st_size for f in HERE.rglob("*") if f.is_file())
    print(f"fixtures: {total} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
