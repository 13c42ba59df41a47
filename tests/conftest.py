"""Shared test helpers (keep small): repository paths."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = ROOT / ".venv" / "bin"
DATA_CSV = ROOT / "resources" / "digitaldivide" / "household-internet-data.csv"


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT
