"""One trial: (household, direction, variant, repetition) on a fresh topology.

Lifecycle (flent's habit): ``check`` finds every program and fails before anything starts;
``run`` builds the topology, starts the sender, the queue sampler and the ping, waits the
idle baseline, runs the receiver for the configured duration, stops everything by PID and
collects; the trial directory is built in a temporary directory beside its final place and
renamed only when complete (see /docs in README: "Raw data").

Roles (EXPERIMENT.md): the traffic tool's *server* sends. Downlink: the sender runs on the
server node and the receiver (the tool's client) on the client node; uplink: the reverse.
"""

from __future__ import annotations

from latency_divide.errors import EnvironmentError_
from latency_divide.testbed.netns import LocalTestbed


def make_testbed(kind: str = "local", inventory=None, slice_name: str | None = None):
    """The testbed of a run: ``local`` (namespaces on this host) or ``ssh`` (one slice of an
    inventory, see latency_divide.ssh)."""
    if kind == "local":
        return LocalTestbed()
    if kind == "ssh":
        if inventory is None:
            raise EnvironmentError_("testbed kind 'ssh' needs an inventory (testbed.inventory "
                                    "or --inventory)")
        from latency_divide.testbed.ssh.testbed import SshTestbed
        return SshTestbed(inventory, slice_name)
    raise ValueError(f"testbed kind {kind!r}: use local or ssh")
