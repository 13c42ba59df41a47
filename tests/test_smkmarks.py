"""`latency-divide clean` removes Snakemake's stale "incomplete" marks of complete trials
(ops.smkmarks): a real Snakemake is killed while a trial runs, the trial finishes on its own,
and the next run would stop on the mark until `clean` removes it."""

import os
import re
import signal
import subprocess
import time
from base64 import urlsafe_b64encode

import pytest
from conftest import VENV_BIN
from test_trial_netns import _kill_tree, _run_until_second_trial

from latency_divide.ops.smkmarks import clear_trial_marks


def test_marks_of_other_outputs_and_of_missing_trials_are_kept(tmp_path):
    inc = tmp_path / ".snakemake" / "incomplete"
    inc.mkdir(parents=True)
    done = tmp_path / "results/raw/def-0123456789/1290/uplink/cubic/rep1/meta.json"
    done.parent.mkdir(parents=True)
    done.write_text("{}")
    missing = "results/raw/def-0123456789/1290/downlink/cubic/rep1/meta.json"
    cut = "results/raw/def-0123456789/1290/uplink/bbr/rep1/meta.json"  # not JSON: kept
    (tmp_path / cut).parent.mkdir(parents=True)
    (tmp_path / cut).write_text('{"trial"')
    names = {}
    for out in (str(done.relative_to(tmp_path)), missing, cut, "results/tables/trials.parquet"):
        (tmp_path / out).parent.mkdir(parents=True, exist_ok=True)
        if out.endswith(".parquet"):
            (tmp_path / out).write_text("x")
        names[out] = urlsafe_b64encode(out.encode()).decode()
        (inc / names[out]).write_text("{}")
    # a long path: Snakemake splits its name into "@"-prefixed directory levels
    long_b64 = names[str(done.relative_to(tmp_path))]
    (inc / f"@{long_b64[:20]}").mkdir()
    (inc / f"@{long_b64[:20]}" / long_b64[20:]).write_text("{}")
    (inc / "migration_underway").write_text("")
    (inc / (long_b64[:8] + "!" + long_b64[8:])).write_text("{}")  # not Snakemake's encoding
    got = clear_trial_marks(tmp_path / ".snakemake", tmp_path)
    assert got == [str(done.relative_to(tmp_path))] * 2
    left = sorted(p.name for p in inc.rglob("*") if p.is_file())
    assert left == sorted([names[missing], names[cut], names["results/tables/trials.parquet"],
                           "migration_underway", long_b64[:8] + "!" + long_b64[8:]])
    assert clear_trial_marks(tmp_path / ".snakemake", tmp_path) == []
    assert clear_trial_marks(tmp_path / "nowhere", tmp_path) == []


@pytest.mark.netns
@pytest.mark.slow  # a workflow run of a real trial that outlives Snakemake
def test_clean_clears_the_mark_of_a_trial_finished_after_snakemake_died(tmp_path):
    r = _run_until_second_trial(tmp_path)
    wf, cfg, metas, env, proc, running = r.wf, r.cfg, r.metas, r.env, r.proc, r.second
    try:
        os.kill(proc.pid, signal.SIGKILL)  # Snakemake only: its trial job runs on and ends
        proc.wait()
        deadline = time.monotonic() + 120
        while not running.exists():
            assert time.monotonic() < deadline, "the orphaned trial did not finish"
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            _kill_tree(proc.pid)
            proc.wait()
    # wait for the orphaned job to leave (its namespaces are its own to remove)
    deadline = time.monotonic() + 60
    while (any(list(m.parent.parent.glob(".ld-tmp-*")) for m in metas)
           and time.monotonic() < deadline):
        time.sleep(0.2)
    rel = str(running.relative_to(wf))
    dry = [str(VENV_BIN / "snakemake"), "all", "-n", "--cores", "1", "--configfile", str(cfg)]
    subprocess.run([str(VENV_BIN / "snakemake"), "--unlock", "--cores", "1", "--configfile",
                    str(cfg)], cwd=wf, env=env, check=True, capture_output=True)
    stuck = subprocess.run(dry, cwd=wf, env=env, capture_output=True, text=True)
    assert stuck.returncode != 0 and "incomplete" in (stuck.stdout + stuck.stderr).lower()

    out = subprocess.run([str(VENV_BIN / "latency-divide"), "clean"], cwd=wf, env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"stale 'incomplete' mark of the complete trial {rel}" in out.stdout
    again = subprocess.run([str(VENV_BIN / "latency-divide"), "clean"], cwd=wf, env=env,
                           capture_output=True, text=True)
    assert "mark" not in again.stdout
    # the next run measures no trial: both are complete (the mark was the only obstacle)
    res = subprocess.run(dry, cwd=wf, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert all(m.exists() for m in metas)
    assert re.search(r"^analysis_tables\s+1$", res.stdout, re.M), res.stdout
    assert not re.search(r"^trial\s+\d+$", res.stdout, re.M), res.stdout
