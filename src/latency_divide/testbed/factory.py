"""Choosing the testbed: the one place that turns a testbed kind into an implementation.

``local`` is testbed.local (namespaces on this host), ``ssh`` one slice of an inventory
(testbed.ssh.testbed). :func:`open_testbed` gives a run its testbed and closes it; with
``any_free_slice`` (the workflow's parallel SSH trials) it takes the first slice of the
inventory that no other job of this checkout holds, waiting while all are busy.
"""

from __future__ import annotations

import contextlib
import fcntl
import time
from pathlib import Path

from latency_divide.errors import EnvironmentError_
from latency_divide.paths import SLICE_LOCKS
from latency_divide.testbed.base import Testbed
from latency_divide.vocab import TESTBED_KINDS


def make_testbed(kind: str = "local", inventory=None, slice_name: str | None = None) -> Testbed:
    """The testbed of a run: ``local`` or ``ssh`` (one slice of ``inventory``)."""
    if kind == "local":
        from latency_divide.testbed.local import LocalTestbed

        return LocalTestbed()
    if kind == "ssh":
        if inventory is None:
            raise EnvironmentError_("testbed kind 'ssh' needs an inventory (testbed.inventory "
                                    "or --inventory)")
        from latency_divide.testbed.ssh.testbed import SshTestbed

        return SshTestbed(inventory, slice_name)
    raise ValueError(f"testbed kind {kind!r}: use {' or '.join(TESTBED_KINDS)}")


@contextlib.contextmanager
def open_testbed(kind: str | None = None, inventory=None, slice_name: str | None = None, *,
                 any_free_slice: bool = False, log=None):
    """The testbed for a run, closed on exit. ``kind`` None: ``ssh`` when an inventory is
    given, else ``local``."""
    kind = kind or ("ssh" if inventory is not None else "local")
    if kind == "ssh" and any_free_slice and slice_name is None:
        from latency_divide.testbed.inventory import load_inventory

        inventory = load_inventory(inventory)
        with acquire_slice(inventory.slice_names(), log=log) as name:
            if log:
                log(f"[latency-divide] on slice {name}")
            with open_testbed(kind, inventory, name) as tb:
                yield tb
        return
    tb = make_testbed(kind, inventory, slice_name)
    try:
        yield tb
    finally:
        tb.close()


@contextlib.contextmanager
def acquire_slice(names, lock_dir: Path = SLICE_LOCKS, *, poll_s: float = 1.0,
                  timeout_s: float | None = None, log=None):
    """Hold an exclusive lock (flock on ``lock_dir/slice-<name>.lock``) on the first free
    slice of ``names``, waiting while all are busy; yield its name. The kernel drops the lock
    when the holder dies, so a killed job never blocks a slice. (Across checkouts and hosts the
    slice lock on the nodes, testbed.ssh.lock, keeps trials apart.)"""
    lock_dir = Path(lock_dir)
    lock_dir.mkdir(parents=True, exist_ok=True)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    said = False
    while True:
        for name in names:
            f = open(lock_dir / f"slice-{name}.lock", "a")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.close()
                continue
            try:
                yield name
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
                f.close()
            return
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"no free slice among {', '.join(names)} within {timeout_s} s")
        if log and not said:
            log(f"[latency-divide] all slices busy ({', '.join(names)}): waiting")
            said = True
        time.sleep(poll_s)
