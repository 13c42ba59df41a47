"""What a trial is: :class:`TrialSpec` (household, direction, variant, repetition and every
setting of its definition, validated), and the command lines of its traffic tool and ping
(argv lists built from validated values; the testbed gives the addresses).

Roles (EXPERIMENT.md, vocab): the traffic tool's *server* sends. Downlink: the sender runs on
the server node and the receiver (the tool's client) on the client node; uplink: the reverse.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from latency_divide import limits
from latency_divide.config import ToolSettings, Variant
from latency_divide.links import buffers
from latency_divide.trial import definition
from latency_divide.trial.layout import trial_id as _trial_id
from latency_divide.vocab import CCS, DIRECTIONS, TOOLS

#: An extra tool flag (config tool.args, --tool-arg): the same rule as config/schema.yaml.
TOOL_ARG = re.compile(r"\A-[A-Za-z0-9_][A-Za-z0-9_.,:=/+-]{0,198}\Z")


PORT = 5550  # the paper's first tperf port; each trial has its own namespaces

#: The tool ends' default SCHED_FIFO priority: above every normal task (the trial jobs'
#: start-up, Snakemake, compression, other trials' samplers), below the delay line's 10.
TOOL_RT_PRIORITY = 5
#: Highest allowed (the delay line, the link itself, stays above the tool ends).
MAX_TOOL_RT_PRIORITY = 9
#: The queue sampler's and ping's SCHED_FIFO priority when the tool ends have one: above the
#: normal tasks, below everything that carries the trial's packets.
MONITOR_RT_PRIORITY = 1


def realtime_argv(argv: list[str], priority: int) -> list[str]:
    """``argv`` run under SCHED_FIFO ``priority`` (chrt, util-linux); unchanged for 0."""
    if not 0 <= priority <= MAX_TOOL_RT_PRIORITY or isinstance(priority, bool):
        raise ValueError(f"tool_rt_priority {priority!r}: an integer from 0 (normal "
                         f"scheduler) to {MAX_TOOL_RT_PRIORITY}")
    return ["chrt", "-f", str(int(priority)), *argv] if priority else list(argv)


@dataclass
class TrialSpec:
    household: object  # latency_divide.households.Household
    direction: str
    variant: Variant
    repetition: int = 1
    duration_s: float = 60.0
    idle_s: float = 5.0
    tail_s: float = 1.0
    ping_interval_s: float = 0.2
    queue_interval_s: float = 0.1
    qfactor: float = 2.0
    tool: ToolSettings = field(
        default_factory=lambda: ToolSettings(name="tquic-perf", path=None, window_bytes=65536))
    delay: str = "auto"
    config_hash: str | None = None
    concurrency_hint: int | None = None
    #: SCHED_FIFO priority of the tool's two ends (0: the normal scheduler); how the host runs
    #: them, not part of the definition (docs/emulation.md "Emulation health")
    tool_rt_priority: int = 5
    #: the bottleneck FIFO's model (links.buffers); part of the definition unless the default
    buffer_model: str = buffers.DEFAULT_MODEL

    def __post_init__(self):
        v = self.variant
        limits.check_name("variant", v.name, "variant")
        if v.cc not in CCS:
            raise ValueError(f"cc {v.cc!r} is not one of {', '.join(CCS)}")
        if v.delta is not None:
            limits.check("delta", v.delta)
        if v.delta is not None and v.cc != "copa":
            raise ValueError(f"delta is only meaningful for copa, not {v.cc!r}")
        for arg in self.tool.args:
            if not isinstance(arg, str) or not TOOL_ARG.match(arg):
                raise ValueError(f"tool argument {arg!r}: a flag like -name or -name=value "
                                 "(letters, digits and _.,:=/+- only, at most 200 characters)")
        realtime_argv([], self.tool_rt_priority)  # validates it
        if self.tool.name not in TOOLS:
            raise ValueError(f"tool {self.tool.name!r} is not one of {', '.join(TOOLS)}")
        if self.live and self.tool.name != "tquic-perf":
            raise ValueError(f"a live broadcast (-app=live) is tquic-perf's mode, not "
                             f"{self.tool.name!r}'s")
        if self.tool.qlog and self.tool.name != "tperf":
            raise ValueError(f"qlog: only for tperf (mvfst's qlog), not {self.tool.name!r}")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction {self.direction!r} is not one of uplink, downlink")
        for key in ("duration_s", "idle_s", "ping_interval_s", "queue_interval_s", "qfactor",
                    "repetition"):
            limits.check(key, getattr(self, key))
        limits.check("window_bytes", self.tool.window_bytes, "tool window_bytes")
        buffers.check_model(self.buffer_model)

    @property
    def live(self) -> bool:
        """A live broadcast (tquic-perf ``-app live``: config.app_args put the flag in the
        tool's args), not the paper's bulk transfer."""
        return "-app=live" in self.tool.args

    @property
    def trial_id(self) -> str:
        return _trial_id(self.household.unit_id, self.direction, self.variant.name,
                        self.repetition)

    def definition(self, testbed_kind: str = "local") -> dict:
        """The trial's definition (latency_divide.definition): what shapes the measurement."""
        return definition.make_definition(
            testbed=testbed_kind, delay=self.delay, qfactor=self.qfactor,
            duration_s=self.duration_s, idle_s=self.idle_s, ping_interval_s=self.ping_interval_s,
            queue_interval_s=self.queue_interval_s, tool_name=self.tool.name,
            window_bytes=self.tool.window_bytes, tool_args=self.tool.args, cc=self.variant.cc,
            delta=self.variant.delta, qlog=self.tool.qlog,
            pacing=definition.paced(self.tool.name, self.variant.cc),
            buffer_model=self.buffer_model)

    def definition_id(self, testbed_kind: str = "local") -> str:
        return definition.definition_id(self.definition(testbed_kind))

    def link_plan(self, mechanism: str, policer: str | None = None):
        """The trial's link plan (links.plan): the household's, with the spec's qfactor and
        buffer model, and the delay ``mechanism`` (and, for a policed model, the ``policer``
        implementation) the testbed resolved."""
        from latency_divide.links.plan import make_linkplan

        return make_linkplan(self.household, qfactor=self.qfactor, mechanism=mechanism,
                             buffer_model=self.buffer_model, policer_impl=policer)

    def late_bound(self) -> dict:
        """The wake-up lateness p99 this trial's health verdict allows (trial.health.bound_for
        at its bottleneck's packet time; the rule of ops.hostfit.late_limit_us), which a
        testbed holds its nodes' probes to before the trial (testbed.ssh.nodecheck)."""
        from latency_divide.trial.health import bound_for, packet_time_us

        plan = self.link_plan("netem")
        rate = plan.shaper(self.direction).rate_kbit
        pkt = packet_time_us(rate)
        return {"rate_kbit": rate, "packet_us": pkt,
                "limit_us": bound_for("delayline_late_p99_us", pkt, plan.rtt_ms)}


def sender_argv(spec: TrialSpec, binary: str, json_path: str | None, sender_addr: str,
                qlog_dir: str | None = None) -> list[str]:
    """The traffic tool's sending end (its server), listening on ``sender_addr``; tperf's
    server writes its qlog into ``qlog_dir`` when given."""
    argv = [binary, "-mode", "server", "-host", sender_addr, "-port", str(PORT),
            "-congestion", spec.variant.cc]
    if spec.variant.cc == "copa":
        argv += ["-latency_factor", repr(float(spec.variant.delta if spec.variant.delta
                                               is not None else 0.5))]
    if definition.paced(spec.tool.name, spec.variant.cc):
        argv += ["-pacing=true"]
    if spec.tool.name == "tquic-perf":
        argv += ["-once"]
        if json_path:
            argv += ["-json", json_path]
    if qlog_dir is not None:
        argv += [f"-server_qlogger_path={qlog_dir}"]
    return argv + list(spec.tool.args)


def receiver_argv(spec: TrialSpec, binary: str, json_path: str | None, sender_addr: str
                  ) -> list[str]:
    """The traffic tool's receiving end (its client): fetches for ``duration_s``."""
    dur = spec.duration_s
    argv = [binary, "-mode", "client", "-host", sender_addr, "-port", str(PORT),
            "-duration", str(int(dur)) if float(dur).is_integer() else repr(dur),
            "-window", str(spec.tool.window_bytes)]
    if spec.tool.name == "tquic-perf" and json_path:
        argv += ["-json", json_path]
    return argv + list(spec.tool.args)


def ping_argv(interval_s: float, target: str) -> list[str]:
    """ping with kernel timestamps (-D) and a line per missing reply (-O)."""
    return ["ping", "-D", "-O", "-n", "-i", f"{interval_s:g}", target]
