"""The percentile figures of a live population run (issue 58, item 4: "the figures show
Facebook's values on them"; analysis.population_figures, docs/live.md "The answer, when the runs
exist"): Facebook's own per-broadcast metrics (analysis.facebook.LIVE_METRIC_OF) instead of the
bulk trials' columns, Facebook's numbers as open diamonds on them, and its RTX-overhead rows,
given in words only (FACEBOOK_STATED), as open triangles on the 0 line pointing to their side;
a bulk run's figure keeps its metrics and marks.

From crafted trials tables in which every metric of a variant is Cubic's x a factor of its own
per column, so that each group change is exactly that factor - 1 and a panel's values say
which column it plots. Quick: no trial, no namespace; one figure is drawn for real (matplotlib)
and one written to PDF and PNG from tables on disk."""

from __future__ import annotations

import struct

import matplotlib.collections as mcoll
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from latency_divide.analysis.facebook import (
    FACEBOOK,
    FACEBOOK_STATED,
    LIVE_METRIC_OF,
    VARIANT_OF,
    Stated,
)
from latency_divide.analysis.figures import FigureError, save
from latency_divide.analysis.population import (
    LIVE_METRICS,
    METRICS,
    percentile_table,
    read_percentiles,
    write_percentiles,
)
from latency_divide.analysis.population_figures import (
    FACEBOOK_CAPTION,
    LIVE_CAPTION,
    LIVE_METRIC_LABELS,
    METRIC_LABELS,
    STATED_SHAPE,
    build_percentiles,
    figure_size,
    make_population_figure,
    percentiles_plot,
    stated_marks,
    table_app,
)
from latency_divide.analysis.schemas import SCHEMAS
from latency_divide.analysis.tables import write_table

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

HH = range(1, 11)
BASE = {"transport_rtt_mean_ms": 40.0, "rtt_mean_ms": 50.0, "goodput_kbps": 900.0,
        "goodput_fb_kbps": 1000.0, "app_rtt_mean_ms": 30.0, "app_rtt_inband_mean_ms": 90.0,
        "rtx_overhead": 0.02}
#: variant -> column -> factor on Cubic's value. The bulk columns of a live trial (the ping
#: beside it, the receiver's goodput) have factors of their own: a live panel showing them
#: would show +150 % or -70 %.
FACTOR = {
    "cubic": dict.fromkeys(BASE, 1.0),
    "copa-0.04": {"transport_rtt_mean_ms": 0.65, "rtt_mean_ms": 2.5, "goodput_kbps": 0.3,
                  "goodput_fb_kbps": 1.16, "app_rtt_mean_ms": 0.96,
                  "app_rtt_inband_mean_ms": 3.0, "rtx_overhead": 0.5},
    "bbr": {"transport_rtt_mean_ms": 0.9, "rtt_mean_ms": 2.5, "goodput_kbps": 0.3,
            "goodput_fb_kbps": 1.05, "app_rtt_mean_ms": 0.92, "app_rtt_inband_mean_ms": 3.0,
            "rtx_overhead": 1.5},
    "copa-0.5": {**dict.fromkeys(BASE, 0.8), "rtt_mean_ms": 2.5, "goodput_kbps": 0.3},
}
LIVE_COLUMNS = ("goodput_fb_kbps", "app_rtt_mean_ms", "app_rtt_inband_mean_ms", "rtx_overhead")


def trials(live: bool = True, directions=("uplink",)) -> pd.DataFrame:
    """10 households, one broadcast (or bulk transfer) per variant and direction; every column
    of the trials schema, null where a trial of that kind has none."""
    rows = []
    for d in directions:
        for v, factor in FACTOR.items():
            for h in HH:
                row = {"tool": "tquic-perf", "definition_id": f"def-{v}", "household_id": h,
                       "price_bucket": "0-30" if h % 2 else "50+", "direction": d,
                       "variant": v, "repetition": 1, "config_hash": "c0ffee",
                       "trial_path": f"results/raw/def-{v}/{h}/{d}/rep1",
                       "live_abr": "rate" if live else None}
                for col, base in BASE.items():
                    if live or col not in LIVE_COLUMNS:
                        row[col] = base * h * factor[col]
                rows.append(row)
    df = pd.DataFrame(rows)
    for col in SCHEMAS["trials"].names:
        if col not in df.columns:
            df[col] = None
    return df[SCHEMAS["trials"].names]


