"""The percentile view of issue 24 (analysis.population): weighted percentiles across households,
the change against Cubic two ways (group, paired) and their bootstrap intervals.

The hand-worked case (HAND below) has five households of weights 1, 1, 2, 4, 2 (total 10), so
the cumulative weight fractions are exact decimals; the expected values are worked out in the
comments from the definition (the smallest value whose cumulative weight reaches p % of the total)
and compared with ==."""

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from latency_divide.analysis.population import (
    MIN_RESAMPLES,
    PERCENTILES,
    PERCENTILES_SCHEMA,
    PERCENTILES_SCHEMA_VERSION,
    PercentileInputError,
    household_means,
    percentile_table,
    read_percentiles,
    weighted_percentiles,
    write_percentiles,
)

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

TOOL = "tquic-perf"
DEFS = {"cubic": "def-cubic", "copa-0.04": "def-copa"}


def trial(hid, variant, rep=1, direction="uplink", bucket="0-30", **metrics):
    row = dict(tool=TOOL, definition_id=DEFS.get(variant, f"def-{variant}"), household_id=hid,
               price_bucket=bucket, direction=direction, variant=variant, repetition=rep,
               transport_rtt_mean_ms=None, rtt_mean_ms=None, goodput_kbps=None,
               trial_path=f"results/raw/{variant}/{hid}/{direction}/rep{rep}")
    row.update(metrics)
    return row


def frame(rows):
    return pd.DataFrame(rows).astype({"transport_rtt_mean_ms": "float64", "rtt_mean_ms": "float64",
                                      "goodput_kbps": "float64"})


# Households 1-5, weights 1, 1, 2, 4, 2 (total 10).
HAND_WEIGHTS = {1: 1.0, 2: 1.0, 3: 2.0, 4: 4.0, 5: 2.0}
# Application RTT (ms) per household: cubic 10, 20, 30, 40, 50 (household 1 as two repetitions,
# 8 and 12: mean 10); copa-0.04 the reverse, 50, 40, 30, 20, 10.
HAND_CUBIC = {1: 10.0, 2: 20.0, 3: 30.0, 4: 40.0, 5: 50.0}
HAND_COPA = {1: 50.0, 2: 40.0, 3: 30.0, 4: 20.0, 5: 10.0}


def hand_trials(weights=HAND_WEIGHTS, cubic=HAND_CUBIC, copa=HAND_COPA, bucket_of=None):
    rows = []
    for h in weights:
        b = (bucket_of or {}).get(h, "0-30")
        if h == 1:
            rows += [trial(h, "cubic", 1, bucket=b, rtt_mean_ms=8.0),
                     trial(h, "cubic", 2, bucket=b, rtt_mean_ms=12.0)]
        else:
            rows.append(trial(h, "cubic", bucket=b, rtt_mean_ms=cubic[h]))
        rows.append(trial(h, "copa-0.04", bucket=b, rtt_mean_ms=copa[h]))
    return frame(rows)


def households(weights):
    return pd.DataFrame({"unit_id": list(weights), "weight": list(weights.values())})


def view(df, variant, metric="rtt_mean_ms", bucket="all", direction="uplink"):
    sel = df[(df["variant"] == variant) & (df["metric"] == metric) & (df["bucket"] == bucket)
             & (df["direction"] == direction)]
    return sel.set_index("percentile")


@pytest.fixture(scope="module")
def hand():
    return percentile_table(hand_trials(), households(HAND_WEIGHTS), metrics=["rtt_mean_ms"],
                            seed=7)


def test_weighted_percentiles_by_hand():
    # sorted values 10, 20, 30, 40, 50 with weights 1, 1, 2, 4, 2: cumulative fractions
    # 0.1, 0.2, 0.4, 0.8, 1.0. p10: 0.1 >= 0.10 at 10 (exactly on the step: the lower value);
    # p25: first >= 0.25 is 0.4 at 30; p50, p75: 0.8 at 40; p90, p95: 1.0 at 50.
    got = weighted_percentiles([10, 20, 30, 40, 50], [1, 1, 2, 4, 2], PERCENTILES)
    assert got.tolist() == [10, 30, 40, 40, 50, 50]
    # order of the input does not matter; a NaN or a weight-0 value is left out
    got = weighted_percentiles([50, np.nan, 30, 10, 40, 20, 99], [2, 5, 2, 1, 4, 1, 0], PERCENTILES)
    assert got.tolist() == [10, 30, 40, 40, 50, 50]
    # nothing left: NaN; batched rows are independent
    assert np.isnan(weighted_percentiles([np.nan, np.nan], [1, 1], [50])).all()
    both = weighted_percentiles([[1, 2, 3], [3, 2, 1]], [[1, 1, 1], [0, 0, 1]], [50])
    assert both.tolist() == [[2], [1]]
    with pytest.raises(ValueError, match=r"\(0, 100\]"):
        weighted_percentiles([1, 2], [1, 1], [0])


