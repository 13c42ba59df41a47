"""The Runner interface (testbed.runners) on one SSH node.

Argv lists are quoted with ``shlex.join`` (never glued from strings) and prefixed with
``sudo -n`` when the login user is not root. ``start()`` launches a process detached
(``setsid``) with its stdout/stderr in remote files and returns its PID; ``stop()`` signals
exactly that PID and fetches the files to the local paths given to ``start()``; a dropped
connection is re-opened, so a trial's processes outlive its control connection.
"""

from __future__ import annotations

import io
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

from fabric import Connection
from invoke.exceptions import CommandTimedOut

from latency_divide.errors import CommandError, LatencyDivideError
from latency_divide.testbed.inventory import Node
from latency_divide.testbed.netns import new_tag
from latency_divide.testbed.runners import Completed, _argv
from latency_divide.testbed.ssh.connection import (
    _SSH_EXC,
    SshSetupError,
    _classify,
    _node_name,
)

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
