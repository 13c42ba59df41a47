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

import subprocess
from pathlib import Path

TPERF_HELP = (
    "mvfst's tperf is not packaged anywhere: build it from mvfst's public sources with tests on "
    "(https://github.com/facebook/mvfst, README, 'Building mvfst'; the target is "
    "quic/tools/tperf), put it on PATH or give its path as tool.path in the config or "
    "--tool-path. README, \"mvfst's tperf\", has the flags that make it behave like the 2021 one."
)


def tool_version(spec, binary: Path) -> str | None:
    if spec.tool.name != "tquic-perf":
        return None  # tperf has no version flag; the binary's sha256 identifies it
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                             timeout=5)
        return (out.stdout or out.stderr).strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None
