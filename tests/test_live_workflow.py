"""Live broadcasts in the workflow (issue 58; docs/live.md): the config's app (tool.app, a
variant's app) in the trial definition and the tool's argv, bulk definitions unchanged (pinned),
Facebook's metrics and the policer's drops in the trials table (a real short live trial in
namespaces), and the small live sweep through Snakemake with its figure (slow tier)."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import yaml

from latency_divide.config import LIVE_WINDOW_BYTES, load_config
from latency_divide.data.households import get_household
from latency_divide.errors import ConfigError
from latency_divide.trial import definition
from latency_divide.trial.spec import receiver_argv, sender_argv
from latency_divide.trial.sweep import alone_args, spec_from_config, trial_ids

from conftest import ROOT

LIVE_QUICK = ROOT / "config" / "live-quick.yaml"

#: Definition ids of bulk trials measured before live mode existed: the app must not move them
#: (they name the published trials' directories).
PINNED = {
    "config.yaml": {"cubic": "def-7b4e62e9a6", "copa-0.2": "def-01a0987011",
                    "copa-0.5": "def-8cfa77f619", "copa-0.8": "def-16ce5f986b"},
    "quick.yaml": {"cubic": "def-e2341b0b85", "copa-0.5": "def-9c5980786c"},
    "population.yaml": {"cubic": "def-2098d16836", "bbr": "def-524b6d2173",
                        "copa-0.04": "def-a6a857dd01", "copa-0.5": "def-fa76ccbc06"},
    "population-buffers.yaml": {"cubic": "def-f14a7b3c39", "bbr": "def-88ab0c1902",
                                "copa-0.04": "def-408f077a57", "copa-0.5": "def-b33ced3149"},
    "policed.yaml": {"cubic": "def-62fc7e8810", "copa-0.04": "def-aeded357ba"},
}


def _ids(cfg) -> dict[str, str]:
    return {v.name: definition.definition_id(definition.of_config(cfg, v)) for v in cfg.variants}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_bulk_definition_ids_are_unchanged(name):
    cfg = load_config(ROOT / "config" / name)
    assert _ids(cfg) == PINNED[name]
    for v in cfg.variants:  # a bulk trial's argv has no live flag
        assert "-app=live" not in cfg.tool_for(v).args


def _raw() -> dict:
    return yaml.safe_load(LIVE_QUICK.read_text())


def test_live_quick_config_makes_live_trials_with_their_abr_window_and_flags():
    cfg = load_config(LIVE_QUICK)
    assert [v.name for v in cfg.variants] == ["cubic-rate", "copa-0.04-rate", "cubic-backlog",
                                              "copa-0.04-backlog"]
    assert len(trial_ids(cfg)) == 8 and cfg.directions == ("uplink",)
    ids = _ids(cfg)
    assert len(set(ids.values())) == 4  # the ABR is part of the definition
    hh = get_household(11406)
    for v in cfg.variants:
        abr = v.name.rsplit("-", 1)[1]
        flags = ("-app=live", f"-abr={abr}", "-seed=1")
        tool = cfg.tool_for(v)
        assert tool.window_bytes == LIVE_WINDOW_BYTES == 4194304
        assert tool.args[:3] == flags
        spec = spec_from_config(cfg, hh, "uplink", v.name, 1)
        assert spec.live and spec.definition_id() == ids[v.name]
        assert spec.definition()["tool"]["args"] == list(flags)
        snd = sender_argv(spec, "tquic-perf", "sender.json", "10.10.2.2")
        rcv = receiver_argv(spec, "tquic-perf", "receiver.json", "10.10.2.2")
        assert snd[-3:] == list(flags) and rcv[-3:] == list(flags)
        assert rcv[rcv.index("-window") + 1] == "4194304" and "-once" in snd
        # measured alone (`latency-divide trial`): the same definition
        args = alone_args(cfg, 11406, "uplink", v.name, 1, "/tmp/x")
        assert [a for a in args if a.startswith("--tool-arg=")] == [
            f"--tool-arg={f}" for f in flags]


def test_window_seed_and_a_bulk_variant_in_a_live_config():
    raw = _raw()
    raw["tool"]["window_bytes"] = 8 << 20          # set: kept
    raw["tool"]["app"]["seed"] = 7
    raw["variants"].append({"name": "cubic-bulk", "cc": "cubic", "app": {"kind": "bulk"}})
    cfg = load_config(raw)
    assert cfg.tool_for(cfg.variant("cubic-rate")).window_bytes == 8 << 20
    assert cfg.tool_for(cfg.variant("cubic-rate")).args == ("-app=live", "-abr=rate", "-seed=7")
    assert cfg.tool_for(cfg.variant("cubic-bulk")).args == ()
    del raw["tool"]["window_bytes"]                # unset: each app's default
    cfg = load_config(raw)
    assert cfg.tool_for(cfg.variant("cubic-rate")).window_bytes == LIVE_WINDOW_BYTES
    assert cfg.tool_for(cfg.variant("cubic-bulk")).window_bytes == 65536
    # a bulk variant in a live config is the bulk definition of the same settings
    bulk = copy.deepcopy(raw)
    del bulk["tool"]["app"]
    bulk["variants"] = [{"name": "cubic-bulk", "cc": "cubic"}]
    assert _ids(cfg)["cubic-bulk"] == _ids(load_config(bulk))["cubic-bulk"]


@pytest.mark.parametrize("where, app, named", [
    ("tool", {"kind": "live", "abr": "bola"}, "tool.app.abr = 'bola': 'bola' is not one of "
                                              "['backlog', 'rate']"),
    ("variant", {"kind": "live", "abr": "bbr"}, "variants[0].app.abr = 'bbr'"),
    ("tool", {"kind": "live"}, "tool.app: 'abr' is a required property"),
    ("tool", {"kind": "bulk", "abr": "rate"}, "abr and seed apply to kind live only"),
    ("tool", {"kind": "video", "abr": "rate"}, "tool.app.kind = 'video'"),
    ("tool", {"kind": "live", "abr": "rate", "seed": -1}, "tool.app.seed = -1"),
    ("tool", {"kind": "live", "abr": "rate", "bitrate": 3000}, "unknown key tool.app.bitrate"),
])
def test_bad_app_is_refused_naming_key_and_value(where, app, named):
    raw = _raw()
    if where == "tool":
        raw["tool"]["app"] = app
    else:
        raw["variants"][0]["app"] = app
    with pytest.raises(ConfigError) as e:
        load_config(raw)
    assert named in str(e.value)


@pytest.mark.parametrize("where", ["tool", "variant"])
def test_a_window_that_caps_a_live_bitrate_is_refused(where):
    """config.yaml's 65536, which Snakemake merges into a --configfile's keys, among them."""
    raw = _raw()
    if where == "tool":
        raw["tool"]["window_bytes"] = 65536
    else:
        raw["variants"][2]["window_bytes"] = 1 << 20
    with pytest.raises(ConfigError, match=r"variant 'cubic-(rate|backlog)': window_bytes "
                                          r"(65536|1048576): a live app needs at least 4194304"):
        load_config(raw)
    from snakemake.utils import update_config  # as the workflow reads --configfile

    merged = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    update_config(merged, _raw())
    assert _ids(load_config(merged)) == _ids(load_config(LIVE_QUICK))


def test_live_needs_tquic_perf():
    raw = _raw()
    raw["tool"].update(name="tperf", path="/usr/bin/tperf")
    with pytest.raises(ConfigError, match="needs tool.name tquic-perf, not 'tperf'"):
        load_config(raw)


@pytest.mark.parametrize("name", ["live.yaml", "live-buffers.yaml"])
def test_population_live_configs(name):
    cfg = load_config(ROOT / "config" / name)
    assert len(cfg.household_ids()) == 240 and cfg.directions == ("uplink",)
    assert cfg.trial.duration_s == 180
    assert {v.cc for v in cfg.variants} == {"cubic", "bbr", "copa"}
    assert sorted(v.delta for v in cfg.variants if v.cc == "copa") == [0.04, 0.5]
    assert all(cfg.tool_for(v).args[:2] == ("-app=live", "-abr=rate") for v in cfg.variants)
    assert cfg.buffer_model == ("mba-2014" if "buffers" in name else "qfactor")
    assert math.isclose(cfg.tool_for(cfg.variants[0]).window_bytes, 4194304)


@pytest.mark.shared  # measures nothing and times nothing (tests/conftest.py)
def test_a_live_population_run_in_three_parts_measures_each_broadcast_once(tmp_path):
    """docs/parallel.md's command for a sweep longer than a session, `snakemake --cores 1 trials
    --batch trials=1/3 --configfile config/live.yaml`, dry-run in a scratch copy of the workflow
    (no trial on disk or published): the first two thirds are disjoint slices of the run's 1152
    broadcasts in path order, a third each (the last part, `trials` alone, is what they leave)."""
    import os
    import re
    import subprocess

    from conftest import VENV_BIN
    from netns_util import copy_workflow

    from latency_divide.trial.layout import trial_meta_path

    env = {**os.environ, "LATENCY_DIVIDE_FORBID_TRIALS": "1", "LATENCY_DIVIDE_HOST_CHECK": "skip"}
    wf = copy_workflow(tmp_path / "wf")

    def planned(k: int) -> list[str]:
        out = subprocess.run([str(VENV_BIN / "snakemake"), "-n", "--cores", "1", "trials",
                              "--batch", f"trials={k}/3", "--configfile", "config/live.yaml"],
                             cwd=wf, capture_output=True, text=True, timeout=300, env=env)
        assert out.returncode == 0, out.stderr[-3000:]
        return sorted(re.findall(r"output: (results/raw/\S+/meta\.json)", out.stdout))

    every = sorted(str(trial_meta_path("results/raw", *t))
                   for t in trial_ids(load_config(ROOT / "config" / "live.yaml")))
    assert len(every) == len(set(every)) == 1152
    assert planned(1) == every[:384] and planned(2) == every[384:768]


# --- the trials table: a real live trial on a policed link, and bulk trials ----------------------

#: Every new column of the trials table and its range on the trial below (11406's uplink:
#: 1150 kbit/s, 67 ms; a 8 s broadcast on a policed link, so the policer drops too).
LIVE_RANGES = {
    "broadcast_s": (7.5, 10.0), "goodput_fb_kbps": (100, 1.1 * 1150),
    "app_rtt_mean_ms": (0.9 * 67, 2000), "app_rtt_p95_ms": (0.9 * 67, 5000),
    "app_rtt_inband_mean_ms": (0.9 * 67, 10000), "app_rtt_inband_p95_ms": (0.9 * 67, 20000),
    "rtx_overhead": (0, 5), "bitrate_mean_kbps": (145, 4000), "bitrate_switches": (0, 1000),
    "frames_produced": (200, 320), "frames_sent": (1, 320), "frames_dropped": (0, 320),
    "frames_dropped_pct": (0, 100), "frame_latency_p50_ms": (0.9 * 67 / 2, 5000),
    "frame_latency_p95_ms": (0.9 * 67 / 2, 10000), "policer_drops": (1, 10**6),
    "policer_dropped_bytes": (1000, 10**9), "transport_rtt_mean_ms": (0.9 * 67, 5000),
}


@pytest.mark.slow  # 12 s alone; on a busy host its health check may measure it again alone
@pytest.mark.netns
def test_a_real_live_trial_has_every_new_column_in_range(tmp_path, capsys):
    from latency_divide.analysis.metrics import LIVE_COLUMNS, summarize_trial
    from latency_divide.analysis.schemas import TRIALS_SCHEMA
    from latency_divide.cli import main as cli_main
    from netns_util import require_programs

    require_programs("ip", "tc", "ethtool")
    rc = cli_main(["trial", "11406", "--direction", "uplink", "--cc", "copa", "--delta", "0.04",
                   "--duration", "8", "--idle", "2", "--app", "live", "--abr", "rate",
                   "--buffer-model", "policed-5ms", "--out", str(tmp_path)])
    assert rc == 0
    d = next(tmp_path.glob("def-*/11406/uplink/copa-0.04/rep1"))
    row = summarize_trial(d)
    assert row["live_abr"] == "rate" and row["health_verdict"] in ("pass", "fail")
    for col, (lo, hi) in LIVE_RANGES.items():
        assert row[col] is not None and lo <= row[col] <= hi, (col, row[col])
    assert set(LIVE_COLUMNS) | {"policer_drops", "policer_dropped_bytes"} <= set(
        TRIALS_SCHEMA.names)
    assert row["frames_sent"] + row["frames_dropped"] <= row["frames_produced"]
    # No order between the two pings' means here: in 8 s the rate ABR may settle below the
    # policer, so an in-band ping finds no video queued (6 runs on host vm, 2026-12-07: in-band
    # mean 67.7-134 ms, once equal to the priority ping's 67.7), and one priority ping lost to
    # the policer and repaired adds a round trip to one of 8 samples (CI of 86ac6301: in-band
    # 67.7 against 75.7). The 30 s broadcasts of check_live_sweep do order them.
    meta = __import__("json").loads((d / "meta.json").read_text())
    assert meta["tool"]["args"] == ["-app=live", "-abr=rate", "-seed=1"]
    assert meta["tool"]["window_bytes"] == 4194304
    print("live trial:", {k: row[k] for k in ("goodput_fb_kbps", "rtx_overhead",
                                              "bitrate_mean_kbps", "policer_drops")})


def test_bulk_trials_have_null_live_and_policer_columns():
    from latency_divide.analysis.metrics import LIVE_COLUMNS, summarize_trial

    from conftest import TEST_DATA

    dirs = sorted(p.parent for p in (TEST_DATA / "trials").glob("def-*/*/*/*/rep*/meta.json"))
    assert dirs
    for d in dirs[:3]:
        row = summarize_trial(d)
        assert all(row[k] is None for k in (*LIVE_COLUMNS, "policer_drops",
                                             "policer_dropped_bytes")), d


def test_a_live_trial_with_a_broken_report_is_left_out_naming_it(tmp_path):
    """A live sender.json without its receiver's report: the trial is invalid, not NaN."""
    import shutil

    from latency_divide.analysis.metrics import live_columns
    from latency_divide.analysis.reader import TrialInvalid

    from conftest import TEST_DATA

    (tmp_path / "sender.json").write_text((TEST_DATA / "live-rate-sender.json").read_text())
    with pytest.raises(TrialInvalid, match="live broadcast: .*receiver.json"):
        live_columns(tmp_path)
    shutil.copy(TEST_DATA / "live-rate-receiver.json", tmp_path / "receiver.json")
    row = live_columns(tmp_path)
    assert row["live_abr"] == "rate" and row["goodput_fb_kbps"] > 0


def test_live_figure_frame_and_plot_from_captured_reports():
    import pandas as pd

    from latency_divide.analysis import live_figures as lf
    from latency_divide.parsers.live import bitrate_timeline, parse_live_trial

    from conftest import TEST_DATA

    rows, timelines, queue = [], {}, []
    for i, abr in enumerate(("backlog", "rate")):
        snd = (TEST_DATA / f"live-{abr}-sender.json").read_text()
        live = parse_live_trial(snd, (TEST_DATA / f"live-{abr}-receiver.json").read_text())
        path = f"results/raw/def-000000000{i}/11406/uplink/cubic-{abr}/rep1"
        rows.append({"household_id": 11406, "direction": "uplink", "variant": f"cubic-{abr}",
                     "cc": "cubic", "delta": math.nan, "repetition": 1, "trial_path": path,
                     "live_abr": abr, "broadcast_s": live["broadcast_s"]})
        timelines[path] = bitrate_timeline(snd)
        queue.append(pd.DataFrame({"household_id": 11406, "direction": "uplink",
                                   "variant": f"cubic-{abr}", "repetition": 1,
                                   "t_s": [0.0, 0.1, 0.2], "backlog_bytes": [0, 5000, 2500],
                                   "during_transfer": True}))
    trials = pd.DataFrame(rows + [{**rows[0], "household_id": 11750, "variant": "bulk",
                                   "live_abr": None}])
    used = lf.live_trials(trials, order=[11750, 11406])
    assert list(used["variant"]) == ["cubic-backlog", "cubic-rate"]  # 11750 has no live trial
    frame = lf.live_frame(used, pd.concat(queue), timelines)
    for abr in ("backlog", "rate"):
        b = frame[(frame["variant"] == f"cubic-{abr}") & (frame["metric"] == lf.BITRATE)]
        assert len(b) == len(timelines[used["trial_path"].iloc[0 if abr == "backlog" else 1]]) + 1
        assert b["t_s"].iloc[-1] == pytest.approx(rows[0 if abr == "backlog" else 1]["broadcast_s"])
        q = frame[(frame["variant"] == f"cubic-{abr}") & (frame["metric"] == lf.QUEUE)]
        assert list(q["value"]) == [0.0, 5.0, 2.5]  # KB
    lf.live_plot(frame, trials, 11406, "uplink").draw()
    with pytest.raises(lf.FigureError, match="no live trial"):
        lf.live_trials(trials[trials["live_abr"].isna()])


# --- the small live sweep, as a researcher runs it (slow) ---------------------------------------


@pytest.mark.slow
@pytest.mark.netns
def test_live_quick_sweep_through_snakemake(tmp_path):
    """`snakemake --cores 1 all --configfile config/live-quick.yaml` in a scratch copy of the
    workflow (its files linked, as tests/test_quickstart.py does): 8 broadcasts of 30 s, the
    trials table with Facebook's metrics per broadcast, and the live figure."""
    import os
    import subprocess
    import time

    from conftest import VENV_BIN

    wf = tmp_path / "wf"
    wf.mkdir()
    for item in ("Snakefile", "rules", "workflow", "config", "envs", "resources", "profiles",
                 ".venv"):
        (wf / item).symlink_to(ROOT / item)
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}
    t0 = time.monotonic()
    res = subprocess.run([str(VENV_BIN / "snakemake"), "--cores", "1", "all", "--configfile",
                          "config/live-quick.yaml"], cwd=wf, env=env, capture_output=True,
                         text=True, timeout=1800)
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-5000:]
    check_live_sweep(wf, took)


def check_live_sweep(wf: Path, took: float) -> None:
    """The tables and figures of a live-quick sweep in workflow directory ``wf``: every
    broadcast's columns in range, the live figure and its provenance; prints the numbers."""
    import json
    import os

    import pyarrow.parquet as pq

    from latency_divide.analysis.metrics import LIVE_COLUMNS

    tables = wf / "results" / "tables"
    trials = pq.read_table(tables / "trials.parquet").to_pandas()
    excluded = pq.read_table(tables / "exclusions.parquet").to_pandas()
    assert len(trials) + len(excluded) == 8, excluded["reason"].tolist()
    assert len(trials) >= 4, excluded["reason"].tolist()
    cfg = load_config(LIVE_QUICK)
    for r in trials.to_dict("records"):
        abr = cfg.tool_for(cfg.variant(r["variant"])).args[1].split("=")[1]
        assert r["live_abr"] == abr and r["direction"] == "uplink"
        assert r["window_bytes"] == 4194304
        for col in LIVE_COLUMNS:
            assert r[col] is not None and not (isinstance(r[col], float)
                                               and math.isnan(r[col])), (col, r["trial_path"])
        cap = r["capacity_kbps"]
        assert 29 <= r["broadcast_s"] <= 33
        assert 0.05 * cap <= r["goodput_fb_kbps"] <= 1.1 * cap, r
        assert 145 <= r["bitrate_mean_kbps"] <= 4000
        # bytes retransmitted / bytes acknowledged: a byte lost twice counts twice, so no bound
        # of 1 (Copa 0.04's backlog broadcasts here: 0.40-0.55 in 4 runs, 1.016 once in CI;
        # the published 180 s population up to 1.70); 5 still catches a percent (40-100)
        assert 0 <= r["rtx_overhead"] <= 5 and 0 <= r["frames_dropped_pct"] <= 100
        assert 850 <= r["frames_produced"] <= 30 * 33
        assert r["base_rtt_ms"] * 0.9 <= r["app_rtt_mean_ms"] <= r["app_rtt_inband_mean_ms"] * 1.1
        assert r["base_rtt_ms"] * 0.9 <= r["transport_rtt_mean_ms"] < 5000
        assert r["base_rtt_ms"] / 2 * 0.9 <= r["frame_latency_p50_ms"] <= r["frame_latency_p95_ms"]
        assert math.isnan(r["policer_drops"])  # not policed
    figs = wf / "results" / "figures"
    for name in ("live_bitrate_queue", "delay_tput", "timeseries"):
        for ext in ("pdf", "png", "provenance.json"):
            assert (figs / f"{name}.{ext}").stat().st_size > 0
    prov = json.loads((figs / "live_bitrate_queue.provenance.json").read_text())
    assert {t["variant"] for t in prov["trials"]} <= set(cfg.variant_names())
    assert len({t["household_id"] for t in prov["trials"]}) == 1
    cols = ["household_id", "variant", "health_verdict", "goodput_fb_kbps", "bitrate_mean_kbps",
            "bitrate_switches", "app_rtt_mean_ms", "app_rtt_inband_mean_ms",
            "transport_rtt_mean_ms", "rtx_overhead", "frames_dropped", "frame_latency_p50_ms",
            "frame_latency_p95_ms", "self_delay_mean_ms"]
    print(f"\nlive-quick sweep: {took:.0f} s, {len(trials)} trials, {len(excluded)} excluded")
    print(trials.sort_values(["household_id", "variant"])[cols].to_string(index=False))
    keep = os.environ.get("LIVE_SWEEP_KEEP")  # a directory to keep the tables and figure in
    if keep:
        import shutil

        shutil.copytree(tables, Path(keep) / "tables", dirs_exist_ok=True)
        shutil.copytree(figs, Path(keep) / "figures", dirs_exist_ok=True)