def test_resampled_percentiles_are_numpys_exactly():
    """The bootstrap's percentiles (each row sorted once for all its weightings) are those of
    numpy.quantile per weighting, bit for bit: ties, NaN values, zero weights, empty rows."""
    from latency_divide.analysis.wquantile import resampled_percentiles

    rng = np.random.default_rng(7)
    pct = [*PERCENTILES, 100]
    for _ in range(300):
        r, n, b = (int(rng.integers(1, 5)), int(rng.integers(0, 30)), int(rng.integers(1, 40)))
        values = rng.integers(0, 6, size=(r, n)) * rng.choice([1.0, 0.1, 1 / 3])
        values[rng.random((r, n)) < 0.2] = np.nan
        weights = rng.integers(0, 4, size=(b, n)) * rng.random(n).round(2)
        want = weighted_percentiles(values[:, None, :], weights[None], pct)
        assert np.array_equal(resampled_percentiles(values, weights, pct), want, equal_nan=True)
    # the hand case above, as one weighting of one row
    got = resampled_percentiles([[10, 20, 30, 40, 50]], [[1, 1, 2, 4, 2]], PERCENTILES)
    assert got.tolist() == [[[10, 30, 40, 40, 50, 50]]]


def test_hand_case_values_and_changes(hand):
    cubic, copa = view(hand, "cubic"), view(hand, "copa-0.04")
    # cubic: as in test_weighted_percentiles_by_hand (household 1's repetitions 8, 12 -> 10)
    assert cubic["value"].tolist() == [10, 30, 40, 40, 50, 50]
    # copa sorted: 10 (w 2, household 5), 20 (w 4), 30 (w 2), 40 (w 1), 50 (w 1); cumulative
    # 0.2, 0.6, 0.8, 0.9, 1.0. p10 -> 10, p25 -> 20, p50 -> 20, p75 -> 30, p90 -> 40, p95 -> 50
    assert copa["value"].tolist() == [10, 20, 20, 30, 40, 50]
    assert copa["cubic_value"].tolist() == [10, 30, 40, 40, 50, 50]
    # group (Facebook's): percentile of copa / percentile of cubic - 1
    assert copa["change_group"].tolist() == [10 / 10 - 1, 20 / 30 - 1, 20 / 40 - 1, 30 / 40 - 1,
                                             40 / 50 - 1, 50 / 50 - 1]
    # paired: per-household ratio copa / cubic: h1 50/10 = 5 (w 1), h2 40/20 = 2 (w 1),
    # h3 30/30 = 1 (w 2), h4 20/40 = 0.5 (w 4), h5 10/50 = 0.2 (w 2). Sorted 0.2, 0.5, 1, 2, 5
    # with cumulative 0.2, 0.6, 0.8, 0.9, 1.0: p10 0.2, p25 0.5, p50 0.5, p75 1, p90 2, p95 5
    assert copa["change_paired"].tolist() == [0.2 - 1, 0.5 - 1, 0.5 - 1, 1 - 1, 2 - 1, 5 - 1]
    assert (copa["n_households"] == 5).all() and (copa["n_paired"] == 5).all()
    # the baseline against itself: exactly 0, intervals too
    for c in ("change_group", "ci_low_group", "ci_high_group", "change_paired", "ci_low_paired",
              "ci_high_paired"):
        assert (cubic[c] == 0).all(), c
    assert set(hand["definition_id"]) == {"def-cubic", "def-copa"}
    assert (hand["n_resamples"] == MIN_RESAMPLES).all() and (hand["seed"] == 7).all()
    assert list(hand.columns) == PERCENTILES_SCHEMA.names


def test_household_means_average_repetitions():
    m = household_means(hand_trials(), households(HAND_WEIGHTS), metrics=["rtt_mean_ms"])
    row = m[(m["household_id"] == 1) & (m["variant"] == "cubic")].iloc[0]
    assert row["rtt_mean_ms"] == 10.0 and row["trials"] == 2 and row["weight"] == 1.0


