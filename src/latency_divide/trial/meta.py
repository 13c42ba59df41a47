"""What a trial records about its host and its own cost (meta.json): host facts, the start
time of the job's process, CPU busy share and CPU seconds by component, trials running at once
(live topologies), timestamps."""

from __future__ import annotations

import os
import platform
import socket
import time
from datetime import datetime, timezone

from latency_divide.testbed import hostrecord, netns


def live_topologies() -> int:
    d = netns.STATE_DIR
    return len(list(d.glob("*.json"))) if d.is_dir() else 0


def executor_info() -> dict:
    """Who ran this trial (meta.json ``executor``): a Slurm job (its id, array task and node,
    from the job's environment) or this host directly (the local executor, the CLI)."""
    env = os.environ
    if env.get("SLURM_JOB_ID"):
        return {"kind": "slurm", "job_id": env["SLURM_JOB_ID"],
                "array_job_id": env.get("SLURM_ARRAY_JOB_ID"),
                "array_task_id": env.get("SLURM_ARRAY_TASK_ID"),
                "node": env.get("SLURMD_NODENAME") or socket.gethostname(),
                "cluster": env.get("SLURM_CLUSTER_NAME")}
    return {"kind": "local", "node": socket.gethostname()}


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def cpu_model() -> str | None:
    """The CPU's model name as /proc/cpuinfo gives it (x86 ``model name``; other architectures'
    ``Hardware``/``cpu model``/``uarch`` field), or None. A trial's CPU figures are those of
    the machine that measured it: the same instrument cost 1.6 to 1.8 times as much per trial on
    two virtual machines of this project (docs/emulation.md, "The machine")."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() in ("model name", "Hardware", "cpu model", "uarch"):
                    return value.strip() or None
    except OSError:
        pass
    return None


def host_info() -> dict:
    """The host that ran a trial (``host``, kept with the set-up records in setup.json), with
    ``record``: the host check's record of it (path, schema, cost factor:
    testbed.hostrecord.meta_ref, docs/host.md)."""
    return {"kernel": platform.release(), "hostname": socket.gethostname(),
            "cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
            "python": platform.python_version(), "loadavg": list(os.getloadavg()),
            "record": hostrecord.meta_ref()}


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


def steal_times() -> tuple[float, float] | None:
    """(steal, total) jiffies of all CPUs from /proc/stat: what the hypervisor took."""
    try:
        with open("/proc/stat") as f:
            fields = [float(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    return (fields[7] if len(fields) > 7 else 0.0), sum(fields)


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
