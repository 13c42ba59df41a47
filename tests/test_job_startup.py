"""What a trial job costs before its trial starts: under `snakemake --cores N` every trial is a
fresh Python process on a host whose CPUs the other trials keep busy, so the modules a trial
job imports are paid for in wall clock of the whole sweep (issue 6)."""

import subprocess
import sys
import time

import pytest

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


# ------------------------------------------------------------------------------------------
# A job process: what Snakemake parses in each cluster job (rules/common.smk, JOB_PROCESS)

def _rule_blocks(text: str) -> dict[str, str]:
    """Each `rule NAME:` of a Snakefile's text, with its text up to the next rule."""
    import re

    marks = list(re.finditer(r"^[ \t]*rule (\w+):", text, re.M))
    return {m.group(1): text[m.end():(marks[i + 1].start() if i + 1 < len(marks) else None)]
            for i, m in enumerate(marks)}


@pytest.mark.shared
def test_only_trials_are_cluster_jobs():
    """Under a cluster executor every rule but `trial` runs on the submitting host: a job
    process skips the packs and the companions, which only those rules read. Each is in the
    Snakefile's `localrules` or says `localrule: True`, defined under a condition or not."""
    import re

    from conftest import ROOT

    snakefile = (ROOT / "Snakefile").read_text()
    listed = set(re.findall(r"^    (\w+),$", snakefile.split("\nlocalrules:\n", 1)[1], re.M))
    blocks = {}
    for f in [ROOT / "Snakefile", *sorted((ROOT / "rules").glob("*.smk"))]:
        blocks.update(_rule_blocks(f.read_text()))
    assert {"trial", "trials", "companion_tables", "percentiles", "figures"} <= set(blocks)
    cluster = sorted(r for r, body in blocks.items()
                     if r not in listed and "localrule: True" not in body)
    assert cluster == ["trial"], f"rules that a cluster executor would submit: {cluster}"


@pytest.mark.shared
def test_a_job_process_reads_no_pack_and_no_companion(tmp_path):
    """The Snakemake of a job (`--mode subprocess`, as Slurm's job step starts it; `remote` in
    the job itself) parses the workflow without the packs' indexes or the companions: a pack
    index that cannot be read stops a run's parse, naming it, and not a job's."""
    import os

    from conftest import VENV_BIN
    from netns_util import copy_workflow

    from latency_divide.config import load_config
    from latency_divide.trial.sweep import trial_ids

    wf = copy_workflow(tmp_path / "wf")
    def_id = trial_ids(load_config(str(wf / "config" / "test.yaml")))[0][0]
    bad = wf / "results" / "raw" / def_id / "packs" / "pack-0001.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("not an index")
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}
    smk, cfg = str(VENV_BIN / "snakemake"), str(wf / "config" / "test.yaml")  # absolute: a
    # job process resolves a relative one elsewhere
    run = subprocess.run([smk, "trials", "-n", "--cores", "1", "--configfile", cfg], cwd=wf,
                         env=env, capture_output=True, text=True, timeout=120)
    said = run.stdout + run.stderr
    assert run.returncode != 0 and "pack-0001.json: not a readable index" in said, said[-2000:]
    job = subprocess.run([smk, "-n", "--cores", "1", "--mode", "subprocess", "--target-jobs",
                          "households:", "--configfile", cfg], cwd=wf, env=env,
                         capture_output=True, text=True, timeout=120)
    assert job.returncode == 0, job.stderr[-2000:]
    assert "pack-0001" not in job.stderr + job.stdout
