"""Admission of trials by CPU budget (latency_divide.admission, rules/trials.smk, the
workflow profile and src/snakemake_executor_plugin_ldlocal)."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT
import yaml

from latency_divide.config import load_config
from latency_divide.ops import admission
from latency_divide.data.households import get_household
from latency_divide.links.plan import link_plan, make_linkplan

SNAKEMAKE = Path(sys.executable).parent / "snakemake"


@pytest.fixture(autouse=True)
def fitted_host(monkeypatch):
    """The model as fitted: this host's record (ops.hostcheck), if any, scales nothing here
    (tests/test_hostcheck.py tests the scaling)."""
    monkeypatch.setenv("LATENCY_DIVIDE_HOST_FACTOR", "1")


def test_cost_grows_with_the_rate_and_stops_at_the_window():
    slow = admission.trial_cores(2000, 30.0, None)
    fast = admission.trial_cores(35000, 30.0, None)
    assert admission.RUN_CORES < slow < fast
    # 64 KiB per 30 ms RTT is 17.5 Mbit/s: a 35 Mbit/s link costs what 17.5 Mbit/s does
    assert admission.carried_mbit(35000, 30.0, 65536) == pytest.approx(65536 * 8 / 30 / 1000)
    assert admission.trial_cores(35000, 30.0, 65536) == pytest.approx(
        admission.trial_cores(17476, 30.0, None), rel=1e-3)
    assert admission.trial_cores(35000, 30.0, None, tool="tperf") > fast
    assert admission.trial_cores(35000, 30.0, None, testbed="ssh") == admission.SSH_CORES


def test_tperf_trials_ask_for_its_real_time_cost_even_when_slow():
    """mvfst's tperf wakes its real-time ends far more than tquic-perf at low rates (and its
    qlog costs the sender more): the population run's cheap tperf uplinks failed their health
    checks at the tquic-perf model's 36-47 at once; they ask for enough that about 10 fit.
    The floor does not add to a fast link's cost: which links are beyond the host is as before."""
    slow = link_plan(600, 1000, 30.0)
    tquic = admission.trial_host_load(slow, "uplink", 1 << 24, cpu_count=2)
    tperf = admission.trial_host_load(slow, "uplink", 1 << 24, tool="tperf", cpu_count=2)
    assert 900 // tquic >= 36
    assert 9 <= 900 // tperf <= 11
    assert admission.rt_cores(600, 30.0, None, tool="tperf") == 0.15
    fast = admission.rt_cores(90000, 15.0, None, tool="tperf", generation="v1")
    assert fast == pytest.approx(admission.RT_IDLE_CORES + admission.RT_CORES_PER_MBIT * 1.5 * 90)
    assert admission.beyond_cores(100000, 15.0, None, "tperf", cpu_count=2,
                                  generation="v1") is None
    assert admission.beyond_cores(110000, 15.0, None, "tperf", cpu_count=2,
                                  generation="v1") is not None
    # v2 (the current instrument): tperf's ends as before, the delay line's cost cut
    fast = admission.rt_cores(90000, 15.0, None, tool="tperf")
    assert fast == pytest.approx(admission.V2_RT_IDLE_CORES
                                 + admission.V2_RT_CORES_PER_MBIT * 2.7 * 90)


def test_fast_trials_ask_for_their_real_time_cores_with_headroom():
    """The tool ends and the delay line run under SCHED_FIFO: a fast trial asks for its
    real-time cores (at their tail) times the headroom, which is more than its mean cost."""
    assert admission.rt_cores(35000, 30.0, None, testbed="ssh") == 0.0
    assert admission.rt_cores(2000, 30.0, None) < admission.rt_cores(35000, 30.0, None)
    fast = link_plan(6000, 64925, 10.0)
    rt = admission.rt_cores(64925, fast.rtt_ms, 1 << 20)
    assert admission.RT_HEADROOM * rt > admission.trial_cores(64925, fast.rtt_ms, 1 << 20)
    assert admission.trial_host_load(fast, "downlink", 1 << 20, cpu_count=2) == \
        admission.host_load(admission.RT_HEADROOM * rt, cpu_count=2)
    slow = link_plan(700, 2000, 30.0)  # slow links: mean and real-time cost are close
    mean = admission.trial_cores(700, slow.rtt_ms, 65536)
    rt_slow = admission.RT_HEADROOM * admission.rt_cores(700, slow.rtt_ms, 65536)
    assert abs(mean - rt_slow) < 0.01
    assert admission.trial_host_load(slow, "uplink", 65536, cpu_count=2) == admission.host_load(
        max(mean, rt_slow), cpu_count=2)


