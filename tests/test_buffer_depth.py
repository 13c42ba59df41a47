"""Buffer depth as a factor (issue 41, step 3): the fixed-delay buffer models ``queue-<N>ms``
(links.buffers), their names on the command line and in a config, a plan and a definition
carrying one, and the sweep's four configs per tool: config/buffer-depth-<N>ms.yaml (tquic-perf),
40 households of the population draw, chosen by bench/buffer_depth_households.py, with
population.yaml's definitions plus the model; config/buffer-depth-mvfst-<N>ms.yaml (mvfst's
tperf), the same households with population-mvfst.yaml's definitions plus the model. Quick: no
namespace, no trial."""

from __future__ import annotations

import json
import random
import subprocess

import pytest
import yaml
from conftest import ROOT, VENV_BIN
from test_buffers import in_model_definition

from latency_divide.analysis.integrity import check_trial
from latency_divide.cli import main as cli_main
from latency_divide.config import load_config
from latency_divide.data.households import get_household
from latency_divide.errors import ConfigError
from latency_divide.links import buffers
from latency_divide.links.plan import link_plan, make_linkplan
from latency_divide.trial import definition
from latency_divide.trial.sweep import alone_args, spec_from_config, trial_ids

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

Q500 = "queue-500ms"
DEPTHS = (100, 200, 500, 1000)
ALLOWED = ("allowed: qfactor, mba-2014, queue-<N>ms with N in 1..5000, "
           "policed-<N>ms with N in 1..5000 (the burst, ms at the rate)")
#: The population run's definition ids (config/population.yaml; tests/test_buffers.py).
POPULATION = {"def-2098d16836", "def-524b6d2173", "def-a6a857dd01", "def-fa76ccbc06"}


def _raw(name: str) -> dict:
    return yaml.safe_load((ROOT / "config" / name).read_text())


def _depth(ms: int) -> str:
    return f"buffer-depth-{ms}ms.yaml"


def _mvfst(ms: int) -> str:
    return f"buffer-depth-mvfst-{ms}ms.yaml"


# --- the model --------------------------------------------------------------------------------


def test_a_fixed_model_is_n_ms_at_the_households_rate():
    """CABLE 11406, 1150/3498 kbit/s, RTT 67.222 ms: 500 ms is 500*1150/8 and 500*3498/8 bytes,
    whatever its RTT and qfactor."""
    hh = get_household(11406)
    plan = make_linkplan(hh, buffer_model=Q500)
    assert (plan.uplink.queue_bytes, plan.downlink.queue_bytes) == (71875, 218625)
    up = plan.uplink.buffer
    assert (up.model, up.queue_ms, up.queue_kbit, up.floored) == (Q500, 500.0, 575.0, False)
    assert up.source == "fixed 500 ms of queue at the link's rate"
    assert plan.uplink.commands("eth0")[2][-2:] == ["limit", "71875b"]
    assert make_linkplan(hh, qfactor=4, buffer_model=Q500).uplink.queue_bytes == 71875
    assert link_plan(1150, 3498, 5.0, buffer_model=Q500).downlink.queue_bytes == 218625
    assert make_linkplan(hh, buffer_model="queue-100ms").uplink.queue_bytes == 14375
    assert make_linkplan(hh, buffer_model="queue-1000ms").downlink.queue_bytes == 437250


def test_a_fixed_model_has_the_floor():
    assert buffers.buffer(Q500, "uplink", 96, 20.0, 2).queue_bytes == buffers.MIN_QUEUE_BYTES
    assert buffers.buffer(Q500, "uplink", 96, 20.0, 2).floored  # 6000 bytes < 4 frames
    b = buffers.buffer(Q500, "uplink", 97, 20.0, 2)  # 6062.5
    assert (b.queue_bytes, b.floored) == (6062, False)
    # DSL 5819, 72 kbit/s up: 4500 bytes at 500 ms, raised; 9000 at 1000 ms
    plan = make_linkplan(get_household(5819), buffer_model=Q500)
    assert plan.uplink.queue_bytes == 6056 and plan.uplink.buffer.floored
    assert plan.uplink.buffer.source == ("fixed 500 ms of queue at the link's rate; "
                                         "floor of 4 frames")
    assert "(raised to the floor)" in plan.render_shell()
    deeper = make_linkplan(get_household(5819), buffer_model="queue-1000ms")
    assert deeper.uplink.queue_bytes == 9000 and not deeper.uplink.buffer.floored


