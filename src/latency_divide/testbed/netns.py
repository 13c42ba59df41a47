"""The local testbed's namespaces: the paper's four-node line topology on this host.

    server (10.10.1.1) --- gateway --- delay --- client (10.10.2.2)

- server: ``ld-<tag>-srv``, interface ``ld-s0`` 10.10.1.1/24, default route via the gateway.
- gateway: ``ld-<tag>-gw``, ``ld-gs`` 10.10.1.254/24 toward the server (uplink egress),
  ``ld-gc`` 10.10.2.254/24 toward the client (downlink egress); forwards IPv4.
- delay: ``ld-<tag>-dly``, a layer-2 hop between ``ld-dg`` (gateway side) and ``ld-dc``
  (client side): a Linux bridge with netem on both ports where the kernel has netem, or our
  userspace delay line (AF_PACKET) bridging the two ports where it does not.
- client: ``ld-<tag>-cli``, ``ld-c0`` 10.10.2.2/24, default route via the gateway.

Every name carries :data:`latency_divide.PREFIX` and a per-topology tag, so concurrent
topologies never collide and testbed.clean finds exactly our leftovers. An owner record
(``/run/latency-divide/<tag>.json``) is written *before* anything is created, so a topology
whose owning process died can be told apart from one still in use.

This module names things and builds commands (``setup_commands()`` returns (node, argv) pairs
that can be printed and tested); testbed.local runs them.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from pathlib import Path

from latency_divide import PREFIX
from latency_divide.errors import CommandError
from latency_divide.fsio import write_json_atomic
from latency_divide.testbed.base import BRIDGE, OFFLOAD_ARGS, link_steps
from latency_divide.testbed.delay import probe_netem, probe_police
from latency_divide.testbed.runners import BATCH_PROGRAMS, LocalRunner, pid_alive
from latency_divide.vocab import DELAY_MECHANISMS, ROLES

#: Owner records of live topologies (one JSON file per tag).
STATE_DIR = Path(os.environ.get("LATENCY_DIVIDE_STATE_DIR", "/run/latency-divide"))

SERVER_ADDR = "10.10.1.1"
CLIENT_ADDR = "10.10.2.2"
GW_SERVER_SIDE_ADDR = "10.10.1.254"
GW_CLIENT_SIDE_ADDR = "10.10.2.254"
PREFIXLEN = 24
#: Data-plane address of each end host.
ADDRS = {"srv": SERVER_ADDR, "cli": CLIENT_ADDR}

#: (node, ifname) of each veth end; pairs connect adjacent nodes.
LINKS = (
    (("srv", "ld-s0"), ("gw", "ld-gs")),
    (("gw", "ld-gc"), ("dly", "ld-dg")),
    (("dly", "ld-dc"), ("cli", "ld-c0")),
)
#: The gateway's egress interface per direction (where the bottleneck queue lives).
GATEWAY_EGRESS = {"uplink": "ld-gs", "downlink": "ld-gc"}
DELAY_PORTS = ("ld-dg", "ld-dc")
#: (node, ifname) of the veth end the delay line sends into through each delay port: the
#: gateway's ld-gc, the client's ld-c0 (their NAPI: testbed.rxnapi.rx_napi_for).
RX_PEERS = tuple(b if a == ("dly", port) else a for a, b in LINKS for port in DELAY_PORTS
                 if ("dly", port) in (a, b))

#: a topology's tag: six hex digits (new_tag)
TAG = re.compile(r"\A[0-9a-f]{6}\Z")


def new_tag() -> str:
    """Six hex digits: namespace names stay short (``ld-1a2b3c-srv``)."""
    return secrets.token_hex(3)


def write_owner_record(tag: str, namespaces: list[str]) -> Path:
    """Our owner record of a tag's namespaces (STATE_DIR/<tag>.json), written before any of
    them is created: `clean` removes them only once this process is gone."""
    path = STATE_DIR / f"{tag}.json"
    write_json_atomic(path, {"tag": tag, "pid": os.getpid(), "namespaces": namespaces,
                             "created_unix": time.time()})
    return path


def ns_name(tag: str, role: str) -> str:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; roles are {', '.join(ROLES)}")
    return f"{PREFIX}{tag}-{role}"


def parse_ns_name(name: str) -> tuple[str, str] | None:
    """``ld-1a2b3c-srv`` -> ("1a2b3c", "srv"); None for names that are not ours."""
    if not name.startswith(PREFIX):
        return None
    rest = name[len(PREFIX):]
    tag, sep, role = rest.rpartition("-")
    if not sep or role not in ROLES or not TAG.match(tag):
        return None
    return tag, role


def setup_commands(tag: str, delay_mechanism: str) -> list[tuple[str | None, list[str]]]:
    """(node, argv) in order; node None means the host (root namespace). Ordered so that each
    node's ``ip`` commands come together (:func:`grouped` runs them as one ``ip -batch``)."""
    if delay_mechanism not in DELAY_MECHANISMS:
        raise ValueError(f"delay mechanism {delay_mechanism!r}: use netem or delayline")
    cmds: list[tuple[str | None, list[str]]] = []
    for role in ROLES:
        cmds.append((None, ["ip", "netns", "add", ns_name(tag, role)]))
    for (na, ia), (nb, ib) in LINKS:
        cmds.append((None, ["ip", "link", "add", ia, "netns", ns_name(tag, na), "type", "veth",
                            "peer", "name", ib, "netns", ns_name(tag, nb)]))
    addrs = {
        ("srv", "ld-s0"): SERVER_ADDR,
        ("gw", "ld-gs"): GW_SERVER_SIDE_ADDR,
        ("gw", "ld-gc"): GW_CLIENT_SIDE_ADDR,
        ("cli", "ld-c0"): CLIENT_ADDR,
    }
    routes = {"srv": GW_SERVER_SIDE_ADDR, "cli": GW_CLIENT_SIDE_ADDR}
    for role in ROLES:
        ends = [ifname for pair in LINKS for node, ifname in pair if node == role]
        # Offloads off everywhere: the delay line sees wire-size frames, and htb/bfifo see
        # the packets the paper's NICs would put on the wire (no 64 KB GSO super-packets).
        cmds += [(role, ["ethtool", "-K", ifname, *OFFLOAD_ARGS]) for ifname in ends]
        for ifname in ends:
            if (role, ifname) in addrs:
                cmds.append((role, ["ip", "addr", "add", f"{addrs[(role, ifname)]}/{PREFIXLEN}",
                                    "dev", ifname]))
            cmds.append((role, ["ip", "link", "set", ifname, "up"]))
        cmds.append((role, ["ip", "link", "set", "lo", "up"]))
        if role in routes:
            cmds.append((role, ["ip", "route", "add", "default", "via", routes[role]]))
        if role == "dly" and delay_mechanism == "netem":
            cmds.append(("dly", ["ip", "link", "add", BRIDGE, "type", "bridge"]))
            for port in DELAY_PORTS:
                cmds.append(("dly", ["ip", "link", "set", port, "master", BRIDGE]))
            cmds.append(("dly", ["ip", "link", "set", BRIDGE, "up"]))
    cmds.append(("gw", ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"]))
    return cmds


def grouped(cmds: list[tuple[str | None, list[str]]]) -> list[tuple[str | None, list[list[str]]]]:
    """(node, argvs) for ``cmds`` in order: the ``ip`` (or ``tc``) commands that follow each
    other on one node together, to run as one batch (runners.LocalRunner.run_batch); every
    other command alone."""
    out: list[tuple[str | None, list[list[str]]]] = []
    for node, argv in cmds:
        if (out and out[-1][0] == node and argv[0] in BATCH_PROGRAMS
                and out[-1][1][-1][0] == argv[0]):
            out[-1][1].append(argv)
        else:
            out.append((node, [argv]))
    return out


def run_grouped(cmds: list[tuple[str | None, list[str]]], runner_of) -> None:
    """Run ``cmds`` (node, argv) in order through ``runner_of(node)`` (a LocalRunner), each
    group of :func:`grouped` in one process."""
    for node, argvs in grouped(cmds):
        runner = runner_of(node)
        if len(argvs) == 1:
            runner.run(argvs[0])
        else:
            runner.run_batch(argvs)


def rx_napi_commands(mode: str) -> list[tuple[str, list[str], str | None]]:
    """(node, argv, stdin) that give the receiving veths (RX_PEERS) ``mode``: ``gro`` (GRO on,
    so that veth delivers through NAPI), ``threaded`` (that NAPI in a kernel thread of its own,
    instead of inside the sender's system call) or ``off`` (nothing: the kernel's default, as
    every trial of generation v2 ran). GRO merges no forwarded UDP (udp-gro-forwarding stays
    off) and a socket's UDP only where the socket asks for it (UDP_GRO): the gateway forwards
    and the bottleneck queues the frames the delay line sent."""
    if mode not in ("off", "gro", "threaded"):
        raise ValueError(f"receiving veths' NAPI {mode!r}: use off, gro or threaded")
    cmds: list[tuple[str, list[str], str | None]] = []
    if mode == "off":
        return cmds
    for node, dev in RX_PEERS:
        cmds.append((node, ["ethtool", "-K", dev, "gro", "on"], None))
        if mode == "threaded":
            cmds.append((node, ["tee", f"/sys/class/net/{dev}/threaded"], "1"))
    return cmds


def rx_napi_state(runner_of) -> str:
    """``threaded`` when every receiving veth's NAPI runs in its own thread, else ``off`` (read
    back from sysfs through ``runner_of(node)``)."""
    states = [runner_of(node).run(["cat", f"/sys/class/net/{dev}/threaded"]).stdout.strip()
              for node, dev in RX_PEERS]
    return "threaded" if all(v in ("1", "enabled") for v in states) else "off"


def link_commands(plan) -> list[tuple[str, list[str]]]:
    """The household's link plan on these namespaces, as (node, argv): htb+bfifo on the
    gateway per direction, netem on both delay ports (the delay line is a process)."""
    return [(role, argv) for role, _dev, argv in link_steps(plan, GATEWAY_EGRESS, DELAY_PORTS)]


_NETEM_PROBE: bool | None = None


def netem_cache() -> Path:
    """This boot's answer to the netem probe, so that each trial job (a process of its own) does
    not build and delete a throwaway namespace to ask again: valid while the boot, the kernel
    and its module index (a module installed since changes ``modules.dep``) stay the same."""
    return STATE_DIR / "probes" / "netem.json"


def _netem_cache_key() -> dict:
    release = os.uname().release
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = None
    try:
        modules = Path(f"/lib/modules/{release}/modules.dep").stat().st_mtime_ns
    except OSError:
        modules = None
    return {"boot_id": boot, "kernel": release, "modules_dep_mtime_ns": modules}


def _cached_netem(key: dict) -> bool | None:
    try:
        rec = json.loads(netem_cache().read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    ok = (isinstance(rec, dict) and rec.get("key") == key and key["boot_id"] is not None
          and isinstance(rec.get("netem"), bool))
    return rec["netem"] if ok else None


def netem_available() -> bool:
    """Ask this kernel (testbed.delay.probe_netem), in a throwaway namespace of ours, once per
    boot: the answer is kept (:func:`netem_cache`) for the trial jobs that follow."""
    global _NETEM_PROBE
    if _NETEM_PROBE is None:
        key = _netem_cache_key()
        _NETEM_PROBE = _cached_netem(key)
    if _NETEM_PROBE is None:
        host = LocalRunner()
        tag = new_tag()
        ns = ns_name(tag, "gw")  # a role name, so `clean` recognises a leftover probe
        record = write_owner_record(tag, [ns])  # owned like every namespace of ours
        try:
            host.run(["ip", "netns", "add", ns])
            _NETEM_PROBE = probe_netem(LocalRunner(ns))
        finally:
            host.run(["ip", "netns", "del", ns], check=False)
            record.unlink(missing_ok=True)
        write_json_atomic(netem_cache(), {"key": key, "netem": _NETEM_PROBE})
    return _NETEM_PROBE


_POLICE_PROBE: bool | None = None


def police_cache() -> Path:
    """This boot's answer to the police-action probe (valid as :func:`netem_cache`'s)."""
    return STATE_DIR / "probes" / "police.json"


def police_available() -> bool:
    """Ask this kernel whether it has the police action (testbed.delay.probe_police), in a
    throwaway namespace of ours, once per boot, and keep the answer (:func:`police_cache`) as
    :func:`netem_available` does."""
    global _POLICE_PROBE
    key = _netem_cache_key()
    if _POLICE_PROBE is None:
        try:
            rec = json.loads(police_cache().read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            rec = None
        if (isinstance(rec, dict) and rec.get("key") == key and key["boot_id"] is not None
                and isinstance(rec.get("police"), bool)):
            _POLICE_PROBE = rec["police"]
    if _POLICE_PROBE is None:
        tag = new_tag()
        ns = ns_name(tag, "gw")  # a role name, so `clean` recognises a leftover probe
        record = write_owner_record(tag, [ns])
        try:
            LocalRunner().run(["ip", "netns", "add", ns])
            _POLICE_PROBE = probe_police(LocalRunner(ns))
        finally:
            LocalRunner().run(["ip", "netns", "del", ns], check=False)
            record.unlink(missing_ok=True)
        write_json_atomic(police_cache(), {"key": key, "police": _POLICE_PROBE})
    return _POLICE_PROBE


#: Where ``ip netns`` keeps its named namespaces (one bind-mounted file each).
NETNS_RUN_DIR = Path("/var/run/netns")


def existing_namespaces() -> list[str]:
    """The named network namespaces (what ``ip netns list`` lists: NETNS_RUN_DIR), read
    without starting a program."""
    try:
        return sorted(e.name for e in os.scandir(NETNS_RUN_DIR) if e.is_file())
    except FileNotFoundError:
        return []


def namespace_pids(names: list[str]) -> dict[str, list[int]]:
    """The processes in each of the named namespaces (as ``ip netns pids``: every process
    whose network namespace is that file's), in one pass over /proc."""
    inodes = {}
    for ns in names:
        try:
            st = os.stat(NETNS_RUN_DIR / ns)
        except OSError:
            continue
        inodes[(st.st_dev, st.st_ino)] = ns
    out: dict[str, list[int]] = {ns: [] for ns in inodes.values()}
    if not inodes:
        return out
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            st = os.stat(f"/proc/{entry.name}/ns/net")
        except OSError:
            continue  # gone, or a kernel thread
        ns = inodes.get((st.st_dev, st.st_ino))
        if ns is not None:
            out[ns].append(int(entry.name))
    return out


def remove_namespaces(names: list[str]) -> list[str]:
    """Kill the processes inside the named namespaces (exact PIDs) and delete them;
    idempotent (namespaces that do not exist are skipped); return the errors."""
    names = [ns for ns in names if (NETNS_RUN_DIR / ns).exists()]
    if not names:
        return []
    errors = []
    pids = [p for ps in namespace_pids(names).values() for p in ps if p != os.getpid()]
    for sig in (15, 9):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 2
        while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.02)
        pids = [p for p in pids if pid_alive(p)]
        if not pids:
            break
    host = LocalRunner()
    try:
        host.run_batch([["ip", "netns", "del", ns] for ns in names])
    except CommandError:  # the batch stopped at one: delete the rest one by one, naming each
        for ns in names:
            if (NETNS_RUN_DIR / ns).exists():
                try:
                    host.run(["ip", "netns", "del", ns])
                except CommandError as e:
                    errors.append(str(e))
    return errors


def remove_namespace(ns: str) -> list[str]:
    """:func:`remove_namespaces` of one namespace."""
    return remove_namespaces([ns])