@pytest.fixture(scope="module")
def live_pct():
    return percentile_table(trials().assign(weight=1.0), seed=1)


@pytest.fixture(scope="module")
def bulk_pct():
    return percentile_table(trials(live=False, directions=("uplink", "downlink"))
                            .assign(weight=1.0), seed=1)


def diamonds(plot) -> pd.DataFrame:
    """The frame of Facebook's numbers: the open-diamond layer's own data."""
    layers = [lay for lay in plot.layers if lay.geom.aes_params.get("shape") == "D"]
    assert len(layers) == 1 and layers[0].geom.aes_params.get("fill") == "none"
    return layers[0]._data


def triangles(plot) -> list[pd.DataFrame]:
    """The frames of the layers whose shape is mapped (Facebook's stated rows)."""
    return [lay._data for lay in plot.layers if "shape" in lay.mapping]


def ours_x(plot, label, percentile, variant) -> float:
    d = plot.data
    x = d[(d["metric"].astype(str) == label) & (d["percentile"] == percentile)
          & (d["variant"].astype(str) == variant)]["x"].unique()
    assert len(x) == 1
    return float(x[0])


def label_of(fb_metric: str) -> str:
    return LIVE_METRIC_LABELS[LIVE_METRIC_OF[fb_metric]]


def test_every_live_column_is_plotted_and_in_a_live_runs_table():
    # the figure's metrics are Facebook's definitions, and the percentile table has each
    assert set(LIVE_METRIC_LABELS) == set(LIVE_METRIC_OF.values())
    assert set(LIVE_METRIC_LABELS) <= {*METRICS, *LIVE_METRICS}
    assert {s.metric for s in FACEBOOK_STATED} <= set(LIVE_METRIC_OF)


def test_build_percentiles_of_a_live_trials_table_has_facebooks_metrics(tmp_path):
    write_table(trials(), tmp_path / "trials.parquet", "trials")
    built = build_percentiles(tmp_path / "trials.parquet", tmp_path / "percentiles.parquet",
                              seed=1)
    table = read_percentiles(tmp_path / "percentiles.parquet")
    assert set(table["metric"]) == {*METRICS, *LIVE_METRICS} == set(built["metric"])
    copa = table[(table["variant"] == "copa-0.04") & (table["bucket"] == "all")]
    for col in LIVE_METRIC_LABELS:  # each group change is the column's factor - 1
        got = copa.loc[copa["metric"] == col, "change_group"]
        assert len(got) == 6 and np.allclose(got, FACTOR["copa-0.04"][col] - 1), col
    assert table_app(table) == "live"


def test_live_frame_plots_facebooks_per_broadcast_metrics(live_pct):
    plot = percentiles_plot(live_pct)
    d = plot.data
    assert list(d["metric"].cat.categories) == list(LIVE_METRIC_LABELS.values())
    for variant in ("copa-0.04", "bbr", "copa-0.5"):
        for col, label in LIVE_METRIC_LABELS.items():
            got = d[(d["metric"] == label) & (d["variant"] == variant)]["change_pct"]
            assert len(got) == 6, (variant, col)
            np.testing.assert_allclose(got, 100 * (FACTOR[variant][col] - 1))
    # the bulk columns of the live trials (ping beside, receiver goodput) are not plotted
    assert not set(d["change_pct"].round(6)) & {150.0, -70.0}
    assert plot.labels.caption == LIVE_CAPTION
    assert figure_size("percentiles", plot) == (7.5, 8.0)


