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
