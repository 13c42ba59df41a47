"""Buffer models (links.buffers): the measured model's numbers and sources, a household's FIFO
from its technology and direction, the default model leaving plans and definitions as they
were, the config key, and clear errors for a wrong model name or a technology without a
buffer."""

from __future__ import annotations

import csv
import dataclasses
import json
import shutil
import subprocess

import pytest
import yaml
from conftest import ROOT, VENV_BIN
from test_linkplan import _qdiscs, veth_ns  # noqa: F401 (a fixture)

from latency_divide.analysis.integrity import check_trial
from latency_divide.cli import main as cli_main
from latency_divide.config import config_hash, load_config
from latency_divide.data.households import get_household
from latency_divide.errors import ConfigError
from latency_divide.links import buffers
from latency_divide.links.plan import MTU_BYTES, link_plan, make_linkplan
from latency_divide.trial import definition, rawio
from latency_divide.trial.spec import TrialSpec
from latency_divide.trial.sweep import alone_args, spec_from_config, trial_ids

MBA = "mba-2014"
FIXTURES = ROOT / "tests" / "data" / "trials"
#: The published reference run's definition ids (tests/test_definition.py, dvc.lock).
PUBLISHED = {"cubic": "def-7b4e62e9a6", "copa-0.2": "def-01a0987011",
             "copa-0.5": "def-8cfa77f619", "copa-0.8": "def-16ce5f986b"}
#: The population run's (config/population.yaml), published too.
POPULATION = {"def-2098d16836", "def-524b6d2173", "def-a6a857dd01", "def-fa76ccbc06"}


def _raw(name: str) -> dict:
    return yaml.safe_load((ROOT / "config" / name).read_text())


# --- the vendored numbers ---------------------------------------------------------------------


def test_the_vendored_medians_are_the_issues_and_cite_their_source():
    """Issue 41 quotes bclear's September 2014 medians of the maximum RTT, rounded to the ms."""
    m = buffers.MBA_2014
    quoted = {("latency_under_load", "uplink"): {"Cable": 426, "DSL": 755, "Fiber": 123},
              ("latency_under_load", "downlink"): {"Cable": 134, "DSL": 137, "Fiber": 148},
              ("idle", "none"): {"Cable": 33, "DSL": 44, "Fiber": 18}}
    for (test, direction), by_tech in quoted.items():
        for tech, ms in by_tech.items():
            assert round(buffers.panel_rtt_ms(m, test, tech, direction)) == ms, (test, tech)
    rows = list(csv.DictReader(m.data.open()))
    assert len(rows) == 20 and all(r["source_file"] and r["period_start"] == "2014-09-07"
                                   for r in rows)
    readme = (m.data.parent / "README.md").read_text()
    for s in ["github.com/UCBoulder/bclear", "506a9939ead7a3e41ec9096abe4e5c1d8b6dd830",
              "Where Has the Time Gone?", "no licence file", "17 U.S.C. 105"]:
        assert s in readme, s


def test_queue_delay_is_loaded_minus_idle_by_technology_and_direction():
    assert buffers.queue_ms(MBA, "CABLE", "uplink") == 393.031  # 425.759 - 32.728
    assert buffers.queue_ms(MBA, "CABLE", "downlink") == 101.16  # 133.888 - 32.728
    assert buffers.queue_ms(MBA, "DSL", "uplink") == 710.937  # 754.848 - 43.911
    assert buffers.queue_ms(MBA, "DSL", "downlink") == 93.035  # 136.946 - 43.911
    assert buffers.queue_ms(MBA, "FIBER", "uplink") == 104.629  # 122.829 - 18.2
    assert buffers.queue_ms(MBA, "FIBER", "downlink") == 129.494  # 147.694 - 18.2
    assert buffers.queue_ms(MBA, "SATELLITE", "uplink") is None  # no panel number: qfactor
    assert buffers.queue_ms("qfactor", "CABLE", "uplink") is None


# --- a household's FIFO -----------------------------------------------------------------------


