"""The host check (`latency-divide host-check`, and the workflow once per boot and host before
the first trial of a run): measure what the instrument's fidelity and cost depend on, keep it in
a host record, and say what it means for the run at hand (docs/host.md).

It runs tools/hostprobe (timer wake-ups' CPU and lateness at the gaps trials use, on each core;
ping-pong wake-ups on one core and across cores; the hypervisor's steal) with guest halt polling
held as trials hold it (testbed.haltpoll), adds the kernel features the testbed uses (netem:
testbed.netns.netem_available, its per-boot probe; threaded NAPI), the real-time share, the CPU
model, kernel, cores, boot id and hostname, and writes ``results/host/<hostname>-<boot8>.json``
(testbed.hostrecord; temp file, then rename), with a copy in the testbed's per-boot state
directory (:func:`boot_cache`) so that another results tree on the host in the same boot (a
test's workflow copy, a second clone) takes it without measuring; a record measured under
`latency-divide stalls` (``under_stalls``: the injector's arguments) stays in its own results
tree, so that a later run without the injector does not take the injected host for this one
(2026-12-02: a run reused a noisy sweep's record). The record is reused for the
same host and boot unless forced; concurrent checks (a Slurm node's first trial jobs) measure
once, under a lock.
What it means (ops.hostfit): the cost factor, the real-time capacity, the fastest link held
alone, about how many trials at once, the sweep's wall time, and the links it cannot hold.

The workflow (rules/trials.smk ``onstart``: :func:`host_check_for_run`) checks only when trial
jobs are about to run on this host: not in a dry run (Snakemake calls no onstart then), not
when every wanted trial is on disk (re-analysis), not with trials forbidden
(ops.workflow.trials_forbidden), not under a cluster executor (each Slurm node checks itself:
ops.slurmnode.check_node). ``LATENCY_DIVIDE_HOST_CHECK``: ``force`` (measure again), ``skip``
(no check), ``go-on`` (report a refusal, run anyway).
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from latency_divide.errors import ConfigError, EnvironmentError_, LatencyDivideError
from latency_divide.fsio import write_json_atomic
from latency_divide.ops import hostfit
from latency_divide.ops.hostcost import factor_source
from latency_divide.paths import built_tool
from latency_divide.testbed import hostrecord as hr

PROBE_DEFAULT_S = 20.0
#: The probe's longest run: with the netem probe and the rest the check stays within 60 s.
PROBE_MAX_S = 50.0
CHECK_ENV, CHECK_CHOICES, check_mode = hr.CHECK_ENV, hr.CHECK_CHOICES, hr.check_mode
#: The links a refusal names in the report (all of them in --json).
REPORT_LINKS = 12
#: The exit status of a refusal (the host cannot hold the config's links even alone).
EXIT_REFUSED = 3
RT_RUNTIME = Path("/proc/sys/kernel/sched_rt_runtime_us")
RT_PERIOD = Path("/proc/sys/kernel/sched_rt_period_us")
#: A kernel with threaded NAPI (5.12+) has this attribute on every net device.
NAPI_THREADED = Path("/sys/class/net/lo/threaded")


def check_seconds(seconds: float) -> float:
    if not 1.0 <= seconds <= PROBE_MAX_S:
        raise ConfigError(f"--seconds {seconds:g}: the probe runs 1 to {PROBE_MAX_S:g} s (the "
                          "whole check at most 60 s)")
    return float(seconds)


def probe_argv(seconds: float, binary: Path | None = None) -> list[str]:
    return [str(binary or built_tool("hostprobe")), "--seconds", f"{seconds:g}", "--json"]


def run_probe(seconds: float, binary: Path | None = None) -> tuple[list[str], dict]:
    """Run tools/hostprobe; (its argv, its checked document)."""
    from latency_divide.testbed.runners import LocalRunner

    argv = probe_argv(check_seconds(seconds), binary)
    if not Path(argv[0]).is_file():
        raise EnvironmentError_(f"{argv[0]} is missing: `make setup` (scripts/setup.sh) builds "
                                "the Rust tools")
    res = LocalRunner().run(argv, check=False, timeout=seconds + 30)
    if res.returncode != 0:
        raise EnvironmentError_(f"{' '.join(argv)} exited {res.returncode}: "
                                f"{(res.stderr or res.stdout).strip()[-500:]}")
    try:
        return argv, hr.check_probe(json.loads(res.stdout))
    except ValueError as e:
        raise EnvironmentError_(f"{' '.join(argv)}: {e}") from None


def rt_share() -> float | None:
    """The kernel's real-time share of each CPU (sched_rt_runtime_us / period; -1: no limit)."""
    try:
        runtime, period = int(RT_RUNTIME.read_text()), int(RT_PERIOD.read_text())
    except (OSError, ValueError):
        return None
    return 1.0 if runtime < 0 else runtime / period


