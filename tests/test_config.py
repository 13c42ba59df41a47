"""Config loading: the shipped configs, and every kind of error naming its key and value."""

import copy
import json
import re

import pytest
import yaml

from conftest import ROOT
from latency_divide.cli import main as cli_main
from latency_divide.data.buckets import PAPER_IDS
from latency_divide.config import load_config
from latency_divide.errors import ConfigError

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared


@pytest.fixture(scope="module")
def base() -> dict:
    with open(ROOT / "config" / "config.yaml") as f:
        return yaml.safe_load(f)


def variant(cfg, **kv):
    c = copy.deepcopy(cfg)
    for path, value in kv.items():
        *parents, last = path.split("__")
        node = c
        for p in parents:
            node = node[int(p)] if p.isdigit() else node[p]
        if value is DELETE:
            del node[int(last) if last.isdigit() else last]
        else:
            node[int(last) if last.isdigit() else last] = value
    return c


DELETE = object()


def test_default_config_is_the_paper_run(base):
    c = load_config(ROOT / "config" / "config.yaml")
    # bucket by bucket (the IDs themselves are pinned in test_buckets.py)
    assert dict(c.households_by_bucket) == PAPER_IDS
    assert c.household_ids() == [h for ids in PAPER_IDS.values() for h in ids]
    assert len(c.household_ids()) == 38
    assert [b.name for b in c.buckets] == ["0-30", "30-40", "40-50", "50+"]
    assert c.buckets[-1].max_usd is None
    assert c.qfactor == 2.0 and c.directions == ("uplink", "downlink")
    assert [(v.name, v.cc, v.delta) for v in c.variants] == [
        ("cubic", "cubic", None), ("copa-0.2", "copa", 0.2), ("copa-0.5", "copa", 0.5),
        ("copa-0.8", "copa", 0.8)]
    assert c.trial.duration_s == 60 and c.trial.queue_interval_s == 0.1
    assert c.tool.name == "tquic-perf" and c.tool.binary().name == "tquic-perf"
    assert c.testbed.kind == "local"
    assert c.bucket_of_household(11406) == "0-30"
    assert c.variant("copa-0.5").delta == 0.5
    assert load_config(base).household_ids() == c.household_ids()  # mapping == file


@pytest.mark.parametrize("name", ["quick.yaml", "test.yaml"])
def test_small_configs(name):
    c = load_config(ROOT / "config" / name)
    assert len(c.household_ids()) == 2
    assert len({c.bucket_of_household(h) for h in c.household_ids()}) == 2
    assert c.variant_names() == ["cubic", "copa-0.5"]
    assert c.trial.duration_s <= 20


def test_every_key_of_the_default_config_has_a_comment():
    """Each key line carries a comment, on the line or just above it; a key repeated later
    (the fields of the second to fourth bucket) is documented by its first occurrence."""
    key = re.compile(r"^\s*(?:- )?([A-Za-z_]+):")
    lines = (ROOT / "config" / "config.yaml").read_text().splitlines()
    documented = set()
    for i, line in enumerate(lines):
        m = key.match(line)
        if not m:
            continue
        if "#" in line or (i > 0 and lines[i - 1].strip().startswith("#")):
            documented.add(m.group(1))
        else:
            assert m.group(1) in documented, f"config.yaml line {i + 1} has no comment: {line!r}"


def test_sampled_buckets_match_the_cli_draw(base, capsys):
    """What buckets.py promises: a config with ``seed: S`` and ``sample: N`` for bucket B
    gives exactly the households `latency-divide sample --bucket B -n N --seed S` prints.
    Two sampled buckets: each must draw with its own generator, seeded with the config's seed
    (one generator shared by the buckets would give the second bucket other households)."""
    cfg = variant(base, households__seed=7, households__buckets=[
        {"name": "0-30", "min": 0, "max": 30, "sample": 10},
        {"name": "50+", "min": 50, "max": None, "sample": 5}])
    c = load_config(cfg)
    for name, n in (("0-30", 10), ("50+", 5)):
        assert cli_main(["sample", "--bucket", name, "-n", str(n), "--seed", "7", "--json"]) == 0
        printed = [r["unit_id"] for r in json.loads(capsys.readouterr().out)]
        assert list(c.households_by_bucket[name]) == printed, name
    # the config's seed is the one used: the default seed draws other households
    seed1 = load_config(variant(cfg, households__seed=1))
    assert c.households_by_bucket != seed1.households_by_bucket