def test_a_fixed_model_serves_every_technology_satellite_included():
    # SATELLITE 614188, 2045 kbit/s up: 500*2045/8, not mba-2014's qfactor fallback (537142)
    plan = make_linkplan(get_household(614188), buffer_model=Q500)
    assert plan.uplink.queue_bytes == 127812 and plan.uplink.buffer.queue_ms == 500.0
    for tech in ("CABLE", "DSL", "FIBER", "SATELLITE", "WIRELESS", None):
        assert buffers.buffer(Q500, "uplink", 2045, 1050.0, 2, tech).queue_bytes == 127812
        assert buffers.queue_ms(Q500, tech, "downlink") == 500.0
    with pytest.raises(ConfigError, match="direction 'sideways'"):
        buffers.buffer(Q500, "sideways", 2045, 1050.0, 2)


def test_the_rendered_script_shows_the_fixed_queue():
    text = make_linkplan(get_household(11406), buffer_model=Q500).render_shell()
    for s in ["# rtt 67.222 ms, qfactor 2, buffer model queue-500ms (qfactor not used)",
              "# uplink: 1150 kbit/s; queue 500 ms * 1150 kbit/s / 8 = 71875 bytes",
              "# buffer model queue-500ms: fixed 500 ms of queue at the link's rate",
              "bfifo limit 71875b", "bfifo limit 218625b"]:
        assert s in text, s
    assert "qfactor not used" not in make_linkplan(get_household(11406),
                                                   buffer_model="mba-2014").render_shell()


# --- names ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["qfactor", "mba-2014", "queue-1ms", "queue-100ms",
                                  "queue-500ms", "queue-5000ms"])
def test_model_names_accepted(name):
    assert buffers.check_model(name) == name
    assert load_config(_raw("config.yaml") | {"buffer_model": name}).buffer_model == name


@pytest.mark.parametrize("name", ["queue-0ms", "queue-5001ms", "queue-9000ms", "queue-10",
                                  "mba2014", "queue-0500ms", "queue--5ms", "queue-1.5ms",
                                  "Queue-500ms", "queue-500ms ", "queue-500", "500ms", "", 500,
                                  None])
def test_a_wrong_model_name_names_itself_and_the_allowed_ones(name):
    with pytest.raises(ConfigError) as e:
        buffers.check_model(name)
    assert str(e.value) == f"buffer model = {name!r}: not a buffer model; {ALLOWED}"
    for call in (lambda: link_plan(1000, 1000, 20.0, buffer_model=name),
                 lambda: buffers.buffer(name, "uplink", 1000, 20.0, 2)):
        with pytest.raises(ConfigError, match="not a buffer model"):
            call()
    if isinstance(name, str):
        with pytest.raises(ConfigError) as e:
            load_config(_raw("config.yaml") | {"buffer_model": name})
        assert f"config: buffer_model = {name!r}: not a buffer model; {ALLOWED}" in str(e.value)


