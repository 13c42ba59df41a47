"""households.population_sample (issue 24): a seeded weighted draw from the whole data set,
the stated exclusions, the buckets and repetitions it resolves to, its table and its CLI."""

import copy
import csv
import hashlib
import json
import math

import pandas as pd
import pytest
import yaml

from conftest import ROOT
from latency_divide.cli import main as cli_main
from latency_divide.config import load_config
from latency_divide.data import source
from latency_divide.data.buckets import DEFAULT_BUCKETS, Bucket
from latency_divide.links.population import (
    PopulationSample,
    Repeat,
    composition,
    exclusion_reason,
    inclusion_probabilities,
    population_draw,
    population_frame,
    write_population_table,
)
from latency_divide.data.households import _record
from latency_divide.errors import ConfigError
from latency_divide.links.plan import make_linkplan
from latency_divide.trial.sweep import trial_ids

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

#: The four price buckets with neither ids nor sample (the population form).
BUCKETS = tuple(Bucket(b.name, b.min_usd, b.max_usd) for b in DEFAULT_BUCKETS)

#: config/population.yaml's draw (seed 1, n 240), pinned like test_buckets.SEED1_SAMPLE: a
#: change of the sampling code or of the data that changes the published sample fails here.
POPULATION_FIRST_10 = [598626, 615030, 12414, 7998, 26604, 615386, 12960, 28919, 12472, 9667]
#: sha256 of all 240 IDs in draw order, comma-separated (first 16 hex digits)
POPULATION_SHA256 = "9a0ae812244057db"
POPULATION_PER_BUCKET = {"0-30": 22, "30-40": 84, "40-50": 23, "50+": 111}

COLUMNS = ["unit_id", "technology", "isp", "state", "year", "advertised.down", "advertised.up",
           "medianUp", "medianDown", "medianLatency", "medianJitterUp", "medianJitterDown",
           "medianLoss", "monthly.charge", "weight"]


def row(unit_id, price=45.0, weight=1.0, up=125_000, down=1_250_000, latency_us=20_000,
        technology="CABLE"):
    """A data set row (its units: bytes/s, microseconds, US $): 1 / 10 Mbit/s, 20 ms."""
    return {"unit_id": unit_id, "technology": technology, "isp": "ISP", "state": "NY",
            "year": 2015, "advertised.down": 10, "advertised.up": 1, "medianUp": up,
            "medianDown": down, "medianLatency": latency_us, "medianJitterUp": 1000,
            "medianJitterDown": 1000, "medianLoss": 0, "monthly.charge": price,
            "weight": weight}


#: The synthetic data set's households that cannot be drawn, and a word of each reason.
BAD = {
    901: (dict(price=float("nan")), "no price"),
    902: (dict(price=-5.0), "in no bucket"),
    903: (dict(weight=0.0), "weight = 0.0"),
    904: (dict(weight=float("nan")), "weight = nan"),
    905: (dict(up=0), "uplink rate 0 kbit/s"),
    906: (dict(down=100), "downlink rate 0 kbit/s"),  # 0.8 kbit/s truncates to 0
    907: (dict(latency_us=0), "RTT 0.0 ms"),
    908: (dict(up=float("nan")), "upload rate missing"),
    909: (dict(up=125, latency_us=1000), "queue"),  # 1 kbit/s x 1 ms: 0.25 bytes of queue
}


def synthetic_rows():
    """20 good households with weights 1..20 spread over the four buckets and two
    technologies, and the BAD ones; unit 7 appears twice (the last row counts: $55)."""
    rows = [row(7, price=12.0)]
    prices = [10.0, 35.0, 45.0, 55.0]
    for i in range(1, 21):
        rows.append(row(i, price=prices[i % 4], weight=float(i),
                        technology="DSL" if i % 3 == 0 else "CABLE"))
    rows += [row(hid, **kw) for hid, (kw, _) in BAD.items()]
    return rows


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("population") / "households.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in synthetic_rows():
            w.writerow(r)
    return path


GOOD = list(range(1, 21))


@pytest.fixture(scope="module")
def population_cfg() -> dict:
    with open(ROOT / "config" / "population.yaml") as f:
        return yaml.safe_load(f)


def with_population(cfg, **kv):
    c = copy.deepcopy(cfg)
    pop = c["households"]["population_sample"]
    for k, v in kv.items():
        if v is None:
            pop.pop(k, None)
        else:
            pop[k] = v
    return c