def test_the_budget_keeps_the_real_time_work_of_any_mix_under_its_share():
    """Whatever mix the profile's budget admits, the real-time cores the model expects stay
    under budget / RT_HEADROOM: for the fast-links companion's unbound trials, greedily packed
    from the most expensive, and for the paper's sweep."""
    budget = yaml.safe_load((ROOT / "profiles/default/config.yaml").read_text())["resources"]
    budget = budget["host_load"]
    for name in ("fast-links-checked.yaml", "config.yaml"):
        cfg = load_config(ROOT / "config" / name)
        trials = []
        for hid in cfg.household_ids():
            plan = make_linkplan(get_household(hid))
            for d in cfg.directions:
                for v in cfg.variants:
                    w = cfg.tool_for(v).window_bytes
                    rate = plan.shaper(d).rate_kbit
                    trials.append((admission.trial_host_load(plan, d, w, cpu_count=2),
                                   admission.rt_cores(rate, plan.rtt_ms, w)))
        for order in (sorted(trials, reverse=True), sorted(trials)):
            used, rt = 0, 0.0
            for load, cores in order:
                if used + load <= budget:
                    used, rt = used + load, rt + cores
            assert rt * 1000 / 2 <= budget / admission.RT_HEADROOM + 1, (name, rt)


def test_host_load_is_a_share_of_this_host():
    assert admission.host_load(0.1, cpu_count=2) == 50
    assert admission.host_load(0.1, cpu_count=20) == 5
    assert admission.host_load(1e-6, cpu_count=64) == 1  # never 0: every trial counts
    assert admission.host_load(5.0, cpu_count=2) == admission.MAX_REQUEST


def test_the_profile_budget_admits_many_slow_trials_and_few_fast_ones():
    budget = yaml.safe_load((ROOT / "profiles/default/config.yaml").read_text())["resources"]
    budget = budget["host_load"]
    slow = admission.trial_host_load(link_plan(700, 2000, 30.0), "downlink", 65536,
                                     cpu_count=2)
    fast = admission.trial_host_load(link_plan(6000, 64925, 10.0), "downlink", 1 << 20,
                                     cpu_count=2)
    assert budget // slow >= 15, (budget, slow)
    assert 1 <= budget // fast < budget // slow