def test_group_and_paired_differ_on_a_reshuffle():
    # copa gives every household another household's cubic value: the two distributions are the
    # same (group change 0 at every percentile), yet no household kept its value
    cubic = {h: float(10 * h) for h in range(1, 11)}
    copa = {h: cubic[11 - h] for h in cubic}
    weights = {h: 1.0 for h in cubic}
    df = percentile_table(hand_trials(weights, cubic, copa), households(weights),
                          metrics=["rtt_mean_ms"])
    copa_rows = view(df, "copa-0.04")
    assert (copa_rows["change_group"] == 0).all()
    # ratios (11-h)/h: 10, 4.5, 2.67, 1.75, 1.2, 0.83, 0.57, 0.375, 0.22, 0.1; p10 is the
    # smallest (1 of 10 households): 10/100 -> -0.9; p95 the largest: 100/10 -> 9
    assert copa_rows.loc[10, "change_paired"] == 10 / 100 - 1
    assert copa_rows.loc[95, "change_paired"] == 100 / 10 - 1
    assert (copa_rows["change_paired"] != 0).sum() >= 5


def random_trials(n=60, seed=3):
    rng = np.random.default_rng(seed)
    rows = []
    for h in range(n):
        base = rng.gamma(4, 15)
        b = "0-30" if h % 3 else "50+"
        for d in ("uplink", "downlink"):
            rows.append(trial(h, "cubic", direction=d, bucket=b, rtt_mean_ms=base,
                              goodput_kbps=rng.gamma(2, 4000)))
            rows.append(trial(h, "copa-0.04", direction=d, bucket=b,
                              rtt_mean_ms=base * rng.uniform(0.5, 1.0),
                              goodput_kbps=rng.gamma(2, 3500)))
    weights = {h: float(rng.uniform(0.2, 9.6)) for h in range(n)}
    return frame(rows), households(weights)


def test_bootstrap_is_seeded_and_covers_the_estimate():
    trials, hh = random_trials()
    a = percentile_table(trials, hh, seed=11, metrics=["rtt_mean_ms", "goodput_kbps"])
    b = percentile_table(trials, hh, seed=11, metrics=["rtt_mean_ms", "goodput_kbps"])
    c = percentile_table(trials, hh, seed=12, metrics=["rtt_mean_ms", "goodput_kbps"])
    pd.testing.assert_frame_equal(a, b)
    ci = ["ci_low_group", "ci_high_group", "ci_low_paired", "ci_high_paired"]
    assert not a[ci].equals(c[ci])
    assert a[["value", "change_group", "change_paired"]].equals(
        c[["value", "change_group", "change_paired"]])
    copa = a[a["variant"] == "copa-0.04"]
    assert len(copa) == 2 * 3 * 2 * 6  # directions x buckets (all, 0-30, 50+) x metrics x pct
    assert copa[ci + ["change_group", "change_paired"]].notna().all().all()
    for view_ in ("group", "paired"):
        assert (copa[f"ci_low_{view_}"] <= copa[f"change_{view_}"]).all()
        assert (copa[f"change_{view_}"] <= copa[f"ci_high_{view_}"]).all()
        assert (copa[f"ci_low_{view_}"] < copa[f"ci_high_{view_}"]).any()
    # every copa RTT is 0.5-1.0 x its household's cubic one: the paired change and its interval
    # lie in [-0.5, 0]
    rtt = copa[copa["metric"] == "rtt_mean_ms"]
    assert rtt["ci_low_paired"].min() >= -0.5 and rtt["ci_high_paired"].max() <= 0
    # a bucket is its own block: the 50+ rows do not change when the 0-30 households go
    only = percentile_table(trials[trials["price_bucket"] == "50+"], hh, seed=11,
                            metrics=["rtt_mean_ms", "goodput_kbps"])
    pd.testing.assert_frame_equal(
        a[a["bucket"] == "50+"].reset_index(drop=True),
        only[only["bucket"] == "50+"].reset_index(drop=True))


