"""The remote testbed: the paper's four nodes (server, gateway, delay, client) reached over
SSH with Fabric, e.g. a CloudLab ``copa-delay-gw`` experiment or a FABRIC slice.

- :func:`connect` opens a Fabric connection whose host key is verified against known_hosts
  (paramiko ``RejectPolicy``) unless the inventory opts out (``insecure_host_keys: true``).
- :class:`FabricRunner` implements the Runner interface (runners.py) on one node: argv lists
  are quoted with ``shlex.join`` (never glued from strings), prefixed with ``sudo -n`` when
  the login user is not root. ``start()`` launches the process detached (``setsid``) with its
  stdout/stderr in remote files and returns its PID; ``stop()`` signals exactly that PID and
  fetches the files to the local paths given to ``start()``.
- :class:`SshTestbed` is the testbed interface of trial.py (``check``/``open``), for one slice
  of an inventory: it discovers the data-plane interfaces (``ip route get``), applies the link
  plan (htb+bfifo on the gateway, netem or the delay line on the delay node) and restores the
  nodes afterwards. PIDs and changed devices are kept in a local state file
  (``/run/latency-divide/ssh/<tag>.json``) so ``latency-divide clean`` can undo an
  interrupted trial (:func:`clean_remote`).
- :func:`provision_node` installs packages and uploads our tools (rules/provision.smk).

Errors name the host and the step. :class:`SshSetupError` (wrong key, unknown host key, no
sudo, missing interface, node not provisioned) is not retried; :class:`SshError` (refused,
timed out, connection dropped) is, by the trial runner's retry loop.
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
    BRIDGE,
    _process_identity,
    _read_state,
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
                for role, devs in st.get("qdisc_devs", {}).items():
                    for dev in devs:
                        res = tb.runner(role).run(["tc", "qdisc", "del", "dev", dev, "root"], check=False)
                        if res.returncode == 0:
                            done.append(f"{tb.slice.node(role).host}: deleted root qdisc of {dev}")
                if st.get("bridge"):
                    tb.runner("dly").run(["ip", "link", "del", BRIDGE], check=False)
                for role, devs in st.get("offloads", {}).items():
                    for dev, feats in devs.items():
                        if feats:
                            tb.runner(role).run(["ethtool", "-K", dev,
                                                 *[w for k, v in feats.items() for w in (k, v)]],
                                                check=False)
                for role in ("srv", "gw", "dly", "cli"):
                    res = tb.runner(role).run(["rm", "-rf", "--", f"{ours}/{role}"],
                                              check=False)
                    if res.returncode != 0:
                        errs.append(f"{role}: {res.stderr.strip()}")
                tb.runner("srv").run(["rmdir", "--", ours], check=False)
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