def _dry_run_trials(cfg: dict, path: Path) -> str:
    """`snakemake -n trials` of the real workflow with config ``cfg`` (written to ``path``):
    its output, where each trial job lists its resources."""
    path.write_text(yaml.safe_dump(cfg))
    out = subprocess.run([str(SNAKEMAKE), "-n", "--cores", "1", "trials", "--configfile",
                          str(path)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout + out.stderr


def test_trial_jobs_ask_for_host_load_and_no_core(tmp_path):
    """A dry run of the real workflow lists each trial job with threads 0 and its host_load
    from the link plan (a configuration whose trials are not on disk: another duration)."""
    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    cfg["trial"]["duration_s"] = 7
    for bucket, hid in zip(cfg["households"]["buckets"], (11406, 12512, 12334, 8268)):
        bucket["ids"] = [hid]
    cfg["companions"] = []
    text = _dry_run_trials(cfg, tmp_path / "config.yaml")
    jobs = re.findall(r"rule trial:.*?wildcards: ([^\n]+)\s+threads: (\d+)\s+resources: ([^\n]+)",
                      text, re.S)
    assert len(jobs) == 32, text[-3000:]
    for wildcards, threads, resources in jobs:
        hid = int(re.search(r"household=(\d+)", wildcards).group(1))
        direction = re.search(r"direction=(\w+)", wildcards).group(1)
        want = admission.trial_host_load(make_linkplan(get_household(hid)), direction, 65536,
                                         busy_s=cfg["trial"]["idle_s"] + 7)
        assert f"host_load={want}" in resources, (wildcards, resources)
        assert threads == "0", wildcards


def _plugin_call(name: str) -> str:
    """Snakefile lines that call snakemake_executor_plugin_ldlocal's ``name``, as ours does."""
    return f"from snakemake_executor_plugin_ldlocal import {name}\n{name}()\n"


#: Shared (tests/conftest.py): these Snakemake runs of `sleep` jobs measure no trial and read
#: neither the host's cost nor its load; they compare the jobs' spans with each other (and
#: the re-evaluation rounds with the run's own wall time), which a busy host stretches alike.
#: Beside the re-analysis in the shared phase they use the other process's slack (about 57 s
#: of the alone phase, 2026-12-07, issue 59).
@pytest.mark.shared
@pytest.mark.slow  # a workflow run of many jobs at once
def test_the_ldlocal_executor_runs_more_jobs_than_cores_plus_five(tmp_path):
    """Snakemake's own local executor runs at most --cores + 5 jobs at once; ours is limited
    by the resource budget only (12 zero-thread jobs of load 100 under a budget of 1200), as
    is the local executor of a Snakefile that widens it as ours does (no `executor` key in
    profiles/default, so that `--profile profiles/slurm` is not overridden)."""
    widen = _plugin_call("widen_local_executor")
    rules = (
        "rule all:\n"
        "    input: expand('o/{i}.txt', i=range(12))\n"
        "rule t:\n"
        "    output: 'o/{i}.txt'\n"
        "    threads: 0\n"
        "    resources: host_load=100\n"
        "    shell: 'date +%s.%N > {output}; sleep 3; date +%s.%N >> {output}'\n")
    for executor, head, most in (("local", "", 6), ("ldlocal", "", 12), ("local", widen, 12)):
        (tmp_path / "Snakefile").write_text(head + rules)
        out = subprocess.run([str(SNAKEMAKE), "--executor", executor, "--cores", "1",
                              "--resources", "host_load=1200", "-q"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        spans = [[float(x) for x in p.read_text().split()] for p in (tmp_path / "o").iterdir()]
        peak = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
        assert peak == most, (executor, bool(head), peak)
        subprocess.run(["rm", "-rf", str(tmp_path / "o"), str(tmp_path / ".snakemake")],
                       check=True)


@pytest.mark.shared
@pytest.mark.slow  # two workflow runs: about 15 s on an idle host, a minute beside a sweep
def test_the_scheduler_keeps_one_reevaluation_timer(tmp_path):
    """Snakemake's scheduler (job rate limiter on, its default) starts a 1 s re-evaluation
    timer at every round that found waiting jobs, and a round started by a job's end starts one
    more chain of them: its rounds grow with the jobs ended times the seconds run. With the
    Snakefile's patch (snakemake_executor_plugin_ldlocal.single_reevaluation_timer) one timer
    is pending at most: about one round per job ended plus one a second. 40 jobs of 0.5 s, 4 at
    once; the rounds are counted from --verbose's "Ready jobs" line."""
    head = _plugin_call("widen_local_executor")
    single = _plugin_call("single_reevaluation_timer")
    rules = (
        "rule all:\n"
        "    input: expand('o/{i}.txt', i=range(40))\n"
        "rule t:\n"
        "    output: 'o/{i}.txt'\n"
        "    threads: 0\n"
        "    resources: host_load=100\n"
        "    shell: 'sleep 0.5; touch {output}'\n")
    rounds, wall = {}, {}
    for name, text in (("snakemake", head + rules), ("patched", head + single + rules)):
        (tmp_path / "Snakefile").write_text(text)
        t0 = time.monotonic()
        out = subprocess.run([str(SNAKEMAKE), "--cores", "1", "--resources", "host_load=400",
                              "--scheduler", "greedy", "--verbose"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
        wall[name] = time.monotonic() - t0
        assert out.returncode == 0, out.stderr[-2000:]
        rounds[name] = out.stderr.count("Ready jobs:")
        subprocess.run(["rm", "-rf", str(tmp_path / "o"), str(tmp_path / ".snakemake")],
                       check=True)
    assert rounds["patched"] <= 40 + wall["patched"] + 10, (rounds, wall)
    assert rounds["snakemake"] >= 2 * rounds["patched"], (rounds, wall)


@pytest.mark.shared
def test_waiting_trials_are_asked_for_their_resources_again(tmp_path):
    """Snakemake computes a job's resources when it first schedules it; the Snakefile's patch
    (snakemake_executor_plugin_ldlocal.fresh_resources) asks the waiting jobs of rule `trial`
    again, so a cost learned during the run (here: a file the first job writes) admits more of
    them at once. Six 1.5 s jobs under a budget of 400: each asks 400 until the first has run,
    then 100 (a file it wrote says so): with the patch the other five run at once (4 at most:
    the budget), without it one after the other."""
    head = _plugin_call("widen_local_executor")
    fresh = ("from snakemake_executor_plugin_ldlocal import fresh_resources\n"
             "fresh_resources(every_s=0.0)\n")
    rules = (
        "import os, time\n"
        "def load(wc):\n"
        "    return 100 if os.path.exists('cheap') else 400\n"
        "rule all:\n"
        "    input: expand('o/{i}.txt', i=range(6))\n"
        "rule trial:\n"
        "    output: 'o/{i}.txt'\n"
        "    threads: 0\n"
        "    resources: host_load=load\n"
        "    shell: 'echo $(date +%s.%N) > {output}; sleep 1.5; touch cheap; "
        "echo $(date +%s.%N) >> {output}'\n")
    most = {}
    for name, text in (("snakemake", head + rules), ("patched", head + fresh + rules)):
        (tmp_path / "Snakefile").write_text(text)
        out = subprocess.run([str(SNAKEMAKE), "--cores", "1", "--resources", "host_load=400",
                              "--scheduler", "greedy"], cwd=tmp_path, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        spans = [tuple(map(float, f.read_text().split())) for f in (tmp_path / "o").iterdir()]
        most[name] = max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans)
        subprocess.run(["rm", "-rf", str(tmp_path / "o"), str(tmp_path / ".snakemake"),
                        str(tmp_path / "cheap")], check=True)
    assert most == {"snakemake": 1, "patched": 4}, most


def test_a_link_beyond_this_host_runs_alone_once_and_says_why():
    """A link that needs more real-time work than 2 cores hold (420 Mbit/s under the v3 cost
    model that new trials above 250 Mbit/s get; under v1 the population's 236.5 Mbit/s
    downlink of household 657938 was one): it
    asks for the whole host (the default budget then runs it alone), is measured once, not
    retried, and the warning names the rate and the cores it needs. A 64 Mbit/s link fits
    beside others and keeps its retries; on 8 cores both fit."""
    from latency_divide.config import Variant, ToolSettings
    from latency_divide.trial.spec import TrialSpec

    unbound = 16 << 20
    huge, fast = link_plan(3000, 420000, 14.5), link_plan(6000, 64046, 20.1)
    why = admission.beyond_host(huge, "downlink", unbound, cpu_count=2)
    assert why is not None and "420.0 Mbit/s" in why and "2 core(s)" in why
    # 0.025 + 0.0050 x 420 = 2.125 cores of real-time work, at most 0.85 per core: 3 cores
    assert re.search(r"host with (\d+) or more cores", why).group(1) == "3"
    assert admission.beyond_host(huge, "uplink", unbound, cpu_count=2) is None
    assert admission.beyond_host(fast, "downlink", unbound, cpu_count=2) is None
    assert admission.beyond_host(huge, "downlink", unbound, cpu_count=8) is None
    assert admission.beyond_host(huge, "downlink", unbound, testbed="ssh", cpu_count=2) is None
    assert admission.trial_host_load(huge, "downlink", unbound, cpu_count=2) == 1000
    assert admission.trial_host_load(fast, "downlink", unbound, cpu_count=2) < 500
    # v1 judged 657938's 236.5 Mbit/s downlink beyond 2 cores; v2 holds it
    v1_huge = link_plan(3000, 236500, 14.5)
    assert admission.beyond_host(v1_huge, "downlink", unbound, cpu_count=2,
                                 generation="v1") is not None
    assert admission.beyond_host(v1_huge, "downlink", unbound, cpu_count=2) is None

    said = []
    hh = dataclasses.replace(get_household(657938), download_kbps=420000)
    spec = TrialSpec(household=hh, direction="downlink", variant=Variant(name="cubic", cc="cubic"),
                     tool=ToolSettings(name="tquic-perf", path=None, window_bytes=unbound))
    beyond_here = admission.beyond_host(make_linkplan(hh), "downlink", unbound) is not None
    assert admission.retries_for(spec, 2, "local", log=said.append) == (0 if beyond_here else 2)
    if beyond_here:  # this host's cores (os.cpu_count) decide; CI's machine has 2
        assert len(said) == 1 and "measured once, not retried" in said[0] and "657938" in said[0]
    up = dataclasses.replace(spec, direction="uplink")
    n = len(said)
    assert admission.retries_for(up, 2, "local", log=said.append) == 2 and len(said) == n


def test_a_trial_is_judged_by_the_cost_model_of_its_own_instrument():
    """Published trials keep the verdicts of the instrument that measured them: 657938's
    236.5 Mbit/s downlink measured by v1 (delay line 0.1) stays beyond a 2-core host, while
    the v2 instrument holds it; v2's model puts the population's 299.7 and 354.5 Mbit/s
    downlinks beyond 2 cores, as their health verdicts did when measured alone (delay line
    0.2.1), and v3's (threaded NAPI on the receiving veths), which new trials above 250
    Mbit/s get, holds the first."""
    rate, rtt = 236500, 14.5
    assert admission.beyond_cores(rate, rtt, None, cpu_count=2, generation="v1") is not None
    assert admission.beyond_cores(rate, rtt, None, cpu_count=2, generation="v2") is None
    for fast in (299656, 354456):
        assert admission.beyond_cores(fast, rtt, None, cpu_count=2, generation="v2") is not None
        assert admission.rt_cores(fast, rtt, None) == admission.rt_cores(fast, rtt, None,
                                                                         generation="v3")
    # v3 (their receiving veths' NAPI threaded), as new trials above 250 Mbit/s are measured,
    # holds 299.7 Mbit/s and not 354.5, as their health verdicts said
    assert admission.beyond_cores(299656, rtt, None, cpu_count=2) is None
    assert admission.beyond_cores(354456, rtt, None, cpu_count=2) is not None
    # tperf was not measured with v3: its trials cost what v2 gives them
    v2, v3 = (admission.rt_cores(176827, rtt, None, "tperf", generation=g) for g in ("v2", "v3"))
    assert abs(v3 - v2) < 0.05, (v2, v3)
    # up to 250 Mbit/s a new trial is v2's
    assert admission.rt_cores(rate, rtt, None) == admission.rt_cores(rate, rtt, None,
                                                                     generation="v2")
    # above what bench_instrument_cost.py measured alone (0.365 cores at 52.4 Mbit/s)
    assert admission.rt_cores(56000, rtt, None) > 0.365
    assert admission.rt_cores(5000, rtt, None, generation="v2") < \
        admission.rt_cores(5000, rtt, None, generation="v1")
    with pytest.raises(ValueError, match="'v7' is not one of v1, v2, v3"):
        admission.rt_cores(5000, rtt, None, generation="v7")


def test_a_live_trial_asks_for_what_its_encoder_carries_not_its_link(tmp_path):
    """A live broadcast is application-limited (its top rung, 4 Mbit/s, and as much again in
    retransmissions): on a 20 Mbit/s uplink it asks what an 8 Mbit/s link's trial asks, on a
    link slower than that what a bulk trial asks; the workflow's jobs, the Slurm GRES and the
    load gate's real-time cores all say so (config/live-policed.yaml on 2026-12-02: a 20.4
    Mbit/s uplink's broadcast took a tenth of the gate's share its link rate asked)."""
    live = ("-app=live", "-abr=rate", "-seed=1", "-interval_ms=1000")
    assert admission.app_mbit(live) == admission.LIVE_CARRIED_MBIT == 8.0
    assert admission.app_mbit(("-interval_ms=1000",)) is None and admission.app_mbit(()) is None
    fast, slow = make_linkplan(get_household(10075)), make_linkplan(get_household(9667))
    assert fast.shaper("uplink").rate_kbit > 20000 and slow.shaper("uplink").rate_kbit < 300
    w = 4194304
    bulk_fast = admission.trial_host_load(fast, "uplink", w, busy_s=185)
    live_fast = admission.trial_host_load(fast, "uplink", w, busy_s=185, app=8.0)
    assert live_fast < bulk_fast
    assert live_fast == admission.host_load(max(
        admission.trial_cores(8000, fast.rtt_ms, w, busy_s=185),
        admission.RT_HEADROOM * admission.rt_cores(8000, fast.rtt_ms, w)))
    assert admission.trial_host_load(slow, "uplink", w, busy_s=185, app=8.0) == \
        admission.trial_host_load(slow, "uplink", w, busy_s=185)
    # the job's resources in a dry run of the workflow, from the config's app
    cfg = yaml.safe_load((ROOT / "config/live-quick.yaml").read_text())
    cfg["households"]["buckets"] = [{"name": "30-40", "min": 30, "max": 40, "ids": [10075]}]
    cfg["variants"] = [{"name": "cubic-live", "cc": "cubic"},
                       {"name": "cubic-bulk", "cc": "cubic", "app": {"kind": "bulk"}}]
    cfg["trial"]["duration_s"] = 11
    path = tmp_path / "live.yaml"
    text = _dry_run_trials(cfg, path)
    jobs = dict(re.findall(r"variant=([\w-]+),.*?host_load=(\d+)", text, re.S))
    gres = dict(re.findall(r"variant=([\w-]+),.*?gres=hostload:(\d+)", text, re.S))
    assert set(jobs) == set(gres) == {"cubic-live", "cubic-bulk"}, text[-3000:]
    busy = cfg["trial"]["idle_s"] + 11
    assert int(jobs["cubic-live"]) == admission.trial_host_load(fast, "uplink", w, busy_s=busy,
                                                                app=8.0)
    assert int(jobs["cubic-bulk"]) == admission.trial_host_load(fast, "uplink", w, busy_s=busy)
    assert int(gres["cubic-live"]) < int(gres["cubic-bulk"]), gres
    # the load gate's share (trial.run asks ops.admission.spec_rt_cores)
    from latency_divide.trial.sweep import spec_from_config
    loaded = load_config(str(path))
    specs = {v: spec_from_config(loaded, get_household(10075, loaded.buckets), "uplink", v, 1)
             for v in ("cubic-live", "cubic-bulk")}
    rt = {v: admission.spec_rt_cores(s, factor=1.0) for v, s in specs.items()}
    assert rt["cubic-live"] == pytest.approx(admission.rt_cores(8000, fast.rtt_ms, w))
    assert rt["cubic-live"] < rt["cubic-bulk"] / 2, rt
    # the host check's prediction prices each trial as the workflow asks for it
    from latency_divide.ops import hostfit
    costs = {c.trial[3]: c for c in hostfit.assess(loaded, None, 1.0, "test", cpu_count=2).trials}
    assert costs["cubic-live"].rt_cores == pytest.approx(rt["cubic-live"])
    assert costs["cubic-live"].host_load == int(jobs["cubic-live"])
    assert costs["cubic-bulk"].host_load == int(jobs["cubic-bulk"])
