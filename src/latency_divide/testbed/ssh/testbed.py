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

import contextlib
import json
import os
import socket
import time
from pathlib import Path

from fabric import Connection

from latency_divide.errors import CommandError, EnvironmentError_, LatencyDivideError
from latency_divide.fsio import sha256_file
from latency_divide.testbed.inventory import (
    Inventory,
    load_inventory,
)
from latency_divide.testbed.netns import OFFLOAD_ARGS, NodeOps, new_tag
from latency_divide.testbed.ssh import state as ssh_state
from latency_divide.testbed.ssh.connection import SshSetupError, _node_name, connect
from latency_divide.testbed.ssh.lock import NodeLock
from latency_divide.testbed.ssh.node import (
    NODE_PROGRAMS,
    check_sudo,
    discover_interfaces,
    ensure_private_workdir,
    missing_programs,
    netem_available,
    read_offloads,
    remote_tool_path,
)
from latency_divide.testbed.ssh.runner import FabricProcess, FabricRunner
from latency_divide.testbed.ssh.state import (
    BRIDGE,
    _delete_bridge,
    _delete_root_qdisc,
    _process_identity,
    _write_state,
)
from latency_divide.vocab import ROLE_NAMES, ROLE_OF

QSAMPLER_SRC = Path(__file__).resolve().parent / "qsampler.py"


class SshTestbed:
    """Trials on one slice of an inventory (see trial.LocalTestbed for the interface)."""

    kind = "ssh"

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
        from latency_divide.paths import repo_root

        sl = self.slice
        runners = {role: self.runner(role) for role in ROLE_NAMES}
        for role, r in runners.items():
            check_sudo(r)
            missing = missing_programs(r, NODE_PROGRAMS)
            if missing:
                pkgs = sorted({NODE_PROGRAMS[p] for p in missing})
                raise SshSetupError(f"{_node_name(r.node)}, step 'check programs': missing "
                                    f"{', '.join(missing)} (packages {', '.join(pkgs)}): "
                                    "provision the node (snakemake --cores 1 provision)")
        found: dict = {"slice": sl.name}
        # the traffic tool
        if spec.tool.name == "tperf":
            if not spec.tool.path or not spec.tool.path.startswith("/"):
                raise SshSetupError("tool 'tperf' on an SSH testbed: tool.path must be the "
                                    "absolute path of tperf on the server and client nodes "
                                    "(see docs/remote-testbed.md)")
            binary = spec.tool.path
            shas = {role: runners[role].sha256(binary) for role in ("srv", "cli")}
            for role, sha in shas.items():
                if sha is None:
                    raise SshSetupError(f"{_node_name(runners[role].node)}, step 'check tool': "
                                        f"{binary} not found")
            if shas["srv"] != shas["cli"]:
                raise SshSetupError(f"tperf differs between server and client ({shas})")
            found.update(binary=binary, binary_sha256=shas["srv"], tool_version=None)
        else:
            local = spec.tool.binary(repo_root())
            if not local.exists():
                raise EnvironmentError_(f"traffic tool not found at {local}: build it with "
                                        "scripts/setup.sh (cargo build --release -p tquic-perf)")
            sha = sha256_file(local)
            binary = remote_tool_path(sl.workdir, "tquic-perf", sha)
            for role in ("srv", "cli"):
                if runners[role].sha256(binary) != sha:
                    raise SshSetupError(f"{_node_name(runners[role].node)}, step 'check tool': "
                                        f"{binary} missing or different from {local}: provision "
                                        "the node (snakemake --cores 1 provision)")
            from latency_divide.testbed.base import tool_version
            found.update(binary=binary, binary_sha256=sha,
                         tool_version=tool_version(spec, local))
        # the queue sampler
        qs = remote_tool_path(sl.workdir, "qsampler", sha256_file(QSAMPLER_SRC), ".py")
        if runners["gw"].sha256(qs) is None:
            raise SshSetupError(f"{_node_name(runners['gw'].node)}, step 'check queue sampler': "
                                f"{qs} missing: provision the node")
        found["qsampler"] = qs
        # forwarding
        fwd = runners["gw"].run(["sysctl", "-n", "net.ipv4.ip_forward"],
                                check=False).stdout.strip()
        if fwd != "1":
            raise SshSetupError(f"{_node_name(runners['gw'].node)}, step 'check forwarding': "
                                f"net.ipv4.ip_forward is {fwd or '?'}; provisioning sets it to 1")
        # the delay mechanism
        if self._netem is None:
            self._netem = netem_available(runners["dly"])
        if spec.delay == "netem" and not self._netem:
            raise SshSetupError(f"{_node_name(runners['dly'].node)}, step 'check netem': the "
                                "kernel has no netem; use delay: auto or delayline")
        mechanism = spec.delay if spec.delay != "auto" else ("netem" if self._netem else "delayline")
        found["mechanism"] = mechanism
        found["delayline"] = None
        if mechanism == "delayline":
            local = repo_root() / "target" / "release" / "delayline"
            if not local.exists():
                raise EnvironmentError_(f"the delay node needs our delay line ({local} is not "
                                        "built: run scripts/setup.sh)")
            dl = remote_tool_path(sl.workdir, "delayline", sha256_file(local))
            if runners["dly"].sha256(dl) is None:
                raise SshSetupError(f"{_node_name(runners['dly'].node)}, step 'check delay "
                                    f"line': {dl} missing: provision the node")
            found["delayline"] = dl
        found["interfaces"] = discover_interfaces(runners, sl)
        found["offloads"] = ("ethtool -K IF " + " ".join(OFFLOAD_ARGS) + " on the gateway's "
                             "egress interfaces and the delay ports during the trial (restored "
                             "after)")
        return found

    def open(self, spec, plan, log_dir: Path, found: dict) -> "SshTopology":
        return SshTopology(self, spec, plan, Path(log_dir), found)