def test_live_facebook_numbers_are_diamonds_on_the_columns_of_their_definitions(live_pct):
    plot = percentiles_plot(live_pct)
    m = diamonds(plot)
    assert len(m) == len(FACEBOOK) == 12
    assert set(m["direction"].astype(str)) == {"uplink"}
    got = {(str(r.metric), r.percentile, str(r.variant)): r for r in m.itertuples()}
    for fb in FACEBOOK:
        r = got[(label_of(fb.metric), float(fb.percentile), VARIANT_OF[fb.variant])]
        assert r.change_pct == pytest.approx(100 * fb.change)
        assert r.x == pytest.approx(ours_x(plot, str(r.metric), r.percentile, str(r.variant)))
    # goodput's +16 % at p50 sits on Facebook's goodput, ours is exactly +16 % there
    g = m[(m["metric"] == "goodput (frames acked)") & (m["percentile"] == 50)
          & (m["variant"] == "copa-0.04")]
    assert g["change_pct"].tolist() == pytest.approx([16.0])


def test_stated_rtx_rows_are_triangles_at_zero_pointing_to_their_side(live_pct):
    plot = percentiles_plot(live_pct)
    (s,) = triangles(plot)
    assert len(s) == len(FACEBOOK_STATED) == 4
    assert set(s["metric"].astype(str)) == {"RTX overhead"}
    assert (s["change_pct"] == 0).all() and set(s["variant"].astype(str)) == {"copa-0.04"}
    want = {float(st.percentile): st.sign for st in FACEBOOK_STATED}
    assert dict(zip(s["percentile"], s["sign"])) == want == {10: -1, 50: -1, 75: -1, 95: 1}
    assert dict(zip(s["percentile"], s["shape"])) == {10: "v", 50: "v", 75: "v", 95: "^"}
    for r in s.itertuples():
        assert r.x == pytest.approx(ours_x(plot, "RTX overhead", r.percentile, "copa-0.04"))
    # no number of Facebook's in the RTX panel: the diamonds are elsewhere
    assert "RTX overhead" not in set(diamonds(plot)["metric"].astype(str))


def test_the_bucket_figure_has_the_stated_rows_in_every_buckets_uplink_panel(live_pct):
    plot = percentiles_plot(live_pct, buckets=True)
    (s,) = triangles(plot)
    assert sorted(s["bucket"].astype(str).unique()) == ["0-30", "50+"]
    for _, g in s.groupby("bucket", observed=True):
        assert dict(zip(g["percentile"], g["shape"])) == {10: "v", 50: "v", 75: "v", 95: "^"}
    assert len(diamonds(plot)) == 2 * len(FACEBOOK)


def _apex(path) -> float:
    """The y of a triangle marker's apex (the vertex on x = 0): > 0 points up."""
    v = path.vertices
    return float(v[np.isclose(v[:, 0], 0)][0, 1])


def test_drawn_live_figure_has_the_marks_where_the_frame_says(live_pct):
    """Drawn by matplotlib: in the last row (RTX overhead) open triangles at y = 0, down at
    p10/p50/p75, up at p95; Facebook's 12 diamonds in the other rows at their numbers."""
    from plotnine import theme

    plot = percentiles_plot(live_pct)
    fig = (plot + theme(figure_size=figure_size("percentiles", plot))).draw()
    try:
        want_x = {float(r.percentile): r.x for r in triangles(plot)[0].itertuples()}
        found, diamond_ys = {}, []
        for i, ax in enumerate(fig.axes):
            for c in ax.collections:
                if not isinstance(c, mcoll.PathCollection) or c.get_facecolors()[:, 3].any():
                    continue  # filled: our points; open ones are Facebook's
                paths = c.get_paths()
                if len(np.unique(paths[0].vertices.round(6), axis=0)) == 4:  # a diamond
                    diamond_ys += [float(y) for y in c.get_offsets()[:, 1]]
                    continue
                assert i == len(fig.axes) - 1  # the RTX overhead row
                for x, y in c.get_offsets():
                    assert y == 0
                    p = min(want_x, key=lambda k: abs(want_x[k] - x))
                    assert x == pytest.approx(want_x[p])
                    found[p] = "^" if _apex(paths[0]) > 0 else "v"
        assert found == {10: "v", 50: "v", 75: "v", 95: "^"}
        assert sorted(diamond_ys) == pytest.approx(sorted(100 * fb.change for fb in FACEBOOK))
    finally:
        plt.close(fig)


