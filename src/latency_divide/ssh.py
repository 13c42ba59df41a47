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
import io
import json
import os
import posixpath
import shlex
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import paramiko
from fabric import Config, Connection
from invoke.exceptions import CommandTimedOut

from .errors import CommandError, ConfigError, EnvironmentError_, LatencyDivideError
from .fsio import write_json_atomic
from .inventory import ROLE_NAMES, ROLES, Inventory, Node, Slice, load_inventory
from .provenance import sha256_file
from .runners import Completed, _argv, pid_alive
from .topology import OFFLOAD_ARGS, STATE_DIR, TAG, NodeOps, new_tag

SSH_STATE_DIR = STATE_DIR / "ssh"
QSAMPLER_SRC = Path(__file__).resolve().parent / "qsampler.py"
BRIDGE = "ld-br0"
#: Programs every node needs for a trial (and the Debian package that has each).
NODE_PROGRAMS = {"ip": "iproute2", "tc": "iproute2", "ss": "iproute2", "ping": "iputils-ping",
                 "ethtool": "ethtool", "sysctl": "procps", "python3": "python3",
                 "setsid": "util-linux", "sha256sum": "coreutils"}
PACKAGES = ("iproute2", "iputils-ping", "ethtool", "procps", "python3")
#: ethtool -k feature names of the offloads we switch off (OFFLOAD_ARGS order: tx rx tso gso gro).
OFFLOAD_FEATURES = {"tx": "tx-checksumming", "rx": "rx-checksumming",
                    "tso": "tcp-segmentation-offload", "gso": "generic-segmentation-offload",
                    "gro": "generic-receive-offload"}

# Constant shell programs; every value reaches them as a separate positional argument.
#: $1 pid file, $2 stdout file, $3 stderr file ("-" = same as stdout), $4 exit-code file,
#: then the command's argv. The command runs as a background child of this shell, which
#: records its PID, waits for it and records its exit status.
_LAUNCH = (
    'pf=$1; o=$2; e=$3; r=$4; shift 4; '
    'if [ "$e" = - ]; then "$@" </dev/null >"$o" 2>&1 & else "$@" </dev/null >"$o" 2>"$e" & fi; '
    'p=$!; echo "$p" >"$pf.tmp" && mv "$pf.tmp" "$pf"; '
    'wait "$p"; echo "$?" >"$r.tmp" && mv "$r.tmp" "$r"'
)
#: $1 pid file: wait (up to 10 s) until it exists, print it.
_WAITPID = ('i=0; while [ ! -s "$1" ]; do i=$((i+1)); if [ "$i" -gt 1000 ]; then exit 1; fi; '
            'sleep 0.01; done; cat "$1"')
#: $1 exit-code file, $2 PID: the exit code, "running", or "gone" (killed without a record).
_POLL = ('if [ -s "$1" ]; then cat "$1"; elif kill -0 "$2" 2>/dev/null; then echo running; '
         'else sleep 0.2; if [ -s "$1" ]; then cat "$1"; else echo gone; fi; fi')
#: $@ programs: print those not found.
_MISSING = 'for p in "$@"; do command -v "$p" >/dev/null 2>&1 || echo "$p"; done'


class SshError(LatencyDivideError):
    """A node could not be reached or the connection broke (transient: the trial is retried)."""


class SshSetupError(EnvironmentError_):
    """A node is reachable but not usable as configured (not retried)."""


class SliceBusyError(EnvironmentError_):
    """Another run holds the slice (its lock on the nodes); not retried."""


def _node_name(node: Node) -> str:
    return f"{node.role} node {node.user}@{node.host}:{node.port}"


