"""Trials as Slurm jobs (profiles/slurm, docs/cluster.md): what a trial asks Slurm for, and the
check a trial job makes of its node before it starts.

**Packing.** A trial uses a small share of a core (ops.admission), so one trial per allocated
CPU would leave a node mostly idle. Each node has a count-only generic resource ``hostload``:
its trial budget in thousandths of *one core* (``Gres=hostload:N`` in slurm.conf, the same
``Count=N`` in gres.conf; a node's own number, since nodes differ in cores: 900 per core keeps
the local default of 90 %). Each trial job asks ``--gres=hostload:<millicores>``, its expected
cores by the admission model (the same model and constants the local executor admits by, not
divided by the submitting host's cores), so Slurm runs on a node only the trials that fit its
budget. CPUs must then be shared: the trials' partition needs ``OverSubscribe=FORCE:<k>`` (or
``SelectTypeParameters=CR_Memory``), else Slurm's one-CPU-per-job floor caps a node first.

**The node's check** (:func:`check_node`), before a trial job under Slurm measures anything:
root, network namespaces allowed, the programs and the traffic tool the testbed check finds,
and the tool's sha256 against the one the submitting host exported (``LATENCY_DIVIDE_TOOL_SHA256``,
set by the workflow's ``onstart`` under Slurm, rules/trials.smk) or, without it, the one the definition's
completed trials recorded. A failure names the node and the Slurm job. Then the node's host
check (ops.hostcheck.node_host_check: measured once per boot, its record named in the findings).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
from pathlib import Path

from latency_divide.errors import EnvironmentError_, LatencyDivideError
from latency_divide.ops import admission
from latency_divide.trial.layout import META

#: The generic resource a trial job asks for (docs/cluster.md: each node's budget).
GRES = "hostload"
#: The tool sha256 the submitting host exports to its jobs (Slurm's --export=ALL).
TOOL_SHA256_ENV = "LATENCY_DIVIDE_TOOL_SHA256"


def trial_millicores(plan, direction: str, window_bytes: int | None, tool: str = "tquic-perf",
                     testbed: str = "local", busy_s: float = 65.0,
                     app: float | None = None) -> int:
    """A trial's expected cores in thousandths of one core: admission's model (mean cores,
    or real-time cores with their headroom where those are more), not scaled to a host;
    ``app``: the most its application carries (admission.app_mbit)."""
    rate = plan.shaper(direction).rate_kbit
    cores = admission.trial_cores(rate, plan.rtt_ms, window_bytes, tool, testbed, busy_s, app=app)
    rt = admission.rt_cores(rate, plan.rtt_ms, window_bytes, tool, testbed, app=app)
    return max(1, math.ceil(1000 * max(cores, admission.RT_HEADROOM * rt)))


def gres(millicores: int) -> str:
    """The ``gres`` resource of a trial job (the Slurm executor turns it into ``--gres``)."""
    if isinstance(millicores, bool) or not isinstance(millicores, int) or millicores < 1:
        raise ValueError(f"hostload request {millicores!r}: a positive integer of millicores")
    return f"{GRES}:{millicores}"


def trial_gres(cfg, household: int, direction: str, variant: str) -> str:
    """The ``gres`` resource of one trial of a loaded config (rules/trials.smk)."""
    try:
        tool = cfg.tool_for(cfg.variant(variant))
    except (KeyError, ValueError):
        return gres(1)  # not this config's variant: the job refuses it at once (ops.workflow)
    plan = _plan(cfg, household)
    return gres(trial_millicores(plan, direction, tool.window_bytes, tool.name, cfg.testbed.kind,
                                 busy_s=cfg.trial.idle_s + cfg.trial.duration_s,
                                 app=admission.app_mbit(tool.args)))


_PLANS: dict = {}


def _plan(cfg, household: int):
    from latency_divide.data.households import get_household
    from latency_divide.links.plan import make_linkplan

    key = (household, cfg.qfactor)
    if key not in _PLANS:
        _PLANS[key] = make_linkplan(get_household(household, cfg.buckets), qfactor=cfg.qfactor)
    return _PLANS[key]


def under_slurm() -> bool:
    return bool(os.environ.get("SLURM_JOB_ID"))


def node_name() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def export_tool_sha256(binary: Path) -> str | None:
    """On the submitting host: put the tool's sha256 into the environment its jobs inherit;
    returns it (None when the tool is not built here: the jobs compare with recorded trials)."""
    from latency_divide.fsio import sha256_file

    if os.environ.get(TOOL_SHA256_ENV):
        return os.environ[TOOL_SHA256_ENV]
    if not Path(binary).is_file():
        return None
    os.environ[TOOL_SHA256_ENV] = sha256_file(binary)
    return os.environ[TOOL_SHA256_ENV]


def recorded_sha256(def_dir: Path) -> tuple[str, Path] | None:
    """The tool sha256 a completed trial of this definition recorded, and its meta.json."""
    if not def_dir.is_dir():
        return None
    for meta in def_dir.glob(f"*/*/*/rep*/{META}"):
        try:
            sha = json.loads(meta.read_text())["tool"]["sha256"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if sha:
            return sha, meta
    return None


def namespaces_allowed() -> str | None:
    """None if this node lets us create a network namespace, else why not."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return "`unshare` (util-linux) is missing"
    p = subprocess.run([unshare, "--net", "true"], capture_output=True, text=True, timeout=30)
    return None if p.returncode == 0 else f"a network namespace is refused: {p.stderr.strip()}"


