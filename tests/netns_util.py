"""Helpers for tests that run in network namespaces (the gate itself is the ``netns`` marker,
in conftest.py)."""

import shutil

import pytest
from latency_divide.testbed.netns import existing_namespaces

def our_namespaces(tag: str) -> list[str]:
    return [n for n in existing_namespaces() if n.startswith(f"ld-{tag}-")]


def require_programs(*names: str) -> None:
    missing = [n for n in names if shutil.which(n) is None]
    if missing:
        pytest.fail(f"missing programs {missing}: run scripts/setup.sh (the project installs them)")


#: What a workflow run in a scratch directory needs of this checkout
WORKFLOW_ITEMS = ("Snakefile", "rules", "workflow", "config", "envs", "resources", "profiles")


def copy_workflow(dst):
    """A copy of this checkout's workflow files in the new directory ``dst`` (returned)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    dst.mkdir()
    for item in WORKFLOW_ITEMS:
        src = root / item
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, dst / item)
    return dst
