"""The paper's four-node line topology, built from network namespaces on this host.

    server (10.10.1.1) --- gateway --- delay --- client (10.10.2.2)

- server: ``ld-<tag>-srv``, interface ``ld-s0`` 10.10.1.1/24, default route via the gateway.
- gateway: ``ld-<tag>-gw``, ``ld-gs`` 10.10.1.254/24 toward the server (uplink egress),
  ``ld-gc`` 10.10.2.254/24 toward the client (downlink egress); forwards IPv4.
- delay: ``ld-<tag>-dly``, a layer-2 hop between ``ld-dg`` (gateway side) and ``ld-dc``
  (client side): a Linux bridge with netem on both ports where the kernel has netem, or our
  userspace delay line (AF_PACKET) bridging the two ports where it does not.
- client: ``ld-<tag>-cli``, ``ld-c0`` 10.10.2.2/24, default route via the gateway.

Every name carries :data:`latency_divide.PREFIX` and a per-topology tag, so concurrent
topologies never collide and :mod:`latency_divide.clean` finds exactly our leftovers. An
owner record (``/run/latency-divide/<tag>.json``) is written *before* anything is created, so
a topology whose owning process died can be told apart from one still in use.

Building commands is separate from running them: ``setup_commands()`` returns (node, argv)
pairs that can be printed and tested; ``Topology.up()`` runs them through runners.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from latency_divide import PREFIX
from latency_divide.errors import CommandError, EnvironmentError_, LatencyDivideError
from latency_divide.fsio import write_json_atomic
from latency_divide.paths import repo_root
from latency_divide.testbed.base import TPERF_HELP
from latency_divide.testbed.runners import LocalRunner, Process, pid_alive
from latency_divide.vocab import DELAY_MECHANISMS, ROLES

#: Owner records of live topologies (one JSON file per tag).
STATE_DIR = Path(os.environ.get("LATENCY_DIVIDE_STATE_DIR", "/run/latency-divide"))




SERVER_ADDR = "10.10.1.1"


CLIENT_ADDR = "10.10.2.2"


GW_SERVER_SIDE_ADDR = "10.10.1.254"


GW_CLIENT_SIDE_ADDR = "10.10.2.254"


PREFIXLEN = 24


#: (node, ifname) of each veth end; pairs connect adjacent nodes.
LINKS = (
    (("srv", "ld-s0"), ("gw", "ld-gs")),
    (("gw", "ld-gc"), ("dly", "ld-dg")),
    (("dly", "ld-dc"), ("cli", "ld-c0")),
)


#: The gateway's egress interface per direction (where the bottleneck queue lives).
GATEWAY_EGRESS = {"uplink": "ld-gs", "downlink": "ld-gc"}


DELAY_PORTS = ("ld-dg", "ld-dc")


BRIDGE = "ld-br0"


OFFLOAD_ARGS = ("tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off")


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


def link_commands(plan, direction_devs: dict[str, str] | None = None) -> list[tuple[str, list[str]]]:
    """The household's link plan on this topology: htb+bfifo on the gateway per direction,
    netem on both delay ports (the delay line is a process, started by :meth:`Topology.up`)."""
    devs = direction_devs or GATEWAY_EGRESS
    cmds: list[tuple[str, list[str]]] = []
    for direction in ("uplink", "downlink"):
        for argv in plan.shaper(direction).commands(devs[direction]):
            cmds.append(("gw", argv))
    if plan.delay.mechanism == "netem":
        for port in DELAY_PORTS:
            for argv in plan.delay.commands(port):
                cmds.append(("dly", argv))
    return cmds


_NETEM_PROBE: bool | None = None


def netem_available() -> bool:
    """Ask the kernel once: add a netem qdisc to a veth in a throwaway namespace of ours."""
    global _NETEM_PROBE
    if _NETEM_PROBE is None:
        host = LocalRunner()
        tag = new_tag()
        ns = ns_name(tag, "gw")  # a role name, so `clean` recognises a leftover probe
        record = write_owner_record(tag, [ns])  # owned like every namespace of ours
        try:
            host.run(["ip", "netns", "add", ns])
            r = LocalRunner(ns)
            r.run(["ip", "link", "add", "ld-p0", "type", "veth", "peer", "name", "ld-p1"])
            res = r.run(["tc", "qdisc", "add", "dev", "ld-p0", "root", "netem", "delay", "1ms"],
                        check=False)
            _NETEM_PROBE = res.returncode == 0
        finally:
            host.run(["ip", "netns", "del", ns], check=False)
            record.unlink(missing_ok=True)
    return _NETEM_PROBE


def planned_delay_mechanism(choice: str) -> str:
    """The mechanism a link plan *on paper* names: ``auto`` is resolved by probing the kernel
    when we can (root), else it is assumed to be netem (what common kernels have). The plan a
    trial applies is resolved again at trial time and recorded in its meta.json, so this
    only matters for the link stage's JSON, e.g. when re-analysing published data without
    root."""
    if choice == "auto" and os.geteuid() != 0:
        return "netem"
    return resolve_delay_mechanism(choice)


def resolve_delay_mechanism(choice: str) -> str:
    """``auto`` -> netem when the kernel has it, else the userspace delay line."""
    if choice == "auto":
        return "netem" if netem_available() else "delayline"
    if choice == "netem" and not netem_available():
        raise EnvironmentError_(
            "testbed.delay is 'netem' but this kernel has no netem qdisc (sch_netem); "
            "use delay: auto or delay: delayline (our userspace delay line)"
        )
    if choice not in DELAY_MECHANISMS:
        raise ValueError(f"delay mechanism {choice!r}: use auto, netem or delayline")
    return choice


class NodeOps:
    """What every live topology (local namespaces, SSH nodes) does the same way through its
    ``runner(role)``: needs ``self._delayline`` (the delay line process, or None)."""

    _delayline = None
    #: CPU seconds of the delay line once stopped (None where not measured, e.g. over SSH)
    delayline_cpu_s: float | None = None

    def stop_delayline(self) -> int | None:
        if self._delayline is None:
            return None
        rc = self._delayline.stop(timeout=5)
        self.delayline_cpu_s = getattr(self._delayline, "cpu_s", None)
        self._delayline = None
        return rc

    def qdisc_dump(self) -> dict[str, object]:
        """``tc -s -j qdisc show`` of the gateway and delay nodes (for meta.json)."""
        out = {}
        for role in ("gw", "dly"):
            res = self.runner(role).run(["tc", "-s", "-j", "qdisc", "show"], check=False)
            try:
                out[role] = json.loads(res.stdout) if res.returncode == 0 else res.stderr
            except json.JSONDecodeError:
                out[role] = res.stdout
        return out


@dataclass
class Topology(NodeOps):
    """A live four-namespace topology. Use as a context manager: torn down in ``finally``."""

    plan: object  # latency_divide.linkplan.LinkPlan
    delayline_bin: str | None = None
    tag: str = field(default_factory=new_tag)
    log_dir: Path | None = None
    processes: list[Process] = field(default_factory=list)
    setup_s: float = 0.0
    teardown_s: float = 0.0
    _up: bool = False
    _delayline: Process | None = None

    #: Our processes' files are on this host, so tools may write their own JSON summaries.
    local_files = True

    @property
    def mechanism(self) -> str:
        return self.plan.delay.mechanism

    def ns(self, role: str) -> str:
        return ns_name(self.tag, role)

    def runner(self, role: str) -> LocalRunner:
        return LocalRunner(self.ns(role))

    def addr(self, role: str) -> str:
        """Data-plane address of an end host (the paper's addresses)."""
        return {"srv": SERVER_ADDR, "cli": CLIENT_ADDR}[role]

    def gateway_egress(self, direction: str) -> str:
        return GATEWAY_EGRESS[direction]

    def qsampler_argv(self, dev: str, interval_s: float) -> list[str]:
        """The queue sampler (JSON lines on stdout), run with this Python on this host."""
        return [sys.executable, "-m", "latency_divide.testbed.qsampler", "--dev", dev,
                "--interval", f"{interval_s:g}"]

    def describe(self) -> dict:
        return {"kind": "local", "tag": self.tag, "namespaces": [self.ns(r) for r in ROLES],
                "devices": {"gateway": dict(GATEWAY_EGRESS), "delay": list(DELAY_PORTS)}}

    @property
    def owner_file(self) -> Path:
        return STATE_DIR / f"{self.tag}.json"

    def _write_owner(self) -> None:
        write_owner_record(self.tag, [self.ns(r) for r in ROLES])

    def up(self) -> "Topology":
        t0 = time.monotonic()
        self._write_owner()
        self._up = True
        host = LocalRunner()
        for node, argv in setup_commands(self.tag, self.mechanism) + link_commands(self.plan):
            (host if node is None else self.runner(node)).run(argv)
        if self.mechanism == "delayline":
            self._start_delayline()
        self.setup_s = time.monotonic() - t0
        return self

    def _start_delayline(self) -> None:
        if not self.delayline_bin:
            raise EnvironmentError_("the delay line binary was not given (build it: scripts/setup.sh)")
        argv = self.plan.delay.delayline_argv(DELAY_PORTS[0], DELAY_PORTS[1], self.delayline_bin)
        log = (self.log_dir / "delayline.log") if self.log_dir else None
        proc = self.runner("dly").start(argv, stderr=log, stdout=log)
        self._delayline = proc
        self.processes.append(proc)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                text = log.read_text(errors="replace") if log and log.exists() else ""
                raise LatencyDivideError(f"delay line exited at start (code {proc.poll()}): "
                                         f"{text.strip()[-400:]}")
            if log is None:
                # No log to read the ready line from: give it a moment, then it must be alive.
                time.sleep(0.3)
                if proc.poll() is None:
                    return
                continue
            if "delayline ready" in log.read_text(errors="replace"):
                return
            time.sleep(0.02)
        raise LatencyDivideError("delay line did not report 'delayline ready' within 5 s")

    def down(self) -> None:
        """Stop our processes (by PID), kill anything left in our namespaces (by the PIDs
        ``ip netns pids`` lists for them), delete the namespaces (the veths go with them)."""
        t0 = time.monotonic()
        errors = []
        for proc in reversed(self.processes):
            try:
                proc.stop(timeout=3)
            except Exception as e:  # keep tearing down; report at the end
                errors.append(str(e))
        self.processes.clear()
        self._delayline = None
        for role in ROLES:
            errors += remove_namespace(self.ns(role))
        try:
            self.owner_file.unlink()
        except FileNotFoundError:
            pass
        self._up = False
        self.teardown_s = time.monotonic() - t0
        if errors:
            raise LatencyDivideError("teardown: " + "; ".join(errors))

    def __enter__(self) -> "Topology":
        try:
            return self.up()
        except BaseException as e:
            self._down_keeping(e)
            raise

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is None:
            self.down()
        else:
            self._down_keeping(exc)

    def _down_keeping(self, original: BaseException) -> None:
        """Tear down after a failure: a teardown error is attached to the original error
        (which says what went wrong) instead of replacing it."""
        try:
            self.down()
        except Exception as e:
            original.add_note(f"and then {e}")


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


REQUIRED_PROGRAMS = {"ip": "iproute2", "tc": "iproute2", "ss": "iproute2",
                     "ping": "iputils-ping", "ethtool": "ethtool", "sysctl": "procps"}


def check_environment(spec) -> dict:
    """Fail before anything starts; return what was found (for meta.json)."""
    if os.geteuid() != 0:
        raise EnvironmentError_("trials need root (network namespaces, tc): run as root or with "
                                "sudo")
    missing = [f"{p} (Debian package {pkg})" for p, pkg in REQUIRED_PROGRAMS.items()
               if shutil.which(p) is None]
    if missing:
        raise EnvironmentError_("missing programs: " + ", ".join(missing) +
                                "; run scripts/setup.sh or apt-get install them")
    if spec.tool.name == "tperf" and not spec.tool.path:
        raise EnvironmentError_("tool 'tperf' needs a path to the binary. " + TPERF_HELP)
    binary = spec.tool.binary(repo_root())
    if not binary.exists():
        if spec.tool.name == "tperf":
            where = (f"{spec.tool.path!r} is not on PATH" if "/" not in spec.tool.path
                     else f"no file at {binary}")
            raise EnvironmentError_(f"tperf binary not found: {where}. " + TPERF_HELP)
        raise EnvironmentError_(f"traffic tool not found at {binary}: build it with "
                                "scripts/setup.sh (cargo build --release -p tquic-perf)")
    mechanism = resolve_delay_mechanism(spec.delay)
    delayline = None
    if mechanism == "delayline":
        delayline = repo_root() / "target" / "release" / "delayline"
        if not delayline.exists():
            raise EnvironmentError_(f"this kernel has no netem and the delay line is not built "
                                    f"({delayline}): run scripts/setup.sh")
    return {"binary": str(binary), "mechanism": mechanism,
            "delayline": str(delayline) if delayline else None}


class LocalTestbed:
    """The default testbed: a fresh four-namespace topology on this host per trial.

    A testbed has two steps: ``check(spec)`` finds everything the trial needs and fails
    before anything starts (returns facts for meta.json); ``open(spec, plan, log_dir)``
    returns a context manager (a live topology) that offers ``runner(role)``, ``addr(role)``,
    ``gateway_egress(direction)``, ``qsampler_argv(dev, interval_s)``, ``qdisc_dump()``,
    ``stop_delayline()``, ``processes`` (stopped by PID on exit), ``describe()``,
    ``setup_s``/``teardown_s`` and ``local_files``. The SSH testbed offers the same.
    """

    kind = "local"

    def check(self, spec) -> dict:
        return check_environment(spec)

    def open(self, spec, plan, log_dir: Path, found: dict):
        return Topology(plan, delayline_bin=found["delayline"], log_dir=log_dir)
