"""The admission learns what a trial costs on this host from the trials it measured (issue 57,
testbed.hostlearn): each kept local trial logs its cores beside the model's; from the 12th on,
the median ratio against the fitted host's replaces the wake-up factor, so a host whose trials
cost half of what the wake-up factor says admits twice as many; a factor set by hand wins."""

import json
import multiprocessing
import os

import pytest

from latency_divide.config import ToolSettings, Variant
from latency_divide.data.households import get_household
from latency_divide.errors import ConfigError
from latency_divide.links.plan import make_linkplan
from latency_divide.ops import admission, hostcost
from latency_divide.testbed import hostlearn, hostrecord, loadgate, netns
from latency_divide.trial.spec import TrialSpec


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A working directory of its own: results/host (the record and the trial log) is empty."""
    monkeypatch.chdir(tmp_path)
    for env in (hostlearn.ENV, hostrecord.FACTOR_ENV):
        monkeypatch.delenv(env, raising=False)
    return tmp_path


def _log(n: int, mean: float, rt: float) -> None:
    """``n`` trials in this boot's log whose cores are ``mean`` / ``rt`` x the model's."""
    for i in range(n):
        hostlearn.record(f"t{i}", {"mean": 0.04, "rt": 0.1}, {"mean": 0.04 * mean, "rt": 0.1 * rt})


def _spec(hid=11406, direction="uplink", args=(), duration=2.0):
    return TrialSpec(household=get_household(hid), direction=direction,
                     variant=Variant(name="cubic", cc="cubic"), duration_s=duration, idle_s=1.0,
                     tool=ToolSettings(name="tquic-perf", path=None, window_bytes=65536,
                                       args=tuple(args)))


@pytest.mark.shared
def test_the_factor_is_the_median_ratio_against_the_fitted_host_once_enough_trials(here):
    assert hostlearn.learned("mean") is None  # no log
    ref = hostlearn.REFERENCE
    _log(hostlearn.MIN_TRIALS - 1, 0.8 * ref["mean"], 0.7 * ref["rt"])
    assert hostlearn.learned("mean") is None and hostlearn.learned("rt") is None
    _log(1, 0.8 * ref["mean"], 0.7 * ref["rt"])
    f, n = hostlearn.learned("mean")
    assert n == hostlearn.MIN_TRIALS and f == pytest.approx(0.8)
    assert hostlearn.learned("rt")[0] == pytest.approx(0.7)
    # the last WINDOW trials decide: a host grown costly within the boot is followed
    _log(hostlearn.WINDOW, 3.0 * ref["mean"], 2.0 * ref["rt"])
    assert hostlearn.learned("mean") == (pytest.approx(3.0), hostlearn.WINDOW)
    assert hostlearn.learned("rt")[0] == pytest.approx(2.0)
    # clamped as the wake-up factor is; a torn or foreign line is skipped
    with open(hostlearn.log_path(), "a") as f:
        f.write('{"trial": "x", "model_mean": 0.04, "used_m\n')
        f.write('{"something": "else"}\n')
    _log(hostlearn.WINDOW, 40.0, 40.0)
    assert hostlearn.learned("mean")[0] == hostrecord.FACTOR_MAX
    _log(hostlearn.WINDOW, 0.01, 0.01)
    assert hostlearn.learned("rt")[0] == hostrecord.FACTOR_MIN
    s = hostlearn.summary()
    assert s["trials"] == 3 * hostlearn.WINDOW + hostlearn.MIN_TRIALS
    assert s["rt"] == hostrecord.FACTOR_MIN and s["log"] == str(hostlearn.log_path())


@pytest.mark.shared
def test_learning_off_or_a_bad_setting(here, monkeypatch):
    _log(hostlearn.MIN_TRIALS, 0.8, 0.6)
    monkeypatch.setenv(hostlearn.ENV, "off")
    assert hostlearn.learned("mean") is None
    assert hostcost.factor_source("mean")[1].startswith("no host record")
    monkeypatch.setenv(hostlearn.ENV, "sometimes")
    with pytest.raises(ConfigError, match=f"{hostlearn.ENV}='sometimes'.*'on'.*'off'"):
        hostlearn.learned("rt")
    with pytest.raises(ValueError, match="kind 'cpu'"):
        hostlearn.learned("cpu")
    assert hostlearn.record("t", {"mean": 0.0, "rt": 0.1}, {"mean": 0.1, "rt": 0.1}) is None


@pytest.mark.shared
def test_a_host_whose_trials_cost_half_admits_twice_as_many_and_by_hand_wins(here, monkeypatch):
    """The ask of a slow and of a fast trial follow the learned factors; the gate's real-time
    cores too; LATENCY_DIVIDE_HOST_FACTOR wins over what was learned."""
    plans = {hid: make_linkplan(get_household(hid)) for hid in (11406, 12251)}

    def asks():
        return [hostcost.trial_host_load(plans[h], "downlink", 65536, busy_s=65.0) for h in plans]

    monkeypatch.setenv(hostrecord.FACTOR_ENV, "1.0")
    at_one = asks()
    monkeypatch.delenv(hostrecord.FACTOR_ENV)
    _log(hostlearn.MIN_TRIALS, 0.5 * hostlearn.REFERENCE["mean"], 0.5 * hostlearn.REFERENCE["rt"])
    f, source = hostcost.factor_source("mean")
    assert f == pytest.approx(0.5) and source.startswith("learned from this boot's last 12")
    learned = asks()
    for a, b in zip(learned, at_one):
        assert a == pytest.approx(b / 2, abs=1)  # per mille, rounded up
    rt_one = hostcost.spec_rt_cores(_spec(12251, "downlink"), factor=1.0)
    assert hostcost.spec_rt_cores(_spec(12251, "downlink")) == pytest.approx(rt_one / 2)
    monkeypatch.setenv(hostrecord.FACTOR_ENV, "1.0")
    assert asks() == at_one
    assert hostcost.factor_source("rt")[1].startswith("set by hand")


def _append(args):
    path, k = args
    os.chdir(path)
    for i in range(k):
        hostlearn.record(f"p{os.getpid()}-{i}", {"mean": 0.04, "rt": 0.1},
                         {"mean": 0.03, "rt": 0.05})


@pytest.mark.shared
def test_concurrent_trials_log_whole_lines(here):
    """Trial jobs end at once: each line is one write, whole, whatever runs beside it."""
    with multiprocessing.get_context("fork").Pool(6) as pool:
        pool.map(_append, [(here, 200)] * 6)
    lines = hostlearn.log_path().read_text().splitlines()
    assert len(lines) == 1200 and all(json.loads(x)["used_rt"] == 0.05 for x in lines)
    assert hostlearn.learned("mean")[1] == hostlearn.WINDOW


@pytest.mark.shared
def test_what_a_trial_teaches(here):
    """The model's cores at factor 1 beside the cores meta.json's cpu_s says it used; a live
    broadcast (its application limits what it carries) and an SSH trial teach nothing."""
    spec = _spec(duration=60.0)
    meta = {"cpu_s": {"sender": 0.7, "receiver": 1.0, "delayline": 0.9, "qsampler": 0.04,
                      "ping": 0.02, "commands": 0.1, "job": 0.44}}
    line = hostcost.learn_from(spec, meta)
    assert line["used_mean"] == pytest.approx(3.2 / (61.0 + admission.TRIAL_OVERHEAD_S), abs=1e-5)
    assert line["used_rt"] == pytest.approx(2.6 / 60.0, abs=1e-5)
    plan = spec.link_plan("netem")
    rate = plan.shaper("uplink").rate_kbit
    gen = admission.spec_generation(spec)
    assert line["model_rt"] == pytest.approx(
        admission.rt_cores(rate, plan.rtt_ms, 65536, generation=gen), abs=1e-5)
    assert line["model_mean"] == pytest.approx(
        admission.trial_cores(rate, plan.rtt_ms, 65536, busy_s=61.0, generation=gen), abs=1e-5)
    assert hostcost.learn_from(_spec(args=("-app=live",)), meta) is None
    assert hostcost.learn_from(spec, meta, testbed="ssh") is None
    assert hostcost.learn_from(spec, {"cpu_s": {"job": 0.4}}) is None  # no tool figures
    assert len(hostlearn.log_path().read_text().splitlines()) == 1


@pytest.mark.netns
def test_a_real_trial_through_the_gate_adds_its_cost_and_the_host_check_says_so(
        here, monkeypatch):
    """A passing 2 s trial through run_trial_with_retries (as the workflow's trial job and
    `latency-divide trial` call it, with ops.hostcost.learn_from) adds one line of what it
    used; with eleven before it the admission's factors are learned, and the run's summary
    names them."""
    from latency_divide.ops.progress import health_report
    from latency_divide.trial.retry import run_trial_with_retries

    monkeypatch.setattr(netns, "STATE_DIR", here / "gate")
    monkeypatch.delenv(loadgate.ENV, raising=False)
    _log(hostlearn.MIN_TRIALS - 1, 0.5, 0.5)
    d = run_trial_with_retries(_spec(), here / "raw", retries=1, log=print,
                               expected_rt_cores=0.05, rt_ceiling=1.5,
                               learn=hostcost.learn_from)
    meta = json.loads((d / "meta.json").read_text())
    assert meta["health"]["verdict"] == "pass", meta["health"]
    last = json.loads(hostlearn.log_path().read_text().splitlines()[-1])
    assert last["trial"] == meta["trial_id"]
    assert last["used_rt"] == pytest.approx(
        (meta["cpu_s"]["sender"] + meta["cpu_s"]["receiver"] + meta["cpu_s"]["delayline"]) / 2.0,
        abs=1e-4)
    # (its whole CPU counts this process's own, which here is pytest's since it started)
    assert last["used_mean"] > 0 and last["model_mean"] > 0
    assert hostlearn.learned("rt")[1] == hostlearn.MIN_TRIALS
    lines = health_report([d / "meta.json"], None)
    assert "the admission's factors, learned from this boot's 12 trials" in lines[1], lines