def kernel_features() -> dict:
    """netem (the testbed's per-boot probe; None and why where it cannot ask), threaded NAPI."""
    from latency_divide.testbed import netns

    out: dict = {"threaded_napi": NAPI_THREADED.exists()}
    try:
        out["netem"] = netns.netem_available() if os.geteuid() == 0 else None
        if out["netem"] is None:
            out["netem_why"] = "not root: the netem probe needs a network namespace"
    except (LatencyDivideError, OSError) as e:
        out["netem"], out["netem_why"] = None, str(e)
    return out


def measure(seconds: float = PROBE_DEFAULT_S, binary: Path | None = None) -> dict:
    """Probe this host now: the record (testbed.hostrecord.SCHEMA), not yet written."""
    from latency_divide.testbed.haltpoll import halt_polling, wanted_ns

    t0 = time.monotonic()
    with halt_polling(wanted_ns()) as halt:
        argv, probe = run_probe(seconds, binary)
    probe_s = time.monotonic() - t0
    return record_of(probe, {**kernel_features(), **halt}, argv, probe_s)


def record_of(probe: dict, features: dict, argv: list[str], probe_s: float) -> dict:
    """A host record of this host and boot from a hostprobe document and the features found
    (``features["halt_poll_ns"]``: the halt polling held while it probed, which picks the
    fitted host's number it is compared with)."""
    from latency_divide.trial.meta import cpu_model, utc_now

    hr.check_probe(probe)
    return {"schema": hr.SCHEMA, "hostname": hr.hostname(), "boot_id": hr.boot_id(),
            "measured_at": utc_now(), "measured_unix": time.time(), "probe_s": round(probe_s, 2),
            "kernel": os.uname().release, "cpu_model": cpu_model(), "cores": os.cpu_count(),
            "rt_share": rt_share(), "steal_pct": probe.get("steal_pct"), "features": features,
            "probe_argv": argv, "probe": probe,
            **hr.factor_fields(probe, features.get("halt_poll_ns"))}


@contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def host_record(force: bool = False, seconds: float = PROBE_DEFAULT_S,
                records: Path | None = None, binary: Path | None = None,
                log=None) -> tuple[Path, dict, bool]:
    """This host's record of this boot: (path, record, measured now?). Reused unless ``force``."""
    from latency_divide.testbed.stalls import UNDER_ENV

    path = hr.record_path(records)
    cached = boot_cache() / path.name
    under = os.environ.get(UNDER_ENV)  # measured under `latency-divide stalls`
    with _locked(path):
        cur = None if force else hr.current_record(records)
        if cur is not None:
            return cur[0], cur[1], False
        rec = None if force or under else _cached(cached)
        if rec is not None:  # measured in this boot for another results tree: the same host
            write_json_atomic(path, rec)
            return path, rec, False
        if log:
            log(f"[latency-divide] host check: probing this host for {seconds:g} s "
                f"({' '.join(probe_argv(seconds, binary))})")
        rec = measure(seconds, binary)
        if under:
            rec["under_stalls"] = under
        write_json_atomic(path, rec)
        if not under:  # only the host's own state is this boot's for every results tree
            write_json_atomic(cached, rec)
    return path, rec, True


def boot_cache() -> Path:
    """This boot's copy of the record, for every results tree on this host (the testbed's state
    directory, /run/latency-divide: gone at the next boot)."""
    from latency_divide.testbed.netns import STATE_DIR

    return STATE_DIR / "host"


def _cached(p: Path) -> dict | None:
    try:
        rec = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    ok = (isinstance(rec, dict) and rec.get("schema") == hr.SCHEMA
          and rec.get("boot_id") == hr.boot_id() and rec.get("hostname") == hr.hostname()
          and not rec.get("under_stalls"))
    return rec if ok else None


