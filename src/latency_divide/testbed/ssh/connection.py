"""SSH connections to the nodes (Fabric/paramiko), and SSH errors that name host and step.

:func:`connect` verifies the host key against the inventory's known_hosts (``RejectPolicy``)
unless the inventory opts out (``insecure_host_keys: true``, warned about once).
:class:`SshSetupError` (wrong key, unknown or changed host key, no sudo, missing interface,
node not provisioned) is not retried; :class:`SshError` (refused, timed out, dropped) is, by
the trial's retry loop; :class:`SliceBusyError` means another run holds the slice.
"""

from __future__ import annotations

import contextlib
import socket
import warnings

import paramiko
from fabric import Config, Connection

from latency_divide.errors import EnvironmentError_, LatencyDivideError
from latency_divide.testbed.inventory import Inventory, Node


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
