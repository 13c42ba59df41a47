"""Facebook's table beside two buffers (issue 41, step 4; analysis.answer): from small synthetic
percentile tables with known changes, and which population runs are paired. Quick: no trial, no
namespace."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import ROOT

from latency_divide.analysis.answer import (
    PAIRS,
    AnswerInputError,
    all_markdown,
    answer_pairs,
    answer_table,
    build_answer,
    read_answer,
    to_markdown,
)
from latency_divide.analysis.companions import load_companions
from latency_divide.analysis.facebook import FACEBOOK, VARIANT_OF
from latency_divide.analysis.population import percentile_table, write_percentiles
from latency_divide.errors import LatencyDivideError

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

HH = list(range(1, 11))


def _pct(copa: float, bbr: float, tool="tquic-perf", directions=("uplink", "downlink")):
    """The percentile table of 10 households whose every metric is Cubic x (1 + change):
    Copa δ 0.04 ``copa``, BBR ``bbr`` (so every group change is exactly that)."""
    rows = []
    for d in directions:
        for v, f in (("cubic", 1.0), ("copa-0.04", 1 + copa), ("bbr", 1 + bbr)):
            for i, h in enumerate(HH):
                base = 10.0 * (i + 1)
                rows.append({"tool": tool, "definition_id": f"def-{v}", "household_id": h,
                             "price_bucket": "50+", "direction": d, "variant": v,
                             "repetition": 1, "transport_rtt_mean_ms": base * f,
                             "rtt_mean_ms": base * f, "goodput_kbps": 100 * base * f,
                             "weight": 1.0})
    return percentile_table(pd.DataFrame(rows), seed=1, n_resamples=1000)


def test_every_facebook_row_under_each_buffer_model_with_its_change():
    df = answer_table([("population", "qfactor", _pct(0.10, 0.05)),
                       ("population-buffers", "mba-2014", _pct(-0.38, -0.2))])
    assert len(df) == 2 * 2 * len(FACEBOOK)  # models x directions x Facebook's rows
    for (model, direction), g in df.groupby(["buffer_model", "direction"]):
        assert len(g) == len(FACEBOOK)
        assert set(zip(g["metric"], g["percentile"], g["group"])) == {
            (p.metric, p.percentile, p.variant) for p in FACEBOOK}
        assert (g["variant"] == g["group"].map(VARIANT_OF)).all()
        assert (g["n_households"] == len(HH)).all()
    q, m = df[df["buffer_model"] == "qfactor"], df[df["buffer_model"] == "mba-2014"]
    assert q.loc[q["group"] == "copa", "change"].round(6).eq(0.10).all()
    assert m.loc[m["group"] == "copa", "change"].round(6).eq(-0.38).all()
    assert m.loc[m["group"] == "bbr", "change"].round(6).eq(-0.2).all()
    # an exact change has a zero-width interval: Facebook's number is inside it only where equal
    inside = m[m["facebook_inside"]]
    assert set(zip(inside["metric"], inside["percentile"], inside["group"])) == {
        ("transport_rtt_mean_ms", 90, "copa")}
    assert not q["facebook_inside"].any()
    assert set(df["run"]) == {"population", "population-buffers"}


def test_markdown_puts_facebook_beside_each_model():
    df = answer_table([("population", "qfactor", _pct(0.10, 0.05)),
                       ("population-buffers", "mba-2014", _pct(-0.38, -0.2))])
    md = to_markdown(df, "tquic-perf", "uplink")
    lines = md.splitlines()
    assert lines[0] == ("| metric | percentile | group | Facebook | 2 x BDP [95 % CI] | "
                        "mba-2014 [95 % CI] |")
    assert len(lines) == 2 + len(FACEBOOK)
    assert ("| transport RTT | p90 | copa | -38 % | +10 % [+10 %, +10 %] | "
            "-38 % [-38 %, -38 %] * |") in lines
    full = all_markdown(df)
    assert "## tquic-perf, uplinks" in full and "## tquic-perf, downlinks" in full
    with pytest.raises(AnswerInputError, match="no rows for tool tperf"):
        to_markdown(df, "tperf", "uplink")


def test_a_tools_rows_cover_the_directions_all_its_runs_have():
    df = answer_table([("population-mvfst", "qfactor", _pct(0.1, 0.0, tool="tperf")),
                       ("population-mvfst-buffers", "mba-2014",
                        _pct(-0.3, 0.0, tool="tperf", directions=("uplink",))),
                       ("population", "qfactor", _pct(0.1, 0.0))])
    assert set(df.loc[df["tool"] == "tperf", "direction"]) == {"uplink"}
    assert set(df.loc[df["tool"] == "tquic-perf", "direction"]) == {"uplink", "downlink"}
    assert len(df) == (2 + 2) * len(FACEBOOK)
    with pytest.raises(AnswerInputError, match=r"share no direction: a: downlink; b: uplink"):
        answer_table([("a", "qfactor", _pct(0.1, 0.0, directions=("downlink",))),
                      ("b", "mba-2014", _pct(0.1, 0.0, directions=("uplink",)))])
    two = pd.concat([_pct(0.1, 0.0), _pct(0.1, 0.0, tool="tperf")])
    with pytest.raises(AnswerInputError, match="tools"):
        answer_table([("mixed", "qfactor", two)])
    with pytest.raises(AnswerInputError, match="no run"):
        answer_table([])


def test_build_writes_table_and_markdown_atomically(tmp_path):
    runs = []
    for name, model, c in (("population", "qfactor", 0.1), ("population-buffers", "mba-2014",
                                                              -0.3)):
        path = tmp_path / name / "percentiles.parquet"
        path.parent.mkdir()
        write_percentiles(_pct(c, 0.0), path)
        runs.append({"name": name, "buffer_model": model, "percentiles": str(path)})
    df = build_answer(runs, tmp_path / "out" / "buffers_answer.parquet",
                      tmp_path / "out" / "buffers_answer.md")
    back = read_answer(tmp_path / "out" / "buffers_answer.parquet")
    pd.testing.assert_frame_equal(back, df)
    assert (tmp_path / "out" / "buffers_answer.md").read_text() == all_markdown(df)
    assert not list((tmp_path / "out").glob("*ld-tmp*"))
    with pytest.raises(LatencyDivideError, match="this code reads 'buffers_answer'"):
        read_answer(tmp_path / "population" / "percentiles.parquet")


def test_pairs_are_the_published_population_runs():
    """PAIRS name the population configs: 2 x BDP (qfactor) first, measured buffers second,
    the same households, variants and tool; a pair is answered only when both are present."""
    existing = [(a, b) for a, b in PAIRS if (ROOT / a).exists() and (ROOT / b).exists()]
    assert ("config/population.yaml", "config/population-buffers.yaml") in existing
    for a, b in existing:
        ca, cb = load_companions([a, b], base=ROOT)
        assert ca.cfg.buffer_model == "qfactor" and cb.cfg.buffer_model != "qfactor"
        assert ca.cfg.tool.name == cb.cfg.tool.name
        assert sorted(ca.cfg.household_ids()) == sorted(cb.cfg.household_ids())
        assert [v.name for v in ca.cfg.variants] == [v.name for v in cb.cfg.variants]
        assert answer_pairs([ca, cb], [ca, cb]) == [(ca, cb)]
        assert answer_pairs([ca, cb], [ca]) == []