# --- the draw ------------------------------------------------------------------------------

def test_the_draw_is_deterministic_distinct_and_seeded(data):
    spec = PopulationSample(10)
    a = population_draw(spec, BUCKETS, 3, data)
    assert a.drawn == population_draw(spec, BUCKETS, 3, data).drawn
    assert a.drawn != population_draw(spec, BUCKETS, 4, data).drawn
    assert len(a.drawn) == len(set(a.drawn)) == 10
    assert set(a.drawn) <= set(GOOD)
    # every drawn household is in the bucket of its (last-row) price, in draw order
    assert sorted(h for ids in a.by_bucket.values() for h in ids) == sorted(a.drawn)
    rows = source.unique_rows(data)
    for b in BUCKETS:
        assert all(b.contains(rows[h]["monthly.charge"]) for h in a.by_bucket[b.name])
        assert a.by_bucket[b.name] == [h for h in a.drawn if h in a.by_bucket[b.name]]


def test_excluded_households_are_listed_with_their_reason_and_never_drawn(data):
    d = population_draw(PopulationSample(len(GOOD)), BUCKETS, 1, data)
    assert sorted(d.drawn) == GOOD  # all eligible households, and only they
    reasons = {int(r["unit_id"]): why for r, why in d.excluded}
    assert sorted(reasons) == sorted(BAD)
    for hid, (_, word) in BAD.items():
        assert word in reasons[hid], (hid, reasons[hid])
    # over many seeds none is ever drawn
    for seed in range(200):
        assert not set(population_draw(PopulationSample(12), BUCKETS, seed, data).drawn) & set(BAD)
    # unit 7's last row ($55, 50+) counts, not its first ($12)
    assert 7 in d.by_bucket["50+"]
    with pytest.raises(ConfigError,
                       match=r"population_sample.n = 21: allowed is 1 to 20.*9 excluded"):
        population_draw(PopulationSample(21), BUCKETS, 1, data)


def test_the_exclusion_rule_is_what_the_link_plan_refuses(data):
    """Rule (c) is make_linkplan itself: every household with a usable price and weight
    makes a plan at the config's qfactor exactly when the rule keeps it."""
    for r in source.unique_rows(data).values():
        reason = exclusion_reason(r, BUCKETS, 2.0)
        if reason is None or reason.startswith("no link plan"):
            try:
                make_linkplan(_record(r, BUCKETS), qfactor=2.0)
                plans = True
            except Exception:
                plans = False
            assert plans == (reason is None), (r["unit_id"], reason)
    # the queue depends on qfactor: 8 kbit/s x 1 ms is 2 bytes at qfactor 2, none at 0.05
    slow = row(1, up=1000, down=1000, latency_us=1000)
    assert exclusion_reason(slow, BUCKETS, 2.0) is None
    assert "queue" in exclusion_reason(slow, BUCKETS, 0.05)
    # a price outside the configured buckets (here only $30-40) is excluded
    assert "in no bucket" in exclusion_reason(row(1, price=45.0), [Bucket("x", 30, 40)])


def test_the_real_data_set_has_no_exclusions():
    d = population_draw(PopulationSample(1), BUCKETS, 1)
    assert len(d.excluded) == 0 and len(d.eligible) == len(source.unique_rows()) == 6795


def test_inclusion_frequencies_follow_the_weights(data):
    """n = 5 of the 20 eligible synthetic households (weights 1..20) over 2000 seeds: each
    household is drawn with frequency within 4.5 standard errors of pi_i = 5 w_i / 210
    (deterministic: a fixed seed set), and the heaviest is drawn 20 times as often as the
    lightest (a draw that ignored the weights, pi = 1/4 each, fails: 20 x 5 / 210 is 0.48)."""
    seeds, n, total = 2000, 5, sum(GOOD)
    hits = dict.fromkeys(GOOD, 0)
    for s in range(seeds):
        d = population_draw(PopulationSample(n), BUCKETS, s, data)
        assert len(set(d.drawn)) == n
        for h in d.drawn:
            hits[h] += 1
    for h, w in zip(GOOD, GOOD):  # the synthetic household i weighs i
        p = n * w / total
        se = math.sqrt(p * (1 - p) / seeds)
        assert abs(hits[h] / seeds - p) < 4.5 * se, (h, hits[h] / seeds, p)
    assert 10 * hits[1] < hits[20]


