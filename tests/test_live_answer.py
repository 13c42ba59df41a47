"""Facebook's table beside the live population runs (issue 58, item 4; analysis.answer,
analysis.facebook, analysis.population; docs/live.md "Facebook's table, live"): the
live metrics' percentiles and bootstrap intervals, Facebook's RTX-overhead rows (in words only),
and the side-by-side columns with and without live runs. From small crafted trials and
percentile tables; quick: no trial, no namespace."""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT

from latency_divide.analysis.answer import (
    BESIDE,
    LIVE_NOTE,
    PAIRS,
    all_markdown,
    answer_pairs,
    answer_table,
    app_of,
    build_answer,
    read_answer,
    to_markdown,
)
from latency_divide.analysis.companions import load_companions
from latency_divide.analysis.facebook import FACEBOOK, FACEBOOK_STATED, LIVE_METRIC_OF
from latency_divide.analysis.population import (
    LIVE_METRICS,
    METRICS,
    PercentileInputError,
    metrics_for,
    percentile_table,
    write_percentiles,
)

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

HH = list(range(1, 11))
LIVE_COLS = ("transport_rtt_mean_ms", "goodput_fb_kbps", "app_rtt_mean_ms",
             "app_rtt_inband_mean_ms", "rtx_overhead")


def _trials(factor: dict[str, float], directions=("uplink",), live=True, rtx=None,
            tool="tquic-perf") -> pd.DataFrame:
    """10 households; every metric of a variant is Cubic's x ``factor[variant]`` (so each group
    change is exactly factor - 1). Live: the live columns, ``rtx`` the Cubic RTX overheads
    (default 0.01 x (i + 1)); bulk: the bulk columns, live ones null."""
    rows = []
    for d in directions:
        for v, f in factor.items():
            for i, h in enumerate(HH):
                base = 10.0 * (i + 1)
                row = {"tool": tool, "definition_id": f"def-{v}", "household_id": h,
                       "price_bucket": "50+" if i % 2 else "0-30", "direction": d,
                       "variant": v, "repetition": 1, "weight": 1.0,
                       "live_abr": "rate" if live else None}
                if live:
                    cubic_rtx = rtx[i] if rtx is not None else 0.01 * (i + 1)
                    row.update(transport_rtt_mean_ms=base * f, goodput_fb_kbps=100 * base * f,
                               app_rtt_mean_ms=base * f, app_rtt_inband_mean_ms=2 * base * f,
                               rtx_overhead=cubic_rtx * f, rtt_mean_ms=None, goodput_kbps=None)
                else:
                    row.update(transport_rtt_mean_ms=base * f, rtt_mean_ms=base * f,
                               goodput_kbps=100 * base * f,
                               **dict.fromkeys(LIVE_COLS[1:]))
                rows.append(row)
    return pd.DataFrame(rows)


def _pct(copa, bbr, *, live, directions=("uplink",), tool="tquic-perf"):
    return percentile_table(_trials({"cubic": 1.0, "copa-0.04": 1 + copa, "bbr": 1 + bbr},
                                    directions, live=live, tool=tool), seed=1)


def _view(df, variant, metric, bucket="all"):
    sel = df[(df["variant"] == variant) & (df["metric"] == metric) & (df["bucket"] == bucket)
             & (df["direction"] == "uplink")]
    return sel.set_index("percentile")


# ------------------------------------------------------------------------------------------
# The live run's percentile table: Facebook's metrics, with the bulk answer's view
# ------------------------------------------------------------------------------------------

