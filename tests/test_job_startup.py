"""What a trial job costs before its trial starts: under `snakemake --cores N` every trial is a
fresh Python process on a host whose CPUs the other trials keep busy, so the modules a trial
job imports are paid for in wall clock of the whole sweep (issue 6)."""

import subprocess
import sys
import time

from latency_divide.trial import process_started_unix

# what run_trial.py's job imports, before and during the trial
TRIAL_JOB_MODULES = ("latency_divide.workflow_glue", "latency_divide.trial",
                     "latency_divide.config", "latency_divide.households",
                     "latency_divide.progress", "latency_divide.provenance",
                     "latency_divide.linkplan", "latency_divide.parsers.tool",
                     "latency_divide.rawio", "latency_divide.topology")


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
