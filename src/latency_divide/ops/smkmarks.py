"""Snakemake's "incomplete" marks left on trials that are complete.

Snakemake marks a job's outputs incomplete while the job runs and unmarks them when it ends.
A Snakemake that is killed (or that hangs after SIGTERM and is then killed, docs/population.md
"Continuing the run") leaves the marks of trials that finished meanwhile, and the next run
stops with IncompleteFilesException. A trial directory appears only complete (its meta.json is
renamed into place last, trial.run), so a mark on a trial meta.json that exists and reads as a
JSON object is stale: :func:`clear_trial_marks` removes exactly those marks (``latency-divide
clean``; ``snakemake --cleanup-metadata <meta.json>`` removes them too, with the trial's
metadata record), and never a mark of anything else, nor of a trial that is not on disk
(``--rerun-incomplete`` would measure those again).

A mark is a file under ``<snakemake dir>/incomplete/`` named by the output path in URL-safe
base64, split into directory levels of at most NAME_MAX - 1 characters, each but the last
prefixed with "@" (Snakemake 9's persistence.file).
"""

from __future__ import annotations

import binascii
import json
import os
from base64 import urlsafe_b64decode, urlsafe_b64encode
from pathlib import Path

from latency_divide.trial.layout import META, parse_trial_path


def _decode(rel: Path) -> str | None:
    """The output path a mark file (relative to incomplete/) stands for, None if not a mark."""
    parts = rel.parts
    if any(not p.startswith("@") for p in parts[:-1]) or parts[-1].startswith("@"):
        return None
    b64 = "".join(p[1:] for p in parts[:-1]) + parts[-1]
    try:
        out = urlsafe_b64decode(b64.encode()).decode()
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None
    # exactly Snakemake's encoding (the decoder skips characters outside the alphabet)
    return out if urlsafe_b64encode(out.encode()).decode() == b64 else None


def _complete_trial(output: str, base: Path) -> bool:
    p = Path(output)
    if p.name != META or parse_trial_path(p.parent) is None:
        return False
    try:
        return isinstance(json.loads((base / p).read_text()), dict)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False


def clear_trial_marks(snakemake_dir: Path | str = ".snakemake",
                      base: Path | str = ".") -> list[str]:
    """Remove the incomplete marks of complete trials; return their trials' meta.json paths.
    ``base``: the directory Snakemake ran in (its output paths are relative to it)."""
    root = Path(snakemake_dir) / "incomplete"
    if not root.is_dir():
        return []
    cleared = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            mark = Path(dirpath) / name
            output = _decode(mark.relative_to(root))
            if output is not None and _complete_trial(output, Path(base)):
                mark.unlink(missing_ok=True)
                cleared.append(output)
    return sorted(cleared)