def test_a_live_runs_table_has_facebooks_metrics_with_group_change_and_intervals():
    t = percentile_table(_trials({"cubic": 1.0, "copa-0.04": 1.16, "bbr": 0.9}), seed=1)
    assert metrics_for(_trials({"cubic": 1.0})) == (*METRICS, *LIVE_METRICS)
    assert set(LIVE_METRICS) <= set(t["metric"])
    for metric in LIVE_COLS:
        cubic = _view(t, "cubic", metric)
        copa = _view(t, "copa-0.04", metric)
        # the inverted CDF of 10 equal-weight households: p50 is the 5th value, p10 the 1st
        base = {"goodput_fb_kbps": 1000.0, "app_rtt_inband_mean_ms": 20.0,
                "rtx_overhead": 0.01}.get(metric, 10.0)
        assert cubic.loc[50.0, "value"] == pytest.approx(5 * base)
        assert cubic.loc[10.0, "value"] == pytest.approx(base)
        assert copa.loc[50.0, "value"] == pytest.approx(5 * base * 1.16)
        # every household changes by the same factor: every resample's change is that factor
        for col in ("change_group", "ci_low_group", "ci_high_group", "change_paired"):
            assert copa[col].round(9).eq(0.16).all(), (metric, col)
        assert (copa["n_households"] == len(HH)).all()
        assert _view(t, "bbr", metric)["change_group"].round(9).eq(-0.1).all()
    # each price bucket has its own rows, as the bulk table's
    assert set(t["bucket"]) == {"all", "0-30", "50+"}


def test_a_live_metrics_interval_is_the_household_bootstrap_of_the_bulk_answer():
    """A change that differs household by household: the interval is the 2.5th and 97.5th
    percentile of the group change over 1000 household resamples drawn from the block's own
    generator, recomputed here with numpy's weighted quantile."""
    rng = np.random.default_rng(3)
    t = _trials({"cubic": 1.0, "copa-0.04": 1.0})
    copa = t["variant"] == "copa-0.04"
    t.loc[copa, "rtx_overhead"] = rng.uniform(0.001, 0.2, copa.sum())
    t.loc[copa, "goodput_fb_kbps"] = rng.uniform(500, 3000, copa.sum())
    table = percentile_table(t, seed=5, by_bucket=False)
    pct = np.array([10, 25, 50, 75, 90, 95], dtype=float)
    for metric in ("rtx_overhead", "goodput_fb_kbps"):
        wide = t.pivot(index="household_id", columns="variant", values=metric)
        x, c = wide["copa-0.04"].to_numpy(), wide["cubic"].to_numpy()
        gen = np.random.default_rng([5, zlib.crc32(f"tquic-perf|uplink|all|{metric}".encode())])
        counts = gen.multinomial(len(HH), np.full(len(HH), 1 / len(HH)), size=1000)

        def q(v, w):
            return np.quantile(v, pct / 100, weights=w, method="inverted_cdf")
        boot = np.array([q(x, w) / q(c, w) - 1 for w in counts.astype(float)])
        lo, hi = np.nanquantile(boot, (0.025, 0.975), axis=0)
        got = _view(table, "copa-0.04", metric)
        np.testing.assert_allclose(got["change_group"], q(x, np.ones(10)) / q(c, np.ones(10)) - 1)
        np.testing.assert_allclose(got["ci_low_group"], lo)
        np.testing.assert_allclose(got["ci_high_group"], hi)
        assert (got["ci_low_group"] < got["ci_high_group"]).all()


def test_rtx_overhead_may_be_zero_other_metrics_may_not():
    zero = [0.0] * 5 + [0.01 * i for i in range(1, 6)]
    t = percentile_table(_trials({"cubic": 1.0, "copa-0.04": 0.5}, rtx=zero), seed=1,
                         by_bucket=False)
    copa = _view(t, "copa-0.04", "rtx_overhead")
    assert copa.loc[10.0, "value"] == 0 and copa.loc[10.0, "cubic_value"] == 0
    assert np.isnan(copa.loc[10.0, "change_group"])  # 0 / 0: no change
    assert copa.loc[95.0, "change_group"] == pytest.approx(-0.5)
    bad = _trials({"cubic": 1.0})
    bad.loc[0, "rtx_overhead"] = -0.1
    with pytest.raises(PercentileInputError, match=r"rtx_overhead must be a finite number >= 0"):
        percentile_table(bad, seed=1)
    bad = _trials({"cubic": 1.0})
    bad.loc[0, "goodput_fb_kbps"] = 0.0
    with pytest.raises(PercentileInputError, match=r"goodput_fb_kbps must be a finite number > 0"):
        percentile_table(bad, seed=1)


