"""Atomic file writes: write a temporary file beside the target, then rename it into place,
so a reader (or a killed run) never sees a partial file that looks complete. The temporary
name carries our prefix and the PID, and it is removed if the write fails."""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:  # pandas costs 1.7 s to import: trial jobs (which hash files) skip it
    pass


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


def json_text(obj, *, indent: int | None = 2, sort_keys: bool = True) -> str:
    """``obj`` as the JSON text :func:`write_json_atomic` writes (``indent=None``: compact, no
    spaces; one newline at the end)."""
    seps = (",", ":") if indent is None else None
    return json.dumps(obj, indent=indent, sort_keys=sort_keys, default=str, separators=seps) + "\n"


def write_json_atomic(path: str | Path, obj, *, indent: int | None = 2,
                      sort_keys: bool = True) -> None:
    """``obj`` as JSON (temp file, then rename); ``indent=None``: compact, no spaces."""
    write_text_atomic(path, json_text(obj, indent=indent, sort_keys=sort_keys))


def sha256_file(path: Path | str) -> str:
    return hash_file(path, "sha256")


def hash_file(path: Path | str, algorithm: str = "sha256") -> str:
    """Hex digest of a file's content (read in 1 MiB chunks)."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def hash_dir(path: Path | str) -> dict[str, str]:
    """sha256 of every regular file under ``path`` (relative POSIX names, sorted)."""
    root = Path(path)
    out = {}
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        out[f.relative_to(root).as_posix()] = sha256_file(f)
    return out
