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

import dataclasses
import os
import platform
import re
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from . import FORMAT_VERSION, PREFIX, __version__, definition, topology
from .config import ToolSettings, Variant
from .errors import CommandError, EnvironmentError_, LatencyDivideError, TrialError
from .fsio import write_json_atomic
from . import limits
from .provenance import git_revision, sha256_file
from .rawio import COMPRESSED_LOGS, compress_logs
from .runners import LocalRunner

DIRECTIONS = ("uplink", "downlink")
CCS = ("cubic", "copa", "bbr", "bbr3")
TOOLS = ("tquic-perf", "tperf")
#: An extra tool flag (config tool.args, --tool-arg): the same rule as config/schema.yaml.
TOOL_ARG = re.compile(r"\A-[A-Za-z0-9_][A-Za-z0-9_.,:=/+-]{0,198}\Z")
PORT = 5550  # the paper's first tperf port; each trial has its own namespaces
TPERF_HELP = (
    "mvfst's tperf is not packaged anywhere: build it from mvfst's public sources with tests on "
    "(https://github.com/facebook/mvfst, README, 'Building mvfst'; the target is "
    "quic/tools/tperf), put it on PATH or give its path as tool.path in the config or "
    "--tool-path. README, \"mvfst's tperf\", has the flags that make it behave like the 2021 one."
)


def repo_root() -> Path:
    env = os.environ.get("LATENCY_DIVIDE_ROOT")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parents[2]
    return here if (here / "Cargo.toml").exists() else Path.cwd()


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
        if self.tool.name not in TOOLS:
            raise ValueError(f"tool {self.tool.name!r} is not one of {', '.join(TOOLS)}")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction {self.direction!r} is not one of uplink, downlink")
        for key in ("duration_s", "idle_s", "ping_interval_s", "queue_interval_s", "qfactor",
                    "repetition"):
            limits.check(key, getattr(self, key))
        limits.check("window_bytes", self.tool.window_bytes, "tool window_bytes")

    @property
    def trial_id(self) -> str:
        return (f"{self.household.unit_id}/{self.direction}/{self.variant.name}/"
                f"rep{self.repetition}")

    def definition(self, testbed_kind: str = "local") -> dict:
        """The trial's definition (latency_divide.definition): what shapes the measurement."""
        return definition.make_definition(
            testbed=testbed_kind, delay=self.delay, qfactor=self.qfactor,
            duration_s=self.duration_s, idle_s=self.idle_s, ping_interval_s=self.ping_interval_s,
            queue_interval_s=self.queue_interval_s, tool_name=self.tool.name,
            window_bytes=self.tool.window_bytes, tool_args=self.tool.args, cc=self.variant.cc,
            delta=self.variant.delta)

    def definition_id(self, testbed_kind: str = "local") -> str:
        return definition.definition_id(self.definition(testbed_kind))


def trial_dir(root: Path, spec: TrialSpec, testbed_kind: str = "local") -> Path:
    """``root/<definition id>/<household>/<direction>/<variant>/rep<r>``."""
    return Path(root) / spec.definition_id(testbed_kind) / spec.trial_id


# --------------------------------------------------------------------------------------------
# command building (pure)
# --------------------------------------------------------------------------------------------

def endpoints(direction: str) -> dict[str, str]:
    """Which node sends and which receives, and the sender's address."""
    if direction == "downlink":
        return {"sender": "srv", "receiver": "cli", "sender_addr": topology.SERVER_ADDR}
    return {"sender": "cli", "receiver": "srv", "sender_addr": topology.CLIENT_ADDR}


def sender_argv(spec: TrialSpec, binary: str, json_path: str | None = None,
                sender_addr: str | None = None) -> list[str]:
    ep = endpoints(spec.direction)
    argv = [binary, "-mode", "server", "-host", sender_addr or ep["sender_addr"], "-port", str(PORT),
            "-congestion", spec.variant.cc]
    if spec.variant.cc == "copa":
        argv += ["-latency_factor", repr(float(spec.variant.delta if spec.variant.delta
                                               is not None else 0.5))]
    if spec.tool.name == "tquic-perf":
        argv += ["-once"]
        if json_path:
            argv += ["-json", json_path]
    return argv + list(spec.tool.args)