def _classify(node: Node, step: str, e: BaseException) -> LatencyDivideError:
    """A paramiko/socket exception -> an error naming the host and the step."""
    where = f"{_node_name(node)}, step '{step}'"
    if isinstance(e, paramiko.BadHostKeyException):
        return SshSetupError(f"{where}: the host key does not match known_hosts ({e}); if the "
                             "node was re-imaged, remove its old entry (ssh-keygen -R HOST)")
    if isinstance(e, paramiko.AuthenticationException):
        return SshSetupError(f"{where}: authentication failed for user {node.user!r} with key "
                             f"{node.key or '(agent/default keys)'}: {e}")
    if isinstance(e, paramiko.SSHException) and "known_hosts" in str(e):
        return SshSetupError(f"{where}: {e}; add the node's host key to the inventory's "
                             "known_hosts (ssh-keyscan, after checking the fingerprint) or set "
                             "insecure_host_keys: true")
    if isinstance(e, paramiko.ssh_exception.NoValidConnectionsError):
        return SshError(f"{where}: cannot connect: {e}")
    if isinstance(e, (socket.timeout, TimeoutError)):
        return SshError(f"{where}: connection timed out ({e or 'no answer'})")
    if isinstance(e, (EOFError, paramiko.SSHException, OSError)):
        return SshError(f"{where}: connection failed or dropped: {type(e).__name__}: {e}")
    return SshError(f"{where}: {type(e).__name__}: {e}")


_SSH_EXC = (paramiko.SSHException, OSError, EOFError, socket.timeout)
_warned_insecure = False


def _connection(host, user, port, key, inv: Inventory, gateway=None) -> Connection:
    kwargs = {"look_for_keys": key is None, "allow_agent": key is None,
              "banner_timeout": inv.connect_timeout_s, "auth_timeout": inv.connect_timeout_s}
    if key is not None:
        kwargs["key_filename"] = [key]
    conn = Connection(host, user=user, port=port, connect_kwargs=kwargs, gateway=gateway,
                      connect_timeout=max(1, int(round(inv.connect_timeout_s))),
                      config=Config(ssh_config=paramiko.SSHConfig()))
    if inv.insecure_host_keys:
        global _warned_insecure
        if not _warned_insecure:
            warnings.warn("inventory sets insecure_host_keys: true: SSH host keys are NOT "
                          "verified (anyone on the path could impersonate the nodes)",
                          stacklevel=3)
            _warned_insecure = True
    else:
        # Fabric accepts unknown host keys by default; we do not.
        conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
        conn.client.load_system_host_keys(inv.known_hosts)
    return conn


def connect(node: Node, inv: Inventory) -> Connection:
    """An open connection to ``node`` (through its jump host, if any)."""
    gw = None
    if node.jump is not None:
        j = node.jump
        gw = _connection(j.host, j.user, j.port, j.key, inv)
    conn = _connection(node.host, node.user, node.port, node.key, inv, gateway=gw)
    try:
        conn.open()
    except _SSH_EXC as e:
        with contextlib.suppress(Exception):
            conn.close()
        step = "connect" if node.jump is None else f"connect via jump host {node.jump.describe()}"
        raise _classify(node, step, e) from None
    return conn


# --------------------------------------------------------------------------------------------
# the runner
# --------------------------------------------------------------------------------------------

