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
from latency_divide.testbed.delay import probe_netem
from latency_divide.testbed.runners import LocalRunner, pid_alive
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
    """(node, argv) in order; node None means the host (root namespace)."""
    if delay_mechanism not in DELAY_MECHANISMS:
        raise ValueError(f"delay mechanism {delay_mechanism!r}: use netem or delayline")
    cmds: list[tuple[str | None, list[str]]] = []
    for role in ROLES:
        cmds.append((None, ["ip", "netns", "add", ns_name(tag, role)]))
    for (na, ia), (nb, ib) in LINKS:
        cmds.append((na, ["ip", "link", "add", ia, "type", "veth", "peer", "name", ib,
                          "netns", ns_name(tag, nb)]))
    addrs = {
        ("srv", "ld-s0"): SERVER_ADDR,
        ("gw", "ld-gs"): GW_SERVER_SIDE_ADDR,
        ("gw", "ld-gc"): GW_CLIENT_SIDE_ADDR,
        ("cli", "ld-c0"): CLIENT_ADDR,
    }
    for pair in LINKS:
        for node, ifname in pair:
            # Offloads off everywhere: the delay line sees wire-size frames, and htb/bfifo see
            # the packets the paper's NICs would put on the wire (no 64 KB GSO super-packets).
            cmds.append((node, ["ethtool", "-K", ifname, *OFFLOAD_ARGS]))
            if (node, ifname) in addrs:
                cmds.append((node, ["ip", "addr", "add", f"{addrs[(node, ifname)]}/{PREFIXLEN}",
                                    "dev", ifname]))
            cmds.append((node, ["ip", "link", "set", ifname, "up"]))
    for role in ROLES:
        cmds.append((role, ["ip", "link", "set", "lo", "up"]))
    cmds.append(("gw", ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"]))
    cmds.append(("srv", ["ip", "route", "add", "default", "via", GW_SERVER_SIDE_ADDR]))
    cmds.append(("cli", ["ip", "route", "add", "default", "via", GW_CLIENT_SIDE_ADDR]))
    if delay_mechanism == "netem":
        cmds.append(("dly", ["ip", "link", "add", BRIDGE, "type", "bridge"]))
        for port in DELAY_PORTS:
            cmds.append(("dly", ["ip", "link", "set", port, "master", BRIDGE]))
        cmds.append(("dly", ["ip", "link", "set", BRIDGE, "up"]))
    return cmds


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


def netem_available() -> bool:
    """Ask this kernel once (testbed.delay.probe_netem), in a throwaway namespace of ours."""
    global _NETEM_PROBE
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
    return _NETEM_PROBE


def existing_namespaces() -> list[str]:
    res = LocalRunner().run(["ip", "-j", "netns", "list"], check=False)
    if res.returncode != 0 or not res.stdout.strip():
        return []
    return [e["name"] for e in json.loads(res.stdout)]


def remove_namespace(ns: str) -> list[str]:
    """Kill the processes inside ``ns`` (exact PIDs) and delete it; idempotent."""
    host = LocalRunner()
    if ns not in existing_namespaces():
        return []
    errors = []
    res = host.run(["ip", "netns", "pids", ns], check=False)
    pids = [int(p) for p in res.stdout.split() if p.isdigit()]
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
    try:
        host.run(["ip", "netns", "del", ns])
    except CommandError as e:
        errors.append(str(e))
    return errors
