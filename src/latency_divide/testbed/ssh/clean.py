"""Undo SSH trials whose owning process died (`latency-divide clean`).

The trial's state record (testbed.ssh.state) says what it changed; its processes are stopped
only if each pid still runs the recorded program, started at the recorded time, and the nodes
are restored by the same :func:`~latency_divide.testbed.ssh.state.restore_nodes` a trial's own
teardown uses, while holding the slice's lock.

"""

from __future__ import annotations

import os
import posixpath
import socket
from pathlib import Path

from latency_divide.errors import ConfigError, LatencyDivideError
from latency_divide.testbed.inventory import load_inventory
from latency_divide.testbed.runners import pid_alive
from latency_divide.testbed.ssh import state as ssh_state
from latency_divide.testbed.ssh.connection import SliceBusyError
from latency_divide.testbed.ssh.lock import NodeLock
from latency_divide.testbed.ssh.state import (
    Attempts,
    _process_identity,
    _read_state,
    restore_nodes,
)
from latency_divide.testbed.ssh.testbed import SshTestbed
from latency_divide.vocab import ROLE_OF


def clean_remote(force: bool = False, log=print) -> tuple[list[str], list[str], list[str]]:
    """Undo SSH trials whose owning process died: stop their recorded processes (only those
    whose pid still runs the recorded program, started at the recorded time), delete our root
    qdiscs and bridge, remove the run directories (only the one our trial made: <slice
    workdir>/run/<tag>). A record that cannot be used is skipped with an error naming it.
    Returns (done, errors, warnings: the records skipped)."""
    done: list[str] = []
    errors: list[str] = []
    warnings_: list[str] = []
    if not ssh_state.SSH_STATE_DIR.is_dir():
        return done, errors, warnings_
    for path in sorted(ssh_state.SSH_STATE_DIR.glob("*.json")):
        st, why = _read_state(path)
        if st is None:
            warnings_.append(f"{path}: skipped, {why}")
            continue
        if pid_alive(st["owner_pid"]) and st["owner_pid"] != os.getpid() and not force:
            continue
        try:
            base = Path(st["inventory"]).parent if st.get("inventory") else None
            inv = load_inventory(st["inventory_raw"], base=base)
        except ConfigError as e:
            # an inventory that no longer loads (its known_hosts or key file gone): nothing
            # can be reached with it; say so and go on rather than fail every clean forever
            warnings_.append(f"{path}: skipped, its inventory cannot be used any more: {e}")
            continue
        try:
            tb = SshTestbed(inv, st["slice"])
            ours = posixpath.normpath(f"{tb.slice.workdir}/run/{st['tag']}")
            if st["rundir"] != ours:
                tb.close()
                warnings_.append(f"{path}: skipped, its run directory {st['rundir']!r} is not "
                                 f"the one a trial of ours makes ({ours})")
                continue
            locks: list[NodeLock] = []
            try:
                # undo only while no other run uses the slice (its lock went with its owner)
                who = f"{socket.gethostname()} pid {os.getpid()} clean of trial {st['tag']}"
                try:
                    for role in ("gw", "dly"):
                        locks.append(NodeLock(tb.runner(role), tb.slice.workdir,
                                              tb.slice.name, who).acquire())
                except SliceBusyError as e:
                    errors.append(f"{path}: not cleaned now: {e}")
                    continue
                errs = []
                for p in st["processes"]:
                    role = ROLE_OF[p["role"]]
                    r = tb.runner(role)
                    now = _process_identity(r, p["pid"])
                    if now is None:
                        continue  # gone
                    if now != (p["argv0"], p.get("start_ticks")):
                        errs.append(f"{r.where}: pid {p['pid']} not stopped: it runs "
                                    f"{now[0]!r} started at tick {now[1]}, not the recorded "
                                    f"{p['argv0']!r} started at {p.get('start_ticks')}")
                        continue
                    r.run(["kill", "-KILL", str(p["pid"])], check=False)
                    done.append(f"{r.where}: killed pid {p['pid']} ({p['argv0']})")
                attempt = Attempts()
                restore_nodes(tb.runner, st, attempt)
                errs += attempt.errors
            finally:
                for lock in reversed(locks):
                    lock.release()
                tb.close()
            if errs:
                errors += errs
            else:
                path.unlink(missing_ok=True)
                done.append(f"slice {st['slice']}: trial {st['tag']} cleaned")
        except LatencyDivideError as e:
            errors.append(f"slice {st.get('slice')}: {e}")
    return done, errors, warnings_