class FabricRunner:
    """Runs argv lists on one node over an open Fabric connection."""

    def __init__(self, conn: Connection, node: Node, *, rundir: str | None = None,
                 sudo: bool | None = None, on_start=None, reconnect=None):
        self.conn = conn
        #: Called for a fresh connection when this one broke (a dropped link mid-trial), so
        #: teardown can still stop the processes and restore the node.
        self.reconnect = reconnect
        self.node = node
        self.sudo = (node.user != "root") if sudo is None else sudo
        self.rundir = rundir
        self.where = f"ssh {node.user}@{node.host}:{node.port} ({node.role})"
        self._on_start = on_start
        self._seq = 0

    def command(self, argv, *, sudo: bool | None = None) -> str:
        argv = _argv(argv)
        if self.sudo if sudo is None else sudo:
            argv = ["sudo", "-n", "--", *argv]
        return shlex.join(argv)

    def _live_conn(self) -> Connection:
        c = self.conn
        if self.reconnect is not None and not (c.is_connected and c.transport.is_active()):
            self.conn = self.reconnect()
        return self.conn

    def _exec(self, cmd: str, argv: list[str], timeout: float | None, input: str | None):
        try:
            self._live_conn()
            r = self.conn.run(cmd, hide=True, warn=True, timeout=timeout,
                              in_stream=io.StringIO(input) if input is not None else False)
        except CommandTimedOut:
            raise CommandError(argv, -1, "", f"timed out after {timeout} s", self.where) from None
        except _SSH_EXC as e:
            raise _classify(self.node, f"run {shlex.join(argv)[:120]}", e) from None
        return r.return_code, r.stdout, r.stderr

    def run(self, argv, *, check=True, timeout=30.0, input=None, sudo: bool | None = None
            ) -> Completed:
        argv = _argv(argv)
        rc, out, err = self._exec(self.command(argv, sudo=sudo), argv, timeout, input)
        if self.sudo and (sudo is None or sudo) and rc == 1 and "sudo:" in err and \
                "password is required" in err:
            raise SshSetupError(f"{_node_name(self.node)}: sudo needs a password for "
                                f"{self.node.user!r}; allow it passwordless (NOPASSWD) or log "
                                "in as root")
        res = Completed(argv, rc, out, err)
        if check and rc != 0:
            raise CommandError(argv, rc, out, err, self.where)
        return res

    def start(self, argv, *, stdout: Path | None = None, stderr: Path | None = None
              ) -> "FabricProcess":
        argv = _argv(argv)
        if self.rundir is None:
            raise LatencyDivideError(f"{self.where}: start() needs a remote run directory")
        self._seq += 1
        stem = f"{self.rundir}/{self._seq:02d}-{Path(argv[0]).name}"
        fetch: list[tuple[str, Path]] = []
        out_r = "/dev/null"
        err_r = "/dev/null"
        if stdout is not None:
            out_r = f"{stem}.out"
            fetch.append((out_r, Path(stdout)))
        if stderr is not None:
            if stdout is not None and Path(stderr) == Path(stdout):
                err_r = "-"
            else:
                err_r = f"{stem}.err"
                fetch.append((err_r, Path(stderr)))
        pid_r, rc_r = f"{stem}.pid", f"{stem}.rc"
        launch = self.command(["setsid", "-f", "sh", "-c", _LAUNCH, "sh", pid_r, out_r, err_r,
                               rc_r, *argv])
        wait = self.command(["sh", "-c", _WAITPID, "sh", pid_r], sudo=False)
        rc, out, err = self._exec(f"{launch} </dev/null >/dev/null 2>&1 && {wait}", argv, 30, None)
        if rc != 0 or not out.strip().isdigit():
            raise CommandError(argv, rc, out, err or "the process did not record its PID",
                               self.where)
        proc = FabricProcess(self, argv, int(out.strip()), rc_r, fetch, out_r)
        if self._on_start:
            self._on_start(self, proc)
        return proc

    def put(self, local: Path, remote: str, mode: int = 0o755) -> None:
        """Upload atomically (temporary name, then rename)."""
        tmp = f"{remote}.tmp-{os.getpid()}-{new_tag()}"
        try:
            sftp = self._live_conn().sftp()
            sftp.put(str(local), tmp)
            sftp.chmod(tmp, mode)
            sftp.posix_rename(tmp, remote)
        except _SSH_EXC as e:
            raise _classify(self.node, f"upload {local} -> {remote}", e) from None

    def get(self, remote: str, local: Path) -> None:
        try:
            self._live_conn().sftp().get(remote, str(local))
        except FileNotFoundError:
            raise LatencyDivideError(f"{self.where}: remote file {remote} not found") from None
        except _SSH_EXC as e:
            raise _classify(self.node, f"fetch {remote}", e) from None

    def sha256(self, path: str) -> str | None:
        res = self.run(["sha256sum", "--", path], check=False, sudo=False)
        return res.stdout.split()[0] if res.returncode == 0 and res.stdout else None