def check_node(spec, testbed, raw_root: Path) -> dict:
    """Under Slurm, before anything starts: can this node run ``spec``? Returns the testbed
    check's findings; raises EnvironmentError_ naming the node and every problem found."""
    problems: list[str] = []
    found: dict = {}
    if os.geteuid() != 0:
        problems.append(f"not root (uid {os.geteuid()}): trials need root for namespaces and tc")
    else:
        why = namespaces_allowed()
        if why:
            problems.append(why)
    try:
        found = testbed.check(spec)
    except LatencyDivideError as e:
        problems.append(str(e))
    sha = found.get("binary_sha256")
    if sha:
        want = os.environ.get(TOOL_SHA256_ENV)
        source = f"the submitting host's ({TOOL_SHA256_ENV})"
        if not want:
            rec = recorded_sha256(Path(raw_root) / spec.definition_id(testbed.kind))
            if rec:
                want, source = rec[0], f"the one recorded in {rec[1]}"
        if want and want != sha:
            problems.append(f"traffic tool {found.get('binary')} has sha256 {sha}, not {want}, "
                            f"{source}: put the same build on every node")
    if not problems:  # the node's host check, once per boot (ops.hostcheck), named
        from latency_divide.ops.hostcheck import node_host_check

        found["host_record"] = node_host_check()
    if problems:
        job = os.environ.get("SLURM_JOB_ID", "?")
        raise EnvironmentError_(f"node {node_name()} (Slurm job {job}) cannot run trial "
                                f"{spec.trial_id}: " + "; ".join(problems))
    return found


def min_job_age(env: dict | None = None) -> int | None:
    """slurmctld's MinJobAge (s), from ``scontrol show config``; None if unknown."""
    try:
        p = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True,
                           timeout=30, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in p.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "MinJobAge":
            digits = value.strip().split()[0] if value.strip() else ""
            return int(digits) if digits.isdigit() else None
    return None


def status_check_problem(status_command: str | None, init_s: int | None,
                         env: dict | None = None) -> str | None:
    """Why the Slurm executor's job status check would never see a job end here, or None.
    The plugin uses sacct unless told squeue, and falls back from squeue to sacct when
    MinJobAge < 3 x its first status delay; without accounting sacct answers nothing and the
    plugin waits forever, silently."""
    cmd = status_command or ("sacct" if shutil.which("sacct") else "squeue")
    init = init_s or 40
    age = min_job_age(env)
    if cmd == "squeue" and (age is None or age < 3 * init) and shutil.which("sacct"):
        cmd = "sacct"
    if cmd != "sacct":
        return None
    try:
        p = subprocess.run(["sacct", "-X", "-n", "-S", "now"], capture_output=True, text=True,
                           timeout=60, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        why = str(e)
    else:
        if p.returncode == 0:
            return None
        why = (p.stderr or p.stdout).strip()
    return (f"the Slurm executor would check job status with sacct (status command "
            f"{status_command!r}, MinJobAge {age}, first check after {init} s), and sacct "
            f"fails here ({why}): the run would wait forever. Use slurm-status-command: squeue "
            f"(profiles/slurm) with MinJobAge >= {3 * init} in slurm.conf, or run slurmdbd "
            "(docs/cluster.md)")


def slurm_preflight(workflow, tool_binary: Path) -> None:
    """Snakemake's onstart (rules/trials.smk): under the Slurm executor, refuse to start a run
    whose job status check cannot work (status_check_problem), instead of hanging, and export
    the tool's sha256 to the jobs (their node check compares it)."""
    plugin = getattr(workflow, "executor_plugin", None)
    if plugin is None or getattr(plugin, "name", None) != "slurm":
        return
    export_tool_sha256(tool_binary)
    settings = getattr(workflow, "executor_settings", None)
    problem = status_check_problem(getattr(settings, "status_command", None),
                                   getattr(settings, "init_seconds_before_status_checks", None))
    if problem:
        raise EnvironmentError_(problem)


