"""The SSH testbed: trials on one slice of an inventory (testbed.base.Testbed).

:class:`SshTestbed` checks the four nodes (sudo, programs, our uploaded tools, forwarding, the
delay mechanism, the data-plane interfaces found with ``ip route get`` as the paper did) and
opens an :class:`SshTopology` per trial: it takes the slice lock, switches offloads off, shapes
the links through testbed.base.SliceBase (the same code as the local testbed) and, on exit,
stops its processes, fetches the tools' files and restores the nodes
(testbed.ssh.state.restore_nodes). Everything it is about to change is written to the trial's
state record first, so `latency-divide clean` can undo an interrupted trial.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from pathlib import Path

from fabric import Connection

from latency_divide.errors import CommandError, LatencyDivideError
from latency_divide.fsio import sha256_file
from latency_divide.testbed import qsampler
from latency_divide.testbed.base import (
    BRIDGE,
    OFFLOAD_ARGS,
    SliceBase,
    local_delayline,
    local_tool,
    tool_version,
)
from latency_divide.testbed.delay import choose_mechanism, probe_netem
from latency_divide.testbed.inventory import Inventory, load_inventory
from latency_divide.testbed.netns import new_tag
from latency_divide.testbed.ssh import state as ssh_state
from latency_divide.testbed.ssh.connection import SshSetupError, _node_name, connect
from latency_divide.testbed.ssh.lock import NodeLock
from latency_divide.testbed.ssh.node import (
    NODE_PROGRAMS,
    check_sudo,
    discover_interfaces,
    ensure_private_workdir,
    missing_programs,
    read_offloads,
    remote_tool_path,
)
from latency_divide.testbed.ssh.nodecheck import NODE_PROBE_S, check_nodes
from latency_divide.testbed.ssh.runner import FabricProcess, FabricRunner
from latency_divide.testbed.ssh.state import (
    Attempts,
    _process_identity,
    _write_state,
    restore_nodes,
)
from latency_divide.vocab import ROLE_OF, ROLES

#: The queue sampler's source, uploaded to gateways (standard library only).
QSAMPLER_SRC = Path(qsampler.__file__).resolve()


class SshTestbed:
    """Trials on one slice of an inventory (testbed.base.Testbed)."""

    kind = "ssh"
    #: a fast link's qlog is hundreds of MB on the remote node, fetched over SSH: not kept
    keeps_qlog = False
    #: the tools run on the remote nodes: nothing of the trial to place here
    runs_here = False
    #: the host probe's length on a node (testbed.ssh.nodecheck), once per node boot
    probe_s = NODE_PROBE_S

    def __init__(self, inventory: Inventory | str | Path, slice_name: str | None = None):
        self.inv = inventory if isinstance(inventory, Inventory) else load_inventory(inventory)
        self.slice = self.inv.slice(slice_name)
        self._conns: dict[str, Connection] = {}
        self._netem: bool | None = None
        #: Connections re-opened after they broke (role -> count); recorded in meta.json.
        self.reconnects: dict[str, int] = {}

    # connections ---------------------------------------------------------------------------
    def conn(self, role: str) -> Connection:
        c = self._conns.get(role)
        if c is not None and c.is_connected and c.transport.is_active():
            return c
        if c is not None:
            with contextlib.suppress(Exception):
                c.close()
            self.reconnects[role] = self.reconnects.get(role, 0) + 1
        c = connect(self.slice.node(role), self.inv)
        self._conns[role] = c
        return c

    def runner(self, role: str, **kw) -> FabricRunner:
        return FabricRunner(self.conn(role), self.slice.node(role),
                            reconnect=lambda: self.conn(role), **kw)

    def close(self) -> None:
        for c in self._conns.values():
            with contextlib.suppress(Exception):
                c.close()
        self._conns.clear()

    # check ---------------------------------------------------------------------------------
    def check(self, spec) -> dict:
        """Everything a trial needs on the four nodes, or an error naming host and step."""
        sl = self.slice
        runners = {role: self.runner(role) for role in ROLES}

        def fail(role: str, step: str, what: str):
            return SshSetupError(f"{_node_name(runners[role].node)}, step '{step}': {what}")

        for role, r in runners.items():
            check_sudo(r)
            missing = missing_programs(r, NODE_PROGRAMS)
            if missing:
                pkgs = sorted({NODE_PROGRAMS[p] for p in missing})
                raise fail(role, "check programs", f"missing {', '.join(missing)} (packages "
                           f"{', '.join(pkgs)}): provision the node (snakemake --cores 1 "
                           "provision)")
        found: dict = {"slice": sl.name}
        # the traffic tool: tperf where the nodes have it, ours as provisioning uploaded it
        if spec.tool.name == "tperf":
            if not spec.tool.path or not spec.tool.path.startswith("/"):
                raise SshSetupError("tool 'tperf' on an SSH testbed: tool.path must be the "
                                    "absolute path of tperf on the server and client nodes "
                                    "(see docs/remote-testbed.md)")
            binary, sha, version = spec.tool.path, None, None
        else:
            local = local_tool(spec)
            sha = sha256_file(local)
            binary, version = remote_tool_path(sl.workdir, "tquic-perf", sha), tool_version(
                spec, local)
        shas = {role: runners[role].sha256(binary) for role in ("srv", "cli")}
        for role, got in shas.items():
            if got is None or (sha is not None and got != sha):
                raise fail(role, "check tool", f"{binary} missing or not the tool checked here: "
                           "provision the node (snakemake --cores 1 provision)")
        if shas["srv"] != shas["cli"]:
            raise SshSetupError(f"{spec.tool.name} differs between server and client ({shas})")
        found.update(binary=binary, binary_sha256=shas["srv"], tool_version=version)
        # the queue sampler, forwarding
        qs = remote_tool_path(sl.workdir, "qsampler", sha256_file(QSAMPLER_SRC), ".py")
        if runners["gw"].sha256(qs) is None:
            raise fail("gw", "check queue sampler", f"{qs} missing: provision the node")
        found["qsampler"] = qs
        fwd = runners["gw"].run(["sysctl", "-n", "net.ipv4.ip_forward"],
                                check=False).stdout.strip()
        if fwd != "1":
            raise fail("gw", "check forwarding", f"net.ipv4.ip_forward is {fwd or '?'}; "
                       "provisioning sets it to 1")
        # the delay mechanism
        def has_netem() -> bool:
            if self._netem is None:
                self._netem = probe_netem(runners["dly"])
            return self._netem

        found["mechanism"] = choose_mechanism(spec.delay, has_netem,
                                              f"the delay node {sl.node('dly').host}")
        found["delayline"] = None
        if found["mechanism"] == "delayline":
            dl = remote_tool_path(sl.workdir, "delayline",
                                  sha256_file(local_delayline("the delay node needs it")))
            if runners["dly"].sha256(dl) is None:
                raise fail("dly", "check delay line", f"{dl} missing: provision the node")
            found["delayline"] = dl
        found["interfaces"] = discover_interfaces(runners, sl)
        found["offloads"] = ("ethtool -K IF " + " ".join(OFFLOAD_ARGS) + " on the gateway's "
                             "egress interfaces and the delay ports during the trial (restored "
                             "after)")
        # last: each real-time node's host check of itself, once per boot (testbed.ssh.nodecheck)
        found["host_records"] = check_nodes(runners, sl, spec, self.probe_s)
        return found

    def open(self, spec, plan, log_dir: Path, found: dict) -> "SshTopology":
        return SshTopology(self, plan, Path(log_dir), found)


class SshTopology(SliceBase):
    """The slice set up for one trial (testbed.base.Slice); restored in ``__exit__``."""

    def __init__(self, testbed: SshTestbed, plan, log_dir: Path, found: dict):
        self.tb = testbed
        self.plan = plan
        self.log_dir = log_dir
        self.found = found
        self.tag = new_tag()
        self.processes: list = []
        self._runners: dict[str, FabricRunner] = {}
        self._outputs: list[tuple[str, str, Path]] = []
        self._delayline: FabricProcess | None = None
        self._changed: dict[str, list[str]] = {"gw": [], "dly": []}
        self._offloads: dict[str, dict[str, dict[str, str]]] = {"gw": {}, "dly": {}}
        self._kernels: dict[str, str] = {}
        self._locks: list[NodeLock] = []
        sl = testbed.slice
        self.rundir = f"{sl.workdir}/run/{self.tag}"
        self.state_file = ssh_state.SSH_STATE_DIR / f"{self.tag}.json"
        self._state = {"tag": self.tag, "owner_pid": os.getpid(), "slice": sl.name,
                       "inventory": None if testbed.inv.path is None else str(testbed.inv.path),
                       "inventory_raw": testbed.inv.raw, "rundir": self.rundir,
                       "processes": [], "qdisc_devs": self._changed, "offloads": self._offloads,
                       "bridge": False, "created_unix": time.time()}

    # the slice interface -------------------------------------------------------------------
    def runner(self, role: str) -> FabricRunner:
        r = self._runners.get(role)
        if r is None:
            r = self.tb.runner(role, rundir=f"{self.rundir}/{role}", on_start=self._record_start)
            self._runners[role] = r
        return r

    def addr(self, role: str) -> str:
        return {"srv": self.tb.slice.server_addr, "cli": self.tb.slice.client_addr}[role]

    def gateway_egress(self, direction: str) -> str:
        return self.found["interfaces"]["gw"][direction]

    def qsampler_argv(self, dev: str, interval_s: float) -> list[str]:
        return ["python3", self.found["qsampler"], "--dev", dev, "--interval", f"{interval_s:g}",
                "--fifo", "bfifo"]

    def tool_output(self, role: str, local: Path) -> str:
        """The remote path a tool on ``role`` writes to; fetched to ``local`` on exit."""
        remote = f"{self.rundir}/{role}/{Path(local).name}"
        self._outputs.append((role, remote, Path(local)))
        return remote

    def describe(self) -> dict:
        sl = self.tb.slice
        return {"kind": "ssh", "slice": sl.name, "tag": self.tag,
                "inventory": self._state["inventory"],
                "nodes": {r: {"host": n.host, "user": n.user, "port": n.port,
                              "kernel": self._kernels.get(ROLE_OF[r])}
                          for r, n in sl.nodes.items()},
                "addresses": {"server": sl.server_addr, "client": sl.client_addr},
                "devices": {"gateway": dict(self.found["interfaces"]["gw"]),
                            "delay": list(self.found["interfaces"]["dly"])},
                "offloads_before": self._offloads,
                # SSH sessions re-opened during the trial (the nodes' processes run detached,
                # so a dropped control connection does not touch the measurement)
                "reconnects": dict(self.tb.reconnects),
                # each real-time node's host record of its boot, judged against this link
                "host_records": self.found.get("host_records"),
                "teardown": "root qdiscs of ours deleted, offloads and bridge restored"}

    # hooks of SliceBase --------------------------------------------------------------------
    def _where(self, role: str) -> str:
        return f"{_node_name(self.tb.slice.node(role))}: "

    def _delayline_binary(self) -> str:
        return self.found["delayline"]

    def _apply(self, role: str, argv: list[str]) -> None:
        with self._step(role, "shape the links") as r:
            r.run(argv)

    def _shaping(self, role: str, dev: str) -> None:
        self._changed[role].append(dev)  # recorded before the qdiscs change
        _write_state(self.state_file, self._state)

    def _record_start(self, runner: FabricRunner, proc: FabricProcess) -> None:
        # pid, program and start time: clean stops a process only if all three still match
        # (a pid alone may have been reused by another program since)
        ident = _process_identity(runner, proc.pid)
        self._state["processes"].append({"role": runner.node.role, "pid": proc.pid,
                                         "argv0": proc.argv[0],
                                         "start_ticks": ident[1] if ident else None})
        _write_state(self.state_file, self._state)

    @contextlib.contextmanager
    def _step(self, role: str, step: str):
        """A set-up step on a node: a failing command's error names the node and the step."""
        try:
            yield self.runner(role)
        except CommandError as e:
            raise LatencyDivideError(f"{_node_name(self.tb.slice.node(role))}, step '{step}': "
                                     f"{e}") from e

    # lifecycle -----------------------------------------------------------------------------
    def up(self) -> "SshTopology":
        t0 = time.monotonic()
        sl = self.tb.slice
        # the slice is ours for this trial: a lock held on the nodes we shape (gateway, delay)
        holder = (f"{socket.gethostname()} pid {os.getpid()} trial {self.tag} since "
                  f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
        for role in ROLES:  # refuse a work directory others could write
            ensure_private_workdir(self.runner(role), sl.workdir, create=False)
        for role in ("gw", "dly"):
            self._locks.append(NodeLock(self.runner(role), sl.workdir, sl.name, holder).acquire())
        _write_state(self.state_file, self._state)
        for role in ROLES:
            with self._step(role, "prepare run directory") as r:
                r.run(["mkdir", "-p", "--", f"{self.rundir}/{role}"])
                self._kernels[role] = r.run(["uname", "-r"], sudo=False).stdout.strip()
        ifs = self.found["interfaces"]
        devs = {"gw": [ifs["gw"]["uplink"], ifs["gw"]["downlink"]], "dly": list(ifs["dly"])}
        for role, names in devs.items():
            with self._step(role, "offloads off") as r:
                for dev in names:
                    self._offloads[role][dev] = read_offloads(r, dev)
                    _write_state(self.state_file, self._state)
                    # ethtool -K fails for features a NIC has fixed; what matters is the
                    # result: every changeable offload we switch off must now be off.
                    r.run(["ethtool", "-K", dev, *OFFLOAD_ARGS], check=False)
                    still_on = sorted(k for k, v in read_offloads(r, dev).items() if v == "on")
                    if still_on:
                        raise LatencyDivideError(
                            f"offloads {', '.join(still_on)} of {dev} are still on after "
                            f"ethtool -K {dev} {' '.join(OFFLOAD_ARGS)}")
        if self.plan.delay.mechanism == "netem":
            with self._step("dly", "bridge the delay ports") as r:
                self._ensure_bridge(r, ifs["dly"])
        self.shape_links(ifs["gw"], ifs["dly"])
        self.setup_s = time.monotonic() - t0
        return self

    def _ensure_bridge(self, r: FabricRunner, ports) -> None:
        """netem needs the kernel to forward between the ports: a bridge of ours unless the
        ports are already enslaved to one."""
        masters = set()
        for dev in ports:
            info = json.loads(r.run(["ip", "-j", "link", "show", "dev", dev]).stdout)
            masters.add(info[0].get("master"))
        if masters != {None}:
            return
        r.run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        self._state["bridge"] = True
        _write_state(self.state_file, self._state)
        for dev in ports:
            r.run(["ip", "link", "set", dev, "master", BRIDGE])
        r.run(["ip", "link", "set", BRIDGE, "up"])

    def down(self) -> None:
        """Stop our processes (by PID), fetch the tools' files, restore the nodes; a failure
        leaves the state record for `latency-divide clean`."""
        t0 = time.monotonic()
        attempt = Attempts()
        for proc in reversed(self.processes):
            attempt(f"stop {proc.argv[0]} (pid {proc.pid})", lambda p=proc: p.stop(timeout=3))
        self._delayline = None
        for role, remote, local in self._outputs:
            def get(role=role, remote=remote, local=local):
                r = self.runner(role)
                if r.run(["test", "-s", remote], check=False, sudo=False).returncode == 0:
                    r.get(remote, local)
            attempt(f"fetch {remote}", get)
        restore_nodes(self.runner, self._state, attempt)
        self.teardown_s = time.monotonic() - t0
        for lock in reversed(self._locks):
            lock.release()
        self._locks = []
        if attempt.errors:
            raise LatencyDivideError("SSH testbed teardown: " + "; ".join(attempt.errors))
        self.state_file.unlink(missing_ok=True)