class FabricProcess:
    """A process started by :meth:`FabricRunner.start`; stopped by its PID only."""

    def __init__(self, runner: FabricRunner, argv: list[str], pid: int, rc_path: str,
                 fetch: list[tuple[str, Path]], out_path: str):
        self.runner = runner
        self.argv = argv
        self.pid = pid
        self.rc_path = rc_path
        self.out_path = out_path
        self._fetch = fetch
        self.returncode: int | None = None
        self.fetched = False
        self.cpu_s: float | None = None  # not measured on remote nodes

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        res = self.runner.run(["sh", "-c", _POLL, "sh", self.rc_path, str(self.pid)], check=False)
        out = res.stdout.strip()
        if out.lstrip("-").isdigit():
            self.returncode = int(out)
        elif out == "gone":
            self.returncode = -signal.SIGKILL  # killed with its watcher: no exit status
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.argv, timeout)
            time.sleep(0.1)
        self.fetch()
        return self.returncode

    def stop(self, timeout: float = 5.0, sig: int = signal.SIGTERM) -> int:
        if self.poll() is None:
            self.runner.run(["kill", f"-{signal.Signals(sig).name[3:]}", str(self.pid)],
                            check=False)
            try:
                self.wait(timeout)
            except subprocess.TimeoutExpired:
                self.runner.run(["kill", "-KILL", str(self.pid)], check=False)
                self.wait(timeout)
        self.fetch()
        return self.returncode

    def read_output(self) -> str:
        """The stdout file as it is now (for 'ready' lines)."""
        if self.out_path == "/dev/null":
            return ""
        return self.runner.run(["cat", "--", self.out_path], check=False, sudo=False).stdout

    def fetch(self) -> None:
        if self.fetched:
            return
        for remote, local in self._fetch:
            self.runner.get(remote, local)
        self.fetched = True


# --------------------------------------------------------------------------------------------
# node facts
# --------------------------------------------------------------------------------------------

def remote_tool_path(workdir: str, name: str, sha256: str, suffix: str = "") -> str:
    """Uploaded files are content-addressed: a rebuilt tool never runs from a stale copy."""
    return f"{workdir}/bin/{name}-{sha256[:16]}{suffix}"


def ensure_private_workdir(r: "FabricRunner", workdir: str, create: bool = True) -> None:
    """The slice's work directory holds the programs that run as root: it must be a directory
    owned by the SSH user (root, or a user with sudo, who is root's equal anyway) with mode
    0700, so that no other user of the node can replace them. Made so when missing
    (``create``); an existing one with another owner or mode is refused, never changed."""
    def stat():
        res = r.run(["stat", "-c", "%U %a %F", "--", workdir], check=False, sudo=False)
        return res.stdout.strip().split(" ", 2) if res.returncode == 0 else None

    found = stat()
    if found is None and create:
        r.run(["mkdir", "-m", "0700", "--", workdir], sudo=False)
        found = stat()
    if found is None:
        raise SshSetupError(f"{_node_name(r.node)}: work directory {workdir} does not exist "
                            "(provision the slice: latency-divide provision)")
    owner, mode, kind = found
    if kind != "directory" or owner != r.node.user or mode != "700":
        raise SshSetupError(
            f"{_node_name(r.node)}: work directory {workdir} is a {kind} owned by {owner} with "
            f"mode {mode}; it must be a directory owned by {r.node.user} with mode 700, as our "
            "tools run as root from it: remove it, or set another slices[].workdir")


