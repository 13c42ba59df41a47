"""Progress of a sweep across Snakemake jobs: trial k of N, elapsed, ETA.

Each trial job is its own process, so progress is derived from the disk: the number of
complete trial directories (their meta.json) among the expected ones, and the run's start
time (written by the workflow's ``onstart`` handler). The ETA divides the remaining trials by
the rate observed in this run (or, before the first trial of the run ends, by an estimate
from the trial's nominal length), times the number of trials that run at once.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from latency_divide.fsio import write_json_atomic
from latency_divide.trial import packs


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "--:--:--"
    s = max(0, int(round(seconds)))
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def mark_run_start(path: Path) -> None:
    """The run's start, and this host's CPU counters then (for the summary's busy floor)."""
    write_json_atomic(path, {"started_unix": time.time(), **(_host_cpu() or {})})


def _host_cpu() -> dict | None:
    """This host's busy and stolen CPU seconds since boot, all cores (/proc/stat)."""
    from latency_divide.trial.meta import cpu_times, steal_times

    busy, steal = cpu_times(), steal_times()
    if busy is None or steal is None:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    return {"host_busy_cpu_s": busy[0] / tick, "host_steal_cpu_s": steal[0] / tick}


def run_start(path: Path) -> float | None:
    try:
        return float(_read_json(path)["started_unix"])
    except (KeyError, TypeError, ValueError):
        return None


@dataclass
class Progress:
    k: int            # this trial's number (done + running + 1)
    n: int            # all trials of the sweep
    done_this_run: int
    elapsed_s: float | None
    eta_s: float | None
    done: int = 0     # trials complete on disk
    running: int = 0  # trials running beside this one

    def line(self, what: str) -> str:
        running = f", {self.running} running" if self.running else ""
        return (f"[latency-divide] trial {self.k} of {self.n} ({what}); {self.done} done"
                f"{running}; elapsed {fmt_duration(self.elapsed_s)}, ETA "
                f"{fmt_duration(self.eta_s)}")


def progress(expected_metas: list[str | Path], start_file: Path | None, per_trial_s: float,
             parallel: int = 1, now: float | None = None, running: int = 0) -> Progress:
    """Progress of the trial starting now; ``running``: trials running beside it, as far as
    their topologies are up (ops.workflow counts them), so that a trial starting while others
    run is numbered after them. Trials that start in the same instant can still share a
    number, and one whose topology is still coming down after its meta.json is counted twice:
    k is approximate, done and the ETA are not."""
    now = time.time() if now is None else now
    start = run_start(start_file) if start_file else None
    done = 0
    done_this_run = 0
    packed: dict[str, dict] = {}  # definition directory -> its packed trials, read once
    for m in expected_metas:
        m = os.fspath(m)
        try:
            st = os.stat(m)
        except FileNotFoundError:
            # a published trial in its definition's pack has no meta.json of its own: it is
            # complete (and the workflow never measures it), measured by an earlier run
            trial_dir = Path(m).parent
            if len(trial_dir.parts) >= 5:
                def_dir = trial_dir.parents[3]
                key = os.fspath(def_dir)
                if key not in packed:
                    packed[key] = packs.trials_in(def_dir)
                done += packs.trial_key(trial_dir) in packed[key]
            continue
        done += 1
        if start is not None and st.st_mtime >= start:
            done_this_run += 1
    n = len(expected_metas)
    remaining = max(0, n - done)
    elapsed = (now - start) if start is not None else None
    if elapsed and done_this_run:
        rate = done_this_run / elapsed           # trials per second, observed
        eta = remaining / rate
    else:
        eta = remaining * per_trial_s / max(1, parallel)
    return Progress(min(done + running + 1, n), n, done_this_run, elapsed, eta, done, running)


def health_report(metas: list[str | Path], start_file: Path | None = None,
                  now: float | None = None, cpu_count: int | None = None,
                  host: dict | None = None) -> list[str]:
    """The end of a run (rules/trials.smk ``onsuccess``), in one summary: the trials measured
    in this run (meta.json ``health``, trial.health), how many passed, how many were measured
    again and how many of those alone, the host record they ran on (docs/host.md) and the wall
    time against the host's floor (the trials' CPU seconds, meta.json ``cpu_s``, divided by
    the cores) and, at the run's real end (``now`` None), against the busy floor (what this
    host's CPUs did over the run, :func:`_busy_line`); then a WARNING line per trial kept with
    a failed verdict, with its reasons and
    the hypervisor's steal when it took the CPU (the analysis lists those in
    exclusions.parquet)."""
    start = run_start(start_file) if start_file else None
    at_start = _read_json(start_file) if start_file else {}
    n = again = alone = 0
    cpu = 0.0
    failed = []
    for m in metas:
        p = Path(m)
        try:
            if start is not None and p.stat().st_mtime < start:
                continue  # measured by an earlier run (or pulled)
            meta = json.loads(p.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            continue
        h = meta.get("health") or {}
        if not h:
            continue
        n += 1
        again += int(meta.get("attempt", 1)) > 1
        alone += bool(meta.get("alone"))
        cpu += sum(v for v in (meta.get("cpu_s") or {}).values() if isinstance(v, (int, float)))
        if h.get("verdict") == "fail":
            steal = h.get("steal_pct")
            took = (f"; the hypervisor took {steal:g} % of the CPU meanwhile"
                    if steal is not None and steal >= STEAL_NAMED_PCT else "")
            failed.append(f"[latency-divide] WARNING: {p.parent}: emulation health failed: "
                          + "; ".join(h.get("reasons", [])) + took)
    if not n:
        return []
    lines = [f"[latency-divide] emulation health of the {n} trials measured in this run: "
             f"{n - len(failed)} passed ({again} of them measured more than once, {alone} of "
             f"those alone at the end), {len(failed)} kept with a failed verdict and left out "
             "of the tables"]
    if host is None:
        from latency_divide.testbed.hostlearn import summary
        from latency_divide.testbed.hostrecord import meta_ref

        # this boot's record of this host, as the trials' setup.json name it, and its trial log
        host = {**meta_ref(), "learned": summary()}
    lines.append("[latency-divide] host: " + (
        f"{host['path']} (cost factor {host.get('cost_factor', '?')})" if host.get("path")
        else f"no host record (docs/host.md): {host.get('why', '?')}") + _learned(host))
    if start is not None:
        wall = (now or time.time()) - start
        floor = cpu / (cpu_count or os.cpu_count() or 1)
        ratio = f"{wall / floor:.2f} x" if floor > 0 else "n/a"
        lines.append(f"[latency-divide] wall time {fmt_duration(wall)} against the host's floor "
                     f"{fmt_duration(floor)} (the trials' {cpu:.0f} CPU s over "
                     f"{cpu_count or os.cpu_count() or 1} cores): {ratio}")
        busy = _busy_line(at_start, wall, cpu, cpu_count or os.cpu_count() or 1) \
            if now is None else None
        if busy:
            lines.append(busy)
    return lines + failed


def _learned(host: dict) -> str:
    """What the admission learned from this boot's trials (testbed.hostlearn), for the summary."""
    got = host.get("learned")
    if not got:
        return ""
    if got.get("mean") is not None:
        return (f"; the admission's factors, learned from this boot's {got['trials']} trials "
                f"({got['log']}): whole trial {got['mean']:.2f}, real-time parts {got['rt']:.2f}")
    return (f"; {got['trials']} trials in this boot's trial log ({got['log']}): the admission "
            f"learns from {got['min_trials']}" + ("" if got.get("enabled", True) else
                                                  ", learning off"))


def _read_json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (FileNotFoundError, ValueError):
        return {}


def _busy_line(at_start: dict, wall: float, trials_cpu: float, cores: int) -> str | None:
    """What this host's CPUs did over the run (steal left out): the busy CPU seconds, the
    trials' share of them (``cpu_s`` leaves out the kernel's per-packet work, Snakemake and the
    jobs' start-ups) and the wall time against the busy floor, the busy seconds over the cores
    (docs/host.md, "A sweep on a quiet and on a noisy host"). None without the counters (a start file of an older run)."""
    now = _host_cpu()
    if not now or "host_busy_cpu_s" not in at_start or wall <= 0:
        return None
    busy = (now["host_busy_cpu_s"] - at_start["host_busy_cpu_s"]) - (
        now["host_steal_cpu_s"] - at_start.get("host_steal_cpu_s", 0.0))
    if busy <= 0:
        return None
    floor = busy / cores
    return (f"[latency-divide] this host was busy {busy:.0f} CPU s over the run "
            f"({100 * floor / wall:.1f} % of its {cores} cores, steal left out), the trials' "
            f"CPU {100 * trials_cpu / busy:.0f} % of it: wall time against the busy floor "
            f"{fmt_duration(floor)}: {wall / floor:.2f} x")


#: A failed trial's summary line names the hypervisor's steal from this share of the CPU on.
STEAL_NAMED_PCT = 0.5
