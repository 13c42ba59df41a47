"""The testbed interface, and what both testbeds do the same way.

A trial (trial.run) sees a testbed through two protocols, written once here:

- :class:`Testbed`: where trials run (local namespaces: testbed.netns; one slice of an SSH
  inventory: testbed.ssh.testbed). ``check(spec)`` finds everything a trial needs and fails
  before anything starts; it returns the facts (``found``) recorded in meta.json: ``binary``,
  ``binary_sha256``, ``tool_version`` (the traffic tool as the nodes run it), ``mechanism``
  (netem or delayline), ``delayline`` (its binary, as the delay node runs it), ``offloads``
  (what is done to them), and the testbed's own facts. ``open(spec, plan, log_dir, found)``
  returns a :class:`Slice`; ``close()`` lets go of connections. A trial asks a testbed what
  it can do (``keeps_qlog``, ``runs_here``) and branches on no ``kind`` (which only names the definition).
- :class:`Slice`: the four nodes of one trial, set up and shaped by the link plan while the
  context manager is open and restored in ``__exit__`` (also after a failure, whose error is
  kept). It runs commands on a node (``runner(role)``), starts and stops processes by PID
  (``start``; all stopped on exit), collects the files tools write (``tool_output``) and
  describes itself for meta.json.

:class:`SliceBase` holds the parts both implementations share: shaping the links from the
plan, starting the delay line and waiting for it, stopping it, dumping qdiscs, the context
manager. An implementation adds ``up()``/``down()`` and how names map to its nodes.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Protocol

from latency_divide.errors import EnvironmentError_, LatencyDivideError
from latency_divide.fsio import sha256_file
from latency_divide.paths import built_tool, repo_root
from latency_divide.testbed.runners import Process, Runner
from latency_divide.vocab import DIRECTIONS

#: Offloads switched off on every data-plane interface we use: the delay line sees wire-size
#: frames, and htb/bfifo see the packets the paper's NICs would put on the wire.
OFFLOAD_ARGS = ("tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off")
#: The bridge of ours that joins the delay node's ports for netem.
BRIDGE = "ld-br0"
#: How long the delay line may take to say "delayline ready" (both testbeds).
DELAYLINE_READY_S = 10.0
TPERF_HELP = (
    "mvfst's tperf is not packaged anywhere: build it from mvfst's public sources with tests on "
    "(https://github.com/facebook/mvfst, README, 'Building mvfst'; the target is "
    "quic/tools/tperf), put it on PATH or give its path as tool.path in the config or "
    "--tool-path. docs/tools.md, \"mvfst's tperf\", has the flags that make it behave like "
    "the 2021 one."
)


class Slice(Protocol):
    processes: list[Process]
    setup_s: float
    teardown_s: float
    delayline_cpu_s: float | None

    def __enter__(self) -> "Slice": ...

    def __exit__(self, exc_type, exc, tb) -> None: ...

    def runner(self, role: str) -> Runner: ...

    def addr(self, role: str) -> str: ...

    def gateway_egress(self, direction: str) -> str: ...

    def qsampler_argv(self, dev: str, interval_s: float) -> list[str]: ...

    def tool_output(self, role: str, local: Path) -> str: ...

    def start(self, role: str, argv: list[str], *, stdout: Path | None = None,
              stderr: Path | None = None) -> Process: ...

    def stop_delayline(self) -> int | None: ...

    def local_pids(self, procs: dict[str, Process]) -> dict[str, int]: ...

    def qdisc_dump(self) -> dict[str, object]: ...

    def describe(self) -> dict: ...


class Testbed(Protocol):
    #: the testbed's name in definitions and meta.json (local, ssh); a trial does not branch on it
    kind: str
    #: what it can do: the sender's qlog (tperf's, hundreds of MB at a fast link) is written
    #: where the trial directory is and summarised there
    keeps_qlog: bool
    #: its processes run on this host, so the trial job can place them on one core
    #: (testbed.placement)
    runs_here: bool

    def check(self, spec) -> dict: ...

    def open(self, spec, plan, log_dir: Path, found: dict) -> Slice: ...

    def close(self) -> None: ...


# --------------------------------------------------------------------------------------------
# checks both testbeds make on this host
# --------------------------------------------------------------------------------------------

def local_tool(spec) -> Path:
    """The traffic tool's binary on this host (ours, built; or tperf, given), or an error
    saying how to get it."""
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
    return binary


def local_delayline(why: str) -> Path:
    """Our delay line, built on this host; ``why`` says who needs it."""
    path = built_tool("delayline")
    if not path.exists():
        raise EnvironmentError_(f"{why} and the delay line is not built ({path}): run "
                                "scripts/setup.sh")
    return path


def tool_version(spec, binary: Path) -> str | None:
    """``--version`` of tquic-perf; None for tperf (no version flag: its sha256 names it)."""
    if spec.tool.name != "tquic-perf":
        return None
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                             timeout=5)
        return (out.stdout or out.stderr).strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


def tool_facts(spec, binary: Path) -> dict:
    return {"binary_sha256": sha256_file(binary), "tool_version": tool_version(spec, binary)}


def link_steps(plan, egress: dict[str, str], delay_ports) -> list[tuple[str, str, list[str]]]:
    """The link plan as (role, device, argv), in order: htb + bfifo on the gateway's egress
    per direction, then netem on both delay ports (none with the delay line: a process)."""
    steps = [("gw", egress[d], argv) for d in DIRECTIONS
             for argv in plan.shaper(d).commands(egress[d])]
    if plan.delay.mechanism == "netem":
        steps += [("dly", dev, argv) for dev in delay_ports for argv in plan.delay.commands(dev)]
    return steps


# --------------------------------------------------------------------------------------------
# the live slice: what both implementations do the same way
# --------------------------------------------------------------------------------------------

class SliceBase:
    """Shared behaviour of a live slice. Subclasses set ``plan``, ``processes``, ``log_dir``
    and implement ``runner(role)``, ``up()``, ``down()`` and ``_delayline_binary()``; they may
    override the hooks ``_shaping(role, dev)`` (before a device's qdiscs change),
    ``_apply(role, argv)`` (one link command), ``_apply_all(steps)`` (all of them) and
    ``_where(role)`` (a node's name in messages)."""

    plan = None
    log_dir: Path | None = None
    setup_s: float = 0.0
    teardown_s: float = 0.0
    _delayline: Process | None = None
    #: CPU seconds of the delay line once stopped (None where not measured, e.g. over SSH)
    delayline_cpu_s: float | None = None
    #: the receiving veths' NAPI (trial.instrument): ``threaded`` only where the local testbed
    #: set it up (testbed.local)
    rx_napi: str = "off"

    # processes ------------------------------------------------------------------------------
    def start(self, role: str, argv: list[str], *, stdout: Path | None = None,
              stderr: Path | None = None) -> Process:
        """Start a process on a node; it is stopped (by PID) when the slice closes."""
        proc = self.runner(role).start(argv, stdout=stdout, stderr=stderr)
        self.processes.append(proc)
        return proc

    def local_pids(self, procs: dict[str, Process]) -> dict[str, int]:
        """PIDs on this host of the named processes and of the delay line, for their run-queue
        waits (testbed.schedwatch); none here: a subclass whose processes run on this host
        says so."""
        return {}

    def tool_output(self, role: str, local: Path) -> str:
        """Where a tool on ``role`` writes a file that must end up at ``local`` (here: the
        same path; over SSH a remote path, fetched when the slice closes)."""
        return str(local)

    # links ----------------------------------------------------------------------------------
    def _shaping(self, role: str, dev: str) -> None:
        """Called before the qdiscs of ``dev`` on ``role`` change (SSH records it first)."""

    def _apply(self, role: str, argv: list[str]) -> None:
        """Run one link command on a node (SSH names the node and step when it fails)."""
        self.runner(role).run(argv)

    def _apply_all(self, steps: list[tuple[str, list[str]]]) -> None:
        """Run the link commands (role, argv) in order (one at a time here; the local testbed
        runs each node's in one process)."""
        for role, argv in steps:
            self._apply(role, argv)

    def shape_links(self, egress: dict[str, str], delay_ports) -> None:
        """Apply the link plan: htb + bfifo on the gateway's egress per direction, netem on
        both delay ports or our delay line between them."""
        steps = link_steps(self.plan, egress, delay_ports)
        for role, dev in dict.fromkeys((role, dev) for role, dev, _ in steps):
            self._shaping(role, dev)
        self._apply_all([(role, argv) for role, _dev, argv in steps])
        if self.plan.delay.mechanism == "delayline":
            self._start_delayline(delay_ports)

    def _start_delayline(self, ports) -> None:
        argv = self.plan.delay.delayline_argv(ports[0], ports[1], self._delayline_binary())
        log = self.log_dir / "delayline.log" if self.log_dir else None
        proc = self.start("dly", argv, stdout=log, stderr=log)
        self._delayline = proc
        deadline = time.monotonic() + DELAYLINE_READY_S
        while time.monotonic() < deadline:
            text = proc.read_output()
            if proc.poll() is not None:
                raise LatencyDivideError(f"{self._where('dly')}delay line exited at start "
                                         f"(code {proc.poll()}): "
                                         f"{text.strip()[-400:]}")
            if "delayline ready" in text:
                return
            if log is None:  # no ready line to read: give it a moment, then it must run
                time.sleep(0.3)
                if proc.poll() is None:
                    return
                continue
            time.sleep(0.02)
        raise LatencyDivideError(f"{self._where('dly')}delay line did not report "
                                 "'delayline ready' within "
                                 f"{DELAYLINE_READY_S:g} s")

    def _delayline_binary(self) -> str:
        raise NotImplementedError

    def _where(self, role: str) -> str:
        """A prefix naming the node in messages ("" where the node is obvious)."""
        return ""

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

    # lifecycle ------------------------------------------------------------------------------
    def __enter__(self):
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