@pytest.mark.parametrize("hid, up, down", [
    (11406, 56498, 44232),  # CABLE 1150/3498 kbit/s: 393.031*1150/8, 101.16*3498/8
    (10075, 266882, 576037),  # FIBER 20406/35587: 104.629*20406/8, 129.494*35587/8
    (5819, 6398, 14850),  # DSL 72/1277: 710.937*72/8 (just above the floor), 93.035*1277/8
])
def test_a_households_buffer_from_its_technology_and_direction(hid, up, down):
    plan = make_linkplan(get_household(hid), buffer_model=MBA)
    assert (plan.uplink.queue_bytes, plan.downlink.queue_bytes) == (up, down)
    assert plan.buffer_model == MBA
    d = plan.to_dict()
    assert d["buffer_model"] == MBA
    tech = get_household(hid).technology
    for direction in ("uplink", "downlink"):
        rec = d[direction]["buffer"]
        assert rec["model"] == MBA and not rec["floored"]
        assert rec["queue_ms"] == buffers.queue_ms(MBA, tech, direction)
        assert rec["source"].startswith(buffers.MBA_2014.technologies[tech] + f" {direction}")
        # the plan's bfifo limit is the model's bytes
        assert plan.shaper(direction).commands("eth0")[2][-2:] == [
            "limit", f"{d[direction]['queue_bytes']}b"]


def test_a_slow_link_gets_the_floor_and_satellite_keeps_qfactor():
    # DSL 27059: downlink 144 kbit/s, 93.035 ms of it is 1674 bytes: raised to 4 frames
    plan = make_linkplan(get_household(27059), buffer_model=MBA)
    assert buffers.MIN_QUEUE_BYTES == 4 * MTU_BYTES == 6056
    assert plan.downlink.queue_bytes == 6056 and plan.downlink.buffer.floored
    assert "floor of 4 frames" in plan.downlink.buffer.source
    assert plan.uplink.queue_bytes == 10752 and not plan.uplink.buffer.floored  # 710.937*121/8
    # SATELLITE 614188: the panel has no number; qfactor x BDP, recorded as such
    sat = make_linkplan(get_household(614188), qfactor=2, buffer_model=MBA)
    default = make_linkplan(get_household(614188), qfactor=2)
    assert sat.uplink.queue_bytes == default.uplink.queue_bytes == 537142  # 2*1050.646*2045/8
    assert sat.uplink.buffer.queue_ms is None
    assert sat.uplink.buffer.source == "2 x BDP (the panel has no SATELLITE number)"
    text = sat.render_shell()
    assert "buffer model mba-2014: 2 x BDP (the panel has no SATELLITE number)" in text


def test_the_rendered_script_shows_the_measured_queue():
    text = make_linkplan(get_household(11406), buffer_model=MBA).render_shell()
    for s in ["qfactor 2, buffer model mba-2014",
              "queue 393.031 ms * 1150 kbit/s / 8 = 56498 bytes",
              "Cable uplink median_of_rtt_max 2014-09-07: loaded 425.759 - idle 32.728 ms",
              "bfifo limit 56498b"]:
        assert s in text, s


# --- the default model changes nothing --------------------------------------------------------


@pytest.mark.parametrize("hid", [11406, 10075, 5819, 27059, 614188])
def test_the_default_model_leaves_plans_as_they_were(hid):
    hh = get_household(hid)
    plan = make_linkplan(hh)
    assert plan == make_linkplan(hh, buffer_model="qfactor")
    d = plan.to_dict()
    assert "buffer_model" not in d and "buffer" not in d["uplink"] and "buffer" not in d["downlink"]
    assert list(d) == ["household_id", "qfactor", "rtt_ms", "uplink", "downlink", "delay"]
    # the paper's formula, exactly: floor(qfactor * rtt * rate / 8)
    for s in (plan.uplink, plan.downlink):
        assert s.queue_kbit == 2.0 * hh.rtt_ms * s.rate_kbit / 1000
        assert s.queue_bytes == int(2.0 * hh.rtt_ms * s.rate_kbit / 8 + 1e-9)
    assert "buffer model" not in plan.render_shell()


def test_the_default_model_leaves_definitions_as_they_were():
    cfg = load_config(_raw("config.yaml"))
    assert cfg.buffer_model == "qfactor"
    assert {v: d for d, _, _, v, _ in trial_ids(cfg)} == PUBLISHED
    assert {d for d, *_ in trial_ids(load_config(_raw("population.yaml")))} == POPULATION
    for v in cfg.variants:
        d = definition.of_config(cfg, v)
        assert "buffer_model" not in d and "buffer" not in definition.describe(d)
    # a config naming the default is the same run (its config hash differs: the key is there)
    named = _raw("config.yaml") | {"buffer_model": "qfactor"}
    assert {v: d for d, _, _, v, _ in trial_ids(load_config(named))} == PUBLISHED
    assert config_hash(_raw("config.yaml")) != config_hash(named)


