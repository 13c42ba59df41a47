"""Live broadcasts in the workflow (issue 58; docs/live.md): the config's app (tool.app, a
variant's app) in the trial definition and the tool's argv, bulk definitions unchanged (pinned),
Facebook's metrics and the policer's drops in the trials table (a real short live trial in
namespaces), and the small live sweep through Snakemake with its figure (slow tier)."""

from __future__ import annotations

import copy
import math

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
    raw["tool"]["window_bytes"] = 65536            # set: kept, even for live
    raw["tool"]["app"]["seed"] = 7
    raw["variants"].append({"name": "cubic-bulk", "cc": "cubic", "app": {"kind": "bulk"}})
    cfg = load_config(raw)
    assert cfg.tool_for(cfg.variant("cubic-rate")).window_bytes == 65536
    assert cfg.tool_for(cfg.variant("cubic-rate")).args == ("-app=live", "-abr=rate", "-seed=7")
    assert cfg.tool_for(cfg.variant("cubic-bulk")).args == ()
    del raw["tool"]["window_bytes"]
    cfg = load_config(raw)
    assert cfg.tool_for(cfg.variant("cubic-bulk")).window_bytes == 65536  # bulk's default
    # a bulk variant in a live config is the bulk definition of the same settings
    bulk = copy.deepcopy(raw)
    del bulk["tool"]["app"]
    bulk["variants"] = [{"name": "cubic-bulk", "cc": "cubic"}]
    assert _ids(cfg)["cubic-bulk"] == _ids(load_config(bulk))["cubic-bulk"]


@pytest.mark.parametrize("where, app, named", [
    ("tool", {"kind": "live", "abr": "bola"}, "tool.app.abr = 'bola': 'bola' is not one of "
                                              "['backlog', 'rate']"),
    ("variant", {"kind": "live", "abr": "bbr"}, "variants[0].app.abr = 'bbr'"),
    ("tool", {"kind": "live"}, "tool.app: kind live needs abr (backlog or rate)"),
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
