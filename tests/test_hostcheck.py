"""The host check (ops.hostcheck, ops.hostfit, testbed.hostrecord; docs/host.md): the record of
this host and boot, written once and reused; the admission scaled by the host's cost factor; the
refusal of a host that cannot hold a config's links; the workflow checks only when trials run.

Records that must say something particular of the host (twice as costly, late by 5 ms) are made
from hostprobe documents built here (the pure parts); every test that measures runs the real
target/release/hostprobe.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path

import pytest
from conftest import ROOT, VENV_BIN
from noisy_host import hermetic_env, skip_under_injector

from latency_divide.config import load_config
from latency_divide.data.households import get_household
from latency_divide.fsio import write_json_atomic
from latency_divide.ops import admission, hostfit
from latency_divide.ops.hostcheck import CHECK_ENV, EXIT_REFUSED, record_of
from latency_divide.testbed import hostrecord as hr
from latency_divide.trial.sweep import spec_from_config

CLI = VENV_BIN / "latency-divide"
HOSTPROBE = ROOT / "target" / "release" / "hostprobe"
GAPS_US = (100.0, 1000.0, 5000.0, 20000.0)


def probe_doc(cpu_us=(11.2, 20.1, 30.0, 50.0), p99_us=(30.0, 40.0, 80.0, 150.0),
              steal_pct=0.0) -> dict:
    """A hostprobe/1 document: ``cpu_us`` and ``p99_us`` per gap (GAPS_US), both CPUs alike."""
    rows = [{"gap_us": g, "cpu": cpu, "wakeups": 1000, "cpu_us_per_wakeup": c,
             "late_us": {"p50": p / 3, "p99": p, "p999": 2 * p, "max": 5 * p}}
            for g, c, p in zip(GAPS_US, cpu_us, p99_us) for cpu in (0, 1)]
    pp = {"wakeups": 1000, "cpu_us_per_wakeup": 3.0,
          "latency_us": {"p50": 3.0, "p99": 9.0, "p999": 20.0, "max": 80.0}}
    return {"schema": "hostprobe/1", "seconds": 4.0, "cpus": [0, 1], "cpu_model": "test",
            "kernel": os.uname().release, "fifo": True, "priority": 10, "timer": rows,
            "pingpong": {"same_core": pp, "cross_core": pp}, "steal_pct": steal_pct}


def write_record(records: Path, doc: dict, halt_poll_ns: int | None = 200_000) -> Path:
    """This host's record of this boot under ``records``, from ``doc`` (as the check writes it)."""
    rec = record_of(doc, {"netem": False, "threaded_napi": True, "halt_poll_ns": halt_poll_ns,
                          "host_halt_poll_ns": 0}, ["hostprobe", "--json"], 4.0)
    path = hr.record_path(records)
    write_json_atomic(path, rec)
    return path


@pytest.fixture
def no_factor_by_hand(monkeypatch):
    monkeypatch.delenv(hr.FACTOR_ENV, raising=False)


def test_the_cost_factor_is_the_wake_up_cost_against_the_fitted_hosts():
    fitted = probe_doc()
    assert hr.wake_cpu_us(fitted) == pytest.approx(statistics.median((11.2, 20.1)))
    assert hr.cost_factor(hr.wake_cpu_us(fitted), hr.REFERENCE_WAKE_CPU_US["halt_poll_on"])[0] \
        == pytest.approx(1.0)
    # 2026-12-01's host (issue 57): 31 µs at 0.1 ms, 57 at 1 ms
    slow = hr.wake_cpu_us(probe_doc(cpu_us=(31.0, 57.0, 53.0, 66.0)))
    assert hr.cost_factor(slow, 15.65)[0] == pytest.approx(44.0 / 15.65)
    assert hr.cost_factor(1000.0, 15.65)[0] == hr.FACTOR_MAX
    assert hr.cost_factor(1.0, 15.65)[0] == hr.FACTOR_MIN
    # without halt polling held, the fitted host's own number without it
    rec = record_of(probe_doc(cpu_us=(21.4, 27.1, 32.0, 48.0)), {"halt_poll_ns": 0}, [], 1.0)
    assert rec["reference"]["key"] == "halt_poll_off" and rec["cost_factor"] == 1.0
    with pytest.raises(ValueError, match="hostprobe/1"):
        hr.check_probe({"schema": "hostprobe/0"})
    bad = probe_doc()
    del bad["timer"][0]["late_us"]["p99"]
    with pytest.raises(ValueError, match="row 0"):
        hr.check_probe(bad)


