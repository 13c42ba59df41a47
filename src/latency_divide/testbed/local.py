"""The local testbed: a fresh four-namespace topology on this host for every trial.

:class:`LocalTestbed` implements testbed.base.Testbed (``check`` looks for root, the programs,
the traffic tool and, without netem, our delay line); :class:`Topology` is its live slice:
testbed.netns names and wires the namespaces, testbed.base.SliceBase shapes the links and runs
the delay line, ``down()`` stops our processes by PID and deletes the namespaces.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from latency_divide.errors import EnvironmentError_, LatencyDivideError
from latency_divide.paths import built_tool
from latency_divide.testbed import netns
from latency_divide.testbed.base import (
    OFFLOAD_ARGS,
    SliceBase,
    local_delayline,
    local_tool,
    tool_facts,
)
from latency_divide.links.policer import burst_ms
from latency_divide.testbed.delay import choose_mechanism, choose_policer
from latency_divide.testbed.netns import (
    ADDRS,
    DELAY_PORTS,
    GATEWAY_EGRESS,
    netem_available,
    new_tag,
    police_available,
    ns_name,
    remove_namespaces,
    run_grouped,
    rx_napi_commands,
    rx_napi_state,
    setup_commands,
    write_owner_record,
)
from latency_divide.testbed.runners import LocalRunner, Process
from latency_divide.testbed.rxnapi import RX_NAPI_CHOICES, carried_mbit, rx_napi_for
from latency_divide.vocab import ROLES

#: The environment variable that forces the receiving veths' NAPI (``auto``, the default, is
#: by the link's rate and the variant: testbed.rxnapi.rx_napi_for); for comparisons, recorded
#: in meta.json.
RX_NAPI_ENV = "LATENCY_DIVIDE_RX_NAPI"

#: Programs a local trial runs (and the Debian package that has each).
REQUIRED_PROGRAMS = {"ip": "iproute2", "tc": "iproute2", "ss": "iproute2",
                     "ping": "iputils-ping", "ethtool": "ethtool", "sysctl": "procps"}


def resolve_delay_mechanism(choice: str) -> str:
    """``auto`` -> netem when this kernel has it, else the userspace delay line."""
    return choose_mechanism(choice, netem_available)


def planned_delay_mechanism(choice: str) -> str:
    """The mechanism a link plan *on paper* names: ``auto`` is resolved by probing the kernel
    when we can (root), else it is assumed to be netem (what common kernels have). The plan a
    trial applies is resolved again at trial time and recorded in its meta.json, so this
    only matters for the link stage's JSON, e.g. when re-analysing published data without
    root."""
    if choice == "auto" and os.geteuid() != 0:
        return "netem"
    return resolve_delay_mechanism(choice)


def wanted_rx_napi(spec, plan) -> str:
    """The receiving veths' NAPI for a trial (testbed.rxnapi.rx_napi_for), by its carried
    rate and variant, or as ``LATENCY_DIVIDE_RX_NAPI`` forces it; a bad value is an error
    naming it."""
    choice = os.environ.get(RX_NAPI_ENV, "auto")
    if choice not in RX_NAPI_CHOICES:
        raise EnvironmentError_(f"{RX_NAPI_ENV}={choice!r}: use one of "
                                f"{', '.join(RX_NAPI_CHOICES)}")
    mbit = carried_mbit(plan.shaper(spec.direction).rate_kbit, plan.rtt_ms,
                        spec.tool.window_bytes)
    v = spec.variant
    return rx_napi_for(plan.delay.mechanism, mbit, choice, v.cc, v.delta)


class LocalTestbed:
    """Trials in namespaces on this host (testbed.base.Testbed)."""

    kind = "local"
    #: the sender runs on this host: its qlog is written into the trial directory
    keeps_qlog = True
    #: the trial's processes run here: the job places them (testbed.placement)
    runs_here = True

    def check(self, spec) -> dict:
        """Fail before anything starts; return what was found (for meta.json)."""
        if os.geteuid() != 0:
            raise EnvironmentError_("trials need root (network namespaces, tc): run as root or "
                                    "with sudo")
        missing = [f"{p} (Debian package {pkg})" for p, pkg in REQUIRED_PROGRAMS.items()
                   if shutil.which(p) is None]
        if missing:
            raise EnvironmentError_("missing programs: " + ", ".join(missing) +
                                    "; run scripts/setup.sh or apt-get install them")
        binary = local_tool(spec)
        mechanism = resolve_delay_mechanism(spec.delay)
        delayline = (local_delayline("this kernel has no netem")
                     if mechanism == "delayline" else None)
        # a policed link: the kernel's police action where it has one, else our delay line's
        policer = (choose_policer(police_available, mechanism)
                   if burst_ms(spec.buffer_model) is not None else None)
        return {"binary": str(binary), **tool_facts(spec, binary), "mechanism": mechanism,
                **({"policer": policer} if policer else {}),
                "delayline": str(delayline) if delayline else None,
                "offloads": "ethtool -K IF " + " ".join(OFFLOAD_ARGS) + " on every veth end"}

    def open(self, spec, plan, log_dir: Path, found: dict) -> "Topology":
        return Topology(plan, delayline_bin=found["delayline"], log_dir=log_dir,
                        rx_napi_wanted=wanted_rx_napi(spec, plan))

    def close(self) -> None:
        pass


@dataclass
class Topology(SliceBase):
    """A live four-namespace topology (testbed.base.Slice). Use as a context manager: torn
    down in ``finally``."""

    plan: object  # latency_divide.links.plan.LinkPlan
    delayline_bin: str | None = None
    tag: str = field(default_factory=new_tag)
    log_dir: Path | None = None
    processes: list[Process] = field(default_factory=list)
    setup_s: float = 0.0
    teardown_s: float = 0.0
    _delayline: Process | None = None
    #: the receiving veths' NAPI to set up (netns.rx_napi_commands) and, once up, what the
    #: kernel says they have (rx_napi, for the trial's instrument record)
    rx_napi_wanted: str = "off"
    rx_napi: str = "off"

    @property
    def mechanism(self) -> str:
        return self.plan.delay.mechanism

    def ns(self, role: str) -> str:
        return ns_name(self.tag, role)

    def runner(self, role: str) -> LocalRunner:
        return LocalRunner(self.ns(role))

    def addr(self, role: str) -> str:
        """Data-plane address of an end host (the paper's addresses)."""
        return ADDRS[role]

    def gateway_egress(self, direction: str) -> str:
        return GATEWAY_EGRESS[direction]

    def qsampler_argv(self, dev: str, interval_s: float) -> list[str]:
        """The queue sampler (JSON lines on stdout): our native one (tools/qsampler, the same
        lines as the Python module's for a third of its CPU), or the Python module where it is
        not built (a tree of older builds under LATENCY_DIVIDE_ROOT); the argv, in setup.json,
        says which."""
        args = ["--dev", dev, "--interval", f"{interval_s:g}", "--fifo", "bfifo"]
        native = built_tool("qsampler")
        if native.exists():
            return [str(native), *args]
        return [sys.executable, "-m", "latency_divide.testbed.qsampler", *args]

    def local_pids(self, procs: dict[str, Process]) -> dict[str, int]:
        pids = {name: p.pid for name, p in procs.items()}
        if self._delayline is not None:
            pids["delayline"] = self._delayline.pid
        return pids

    def _apply_all(self, steps: list[tuple[str, list[str]]]) -> None:
        """The link plan's commands, each node's ``tc`` commands in one process."""
        run_grouped(steps, self.runner)

    def describe(self) -> dict:
        return {"kind": "local", "tag": self.tag, "namespaces": [self.ns(r) for r in ROLES],
                "devices": {"gateway": dict(GATEWAY_EGRESS), "delay": list(DELAY_PORTS)},
                "rx_napi": self.rx_napi}

    @property
    def owner_file(self) -> Path:
        return netns.STATE_DIR / f"{self.tag}.json"

    def _delayline_binary(self) -> str:
        if not self.delayline_bin:
            raise EnvironmentError_("the delay line binary was not given (build it: "
                                    "scripts/setup.sh)")
        return self.delayline_bin

    def up(self) -> "Topology":
        t0 = time.monotonic()
        write_owner_record(self.tag, [self.ns(r) for r in ROLES])
        host = LocalRunner()
        run_grouped(setup_commands(self.tag, self.mechanism),
                    lambda node: host if node is None else self.runner(node))
        refused = [" ".join(argv) + f": {res.stderr.strip()}"
                   for node, argv, stdin in rx_napi_commands(self.rx_napi_wanted)
                   if (res := self.runner(node).run(argv, input=stdin, check=False)).returncode]
        # read back from the kernel where we set it (a fresh veth's NAPI is not threaded)
        self.rx_napi = rx_napi_state(self.runner) if self.rx_napi_wanted != "off" else "off"
        if self.rx_napi != self.rx_napi_wanted:
            # a kernel without threaded NAPI (before 5.12): the trial runs as generation v2
            # does, and its record says so (trial.instrument)
            print(f"[latency-divide] WARNING: the receiving veths' NAPI is {self.rx_napi}, not "
                  f"{self.rx_napi_wanted}: {'; '.join(refused) or 'this kernel refused it'}",
                  file=sys.stderr, flush=True)
        self.shape_links(GATEWAY_EGRESS, DELAY_PORTS)
        self.setup_s = time.monotonic() - t0
        return self

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
        errors += remove_namespaces([self.ns(role) for role in ROLES])
        self.owner_file.unlink(missing_ok=True)
        self.teardown_s = time.monotonic() - t0
        if errors:
            raise LatencyDivideError("teardown: " + "; ".join(errors))