class SshTopology(NodeOps):
    """The slice configured for one trial (context manager; restored in ``__exit__``)."""

    local_files = False

    def __init__(self, testbed: SshTestbed, spec, plan, log_dir: Path, found: dict):
        self.tb = testbed
        self.spec = spec
        self.plan = plan
        self.log_dir = log_dir
        self.found = found
        self.tag = new_tag()
        self.processes: list = []
        self.setup_s = 0.0
        self.teardown_s = 0.0
        self._runners: dict[str, FabricRunner] = {}
        self._outputs: list[tuple[str, str, Path]] = []
        self._delayline: FabricProcess | None = None
        self._changed: dict[str, list[str]] = {"gw": [], "dly": []}
        self._offloads: dict[str, dict[str, dict[str, str]]] = {"gw": {}, "dly": {}}
        self._bridge = False
        self._restored: dict = {}
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

    # the testbed interface -----------------------------------------------------------------
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
        return ["python3", self.found["qsampler"], "--dev", dev, "--interval", f"{interval_s:g}"]

    def tool_output(self, role: str, local: Path) -> str:
        """A file a tool writes on ``role``: the remote path to give it; fetched to ``local``
        when the topology closes."""
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
                "teardown": "root qdiscs of ours deleted, offloads and bridge restored"}

    # lifecycle -----------------------------------------------------------------------------
    def _record_start(self, runner: FabricRunner, proc: FabricProcess) -> None:
        # pid, program and start time: clean stops a process only if all three still match
        # (a pid alone may have been reused by another program since)
        ident = _process_identity(runner, proc.pid)
        self._state["processes"].append({"role": runner.node.role, "pid": proc.pid,
                                         "argv0": proc.argv[0],
                                         "start_ticks": ident[1] if ident else None})
        _write_state(self.state_file, self._state)

    def _step(self, role: str, step: str):
        node = self.tb.slice.node(role)
        tb = self

        class _Ctx:
            def __enter__(self):
                return tb.runner(role)

            def __exit__(self, et, e, tr):
                if isinstance(e, CommandError):
                    raise LatencyDivideError(f"{_node_name(node)}, step '{step}': {e}") from e
                return False

        return _Ctx()

    def up(self) -> "SshTopology":
        t0 = time.monotonic()
        sl = self.tb.slice
        # the slice is ours for this trial: a lock held on the nodes we shape (gateway, delay)
        holder = (f"{socket.gethostname()} pid {os.getpid()} trial {self.tag} since "
                  f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
        for role in ("srv", "gw", "dly", "cli"):  # refuse a work directory others could write
            ensure_private_workdir(self.runner(role), sl.workdir, create=False)
        for role in ("gw", "dly"):
            self._locks.append(NodeLock(self.runner(role), sl.workdir, sl.name, holder).acquire())
        _write_state(self.state_file, self._state)
        for role in ("srv", "gw", "dly", "cli"):
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
        with self._step("gw", "apply shaper (htb+bfifo)") as r:
            for direction in ("uplink", "downlink"):
                dev = ifs["gw"][direction]
                self._changed["gw"].append(dev)
                _write_state(self.state_file, self._state)
                for argv in self.plan.shaper(direction).commands(dev):
                    r.run(argv)
        if self.plan.delay.mechanism == "netem":
            with self._step("dly", "apply netem") as r:
                self._ensure_bridge(r, ifs["dly"])
                for dev in ifs["dly"]:
                    self._changed["dly"].append(dev)
                    _write_state(self.state_file, self._state)
                    for argv in self.plan.delay.commands(dev):
                        r.run(argv)
        else:
            self._start_delayline(ifs["dly"])
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
        self._bridge = True
        self._state["bridge"] = True
        _write_state(self.state_file, self._state)
        for dev in ports:
            r.run(["ip", "link", "set", dev, "master", BRIDGE])
        r.run(["ip", "link", "set", BRIDGE, "up"])

    def _start_delayline(self, ports) -> None:
        node = self.tb.slice.node("dly")
        argv = self.plan.delay.delayline_argv(ports[0], ports[1], self.found["delayline"])
        log = self.log_dir / "delayline.log"
        proc = self.runner("dly").start(argv, stdout=log, stderr=log)
        self._delayline = proc
        self.processes.append(proc)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            text = proc.read_output()
            if proc.poll() is not None:
                raise LatencyDivideError(f"{_node_name(node)}, step 'start delay line': exited "
                                         f"(code {proc.returncode}): {text.strip()[-400:]}")
            if "delayline ready" in text:
                return
            time.sleep(0.05)
        raise LatencyDivideError(f"{_node_name(node)}, step 'start delay line': no "
                                 "'delayline ready' within 10 s")

    def down(self) -> None:
        t0 = time.monotonic()
        errors: list[str] = []

        def attempt(what: str, fn) -> None:
            try:
                fn()
            except Exception as e:  # keep restoring; report at the end
                errors.append(f"{what}: {e}")

        for proc in reversed(self.processes):
            attempt(f"stop {proc.argv[0]} (pid {proc.pid})", lambda p=proc: p.stop(timeout=3))
        self._delayline = None
        for role, remote, local in self._outputs:
            def get(role=role, remote=remote, local=local):
                r = self.runner(role)
                if r.run(["test", "-s", remote], check=False, sudo=False).returncode == 0:
                    r.get(remote, local)
            attempt(f"fetch {remote}", get)
        for role in ("gw", "dly"):
            for dev in self._changed[role]:
                attempt(f"{ROLE_NAMES[role]}: delete root qdisc of {dev}",
                        lambda role=role, dev=dev: _delete_root_qdisc(self.runner(role), dev))
        if self._bridge:
            attempt("delay: delete bridge", lambda: _delete_bridge(self.runner("dly")))
        for role, devs in self._offloads.items():
            for dev, feats in devs.items():
                if feats:
                    args = [w for k, v in feats.items() for w in (k, v)]
                    attempt(f"{ROLE_NAMES[role]}: restore offloads of {dev}",
                            lambda role=role, dev=dev, args=args:
                            self.runner(role).run(["ethtool", "-K", dev, *args], check=False))
        for role in ("srv", "gw", "dly", "cli"):
            attempt(f"{ROLE_NAMES[role]}: remove run directory",
                    lambda role=role: self.runner(role).run(["rm", "-rf", "--",
                                                             f"{self.rundir}/{role}"]))
        attempt("remove run directory",
                lambda: self.runner("srv").run(["rmdir", "--", self.rundir], check=False))
        self._restored = {"root_qdiscs_deleted": dict(self._changed), "bridge_deleted": self._bridge,
                          "errors": list(errors)}
        self.teardown_s = time.monotonic() - t0
        if errors:
            # Leave the state file: `latency-divide clean` finishes the job later.
            self._release_locks()
            raise LatencyDivideError("SSH testbed teardown: " + "; ".join(errors))
        self.state_file.unlink(missing_ok=True)
        self._release_locks()

    def _release_locks(self) -> None:
        for lock in reversed(self._locks):
            lock.release()
        self._locks = []

    def __enter__(self) -> "SshTopology":
        try:
            return self.up()
        except BaseException:
            with contextlib.suppress(Exception):
                self.down()
            raise

    def __exit__(self, *exc) -> None:
        self.down()
