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

import json
from pathlib import Path

from latency_divide.errors import CommandError
from latency_divide.fsio import write_json_atomic
from latency_divide.testbed.netns import STATE_DIR, TAG
from latency_divide.testbed.ssh.runner import FabricRunner
from latency_divide.vocab import ROLE_OF

SSH_STATE_DIR = STATE_DIR / "ssh"


BRIDGE = "ld-br0"


def _write_state(path: Path, state: dict) -> None:
    write_json_atomic(path, state, indent=1, sort_keys=False)


#: root qdisc kinds a trial of ours installs (htb + bfifo on the gateway; netem or tbf on the
#: delay node)
_OUR_ROOT_QDISCS = {"htb", "netem", "tbf"}


def _delete_root_qdisc(r: FabricRunner, dev: str) -> None:
    """Delete our root qdisc of ``dev``. One that is already gone (the node rebooted, or an
    earlier teardown got that far) counts as restored; anything else that fails is raised."""
    res = r.run(["tc", "qdisc", "del", "dev", dev, "root"], check=False)
    if res.returncode == 0:
        return
    show = r.run(["tc", "-j", "qdisc", "show", "dev", dev, "root"], check=False)
    if show.returncode != 0:
        return  # the device itself is gone (rebooted with it)
    try:
        kinds = {q.get("kind") for q in json.loads(show.stdout or "[]")}
    except json.JSONDecodeError:
        kinds = {"?"}
    if kinds & _OUR_ROOT_QDISCS or "?" in kinds:
        raise CommandError(["tc", "qdisc", "del", "dev", dev, "root"], res.returncode,
                           res.stdout, res.stderr, r.where)


def _delete_bridge(r: FabricRunner) -> None:
    res = r.run(["ip", "link", "del", BRIDGE], check=False)
    if res.returncode != 0 and r.run(["ip", "link", "show", BRIDGE], check=False,
                                     sudo=False).returncode == 0:
        raise CommandError(["ip", "link", "del", BRIDGE], res.returncode, res.stdout,
                           res.stderr, r.where)


def _process_identity(runner, pid: int) -> tuple[str, str] | None:
    """(argv[0], start time in clock ticks since boot) of a process on a node, None if gone."""
    res = runner.run(["cat", f"/proc/{int(pid)}/cmdline", f"/proc/{int(pid)}/stat"],
                     check=False, sudo=False)
    if res.returncode != 0:
        return None
    cmdline, _, stat = res.stdout.rpartition("\0")  # cmdline is NUL-terminated
    try:
        start = stat.rsplit(")", 1)[1].split()[19]  # field 22 of proc(5): starttime
    except IndexError:
        return None
    return cmdline.split("\0")[0], start


_STATE_KEYS = {"tag": str, "owner_pid": int, "slice": str, "inventory_raw": dict,
               "rundir": str, "processes": list}


def _read_state(path: Path) -> tuple[dict | None, str | None]:
    """A trial's state record, or (None, why it cannot be used)."""
    try:
        st = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return None, f"unreadable ({e})"
    if not isinstance(st, dict):
        return None, f"not a record (a JSON {type(st).__name__})"
    for k, t in _STATE_KEYS.items():
        if not isinstance(st.get(k), t) or isinstance(st.get(k), bool):
            return None, f"field {k!r} missing or not a {t.__name__}"
    if not TAG.match(st["tag"]) or path.stem != st["tag"]:
        return None, f"tag {st['tag']!r} is not ours or not the file's name"
    if st["owner_pid"] < 2:
        return None, f"owner_pid {st['owner_pid']} is not a process of ours"
    for p in st["processes"]:
        if not (isinstance(p, dict) and isinstance(p.get("pid"), int) and p["pid"] > 1
                and p.get("role") in ROLE_OF and isinstance(p.get("argv0"), str)):
            return None, f"process entry {p!r} is malformed"
    return st, None