#: exit code of flock -n when the lock is held by someone else
_LOCK_BUSY = 75
#: the lock holder: takes the lock, says so, then holds it as long as its stdin (our SSH
#: channel) stays open; the lock goes when the channel or the connection closes, or we die
_HOLD = ('printf "%s\\n" "$1" > "$2.holder"; echo locked; exec cat >/dev/null')


class NodeLock:
    """An exclusive lock on a slice, held on one of its nodes (``flock`` on
    <workdir>/slice-<name>-<role>.lock) for as long as this object's SSH channel is open. Two runs,
    two checkouts or `latency-divide trial --inventory` cannot shape the same slice at once."""

    def __init__(self, r: "FabricRunner", workdir: str, slice_name: str, holder: str):
        self.r = r
        # one file per role: nodes that share a file system (containers, our SSH lab) do not
        # lock each other out
        self.path = f"{workdir}/slice-{slice_name}-{r.node.role}.lock"
        self.holder = holder
        self.chan = None

    def acquire(self) -> "NodeLock":
        argv = ["flock", "-n", "-E", str(_LOCK_BUSY), self.path, "sh", "-c", _HOLD, "sh",
                self.holder, self.path]
        try:
            chan = self.r._live_conn().client.get_transport().open_session()
            chan.exec_command(self.r.command(argv))
            f = chan.makefile("r")
            line = f.readline().strip()
        except _SSH_EXC as e:
            raise _classify(self.r.node, f"lock {self.path}", e) from None
        if line == "locked":
            self.chan = chan
            return self
        rc = chan.recv_exit_status()
        err = chan.makefile_stderr("r").read().decode(errors="replace").strip()
        chan.close()
        if rc == _LOCK_BUSY:
            who = self.r.run(["cat", "--", self.path + ".holder"], check=False,
                             sudo=False).stdout.strip() or "unknown"
            raise SliceBusyError(f"{_node_name(self.r.node)}: slice is in use ({self.path} is "
                                 f"locked by {who}); wait for that run, or use another slice")
        raise SshSetupError(f"{_node_name(self.r.node)}: could not lock {self.path} (exit {rc}"
                            f"{': ' + err if err else ''})")

    def release(self) -> None:
        if self.chan is not None:
            with contextlib.suppress(Exception):
                self.chan.shutdown_write()
                self.chan.recv_exit_status()
            with contextlib.suppress(Exception):
                self.chan.close()
            self.chan = None


def check_sudo(r: FabricRunner) -> None:
    if not r.sudo:
        return
    res = r.run(["true"], check=False)
    if res.returncode != 0:
        raise SshSetupError(f"{_node_name(r.node)}, step 'sudo': {r.node.user!r} cannot run "
                            f"commands with sudo without a password: "
                            f"{(res.stderr or res.stdout).strip()[:200]}")


def missing_programs(r: FabricRunner, programs) -> list[str]:
    """Looked up as they will run: through sudo (whose secure_path has the sbin directories a
    normal login PATH lacks, where tc, ethtool and sysctl live)."""
    res = r.run(["sh", "-c", _MISSING, "sh", *programs], check=False)
    return res.stdout.split()


def management_dev(r: FabricRunner) -> str | None:
    """The interface carrying our SSH session (never a data-plane interface)."""
    res = r.run(["sh", "-c", 'echo "$SSH_CONNECTION"'], check=False, sudo=False)
    parts = res.stdout.split()
    if len(parts) != 4:
        return None
    local_ip = parts[2]
    addrs = json.loads(r.run(["ip", "-j", "addr", "show"]).stdout or "[]")
    for link in addrs:
        for a in link.get("addr_info", []):
            if a.get("local") == local_ip:
                return link["ifname"]
    return None


