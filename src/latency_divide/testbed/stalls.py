"""A noisy host on demand: the stall injector (``target/release/stallinject``, tools/hostprobe)
beside a command or a block of code, and the host probe (``target/release/hostprobe``).

stallinject runs one SCHED_FIFO thread per CPU (priority 99, above every trial thread) that
busy-spins in bursts, taking the CPU as a hypervisor's steal does; its defaults are issue 57's
noisy host: 1.5 % of each CPU, nine in ten bursts 0.3-2 ms, one in ten 5-25 ms
(tools/hostprobe/README.md). :func:`injecting` starts it as a child, waits for its ready line,
and stops it in ``finally``; the injector also dies with the thread that started it
(PR_SET_PDEATHSIG), so a killed parent leaves nothing behind. Start it from a thread that
outlives the block (the main thread): the death signal follows the starting thread.

Parameters (keys of :func:`injecting`, :func:`argv` and of a spec): ``duty`` (fraction of each
CPU, in (0, 0.5]), ``short`` and ``long`` (burst ranges ``"LO..HI"`` with units ns, us, ms, s;
at most 100 ms), ``long_fraction`` (0-1), ``cpus`` ("all" or CPU numbers), ``priority``
(1-99), ``seed`` (>= 0), ``duration`` (s). A spec is the text form of them, as
``LATENCY_DIVIDE_STALLS`` holds it: ``default`` (the injector's defaults) or
``duty=0.15,long-fraction=0.1,short=300us..2ms`` (a CPU list joined with ``+``: ``cpus=0+1``).
"""

from __future__ import annotations

import os
import re
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from latency_divide.errors import ConfigError, EnvironmentError_, LatencyDivideError
from latency_divide.paths import built_tool
from latency_divide.testbed.runners import LocalRunner, wait_for

#: The environment variable that holds a stall spec (``default`` or ``key=value,...``).
STALLS_ENV = "LATENCY_DIVIDE_STALLS"
#: Set by ``latency-divide stalls`` for COMMAND (the injector's arguments): a host check
#: measured under the injector stays in its own results tree (ops.hostcheck.host_record).
UNDER_ENV = "LATENCY_DIVIDE_UNDER_STALLS"
#: How long the injector may take to say it is ready.
READY_S = 10.0
#: Its defaults (stallinject's own; issue 57's noisy host), for messages and benches.
DEFAULTS = {"duty": 0.015, "short": "300us..2ms", "long": "5ms..25ms", "long_fraction": 0.1}
#: The longest burst the injector accepts (tools/hostprobe: RT throttling).
MAX_BURST_S = 0.1

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}
_DURATION = re.compile(r"\A(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s)\Z")


def binary(name: str = "stallinject") -> Path:
    """One of the crate's two tools (stallinject or hostprobe) as scripts/setup.sh builds it;
    EnvironmentError_ naming the build command when it is missing."""
    p = built_tool(name)
    if not p.exists():
        raise EnvironmentError_(f"{p} is missing: build it with `cargo build --release -p "
                                "hostprobe` (or run scripts/setup.sh)")
    return p


def duration_s(text: str, what: str) -> float:
    """A duration with its unit ("300us", "2ms") in s; ConfigError naming ``what``."""
    m = _DURATION.match(text.strip())
    if not m or float(m.group(1)) <= 0:
        raise ConfigError(f"{what} {text!r}: not a positive duration with a unit (e.g. 300us, "
                          "2ms; units ns, us, ms, s)")
    return float(m.group(1)) * _UNITS[m.group(2)]


def burst_range(text: str, what: str) -> str:
    """A burst range "LO..HI" checked (0 < LO <= HI <= 100 ms), returned as given."""
    lo, sep, hi = str(text).partition("..")
    if not sep:
        raise ConfigError(f"{what} {text!r}: not a range LO..HI (e.g. 300us..2ms)")
    a, b = duration_s(lo, what), duration_s(hi, what)
    if a > b:
        raise ConfigError(f"{what} {text!r}: its low end is above its high end")
    if b > MAX_BURST_S:
        raise ConfigError(f"{what} {text!r}: bursts above 100ms are refused (RT throttling)")
    return str(text).strip()


