"""Price buckets: parsing, validation, the paper's IDs, and weighted sampling."""

import math

import pytest

from latency_divide.config import load_config
from latency_divide.data.buckets import (
    DEFAULT_BUCKETS,
    PAPER_IDS,
    Bucket,
    candidates,
    check_ids_in_bucket,
    parse_bucket,
    resolve_buckets,
    sample_bucket,
    validate_buckets,
)
from latency_divide.errors import ConfigError
from latency_divide.data.households import get_household
from latency_divide.data.source import load_rows

from conftest import ROOT

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

#: The paper's published sample (EXPERIMENT.md, "Households"): 38 households, in the paper's
#: order. Written out, not taken from PAPER_IDS: the code, the config and the data must all
#: agree with it, so a change to any of them that changes the default run fails here.
PAPER_SAMPLE = {
    "0-30": [799254, 11406, 13570, 7884, 797760, 13013, 28928, 9747, 799322, 32648],
    "30-40": [9254, 615514, 615016, 12512, 6046, 216020, 10232, 10428, 10373, 615520],
    "40-50": [27082, 5781, 12334, 619832, 1290, 12491, 9960, 13133, 215248],
    "50+": [8268, 214030, 5749, 12430, 27337, 11750, 734, 32501, 12251],
}
#: The weighted draw (seed 1, the default config's seed) of as many households per default
#: bucket as the paper took: pinned, so a change of the sampling code or of the data's prices
#: or weights that changes a seeded sample fails here (see sample_bucket's docstring).
SEED1_SAMPLE = {
    "0-30": [32648, 615040, 5554, 6140, 7998, 625902, 626752, 1249, 632968, 12268],
    "30-40": [619830, 8678, 805080, 214558, 615020, 6813, 10075, 25884, 614988, 1171],
    "40-50": [621700, 12635, 805068, 12441, 26431, 244878, 28931, 599784, 623966],
    "50+": [8606, 26999, 8356, 27542, 6556, 706, 6620, 600880, 13611],
}


def test_the_default_households_are_the_papers():
    assert sum(map(len, PAPER_SAMPLE.values())) == 38
    assert {name: list(ids) for name, ids in PAPER_IDS.items()} == PAPER_SAMPLE
    assert [(b.name, b.min_usd, b.max_usd, b.ids, b.sample) for b in DEFAULT_BUCKETS] == [
        ("0-30", 0, 30, tuple(PAPER_SAMPLE["0-30"]), None),
        ("30-40", 30, 40, tuple(PAPER_SAMPLE["30-40"]), None),
        ("40-50", 40, 50, tuple(PAPER_SAMPLE["40-50"]), None),
        ("50+", 50, None, tuple(PAPER_SAMPLE["50+"]), None),
    ]
    assert resolve_buckets(DEFAULT_BUCKETS, seed=1) == PAPER_SAMPLE
    # the shipped default config runs exactly these, bucket by bucket, in this order
    cfg = load_config(ROOT / "config" / "config.yaml")
    assert {name: list(ids) for name, ids in cfg.households_by_bucket.items()} == PAPER_SAMPLE
    assert list(cfg.households_by_bucket) == list(PAPER_SAMPLE)
    # and the data set puts each of them in its bucket (last-row rule)
    for name, ids in PAPER_SAMPLE.items():
        assert [get_household(h).price_bucket for h in ids] == [name] * len(ids), name


def test_a_seeded_sample_is_pinned():
    got = {b.name: sample_bucket(b, len(PAPER_SAMPLE[b.name]), seed=1) for b in DEFAULT_BUCKETS}
    assert got == SEED1_SAMPLE
    # what a config with `sample:` and the default seed draws is the same draw
    sampled = [Bucket(b.name, b.min_usd, b.max_usd, None, len(PAPER_SAMPLE[b.name]))
               for b in DEFAULT_BUCKETS]
    assert resolve_buckets(sampled, seed=1) == SEED1_SAMPLE


def test_half_open_intervals():
    b = Bucket("30-40", 30, 40, ())
    assert b.contains(30) and b.contains(39.99)
    assert not b.contains(40) and not b.contains(29.99)
    assert Bucket("50+", 50, None, ()).contains(214.99)


@pytest.mark.parametrize(
    "spec, lo, hi",
    [("0-30", 0, 30), ("50+", 50, None), ("25-35", 25, 35), ("60+", 60, None), ("9.5-10", 9.5, 10)],
)
def test_parse_bucket(spec, lo, hi):
    b = parse_bucket(spec)
    assert (b.min_usd, b.max_usd) == (lo, hi)


def test_parse_bucket_returns_the_default_bucket_by_name():
    assert parse_bucket("30-40") is DEFAULT_BUCKETS[1]


@pytest.mark.parametrize("spec", ["cheap", "30-20", "30-30", "-5-10", "10-", "+50"])
def test_parse_bucket_rejects(spec):
    with pytest.raises(ConfigError) as e:
        parse_bucket(spec)
    assert repr(spec) in str(e.value)