def receiver_argv(spec: TrialSpec, binary: str, json_path: str | None = None,
                  sender_addr: str | None = None) -> list[str]:
    ep = endpoints(spec.direction)
    dur = spec.duration_s
    argv = [binary, "-mode", "client", "-host", sender_addr or ep["sender_addr"], "-port", str(PORT),
            "-duration", str(int(dur)) if float(dur).is_integer() else repr(dur),
            "-window", str(spec.tool.window_bytes)]
    if spec.tool.name == "tquic-perf" and json_path:
        argv += ["-json", json_path]
    return argv + list(spec.tool.args)


def ping_argv(interval_s: float, target: str = topology.SERVER_ADDR) -> list[str]:
    return ["ping", "-D", "-O", "-n", "-i", f"{interval_s:g}", target]


# --------------------------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------------------------

REQUIRED_PROGRAMS = {"ip": "iproute2", "tc": "iproute2", "ss": "iproute2",
                     "ping": "iputils-ping", "ethtool": "ethtool", "sysctl": "procps"}


def check_environment(spec: TrialSpec) -> dict:
    """Fail before anything starts; return what was found (for meta.json)."""
    if os.geteuid() != 0:
        raise EnvironmentError_("trials need root (network namespaces, tc): run as root or with "
                                "sudo")
    missing = [f"{p} (Debian package {pkg})" for p, pkg in REQUIRED_PROGRAMS.items()
               if shutil.which(p) is None]
    if missing:
        raise EnvironmentError_("missing programs: " + ", ".join(missing) +
                                "; run scripts/setup.sh or apt-get install them")
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
    mechanism = topology.resolve_delay_mechanism(spec.delay)
    delayline = None
    if mechanism == "delayline":
        delayline = repo_root() / "target" / "release" / "delayline"
        if not delayline.exists():
            raise EnvironmentError_(f"this kernel has no netem and the delay line is not built "
                                    f"({delayline}): run scripts/setup.sh")
    return {"binary": str(binary), "mechanism": mechanism,
            "delayline": str(delayline) if delayline else None}


# --------------------------------------------------------------------------------------------
# metadata
# --------------------------------------------------------------------------------------------

def tool_version(spec: TrialSpec, binary: Path) -> str | None:
    if spec.tool.name != "tquic-perf":
        return None  # tperf has no version flag; the binary's sha256 identifies it
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                             timeout=5)
        return (out.stdout or out.stderr).strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


def live_topologies() -> int:
    d = topology.STATE_DIR
    return len(list(d.glob("*.json"))) if d.is_dir() else 0


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def host_info() -> dict:
    return {"kernel": platform.release(), "hostname": socket.gethostname(),
            "cpu_count": os.cpu_count(), "python": platform.python_version(),
            "loadavg": list(os.getloadavg())}