def test_a_live_runs_figure_from_its_tables_on_disk_to_pdf_and_png(tmp_path):
    write_table(trials(), tmp_path / "trials.parquet", "trials")
    build_percentiles(tmp_path / "trials.parquet", tmp_path / "percentiles.parquet", seed=1)
    plot, used, tables = make_population_figure("percentiles", tmp_path)
    assert list(plot.data["metric"].cat.categories) == list(LIVE_METRIC_LABELS.values())
    assert len(triangles(plot)[0]) == 4 and len(used) == 40
    written = save(plot, tmp_path / "p.pdf", tmp_path / "p.png",
                   *figure_size("percentiles", plot), dpi=50)
    assert [p.name for p in written] == ["p.pdf", "p.png"]
    assert (tmp_path / "p.pdf").read_bytes()[:5] == b"%PDF-"
    png = (tmp_path / "p.png").read_bytes()
    assert struct.unpack(">II", png[16:24]) == (375, 400)  # 7.5 x 8 in at 50 dpi
    assert not list(tmp_path.glob("*.tmp*"))  # written through temp files, renamed


def test_a_bulk_table_keeps_the_old_metrics_marks_and_caption(bulk_pct):
    assert table_app(bulk_pct) == "bulk"
    plot = percentiles_plot(bulk_pct)
    assert list(plot.data["metric"].cat.categories) == list(METRIC_LABELS.values())
    assert plot.labels.caption == FACEBOOK_CAPTION
    assert triangles(plot) == []
    m = diamonds(plot)
    assert list(m.columns) == ["metric", "percentile", "group", "variant", "change_pct", "x",
                               "direction"]
    assert {(str(r.metric), r.percentile, str(r.variant)): r.change_pct
            for r in m.itertuples()} == pytest.approx(
        {(METRIC_LABELS[fb.metric], float(fb.percentile), VARIANT_OF[fb.variant]):
         100 * fb.change for fb in FACEBOOK})
    assert figure_size("percentiles", plot) == (7.5, 6.0)
    # the same as asking for bulk by name
    pd.testing.assert_frame_equal(percentiles_plot(bulk_pct, app="bulk").data, plot.data)


def test_bad_app_and_mismatched_tables_are_errors_naming_them(live_pct, bulk_pct, tmp_path):
    with pytest.raises(FigureError, match="app 'video', not one of bulk, live"):
        percentiles_plot(live_pct, app="video")
    with pytest.raises(FigureError, match="has only goodput_kbps, rtt_mean_ms, "
                                          "transport_rtt_mean_ms"):
        percentiles_plot(bulk_pct, app="live")
    with pytest.raises(FigureError, match=r"sign 0, not -1 .* or \+1"):
        stated_marks(percentiles_plot(live_pct).data, {"copa-0.04": 0.0}, False,
                     stated=(Stated("rtx_overhead", 50, "copa", 0, "same"),))
    # live broadcasts in the trials, a bulk run's percentile table beside them (stale)
    write_table(trials(), tmp_path / "trials.parquet", "trials")
    write_percentiles(percentile_table(trials().assign(weight=1.0), seed=1, metrics=METRICS),
                      tmp_path / "percentiles.parquet")
    with pytest.raises(FigureError, match=r"percentiles.parquet is a bulk run's table but "
                                          r".*trials.parquet has a live broadcast"):
        make_population_figure("percentiles", tmp_path)