def test_a_host_twice_as_costly_admits_half_as_many_trials(tmp_path, monkeypatch,
                                                           no_factor_by_hand):
    """A record with twice the fitted wake-up cost doubles a trial's real-time cores and its
    request, and halves how many fit the profile's budget; without a record, factor 1.0."""
    monkeypatch.chdir(tmp_path)
    cfg = load_config(ROOT / "config" / "config.yaml")
    slow = spec_from_config(cfg, get_household(11406, cfg.buckets), "uplink", "cubic", 1)
    fast = spec_from_config(cfg, get_household(12251, cfg.buckets), "downlink", "cubic", 1)
    budget = hostfit.profile_budget()

    def requests(spec):
        plan = spec.link_plan("netem")
        return (admission.spec_rt_cores(spec),
                admission.trial_host_load(plan, spec.direction, spec.tool.window_bytes,
                                          cpu_count=2))

    assert hr.host_factor()[0] == 1.0 and "no host record" in hr.host_factor()[1]
    before = {s.trial_id: requests(s) for s in (slow, fast)}
    path = write_record(Path("results/host"), probe_doc(cpu_us=(22.4, 40.2, 60.0, 100.0)))
    assert json.loads(path.read_text())["cost_factor"] == pytest.approx(2.0)
    assert hr.host_factor() == (pytest.approx(2.0), str(path))
    for s in (slow, fast):
        rt0, load0 = before[s.trial_id]
        rt, load = requests(s)
        assert rt == pytest.approx(2 * rt0)
        assert abs(load - 2 * load0) <= 1, (load0, load)
        assert budget // load == pytest.approx((budget // load0) / 2, abs=1), (load0, load)
    # the meta.json reference names it
    ref = hr.meta_ref()
    assert ref == {"path": str(path), "schema": hr.SCHEMA, "cost_factor": pytest.approx(2.0)}
    # set by hand, the factor wins over the record
    monkeypatch.setenv(hr.FACTOR_ENV, "1")
    assert requests(slow) == before[slow.trial_id]
    monkeypatch.setenv(hr.FACTOR_ENV, "9")
    with pytest.raises(ValueError, match="LATENCY_DIVIDE_HOST_FACTOR='9'"):
        hr.host_factor()