def process_started_unix(pid: int | str = "self") -> float | None:
    """When a process started (Unix time, 10 ms resolution): the trial job's own start, so
    meta.json can tell job start-up (Python, imports, checks) from the trial itself."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime_s = float(f.read().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    age_s = uptime_s - start_ticks / os.sysconf("SC_CLK_TCK")
    return round(time.time() - age_s, 2)


def cpu_times() -> tuple[float, float] | None:
    """(busy, total) jiffies of all CPUs from /proc/stat, to measure the host's load."""
    try:
        with open("/proc/stat") as f:
            fields = [float(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def job_cpu_s(components: dict[str, float | None]) -> dict[str, float]:
    """The trial job's own CPU seconds (``job``: Python, imports, checks, monitoring) and its
    other children's (``commands``: ip, tc, ss, ethtool, ...): every reaped child minus the
    named components. Meaningful when one job runs one trial (as under Snakemake)."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    named = sum(v for v in components.values() if v is not None)
    return {"job": round(own.ru_utime + own.ru_stime, 2),
            "commands": round(max(0.0, kids.ru_utime + kids.ru_stime - named), 2)}


def cpu_busy_pct(before, after) -> float | None:
    if not before or not after or after[1] <= before[1]:
        return None
    return round(100.0 * (after[0] - before[0]) / (after[1] - before[1]), 1)


# --------------------------------------------------------------------------------------------
# running
# --------------------------------------------------------------------------------------------

def _wait_udp_listen(runner: LocalRunner, port: int, proc, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise TrialError(f"the sender exited at start (code {proc.poll()})")
        res = runner.run(["ss", "-H", "-u", "-l", "-n", "sport", "=", f":{port}"], check=False)
        if res.stdout.strip():
            return
        time.sleep(0.02)
    raise TrialError(f"the sender did not listen on UDP port {port} within {timeout} s")


def _complete(text: str) -> bool:
    from .parsers.tool import parse_tool_log

    return parse_tool_log(text).complete


class LocalTestbed:
    """The default testbed: a fresh four-namespace topology on this host per trial.

    A testbed has two steps: ``check(spec)`` finds everything the trial needs and fails
    before anything starts (returns facts for meta.json); ``open(spec, plan, log_dir)``
    returns a context manager (a live topology) that offers ``runner(role)``, ``addr(role)``,
    ``gateway_egress(direction)``, ``qsampler_argv(dev, interval_s)``, ``qdisc_dump()``,
    ``stop_delayline()``, ``processes`` (stopped by PID on exit), ``describe()``,
    ``setup_s``/``teardown_s`` and ``local_files``. The SSH testbed offers the same.
    """

    kind = "local"

    def check(self, spec: TrialSpec) -> dict:
        return check_environment(spec)

    def open(self, spec: TrialSpec, plan, log_dir: Path, found: dict):
        return topology.Topology(plan, delayline_bin=found["delayline"], log_dir=log_dir)


def make_testbed(kind: str = "local", inventory=None, slice_name: str | None = None):
    """The testbed of a run: ``local`` (namespaces on this host) or ``ssh`` (one slice of an
    inventory, see latency_divide.ssh)."""
    if kind == "local":
        return LocalTestbed()
    if kind == "ssh":
        if inventory is None:
            raise EnvironmentError_("testbed kind 'ssh' needs an inventory (testbed.inventory "
                                    "or --inventory)")
        from .ssh import SshTestbed
        return SshTestbed(inventory, slice_name)
    raise ValueError(f"testbed kind {kind!r}: use local or ssh")


def run_trial(spec: TrialSpec, out_root: Path, *, attempt: int = 1, testbed=None) -> Path:
    """Run one trial; return its (complete) directory under ``out_root``."""
    testbed = testbed or LocalTestbed()
    found = testbed.check(spec)
    final = trial_dir(out_root, spec, testbed.kind)
    final.parent.mkdir(parents=True, exist_ok=True)
    definition.ensure_file(Path(out_root) / spec.definition_id(testbed.kind),
                           spec.definition(testbed.kind))
    # The owner's PID is in the name, so `clean` can tell an abandoned one from a live one.
    tmp = Path(tempfile.mkdtemp(prefix=f".{PREFIX}tmp-rep{spec.repetition}-{os.getpid()}-",
                                dir=final.parent))
    try:
        meta = _run_in(spec, tmp, found, attempt, testbed)
        compress_logs(tmp)
        meta["compressed_logs"] = [f"{n}.gz" for n in COMPRESSED_LOGS if (tmp / f"{n}.gz").exists()]
        write_json_atomic(tmp / "meta.json", meta)
        if final.exists():
            if any(final.iterdir()):
                raise TrialError(f"{final} exists and is not empty: refusing to overwrite a trial")
            final.rmdir()
        os.rename(tmp, final)
        return final
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _run_in(spec: TrialSpec, d: Path, found: dict, attempt: int, testbed) -> dict:
    from .linkplan import make_linkplan

    plan = make_linkplan(spec.household, qfactor=spec.qfactor, mechanism=found["mechanism"])
    binary = found["binary"]
    ep = endpoints(spec.direction)
    concurrency = spec.concurrency_hint or live_topologies() + 1
    timing: dict = {"started_at": utc_now(), "started_unix": time.time(),
                    "process_started_unix": process_started_unix()}
    host_before = host_info()
    cpu_before = cpu_times()

    topo = testbed.open(spec, plan, d, found)
    with topo:
        sender_addr = topo.addr(ep["sender"])
        def tool_json(role: str, name: str) -> str | None:
            # tquic-perf writes its JSON summary where it runs: here, or on a remote node
            # (the SSH testbed gives the remote path and fetches the file into d on exit).
            if spec.tool.name != "tquic-perf":
                return None
            return str(d / name) if topo.local_files else topo.tool_output(role, d / name)

        s_argv = sender_argv(spec, binary, tool_json(ep["sender"], "sender.json"), sender_addr)
        r_argv = receiver_argv(spec, binary, tool_json(ep["receiver"], "receiver.json"),
                               sender_addr)
        p_argv = ping_argv(spec.ping_interval_s, topo.addr("srv"))
        q_dev = topo.gateway_egress(spec.direction)
        q_argv = topo.qsampler_argv(q_dev, spec.queue_interval_s)

        qdisc_before = topo.qdisc_dump()
        snd = topo.runner(ep["sender"]).start(s_argv, stdout=d / "sender.log",
                                              stderr=d / "sender.log")
        topo.processes.append(snd)
        _wait_udp_listen(topo.runner(ep["sender"]), PORT, snd)
        qs = topo.runner("gw").start(q_argv, stdout=d / "queue.jsonl",
                                     stderr=d / "qsampler.log")
        topo.processes.append(qs)
        ping = topo.runner("cli").start(p_argv, stdout=d / "ping.log", stderr=d / "ping.err")
        topo.processes.append(ping)
        time.sleep(spec.idle_s)
        timing["transfer_started_unix"] = time.time()
        rcv = topo.runner(ep["receiver"]).start(r_argv, stdout=d / "receiver.log",
                                                stderr=d / "receiver.log")
        topo.processes.append(rcv)
        limit = spec.duration_s + 20.0
        try:
            rc = rcv.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            rcv.stop()
            raise TrialError(f"the receiver did not finish within {limit:.0f} s "
                             f"(duration {spec.duration_s} s + 20 s)") from None
        timing["transfer_ended_unix"] = time.time()
        time.sleep(spec.tail_s)
        # The monitors must have run for the whole transfer: one that died early makes the
        # trial incomplete (retried), never a directory that looks complete.
        died = [name for name, proc in (("ping", ping), ("queue sampler", qs))
                if proc.poll() is not None]
        # tquic-perf's sender runs with -once: it may have exited, but only successfully
        if snd.poll() not in (None, 0):
            died.append(f"the sender (exit code {snd.poll()})")
        for proc in (ping, qs, snd):
            proc.stop(timeout=3)
        delayline_rc = topo.stop_delayline()
        cpu = {"sender": snd.cpu_s, "receiver": rcv.cpu_s, "delayline": topo.delayline_cpu_s,
               "qsampler": qs.cpu_s, "ping": ping.cpu_s}
        if died:
            raise TrialError(f"trial {spec.trial_id}: {', '.join(died)} exited before the end of "
                             "the transfer (see its log)")
        if delayline_rc not in (None, 0):
            raise TrialError(f"trial {spec.trial_id}: the delay line exited with code "
                             f"{delayline_rc} (see delayline.log)")
        qdisc_after = topo.qdisc_dump()
        described = topo.describe()
        concurrency_end = live_topologies()
    timing["ended_at"] = utc_now()
    cpu.update(job_cpu_s(cpu))
    timing["setup_s"] = round(topo.setup_s, 3)
    timing["teardown_s"] = round(topo.teardown_s, 3)

    text = (d / "receiver.log").read_text(errors="replace")
    if rc != 0 or not _complete(text):
        tail = " | ".join(text.strip().splitlines()[-3:])
        raise TrialError(f"trial {spec.trial_id}: the receiver exited with code {rc} without a "
                         f"complete summary: {tail}")
    for name in ("ping.log", "queue.jsonl"):
        f = d / name
        if not f.exists() or f.stat().st_size == 0:
            raise TrialError(f"trial {spec.trial_id}: {name} is empty")
    p = d / "ping.err"
    if p.exists() and p.stat().st_size == 0:
        p.unlink()

    return {
        "format_version": FORMAT_VERSION,
        "latency_divide_version": __version__,
        "trial_id": spec.trial_id,
        "definition_id": spec.definition_id(testbed.kind),
        "definition": spec.definition(testbed.kind),
        "household": spec.household.to_dict(),
        "direction": spec.direction,
        "variant": dataclasses.asdict(spec.variant),
        "repetition": spec.repetition,
        "attempt": attempt,
        "capacity_kbps": plan.shaper(spec.direction).rate_kbit,
        "qfactor": spec.qfactor,
        "linkplan": plan.to_dict(),
        "delay_mechanism": found["mechanism"],
        "delayline_exit_code": delayline_rc,
        "tool": {"name": spec.tool.name, "path": binary,
                 "sha256": found.get("binary_sha256") or sha256_file(Path(binary)),
                 "version": found.get("tool_version") or tool_version(spec, Path(binary)),
                 "window_bytes": spec.tool.window_bytes, "args": list(spec.tool.args),
                 "sender_node": ep["sender"], "receiver_node": ep["receiver"],
                 "sender_argv": s_argv, "receiver_argv": r_argv, "receiver_exit_code": rc},
        "ping": {"argv": p_argv, "interval_s": spec.ping_interval_s, "node": "cli",
                 "target": topo.addr("srv")},
        "queue": {"node": "gw", "dev": q_dev, "interval_s": spec.queue_interval_s,
                  "argv": q_argv},
        "duration_s": spec.duration_s,
        "idle_s": spec.idle_s,
        "timing": timing,
        # CPU seconds (user + system) by component: the traffic tool's two ends, the delay
        # line, the queue sampler, ping (None where not measured: remote nodes), the
        # set-up/teardown commands, and the trial job's own Python process so far
        "cpu_s": cpu,
        "host": {**host_before, "loadavg_after": list(os.getloadavg()),
                 "cpu_busy_pct": cpu_busy_pct(cpu_before, cpu_times())},
        # trials running on this host (live topologies, this one included) at start and end
        "concurrency": max(concurrency, concurrency_end),
        "concurrency_at_start_end": [concurrency, concurrency_end],
        "qdisc_before": qdisc_before,
        "qdisc_after": qdisc_after,
        "offloads": "ethtool -K IF " + " ".join(topology.OFFLOAD_ARGS) + " on every veth end"
        if testbed.kind == "local" else found.get("offloads"),
        "testbed": described,
        "git_revision": git_revision(repo_root()),
        "config_hash": spec.config_hash,
    }


def run_trial_with_retries(spec: TrialSpec, out_root: Path, retries: int = 2,
                           log=print, testbed=None) -> Path:
    """Retry transient failures; never leave a partial trial directory behind."""
    last: Exception | None = None
    for attempt in range(1, retries + 2):
        try:
            return run_trial(spec, out_root, attempt=attempt, testbed=testbed)
        except EnvironmentError_:
            raise  # not transient
        except (TrialError, CommandError, TimeoutError, LatencyDivideError) as e:
            last = e
            log(f"[latency-divide] trial {spec.trial_id} attempt {attempt} failed: {e}")
    raise TrialError(f"trial {spec.trial_id} failed after {retries + 1} attempts: {last}")


# --------------------------------------------------------------------------------------------
# from the workflow's config
# --------------------------------------------------------------------------------------------

def trial_ids(cfg) -> list[tuple[str, int, str, str, int]]:
    """Every (definition id, household, direction, variant, repetition) of a run, in sweep
    order."""
    ids = {v.name: definition.definition_id(definition.of_config(cfg, v)) for v in cfg.variants}
    return [(ids[v.name], h, d, v.name, r)
            for h in cfg.household_ids() for d in cfg.directions for v in cfg.variants
            for r in range(1, cfg.trial.repetitions + 1)]


def trial_meta_path(raw_root: str | Path, definition_id: str, household: int, direction: str,
                    variant: str, rep: int) -> Path:
    return (Path(raw_root) / definition_id / str(household) / direction / variant / f"rep{rep}"
            / "meta.json")


def spec_from_config(cfg, household, direction: str, variant: str, repetition: int,
                     config_hash: str | None = None) -> TrialSpec:
    t = cfg.trial
    v = cfg.variant(variant)
    return TrialSpec(household=household, direction=direction, variant=v,
                     repetition=repetition, duration_s=t.duration_s, idle_s=t.idle_s,
                     ping_interval_s=t.ping_interval_s, queue_interval_s=t.queue_interval_s,
                     qfactor=cfg.qfactor, tool=cfg.tool_for(v), delay=cfg.testbed.delay,
                     config_hash=config_hash)


def nominal_trial_s(cfg) -> float:
    """A trial's expected wall time before any has been measured: idle + transfer + ~3 s
    of setup, connection, tail and teardown."""
    return cfg.trial.idle_s + cfg.trial.duration_s + 3.0