def test_a_bulk_runs_table_keeps_its_three_metrics():
    t = _pct(0.1, 0.0, live=False)
    assert metrics_for(_trials({"cubic": 1.0}, live=False)) == METRICS
    assert set(t["metric"]) == set(METRICS)


# ------------------------------------------------------------------------------------------
# Facebook's RTX-overhead rows and the live rows of the answer
# ------------------------------------------------------------------------------------------

def test_facebooks_rtx_rows_are_in_words_from_the_deck():
    deck = (ROOT.parent / "shared" / "seeds" / "copa-facebook-ietf106.txt")
    if deck.exists():  # the deck's words, as the rows state them
        text = deck.read_text()
        assert "RTX overhead is lower for" in text and "Grows rapidly for the last 10%" in text
    assert {s.metric for s in FACEBOOK_STATED} == {"rtx_overhead"}
    assert {s.variant for s in FACEBOOK_STATED} == {"copa"}  # the deck says nothing of BBR's
    assert [(s.percentile, s.sign) for s in FACEBOOK_STATED] == [
        (10, -1), (50, -1), (75, -1), (95, 1)]
    assert not any(p.metric == "rtx_overhead" for p in FACEBOOK)  # no invented number


def test_a_live_run_answers_with_facebooks_metrics_and_the_rtx_rows():
    df = answer_table([("live", "qfactor", _pct(0.16, -0.2, live=True), "live")])
    assert len(df) == len(FACEBOOK) + len(FACEBOOK_STATED)
    assert set(df["app"]) == {"live"}
    numbers = df[df["facebook"].notna()]
    assert (numbers["metric"] == numbers["facebook_metric"].map(LIVE_METRIC_OF)).all()
    assert {"goodput_fb_kbps", "app_rtt_mean_ms", "transport_rtt_mean_ms"} == set(
        numbers["metric"])
    assert numbers.loc[numbers["group"] == "copa", "change"].round(6).eq(0.16).all()
    assert not numbers["facebook_inside"].any()  # every interval has zero width
    # an interval around Facebook's goodput p50 +16 %, on the live column (goodput_fb_kbps)
    pct = _pct(0.16, -0.2, live=True)
    at = ((pct["metric"] == "goodput_fb_kbps") & (pct["percentile"] == 50)
          & (pct["variant"] == "copa-0.04") & (pct["bucket"] == "all"))
    pct.loc[at, ["ci_low_group", "ci_high_group"]] = (0.1, 0.2)
    wide = answer_table([("live", "qfactor", pct, "live")])
    inside = wide[wide["facebook_inside"] & wide["facebook"].notna()]
    assert set(zip(inside["facebook_metric"], inside["percentile"], inside["group"])) == {
        ("goodput_kbps", 50, "copa")}
    rtx = df[df["facebook_metric"] == "rtx_overhead"]
    assert len(rtx) == len(FACEBOOK_STATED) and rtx["facebook"].isna().all()
    assert list(rtx["facebook_says"]) == [s.says for s in FACEBOOK_STATED]
    assert rtx["change"].round(6).eq(0.16).all()
    # +16 % everywhere: on Facebook's side only at p95, where it states higher
    assert list(rtx["facebook_inside"]) == [False, False, False, True]
    lower = answer_table([("live", "qfactor", _pct(-0.3, 0.0, live=True), "live")])
    assert list(lower.loc[lower["facebook_metric"] == "rtx_overhead", "facebook_inside"]) == [
        True, True, True, False]
    assert numbers["facebook_says"].isna().all()


# ------------------------------------------------------------------------------------------
# Side by side: Facebook | bulk 2 x BDP | bulk measured | live 2 x BDP | live measured
# ------------------------------------------------------------------------------------------

BOTH = ("uplink", "downlink")


def _four():
    return [("population", "qfactor", _pct(0.1, 0.05, live=False, directions=BOTH)),
            ("population-buffers", "mba-2014", _pct(-0.38, -0.2, live=False, directions=BOTH)),
            ("live", "qfactor", _pct(0.16, 0.05, live=True), "live"),
            ("live-buffers", "mba-2014", _pct(-0.3, -0.1, live=True), "live")]


