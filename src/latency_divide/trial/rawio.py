"""Reading and writing files of a raw trial directory.

Large logs are stored gzip-compressed (``queue.jsonl.gz``, ``receiver.log.gz``,
``ping.log.gz``): the published data set stays small and `zcat` reads them. Readers ask for
the plain name and get either form, so old and new directories read the same.
"""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

from latency_divide.trial.layout import COMPRESSED_LOGS


def find(trial_dir: Path | str, name: str) -> Path | None:
    """The file ``name`` or ``name.gz`` in ``trial_dir``, or None."""
    d = Path(trial_dir)
    for cand in (d / name, d / f"{name}.gz"):
        if cand.is_file():
            return cand
    return None


def read_text(trial_dir: Path | str, name: str) -> str:
    """Text of ``name`` (plain or gzip); FileNotFoundError naming the path if neither exists.
    Logs are compressed only once a trial is complete, so a gzip file cut short is corruption:
    its EOFError propagates."""
    p = find(trial_dir, name)
    if p is None:
        raise FileNotFoundError(f"{Path(trial_dir) / name} (or .gz) is missing")
    if p.suffix != ".gz":
        return p.read_text(errors="replace")
    with gzip.open(p, "rt", errors="replace") as f:
        return f.read()


def compress_logs(trial_dir: Path | str, names=COMPRESSED_LOGS) -> None:
    """Replace each plain log by ``name.gz`` (deterministic: no name or mtime in the header,
    so the same log always gives the same bytes and DVC hashes stay stable)."""
    d = Path(trial_dir)
    for name in names:
        src = d / name
        if not src.is_file():
            continue
        dst = d / f"{name}.gz"
        tmp = d / f".{name}.gz.tmp"
        with open(src, "rb") as fin, open(tmp, "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
                shutil.copyfileobj(fin, gz)
        os.replace(tmp, dst)
        src.unlink()