def _number(value, what: str, lo: float, hi: float, lo_open: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = float("nan")
    if not (lo < v <= hi if lo_open else lo <= v <= hi):
        allowed = f"({lo:g}, {hi:g}]" if lo_open else f"{lo:g} to {hi:g}"
        raise ConfigError(f"{what} {value!r}: allowed is {allowed}")
    return v


def _integer(value, what: str, lo: int, hi: int) -> int:
    try:
        v = int(value)
        ok = str(value).strip() == str(v) or (isinstance(value, int) and not isinstance(value, bool))
    except (TypeError, ValueError):
        ok = False
    if not ok or not lo <= v <= hi:
        raise ConfigError(f"{what} {value!r}: allowed is an integer {lo} to {hi}")
    return v


def _cpus(value) -> str:
    if value == "all":
        return "all"
    items = value if isinstance(value, (list, tuple)) else str(value).replace("+", ",").split(",")
    cpus = [_integer(c, "cpus", 0, 4095) for c in items]
    if not cpus:
        raise ConfigError(f"cpus {value!r}: allowed is 'all' or CPU numbers")
    allowed = os.sched_getaffinity(0)
    unknown = [c for c in cpus if c not in allowed]
    if unknown:
        raise ConfigError(f"cpus {value!r}: CPU {unknown[0]} is not one this process may run on "
                          f"(allowed: {','.join(map(str, sorted(allowed)))})")
    return ",".join(str(c) for c in sorted(set(cpus)))


#: Each parameter: its stallinject flag and its check (value -> the flag's value).
_PARAMS = {
    "duty": ("--duty", lambda v: f"{_number(v, 'duty', 0.0, 0.5, lo_open=True):g}"),
    "short": ("--short", lambda v: burst_range(v, "short")),
    "long": ("--long", lambda v: burst_range(v, "long")),
    "long_fraction": ("--long-fraction",
                      lambda v: f"{_number(v, 'long_fraction', 0.0, 1.0):g}"),
    "cpus": ("--cpus", _cpus),
    "priority": ("--priority", lambda v: str(_integer(v, "priority", 1, 99))),
    "seed": ("--seed", lambda v: str(_integer(v, "seed", 0, 2**64 - 1))),
    "duration": ("--duration", lambda v: f"{_number(v, 'duration', 0.0, 7 * 86400.0, True):g}"),
}


def argv(binary_path: Path | str | None = None, **params) -> list[str]:
    """stallinject's argv from validated parameters (None values left out); ConfigError
    naming an unknown key or a bad value."""
    unknown = sorted(set(params) - set(_PARAMS))
    if unknown:
        raise ConfigError(f"unknown stall parameter {unknown[0]!r}; allowed: "
                          f"{', '.join(_PARAMS)}")
    out = [str(binary_path if binary_path is not None else binary())]
    for key, value in params.items():
        if value is None:
            continue
        flag, check = _PARAMS[key]
        out += [flag, check(value)]
    return out


def params_from_spec(spec: str) -> dict:
    """``default`` (or empty) -> {}; ``duty=0.15,long-fraction=0.1,...`` -> the parameters,
    each checked; ConfigError naming an unknown key or a bad value."""
    spec = spec.strip()
    if spec in ("", "default"):
        return {}
    out: dict = {}
    for part in spec.split(","):
        key, sep, value = part.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not value.strip():
            raise ConfigError(f"stall spec {spec!r}: {part!r} is not KEY=VALUE (keys: "
                              f"{', '.join(k.replace('_', '-') for k in _PARAMS)})")
        if key not in _PARAMS:
            raise ConfigError(f"stall spec {spec!r}: unknown key {key.replace('_', '-')!r}; "
                              f"allowed: {', '.join(k.replace('_', '-') for k in _PARAMS)}")
        out[key] = value.strip()
    argv("stallinject", **out)  # every value checked now, not when the injector starts
    return out


def parse_fields(line: str) -> dict[str, str]:
    """The ``key=value`` words of a stallinject ready or done line."""
    return dict(w.split("=", 1) for w in line.split() if "=" in w)


@dataclass
class Injector:
    """A running (then ended) stall injector: its pid, ready line's fields and, once it has
    ended, its summary's (``bursts``, ``stolen_ms`` per CPU, ``longest_ms``)."""

    pid: int
    argv: list[str]
    ready: dict[str, str]
    done: dict[str, str] = field(default_factory=dict)
    returncode: int | None = None

    def stolen_ms(self) -> dict[int, float]:
        """{cpu: ms} from the summary ({} before the end)."""
        out = {}
        for item in filter(None, self.done.get("stolen_ms", "").split(",")):
            cpu, ms = item.split(":")
            out[int(cpu.removeprefix("cpu"))] = float(ms)
        return out


@contextmanager
def injecting(**params) -> Iterator[Injector]:
    """stallinject running for the block: started (argv from validated ``params``, its parent
    pid passed so that it refuses to run orphaned), its ready line awaited, and in ``finally``
    stopped with SIGTERM (SIGKILL after 5 s) and waited for; its summary is then in
    ``.done``. LatencyDivideError when it exits or stays silent before it is ready."""
    cmd = argv(**params) + ["--parent-pid", str(os.getpid())]
    fd, log_name = tempfile.mkstemp(prefix="ld-stalls-", suffix=".log")
    os.close(fd)
    log = Path(log_name)
    proc = None
    try:
        proc = LocalRunner().start(cmd, stdout=log, stderr=log)
        ready_line = ""

        def ready() -> bool:
            nonlocal ready_line
            for line in proc.read_output().splitlines():
                if line.startswith("stallinject ready "):
                    ready_line = line
                    return True
            if proc.poll() is not None:
                raise LatencyDivideError(f"stallinject exited ({proc.poll()}) before it was "
                                         f"ready: {proc.read_output().strip()}")
            return False

        try:
            wait_for(ready, READY_S, what="stallinject's ready line")
        except TimeoutError as e:
            raise LatencyDivideError(str(e)) from None
        inj = Injector(pid=proc.pid, argv=cmd, ready=parse_fields(ready_line))
        try:
            yield inj
        finally:
            inj.returncode = proc.stop(timeout=5.0)
            proc = None
            for line in log.read_text(errors="replace").splitlines():
                if line.startswith("stallinject done "):
                    inj.done = parse_fields(line)
    finally:
        if proc is not None:
            proc.stop(timeout=5.0)
        log.unlink(missing_ok=True)


def hostprobe_argv(seconds: float | None = None, json: bool = False,
                   binary_path: Path | str | None = None) -> list[str]:
    """hostprobe's argv (``--seconds`` checked: 1 to 600)."""
    out = [str(binary_path if binary_path is not None else binary("hostprobe"))]
    if seconds is not None:
        out += ["--seconds", f"{_number(seconds, '--seconds', 1.0, 600.0):g}"]
    if json:
        out.append("--json")
    return out