def test_uplinks_show_bulk_and_live_side_by_side_for_both_buffers():
    df = answer_table(_four())
    lines = to_markdown(df, "tquic-perf", "uplink").splitlines()
    assert lines[0] == ("| metric | percentile | group | Facebook | bulk 2 x BDP [95 % CI] | "
                        "bulk mba-2014 [95 % CI] | live 2 x BDP [95 % CI] | "
                        "live mba-2014 [95 % CI] |")
    assert lines[1] == "|" + "---|" * 8
    assert len(lines) == 2 + len(FACEBOOK) + len(FACEBOOK_STATED)
    assert ("| goodput | p50 | copa | +16 % | +10 % [+10 %, +10 %] | -38 % [-38 %, -38 %] | "
            "+16 % [+16 %, +16 %] | -30 % [-30 %, -30 %] |") in lines
    # RTX overhead: Facebook's words, bulk not measured, ours with both percentiles
    assert ("| RTX overhead | p50 | copa | lower (no number) | not measured | not measured | "
            "+16 % [+16 %, +16 %] (0.058 / 0.050) | -30 % [-30 %, -30 %] (0.035 / 0.050) * |"
            ) in lines
    assert ("| RTX overhead | p95 | copa | higher, growing fast (no number) | not measured | "
            "not measured | +16 % [+16 %, +16 %] (0.116 / 0.100) * | "
            "-30 % [-30 %, -30 %] (0.070 / 0.100) |") in lines
    # the live runs are uplinks only: the downlinks are the bulk pair's alone, as before
    down = to_markdown(df, "tquic-perf", "downlink").splitlines()
    assert down[0] == ("| metric | percentile | group | Facebook | 2 x BDP [95 % CI] | "
                       "mba-2014 [95 % CI] |")
    assert len(down) == 2 + len(FACEBOOK)
    full = all_markdown(df)
    assert full.count(LIVE_NOTE) == 1
    assert full.index("## tquic-perf, uplinks") < full.index(LIVE_NOTE)
    assert full.index("## tquic-perf, downlinks") < full.index("## tquic-perf, uplinks")


def test_the_policed_run_is_a_column_after_the_live_pair_with_its_households():
    """The policed live run (40 of the 240 uplinks) is a third live column, and the note under
    the uplinks names each live run's households."""
    few = _trials({"cubic": 1.0, "copa-0.04": 1.5, "bbr": 1.4})
    policed = percentile_table(few[few["household_id"] <= 4], seed=1)
    df = answer_table([*_four(), ("live-policed", "policed-5ms", policed, "live")])
    lines = to_markdown(df, "tquic-perf", "uplink").splitlines()
    assert lines[0].endswith("| live 2 x BDP [95 % CI] | live mba-2014 [95 % CI] | "
                             "live policed-5ms [95 % CI] |")
    assert ("| goodput | p50 | copa | +16 % | +10 % [+10 %, +10 %] | -38 % [-38 %, -38 %] | "
            "+16 % [+16 %, +16 %] | -30 % [-30 %, -30 %] | +50 % [+50 %, +50 %] |") in lines
    full = all_markdown(df)
    assert full.count(LIVE_NOTE) == 1
    assert LIVE_NOTE + " Households: live 10, live-buffers 10, live-policed 4." in full
    assert set(df.loc[df["run"] == "live-policed", "n_households"]) == {4}
    # the bulk answer is untouched by it: no household note where no live run is
    assert "Households" not in all_markdown(answer_table(_four()[:2]))


def test_without_live_runs_the_answer_is_the_bulk_one():
    bulk = answer_table(_four()[:2])
    full = all_markdown(bulk)
    assert "RTX" not in full and "not measured" not in full and "live" not in full
    assert set(bulk["app"]) == {"bulk"} and bulk["facebook_says"].isna().all()
    up = to_markdown(bulk, "tquic-perf", "uplink").splitlines()
    assert up[0] == ("| metric | percentile | group | Facebook | 2 x BDP [95 % CI] | "
                     "mba-2014 [95 % CI] |")
    assert "| transport RTT | p90 | copa | -38 % | +10 % [+10 %, +10 %] | " \
           "-38 % [-38 %, -38 %] * |" in up
    # one live run alone: its columns named live, its rows with the RTX rows
    alone = to_markdown(answer_table(_four()[2:3]), "tquic-perf", "uplink").splitlines()
    assert alone[0].endswith("| Facebook | live 2 x BDP [95 % CI] |")
    assert len(alone) == 2 + len(FACEBOOK) + len(FACEBOOK_STATED)