def test_households_weighing_more_than_a_share_of_n_are_certain(data):
    """n = 15 of weights 1..20: pi = 15 w / 210 >= 1 for w >= 14, so those are always drawn;
    the other households share the remaining places in proportion to weight."""
    pi = inclusion_probabilities(GOOD, 15)
    assert abs(pi.sum() - 15) < 1e-9 and pi.max() == 1.0
    certain = {h for h, p in zip(GOOD, pi) if p == 1.0}
    assert certain >= {14, 15, 16, 17, 18, 19, 20}
    for s in range(100):
        d = population_draw(PopulationSample(15), BUCKETS, s, data)
        assert certain <= set(d.drawn) and len(set(d.drawn)) == 15
    assert sorted(population_draw(PopulationSample(20), BUCKETS, 0, data).drawn) == GOOD


def test_the_real_sample_has_the_weighted_bucket_and_technology_mix():
    """n = 240 of the real data set over 100 seeds (24000 draws): the mean number drawn of each
    bucket and technology is within 4 standard errors of n x its weighted share (the sample is
    self-weighting); $0-30 is 9.4 % weighted but 1.3 % of the households, and CABLE 60.8 %
    weighted but 55.2 %, so a draw that ignored the weights fails, and so does A-ES (the
    bucket sampler), which draws 20.0 from $0-30 on average where the weights give 22.6."""
    spec, seeds = PopulationSample(240), 100
    counts: dict[str, list[int]] = {}
    for seed in range(seeds):
        d = population_draw(spec, BUCKETS, seed)
        comp = {by: composition(d, by) for by in ("price_bucket", "technology")}
        for by, rows in comp.items():
            for c in rows:
                counts.setdefault(c[by], []).append(c["drawn"])
    pop = {c[by]: c["population_share"] for by, rows in comp.items() for c in rows}
    for group, got in counts.items():
        p = pop[group]
        se = math.sqrt(240 * p * (1 - p) / seeds)  # with replacement: an upper bound
        assert abs(sum(got) / seeds - 240 * p) < 4 * se, (group, sum(got) / seeds, 240 * p)
    assert pop["0-30"] > 0.09 and pop["CABLE"] > 0.60


def test_repeat_share_is_seeded_and_a_share_of_the_sample(data):
    spec = PopulationSample(10, repeat=Repeat(0.3, 3))
    d = population_draw(spec, BUCKETS, 5, data)
    assert len(d.repeated) == 3 and set(d.repeated) <= set(d.drawn)
    assert d.repeated == population_draw(spec, BUCKETS, 5, data).repeated
    # the draw itself does not depend on repeat
    assert population_draw(PopulationSample(10), BUCKETS, 5, data).drawn == d.drawn
    assert Repeat(0.1, 3).count(240) == 24 and Repeat(0.01, 3).count(10) == 1
    assert Repeat(1, 2).count(7) == 7 and Repeat(0.25, 2).count(10) == 3  # 2.5 rounds up


def test_table_lists_every_household_with_status_and_reason(data, tmp_path):
    d = population_draw(PopulationSample(5, repeat=Repeat(0.4, 2)), BUCKETS, 2, data)
    out = tmp_path / "population_sample.parquet"
    df = write_population_table(d, out)
    back = pd.read_parquet(out)
    assert len(back) == len(df) == 20 + len(BAD)
    assert sorted(back.loc[back.status == "drawn", "unit_id"]) == sorted(d.drawn)
    assert sorted(back.loc[back.status == "excluded", "unit_id"]) == sorted(BAD)
    assert back.loc[back.status != "excluded", "reason"].isna().all()
    by_id = back.set_index("unit_id")
    assert [by_id.loc[h, "draw_rank"] for h in d.drawn] == [1, 2, 3, 4, 5]
    assert sorted(back.loc[back.repeated, "unit_id"]) == sorted(d.repeated)
    assert "weight = 0.0" in by_id.loc[903, "reason"]
    assert list(population_frame(d).columns) == list(back.columns)


# --- the config ----------------------------------------------------------------------------

