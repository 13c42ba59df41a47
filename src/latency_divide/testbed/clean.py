"""Remove exactly our leftovers: namespaces named ``ld-<tag>-<role>`` whose owning process
is gone (and the processes inside them, by the PIDs the kernel lists for those namespaces),
plus stale owner records and placement records (testbed.placement) of trial jobs that are
gone, the start gate's file (testbed.startgate) when no start holds it, and the halt polling
records of trial jobs that are gone, with the host's value put back when no trial holds it
(testbed.haltpoll). Safe to run any number of times; never touches other names.
(SSH trials: testbed.ssh.clean; abandoned temporary trial directories: trial.run.)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from latency_divide.testbed import netns
from latency_divide.testbed.netns import (
    TAG,
    existing_namespaces,
    parse_ns_name,
    remove_namespace,
)
from latency_divide.testbed.haltpoll import clean_halt_poll
from latency_divide.testbed.runners import pid_alive
from latency_divide.testbed import loadgate
from latency_divide.testbed.startgate import clean_gate


@dataclass
class CleanReport:
    removed: list[str] = field(default_factory=list)
    in_use: list[str] = field(default_factory=list)
    records_removed: list[str] = field(default_factory=list)
    #: host settings put back (testbed.haltpoll) because no live trial job holds them
    restored: list[str] = field(default_factory=list)
    #: abandoned temporary trial directories removed (trial.run.clean_tmp_dirs)
    tmp_removed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: records skipped because they cannot be trusted (named, with why); cleaning went on
    warnings: list[str] = field(default_factory=list)


class BadRecord(Exception):
    """An owner record that cannot be trusted; str(e) names the file and why."""


def _owner_pid(tag: str) -> int | None:
    """The pid of the process that owns a tag's namespaces, None if there is no record.
    Raises BadRecord for a record that is unreadable or malformed."""
    path = netns.STATE_DIR / f"{tag}.json"
    try:
        rec = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadRecord(f"{path}: unreadable owner record ({e})") from None
    pid = rec.get("pid") if isinstance(rec, dict) else None
    if isinstance(pid, bool) or not isinstance(pid, int) or pid < 2:
        raise BadRecord(f"{path}: malformed owner record (pid {pid!r})")
    return pid


def clean(force: bool = False) -> CleanReport:
    """Remove namespaces of dead owners (``force``: also of live owners) and stale owner
    records. (Abandoned temporary trial directories: trial.run.clean_tmp_dirs.)"""
    rep = CleanReport()
    by_tag: dict[str, list[str]] = {}
    for ns in existing_namespaces():
        parsed = parse_ns_name(ns)
        if parsed:
            by_tag.setdefault(parsed[0], []).append(ns)
    bad: set[str] = set()
    for tag, names in sorted(by_tag.items()):
        try:
            pid = _owner_pid(tag)
        except BadRecord as e:
            rep.warnings.append(f"{e}: skipped, its namespaces {', '.join(names)} left alone")
            bad.add(tag)
            continue
        if pid is not None and pid != os.getpid() and pid_alive(pid) and not force:
            rep.in_use += names
            continue
        for ns in sorted(names):
            errs = remove_namespace(ns)
            rep.errors += errs
            if not errs:
                rep.removed.append(ns)
    if netns.STATE_DIR.is_dir():
        for rec in netns.STATE_DIR.glob("*.json"):
            tag = rec.stem
            if tag in bad or not TAG.match(tag) or not rec.is_file():
                continue  # not one of ours, or already reported
            if tag in by_tag and any(ns in rep.in_use for ns in by_tag[tag]):
                continue
            try:
                pid = _owner_pid(tag)
            except BadRecord as e:
                rep.warnings.append(f"{e}: skipped")
                continue
            if tag not in by_tag and pid is not None and pid_alive(pid) and not force:
                continue  # its owner is still building it
            rec.unlink(missing_ok=True)
            rep.records_removed.append(rec.name)
    rep.records_removed += clean_placement_records(force)
    rep.records_removed += clean_gate()
    rep.records_removed += loadgate.clean_gate()
    records, restored = clean_halt_poll(force)
    rep.records_removed += records
    rep.restored += [restored] if restored else []
    return rep


def clean_placement_records(force: bool = False) -> list[str]:
    """Remove the placement records (testbed.placement) of trial jobs that are gone (``force``:
    of live ones too); return their names."""
    removed = []
    cpus = netns.STATE_DIR / "cpus"
    if cpus.is_dir():
        for rec in sorted(cpus.glob("*.json")):
            if not rec.stem.isdigit() or not rec.is_file():
                continue  # not one of ours
            if pid_alive(int(rec.stem)) and not force:
                continue
            rec.unlink(missing_ok=True)
            removed.append(f"cpus/{rec.name}")
    return removed