def _host_check(cwd: Path, *args: str, timeout: float = 120,
                state: Path | None = None) -> subprocess.CompletedProcess:
    """`latency-divide host-check` in ``cwd``; ``state``: a testbed state directory of the test's
    own (default: one in ``cwd``; never the host's boot cache). The environment is hermetic: a
    test run under `latency-divide stalls` would otherwise make every check measure
    (noisy_host)."""
    env = hermetic_env(CHECK_ENV)
    # never the host's own boot cache: the environment has no injector's mark to keep a noisy
    # measurement out of it
    env["LATENCY_DIVIDE_STATE_DIR"] = str(state if state is not None else cwd / ".ld-state")
    return subprocess.run([str(CLI), "host-check", "--config",
                           str(ROOT / "config" / "config.yaml"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_a_host_too_late_for_a_link_is_refused_naming_it(tmp_path):
    """Wake-ups late by 20 ms at p99: every link whose verdict allows its delay line less
    (two packet times under 20 ms: above 1.2 Mbit/s) is named with its number, exit 3; --go-on
    exits 0 with a warning."""
    write_record(tmp_path / "results" / "host", probe_doc(p99_us=(20000.0,) * 4))
    res = _host_check(tmp_path)
    assert res.returncode == EXIT_REFUSED, res.stdout + res.stderr
    cfg = load_config(ROOT / "config" / "config.yaml")
    spec = spec_from_config(cfg, get_household(12251, cfg.buckets), "downlink", "cubic", 1)
    pkt = hostfit.packet_time_us(spec.link_plan("netem").shaper("downlink").rate_kbit)
    assert "docs/remote-testbed.md" in res.stdout and "docs/cluster.md" in res.stdout
    assert "household 799254 downlink 3.562 Mbit/s: wake-up lateness p99 20000 µs" in res.stdout
    every = json.loads(_host_check(tmp_path, "--json").stdout)["assessment"]["refusals"]
    what = next(r["what"] for r in every if (r["household"], r["direction"]) == (12251,
                                                                               "downlink"))
    assert "wake-up lateness p99 20000 µs" in what and f"packet time {pkt:.0f} µs" in what, what
    assert all(r["rate_kbit"] > 1200 for r in every)  # two packet times under 20 ms
    assert any(r["rate_kbit"] < 2400 for r in every)  # ... not one packet time
    ok = _host_check(tmp_path, "--go-on")
    assert ok.returncode == 0 and "--go-on" in ok.stderr and "household 799254" in ok.stdout


def test_a_host_without_the_real_time_cores_is_refused(tmp_path):
    """Factor 4 and 60 % steal: capacity 2 x (0.85 - 0.60) = 0.50 cores; the links whose
    real-time cores x 4 exceed it are named with both numbers, the slow ones are not."""
    write_record(tmp_path / "results" / "host",
                 probe_doc(cpu_us=(100.0,) * 4, steal_pct=60.0))
    res = _host_check(tmp_path, "--json")
    assert res.returncode == EXIT_REFUSED, res.stderr
    a = json.loads(res.stdout)["assessment"]
    assert a["factor"] == 4.0 and a["capacity_cores"] == pytest.approx(0.5)
    cfg = load_config(ROOT / "config" / "config.yaml")
    spec = spec_from_config(cfg, get_household(27337, cfg.buckets), "downlink", "cubic", 1)
    need = admission.spec_rt_cores(spec, factor=4.0)
    assert need > 0.5
    r = next(r for r in a["refusals"] if (r["household"], r["direction"]) == (27337, "downlink"))
    assert f"needs {need:.2f} real-time cores" in r["what"] and "capacity 0.50" in r["what"]
    assert (11406, "uplink") not in {(r["household"], r["direction"]) for r in a["refusals"]}


@pytest.mark.skipif(not HOSTPROBE.exists(), reason="target/release/hostprobe not built yet")
@pytest.mark.slow
def test_the_record_is_written_once_per_boot_and_forced_again(tmp_path):
    """The real probe: the first check measures and writes the record, the second reuses it
    (same file, same measurement), --force measures again; another results tree in the same
    boot takes this boot's copy without measuring."""
    state = tmp_path / "state"
    first = _host_check(tmp_path, "--seconds", "2", "--go-on", state=state)
    assert first.returncode == 0, first.stderr
    path = hr.record_path(tmp_path / "results" / "host")
    rec = json.loads(path.read_text())
    assert rec["schema"] == hr.SCHEMA and rec["boot_id"] == hr.boot_id()
    assert "measured now" in first.stdout
    mtime = path.stat().st_mtime_ns
    again = _host_check(tmp_path, "--seconds", "2", "--go-on", state=state)
    assert again.returncode == 0 and "reused" in again.stdout and "probing" not in again.stderr
    assert path.stat().st_mtime_ns == mtime
    assert json.loads(path.read_text())["measured_unix"] == rec["measured_unix"]
    forced = _host_check(tmp_path, "--seconds", "2", "--go-on", "--force", state=state)
    assert forced.returncode == 0 and "measured now" in forced.stdout
    rec2 = json.loads(path.read_text())
    assert rec2["measured_unix"] > rec["measured_unix"]
    other = tmp_path / "other"
    other.mkdir()
    copy = _host_check(other, "--seconds", "2", "--go-on", state=state)
    assert copy.returncode == 0 and "probing" not in copy.stderr, copy.stderr
    assert json.loads(hr.record_path(other / "results" / "host").read_text()) == rec2


@pytest.mark.netns  # the injector's bursts need SCHED_FIFO (root)
@pytest.mark.skipif(not HOSTPROBE.exists(), reason="target/release/hostprobe not built yet")
@pytest.mark.slow
def test_a_record_measured_under_the_injector_stays_in_its_own_results_tree(tmp_path):
    """A check under `latency-divide stalls` measures (it does not take this boot's copy),
    marks its record ``under_stalls`` and leaves the boot's copy the host's own, which a later
    run without the injector takes (2026-12-02: a run reused a noisy sweep's record)."""
    state = tmp_path / "state"
    quiet, noisy, later = (tmp_path / n for n in ("quiet", "noisy", "later"))
    for d in (quiet, noisy, later):
        d.mkdir()
    first = _host_check(quiet, "--seconds", "2", "--go-on", state=state)
    assert first.returncode == 0, first.stderr
    own = json.loads(hr.record_path(quiet / "results" / "host").read_text())
    assert "under_stalls" not in own
    env = hermetic_env(CHECK_ENV, LATENCY_DIVIDE_STATE_DIR=str(state))
    res = subprocess.run([str(CLI), "stalls", "--", str(CLI), "host-check", "--config",
                          str(ROOT / "config" / "config.yaml"), "--seconds", "2", "--go-on"],
                         cwd=noisy, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "measured now" in res.stdout, res.stdout
    rec = json.loads(hr.record_path(noisy / "results" / "host").read_text())
    assert rec["under_stalls"] and rec["measured_unix"] > own["measured_unix"]
    assert json.loads((state / "host" / hr.record_path().name).read_text()) == own
    after = _host_check(later, "--seconds", "2", "--go-on", state=state)
    assert after.returncode == 0 and "probing" not in after.stderr, after.stderr
    assert json.loads(hr.record_path(later / "results" / "host").read_text()) == own


@pytest.mark.skipif(not HOSTPROBE.exists(), reason="target/release/hostprobe not built yet")
@pytest.mark.slow
def test_host_check_on_this_host_end_to_end(tmp_path):
    """`latency-divide host-check --seconds 5` on this host, the real probe, under 30 s."""
    t0 = time.monotonic()
    res = _host_check(tmp_path, "--seconds", "5", "--json", "--force", state=tmp_path / "state")
    wall = time.monotonic() - t0
    assert res.returncode in (0, EXIT_REFUSED), res.stderr
    assert wall < 30, wall
    out = json.loads(res.stdout)
    rec = out["record"]
    assert rec["probe"]["schema"] == hr.PROBE_SCHEMA and rec["cores"] == os.cpu_count()
    gaps = {row["gap_us"] for row in rec["probe"]["timer"]}
    assert set(hr.COST_GAPS_US) <= gaps
    assert all(row["wakeups"] > 0 for row in rec["probe"]["timer"])
    assert hr.FACTOR_MIN <= rec["cost_factor"] <= hr.FACTOR_MAX
    assert out["assessment"]["capacity_cores"] > 0 and out["assessment"]["wall_s"] > 0
    print(f"host-check --seconds 5: {wall:.1f} s; wake-up {rec['wake_cpu_us']} µs, factor "
          f"{rec['cost_factor']}, steal {rec['steal_pct']} %")


# --- the workflow: the check runs only when trial jobs are about to run ------------------------

def _workflow(dst: Path) -> Path:
    """A copy of the workflow with config/test.yaml (2 households x 2 directions x 2 variants)."""
    dst.mkdir(parents=True)
    for item in ("Snakefile", "rules", "workflow", "config", "envs", "resources", "profiles"):
        src = ROOT / item
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, dst / item)
    return dst


def _snakemake(wf: Path, *args: str, **env) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items()
            if k not in (hr.FACTOR_ENV, CHECK_ENV, "SLURM_JOB_ID")}
    full.update(PATH=f"{VENV_BIN}:{os.environ['PATH']}", **env)
    return subprocess.run([str(VENV_BIN / "snakemake"), *args, "--cores", "1", "--configfile",
                           "config/test.yaml"], cwd=wf, env=full, capture_output=True,
                          text=True, timeout=240)


def test_a_refusing_host_stops_the_run_before_any_trial(tmp_path):
    """This boot's record says wake-ups come 5 ms late: `snakemake trials` stops in onstart with
    the links named, and no trial starts."""
    wf = _workflow(tmp_path / "wf")
    write_record(wf / "results" / "host", probe_doc(p99_us=(20000.0,) * 4))
    res = _snakemake(wf, "trials")
    assert res.returncode != 0
    assert "host check refuses this run" in res.stderr, res.stderr[-3000:]
    assert "household 12512" in res.stderr or "household 11406" in res.stderr
    assert not (wf / "results" / "raw").exists() or not any((wf / "results" / "raw").rglob(
        "meta.json"))
    assert not (wf / "logs" / "trial").exists()


@pytest.mark.slow
@pytest.mark.shared  # runs no trial and times nothing: 12 s of the alone phase (issue 59)
def test_runs_that_measure_no_trial_do_not_check_the_host(tmp_path):
    """A dry run, a run with trials forbidden (re-analysis of pulled data) and an analysis-only
    target write no host record; the refusing record of this boot does not stop a run that
    measures nothing."""
    wf = _workflow(tmp_path / "wf")
    records = wf / "results" / "host"
    assert _snakemake(wf, "-n", "trials").returncode == 0
    assert not records.exists()
    forbidden = _snakemake(wf, "trials", LATENCY_DIVIDE_FORBID_TRIALS="1")
    assert forbidden.returncode != 0 and "LATENCY_DIVIDE_FORBID_TRIALS is set" in (
        forbidden.stderr), forbidden.stderr[-2000:]
    assert "host check" not in forbidden.stderr and not records.exists()
    write_record(records, probe_doc(p99_us=(20000.0,) * 4))
    target = "results/households/11406.json"
    res = _snakemake(wf, target)
    assert res.returncode == 0, res.stderr[-2000:]
    assert (wf / target).exists() and "host check" not in res.stderr



def _stalls_cli() -> bool:
    res = subprocess.run([str(CLI), "stalls", "--help"], capture_output=True, text=True,
                         timeout=60)
    return res.returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not HOSTPROBE.exists(), reason="target/release/hostprobe not built yet")
def test_a_noisy_host_is_worse_and_named(tmp_path):
    """With the stall injector at ten times its default duty (`latency-divide stalls --duty
    0.15`), the check's lateness is worse than without it at every gap of 1 ms and more, and
    it names links of config/config.yaml it cannot hold (exit 3).

    The 0.1 ms gap is printed, not compared: a burst delays one wake-up of the thousands the
    loop makes at that gap, so its p99 stays in the host's own noise (CI 2026-12-01: 48.9 µs
    quiet against 31.3 µs with the injector, while the 1 ms gap went from 77 µs to 1.7 ms)."""
    if not _stalls_cli():
        pytest.skip("`latency-divide stalls` (the stall injector's command) is not there yet")
    skip_under_injector("comparing the check with and without the injector")
    quiet = _host_check(tmp_path, "--seconds", "10", "--force", "--json", state=tmp_path / "s")
    noisy = subprocess.run(
        [str(CLI), "stalls", "--duty", "0.15", "--", str(CLI), "host-check", "--config",
         str(ROOT / "config" / "config.yaml"), "--seconds", "10", "--force", "--json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env=hermetic_env(CHECK_ENV, LATENCY_DIVIDE_STATE_DIR=str(tmp_path / "s")))

    def p99(out) -> dict:
        rows = json.loads(out.stdout)["record"]["probe"]["timer"]
        return {g: max(r["late_us"]["p99"] for r in rows if r["gap_us"] == g)
                for g in {r["gap_us"] for r in rows}}

    before, after = p99(quiet), p99(noisy)
    print(f"lateness p99 by gap, quiet: {before}; --duty 0.15: {after}")
    slow_gaps = [g for g in before if g >= 1000.0]
    assert slow_gaps and all(after[g] > before[g] for g in slow_gaps), (before, after)
    assert noisy.returncode == EXIT_REFUSED, noisy.stderr[-2000:]
    assert json.loads(noisy.stdout)["assessment"]["refusals"]
