"""Where things are: the checkout, the files it ships, and the results tree.

Every path the package needs is named here once. The checkout is the repository this package
is installed from (editable, by scripts/setup.sh); ``repo_root()`` may be pointed elsewhere
with ``LATENCY_DIVIDE_ROOT`` (where the built tools are). Result paths are relative to the
working directory, as Snakemake's are (the workflow runs from the checkout).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

#: The checkout this package lives in (src/latency_divide/paths.py -> the repository).
CHECKOUT = Path(__file__).resolve().parents[2]
#: The vendored household data set (resources/digitaldivide/README.md: license, attribution).
HOUSEHOLD_DATA = CHECKOUT / "resources" / "digitaldivide" / "household-internet-data.csv"
CONFIG_DIR = CHECKOUT / "config"
CONFIG_SCHEMA = CONFIG_DIR / "schema.yaml"
DEFAULT_CONFIG = CONFIG_DIR / "config.yaml"
INVENTORY_SCHEMA = CONFIG_DIR / "testbeds" / "inventory.schema.yaml"

# The results tree (relative: the workflow's working directory is the checkout).
RESULTS = Path("results")
RAW = RESULTS / "raw"
TABLES = RESULTS / "tables"
FIGURES = RESULTS / "figures"
COMPANIONS = RESULTS / "companions"
#: When the current workflow run started (progress lines, ETA).
RUN_START = Path("logs/run-start.json")
#: One lock file per slice of an SSH inventory (testbed.factory.acquire_slice).
SLICE_LOCKS = RESULTS / ".locks"
#: One record per host and boot of what the host check measured (ops.hostcheck, docs/host.md).
HOST_RECORDS = RESULTS / "host"


def repo_root() -> Path:
    """The checkout with the built tools (target/release/...): ``LATENCY_DIVIDE_ROOT`` if set,
    else this package's checkout, else the working directory."""
    env = os.environ.get("LATENCY_DIVIDE_ROOT")
    if env:
        return Path(env)
    return CHECKOUT if (CHECKOUT / "Cargo.toml").exists() else Path.cwd()


def built_tool(name: str) -> Path:
    """One of our Rust tools (tquic-perf, delayline) as scripts/setup.sh builds it."""
    return repo_root() / "target" / "release" / name


def git_revision(cwd: Path | str | None = None) -> str | None:
    """HEAD's commit, with ``-dirty`` when tracked files differ; None outside a git checkout."""
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True,
                             text=True, timeout=10)
        if rev.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return rev.stdout.strip() + ("-dirty" if dirty else "")