def test_a_measured_model_is_its_own_definition():
    base, measured = _raw("population.yaml"), _raw("population-buffers.yaml")
    assert {k: v for k, v in measured.items() if k != "buffer_model"} == base
    a, b = load_config(base), load_config(measured)
    assert b.buffer_model == MBA and a.household_ids() == b.household_ids()
    ids_b = {d for d, *_ in trial_ids(b)}
    assert len(ids_b) == 4 and not ids_b & POPULATION
    d = definition.of_config(b, b.variant("cubic"))
    assert d["buffer_model"] == MBA and "buffer mba-2014" in definition.describe(d)
    assert {k: v for k, v in d.items() if k != "buffer_model"} == \
        definition.of_config(a, a.variant("cubic"))
    # a trial spec of the run carries the model into its definition and its link plan
    hid = b.household_ids()[0]
    spec = spec_from_config(b, get_household(hid, b.buckets), "uplink", "cubic", 1)
    assert spec.definition_id() == definition.definition_id(d)
    plan = spec.link_plan("netem")
    assert plan.buffer_model == MBA
    assert plan == make_linkplan(get_household(hid, b.buckets), buffer_model=MBA)
    # measuring such a trial alone names the model (`latency-divide trial --buffer-model`)
    args = alone_args(b, hid, "uplink", "cubic", 1, "/tmp/x")
    assert args[args.index("--buffer-model") + 1] == MBA
    assert "--buffer-model" not in alone_args(a, hid, "uplink", "cubic", 1, "/tmp/x")


# --- errors -----------------------------------------------------------------------------------


def test_a_wrong_model_name_is_a_clear_error():
    hh = get_household(11406)
    for call in (lambda: make_linkplan(hh, buffer_model="mba2014"),
                 lambda: link_plan(1000, 1000, 20.0, buffer_model="mba2014"),
                 lambda: buffers.check_model("mba2014"),
                 lambda: TrialSpec(household=hh, direction="uplink",
                                   variant=load_config(_raw("test.yaml")).variants[0],
                                   buffer_model="mba2014")):
        with pytest.raises(ConfigError) as e:
            call()
        assert "'mba2014'" in str(e.value) and "allowed: qfactor, mba-2014" in str(e.value)


def test_a_technology_without_a_buffer_is_a_clear_error():
    wireless = dataclasses.replace(get_household(11406), technology="WIRELESS")
    with pytest.raises(ConfigError) as e:
        make_linkplan(wireless, buffer_model=MBA)
    msg = str(e.value)
    assert "household 11406" in msg and "'WIRELESS'" in msg
    assert "allowed: CABLE, DSL, FIBER, SATELLITE" in msg
    make_linkplan(wireless)  # the default model needs no technology
    with pytest.raises(ConfigError, match="needs the household's technology"):
        link_plan(1000, 1000, 20.0, buffer_model=MBA)


# --- the config -------------------------------------------------------------------------------


@pytest.mark.parametrize("value, words", [
    ("bogus", "config: buffer_model = 'bogus': not a buffer model; allowed: qfactor, mba-2014"),
    (2, "config: buffer_model = 2: 2 is not of type 'string'"),
])
def test_config_validates_the_model(value, words):
    with pytest.raises(ConfigError) as e:
        load_config(_raw("config.yaml") | {"buffer_model": value})
    assert words in str(e.value)


def test_config_refuses_a_household_whose_technology_has_no_buffer(tmp_path):
    """A run fails when its config is loaded, not in its first trial."""
    data = tmp_path / "households.csv"
    with open(ROOT / "resources" / "digitaldivide" / "household-internet-data.csv") as f:
        rows = list(csv.reader(f))
    col = rows[0].index("technology")
    for r in rows[1:]:
        if r[rows[0].index("unit_id")] == "11406":
            r[col] = "WIRELESS"
    with open(data, "w", newline="") as f:
        csv.writer(f).writerows(rows)
    raw = _raw("config.yaml")
    load_config(raw, data=data)  # the default model does not care
    with pytest.raises(ConfigError) as e:
        load_config(raw | {"buffer_model": MBA}, data=data)
    assert "config: buffer_model = 'mba-2014': household 11406: technology 'WIRELESS'" in \
        str(e.value)


# --- the CLI and the analysis's check ---------------------------------------------------------


