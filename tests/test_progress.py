"""Progress lines of a sweep (ops.progress): trial k of N, what is done and running, ETA."""

import json
import os
import time

from latency_divide.ops.progress import mark_run_start, progress


def test_trials_starting_together_get_numbers_of_their_own(tmp_path):
    metas = [tmp_path / f"t{i}" / "meta.json" for i in range(10)]
    start = tmp_path / "run-start.json"
    mark_run_start(start)
    t0 = time.time()
    for m in metas[:4]:  # 4 trials done in this run, 100 s after its start
        m.parent.mkdir()
        m.write_text("{}")
        os.utime(m, (t0 + 100, t0 + 100))
    # three trials start at once: 0, 1 and 2 others already running
    got = [progress(metas, start, 60.0, parallel=r + 1, running=r, now=t0 + 100)
           for r in range(3)]
    assert [p.k for p in got] == [5, 6, 7]
    assert all(p.done == 4 and p.n == 10 for p in got)
    # the ETA is the observed rate: 4 trials in 100 s, 6 left -> 150 s
    assert abs(got[0].eta_s - 150) < 2
    line = got[2].line("def-x/1/uplink/cubic/rep1")
    assert line.startswith("[latency-divide] trial 7 of 10 (def-x/1/uplink/cubic/rep1); 4 done, "
                           "2 running; elapsed 00:01:4")
    assert "ETA 00:02:3" in line
    # k never passes N, and the first line of a run has no rate yet: the nominal length
    assert progress(metas, start, 60.0, parallel=10, running=9, now=t0 + 100).k == 10
    first = progress(metas[4:], start, 60.0, parallel=2, running=1, now=t0 + 1)
    assert first.done == 0 and first.eta_s == 6 * 60.0 / 2


def test_published_trials_in_packs_count_as_done(tmp_path):
    # a run continued after `dvc pull` (the population companions): the trials published in
    # packs have no meta.json of their own; counted as missing, "trial 2 of 2304" and an ETA of
    # 43 h greeted a run with 588 trials left
    import shutil

    from test_packs import _loose

    from latency_divide.trial import packbuild, packs

    loose = _loose(tmp_path)
    packbuild.build(loose[0].parents[3], loose[:2])
    for d in loose[:2]:
        shutil.rmtree(d)
    metas = [d / "meta.json" for d in loose] + [loose[0].parent / "rep9" / "meta.json"]
    p = progress(metas, None, 60.0)
    assert (p.done, p.n, p.k) == (3, 4, 4)
    assert p.eta_s == 60.0  # one trial left


def test_the_run_summary_names_retries_alone_failures_steal_host_and_floor(tmp_path):
    from latency_divide.ops.progress import health_report, mark_run_start

    start = tmp_path / "run-start.json"
    mark_run_start(start)
    t0 = json.loads(start.read_text())["started_unix"]

    def meta(name, verdict, attempt=1, alone=False, steal=0.0, cpu=30.0):
        d = tmp_path / name
        d.mkdir()
        m = {"attempt": attempt, "cpu_s": {"sender": cpu / 2, "receiver": cpu / 2, "ping": None},
             **({"alone": True} if alone else {}),
             "health": {"verdict": verdict, "steal_pct": steal,
                        "reasons": [] if verdict == "pass" else
                        ["delayline_late_p99_us = 9000 > 6000 (lateness)"]}}
        (d / "meta.json").write_text(json.dumps(m))
        return d / "meta.json"

    metas = [meta("a", "pass"), meta("b", "pass", attempt=2), meta("c", "fail", attempt=4,
                                                                  alone=True, steal=2.4)]
    lines = health_report(metas, start, now=t0 + 180.0, cpu_count=2,
                          host={"path": "results/host/vm-1234abcd.json", "cost_factor": 1.8})
    assert "3 trials measured in this run: 2 passed (2 of them measured more than once, 1 of " \
        "those alone at the end), 1 kept with a failed verdict" in lines[0]
    assert "results/host/vm-1234abcd.json (cost factor 1.8)" in lines[1]
    # 90 CPU s over 2 cores: a floor of 45 s against 180 s of wall time
    assert "wall time 00:03:00 against the host's floor 00:00:45" in lines[2]
    assert lines[2].endswith("4.00 x")
    assert "the hypervisor took 2.4 % of the CPU meanwhile" in lines[3]
    assert len(lines) == 4


def test_the_run_summary_gives_the_host_busy_floor_of_the_cpu_it_burned(tmp_path):
    """At a run's real end the summary adds what this host's CPUs did since the run's start
    (/proc/stat, steal left out) and the wall time against that busy floor: a run that burned
    two seconds of CPU in this process reads most of them."""
    from latency_divide.ops.progress import health_report, mark_run_start

    start = tmp_path / "run-start.json"
    mark_run_start(start)
    assert "host_busy_cpu_s" in json.loads(start.read_text())
    # 2 s of CPU: /proc/stat counts in clock ticks and leaves steal out, so the host's count
    # of a busy second can fall a little short of it (CI 2026-12-06: 0.98 s, the 0.5 s below
    # then 51 % of it)
    t = time.process_time()
    while time.process_time() - t < 2.0:
        pass
    d = tmp_path / "a"
    d.mkdir()
    (d / "meta.json").write_text(json.dumps({"attempt": 1, "cpu_s": {"sender": 0.5},
                                             "health": {"verdict": "pass", "reasons": []}}))
    lines = health_report([d / "meta.json"], start, cpu_count=2, host={"path": "h.json"})
    busy = [ln for ln in lines if "this host was busy" in ln]
    assert len(busy) == 1, lines
    cpu_s = float(busy[0].split("busy ")[1].split(" CPU s")[0])
    assert cpu_s >= 1.5, busy[0]
    assert "wall time against the busy floor" in busy[0]
    # the trials' 0.5 CPU s are at most half of what the host did
    share = float(busy[0].split("the trials' CPU ")[1].split(" %")[0])
    assert 0 < share <= 50, busy[0]
