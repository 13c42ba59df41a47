"""Atomic file writes: write a temporary file beside the target, then rename it into place,
so a reader (or a killed run) never sees a partial file that looks complete. The temporary
name carries our prefix and the PID, and it is removed if the write fails."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces ``path``. The temporary name
    keeps the suffix, for writers that choose the format by it (plotnine, pyarrow)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.ld-tmp-{os.getpid()}{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_text_atomic(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json_atomic(path: str | Path, obj, *, indent: int | None = 2,
                      sort_keys: bool = True) -> None:
    write_text_atomic(path, json.dumps(obj, indent=indent, sort_keys=sort_keys, default=str) + "\n")
