"""Where a sweep's wall clock goes, read back from its trials' meta.json.

Every trial records when its job process started (``timing.process_started_unix``), when the
trial itself started and ended, its setup and teardown, the transfer's start and end and the
number of trials running at once. From these:

* per trial: job start-up (process start to trial start: Python, imports, checks), setup
  (namespaces, qdiscs, delay line), pre-transfer (sender start-up and the idle baseline),
  transfer, post-transfer (tail, stopping the monitors, qdisc dump), teardown, and the time
  from the end of the trial to its meta.json on disk (log compression, hashes);
* per sweep: the span from the first job start to the last trial end, the floor (the sum
  of the trials' walls divided by the slots), the slot time no trial used (between one
  trial's end and the next job's start: the scheduler, Snakemake's bookkeeping), and how
  long each number of trials ran at once.

Standard library only (and the raw layout, trial.layout): ``bench/bench_sweep_timing.py``
prints it for any raw directory.
"""

from __future__ import annotations

import statistics
from bisect import bisect_right
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from latency_divide.trial import rawio
from latency_divide.trial.layout import ID_PREFIX, META

#: per-trial phases, in order, with what they contain
PHASES = (
    ("job_startup_s", "job start-up (Python process, imports, checks)"),
    ("setup_s", "topology setup (namespaces, qdiscs, delay line)"),
    ("pre_transfer_s", "sender start-up + idle baseline"),
    ("transfer_s", "transfer"),
    ("post_transfer_s", "tail, monitors stopped, qdisc dump"),
    ("teardown_s", "topology teardown"),
    ("write_s", "log compression, hashes, meta.json"),
)


def _unix(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


@dataclass
class TrialTiming:
    trial: str
    job_start: float      # the job process's start (or the trial's, for older metadata)
    end: float            # meta.json written (or the trial's end, if its mtime is unusable)
    phases: dict          # name -> seconds (None where the metadata lacks it)
    concurrency: int | None
    cpu_busy_pct: float | None


def trial_timing(meta_path: Path) -> TrialTiming:
    meta = rawio.full_meta(Path(meta_path).parent)  # the host record is in the archive (format 4)
    t = meta["timing"]
    started = t.get("started_unix") or _unix(t["started_at"])
    ended = _unix(t["ended_at"])
    proc = t.get("process_started_unix")
    setup, teardown = t["setup_s"], t["teardown_s"]
    t0, t1 = t["transfer_started_unix"], t["transfer_ended_unix"]
    # meta.json is written right after the trial; a much later mtime means the file was
    # copied or pulled (DVC keeps no mtimes), so it says nothing about this run
    written = Path(meta_path).stat().st_mtime
    write_s = written - ended if 0 <= written - ended < 30 else None
    phases = {
        "job_startup_s": started - proc if proc else None,
        "setup_s": setup,
        "pre_transfer_s": t0 - started - setup,
        "transfer_s": t1 - t0,
        "post_transfer_s": ended - t1 - teardown,
        "teardown_s": teardown,
        "write_s": write_s,
    }
    return TrialTiming(trial=str(meta.get("trial_id")), job_start=proc or started,
                       end=written if write_s is not None else ended, phases=phases,
                       concurrency=meta.get("concurrency"),
                       cpu_busy_pct=(meta.get("host") or {}).get("cpu_busy_pct"))


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def sweep_timing(raw_root: Path, slots: int | None = None) -> dict:
    """The timing summary of every trial under ``raw_root`` (its def-*/*/*/*/rep*/meta.json).
    ``slots`` is the N of ``--cores N``; by default the most trials seen running at once."""
    metas = sorted(Path(raw_root).glob(f"{ID_PREFIX}*/*/*/*/rep*/{META}"))
    if not metas:
        raise FileNotFoundError(f"no trial {META} under {raw_root}")
    trials = [trial_timing(m) for m in metas]
    starts = sorted(tt.job_start for tt in trials)
    ends = sorted(tt.end for tt in trials)
    first, last = starts[0], ends[-1]
    span = last - first
    # how long k trials ran at once: sweep the start/end events in time order
    events = sorted([(tt.job_start, 1) for tt in trials] + [(tt.end, -1) for tt in trials])
    at_once: dict[int, float] = {}
    running, prev = 0, first
    for when, step in events:
        at_once[running] = at_once.get(running, 0.0) + (when - prev)
        running += step
        prev = when
    seen_max = max(k for k, v in at_once.items() if v > 0)
    n = slots or seen_max
    busy = sum(tt.end - tt.job_start for tt in trials)
    # the wait of each job that started once a slot had freed: time since the latest end
    waits = []
    for s in starts[n:]:
        i = bisect_right(ends, s) - 1
        if i >= 0:
            waits.append(s - ends[i])
    per_trial = {name: _median(tt.phases[name] for tt in trials) for name, _ in PHASES}
    return {
        "trials": len(trials),
        "slots": n,
        "span_s": span,
        "trial_wall_median_s": _median(tt.end - tt.job_start for tt in trials),
        "floor_s": busy / n,
        "unused_slot_s": n * span - busy,
        "wait_for_job_start_median_s": _median(waits),
        "wait_for_job_start_p90_s": (sorted(waits)[int(0.9 * (len(waits) - 1))]
                                     if waits else None),
        "phase_median_s": per_trial,
        "phase_total_slot_s": {name: sum(tt.phases[name] or 0.0 for tt in trials)
                               for name, _ in PHASES},
        "at_once_s": {k: at_once[k] for k in sorted(at_once)},
        "cpu_busy_pct_median": _median(tt.cpu_busy_pct for tt in trials),
        "concurrency_median": _median(tt.concurrency for tt in trials),
    }


def format_report(s: dict) -> str:
    def mins(x):
        return f"{x / 60:.1f} min"

    n = s["slots"]
    lines = [
        f"{s['trials']} trials, N = {n} at once: {mins(s['span_s'])} from the first job start "
        f"to the last trial end",
        f"  floor (sum of job walls / N): {mins(s['floor_s'])}; trial job wall median "
        f"{s['trial_wall_median_s']:.1f} s",
        f"  slot time unused: {s['unused_slot_s'] / n / 60:.1f} min per slot (a freed slot "
        f"waited a median {_fmt(s['wait_for_job_start_median_s'])} s, p90 "
        f"{_fmt(s['wait_for_job_start_p90_s'])} s, for its next job; the run's start and its "
        f"last trials, when fewer than N remain, count here too)",
        "  per trial (median s, and share of all trial time):",
    ]
    total = sum(s["phase_total_slot_s"].values()) or 1.0
    for name, what in PHASES:
        med = s["phase_median_s"][name]
        share = 100.0 * s["phase_total_slot_s"][name] / total
        lines.append(f"    {what:46s} {_fmt(med):>7s} s  {share:5.1f} %")
    lines.append("  time with k trials running: " + ", ".join(
        f"{k}: {v / 60:.1f} min" for k, v in s["at_once_s"].items() if v >= 0.5))
    lines.append(f"  host CPU busy during trials (median): {_fmt(s['cpu_busy_pct_median'])} %; "
                 f"recorded concurrency median {_fmt(s['concurrency_median'])}")
    return "\n".join(lines)


def _fmt(x) -> str:
    if x is None:
        return "n/a"
    return f"{x:.2f}" if abs(x) < 10 else f"{x:.1f}"