def route_dev(r: FabricRunner, addr: str, step: str) -> str:
    res = r.run(["ip", "-j", "route", "get", addr], check=False)
    try:
        routes = json.loads(res.stdout) if res.returncode == 0 else []
    except json.JSONDecodeError:
        routes = []
    if not routes or "dev" not in routes[0]:
        raise SshSetupError(f"{_node_name(r.node)}, step '{step}': no route to {addr} "
                            f"(ip route get {addr}: {(res.stderr or res.stdout).strip()[:200]}); "
                            "give the interfaces explicitly in the inventory")
    return routes[0]["dev"]


def link_exists(r: FabricRunner, dev: str) -> bool:
    return r.run(["ip", "-j", "link", "show", "dev", dev], check=False).returncode == 0


def discover_interfaces(runners: dict, sl: Slice) -> dict:
    """{"gw": {"uplink": dev, "downlink": dev}, "dly": [dev, dev]}: explicit interfaces are
    checked to exist; otherwise ``ip route get`` toward the peers, as the paper did."""
    step = "discover interfaces"
    gw, dly = runners["gw"], runners["dly"]
    out: dict = {}
    node = sl.node("gateway")
    mgmt = management_dev(gw)
    if node.interfaces:
        devs = dict(node.interfaces)
    else:
        devs = {"uplink": route_dev(gw, sl.server_addr, step),
                "downlink": route_dev(gw, sl.client_addr, step)}
    for direction, dev in devs.items():
        if not link_exists(gw, dev):
            raise SshSetupError(f"{_node_name(node)}, step '{step}': interface {dev!r} "
                                f"({direction} egress) not found")
        if dev == mgmt:
            raise SshSetupError(f"{_node_name(node)}, step '{step}': the {direction} egress "
                                f"{dev!r} is the management interface (our SSH session): the "
                                "data plane must be on other interfaces; check the addresses "
                                "or give gateway.interfaces")
    if devs["uplink"] == devs["downlink"]:
        raise SshSetupError(f"{_node_name(node)}, step '{step}': the routes to the server "
                            f"({sl.server_addr}) and the client ({sl.client_addr}) both leave "
                            f"through {devs['uplink']!r}; the gateway must sit between them")
    out["gw"] = devs
    node = sl.node("delay")
    mgmt = management_dev(dly)
    if node.interfaces:
        ports = list(node.interfaces)
    elif node.probe_addrs:
        ports = [route_dev(dly, a, step) for a in node.probe_addrs]
    else:
        # A delay node is a layer-2 hop without data-plane addresses: its two ports are the
        # Ethernet interfaces other than the management one.
        links = json.loads(dly.run(["ip", "-j", "-d", "link", "show"]).stdout or "[]")
        skip = {"bridge", "dummy", "tun", "vxlan", "ipip", "gre", "wireguard", "bond"}
        ports = [link["ifname"] for link in links
                 if link.get("link_type") == "ether" and link["ifname"] != mgmt
                 and link.get("linkinfo", {}).get("info_kind") not in skip]
        if len(ports) != 2:
            raise SshSetupError(f"{_node_name(node)}, step '{step}': expected two data-plane "
                                f"ports besides the management interface {mgmt!r}, found "
                                f"{ports}; give delay.interfaces in the inventory")
    for dev in ports:
        if not link_exists(dly, dev):
            raise SshSetupError(f"{_node_name(node)}, step '{step}': interface {dev!r} not found")
        if dev == mgmt:
            raise SshSetupError(f"{_node_name(node)}, step '{step}': {dev!r} is the management "
                                "interface (our SSH session), not a delay port")
    if ports[0] == ports[1]:
        raise SshSetupError(f"{_node_name(node)}, step '{step}': both delay ports are {ports[0]!r}")
    out["dly"] = ports
    return out


def netem_available(r: FabricRunner) -> bool:
    """Ask the node's kernel: a netem qdisc on a throwaway veth pair of ours."""
    a, b = "ldnp0", "ldnp1"
    r.run(["ip", "link", "del", a], check=False)
    res = r.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b], check=False)
    if res.returncode != 0:
        # No veth module: fall back to the module database.
        return r.run(["modinfo", "sch_netem"], check=False).returncode == 0
    try:
        return r.run(["tc", "qdisc", "add", "dev", a, "root", "netem", "delay", "1ms"],
                     check=False).returncode == 0
    finally:
        r.run(["ip", "link", "del", a], check=False)


