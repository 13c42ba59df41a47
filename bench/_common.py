"""What the benchmarks that build namespaces and run our delay line share."""

import os
import sys
from pathlib import Path


def delayline_preconditions(bench: str, binary: Path) -> int | None:
    """None when the bench can run (root, the delay line built), else its exit status after
    saying why on stderr."""
    if os.geteuid() != 0:
        print(f"{bench}: needs root (network namespaces)", file=sys.stderr)
        return 2
    if not binary.exists():
        print(f"{bench}: {binary} missing; cargo build --release -p delayline", file=sys.stderr)
        return 2
    return None
