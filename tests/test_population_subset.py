"""households.population_sample.subset (issue 58, item 4): a run that measures a seeded subset
of a population draw, spread over the price buckets in proportion (links.population, step 6),
and config/live-policed.yaml, the live population's policed variant on 40 of its 240."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter

import pytest
import yaml

from conftest import ROOT, VENV_BIN
from netns_util import copy_workflow
from latency_divide.cli import main as cli_main
from latency_divide.config import load_config
from latency_divide.errors import ConfigError
from latency_divide.links.population import (
    PopulationSample,
    composition,
    population_draw,
    population_frame,
)
from latency_divide.links.subset import Subset, add_to_composition, proportional_allocation
from latency_divide.trial import definition
from latency_divide.trial.sweep import trial_ids

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

LIVE = ROOT / "config" / "live.yaml"
POLICED = ROOT / "config" / "live-policed.yaml"
#: config/live.yaml's draw per bucket (test_population_sample.POPULATION_PER_BUCKET) and the
#: subset's share of 40 by largest remainder: 40 x 22/240 = 3.67 -> 4, 14.0, 3.83 -> 4, 18.5 -> 18
DRAW_PER_BUCKET = {"0-30": 22, "30-40": 84, "40-50": 23, "50+": 111}
SUBSET_PER_BUCKET = {"0-30": 4, "30-40": 14, "40-50": 4, "50+": 18}


@pytest.fixture(scope="module")
def live():
    return load_config(LIVE)


@pytest.fixture(scope="module")
def policed():
    return load_config(POLICED)


def _raw(path=POLICED) -> dict:
    return yaml.safe_load(path.read_text())


def _with_subset(subset, path=POLICED) -> dict:
    raw = _raw(path)
    if subset is None:
        raw["households"]["population_sample"].pop("subset", None)
    else:
        raw["households"]["population_sample"]["subset"] = subset
    return raw


def _draw(cfg, subset=None):
    spec = PopulationSample.from_dict({**cfg.population.to_dict(), "subset": subset})
    return population_draw(spec, cfg.buckets, cfg.seed, qfactor=cfg.qfactor)


# --- the subset ---------------------------------------------------------------------------

def test_the_policed_run_is_40_of_the_live_draw_in_its_buckets_in_proportion(live, policed):
    assert {b: len(ids) for b, ids in live.households_by_bucket.items()} == DRAW_PER_BUCKET
    hids = policed.household_ids()
    assert len(hids) == len(set(hids)) == 40
    drawn = {h: b for b, ids in live.households_by_bucket.items() for h in ids}
    # each of the 240, in the bucket the draw sorted it into
    assert {h: policed.bucket_of_household(h) for h in hids} == {h: drawn[h] for h in hids}
    assert {b: len(ids) for b, ids in policed.households_by_bucket.items()} == SUBSET_PER_BUCKET
    assert proportional_allocation(DRAW_PER_BUCKET, 40) == SUBSET_PER_BUCKET
    # within a bucket in draw order, as the draw lists them
    for b, ids in policed.households_by_bucket.items():
        assert list(ids) == [h for h in live.households_by_bucket[b] if h in set(ids)]
    # the draw behind it is live.yaml's, unchanged: the subset only picks from it
    d = _draw(policed, {"n": 40, "seed": 41})
    assert d.drawn == _draw(live).drawn and len(d.drawn) == 240
    assert sorted(d.subset) == sorted(hids)


def test_seed_41_is_the_buffer_depth_sweeps_40_households(policed):
    """The same rule as bench/buffer_depth_households.py: its seed gives its households."""
    depth = load_config(ROOT / "config" / "buffer-depth-100ms.yaml")
    assert {b: sorted(ids) for b, ids in policed.households_by_bucket.items()} == \
        {b: sorted(ids) for b, ids in depth.households_by_bucket.items()}


def test_the_subset_is_deterministic_for_a_seed_and_another_for_another(live):
    a = _draw(live, {"n": 40, "seed": 2})
    assert a.subset == _draw(live, {"n": 40, "seed": 2}).subset
    assert {b: tuple(ids) for b, ids in a.by_bucket.items()} == \
        load_config(_with_subset({"n": 40, "seed": 2})).households_by_bucket
    subsets = {_draw(live, {"n": 40, "seed": s}).subset for s in (2, 3, 41)}
    assert len(subsets) == 3
    for s in subsets:  # every seed: 40 of the draw, the same bucket counts
        assert len(set(s)) == 40 and set(s) <= set(a.drawn)
        assert Counter(live.bucket_of_household(h) for h in s) == SUBSET_PER_BUCKET


@pytest.mark.parametrize("n", [1, 3, 13, 239])
def test_every_n_is_allocated_by_largest_remainder(live, n):
    d = _draw(live, {"n": n, "seed": 5})
    got = {b: len(ids) for b, ids in d.by_bucket.items()}
    assert sum(got.values()) == len(d.subset) == len(set(d.subset)) == n
    for b, k in got.items():  # within 1 of the exact share, never more than the bucket has
        assert abs(k - n * DRAW_PER_BUCKET[b] / 240) < 1 and k <= DRAW_PER_BUCKET[b]
    assert got == proportional_allocation(DRAW_PER_BUCKET, n)


def test_proportional_allocation_rounds_by_largest_remainder_ties_to_the_first():
    assert proportional_allocation({"a": 1, "b": 1}, 1) == {"a": 1, "b": 0}
    # 0.5 and 1.5: remainders tied, the first listed gets the one left
    assert proportional_allocation({"a": 1, "b": 3}, 2) == {"a": 1, "b": 1}
    assert proportional_allocation({"b": 3, "a": 1}, 2) == {"b": 2, "a": 0}
    assert proportional_allocation({"a": 5, "b": 0, "c": 5}, 10) == {"a": 5, "b": 0, "c": 5}
    assert proportional_allocation({"a": 2, "b": 7, "c": 1}, 3) == {"a": 1, "b": 2, "c": 0}
    with pytest.raises(ValueError, match="allowed is 1 to 10"):
        proportional_allocation({"a": 5, "b": 5}, 11)


def test_a_subset_of_all_n_is_the_draw(live):
    whole, d = _draw(live), _draw(live, {"n": 240, "seed": 9})
    assert d.subset == whole.drawn and d.by_bucket == whole.by_bucket
    assert len(d.repeated) == 24 and set(d.repeated) <= set(d.subset)


def test_repeat_applies_to_the_subset(live, policed):
    d = _draw(policed, {"n": 40, "seed": 41})
    assert len(d.repeated) == 4 and set(d.repeated) <= set(d.subset)
    assert sorted(policed.repetitions_by_household) == sorted(d.repeated)
    assert all(policed.repetitions_of(h) == ((1, 2, 3) if h in d.repeated else (1,))
               for h in policed.household_ids())
    # a subset of 5 at share 0.1: at least one household repeats
    assert len(_draw(live, {"n": 5, "seed": 41}).repeated) == 1
    # the subset's own seed picks them (its random.Random, after the subset)
    assert set(_draw(live, {"n": 40, "seed": 2}).repeated) != set(d.repeated)
    # without repeat, none
    raw = _with_subset({"n": 40, "seed": 41})
    del raw["households"]["population_sample"]["repeat"]
    assert load_config(raw).repetitions_by_household == {}


def test_the_table_and_the_composition_show_the_subset(policed):
    d = _draw(policed, {"n": 40, "seed": 41})
    df = population_frame(d)
    assert dict(df.status.value_counts()) == {"not drawn": len(d.eligible) - 240,
                                              "not in subset": 200, "drawn": 40}
    assert sorted(df.loc[df.status == "drawn", "unit_id"]) == sorted(d.subset)
    assert df.draw_rank.notna().sum() == 240
    assert sorted(df.loc[df.repeated, "unit_id"]) == sorted(d.repeated)
    comp = add_to_composition(d, composition(d, "price_bucket"), "price_bucket")
    assert {c["price_bucket"]: (c["drawn"], c["subset"]) for c in comp} == {
        b: (DRAW_PER_BUCKET[b], SUBSET_PER_BUCKET[b]) for b in DRAW_PER_BUCKET}
    assert sum(c["subset_share"] for c in comp) == pytest.approx(1)
    tech = add_to_composition(d, composition(d, "technology"), "technology")
    assert sum(c["subset"] for c in tech) == 40
    assert {c["technology"]: c["subset"] for c in tech} == dict(Counter(
        r["technology"] for r in d.eligible if int(r["unit_id"]) in set(d.subset)))
    assert PopulationSample.from_dict(d.spec.to_dict()) == d.spec
    assert d.spec.to_dict()["subset"] == {"n": 40, "seed": 41}
    assert d.spec.subset == Subset(40, 41)


def test_loading_the_config_imports_no_numpy_once_the_draw_is_cached(policed):
    """What every trial job does first (tests/test_job_startup.py): the subset and its
    repeated share come from the standard library; the draw from links.drawcache (the
    ``policed`` fixture drew it in this process, with the tests' cache directory)."""
    code = ("import sys\n"
            "from latency_divide.config import load_config\n"
            f"c = load_config({str(POLICED)!r})\n"
            "print(len(c.household_ids()), len(c.repetitions_by_household), "
            "'numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split()
    assert out == ["40", "4", "False"]


def test_sample_prints_the_subset_as_the_runs_households(capsys, policed):
    assert cli_main(["sample", "--config", str(POLICED), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["population_sample"]["subset"] == {"n": 40, "seed": 41}
    assert sorted(h["unit_id"] for h in out["households"]) == sorted(policed.household_ids())
    assert {c["price_bucket"]: c["subset"] for c in out["composition"]["price_bucket"]} == \
        SUBSET_PER_BUCKET
    assert cli_main(["sample", "--config", str(POLICED)]) == 0
    text = capsys.readouterr().out
    assert "# the run measures a subset of 40 of them, per price bucket in proportion (seed 41)" \
        in text
    assert re.search(r"^0-30 +90 +1\.3 +9\.4 +22 +9\.2 +4 +10\.0$", text, re.M), text


# --- bad values ---------------------------------------------------------------------------

@pytest.mark.parametrize("subset, words", [
    ({"n": 0, "seed": 2}, ["population_sample.subset.n = 0", "allowed is an integer 1 to 240"]),
    ({"n": 241, "seed": 2}, ["subset.n = 241", "1 to 240", "the draw's n"]),
    ({"n": -3, "seed": 2}, ["subset.n = -3", "1 to 240"]),
    ({"n": "40", "seed": 2}, ["subset.n = '40'", "not of type 'integer'"]),
    ({"n": 40.5, "seed": 2}, ["subset.n = 40.5", "not of type 'integer'"]),
    ({"n": 40.0, "seed": 2}, ["subset.n = 40.0", "allowed is an integer 1 to 240"]),
    ({"n": True, "seed": 2}, ["subset.n = True", "not of type 'integer'"]),
    ({"n": 40, "seed": -1}, ["population_sample.subset.seed = -1", "allowed is"]),
    ({"n": 40, "seed": 2**32}, ["subset.seed = 4294967296", "allowed is"]),
    ({"n": 40, "seed": 1.5}, ["subset.seed = 1.5", "not of type 'integer'"]),
    ({"n": 40}, ["population_sample.subset", "'seed' is a required property"]),
    ({"seed": 2}, ["population_sample.subset", "'n' is a required property"]),
    ({"n": 40, "seed": 2, "by": "bucket"}, ["unknown key", "subset.by", "allowed here: n, seed"]),
    (40, ["population_sample.subset = 40", "not of type 'object'"]),
])
def test_a_bad_subset_is_refused_naming_the_value_and_what_is_allowed(subset, words):
    with pytest.raises(ConfigError) as e:
        load_config(_with_subset(subset))
    for w in words:
        assert w in str(e.value), str(e.value)


@pytest.mark.parametrize("subset, words", [
    ({"n": 41, "seed": 1}, ["where.subset.n = 41", "allowed is an integer 1 to 40"]),
    ({"n": 4}, ["where.subset = {'n': 4}", "a mapping with n (1 to the draw's n, 40) and seed"]),
    ([4, 1], ["where.subset = [4, 1]", "a mapping with n"]),
    ({"n": 4, "seed": "x"}, ["where.subset.seed = 'x'", "allowed is"]),
    ({"n": False, "seed": 1}, ["where.subset.n = False", "an integer 1 to 40"]),
])
def test_from_dict_checks_the_subset_without_the_schema(subset, words):
    with pytest.raises(ConfigError) as e:
        PopulationSample.from_dict({"n": 40, "weight": "weight", "subset": subset}, "where")
    for w in words:
        assert w in str(e.value), str(e.value)


def test_a_subset_larger_than_the_draw_is_refused_by_the_draw_too(live):
    """A PopulationSample made in code, not by from_dict: the draw checks again."""
    spec = PopulationSample(240, repeat=live.population.repeat, subset=Subset(241, 1))
    with pytest.raises(ConfigError, match=r"subset\.n = 241: allowed is 1 to 240, the draw's n"):
        population_draw(spec, live.buckets, live.seed, qfactor=live.qfactor)


# --- config/live-policed.yaml -------------------------------------------------------------

def test_the_policed_config_is_live_yamls_run_policed_on_the_subset(live, policed):
    assert policed.buffer_model == "policed-5ms" and policed.directions == ("uplink",)
    assert policed.variants == live.variants and policed.trial == live.trial
    assert [policed.tool_for(v) for v in policed.variants] == \
        [live.tool_for(v) for v in live.variants]
    raw, live_raw = _raw(), _raw(LIVE)
    assert {k: v for k, v in raw["households"]["population_sample"].items() if k != "subset"} \
        == live_raw["households"]["population_sample"]
    assert raw["households"]["buckets"] == live_raw["households"]["buckets"]
    assert raw["qfactor"] == live_raw["qfactor"] and raw["households"]["seed"] == 1
    for v in policed.variants:  # live.yaml's definition plus the model: definitions of their own
        d = definition.of_config(policed, v)
        assert d.pop("buffer_model") == "policed-5ms"
        assert d == definition.of_config(live, live.variant(v.name))
    ids = trial_ids(policed)
    assert len(ids) == 40 * 4 + 4 * 4 * 2 == 192
    head = POLICED.read_text().split("\nhouseholds:", 1)[0]
    assert "192 broadcasts" in head
    assert "snakemake all --cores 1 --configfile config/live-policed.yaml" in head
    assert "latency-divide sample --config config/live-policed.yaml" in head


def test_the_published_live_configs_are_companions_of_the_main_run():
    """Published: the policed run, live.yaml and live-buffers.yaml are analysed by `snakemake
    all` of config/config.yaml (and are dependencies of the DVC analysis stage)."""
    main = _raw(ROOT / "config" / "config.yaml")
    companions = {c.rsplit("/", 1)[-1] for c in main["companions"]}
    assert {"live-policed.yaml", "live.yaml", "live-buffers.yaml"} <= companions
    deps = (ROOT / "dvc.yaml").read_text()
    for c in ("live-policed.yaml", "live.yaml", "live-buffers.yaml"):
        assert f"config/{c}" in deps, c


def test_a_dry_run_lists_40_uplinks_x_4_variants_policed_and_the_repeats(policed, tmp_path):
    """`snakemake -n all` of the config (--forceall: listed whether or not trials are on disk)
    plans exactly the subset's trials, every one of a policed definition. In a scratch copy of
    the workflow: in a checkout with the published trials pulled, their packs stand for them
    and no trial job is planned."""
    env = {**os.environ, "LATENCY_DIVIDE_FORBID_TRIALS": "1", "LATENCY_DIVIDE_HOST_CHECK": "skip"}
    wf = copy_workflow(tmp_path / "wf")
    out = subprocess.run([str(VENV_BIN / "snakemake"), "-n", "--forceall", "--cores", "1", "all",
                          "--configfile", "config/live-policed.yaml"], cwd=wf, capture_output=True,
                         text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout + out.stderr
    jobs = re.findall(r"rule trial:.*?wildcards: ([^\n]+)", text, re.S)
    keys = [dict(kv.split("=", 1) for kv in w.split(", ")) for w in jobs]
    assert len(keys) == 192, text[-3000:]
    policed_defs = {definition.definition_id(definition.of_config(policed, v)): v.name
                    for v in policed.variants}
    assert {k["definition"] for k in keys} == set(policed_defs)
    assert {definition.of_config(policed, v)["buffer_model"] for v in policed.variants} == \
        {"policed-5ms"}
    assert all(policed_defs[k["definition"]] == k["variant"] for k in keys)
    assert {k["direction"] for k in keys} == {"uplink"}
    per = Counter((int(k["household"]), k["variant"]) for k in keys)
    assert set(per) == {(h, v.name) for h in policed.household_ids() for v in policed.variants}
    assert {hv: c for hv, c in per.items() if c != 1} == {
        (h, v.name): 3 for h in policed.repetitions_by_household for v in policed.variants}
    reps = {(int(k["household"]), k["variant"], int(k["rep"])) for k in keys}
    assert len(reps) == 192  # no trial twice
    assert re.search(r"^trial\s+192$", out.stdout, re.M), out.stdout[-3000:]