def test_population_config_loads_with_200_households_in_every_bucket(population_cfg):
    c = load_config(ROOT / "config" / "population.yaml")
    ids = c.household_ids()
    assert len(ids) == len(set(ids)) == 240
    assert {name: len(v) for name, v in c.households_by_bucket.items()} == POPULATION_PER_BUCKET
    assert c.population == PopulationSample(240, "weight", Repeat(0.1, 3))
    # the buckets are seen as if the config listed the drawn IDs (rules/households.smk)
    assert all(b.ids == c.households_by_bucket[b.name] for b in c.buckets)
    assert [Bucket.from_dict(b.to_dict()) for b in c.buckets] == list(c.buckets)
    draw = population_draw(c.population, c.buckets, c.seed, qfactor=c.qfactor)
    assert list(draw.drawn[:10]) == POPULATION_FIRST_10
    assert hashlib.sha256(",".join(map(str, draw.drawn)).encode()).hexdigest()[:16] == \
        POPULATION_SHA256
    assert c.bucket_of_household(ids[0]) in POPULATION_PER_BUCKET
    # a seeded tenth runs repetitions 1-3, the others 1
    assert sorted(c.repetitions_by_household) == sorted(draw.repeated)
    assert len(draw.repeated) == 24
    assert all(c.repetitions_of(h) == ((1, 2, 3) if h in draw.repeated else (1,)) for h in ids)
    trials = trial_ids(c)
    assert len(trials) == 2 * 4 * (240 + 2 * 24)
    assert c.trial.order == "shuffled" and c.trial.duration_s == 60
    assert [(v.name, v.cc, v.delta) for v in c.variants] == [
        ("cubic", "cubic", None), ("bbr", "bbr", None), ("copa-0.04", "copa", 0.04),
        ("copa-0.5", "copa", 0.5)]
    assert c.tool.name == "tquic-perf" and c.tool.window_bytes == 16 * 1024 * 1024
    assert load_config(population_cfg).household_ids() == ids  # mapping == file
    # a companion of the default run (published as it is measured; analysed once complete)
    assert "config/population.yaml" in load_config(ROOT / "config" / "config.yaml").companions


def test_the_tperf_population_is_the_same_sample_trials_and_order():
    # config/population-mvfst.yaml: mvfst's tperf with its qlog on the households, trials and
    # shuffled order of config/population.yaml, so the two tools compare household for
    # household; only the tool (and so every definition) differs
    q, m = (load_config(ROOT / "config" / f) for f in ("population.yaml",
                                                        "population-mvfst.yaml"))
    assert m.households_by_bucket == q.households_by_bucket
    assert m.repetitions_by_household == q.repetitions_by_household
    assert (m.trial, m.qfactor, m.directions) == (q.trial, q.qfactor, q.directions)
    assert [(v.name, v.cc, v.delta, v.window_bytes) for v in m.variants] == \
        [(v.name, v.cc, v.delta, v.window_bytes) for v in q.variants]
    assert (m.tool.name, m.tool.args, m.tool.window_bytes) == ("tperf", (), q.tool.window_bytes)
    # the sender's qlog for every variant but Copa 0.5, which it bends (bench_qlog_cost.py)
    assert {v.name: m.tool_for(v).qlog for v in m.variants} == {
        "cubic": True, "bbr": True, "copa-0.04": True, "copa-0.5": False}
    tq, tm = trial_ids(q), trial_ids(m)     # in the order the workflow hands them out
    assert [t[1:] for t in tq] == [t[1:] for t in tm] and len(tm) == 2304
    assert not {t[0] for t in tq} & {t[0] for t in tm}


def test_population_config_from_another_data_set(population_cfg, data):
    c = load_config(with_population(population_cfg, n=8, repeat={"share": 0.25,
                                                                  "repetitions": [2, 3]}),
                    data=data)
    assert len(c.household_ids()) == 8 and set(c.household_ids()) <= set(GOOD)
    assert sum(c.repetitions_of(h) == (2, 3) for h in c.household_ids()) == 2


