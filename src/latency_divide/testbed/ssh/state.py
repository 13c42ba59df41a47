"""An SSH trial's state record, and the one way its changes to the nodes are undone.

Before a trial changes a node it writes what it is about to change into a local record
(``/run/latency-divide/ssh/<tag>.json``: the processes it started with their identity, the
devices whose root qdisc it replaced, their offloads before, the bridge it made, its run
directory). :func:`restore_nodes` undoes those changes; the trial's own teardown
(testbed.ssh.testbed) and `latency-divide clean` for a trial whose owner died
(testbed.ssh.clean) both use it.
"""

from __future__ import annotations

import json
from pathlib import Path

from latency_divide.errors import CommandError
from latency_divide.fsio import write_json_atomic
from latency_divide.testbed.base import BRIDGE
from latency_divide.testbed.netns import STATE_DIR, TAG
from latency_divide.testbed.ssh.runner import FabricRunner
from latency_divide.vocab import ROLE_NAMES, ROLE_OF, ROLES

#: State records of SSH trials (one JSON file per trial tag).
SSH_STATE_DIR = STATE_DIR / "ssh"


def _write_state(path: Path, state: dict) -> None:
    write_json_atomic(path, state, indent=1, sort_keys=False)


class Attempts:
    """Run restoring steps one after the other; a failing step is recorded (``errors``) and
    the rest still run."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def __call__(self, what: str, fn) -> None:
        try:
            fn()
        except Exception as e:  # keep restoring; report at the end
            self.errors.append(f"{what}: {e}")


def restore_nodes(runner, record: dict, attempt: Attempts) -> None:
    """Undo a trial's changes as its ``record`` lists them, through ``runner(role)``: delete our
    root qdiscs (and the bridge), put the offloads back, remove the run directory."""
    for role in ("gw", "dly"):
        for dev in record.get("qdisc_devs", {}).get(role, []):
            attempt(f"{ROLE_NAMES[role]}: delete root qdisc of {dev}",
                    lambda role=role, dev=dev: _delete_root_qdisc(runner(role), dev))
    if record.get("bridge"):
        attempt("delay: delete bridge", lambda: _delete_bridge(runner("dly")))
    for role, devs in record.get("offloads", {}).items():
        for dev, feats in devs.items():
            if feats:
                args = [w for k, v in feats.items() for w in (k, v)]
                attempt(f"{ROLE_NAMES[role]}: restore offloads of {dev}",
                        lambda role=role, dev=dev, args=args:
                        runner(role).run(["ethtool", "-K", dev, *args], check=False))
    rundir = record["rundir"]
    for role in ROLES:
        attempt(f"{ROLE_NAMES[role]}: remove run directory",
                lambda role=role: runner(role).run(["rm", "-rf", "--", f"{rundir}/{role}"]))
    attempt("remove run directory",
            lambda: runner("srv").run(["rmdir", "--", rundir], check=False))


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