def test_weights_are_respected():
    # household 4 (weight 4) split into two households 4 and 6 of weight 2 each, same values:
    # the same distributions, so the same percentiles and changes
    trials = hand_trials()
    twin = trials[trials["household_id"] == 4].assign(household_id=6)
    w = {**HAND_WEIGHTS, 4: 2.0, 6: 2.0}
    split = percentile_table(pd.concat([trials, twin], ignore_index=True), households(w),
                             metrics=["rtt_mean_ms"])
    one = percentile_table(trials, households(HAND_WEIGHTS), metrics=["rtt_mean_ms"])
    cols = ["value", "cubic_value", "change_group", "change_paired"]
    pd.testing.assert_frame_equal(split[cols], one[cols])
    assert (view(split, "cubic")["n_households"] == 6).all()
    # and the weights matter: with equal weights cubic's p50 is 30, not 40
    equal = percentile_table(trials, households({h: 1.0 for h in HAND_WEIGHTS}),
                             metrics=["rtt_mean_ms"])
    assert view(equal, "cubic").loc[50, "value"] == 30


def test_weights_from_the_trials_table():
    trials = hand_trials().assign(weight=lambda t: t["household_id"].map(HAND_WEIGHTS))
    df = percentile_table(trials, metrics=["rtt_mean_ms"], seed=7)
    hand = percentile_table(hand_trials(), households(HAND_WEIGHTS), metrics=["rtt_mean_ms"],
                            seed=7)
    pd.testing.assert_frame_equal(df, hand)
    with pytest.raises(PercentileInputError, match="weights given twice"):
        percentile_table(trials, households(HAND_WEIGHTS))
    trials.loc[trials.index[0], "weight"] = 3.0  # household 1's trials disagree
    with pytest.raises(PercentileInputError, match="differs between trials of household.*1"):
        percentile_table(trials)


def test_missing_metric_gives_nan_rows_with_no_households():
    # no trial has a transport RTT; copa has no goodput; cubic has one for households 1-2 only
    trials = hand_trials()
    trials.loc[(trials["variant"] == "cubic") & trials["household_id"].isin([1, 2]),
               "goodput_kbps"] = 1000.0
    df = percentile_table(trials, households(HAND_WEIGHTS))
    t = df[df["metric"] == "transport_rtt_mean_ms"]
    assert len(t) == 2 * 2 * 6  # variants x buckets (all, 0-30) x pct: kept, NaN, none
    assert t["value"].isna().all() and t["change_group"].isna().all()
    assert t["ci_low_paired"].isna().all() and (t["n_households"] == 0).all()
    g = view(df, "copa-0.04", "goodput_kbps")
    assert g["value"].isna().all() and (g["n_households"] == 0).all()
    assert (g["cubic_value"] == 1000.0).all() and g["change_group"].isna().all()
    assert (view(df, "cubic", "goodput_kbps")["n_households"] == 2).all()
    # the metric present is unaffected
    assert view(df, "copa-0.04")["value"].tolist() == [10, 20, 20, 30, 40, 50]


def test_partial_metric_averages_the_repetitions_that_have_it():
    trials = hand_trials()
    trials.loc[(trials["household_id"] == 1) & (trials["variant"] == "cubic"),
               "transport_rtt_mean_ms"] = [np.nan, 7.0]
    m = household_means(trials, households(HAND_WEIGHTS))
    row = m[(m["household_id"] == 1) & (m["variant"] == "cubic")].iloc[0]
    assert row["transport_rtt_mean_ms"] == 7.0


def test_buckets():
    bucket_of = {1: "0-30", 2: "0-30", 3: "50+", 4: "50+", 5: "50+"}
    df = percentile_table(hand_trials(bucket_of=bucket_of), households(HAND_WEIGHTS),
                          metrics=["rtt_mean_ms"])
    assert list(dict.fromkeys(df["bucket"])) == ["all", "0-30", "50+"]
    # 0-30: cubic 10 (w 1), 20 (w 1): p10..p50 10, p75.. 20
    assert view(df, "cubic", bucket="0-30")["value"].tolist() == [10, 10, 10, 20, 20, 20]
    assert (view(df, "cubic", bucket="50+")["n_households"] == 3).all()
    assert view(df, "cubic")["value"].tolist() == [10, 30, 40, 40, 50, 50]
    assert set(percentile_table(hand_trials(bucket_of=bucket_of), households(HAND_WEIGHTS),
                                metrics=["rtt_mean_ms"], by_bucket=False)["bucket"]) == {"all"}