@pytest.mark.parametrize(
    "buckets, words",
    [
        ([Bucket("a", 0, 30, (1,)), Bucket("b", 25, 40, (1,))], ["'b'", "overlaps", "'a'"]),
        ([Bucket("a", 30, 40, (1,)), Bucket("b", 0, 30, (1,))], ["'b'", "out of order"]),
        ([Bucket("a", 50, None, (1,)), Bucket("b", 60, 70, (1,))], ["'b'", "unbounded"]),
        ([Bucket("a", 30, 30, (1,))], ["'a'", "max 30", "min 30"]),
        ([Bucket("a", 0, 10, (1,)), Bucket("a", 10, 20, (1,))], ["'a'", "repeated"]),
        ([Bucket("a", 0, 10, (1,), 3)], ["'a'", "exactly one"]),
        ([Bucket("a", 0, 10)], ["'a'", "exactly one"]),
        ([], ["at least one"]),
    ],
)
def test_invalid_bucket_lists(buckets, words):
    with pytest.raises(ConfigError) as e:
        validate_buckets(buckets)
    for w in words:
        assert w in str(e.value)


def test_id_outside_its_bucket_names_id_price_and_bucket():
    with pytest.raises(ConfigError) as e:
        check_ids_in_bucket(Bucket("30-40", 30, 40, (11406,)), [11406])
    msg = str(e.value)
    assert "11406" in msg and "$6.99" in msg and "30-40" in msg and "[30, 40)" in msg


def test_id_check_uses_the_last_row():
    # 405: first row $49.00 (would be 40-50), last row $64.99 -> not in 40-50.
    with pytest.raises(ConfigError, match=r"405 costs \$64.99"):
        check_ids_in_bucket(Bucket("40-50", 40, 50, (405,)), [405])
    check_ids_in_bucket(Bucket("50+", 50, None, (405,)), [405])


def test_unknown_and_repeated_ids():
    with pytest.raises(ConfigError, match="unknown household ID 123"):
        check_ids_in_bucket(DEFAULT_BUCKETS[0], [123])
    with pytest.raises(ConfigError, match="11406 is listed twice"):
        check_ids_in_bucket(DEFAULT_BUCKETS[0], [11406, 11406])


def test_candidates_are_unique_households_by_last_row():
    b = Bucket("40-50", 40, 50)
    ids = [r["unit_id"] for r in candidates(b)]
    assert len(ids) == len(set(ids))
    assert 405 not in ids  # its last row is $64.99
    assert 405 in [r["unit_id"] for r in candidates(Bucket("50+", 50, None))]
    # every household whose last row is in the bucket is a candidate
    last = {}
    for r in load_rows():
        last[r["unit_id"]] = r
    assert set(ids) == {i for i, r in last.items() if 40 <= r["monthly.charge"] < 50}


def test_sample_is_reproducible_distinct_and_in_bucket():
    b = parse_bucket("0-30")
    a = sample_bucket(b, 10, seed=1)
    assert a == sample_bucket(b, 10, seed=1)
    assert a != sample_bucket(b, 10, seed=2)
    assert len(set(a)) == 10
    assert all(get_household(h).price_bucket == "0-30" for h in a)
    # a larger sample with the same seed starts with the smaller one (draw order)
    assert sample_bucket(b, 15, seed=1)[:10] == a


def test_sample_of_a_whole_bucket_and_too_large_samples():
    b = Bucket("tiny", 25.95, 27.96)  # prices 25.95 and 27.95 only
    n = len(candidates(b))
    assert 1 <= n < 200
    assert sorted(sample_bucket(b, n, seed=3)) == sorted(r["unit_id"] for r in candidates(b))
    with pytest.raises(ConfigError, match=f"has {n} households; cannot sample {n + 1}"):
        sample_bucket(b, n + 1, seed=3)


@pytest.mark.parametrize("n, seed", [(0, 1), (-1, 1), (2, -1), (True, 1), (2, 1.5)])
def test_sample_rejects_bad_sizes_and_seeds(n, seed):
    with pytest.raises(ConfigError):
        sample_bucket(DEFAULT_BUCKETS[0], n, seed)


def test_sampling_follows_the_weights():
    """First draws over many seeds: P(household i) = w_i / sum(w). Households are grouped into
    heavy (weight above the median) and light; the heavy group's observed share must be within
    4 standard errors of its weighted probability, and that probability must be far (> 10 SE)
    from the unweighted one, so the test would catch a sampler that ignores weights."""
    b = Bucket("30-40", 30, 40)
    rows = candidates(b)
    weights = {r["unit_id"]: r["weight"] for r in rows}
    median = sorted(weights.values())[len(weights) // 2]
    heavy = {i for i, w in weights.items() if w > median}
    p_weighted = sum(weights[i] for i in heavy) / sum(weights.values())
    p_uniform = len(heavy) / len(weights)
    draws = 4000
    se = math.sqrt(p_weighted * (1 - p_weighted) / draws)
    assert abs(p_weighted - p_uniform) > 10 * se

    hits = sum(sample_bucket(b, 1, seed=s)[0] in heavy for s in range(draws))
    assert abs(hits / draws - p_weighted) < 4 * se


def test_samples_without_replacement_favour_heavy_households():
    """n = 20 of a bucket: never a repeated household, and the heaviest household of the bucket
    is included far more often than the lightest."""
    b = Bucket("30-40", 30, 40)
    rows = candidates(b)
    light = min(rows, key=lambda r: r["weight"])["unit_id"]
    heavy = max(rows, key=lambda r: r["weight"])["unit_id"]
    inc = {light: 0, heavy: 0}
    for s in range(1500):
        got = sample_bucket(b, 20, seed=s)
        assert len(set(got)) == 20
        for h in inc:
            inc[h] += h in got
    assert inc[heavy] > 3 * inc[light]
