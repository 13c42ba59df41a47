"""The slice lock: ``flock`` on the gateway and delay nodes, held for as long as our SSH
channel stays open, so two runs, checkouts or hosts never shape one slice at once."""

from __future__ import annotations

import contextlib

from latency_divide.testbed.ssh.connection import (
    _SSH_EXC,
    SliceBusyError,
    SshSetupError,
    _classify,
    _node_name,
)
from latency_divide.testbed.ssh.runner import FabricRunner

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