@pytest.mark.parametrize(
    "change, words",
    [
        (dict(n=0), ["households.population_sample.n = 0", "allowed"]),
        (dict(n=2.5), ["households.population_sample.n", "2.5"]),
        (dict(n=7000), ["households.population_sample.n = 7000", "allowed is 1 to 6795"]),
        (dict(weight="popWeight.normalized"),
         ["population_sample.weight = 'popWeight.normalized'", "allowed is 'weight'",
          "cell's share"]),
        (dict(weight="colour"), ["population_sample.weight = 'colour'", "allowed is 'weight'"]),
        (dict(weight=None), ["population_sample", "'weight' is a required property"]),
        (dict(repeat={"share": 0, "repetitions": 3}),
         ["population_sample.repeat.share = 0", "more than 0 and at most 1"]),
        (dict(repeat={"share": 1.5, "repetitions": 3}),
         ["population_sample.repeat.share = 1.5"]),
        (dict(repeat={"share": 0.1, "repetitions": 0}),
         ["population_sample.repeat.repetitions = 0"]),
        (dict(repeat={"share": 0.1, "repetitions": [0, 2]}),
         ["population_sample.repeat.repetitions[0] = 0"]),
        (dict(repeat={"share": 0.1}), ["'repetitions' is a required property"]),
        (dict(size=3), ["unknown key households.population_sample.size", "allowed here"]),
    ],
)
def test_bad_population_values_name_key_value_and_what_is_allowed(population_cfg, change, words):
    with pytest.raises(ConfigError) as e:
        load_config(with_population(population_cfg, **change))
    for w in words:
        assert w in str(e.value), (w, str(e.value))


@pytest.mark.parametrize("key, value", [("ids", [11406]), ("sample", 3)])
def test_buckets_of_a_population_sample_give_no_ids_or_sample(population_cfg, key, value):
    c = copy.deepcopy(population_cfg)
    c["households"]["buckets"][0][key] = value
    with pytest.raises(ConfigError) as e:
        load_config(c)
    msg = str(e.value)
    assert "households.buckets[0] ('0-30')" in msg and f"'{key}' is not allowed" in msg
    assert "population_sample" in msg


def test_a_bucket_without_ids_needs_a_population_sample(population_cfg):
    c = copy.deepcopy(population_cfg)
    del c["households"]["population_sample"]
    with pytest.raises(ConfigError, match=r"buckets\[0\] \('0-30'\): give exactly one of 'ids' or"
                                          r" 'sample' \(or households.population_sample"):
        load_config(c)


# --- the CLI -------------------------------------------------------------------------------

def test_cli_prints_the_sample_of_the_population_config(capsys):
    assert cli_main(["sample", "--config", str(ROOT / "config" / "population.yaml"),
                     "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    c = load_config(ROOT / "config" / "population.yaml")
    got = out["households"]
    assert [h["unit_id"] for h in got] == c.household_ids()
    assert {h["price_bucket"] for h in got} == set(POPULATION_PER_BUCKET)
    assert all(h["weight"] > 0 and h["technology"] for h in got)
    ranked = sorted(got, key=lambda h: h["draw_rank"])
    assert [h["unit_id"] for h in ranked[:10]] == POPULATION_FIRST_10
    assert sum(h["repetitions"] == [1, 2, 3] for h in got) == 24
    assert out["excluded"] == [] and out["eligible"] == 6795
    assert [r["price_bucket"] for r in out["composition"]["price_bucket"]] == list(
        POPULATION_PER_BUCKET)
    assert [r["drawn"] for r in out["composition"]["price_bucket"]] == list(
        POPULATION_PER_BUCKET.values())


def test_cli_lists_exclusions_of_a_population_config(population_cfg, data, tmp_path,
                                                     monkeypatch, capsys):
    monkeypatch.setattr(source, "DEFAULT_DATA", data)
    cfg = tmp_path / "pop.yaml"
    cfg.write_text(yaml.safe_dump(with_population(population_cfg, n=6)))
    assert cli_main(["sample", "--config", str(cfg)]) == 0
    text = capsys.readouterr().out
    assert "population sample of 6 households weighted by 'weight'" in text
    assert "from 20 eligible households of the data set (9 excluded)" in text
    assert f"# excluded before the draw: {len(BAD)}" in text
    for hid, (_, word) in BAD.items():
        line = next(ln for ln in text.splitlines() if ln.strip().startswith(f"{hid} "))
        assert word in line
    assert "composition by price_bucket" in text and "composition by technology" in text


@pytest.mark.parametrize("argv, words", [
    (["sample", "-n", "3"], ["--bucket and -n are required"]),
    (["sample", "--config", "config/population.yaml", "-n", "3"], ["not both"]),
])
def test_cli_sample_argument_errors(argv, words, capsys):
    assert cli_main(argv) != 0
    err = capsys.readouterr().err
    for w in words:
        assert w in err