def test_the_published_answer_is_what_the_code_writes():
    """With the published population runs' percentile tables on disk (after `dvc pull`), the
    answer's Markdown is byte for byte the published results/tables/buffers_answer.md: the bulk
    pairs, then the live pair with the policed run beside it."""
    runs = [(b, m, f"results/companions/{b}/tables/percentiles.parquet", app)
            for b, m, app in (("population", "qfactor", "bulk"),
                              ("population-buffers", "mba-2014", "bulk"),
                              ("population-mvfst", "qfactor", "bulk"),
                              ("population-mvfst-buffers", "mba-2014", "bulk"),
                              ("live", "qfactor", "live"), ("live-buffers", "mba-2014", "live"),
                              ("live-policed", "policed-5ms", "live"))]
    md = ROOT / "results" / "tables" / "buffers_answer.md"
    if not md.exists() or not all((ROOT / p).exists() for _, _, p, _ in runs):
        pytest.skip("the published population runs are not on disk (dvc pull)")
    from latency_divide.analysis.population import read_percentiles
    df = answer_table([(n, m, read_percentiles(ROOT / p), a) for n, m, p, a in runs])
    assert all_markdown(df) == md.read_text()


def test_build_takes_each_runs_app_and_reads_back(tmp_path):
    runs = []
    for name, model, pct, *app in _four():
        path = tmp_path / name / "percentiles.parquet"
        path.parent.mkdir()
        write_percentiles(pct, path)
        runs.append({"name": name, "buffer_model": model, "percentiles": str(path),
                     **({"app": app[0]} if app else {})})
    df = build_answer(runs, tmp_path / "out" / "a.parquet", tmp_path / "out" / "a.md")
    pd.testing.assert_frame_equal(read_answer(tmp_path / "out" / "a.parquet"), df)
    assert (tmp_path / "out" / "a.md").read_text() == all_markdown(df)
    assert all_markdown(read_answer(tmp_path / "out" / "a.parquet")) == all_markdown(df)
    assert df.groupby("app")["run"].unique().map(sorted).to_dict() == {
        "bulk": ["population", "population-buffers"], "live": ["live", "live-buffers"]}
    with pytest.raises(Exception, match="app 'video'"):
        answer_table([("x", "qfactor", _pct(0.1, 0.0, live=True), "video")])


def test_the_live_pair_is_paired_and_live():
    assert ("config/live.yaml", "config/live-buffers.yaml") in PAIRS
    live, buffers = load_companions(["config/live.yaml", "config/live-buffers.yaml"], base=ROOT)
    bulk, = load_companions(["config/population.yaml"], base=ROOT)
    assert app_of(live.cfg) == app_of(buffers.cfg) == "live" and app_of(bulk.cfg) == "bulk"
    assert answer_pairs([live, buffers], [live, buffers]) == [(live, buffers)]
    assert answer_pairs([live, buffers], [live]) == []
    # the policed run beside the pair when on disk, never alone with half of it
    assert BESIDE[("config/live.yaml", "config/live-buffers.yaml")] == (
        "config/live-policed.yaml",)
    policed, = load_companions(["config/live-policed.yaml"], base=ROOT)
    assert policed.cfg.buffer_model == "policed-5ms" and app_of(policed.cfg) == "live"
    assert set(policed.cfg.household_ids()) < set(live.cfg.household_ids())
    every = [live, buffers, policed]
    assert answer_pairs(every, every) == [(live, buffers, policed)]
    assert answer_pairs(every, [live, policed]) == []
    assert sorted(live.cfg.household_ids()) == sorted(bulk.cfg.household_ids())