def read_offloads(r: FabricRunner, dev: str) -> dict[str, str]:
    """{"tx": "on", ...} for the offloads we change; fixed features are left out."""
    res = r.run(["ethtool", "-k", dev], check=False)
    feats = {}
    for line in res.stdout.splitlines():
        name, _, val = line.strip().partition(":")
        feats[name] = val.strip()
    out = {}
    for short, name in OFFLOAD_FEATURES.items():
        val = feats.get(name, "")
        if val and "[fixed]" not in val:
            out[short] = val.split()[0]
    return out


# --------------------------------------------------------------------------------------------
# local state (for clean)
# --------------------------------------------------------------------------------------------

def _write_state(path: Path, state: dict) -> None:
    write_json_atomic(path, state, indent=1, sort_keys=False)


# --------------------------------------------------------------------------------------------
# the testbed
# --------------------------------------------------------------------------------------------

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
        from .trial import repo_root

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
            from .trial import tool_version
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
        self.state_file = SSH_STATE_DIR / f"{self.tag}.json"
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
                              "kernel": self._kernels.get(ROLES[r])}
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


# --------------------------------------------------------------------------------------------
# clean (interrupted runs)
# --------------------------------------------------------------------------------------------

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
                and p.get("role") in ROLES and isinstance(p.get("argv0"), str)):
            return None, f"process entry {p!r} is malformed"
    return st, None


def clean_remote(force: bool = False, log=print) -> tuple[list[str], list[str], list[str]]:
    """Undo SSH trials whose owning process died: stop their recorded processes (only those
    whose pid still runs the recorded program, started at the recorded time), delete our root
    qdiscs and bridge, remove the run directories (only the one our trial made: <slice
    workdir>/run/<tag>). A record that cannot be used is skipped with an error naming it.
    Returns (done, errors, warnings: the records skipped)."""
    done: list[str] = []
    errors: list[str] = []
    warnings_: list[str] = []
    if not SSH_STATE_DIR.is_dir():
        return done, errors, warnings_
    for path in sorted(SSH_STATE_DIR.glob("*.json")):
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
                    role = ROLES[p["role"]]
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


# --------------------------------------------------------------------------------------------
# provisioning
# --------------------------------------------------------------------------------------------