def test_linkplan_cli_takes_the_model(capsys):
    assert cli_main(["linkplan", "11406", "--buffer-model", MBA, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["buffer_model"] == MBA and d["uplink"]["queue_bytes"] == 56498
    assert cli_main(["linkplan", "11406", "--json"]) == 0
    assert "buffer_model" not in json.loads(capsys.readouterr().out)
    with pytest.raises(SystemExit) as e:
        cli_main(["linkplan", "11406", "--buffer-model", "bogus"])
    assert e.value.code == 2 and "invalid choice: 'bogus'" in capsys.readouterr().err


def in_model_definition(tmp_path, model: str):
    """The fixture trial of 799254's uplink (its 2 x BDP plan) moved into the definition of
    ``model``: (its directory, definition, meta.json)."""
    src = next(FIXTURES.glob("def-*/799254/uplink/cubic/rep1"))
    defn = dict(json.loads((src.parents[3] / "definition.json").read_text())["definition"])
    defn["buffer_model"] = model
    def_id = definition.definition_id(defn)
    d = tmp_path / def_id / "799254" / "uplink" / "cubic" / "rep1"
    shutil.copytree(src, d)
    definition.ensure_file(tmp_path / def_id, defn)
    meta = json.loads((d / "meta.json").read_text())
    meta["definition"], meta["definition_id"] = defn, def_id
    (d / "meta.json").write_text(json.dumps(meta))
    return d, defn, meta


def test_the_integrity_check_rebuilds_the_plan_with_the_model(tmp_path):
    """A trial in a measured model's definition directory: a link plan without the model is a
    finding (its queue, its recorded model); the plan the model gives is none."""
    d, defn, meta = in_model_definition(tmp_path, MBA)
    found = [str(f) for f in check_trial(d)]
    assert any("buffer_model: recorded 'qfactor', definition 'mba-2014'" in f for f in found)
    # CABLE 1091 kbit/s up, RTT 26.2835 ms: 2 * 26.2835 * 1091 / 8 and 393.031 * 1091 / 8
    assert any("linkplan.uplink.queue_bytes is 7168; the household and qfactor 2 and buffer "
               "model mba-2014 give 53599" in f for f in found), found
    hh = get_household(799254)
    meta["linkplan"] = make_linkplan(hh, qfactor=defn["qfactor"], buffer_model=MBA,
                                     mechanism=meta["delay_mechanism"]).to_dict()
    (d / "meta.json").write_text(json.dumps(meta))
    assert check_trial(d) == []


def test_a_wrong_model_on_the_command_line_is_a_clear_error(capsys):
    with pytest.raises(SystemExit) as e:
        cli_main(["trial", "11406", "--direction", "uplink", "--cc", "cubic",
                  "--buffer-model", "mba2014", "--out", "/nonexistent"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert ("--buffer-model: invalid choice: 'mba2014': not a buffer model; allowed: qfactor, "
            "mba-2014, queue-<N>ms with N in 1..5000") in err


# --- the real tc ------------------------------------------------------------------------------


@pytest.mark.netns
def test_the_measured_bfifo_on_real_tc(veth_ns):
    """The model's FIFO built in a namespace of our own (tests/test_linkplan.py's fixture): the
    kernel's bfifo limit is the model's bytes, the floor included."""
    for hid in (11406, 27059):
        plan = make_linkplan(get_household(hid), buffer_model=MBA)
        for direction in ("uplink", "downlink"):
            s = plan.shaper(direction)
            for argv in s.commands("ldlpa"):
                veth_ns.run(argv)
            q = {x["kind"]: x for x in _qdiscs(veth_ns, "ldlpa")}
            assert q["bfifo"]["options"]["limit"] == s.queue_bytes
            for argv in s.reset_commands("ldlpa"):
                veth_ns.run(argv)


@pytest.mark.netns
@pytest.mark.slow
def test_a_measured_trial_alone_has_its_workflow_definition(tmp_path):
    """`latency-divide trial` with the arguments of a measured-buffer config's trial
    (trial.sweep.alone_args, as the fidelity checks run it) measures that trial: the same
    definition id as the workflow's, its link plan's FIFO from the model, a passing verdict."""
    cfg = load_config(_raw("population-buffers.yaml"))
    cfg = dataclasses.replace(cfg, trial=dataclasses.replace(cfg.trial, duration_s=3, idle_s=1))
    hid = 11406
    args = alone_args(cfg, hid, "uplink", "cubic", 1, tmp_path)
    res = subprocess.run([str(VENV_BIN / "latency-divide"), *args], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    spec = spec_from_config(cfg, get_household(hid, cfg.buckets), "uplink", "cubic", 1)
    meta = rawio.full_meta(tmp_path / spec.definition_id() / str(hid) / "uplink" / "cubic"
                           / "rep1")  # with the set-up records (the link plan) of its archive
    assert meta["definition"]["buffer_model"] == MBA
    want = make_linkplan(get_household(hid), buffer_model=MBA).shaper("uplink").queue_bytes
    assert meta["linkplan"]["uplink"]["queue_bytes"] == want
    assert meta["health"]["verdict"] == "pass", meta["health"]["reasons"]
