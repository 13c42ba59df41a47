"""What the benchmarks that build namespaces and run our delay line share, and what a wake-up
costs on this machine (host_calibration)."""

import json
import os
import resource
import sys
import time
from pathlib import Path


def delayline_preconditions(bench: str, binary: Path) -> int | None:
    """None when the bench can run (root, the delay line built), else its exit status after
    saying why on stderr."""
    if os.geteuid() != 0:
        print(f"{bench}: needs root (network namespaces)", file=sys.stderr)
        return 2
    if not binary.exists():
        print(f"{bench}: {binary} missing; cargo build --release -p delayline", file=sys.stderr)
        return 2
    return None


#: The line benches' end addresses (each line has its own namespaces, so they may repeat).
ADDR_A, ADDR_B = "10.99.0.1", "10.99.0.2"


def wire_line(ns: dict[str, str], if_a: str, if_da: str, if_db: str, if_b: str,
              created: list[str]) -> None:
    """Namespaces ``ns`` {a, d, b} with veth A<->D (if_a, if_da) and D<->B (if_db, if_b),
    offloads off, A and B addressed in 10.99.0.0/24; each namespace is appended to
    ``created`` as soon as it exists (the caller deletes them)."""
    from latency_divide.testbed.base import OFFLOAD_ARGS
    from latency_divide.testbed.runners import LocalRunner

    host = LocalRunner()
    for name in ns.values():
        host.run(["ip", "netns", "add", name])
        created.append(name)
    host.run(["ip", "link", "add", if_a, "netns", ns["a"], "type", "veth",
              "peer", "name", if_da, "netns", ns["d"]])
    host.run(["ip", "link", "add", if_b, "netns", ns["b"], "type", "veth",
              "peer", "name", if_db, "netns", ns["d"]])
    for role, dev in (("a", if_a), ("d", if_da), ("d", if_db), ("b", if_b)):
        r = LocalRunner(netns=ns[role])
        r.run(["ethtool", "-K", dev, *OFFLOAD_ARGS])
        r.run(["ip", "link", "set", dev, "up"])
    for role in ("a", "b"):
        LocalRunner(netns=ns[role]).run(["ip", "link", "set", "lo", "up"])
    LocalRunner(netns=ns["a"]).run(["ip", "addr", "add", f"{ADDR_A}/24", "dev", if_a])
    LocalRunner(netns=ns["b"]).run(["ip", "addr", "add", f"{ADDR_B}/24", "dev", if_b])


def _in_child(fn, *args):
    """``fn(*args)`` (a dict) run in a forked child, so its scheduling policy and CPU
    affinity stay its own; None if the child failed."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no return, no cleanup handlers of the parent
        try:
            os.close(r)
            os.write(w, json.dumps(fn(*args)).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data) if data else None


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _timer_wakeups(n: int, period_s: float) -> dict:
    """CPU per timer wake-up of a loop sleeping to absolute times ``period_s`` apart, at
    SCHED_FIFO 10 (the delay line's priority) where the host allows it."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
        policy = "SCHED_FIFO 10"
    except OSError:
        policy = "normal"
    c0, t = _cpu_s(), time.monotonic()
    for _ in range(n):
        t += period_s
        left = t - time.monotonic()
        if left > 0:
            time.sleep(left)
    return {"cpu_us": round((_cpu_s() - c0) / n * 1e6, 1), "policy": policy}


def _pingpong(n: int, same_core: bool) -> dict:
    """Wall time of one wake-up of a process blocked on a pipe, woken by a process on the
    same core or on another one (an interprocessor interrupt); {} where it cannot run (fewer
    than two allowed CPUs for ``same_core=False``, or the other end died)."""
    cpus = sorted(os.sched_getaffinity(0))
    if not same_core and len(cpus) < 2:
        return {}
    cpu_a, cpu_b = cpus[0], cpus[0] if same_core else cpus[1]
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(w1)
            os.close(r2)
            os.sched_setaffinity(0, {cpu_b})
            for _ in range(n):
                if not os.read(r1, 1):
                    break
                os.write(w2, b"x")
        finally:
            os._exit(0)
    os.close(r1)
    os.close(w2)
    os.sched_setaffinity(0, {cpu_a})
    t0, done = time.monotonic(), 0
    try:
        for _ in range(n):
            os.write(w1, b"x")
            if not os.read(r2, 1):  # the other end is gone
                break
            done += 1
    finally:
        wall = time.monotonic() - t0
        os.close(w1)
        os.close(r2)
        os.waitpid(pid, 0)
    return {"wall_us": round(wall / (2 * n) * 1e6, 1)} if done == n else {}


def host_calibration(wakeups: int = 20000) -> dict:
    """What a wake-up costs on this machine, beside its CPU model and kernel: the instrument's
    cost is mostly wake-ups, so the figures of benches run on different machines compare only
    through these (docs/emulation.md, "The machine"). About 2.5 s."""
    from latency_divide.trial.meta import cpu_model
    cal = {"cpu_model": cpu_model(), "kernel": os.uname().release, "cpus": os.cpu_count()}
    timer = _in_child(_timer_wakeups, wakeups, 100e-6) or {}
    cal["timer_wake_cpu_us"], cal["timer_policy"] = timer.get("cpu_us"), timer.get("policy")
    cal["same_core_wake_us"] = (_in_child(_pingpong, wakeups // 4, True) or {}).get("wall_us")
    cal["cross_core_wake_us"] = (_in_child(_pingpong, wakeups // 4, False) or {}).get("wall_us")
    return cal


def calibration_line(cal: dict) -> str:
    """:func:`host_calibration` in one line, for a bench's header."""
    def us(x):
        return "n/a" if x is None else f"{x:.1f} µs"
    return (f"host: {cal['cpu_model'] or 'CPU model unknown'}, kernel {cal['kernel']}; "
            f"a timer wake-up {us(cal['timer_wake_cpu_us'])} of CPU "
            f"({cal['timer_policy']}), a wake-up on the same core {us(cal['same_core_wake_us'])} "
            f"and across cores {us(cal['cross_core_wake_us'])} of wall time{_poll(cal)}")


def _poll(cal: dict) -> str:
    """The guest halt polling in force (testbed.haltpoll), where the caller recorded it."""
    if "halt_poll_ns" not in cal:
        return ""
    if cal["halt_poll_ns"] is None:
        return "; no guest halt polling governor"
    return (f"; guest halt polling {cal['halt_poll_ns']} ns "
            f"(the host's own {cal['host_halt_poll_ns']})")
