"""Trial definitions: what shapes a trial, its id, and moving format-1 trials into the layout."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml
from conftest import ROOT

from latency_divide.analysis.integrity import check_trial
from latency_divide.config import config_hash, load_config
from latency_divide.errors import ConfigError, LatencyDivideError
from latency_divide.ops.migrate import migrate
from latency_divide.trial import definition
from latency_divide.trial.sweep import trial_ids

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

FIXTURES = ROOT / "tests" / "data" / "trials"
# the ids of the published reference run (dvc.lock): they must never change by accident,
# or a fresh clone would re-measure all 304 trials
PUBLISHED = {"cubic": "def-7b4e62e9a6", "copa-0.2": "def-01a0987011",
             "copa-0.5": "def-8cfa77f619", "copa-0.8": "def-16ce5f986b"}


def _raw(name: str) -> dict:
    return yaml.safe_load((ROOT / "config" / name).read_text())


def test_the_published_definitions_are_stable():
    cfg = load_config(_raw("config.yaml"))
    got = {v: d for d, _, _, v, _ in trial_ids(cfg)}
    assert got == PUBLISHED
    for v in cfg.variants:
        d = definition.of_config(cfg, v)
        assert definition.definition_id(d) == PUBLISHED[v.name]


def test_every_trial_shaping_key_changes_the_id_and_others_do_not():
    base = _raw("config.yaml")
    ids0 = {t[0] for t in trial_ids(load_config(base))}
    shaping = [("qfactor", 3), ("trial.duration_s", 30), ("trial.idle_s", 3),
               ("trial.ping_interval_s", 0.1), ("trial.queue_interval_s", 0.2),
               ("tool.window_bytes", 1 << 20), ("tool.args", ["-gso=false"]),
               ("testbed.delay", "delayline"), ("tool.name", "tperf")]
    neutral = [("trial.repetitions", 3), ("trial.retries", 0), ("tool.path", "/opt/x"),
               ("households.seed", 7)]
    for key, value in shaping + neutral:
        cfg = json.loads(json.dumps(base))
        node = cfg
        *parents, leaf = key.split(".")
        for k in parents:
            node = node[k]
        node[leaf] = value
        if key == "tool.name":
            cfg["tool"]["path"] = "/opt/tperf"
        ids = {t[0] for t in trial_ids(load_config(cfg))}
        if (key, value) in shaping:
            assert not ids & ids0, key
        else:
            assert ids == ids0, key


def test_a_variant_window_is_its_own_definition():
    cfg = load_config(_raw("fast-links.yaml"))
    by_name = {v.name: definition.of_config(cfg, v) for v in cfg.variants}
    assert definition.definition_id(by_name["cubic"]) == PUBLISHED["cubic"]
    assert by_name["cubic-1m"]["tool"]["window_bytes"] == 1 << 20
    assert definition.definition_id(by_name["cubic-1m"]) != PUBLISHED["cubic"]
    assert len({definition.definition_id(d) for d in by_name.values()}) == 8


def test_qlog_is_its_own_definition_for_tperf_on_the_local_testbed_only():
    base = _raw("config.yaml")
    base["tool"].update(name="tperf", path="/opt/tperf")
    plain = {t[0] for t in trial_ids(load_config(base))}
    base["tool"]["qlog"] = False        # false is the default: the same definitions
    assert {t[0] for t in trial_ids(load_config(base))} == plain
    base["tool"]["qlog"] = True
    cfg = load_config(base)
    assert not {t[0] for t in trial_ids(cfg)} & plain
    d = definition.of_config(cfg, cfg.variants[0])
    assert d["tool"]["qlog"] is True and definition.describe(d).count(" qlog;") == 1
    # a variant may say otherwise: its trials are then those of the plain definition
    base["variants"][0]["qlog"] = False
    mixed = load_config(base)
    ids = {v: d for d, _, _, v, _ in trial_ids(mixed)}
    plain_ids = {v: d for d, _, _, v, _ in trial_ids(load_config({**base, "tool": {
        **base["tool"], "qlog": False}, "variants": [{k: x for k, x in v.items() if k != "qlog"}
                                                     for v in base["variants"]]}))}
    assert [ids[v] == plain_ids[v] for v in ids] == [True] + [False] * (len(ids) - 1)
    del base["variants"][0]["qlog"]
    tquic = _raw("config.yaml")
    tquic["tool"]["qlog"] = True
    with pytest.raises(ConfigError, match=r"tool\.qlog = true: only for tool\.name tperf"):
        load_config(tquic)
    base["testbed"].update(kind="ssh", inventory="config/testbeds/x.yaml")
    with pytest.raises(ConfigError, match=r"tool\.qlog = true: only on the local testbed"):
        load_config(base)


@pytest.mark.parametrize("bad", ["gso", "-a b", "-x;rm", "-" + "a" * 250, "--"])
def test_tool_args_are_flags_only(bad):
    cfg = _raw("config.yaml")
    cfg["tool"]["args"] = [bad]
    with pytest.raises(ConfigError, match=r"tool\.args\[0\]"):
        load_config(cfg)


def test_migrate_moves_a_format_1_trial_without_rewriting_it(tmp_path):
    # a format-1 trial: the fixture's cubic trial as the first published run wrote it
    src = next(FIXTURES.glob("def-*/799254/uplink/cubic/rep1"))
    cfg_raw = _raw("test.yaml")
    cfg_raw["households"]["buckets"] = [{"name": "0-30", "min": 0, "max": 30, "ids": [799254]}]
    cfg_raw["trial"]["idle_s"] = 1.5
    legacy = tmp_path / "raw" / "799254" / "uplink" / "cubic" / "rep1"
    shutil.copytree(src, legacy)
    meta = json.loads((legacy / "meta.json").read_text())
    for k in ("definition", "definition_id"):
        del meta[k]
    meta["format_version"] = 1
    meta["config_hash"] = config_hash(cfg_raw)
    (legacy / "meta.json").write_text(json.dumps(meta))
    before = {p.name: p.read_bytes() for p in legacy.iterdir()}

    # another configuration (another hash) is refused, nothing moved
    other = json.loads(json.dumps(cfg_raw))
    other["trial"]["retries"] = 5
    with pytest.raises(LatencyDivideError, match="recorded config_hash"):
        migrate(tmp_path / "raw", other)
    assert legacy.is_dir()

    moves = migrate(tmp_path / "raw", cfg_raw)
    dst = tmp_path / "raw" / src.parts[-5] / "799254" / "uplink" / "cubic" / "rep1"
    assert moves == [(legacy, dst)]
    assert not (tmp_path / "raw" / "799254").exists()
    assert {p.name: p.read_bytes() for p in dst.iterdir()} == before
    assert definition.read(dst.parents[3]) == json.loads(
        (src.parents[3] / "definition.json").read_text())["definition"]
    assert check_trial(dst) == []


def test_a_definition_file_that_does_not_fit_its_directory_is_a_finding(tmp_path):
    src = next(FIXTURES.glob("def-*/799254/uplink/cubic/rep1"))
    d = tmp_path / src.relative_to(FIXTURES)
    shutil.copytree(src, d)
    defn = json.loads((src.parents[3] / "definition.json").read_text())
    defn["definition"]["qfactor"] = 3.0
    (d.parents[3] / "definition.json").write_text(json.dumps(defn))
    found = [str(f) for f in check_trial(d)]
    assert found and "definition.json: its definition hashes to def-" in found[0], found


def test_tperf_runs_bbr_paced_and_that_is_its_own_definition():
    from latency_divide.trial.spec import sender_argv

    cfg = load_config(_raw("population-mvfst.yaml"))
    ids = {v: d for d, _, _, v, _ in trial_ids(cfg)}
    # the BBR trials run before pacing (mvfst ran Cubic for them) are not this definition's;
    # the other variants keep their published ids
    assert ids == {"cubic": "def-f71b1c28dd", "bbr": "def-09b3833fdf",
                   "copa-0.04": "def-d303339c9d", "copa-0.5": "def-30ee812074"}
    bbr = definition.of_config(cfg, cfg.variant("bbr"))
    assert bbr["tool"]["pacing"] is True and "paced" in definition.describe(bbr)
    assert "pacing" not in definition.of_config(cfg, cfg.variant("cubic"))["tool"]
    # tquic-perf paces by itself: its BBR definitions are unchanged
    tq = load_config(_raw("population.yaml"))
    assert "pacing" not in definition.of_config(tq, tq.variant("bbr"))["tool"]
    assert definition.paced("tperf", "bbr") and not definition.paced("tquic-perf", "bbr")
    assert not definition.paced("tperf", "cubic") and not definition.paced("tperf", "copa")
    # the sender's command line: -pacing=true for tperf's BBR only
    from latency_divide.config import ToolSettings, Variant
    from latency_divide.data.households import get_household
    from latency_divide.trial.spec import TrialSpec

    def argv(tool: str, cc: str) -> list[str]:
        spec = TrialSpec(household=get_household(9747), direction="uplink",
                         variant=Variant(name=cc, cc=cc),
                         tool=ToolSettings(name=tool, path=None, window_bytes=65536))
        assert definition.definition_id(spec.definition()) == definition.definition_id(
            definition.make_definition(**{**_spec_kw(spec), "pacing": tool == "tperf"
                                          and cc == "bbr"}))
        return sender_argv(spec, tool, None, "10.0.0.1")

    assert argv("tperf", "bbr").count("-pacing=true") == 1
    assert "-pacing=true" not in argv("tperf", "cubic") + argv("tquic-perf", "bbr")


def _spec_kw(spec) -> dict:
    return dict(testbed="local", delay=spec.delay, qfactor=spec.qfactor,
                duration_s=spec.duration_s, idle_s=spec.idle_s,
                ping_interval_s=spec.ping_interval_s, queue_interval_s=spec.queue_interval_s,
                tool_name=spec.tool.name, window_bytes=spec.tool.window_bytes,
                tool_args=spec.tool.args, cc=spec.variant.cc, delta=spec.variant.delta,
                qlog=spec.tool.qlog)
