"""What a trial job costs before its trial starts: under `snakemake --cores N` every trial is a
fresh Python process on a host whose CPUs the other trials keep busy, so the modules a trial
job imports are paid for in wall clock of the whole sweep (issue 6)."""

import subprocess
import sys
import time

from latency_divide.trial.meta import process_started_unix

# what run_trial.py's job imports, before and during the trial
TRIAL_JOB_MODULES = ("latency_divide.ops.workflow", "latency_divide.trial.run",
                     "latency_divide.trial.sweep", "latency_divide.config",
                     "latency_divide.data.households", "latency_divide.ops.progress",
                     "latency_divide.links.plan", "latency_divide.parsers.tool",
                     "latency_divide.trial.rawio", "latency_divide.testbed.netns",
                     "latency_divide.testbed.factory")


def test_a_trial_job_does_not_import_the_analysis_stack():
    # pandas alone is 1.7 s of CPU per job; the trial path must stay on the standard library
    code = ("import sys\n"
            f"for m in {TRIAL_JOB_MODULES!r}:\n"
            "    __import__(m)\n"
            "print(sorted(m for m in ('pandas', 'pyarrow', 'numpy', 'plotnine') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]", f"the trial job imports {out}"


def test_process_start_time_is_read_from_proc():
    before = time.time()
    p = subprocess.Popen(["sleep", "5"])
    try:
        time.sleep(0.3)
        started = process_started_unix(p.pid)
    finally:
        p.kill()
        p.wait()
    assert started is not None
    # /proc gives clock ticks (10 ms) since boot; 0.3 s of sleep rules out "now"
    assert before - 0.05 <= started <= before + 0.15, (before, started)
    assert process_started_unix(2**22 + 1) is None  # above pid_max: no such process


def _meta(root, household, start, *, proc_lead=1.0, setup=0.5, idle=5.0, transfer=60.0,
          tail=1.0, teardown=0.2, write=0.5, concurrency=2):
    from datetime import datetime, timezone
    import json
    import os

    def iso(x):
        return datetime.fromtimestamp(x, timezone.utc).isoformat(timespec="milliseconds") \
            .replace("+00:00", "Z")

    t0 = start + setup + idle
    t1 = t0 + transfer
    end = t1 + tail + teardown
    d = root / "def-0123456789" / str(household) / "downlink" / "cubic" / "rep1"
    d.mkdir(parents=True)
    m = d / "meta.json"
    m.write_text(json.dumps({
        "trial_id": f"{household}/downlink/cubic/rep1", "concurrency": concurrency,
        "host": {"cpu_busy_pct": 50.0},
        "timing": {"started_at": iso(start), "started_unix": start,
                   "process_started_unix": start - proc_lead, "ended_at": iso(end),
                   "setup_s": setup, "teardown_s": teardown, "transfer_started_unix": t0,
                   "transfer_ended_unix": t1}}))
    os.utime(m, (end + write, end + write))


def test_sweep_timing_accounts_for_every_second(tmp_path):
    from latency_divide.ops.sweeptiming import format_report, sweep_timing

    now = time.time() - 3600
    # two slots: trials 1 and 2 start together; 3 starts 4 s after 1 ends (job start 1 s)
    _meta(tmp_path, 1, now + 1.0)
    _meta(tmp_path, 2, now + 1.0, transfer=70.0)
    _meta(tmp_path, 3, now + 1.0 + 67.2 + 4.0 + 1.0)
    s = sweep_timing(tmp_path, slots=2)
    wall = 1.0 + 0.5 + 5.0 + 60.0 + 1.0 + 0.2 + 0.5  # 68.2 s from job start to meta.json
    assert s["trials"] == 3
    assert abs(s["trial_wall_median_s"] - wall) < 1e-3
    ph = s["phase_median_s"]
    assert abs(ph["job_startup_s"] - 1.0) < 1e-3 and abs(ph["pre_transfer_s"] - 5.0) < 1e-3
    assert abs(ph["post_transfer_s"] - 1.0) < 1e-3 and abs(ph["write_s"] - 0.5) < 0.01
    # trial 3's job started 4 s after trial 1's meta.json: the freed slot's wait
    assert abs(s["wait_for_job_start_median_s"] - 4.0) < 0.01
    # job starts at 0, 0, 72.2 s; meta.json written at 68.2, 78.2 and 140.4 s
    assert abs(s["span_s"] - 140.4) < 0.01
    assert abs(s["floor_s"] - (68.2 + 78.2 + 68.2) / 2) < 0.01
    assert abs(s["at_once_s"][2] - (68.2 + 6.0)) < 0.01
    assert abs(s["at_once_s"][1] - (4.0 + 62.2)) < 0.01
    assert abs(s["unused_slot_s"] - (2 * 140.4 - (68.2 + 78.2 + 68.2))) < 0.01
    assert "3 trials, N = 2" in format_report(s)
