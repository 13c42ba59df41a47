"""The percentile figures of a population run (analysis.population_figures): Facebook's published
changes (analysis.facebook.FACEBOOK) drawn as marks in the uplink panels, beside our variant.

The tables are percentile tables of small synthetic trials tables
(analysis.population.percentile_table), so the marks are checked on the plot's own layers."""

import numpy as np
import pandas as pd
import pytest

from latency_divide.analysis.facebook import FACEBOOK, VARIANT_OF
from latency_divide.analysis.figures import save
from latency_divide.analysis.population import percentile_table
from latency_divide.analysis.population_figures import (
    FACEBOOK_CAPTION,
    METRIC_LABELS,
    percentiles_plot,
)

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

METRICS = ("transport_rtt_mean_ms", "rtt_mean_ms", "goodput_kbps")
# our variant: factor on the RTTs (goodput divided by it) against Cubic's
FACTORS = {"cubic": 1.0, "copa-0.04": 0.8, "copa-0.5": 0.6, "bbr": 0.9}


def trials(variants=tuple(FACTORS), directions=("uplink", "downlink"),
           buckets=("0-30", "50+"), metrics=METRICS, n=8):
    rng = np.random.default_rng(5)
    rows = []
    for h in range(1, n + 1):
        for d in directions:
            for v in variants:
                f = FACTORS[v]
                rtt = (20 + 10 * h) * f
                row = dict(tool="tquic-perf", definition_id=f"def-{v}", household_id=h,
                           price_bucket=buckets[h % len(buckets)], direction=d, variant=v,
                           repetition=1, transport_rtt_mean_ms=np.nan, rtt_mean_ms=np.nan,
                           goodput_kbps=np.nan, trial_path=f"results/raw/{v}/{h}/{d}/rep1")
                for m in metrics:
                    row[m] = ((1000 * h / f) if m == "goodput_kbps" else rtt) \
                        * rng.uniform(0.9, 1.1)
                rows.append(row)
    return pd.DataFrame(rows)


def table(**kw):
    return percentile_table(trials(**kw).assign(weight=1.0), seed=1, n_resamples=1000,
                            metrics=kw.get("metrics", METRICS))


@pytest.fixture(scope="module")
def full():
    return table()


def marks_layer(plot):
    """The layer of Facebook's marks: the open diamonds (its data: the layer's own frame)."""
    layers = [lay for lay in plot.layers if lay.geom.aes_params.get("shape") == "D"]
    assert len(layers) == 1
    assert layers[0].geom.aes_params.get("fill") == "none"  # open
    return layers[0]._data  # plotnine keeps a layer's own data here


def expected(variants, metrics=METRICS):
    """(metric label, percentile, our variant) -> 100 x Facebook's change, for the table's
    variants and metrics."""
    return {(METRIC_LABELS[fb.metric], float(fb.percentile), VARIANT_OF[fb.variant]):
            100 * fb.change for fb in FACEBOOK
            if VARIANT_OF[fb.variant] in variants and fb.metric in metrics}


def by_key(m):
    return {(str(r.metric), float(r.percentile), str(r.variant)): r.change_pct
            for r in m.itertuples()}


def ours_x(plot, metric, percentile, variant):
    d = plot.data
    x = d[(d["metric"].astype(str) == metric) & (d["percentile"] == percentile)
          & (d["variant"].astype(str) == variant)]["x"].unique()
    assert len(x) == 1  # the same dodge in every panel
    return float(x[0])


def test_marks_are_facebooks_changes_in_the_uplink_panels_beside_our_variant(full):
    plot = percentiles_plot(full)
    m = marks_layer(plot)
    assert set(m["direction"].astype(str)) == {"uplink"}
    assert "bucket" not in m.columns
    want = expected(set(FACTORS))
    assert len(m) == len(FACEBOOK) == len(want)
    got = by_key(m)
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert got[k] == pytest.approx(v)
    for r in m.itertuples():
        # at our variant's dodged x
        assert r.x == pytest.approx(ours_x(plot, str(r.metric), r.percentile, str(r.variant)))
    # not at the bare percentile: Copa's and BBR's marks at p90 of transport RTT stand apart
    p90 = m[(m["metric"].astype(str) == "transport RTT") & (m["percentile"] == 90)]
    assert sorted(p90["variant"].astype(str)) == ["bbr", "copa-0.04"]
    assert p90["x"].nunique() == 2
    # the variant stays the one colour legend; the marks say what they are
    assert plot.labels.caption == FACEBOOK_CAPTION
    assert "Facebook" in FACEBOOK_CAPTION and "uplink" in FACEBOOK_CAPTION


def test_bucket_figure_has_the_same_reference_in_every_buckets_uplink_panel(full):
    plot = percentiles_plot(full, buckets=True)
    m = marks_layer(plot)
    assert set(m["direction"].astype(str)) == {"uplink"}
    assert set(m["bucket"].astype(str)) == {"0-30", "50+"}
    want = expected(set(FACTORS))
    for b, g in m.groupby("bucket", observed=True):
        got = by_key(g)
        assert got.keys() == want.keys(), b
        for k, v in want.items():
            assert got[k] == pytest.approx(v)
    for r in m.itertuples():
        assert r.x == pytest.approx(ours_x(plot, str(r.metric), r.percentile, str(r.variant)))


def test_only_the_tables_variants_and_metrics_get_marks(tmp_path):
    t = table(variants=("cubic", "copa-0.04", "copa-0.5"), metrics=("rtt_mean_ms",),
              directions=("uplink",))
    plot = percentiles_plot(t)
    m = marks_layer(plot)
    assert "bbr" not in set(m["variant"].astype(str))  # no BBR in the table: no BBR marks
    assert set(m["metric"].astype(str)) == {METRIC_LABELS["rtt_mean_ms"]}
    assert by_key(m) == pytest.approx(expected({"copa-0.04"}, ("rtt_mean_ms",)))
    assert len(m) == 2  # application RTT p50 and p90 of Copa
    written = save(plot, tmp_path / "p.pdf", tmp_path / "p.png", width=5, height=3, dpi=50)
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and len(written) == 2


def test_no_uplink_no_marks_and_still_draws(tmp_path):
    t = table(variants=("cubic", "copa-0.04"), metrics=("rtt_mean_ms",),
              directions=("downlink",), buckets=("0-30",), n=4)
    plot = percentiles_plot(t)
    assert marks_layer(plot).empty
    written = save(plot, tmp_path / "p.pdf", tmp_path / "p.png", width=5, height=3, dpi=50)
    assert all(p.stat().st_size > 0 for p in written)


@pytest.mark.slow
@pytest.mark.parametrize("buckets", [False, True])
def test_figures_with_the_marks_draw_to_png(full, tmp_path, buckets):
    written = save(percentiles_plot(full, buckets=buckets), tmp_path / "p.pdf",
                   tmp_path / "p.png", width=14.0 if buckets else 7.5, height=6.0)
    assert [p.name for p in written] == ["p.pdf", "p.png"]
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