def test_no_cubic_baseline_is_an_error_naming_it():
    trials = hand_trials()
    trials = pd.concat([trials, trials.assign(direction="downlink")], ignore_index=True)
    trials = trials[~((trials["variant"] == "cubic") & (trials["direction"] == "downlink"))]
    with pytest.raises(PercentileInputError,
                       match=r"no 'cubic' baseline for tool tquic-perf, direction downlink: .*"
                             r"copa-0\.04"):
        percentile_table(trials, households(HAND_WEIGHTS))


@pytest.mark.parametrize("change, match", [
    (lambda t, h: (t.drop(columns="variant"), h), "lacks column.*variant"),
    (lambda t, h: (t, h[h["unit_id"] != 3]), r"no 'weight' for 1 household.*: 3"),
    (lambda t, h: (t, h.assign(weight=[1, 1, 0, 1, 1.0])), "finite number > 0.*3: 0"),
    (lambda t, h: (t, None), "no household weights"),
    (lambda t, h: (t.assign(rtt_mean_ms=-t["rtt_mean_ms"]), h), "rtt_mean_ms must be.*> 0"),
    (lambda t, h: (t.iloc[:0], h), "empty"),
])
def test_bad_input(change, match):
    trials, hh = change(hand_trials(), households(HAND_WEIGHTS))
    with pytest.raises(PercentileInputError, match=match):
        percentile_table(trials, hh)


def test_too_few_resamples():
    with pytest.raises(PercentileInputError, match="at least 1000"):
        percentile_table(hand_trials(), households(HAND_WEIGHTS), n_resamples=999)
    with pytest.raises(PercentileInputError, match="seed -1"):
        percentile_table(hand_trials(), households(HAND_WEIGHTS), seed=-1)


def test_write_and_read(tmp_path, hand):
    path = tmp_path / "tables" / "percentiles.parquet"
    write_percentiles(hand, path)
    assert [p.name for p in path.parent.iterdir()] == ["percentiles.parquet"]  # no temp file
    md = pq.read_schema(path).metadata
    assert md[b"latency_divide.table"] == b"percentiles"
    assert md[b"latency_divide.schema_version"] == str(PERCENTILES_SCHEMA_VERSION).encode()
    assert pq.read_schema(path).remove_metadata().equals(PERCENTILES_SCHEMA)
    pd.testing.assert_frame_equal(read_percentiles(path), hand)


# ------------------------------------------------------------------------------------------
# Facebook's table beside ours (analysis.facebook, `latency-divide percentiles`)
# ------------------------------------------------------------------------------------------

def test_side_by_side_takes_the_group_change_of_the_hand_case(hand, tmp_path):
    from latency_divide.analysis.facebook import FACEBOOK, side_by_side, to_markdown

    df = side_by_side(hand)
    assert len(df) == len(FACEBOOK)
    # the hand case has only rtt_mean_ms and copa-0.04: Facebook's application-RTT p50 and p90
    # of Copa are matched with the hand case's own group changes, everything else is n/a
    p50 = df[(df.metric == "rtt_mean_ms") & (df.percentile == 50) & (df.group == "copa")].iloc[0]
    ours = view(hand, "copa-0.04").loc[50.0]
    assert p50.facebook == -0.04 and p50.ours == ours["change_group"]
    assert (p50.ci_low, p50.ci_high) == (ours["ci_low_group"], ours["ci_high_group"])
    assert p50.agrees == (ours["ci_low_group"] <= -0.04 <= ours["ci_high_group"])
    bbr = df[df.group == "bbr"]
    assert bbr["ours"].isna().all() and not bbr["agrees"].any()
    md = to_markdown(df)
    assert md.count("\n") == len(FACEBOOK) + 1
    assert f"| application RTT (ping) | p50 | copa (copa-0.04) | -4 % | {100 * ours['change_group']:+.0f} %" in md


def test_percentiles_cli(hand, tmp_path):
    import subprocess
    import sys

    path = tmp_path / "percentiles.parquet"
    write_percentiles(hand, path)

    def run(*args):
        return subprocess.run([sys.executable, "-m", "latency_divide.cli", "percentiles", *args],
                              capture_output=True, text=True)
    ok = run(str(path))
    assert ok.returncode == 0 and "| goodput | p50 | copa (copa-0.04) | +16 % | n/a" in ok.stdout
    bad = run(str(path), "--bucket", "9-10")
    assert bad.returncode != 0 and "--bucket '9-10': the table has 0-30, all" in bad.stderr
    gone = run(str(tmp_path / "nope.parquet"))
    assert gone.returncode != 0 and "nope.parquet: no such file" in gone.stderr