def report(a: hostfit.Assessment, path: Path, rec: dict, measured: bool,
           n_trials: int) -> list[str]:
    """What the check prints: the host, the prediction, each link it cannot hold."""
    p = rec["probe"]
    late: dict = {}  # the worst CPU's p99 per gap
    for row in p["timer"]:
        late[row["gap_us"]] = max(late.get(row["gap_us"], 0.0), row["late_us"]["p99"])
    feats = rec.get("features", {})
    lines = [
        f"host {rec['hostname']} ({rec.get('cpu_model')}, {rec['cores']} cores, kernel "
        f"{rec['kernel']}), boot {rec['boot_id'][:8]}: record {path} "
        f"({'measured now' if measured else 'measured ' + rec['measured_at'] + ', reused'})",
        f"  timer wake-up {rec['wake_cpu_us']:.1f} µs of CPU (fitted host "
        f"{rec['reference']['wake_cpu_us']:.2f}, {rec['reference']['source']}): cost factor "
        f"{a.factor:.2f}" + (f", real-time {a.rt_factor:.2f}" if a.rt_factor not in
                             (None, a.factor) else "") + f" ({a.factor_source})",
        "  wake-up lateness p99 by gap (worst CPU): " + ", ".join(
            f"{g:g} µs: {v:.0f} µs" for g, v in sorted(late.items())) +
        f"; steal {float(rec.get('steal_pct') or 0):.2f} %",
        f"  netem {feats.get('netem')}, threaded NAPI {feats.get('threaded_napi')}, guest halt "
        f"polling {feats.get('halt_poll_ns')} ns (host's own {feats.get('host_halt_poll_ns')})",
        f"  real-time capacity {a.capacity_cores:.2f} cores; fastest link held alone "
        + (f"about {a.fastest_mbit:.1f} Mbit/s" if a.fastest_mbit >= 0.1 else "none")
        + f" (bound by {a.fastest_why}; by the real-time cores alone "
        f"{a.fastest_by_rt_mbit:.0f} Mbit/s)",
        f"  this config: {n_trials} trials, about {a.at_once} at once under the budget "
        f"host_load={a.budget}; expected wall time of the trials {a.wall_s / 60:.1f} min (their "
        f"CPU over the budget's cores: {a.cpu_floor_s / 60:.1f} min)",
    ]
    if a.refusals:
        lines.append(f"  this host cannot hold {len(a.refusals)} of the config's links even one "
                     "at a time:")
        lines += [f"    household {r.household} {r.direction} {r.rate_kbit / 1000:g} Mbit/s: "
                  f"{r.what}" for r in a.refusals[:REPORT_LINKS]]
        if len(a.refusals) > REPORT_LINKS:
            lines.append(f"    ... and {len(a.refusals) - REPORT_LINKS} more (--json lists "
                         "every one)")
        lines.append("  what to do: " + "; ".join(hostfit.REMEDIES))
    return lines


def check(cfg, force: bool = False, seconds: float = PROBE_DEFAULT_S, records: Path | None = None,
          budget: int | None = None, log=None) -> tuple[hostfit.Assessment, list[str], dict, Path]:
    """The whole check: the record (measured or reused), its assessment of ``cfg``, the lines."""
    path, rec, measured = host_record(force, seconds, records, log=log)
    factor, source = factor_source("mean", records)
    rt_factor = factor_source("rt", records)[0]
    a = hostfit.assess(cfg, rec, factor, source, budget, rec.get("cores"), rt_factor)
    return a, report(a, path, rec, measured, len(a.trials)), rec, path


def host_check_for_run(workflow, cfg, trials_forbidden: bool, log=None) -> None:
    """rules/trials.smk ``onstart``: the check before the first trial job of a run on this host
    (see the module docstring for when it does nothing; ``trials_forbidden``:
    ops.workflow.trials_forbidden()); a refusal stops the run."""
    say = log or (lambda m: print(m, file=sys.stderr, flush=True))
    mode = check_mode()
    if mode == "skip" or trials_forbidden or not workflow.local_exec:
        return
    if cfg.testbed.kind != "local":
        return  # the trials measure on the SSH testbed's nodes, not here
    if not any(j.rule.name == "trial" for j in workflow.dag.needrun_jobs()):
        return  # re-analysis: no trial is measured
    budget = (getattr(workflow, "global_resources", None) or {}).get("host_load")
    budget = getattr(budget, "value", budget)  # Snakemake 9: a Resource
    if not built_tool("hostprobe").is_file():  # a checkout from before tools/hostprobe
        say(f"[latency-divide] WARNING: no host check: {built_tool('hostprobe')} is not built "
            "(`make setup`); trials are admitted at the fitted host's costs")
        return
    a, lines, _, _ = check(cfg, force=mode == "force", budget=budget, log=say)
    for line in lines:
        say(f"[latency-divide] {line}" if not line.startswith("  ") else line)
    if a.refused:
        if mode == "go-on":
            say(f"[latency-divide] WARNING: {CHECK_ENV}=go-on: running anyway; every trial's "
                "health verdict is still judged")
            return
        raise EnvironmentError_("the host check refuses this run before any trial (above); "
                                f"{CHECK_ENV}=go-on runs it anyway")


def node_host_check(log=None) -> dict:
    """A Slurm node's check of itself (ops.slurmnode.check_node): its record of this boot
    (measured once per boot, under the lock), named as meta.json names it."""
    if check_mode() == "skip":
        return {"path": None, "why": f"{CHECK_ENV}=skip"}
    try:
        path, rec, measured = host_record(log=log)
    except LatencyDivideError as e:  # a node that cannot be probed still runs; its trials say why
        return {"path": None, "why": str(e)}
    return {"path": str(path), "schema": rec["schema"], "cost_factor": rec["cost_factor"],
            "measured_now": measured}