def test_the_command_line_takes_a_fixed_model_and_names_a_wrong_one(capsys):
    assert cli_main(["linkplan", "11406", "--buffer-model", Q500, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["buffer_model"] == Q500 and d["uplink"]["queue_bytes"] == 71875
    assert d["uplink"]["buffer"] == {"model": Q500, "queue_ms": 500.0, "floored": False,
                                     "source": "fixed 500 ms of queue at the link's rate"}
    for argv in (["linkplan", "11406"],
                 ["trial", "11406", "--direction", "uplink", "--cc", "cubic", "--out", "/x"]):
        for bad in ("queue-0ms", "queue-9000ms", "queue-10", "mba2014"):
            with pytest.raises(SystemExit) as e:
                cli_main([*argv, "--buffer-model", bad])
            err = capsys.readouterr().err
            assert e.value.code == 2
            assert (f"argument --buffer-model: invalid choice: {bad!r}: not a buffer model; "
                    f"{ALLOWED}") in err


# --- a plan, a definition, a trial ------------------------------------------------------------


def test_a_plan_and_a_definition_carry_the_fixed_model():
    cfg = load_config(_raw(_depth(500)))
    hid = 11406 if 11406 in cfg.household_ids() else cfg.household_ids()[0]
    hh = get_household(hid, cfg.buckets)
    spec = spec_from_config(cfg, hh, "uplink", "cubic", 1)
    plan = spec.link_plan("netem")
    assert plan.buffer_model == Q500 and plan.to_dict()["buffer_model"] == Q500
    assert plan == make_linkplan(hh, buffer_model=Q500)
    d = definition.of_config(cfg, cfg.variant("cubic"))
    assert d["buffer_model"] == Q500 and "buffer queue-500ms" in definition.describe(d)
    assert spec.definition_id() == definition.definition_id(d)
    args = alone_args(cfg, hid, "uplink", "cubic", 1, "/tmp/x")
    assert args[args.index("--buffer-model") + 1] == Q500


def test_the_integrity_check_rebuilds_a_fixed_models_plan(tmp_path):
    """A fixture trial moved into a queue-500ms definition: its 2 x BDP plan is a finding, the
    plan the model gives is none (the analysis handles the family like mba-2014)."""
    d, defn, meta = in_model_definition(tmp_path, Q500)
    found = [str(f) for f in check_trial(d)]
    # CABLE 1091 kbit/s up: 2 * 26.2835 * 1091 / 8 against 500 * 1091 / 8
    assert any("linkplan.uplink.queue_bytes is 7168; the household and qfactor 2 and buffer "
               "model queue-500ms give 68187" in f for f in found), found
    meta["linkplan"] = make_linkplan(get_household(799254), qfactor=defn["qfactor"],
                                     buffer_model=Q500,
                                     mechanism=meta["delay_mechanism"]).to_dict()
    (d / "meta.json").write_text(json.dumps(meta))
    assert check_trial(d) == []


# --- the sweep's configs ----------------------------------------------------------------------


def test_the_four_configs_are_population_yamls_uplinks_of_40_households():
    pop = load_config(_raw("population.yaml"))
    drawn = {h: b for b, ids in pop.households_by_bucket.items() for h in ids}
    seen_ids, first = set(), None
    for ms in DEPTHS:
        raw = _raw(_depth(ms))
        cfg = load_config(raw)
        assert cfg.buffer_model == f"queue-{ms}ms"
        assert cfg.directions == ("uplink",) and cfg.variant_names() == ["cubic", "bbr",
                                                                          "copa-0.04"]
        hids = cfg.household_ids()
        assert len(hids) == len(set(hids)) == 40
        # each in the population draw, in the bucket the draw sorted it into
        assert {h: cfg.bucket_of_household(h) for h in hids} == {h: drawn[h] for h in hids}
        assert [b.name for b in cfg.buckets] == [b.name for b in pop.buckets]
        assert [(b.min_usd, b.max_usd) for b in cfg.buckets] == \
            [(b.min_usd, b.max_usd) for b in pop.buckets]
        # population.yaml's definitions, plus the model
        for v in cfg.variants:
            assert v == pop.variant(v.name)
            d = definition.of_config(cfg, v)
            assert d.pop("buffer_model") == f"queue-{ms}ms"
            assert d == definition.of_config(pop, pop.variant(v.name))
        ids = trial_ids(cfg)
        assert len(ids) == 120 and {r for *_, r in ids} == {1}
        defs = {x[0] for x in ids}
        assert len(defs) == 3 and not defs & (POPULATION | seen_ids)
        seen_ids |= defs
        # the four differ in the model only
        rest = {k: v for k, v in raw.items() if k != "buffer_model"}
        assert rest == (first := first or rest)
        assert "population_sample" not in raw["households"]
        head = (ROOT / "config" / _depth(ms)).read_text().split("\nhouseholds:", 1)[0]
        assert (f".venv/bin/snakemake trials --cores 1 --configfile config/{_depth(ms)}"
                in head)
    # companions of the main run: analysed, and the sweep built (rules/depth.smk), once all
    # their trials are on disk
    assert {_depth(ms) for ms in DEPTHS} <= {c.rsplit("/", 1)[-1]
                                             for c in _raw("config.yaml")["companions"]}


def test_the_script_prints_the_configs_households_by_its_rule():
    res = subprocess.run([str(VENV_BIN / "python"), str(ROOT / "bench" /
                                                        "buffer_depth_households.py"), "--json"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    chosen = json.loads(res.stdout)
    for ms in DEPTHS:
        cfg = load_config(_raw(_depth(ms)))
        assert {b: list(ids) for b, ids in cfg.households_by_bucket.items()} == chosen
    # the rule, written out again: per bucket 40 x its share of the 240 by largest remainder
    # (22, 84, 23, 111 -> 4, 14, 4, 18), one random.Random(41), buckets in order, ids sorted
    pop = load_config(_raw("population.yaml"))
    sizes = [len(ids) for ids in pop.households_by_bucket.values()]
    assert sizes == [22, 84, 23, 111]
    rng = random.Random(41)
    want = {b: sorted(rng.sample(sorted(ids), k))
            for (b, ids), k in zip(pop.households_by_bucket.items(), (4, 14, 4, 18))}
    assert chosen == want


def test_the_mvfst_configs_are_the_same_40_uplinks_with_population_mvfst_yamls_tool():
    """tperf's sweep: per depth the households of tquic-perf's config at that depth, the
    variants cubic, bbr, copa-0.04, trial settings and tool section of population-mvfst.yaml
    exactly (as population-mvfst-buffers.yaml has them for mba-2014), definitions of their own."""
    popm_raw = _raw("population-mvfst.yaml")
    popm = load_config(popm_raw)
    assert _raw("population-mvfst-buffers.yaml")["tool"] == popm_raw["tool"]
    drawn = {h: b for b, ids in popm.households_by_bucket.items() for h in ids}
    quic_defs, seen, first = set(), set(), None
    for ms in DEPTHS:
        raw, quic_raw = _raw(_mvfst(ms)), _raw(_depth(ms))
        cfg, quic = load_config(raw), load_config(quic_raw)
        quic_defs |= {x[0] for x in trial_ids(quic)}
        assert cfg.buffer_model == quic.buffer_model == f"queue-{ms}ms"
        assert cfg.directions == ("uplink",)
        assert cfg.variant_names() == ["cubic", "bbr", "copa-0.04"]
        # tquic-perf's households at this depth, listed alike; in tperf's population draw too
        assert raw["households"] == quic_raw["households"]
        assert cfg.households_by_bucket == quic.households_by_bucket
        assert len(cfg.household_ids()) == 40
        assert {h: cfg.bucket_of_household(h) for h in cfg.household_ids()} == \
            {h: drawn[h] for h in cfg.household_ids()}
        # population-mvfst.yaml's variants, trial settings and tool (tperf, window, flags, qlog)
        assert raw["variants"] == [v for v in popm_raw["variants"]
                                   if v["name"] in ("cubic", "bbr", "copa-0.04")]
        for k in ("trial", "tool", "testbed", "qfactor"):
            assert raw[k] == popm_raw[k], k
        assert cfg.tool == popm.tool and cfg.tool.name == "tperf" and cfg.tool.qlog
        for v in cfg.variants:
            d = definition.of_config(cfg, v)
            assert d.pop("buffer_model") == f"queue-{ms}ms"
            assert d == definition.of_config(popm, popm.variant(v.name))
            assert d["tool"]["qlog"] is True
        ids = trial_ids(cfg)
        assert len(ids) == 120 and {r for *_, r in ids} == {1}
        assert sorted(t[1:] for t in ids) == sorted(t[1:] for t in trial_ids(quic))
        defs = {x[0] for x in ids}
        assert len(defs) == 3 and not defs & seen
        seen |= defs
        # the four differ in the model only
        rest = {k: v for k, v in raw.items() if k != "buffer_model"}
        assert rest == (first := first or rest)
        head = (ROOT / "config" / _mvfst(ms)).read_text().split("\nhouseholds:", 1)[0]
        assert (f".venv/bin/snakemake trials --cores 1 --configfile config/{_mvfst(ms)}"
                in head)
    # none of tquic-perf's sweep's nor tperf's population run's definitions
    assert not seen & quic_defs
    assert not seen & {t[0] for t in trial_ids(popm)}
    # companions of the main run, after tquic-perf's depth configs
    listed = [c.rsplit("/", 1)[-1] for c in _raw("config.yaml")["companions"]]
    first = listed.index(_depth(DEPTHS[0]))
    assert listed[first:first + 8] == [_depth(ms) for ms in DEPTHS] + [_mvfst(ms) for ms in DEPTHS]
