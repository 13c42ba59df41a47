"""Figures from tables built on the real trial fixtures."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from conftest import TEST_DATA
from scipy import stats

from latency_divide.analysis.provenance import verify
from latency_divide.analysis.tables import build_tables, summary
from latency_divide.analysis import figures

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

TRIALS = TEST_DATA / "trials"
DIRS = sorted(p.parent for p in TRIALS.glob("def-*/*/*/*/rep*/meta.json"))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("fig")
    t = build_tables(DIRS, root / "tables")
    recs = {}
    for name in figures.FIGURES:
        recs[name] = figures.build_figure(
            name, root / "tables", root / f"{name}.pdf", root / f"{name}.png",
            root / f"{name}.provenance.json", household_order=[799254, 9254])
    return root, t, recs


def test_every_figure_written_as_pdf_png_and_sidecar(built):
    root, _, recs = built
    for name in figures.FIGURES:
        assert (root / f"{name}.pdf").read_bytes()[:5] == b"%PDF-"
        assert (root / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        side = json.loads((root / f"{name}.provenance.json").read_text())
        assert side == recs[name]
        assert verify(root / f"{name}.pdf").ok
    assert not list(root.glob(".*ld-tmp*"))


def test_sidecars_name_the_households_used(built):
    _, _, recs = built
    assert recs["delay_tput"]["households"] == {"0-30": [13570, 799254], "30-40": [9254]}
    assert len(recs["delay_tput"]["trials"]) == 5
    # timeseries: the first household of the given order with a trial, both its trials only
    assert recs["timeseries"]["households"] == {"0-30": [799254]}
    assert {t["variant"] for t in recs["timeseries"]["trials"]} == {"cubic", "copa-0.5"}


def test_delay_tput_plot_maps_summary_columns(built):
    _, t, _ = built
    p = figures.delay_tput_plot(summary(t.trials), figures.variant_order(t.trials))
    assert p.mapping["x"] == "norm_tput_mean" and p.mapping["y"] == "self_delay_mean_ms_mean"
    assert list(p.data["variant"].cat.categories) == ["cubic", "copa-0.5"]
    # error bars only where the CI exists (buckets with >= 2 households)
    assert len(p.layers[0].geom.data) == 2
    with pytest.raises(figures.FigureError, match="empty"):
        figures.delay_tput_plot(summary(t.trials).iloc[0:0])


def test_divide_table_by_hand(built):
    _, t, _ = built
    d = figures.divide_table(t.trials)
    tr = t.trials.set_index(["household_id", "variant"])["self_delay_mean_ms"]
    red = [100 * (1 - tr[(h, "copa-0.5")] / tr[(h, "cubic")]) for h in (13570, 799254)]
    row = d[(d["price_bucket"] == "0-30") & (d["direction"] == "uplink")].iloc[0]
    assert row["households"] == 2
    assert row["reduction_pct_mean"] == pytest.approx(np.mean(red))
    half = stats.t.ppf(0.975, 1) * np.std(red, ddof=1) / math.sqrt(2)
    assert row["reduction_pct_ci95_hi"] == pytest.approx(np.mean(red) + half)
    assert set(d["price_bucket"]) == {"0-30"}  # 9254 has no Copa trial: no ratio
    # one household: no interval
    single = figures.divide_table(t.trials[t.trials["household_id"] == 13570])
    assert single["households"].tolist() == [1]
    assert math.isnan(single["reduction_pct_ci95_lo"].iloc[0])


def test_divide_leaves_out_nonpositive_baseline_with_warning(built):
    _, t, _ = built
    tr = t.trials.copy()
    tr.loc[(tr["household_id"] == 13570) & (tr["variant"] == "cubic"), "self_delay_mean_ms"] = 0.0
    with pytest.warns(UserWarning, match="13570"):
        d = figures.divide_table(tr)
    assert d["households"].tolist() == [1]
    with pytest.raises(figures.FigureError, match="baseline variant 'bbr'"):
        figures.divide_table(tr, baseline="bbr")


def test_divide_baseline_is_the_one_cubic_variant_of_an_unbound_data_set(built):
    """config/fast-links-checked.yaml has cubic-1m and no `cubic`: that is the baseline."""
    _, t, _ = built
    tr = t.trials.copy()
    tr["variant"] = tr["variant"] + "-1m"
    d = figures.divide_table(tr)
    assert not d.empty and not d["variant"].str.startswith("cubic").any()
    assert figures.baseline_variant(tr) == "cubic-1m"
    tr2 = pd.concat([tr, t.trials])  # two Cubic variants: no guess
    assert figures.baseline_variant(tr2) == "cubic"


def test_orders_and_household_choice(built):
    _, t, _ = built
    assert figures.bucket_order(["50+", "30-40", "0-30", "40-50", "100+"]) == [
        "0-30", "30-40", "40-50", "50+", "100+"]
    assert figures.variant_order(pd.DataFrame({
        "variant": ["copa-0.8", "cubic", "copa-0.2"], "cc": ["copa", "cubic", "copa"],
        "delta": [0.8, math.nan, 0.2]})) == ["cubic", "copa-0.2", "copa-0.8"]
    assert figures.pick_household(t.trials, None) == 9254
    assert figures.pick_household(t.trials, None, [11406, 13570]) == 13570
    assert figures.pick_household(t.trials, 799254) == 799254
    with pytest.raises(figures.FigureError, match="11406 has no valid trial"):
        figures.pick_household(t.trials, 11406)


def test_timeseries_frame_has_three_metrics(built):
    _, t, _ = built
    ts = {"ping": t.ping, "queue": t.queue, "throughput": t.throughput}
    f = figures.timeseries_frame(ts, t.trials, 13570)
    assert list(f["metric"].cat.categories) == ["RTT (ms)", "backlog (bytes)", "goodput (kbit/s)"]
    assert set(f["direction"]) == {"uplink"} and set(f["variant"]) == {"cubic", "copa-0.5"}
    assert set(f["metric"]) == set(f["metric"].cat.categories)
    n_ping = (t.ping["household_id"] == 13570).sum() - t.ping.loc[
        t.ping["household_id"] == 13570, "rtt_ms"].isna().sum()
    assert (f["metric"] == "RTT (ms)").sum() == n_ping


def test_unknown_figure(built):
    root, _, _ = built
    with pytest.raises(figures.FigureError, match="unknown figure 'pie'"):
        figures.make_figure("pie", root / "tables")


def test_box_stats_by_hand_and_as_plotnine_computes_them(built):
    # by hand: 1..4 and 100; quartiles 2, 3, 4 (linear), IQR 2, upper fence 7 -> whisker at 4,
    # 100 an outlier; a second group without outliers
    d = pd.DataFrame({"g": ["a"] * 5 + ["b"] * 4, "y": [1, 2, 3, 4, 100, 5, 6, 7, 8]})
    st, out = figures.box_stats(d, ["g"], "y")
    a = st.set_index("g").loc["a"]
    assert (a["n"], a["lower"], a["middle"], a["upper"], a["ymin"], a["ymax"]) == (
        5, 2, 3, 4, 1, 4)
    assert out.to_dict("list") == {"g": ["a"], "y": [100.0]}
    b = st.set_index("g").loc["b"]
    assert (b["lower"], b["middle"], b["upper"], b["ymin"], b["ymax"]) == (5.75, 6.5, 7.25, 5, 8)
    # a quartile in a gap: the whisker stops at the box (q1 = 75), 0 is an outlier; NaN and a
    # group of NaN only are left out
    gap = pd.DataFrame({"g": ["c"] * 5 + ["d"], "y": [0, 100, 100, 100, np.nan, np.nan]})
    st, out = figures.box_stats(gap, ["g"], "y")
    c = st.set_index("g").loc["c"]
    assert list(st["g"]) == ["c"] and (c["n"], c["lower"], c["ymin"], c["ymax"]) == (4, 75, 75, 100)
    assert out["y"].tolist() == [0.0]
    # the same numbers as plotnine's own stat_boxplot over every sample of the fixtures' pings
    from plotnine.stats.stat_boxplot import weighted_boxplot_stats
    _, t, _ = built
    ping = t.ping[t.ping["during_transfer"] & t.ping["self_delay_ms"].notna()]
    st, out = figures.box_stats(ping, ["direction", "variant"], "self_delay_ms")
    assert len(st) == ping.groupby(["direction", "variant"]).ngroups >= 2
    n_out = 0
    for _, row in st.iterrows():
        v = ping[(ping["direction"] == row["direction"]) & (ping["variant"] == row["variant"])]
        ref = weighted_boxplot_stats(v["self_delay_ms"].to_numpy())
        assert [row[k] for k in ("lower", "middle", "upper", "ymin", "ymax")] == pytest.approx(
            [ref["q1"], ref["med"], ref["q3"], ref["whislo"], ref["whishi"]])
        n_out += len(ref["fliers"])
    assert len(out) == n_out


def _collections(geom, df, **kw):
    """The PathCollections of each panel after drawing ``geom`` over ``df`` (two facets)."""
    import matplotlib.pyplot as plt
    from matplotlib.collections import PathCollection
    from plotnine import aes, facet_wrap, ggplot

    fig = (ggplot(df, aes("x", "y")) + geom(**kw) + facet_wrap("f")).draw()
    try:
        return [[c for c in ax.collections if isinstance(c, PathCollection)] for ax in fig.axes]
    finally:
        plt.close(fig)


def test_geom_cloud_draws_the_points_of_geom_point_in_its_style():
    from plotnine import geom_point
    from latency_divide.analysis.plotgeoms import geom_cloud

    rng = np.random.default_rng(3)
    df = pd.DataFrame({"x": rng.normal(size=3000), "y": rng.normal(size=3000),
                       "f": np.repeat(["a", "b"], 1500)})
    style = dict(size=0.3, alpha=0.3, colour="#333333", stroke=0.5)
    ref, got = _collections(geom_point, df, **style), _collections(geom_cloud, df, **style)
    assert [len(p) for p in got] == [len(p) for p in ref] and sum(map(len, got)) == 2
    for (r,), (g,) in zip((p for p in ref if p), (p for p in got if p)):
        assert len(g.get_offsets()) == 1500
        np.testing.assert_array_equal(g.get_offsets(), r.get_offsets())
        # geom_point: one value per point, all the same; geom_cloud: that value once
        for get in ("get_sizes", "get_facecolor", "get_edgecolor", "get_linewidth"):
            rv, gv = np.asarray(getattr(r, get)()), np.asarray(getattr(g, get)())
            assert len(gv) == 1 and len(rv) == 1500, get
            np.testing.assert_array_equal(rv, np.repeat(gv, 1500, axis=0), err_msg=get)
        assert g.get_paths()[0].vertices.tolist() == r.get_paths()[0].vertices.tolist()


def test_geom_cloud_leaves_points_of_different_styles_to_geom_point():
    from plotnine import aes, geom_point
    from latency_divide.analysis.plotgeoms import geom_cloud

    df = pd.DataFrame({"x": [0.0, 1, 2, 3], "y": [1.0, 2, 3, 4], "f": ["a"] * 4,
                       "s": [1.0, 2, 1, 2]})
    ref = _collections(geom_point, df, mapping=aes(size="s"))
    got = _collections(geom_cloud, df, mapping=aes(size="s"))
    (r,), (g,) = ref[0], got[0]
    np.testing.assert_array_equal(g.get_sizes(), r.get_sizes())
    assert len(set(g.get_sizes())) == 2 and len(g.get_offsets()) == 4


def _drawn(d):
    """{file name: bytes} of the PDFs and PNGs under ``d``, and its sidecars without their own
    paths and time."""
    out = {}
    for f in sorted(d.iterdir()):
        if f.suffix in (".pdf", ".png"):
            out[f.name] = f.read_bytes()
        elif f.name.endswith(".provenance.json"):
            rec = json.loads(f.read_text().replace(str(d), "@"))
            rec.pop("created_at")
            out[f.name] = rec
    return out


def test_a_figures_job_draws_what_each_figure_alone_draws_in_one_or_two_processes(
        built, tmp_path, monkeypatch):
    """Issue 59: a figures job reads each table once (analysis.figinputs) and, with two threads,
    draws in two processes; every PDF and PNG is the bytes of the figure drawn on its own
    (SOURCE_DATE_EPOCH: no time in the PDFs), every sidecar the same record."""
    from latency_divide.analysis.jobs import figures_job

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    root = built[0]
    drawn = {}
    for how in ("alone", 1, 2):
        d = tmp_path / str(how)
        d.mkdir()
        if how == "alone":
            for name in figures.FIGURES:
                figures.build_figure(name, root / "tables", d / f"{name}.pdf", d / f"{name}.png",
                                     d / f"{name}.provenance.json", household_order=[799254, 9254])
        else:
            figures_job(figures.FIGURES, str(root / "tables" / "trials.parquet"),
                        lambda n, d=d: str(d / (n.rsplit("_", 1)[0] + (
                            ".provenance.json" if n.endswith("_provenance")
                            else "." + n.rsplit("_", 1)[1]))),
                        household_order=[799254, 9254], processes=how)
        drawn[how] = _drawn(d)
    assert len(drawn["alone"]) == 3 * len(figures.FIGURES)
    assert drawn[1] == drawn["alone"] and drawn[2] == drawn["alone"]


def test_figure_inputs_check_a_table_read_in_part(built, tmp_path):
    from latency_divide.analysis.figinputs import FigureInputs
    from latency_divide.errors import LatencyDivideError

    root = built[0]
    (tmp_path / "timeseries").mkdir()
    (tmp_path / "timeseries" / "ping.parquet").write_bytes(
        (root / "tables" / "timeseries" / "queue.parquet").read_bytes())
    with pytest.raises(LatencyDivideError, match=r"table 'queue' schema version '\d+'; this "
                                                 r"code reads 'ping'"):
        FigureInputs(tmp_path).table("ping", ["household_id", "rtt_ms"])
    got = FigureInputs(root / "tables").table("ping", ["household_id", "rtt_ms"], household=9254)
    assert list(got.columns) == ["household_id", "rtt_ms"] and set(got["household_id"]) == {9254}