@pytest.mark.parametrize(
    "change, words",
    [
        ({"colour": "red"}, ["unknown key colour"]),
        ({"trial__durations": 5}, ["unknown key trial.durations", "allowed here", "duration_s"]),
        ({"variants__0__speed": 1}, ["unknown key variants[0].speed"]),
        ({"households__buckets__0__price": 3}, ["unknown key households.buckets[0].price"]),
        ({"qfactor": "two"}, ["qfactor", "'two'"]),
        ({"qfactor": 0}, ["qfactor", "0"]),
        ({"trial__duration_s": 0}, ["trial.duration_s", "0"]),
        ({"trial__duration_s": -3}, ["trial.duration_s", "-3"]),
        ({"trial__repetitions": 1.5}, ["trial.repetitions", "1.5"]),
        ({"variants__1__delta": 0}, ["variants[1].delta", "0"]),
        ({"variants__1__delta": 1.5}, ["variants[1].delta", "1.5"]),
        ({"variants__1__cc": "reno"}, ["variants[1].cc", "'reno'"]),
        ({"variants": []}, ["variants", "[]"]),
        ({"directions": ["up"]}, ["directions[0]", "'up'"]),
        ({"tool__name": "iperf"}, ["tool.name", "'iperf'"]),
        ({"testbed__delay": "tbf"}, ["testbed.delay", "'tbf'"]),
        ({"trial": DELETE}, ["'trial' is a required property"]),
        ({"variants__1__name": "cubic"}, ["variants[1].name", "'cubic'", "repeated"]),
        ({"variants__0__delta": 0.5}, ["variants[0].delta", "0.5", "copa only"]),
        ({"variants__1__delta": DELETE}, ["variants[1]", "copa-0.2", "delta"]),
        ({"households__buckets__0__ids": [11406, 123]}, ["unknown household ID 123", "0-30"]),
        ({"households__buckets__1__ids": [11406]}, ["11406", "$6.99", "30-40"]),
        ({"households__buckets__1__min": 25}, ["households.buckets[1]", "overlaps", "'0-30'"]),
        ({"households__buckets__0__sample": 3}, ["households.buckets[0]", "ids", "sample"]),
        ({"households__buckets__0__ids": DELETE}, ["households.buckets[0]", "ids", "sample"]),
        ({"households__buckets__0__sample": 100000, "households__buckets__0__ids": DELETE},
         ["'0-30'", "cannot sample 100000"]),
        ({"households__buckets__0__max": None}, ["'30-40'", "unbounded"]),
        ({"tool__name": "tperf"}, ["tool.path", "tperf"]),
        ({"testbed__kind": "ssh"}, ["testbed.inventory", "ssh"]),
        ({"trial__repetitions": [0, 2]}, ["trial.repetitions[0]", "0"]),
        ({"trial__repetitions": [2, 2]}, ["trial.repetitions", "[2, 2]"]),
        ({"households__buckets__2__repetitions": [1, 5000]},
         ["households.buckets[2].repetitions[1]", "5000"]),
        ({"trial__order": "random"}, ["trial.order", "'random'"]),
        ({"figures__draw": ["percentiles"]}, ["figures.draw", "'percentiles'",
                                              "allowed: delay_tput, self_delay, timeseries"]),
        ({"figures__draw": ["delay_tput", "delay_tput"]}, ["figures.draw", "non-unique"]),
        ({"figures__draw": "divide"}, ["figures.draw", "'divide'"]),
    ],
)
def test_config_errors_name_key_and_value(base, change, words):
    with pytest.raises(ConfigError) as e:
        load_config(variant(base, **change))
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_not_a_mapping_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("households: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    lst = tmp_path / "list.yaml"
    lst.write_text("- 1\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(lst)


def test_load_config_does_not_modify_its_input(base):
    before = copy.deepcopy(base)
    load_config(base)
    assert base == before


def test_repetitions_by_number_and_by_bucket(base):
    """``repetitions`` is a count (1..N) or the repetition numbers themselves; a bucket may
    name its own (a published repetition 1 measured again as 2, 3, 4)."""
    from latency_divide.trial.sweep import trial_ids

    c = load_config(variant(base, trial__repetitions=[2], households__buckets__3__repetitions=3))
    fast = set(c.households_by_bucket["50+"])
    for _, hid, _, _, rep in trial_ids(c):
        assert rep in ((1, 2, 3) if hid in fast else (2,)), (hid, rep)
    assert c.repetitions_of(next(iter(fast))) == (1, 2, 3)
    assert len(trial_ids(c)) == 2 * 4 * (len(c.household_ids()) + 2 * len(fast))
    # the definitions are those of the count form: repetitions do not shape a trial
    assert {t[0] for t in trial_ids(c)} == {t[0] for t in trial_ids(load_config(base))}


def test_shuffled_order_is_a_seeded_permutation(base):
    from latency_divide.trial.sweep import trial_ids

    sweep = trial_ids(load_config(base))
    shuffled = trial_ids(load_config(variant(base, trial__order="shuffled")))
    assert shuffled != sweep and sorted(shuffled) == sorted(sweep)
    assert shuffled == trial_ids(load_config(variant(base, trial__order="shuffled")))
    other = trial_ids(load_config(variant(base, trial__order="shuffled", households__seed=2)))
    assert other != shuffled


def test_figures_draw_picks_among_the_figures_a_run_can_draw(base):
    """figures.draw: every drawable figure by default, those listed in the run's order, none
    with an empty list; `divide` needs Cubic and Copa."""
    assert load_config(base).figures == ("delay_tput", "self_delay", "timeseries", "divide")
    picked = load_config(variant(base, figures__draw=["divide", "delay_tput"]))
    assert picked.figures == ("delay_tput", "divide")
    assert load_config(variant(base, figures__draw=[])).figures == ()
    no_copa = variant(base, variants=[{"name": "cubic", "cc": "cubic"}])
    assert "divide" not in load_config(no_copa).figures
    with pytest.raises(ConfigError, match="'divide' is not a figure this run can draw"):
        load_config(variant(no_copa, figures__draw=["divide"]))
