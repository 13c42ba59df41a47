"""The regression test of issue 22: a short real sweep through the workflow, admitted by the
profile's CPU budget with its start/end churn and a fast household among the trials, its
starts spaced by the host's start gate, must keep every trial right, not the median: each Copa trial within the per-trial bound of the
same trial run alone, and every trial's emulation-health verdict passing, or failing on the
host's stalls alone (the delay line's lateness, at most an eighth of the trials: the tables
leave those out), never on a bound that the crowd breaks. Under the stall injector
(tests/noisy_host.py) up to half may fail on its stalls, and where they leave too few trials to
compare alone, the test skips, naming them.

Before the fix (docs/emulation.md "Emulation health"), trials on 3-16 Mbit/s links with Copa δ = 0.8
lost up to 0.25 of their throughput in such a sweep while its median stayed within 0.02.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from latency_divide.analysis.metrics import summarize_trial
from latency_divide.trial.health import beyond_fidelity

from conftest import ROOT, VENV_BIN
from netns_util import copy_workflow
from noisy_host import UNDER_INJECTOR, UNDER_ENV, host_stalled

# a sweep of 48 real trials through the workflow, then alone runs: the slow tier
pytestmark = [pytest.mark.netns, pytest.mark.slow]

#: Enough cheap slow links to crowd the first wave as the sweep's did (the budget admits ~35
#: at once), the 16 Mbit/s links where the bias was worst, and a fast household (56 Mbit/s)
HOUSEHOLDS = {"0-30": [11406, 13570, 7884, 797760, 13013],
              "30-40": [615514, 615016, 12512, 615520], "40-50": [1290, 12491], "50+": [27337]}
#: Compared with the same trial alone: Copa δ = 0.8 on the links where it was hurt. Only
#: trials that repeat alone within the bound can be judged by one alone run: 615520 downlink
#: (3.5 Mbit/s, 2 x BDP of bfifo) does not: its Copa overshoots in slow start into the small
#: buffer in about half the runs, alone too, and stays lossy for 1 to 3 s (tquic's Copa lowers
#: δ to 0.5 while a round loses >= 10 %). 26 runs alone at 20 s: 14 lost 23-230 packets,
#: self-delay 6.6 to 10.2 ms, against a bound of 1.5 ms (docs/emulation.md "Emulation health"). 797760
#: downlink (the same link class, no slow-start loss alone or in any sweep) stands for it.
#: Three, not four (each alone run costs the tier about 38 s, held to 25 minutes: issue 59): the
#: two 16 Mbit/s downlinks, where the bias was worst and one may stall on a costly host (CI
#: 2026-12-01: 1290 at every attempt), and the slow class; 27337's 5.7 Mbit/s uplink went. At
#: least two are compared, one of them a 16 Mbit/s link: in this order, the third runs only
#: when one of the first two is left out (a stalled sweep trial or reference).
ALONE = [(1290, "downlink"), (797760, "downlink"), (12491, "downlink")]
FAST_CLASS = {1290, 12491}
#: The fix runs the tool ends at real-time priority (SCHED_FIFO, trial.spec tool_rt_priority);
#: under the normal scheduler, as before it, their mean wait per wake-up was 86-106 µs at this
#: test's scale (the full sweep's crowding took it to 219-283 µs and bent Copa). A guard on
#: that wait (85 µs) stood for "the old scheduling is back", but the real-time ends measured
#: 47-51 µs, 76-80 µs and, on a slower day of this shared VM (2026-11-26), 92-123 µs: the host
#: moves it as much as the scheduling does. So the test checks the scheduling itself: every
#: trial's tool ends ran at the priority asked (meta.json tool.rt_priority), and the wait per
#: wake-up stays within the verdict's own bound (trial.health.BOUNDS).
#: Trials start 1 s apart on one host (testbed.startgate): with every admitted trial starting
#: at once, about 1 Copa δ 0.8 downlink in 7 per sweep overshot in its slow start where 3-22
#: runs alone never did (797760: 444 packets lost, self-delay 11.1 ms against 6.4-7.0 alone;
#: bench/bench_start_spacing.py). 30 s transfers keep 22 or more at once with spaced starts
#: (24-28 seen).
DURATION, IDLE = 30, 3


def _workflow(dst: Path) -> Path:
    copy_workflow(dst)
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    cfg["households"]["buckets"] = [{**b, "ids": HOUSEHOLDS[b["name"]]}
                                    for b in cfg["households"]["buckets"]]
    cfg["variants"] = [v for v in cfg["variants"] if v["name"] in ("cubic", "copa-0.8")]
    cfg["trial"].update(duration_s=DURATION, idle_s=IDLE)
    cfg["companions"] = []
    (dst / "config" / "tail.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return dst


def _admitted_at_once(wf: Path, env: dict) -> int:
    """The host check's "about N at once" for the test's config on this host (the record the
    sweep's own check wrote, reused: no measuring)."""
    res = subprocess.run([str(VENV_BIN / "latency-divide"), "host-check", "--config",
                          "config/tail.yaml", "--json", "--go-on"], cwd=wf, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    at_once = int(json.loads(res.stdout)["assessment"]["at_once"])
    if at_once < 12:
        pytest.skip(f"this host admits about {at_once} trials at once: no crowd to test "
                    "(latency-divide host-check --config config/tail.yaml)")
    return at_once


def _start_alone(hh: int, direction: str, out: Path,
                 env: dict) -> tuple[subprocess.Popen, Path]:
    """Trial ``hh`` ``direction`` with Copa δ = 0.8 outside the workflow (`latency-divide
    trial`, retried on a transient failure as the sweep's trials are: trial.retries), started;
    its stdout and stderr go to a file beside its results, which says why when it fails."""
    out.mkdir(parents=True)
    log = out / "trial.log"
    with open(log, "w") as f:
        proc = subprocess.Popen([str(VENV_BIN / "latency-divide"), "trial", str(hh),
                                 "--direction", direction, "--cc", "copa", "--delta", "0.8",
                                 "--duration", str(DURATION), "--idle", str(IDLE), "--retries",
                                 "2", "--out", str(out)],
                                env=env, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)
    return proc, out


def _alone_dir(run: tuple[subprocess.Popen, Path], hh: int, direction: str) -> Path:
    """The trial directory of a run of :func:`_start_alone`, once it has ended."""
    proc, out = run
    rc = proc.wait(timeout=600)
    assert rc == 0, f"{hh} {direction} alone: {(out / 'trial.log').read_text()[-3000:]}"
    return next(out.rglob(f"{hh}/{direction}/copa-0.8/rep1"))


def test_every_trial_of_a_churning_sweep_is_right(tmp_path):
    wf = _workflow(tmp_path / "wf")
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}
    res = subprocess.run([str(VENV_BIN / "snakemake"), "--cores", "1", "trials",
                          "--configfile", "config/tail.yaml"], cwd=wf, env=env,
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    metas = sorted((wf / "results" / "raw").rglob("meta.json"))
    assert len(metas) == 12 * 2 * 2
    concurrency = [json.loads(m.read_text())["concurrency"] for m in metas]
    # a crowd: as many at once as the budget admits on this host. The host check's "at once"
    # for this config was ~35 on the fitted host, where with starts 1 s apart the peak was
    # 24-28; a costlier host admits fewer (the admission scales by its cost factor: CI
    # 2026-12-02 at factor 1.84 peaked at 20), so the bar is 22 or 3/4 of what it admits.
    at_once = _admitted_at_once(wf, env)
    want = min(22, int(0.75 * at_once))
    assert max(concurrency) >= want, (f"the sweep ran {max(concurrency)} at most at once; "
                                      f"this host admits about {at_once}")
    # the starts were spaced by the host's start gate: never 3 trials started within 1 s
    placement = [json.loads(m.read_text())["placement"] for m in metas]
    assert all(p["start_spacing_s"] == 1.0 for p in placement), placement
    starts = sorted(json.loads(m.read_text())["timing"]["started_unix"] for m in metas)
    crowded = [b - a for a, b in zip(starts, starts[2:]) if b - a < 1.0]
    assert not crowded, f"3 trials started within {min(crowded):.2f} s"

    unhealthy = []  # failed on a bound that neighbours break: the crowd's fault
    stalled = {}  # failed on the delay line's lateness alone: the host's stalls (trial.retry)
    slow_wakeups = []  # tool ends not at the real-time priority asked
    swept = {}
    for m in metas:
        meta = json.loads(m.read_text())
        h = meta["health"]
        tool = meta["tool"]
        if not tool["rt_priority"] or tool["rt_priority"] != tool["rt_priority_asked"]:
            slow_wakeups.append(f"{m.parent}: tool ends at priority {tool['rt_priority']}, "
                                f"asked {tool['rt_priority_asked']} "
                                f"({tool.get('rt_refused', 'no reason recorded')})")
        assert h["tool_wait_ms_per_s"] is not None and h["delayline_late_p99_us"] is not None
        assert h["unchecked"] == []
        key = (meta["household"]["unit_id"], meta["direction"], meta["variant"]["name"])
        if h["verdict"] != "pass":
            if all(r.startswith("delayline_late_p99_us ") for r in h["reasons"]):
                stalled[key] = f"{m.parent}: {h['reasons']}"
            else:
                unhealthy.append(f"{m.parent}: {h['reasons']}")
        swept[key] = summarize_trial(m.parent)
    assert not unhealthy, unhealthy
    assert not slow_wakeups, slow_wakeups
    # A host in a costlier state stalls the delay line of a fast link at every attempt (CI
    # 2026-12-01: 1290's 16 Mbit/s downlink, lateness p99 5.8 ms against 1.9): the verdict
    # fails it and the tables leave it out, which is right; the crowd may not add to them.
    print(f"failed on the host's stalls alone: {sorted(stalled.values())}")
    # under the stall injector its bursts stall more of them: up to half, and the comparisons
    # alone below still judge the rest
    assert len(stalled) <= len(metas) // (2 if UNDER_INJECTOR else 8), sorted(stalled.values())

    # the first two references run side by side (two trials against the sweep's 22-28 at
    # once; one after the other they cost the tier about 38 s more, issue 59), the third only
    # when one of them is left out
    runs = {key: _start_alone(*key, tmp_path / "alone" / str(i), env)
            for i, key in enumerate(ALONE[:2])}
    wrong, not_stalled = [], []
    compared, compared_fast = 0, 0
    try:
        for hh, direction in ALONE:
            if compared >= 2 and compared_fast >= 1:
                break  # enough compared: the third alone run is for a first two left out
            if (hh, direction) not in runs:
                runs[(hh, direction)] = _start_alone(hh, direction, tmp_path / "alone" / "2",
                                                     env)
            alone_dir = _alone_dir(runs[(hh, direction)], hh, direction)
            alone_health = json.loads((alone_dir / "meta.json").read_text())["health"]
            if (hh, direction, "copa-0.8") in stalled or alone_health["verdict"] != "pass":
                if (hh, direction, "copa-0.8") not in stalled:
                    if host_stalled(alone_health):
                        stalled[(hh, direction, "alone")] = (f"{alone_dir}: "
                                                             f"{alone_health['reasons']}")
                    else:
                        not_stalled.append(f"{alone_dir}: {alone_health['reasons']}")
                continue  # a trial the verdict left out of the tables, or a reference it did
            compared += 1
            compared_fast += hh in FAST_CLASS
            alone = summarize_trial(alone_dir)
            got = swept[(hh, direction, "copa-0.8")]
            # docs/emulation.md "Emulation health": the per-trial bounds
            if beyond_fidelity(got, alone)[2]:
                wrong.append(f"{hh} {direction}: norm_tput {got['norm_tput']:.3f} vs alone "
                             f"{alone['norm_tput']:.3f}, self-delay "
                             f"{got['self_delay_mean_ms']:.2f} vs "
                             f"{alone['self_delay_mean_ms']:.2f} ms")
    finally:
        for proc, _ in runs.values():  # a run still going when a check failed: its own teardown
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=60)
    assert not wrong, wrong
    if UNDER_INJECTOR and (compared < 2 or not compared_fast) and not not_stalled:
        # the stall injector's bursts (up to 25 ms) stall a 16 Mbit/s delay line at every
        # attempt (CI under it, 2026-12-02: both 16 Mbit/s downlinks left out)
        pytest.skip(f"only {compared} of {len(ALONE)} compared alone, {compared_fast} of them "
                    f"16 Mbit/s: the rest failed on the stall injector's stalls alone "
                    f"({UNDER_ENV}={UNDER_INJECTOR!r}): {sorted(stalled.values())}")
    assert compared >= 2 and compared_fast >= 1, not_stalled or (
        f"only {compared} of {len(ALONE)} compared alone, {compared_fast} of them 16 Mbit/s")