def provision_node(inv: Inventory, slice_name: str | None, role: str, *, root: Path | None = None,
                   log=print) -> dict:
    """Make one node ready for trials (idempotent): packages, our tools, forwarding.
    Returns the facts recorded in the sentinel file."""
    from .trial import repo_root

    root = root or repo_root()
    sl = inv.slice(slice_name)
    role = ROLES.get(role, role)  # server -> srv, ...
    if role not in ROLE_NAMES:
        raise ConfigError(f"role {role!r} is not one of {', '.join(ROLES)}")
    node = sl.node(role)
    t0 = time.monotonic()
    log(f"[provision] {_node_name(node)}: connect")
    conn = connect(node, inv)
    try:
        r = FabricRunner(conn, node)
        check_sudo(r)
        facts: dict = {"slice": sl.name, "role": role, "host": node.host, "user": node.user,
                       "port": node.port}
        facts["kernel"] = r.run(["uname", "-r"], sudo=False).stdout.strip()
        osr = r.run(["cat", "/etc/os-release"], check=False, sudo=False).stdout
        facts["os"] = next((ln.split("=", 1)[1].strip('"') for ln in osr.splitlines()
                            if ln.startswith("PRETTY_NAME=")), None)
        # packages
        if missing_programs(r, ["dpkg-query", "apt-get"]):
            raise SshSetupError(f"{_node_name(node)}, step 'packages': not a Debian/Ubuntu node "
                                f"(no dpkg-query/apt-get); install {', '.join(PACKAGES)} by hand")
        missing = []
        for pkg in PACKAGES:
            res = r.run(["dpkg-query", "-W", "-f", "${Status}", pkg], check=False, sudo=False)
            if "install ok installed" not in res.stdout:
                missing.append(pkg)
        if missing:
            log(f"[provision] {_node_name(node)}: apt-get install {' '.join(missing)}")
            env = ["env", "DEBIAN_FRONTEND=noninteractive"]
            try:
                r.run([*env, "apt-get", "update", "-q"], timeout=600)
                r.run([*env, "apt-get", "install", "-y", "-q", *missing], timeout=1800)
            except CommandError as e:
                raise SshSetupError(f"{_node_name(node)}, step 'packages': {e}") from None
        facts["packages_installed"] = missing
        still = missing_programs(r, NODE_PROGRAMS)
        if still:
            raise SshSetupError(f"{_node_name(node)}, step 'packages': still missing {still}")
        # our files
        ensure_private_workdir(r, sl.workdir)
        r.run(["mkdir", "-p", "--", f"{sl.workdir}/bin", f"{sl.workdir}/run"], sudo=False)
        uploads: list[tuple[str, Path, str]] = []
        if role in ("srv", "cli"):
            uploads.append(("tquic-perf", root / "target" / "release" / "tquic-perf", ""))
        if role == "gw":
            uploads.append(("qsampler", QSAMPLER_SRC, ".py"))
            r.run(["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])
            facts["ip_forward"] = 1
        if role == "dly":
            facts["netem"] = netem_available(r)
            if not facts["netem"]:
                uploads.append(("delayline", root / "target" / "release" / "delayline", ""))
        facts["files"] = {}
        for name, local, suffix in uploads:
            if not local.exists():
                raise EnvironmentError_(f"provisioning {_node_name(node)}: {local} is not built "
                                        "(run scripts/setup.sh)")
            sha = sha256_file(local)
            remote = remote_tool_path(sl.workdir, name, sha, suffix)
            if r.sha256(remote) != sha:
                log(f"[provision] {_node_name(node)}: upload {local.name} -> {remote}")
                r.put(local, remote)
                if r.sha256(remote) != sha:
                    raise SshSetupError(f"{_node_name(node)}, step 'upload': {remote} does not "
                                        "match after upload")
            facts["files"][name] = {"path": remote, "sha256": sha}
        facts["provision_s"] = round(time.monotonic() - t0, 2)
        log(f"[provision] {_node_name(node)}: ready in {facts['provision_s']} s")
        return facts
    finally:
        conn.close()


def write_sentinel(path: Path, facts: dict) -> None:
    write_json_atomic(path, facts)


def provision_all(inv: Inventory, out_dir: Path | None = None, log=print) -> list[dict]:
    """Every node of every slice, one after the other (the Snakemake rule does them in
    parallel)."""
    out = []
    for sl in inv.slices:
        for role in ROLES:
            facts = provision_node(inv, sl.name, role, log=log)
            if out_dir is not None:
                write_sentinel(Path(out_dir) / sl.name / f"{role}.json", facts)
            out.append(facts)
    return out



def provision_job(smk) -> None:
    """The provision_node rule: one node -> its sentinel file."""
    from .config import load_config

    cfg = load_config(dict(smk.config))
    inv = load_inventory(cfg.testbed.inventory)
    with open(smk.log[0], "a", buffering=1) as logf:
        def say(msg: str) -> None:
            print(msg, file=sys.stderr, flush=True)
            print(msg, file=logf)

        facts = provision_node(inv, smk.wildcards.slice, smk.wildcards.role, log=say)
    write_sentinel(Path(smk.output[0]), facts)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `latency-divide provision` or `latency-divide trial --inventory`")
