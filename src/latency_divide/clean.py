"""Remove exactly our leftovers: namespaces named ``ld-<tag>-<role>`` whose owning process
is gone (and the processes inside them, by the PIDs the kernel lists for those namespaces),
plus stale owner records. Safe to run any number of times; never touches other names.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from . import topology
from .runners import pid_alive


@dataclass
class CleanReport:
    removed: list[str] = field(default_factory=list)
    in_use: list[str] = field(default_factory=list)
    records_removed: list[str] = field(default_factory=list)
    tmp_removed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _owner_pid(tag: str) -> int | None:
    try:
        rec = json.loads((topology.STATE_DIR / f"{tag}.json").read_text())
        return int(rec["pid"])
    except (FileNotFoundError, ValueError, KeyError, json.JSONDecodeError):
        return None


#: A trial's temporary directory: ``.ld-tmp-rep<r>-<owner pid>-<random>`` (see trial.run_trial).
_TMP_DIR = re.compile(r"^\.ld-tmp-rep\d+-(?P<pid>\d+)-")


def clean_tmp_dirs(results: Path, force: bool = False) -> list[str]:
    """Temporary trial directories under ``results`` whose owner process is gone."""
    removed = []
    if not results.is_dir():
        return removed
    for d in results.rglob(".ld-tmp-*"):
        m = _TMP_DIR.match(d.name)
        if not m or not d.is_dir():
            continue
        if pid_alive(int(m["pid"])) and not force:
            continue
        shutil.rmtree(d, ignore_errors=True)
        removed.append(str(d))
    return removed


def clean(force: bool = False, results: Path | None = None) -> CleanReport:
    """Remove namespaces of dead owners (``force``: also of live owners), and abandoned
    temporary trial directories under ``results``."""
    rep = CleanReport()
    if results is not None:
        rep.tmp_removed = clean_tmp_dirs(Path(results), force)
    by_tag: dict[str, list[str]] = {}
    for ns in topology.existing_namespaces():
        parsed = topology.parse_ns_name(ns)
        if parsed:
            by_tag.setdefault(parsed[0], []).append(ns)
    for tag, names in sorted(by_tag.items()):
        pid = _owner_pid(tag)
        if pid is not None and pid != os.getpid() and pid_alive(pid) and not force:
            rep.in_use += names
            continue
        for ns in sorted(names):
            errs = topology.remove_namespace(ns)
            rep.errors += errs
            if not errs:
                rep.removed.append(ns)
    if topology.STATE_DIR.is_dir():
        for rec in topology.STATE_DIR.glob("*.json"):
            tag = rec.stem
            if tag in by_tag and any(ns in rep.in_use for ns in by_tag[tag]):
                continue
            pid = _owner_pid(tag)
            if tag not in by_tag and pid is not None and pid_alive(pid) and not force:
                continue  # its owner is still building it
            rec.unlink(missing_ok=True)
            rep.records_removed.append(rec.name)
    return rep
