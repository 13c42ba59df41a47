"""Buffer depth as a factor (issue 41, step 3): the sweeps' table (analysis.depth) and figure
(analysis.depth_figure) from small synthetic trials tables, one tool or two (tquic-perf, mvfst's
tperf), and which companions make each tool's sweep. Quick: no trial, no namespace."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import ROOT

from latency_divide.analysis import depth
from latency_divide.analysis.companions import load_companions
from latency_divide.analysis.depth import (
    PAIRS,
    REQUIRED_MODELS,
    DepthInputError,
    Step,
    depth_table,
    read_depth_table,
    uplink_fifos,
    write_depth_table,
)
from latency_divide.analysis.schemas import TRIALS_SCHEMA
from latency_divide.analysis.tables import write_table
from latency_divide.config import load_config
from latency_divide.data.households import get_household
from latency_divide.trial import definition

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

HH = list(range(1, 11))  # synthetic households: 10, so p90 is the 9th value, p10 the 1st
RESAMPLES = 1000


def _trials(hh, values, variants=("cubic", "bbr", "copa-0.04"), direction="uplink", rep=1,
            defs=None, tool="tquic-perf"):
    """Rows of a trials table: ``values(variant, i, h)`` -> (transport RTT, ping RTT, goodput,
    loss %, mean queue bytes) of household ``h`` (``i``: its index)."""
    rows = []
    for v in variants:
        for i, h in enumerate(hh):
            tr, rtt, gp, loss, q = values(v, i, h)
            rows.append({"definition_id": (defs or {}).get(v, f"def-{v}"), "household_id": h,
                         "price_bucket": "50+", "direction": direction, "variant": v,
                         "repetition": rep, "tool": tool,
                         "transport_rtt_mean_ms": tr, "rtt_mean_ms": rtt, "goodput_kbps": gp,
                         "sender_loss_pct": loss, "queue_mean_bytes": q,
                         "trial_path": f"results/raw/def-{v}/{h}/{direction}/{v}/rep{rep}"})
    return pd.DataFrame(rows)


def _known(v, i, h):
    """Cubic: 100, 200, ... 1000 ms; Copa: 0.6 x Cubic; BBR: Cubic + 10 ms. Goodput: Cubic
    1000 ... 10000, Copa 1.1 x, BBR the same. Loss: Cubic 1 %, BBR 2 %, Copa 50 %."""
    base = 100.0 * (i + 1)
    tr = {"cubic": base, "copa-0.04": 0.6 * base, "bbr": base + 10}[v]
    gp = 10 * base * (1.1 if v == "copa-0.04" else 1.0)
    loss = {"cubic": 1.0, "bbr": 2.0, "copa-0.04": 50.0}[v]
    return tr, tr + 5, gp, loss, 1000.0 * (i + 1) * (0.5 if v == "copa-0.04" else 1.0)


def _fifo(hh, ms):
    """Uplinks of 1 Mbit/s, ``ms(i)`` ms of FIFO each."""
    return pd.DataFrame({"household_id": hh, "rate_kbit": 1000.0,
                         "fifo_bytes": [ms(i) * 1000 / 8 for i in range(len(hh))],
                         "fifo_ms": [float(ms(i)) for i in range(len(hh))]})


def _steps(values=_known, models=REQUIRED_MODELS, drop=None, tool=None, hh=HH):
    """One tool's steps (``tool``: the steps' own; None: their trials', tquic-perf)."""
    out = []
    for m in models:
        t = _trials(hh, values, tool=tool or "tquic-perf")
        if drop and drop[0] == m:
            t = t[t["variant"] != drop[1]]
        n = depth.fixed_depth(m)
        out.append(Step(m, t, _fifo(hh, (lambda i: 10.0 * (i + 1)) if n is None
                                    else (lambda i, n=n: n)), tool=tool))
    return out


def _mvfst(v, i, h):
    """tperf: Copa 0.5 x Cubic, BBR Cubic + 20 ms; the rest as :func:`_known`."""
    tr, rtt, gp, loss, q = _known(v, i, h)
    base = 100.0 * (i + 1)
    tr = {"cubic": base, "copa-0.04": 0.5 * base, "bbr": base + 20}[v]
    return tr, tr + 5, gp, loss, q


def _row(table, model, variant, metric, pct, tool="tquic-perf"):
    r = table[(table["buffer_model"] == model) & (table["variant"] == variant)
              & (table["metric"] == metric) & (table["percentile"] == pct)
              & (table["tool"] == tool)]
    assert len(r) == 1, (model, variant, metric, pct, tool)
    return r.iloc[0]


def test_known_percentiles_give_known_changes():
    t = depth_table(_steps(), HH, n_resamples=RESAMPLES, seed=1)
    # one row per step, variant and pair of Facebook's table; the steps by depth, 2 x BDP's
    # median 55 ms first
    assert len(t) == 5 * 2 * len(PAIRS) == 70
    assert list(dict.fromkeys(t["step"])) == ["2 x BDP", "100 ms", "200 ms", "500 ms",
                                              "1000 ms"]
    assert set(zip(t["metric"], t["percentile"])) == set(PAIRS)
    for m in REQUIRED_MODELS:
        copa = _row(t, m, "copa-0.04", "transport_rtt_mean_ms", 90.0)
        # Copa 0.6 x Cubic in every household: -40 % at every percentile, both views, and
        # every resample alike
        assert copa["change_pct"] == pytest.approx(-40.0)
        assert copa["change_paired_pct"] == pytest.approx(-40.0)
        assert (copa["ci_low_pct"], copa["ci_high_pct"]) == pytest.approx((-40.0, -40.0))
        assert copa["facebook_pct"] == pytest.approx(-38.0)
        # BBR at p90: the 9th of 10 (inverted CDF): 910 against 900
        bbr = _row(t, m, "bbr", "transport_rtt_mean_ms", 90.0)
        assert (bbr["value"], bbr["cubic_value"]) == (910.0, 900.0)
        assert bbr["change_pct"] == pytest.approx(100 * (910 / 900 - 1))
        assert bbr["facebook_pct"] == pytest.approx(-8.8)
        assert np.isnan(_row(t, m, "bbr", "transport_rtt_mean_ms", 75.0)["facebook_pct"])
        # ping at p50: the 5th: 0.6 * 500 + 5 against 505
        ping = _row(t, m, "copa-0.04", "rtt_mean_ms", 50.0)
        assert ping["change_pct"] == pytest.approx(100 * (305 / 505 - 1))
        # goodput p10: the 1st household, Copa 1.1 x
        assert _row(t, m, "copa-0.04", "goodput_kbps", 10.0)["change_pct"] == \
            pytest.approx(10.0)
        # the side columns: medians over households
        assert copa["loss_median_pct"] == 50.0 and copa["cubic_loss_median_pct"] == 1.0
        assert bbr["loss_median_pct"] == 2.0
        assert copa["queue_median_bytes"] == 0.5 * 5500.0
        assert copa["n_households"] == copa["n_paired"] == 10
    # queue share of the FIFO: Cubic's median 5500 bytes of 12500 (100 ms at 1 Mbit/s) = 44 %
    assert _row(t, "queue-100ms", "bbr", "goodput_kbps", 50.0)["cubic_queue_median_share_pct"] \
        == pytest.approx(44.0)


def test_the_depth_of_a_step():
    t = depth_table(_steps(), HH, n_resamples=RESAMPLES)
    by = t.drop_duplicates("buffer_model").set_index("buffer_model")
    # a fixed step is N ms; 2 x BDP the households' median FIFO (10 ... 100 ms: 55), and says so
    assert by.loc["queue-500ms", "depth_ms"] == 500.0
    assert by.loc["queue-500ms", "depth_kind"] == "fixed"
    assert by.loc["qfactor", "depth_ms"] == 55.0 and by.loc["qfactor", "depth_kind"] == "median"
    assert by.loc["qfactor", "step"] == "2 x BDP"
    assert by.loc["qfactor", "depth_p10_ms"] < 55.0 < by.loc["qfactor", "depth_p90_ms"]


def test_the_fifo_of_2_x_bdp_is_twice_the_rtt_at_the_uplink_rate():
    hh = [11406, 799254, 5819]
    f = uplink_fifos(hh, "qfactor", 2.0).set_index("household_id")
    # CABLE 11406: 1150 kbit/s up, RTT 67.222 ms: floor(2 x 67.222 x 1150 / 8) = 19326 bytes
    assert f.loc[11406, "fifo_bytes"] == 19326
    assert f.loc[11406, "fifo_ms"] == pytest.approx(19326 * 8 / 1150)
    for h in hh:  # 2 x RTT up to the truncation to whole bytes
        assert f.loc[h, "fifo_ms"] == pytest.approx(2 * get_household(h).rtt_ms,
                                                    abs=8 / f.loc[h, "rate_kbit"])
    assert uplink_fifos(hh, "queue-500ms").set_index("household_id").loc[
        11406, "fifo_bytes"] == 500 * 1150 / 8
    steps = [Step(m, _trials(hh, _known), uplink_fifos(hh, m)) for m in REQUIRED_MODELS]
    t = depth_table(steps, hh, n_resamples=RESAMPLES)
    assert t.loc[t["buffer_model"] == "qfactor", "depth_ms"].iloc[0] == \
        pytest.approx(float(np.median(f["fifo_ms"])))


def test_the_intervals_bracket_the_estimate():
    rng = np.random.default_rng(7)
    noise = {(v, h): rng.lognormal(0, 0.3) for v in ("cubic", "bbr", "copa-0.04")
             for h in range(1, 31)}

    def noisy(v, i, h):
        base = 50.0 + 40 * i
        f = {"cubic": 1.0, "bbr": 0.9, "copa-0.04": 0.7}[v] * noise[(v, h)]
        return base * f, base * f + 3, 5000 * noise[(v, h)], 1.0, 100.0

    hh = list(range(1, 31))
    steps = [Step(m, _trials(hh, noisy), _fifo(hh, lambda i: 100.0)) for m in REQUIRED_MODELS]
    t = depth_table(steps, hh, n_resamples=RESAMPLES, seed=3)
    assert t[["change_pct", "ci_low_pct", "ci_high_pct"]].notna().all().all()
    assert (t["ci_low_pct"] <= t["change_pct"]).all() and (t["change_pct"] <=
                                                           t["ci_high_pct"]).all()
    assert (t["ci_low_paired_pct"] <= t["change_paired_pct"]).all()
    assert (t["change_paired_pct"] <= t["ci_high_paired_pct"]).all()
    assert (t["ci_high_pct"] - t["ci_low_pct"]).gt(0).all()
    # seeded: the same table again
    again = depth_table(steps, hh, n_resamples=RESAMPLES, seed=3)
    pd.testing.assert_frame_equal(t, again)


def test_a_missing_variant_or_step_is_a_clear_error():
    with pytest.raises(DepthInputError, match=r"step 200 ms \(buffer model queue-200ms\): no "
                       r"uplink trial of variant\(s\) bbr of the sweep's 10 households"):
        depth_table(_steps(drop=("queue-200ms", "bbr")), HH, n_resamples=RESAMPLES)
    with pytest.raises(DepthInputError, match="step 2 x BDP .* variant\\(s\\) cubic"):
        depth_table(_steps(drop=("qfactor", "cubic")), HH, n_resamples=RESAMPLES)
    with pytest.raises(DepthInputError, match=r"the sweep lacks step\(s\) queue-500ms"):
        depth_table(_steps(models=[m for m in REQUIRED_MODELS if m != "queue-500ms"]), HH,
                    n_resamples=RESAMPLES)
    with pytest.raises(DepthInputError, match="queue-100ms given as several steps"):
        depth_table(_steps() + _steps(models=["queue-100ms"]), HH, n_resamples=RESAMPLES)
    # downlinks, other households, other repetitions do not count
    s = _steps()
    s[1] = Step(s[1].buffer_model, _trials(HH, _known, direction="downlink"), s[1].fifo)
    with pytest.raises(DepthInputError, match="step 100 ms .* no uplink trial"):
        depth_table(s, HH, n_resamples=RESAMPLES)
    with pytest.raises(DepthInputError, match="no uplink FIFO for household"):
        depth_table([Step(x.buffer_model, x.trials, x.fifo.iloc[1:]) for x in _steps()], HH,
                    n_resamples=RESAMPLES)


def test_other_rows_are_left_out_and_the_measured_step_is_optional():
    extra = _steps()
    extra[0] = Step("qfactor", pd.concat([
        extra[0].trials, _trials(HH, _known, direction="downlink"),
        _trials([99], _known), _trials(HH, lambda *a: (1e6, 1e6, 1.0, 99.0, 1.0), rep=2),
        _trials(HH, lambda *a: (1.0, 1.0, 1.0, 0.0, 1.0), variants=("copa-0.5",))]),
        extra[0].fifo)
    measured = Step("mba-2014", _trials(HH, _known), _fifo(HH, lambda i: 400.0 + i))
    t = depth_table(extra + [measured], HH, n_resamples=RESAMPLES)
    assert set(t["variant"]) == {"bbr", "copa-0.04"}
    assert (t["n_households"] == 10).all()
    assert _row(t, "qfactor", "bbr", "transport_rtt_mean_ms", 90.0)["value"] == 910.0
    m = t[t["buffer_model"] == "mba-2014"]
    assert set(m["step"]) == {"measured (mba-2014)"} and set(m["depth_kind"]) == {"median"}
    assert list(dict.fromkeys(t["buffer_model"]))[3] == "mba-2014"  # 404.5 ms, after 200


def test_the_table_is_written_with_its_schema(tmp_path):
    t = depth_table(_steps(), HH, n_resamples=RESAMPLES)
    write_depth_table(t, tmp_path / "buffer_depth.parquet")
    back = read_depth_table(tmp_path / "buffer_depth.parquet")
    pd.testing.assert_frame_equal(back, t)
    assert not list(tmp_path.glob("*.tmp*"))


def test_two_tools_in_one_table_each_its_own_sweep():
    """tquic-perf's and tperf's sweeps in one table: each tool's rows are those of its sweep
    alone (its own households, steps and bootstrap blocks), tquic-perf's first."""
    quic = _steps()
    tperf = _steps(_mvfst, tool="tperf", hh=HH[:8])
    both = depth_table(tperf + quic, {"tquic-perf": HH, "tperf": HH[:8]},
                       n_resamples=RESAMPLES)
    assert len(both) == 2 * 70
    # the tools in SWEEP_CONFIGS' order whatever the steps' order
    assert list(dict.fromkeys(both["tool"])) == ["tquic-perf", "tperf"]
    alone = depth_table(quic, HH, n_resamples=RESAMPLES)
    pd.testing.assert_frame_equal(both[both["tool"] == "tquic-perf"].reset_index(drop=True),
                                  alone)
    mine = both[both["tool"] == "tperf"]
    assert (mine["n_households"] == 8).all()
    assert list(dict.fromkeys(mine["step"])) == ["2 x BDP", "100 ms", "200 ms", "500 ms",
                                                 "1000 ms"]
    for m in REQUIRED_MODELS:
        assert _row(both, m, "copa-0.04", "transport_rtt_mean_ms", 90.0)["change_pct"] == \
            pytest.approx(-40.0)
        copa = _row(both, m, "copa-0.04", "transport_rtt_mean_ms", 90.0, tool="tperf")
        assert copa["change_pct"] == pytest.approx(-50.0)
        assert copa["facebook_pct"] == pytest.approx(-38.0)  # Facebook's, whatever the tool
        # BBR at p90 of 8 households: the 8th (inverted CDF), 820 against 800
        bbr = _row(both, m, "bbr", "transport_rtt_mean_ms", 90.0, tool="tperf")
        assert (bbr["value"], bbr["cubic_value"]) == (820.0, 800.0)


def test_a_tools_missing_step_or_trials_are_clear_errors():
    quic, hh = _steps(), {"tquic-perf": HH, "tperf": HH}
    short = _steps(_mvfst, tool="tperf", models=[m for m in REQUIRED_MODELS
                                                 if m != "queue-500ms"])
    # (tperf's steps first: its sweep checked before tquic-perf's is computed)
    with pytest.raises(DepthInputError, match=r"the sweep lacks step\(s\) queue-500ms for "
                       r"tperf \(given: qfactor, queue-100ms, queue-200ms, queue-1000ms\)"):
        depth_table(short + quic, hh, n_resamples=RESAMPLES)
    with pytest.raises(DepthInputError, match="queue-100ms given as several steps of tperf's"):
        depth_table(_steps(_mvfst, tool="tperf")
                    + _steps(_mvfst, tool="tperf", models=["queue-100ms"]) + quic, hh,
                    n_resamples=RESAMPLES)
    # a step of tperf with only tquic-perf's trials has none of its own
    wrong = _steps(tool="tperf")
    wrong[2] = Step(wrong[2].buffer_model, _trials(HH, _known), wrong[2].fifo, tool="tperf")
    with pytest.raises(DepthInputError, match=r"tperf's step 200 ms \(buffer model "
                       r"queue-200ms\): no uplink trial of variant\(s\) cubic, copa-0.04, bbr"):
        depth_table(wrong + quic, hh, n_resamples=RESAMPLES)
    # a step without a tool whose trials are of two tools: which sweep is it?
    mixed = _steps()
    mixed[0] = Step("qfactor", pd.concat([mixed[0].trials,
                                          _trials(HH, _mvfst, tool="tperf")]), mixed[0].fifo)
    with pytest.raises(DepthInputError, match=r"step 2 x BDP: trials of 2 tools "
                       r"\(tperf, tquic-perf\); one per step, or the step's tool"):
        depth_table(mixed, HH, n_resamples=RESAMPLES)
    with pytest.raises(DepthInputError, match="no households for tperf's sweep"):
        depth_table(_steps(_mvfst, tool="tperf") + quic, {"tquic-perf": HH},
                    n_resamples=RESAMPLES)
    # with its tool, the step takes its tool's rows only (tperf's Copa is 0.5 x Cubic)
    mixed[0] = Step("qfactor", mixed[0].trials, mixed[0].fifo, tool="tquic-perf")
    t = depth_table(mixed, HH, n_resamples=RESAMPLES)
    assert set(t["tool"]) == {"tquic-perf"} and (t["n_households"] == 10).all()
    assert _row(t, "qfactor", "copa-0.04", "transport_rtt_mean_ms", 90.0)["change_pct"] == \
        pytest.approx(-40.0)


def test_the_figure_draws_facebooks_lines(tmp_path):
    from latency_divide.analysis.depth_figure import depth_plot
    from latency_divide.analysis.figures import save

    measured = Step("mba-2014", _trials(HH, _known), _fifo(HH, lambda i: 400.0))
    t = depth_table(_steps() + [measured], HH, n_resamples=RESAMPLES)
    plot = depth_plot(t)
    fb = [layer.geom.data for layer in plot.layers
          if type(layer.geom).__name__ in ("geom_hline", "geom_label")
          and isinstance(layer.geom.data, pd.DataFrame) and "y" in layer.geom.data]
    assert fb and all(sorted(d["y"]) == pytest.approx([-38.0, -8.8]) for d in fb)
    labels = next(d for d in fb if "label" in d)["label"]
    assert all(x.startswith("Facebook ") for x in labels)
    # the measured step is a point of its own shape, off the line
    line = next(layer.geom.data for layer in plot.layers
                if type(layer.geom).__name__ == "geom_line")
    assert "mba-2014" not in set(line["buffer_model"])
    assert "measured, mba-2014 (median)" in set(plot.data["kind"])
    written = save(plot, tmp_path / "buffer_depth.pdf", tmp_path / "buffer_depth.png")
    assert [p.stat().st_size > 1000 for p in written] == [True, True]


def test_the_figure_has_a_panel_per_tool(tmp_path):
    from latency_divide.analysis.depth_figure import depth_plot
    from latency_divide.analysis.figures import save

    # one household list for every tool
    t = depth_table(_steps(_mvfst, tool="tperf") + _steps(), HH, n_resamples=RESAMPLES)
    assert (t["n_households"] == 10).all()
    plot = depth_plot(t)
    assert type(plot.facet).__name__ == "facet_wrap"
    assert list(plot.data["tool"].cat.categories) == ["tquic-perf", "tperf"]
    # Facebook's lines have no tool: drawn in every panel
    fb = [layer.geom.data for layer in plot.layers
          if type(layer.geom).__name__ in ("geom_hline", "geom_label")
          and isinstance(layer.geom.data, pd.DataFrame) and "y" in layer.geom.data]
    assert fb and all("tool" not in d and sorted(d["y"]) == pytest.approx([-38.0, -8.8])
                      for d in fb)
    tperf = plot.data[(plot.data["tool"] == "tperf") & (plot.data["variant"] == "copa-0.04")]
    assert set(tperf["change_pct"].round(6)) == {-50.0}
    written = save(plot, tmp_path / "buffer_depth.pdf", tmp_path / "buffer_depth.png",
                   height=7.5)
    assert [p.stat().st_size > 1000 for p in written] == [True, True]


#: Each tool's step configs: buffer model -> config file (analysis.depth.SWEEP_CONFIGS).
STEP_CONFIGS = {
    "tquic-perf": [("qfactor", "population.yaml")] + [
        (f"queue-{n}ms", f"buffer-depth-{n}ms.yaml") for n in (100, 200, 500, 1000)],
    "tperf": [("qfactor", "population-mvfst.yaml")] + [
        (f"queue-{n}ms", f"buffer-depth-mvfst-{n}ms.yaml") for n in (100, 200, 500, 1000)],
}


def _step_specs(tmp_path, hh, tool, with_tool=True):
    """rule buffer_depth's params.steps of ``tool``: a trials table on disk per step, its
    trials' directories and definitions (each config's own) under tmp_path/raw."""
    specs = []
    for m, cfgfile in STEP_CONFIGS[tool]:
        cfg = load_config(ROOT / "config" / cfgfile)
        assert cfg.tool.name == tool
        defs = {v: definition.of_config(cfg, cfg.variant(v)) for v in ("cubic", "bbr",
                                                                         "copa-0.04")}
        ids = {v: definition.definition_id(d) for v, d in defs.items()}
        t = _trials(hh, _known, defs=ids, tool=tool).assign(config_hash="c" * 64)
        t["trial_path"] = [str(tmp_path / "raw" / r.definition_id / str(r.household_id)
                               / "uplink" / r.variant / "rep1") for r in t.itertuples()]
        for v, d in defs.items():
            definition.ensure_file(tmp_path / "raw" / ids[v], d)
        for p in t["trial_path"]:
            (tmp_path / p).mkdir(parents=True)
            (tmp_path / p / "meta.json").write_text("{}")
        full = pd.DataFrame({c: t[c] if c in t else None for c in TRIALS_SCHEMA.names})
        path = tmp_path / tool / m / "trials.parquet"
        path.parent.mkdir(parents=True)
        write_table(full, path, "trials")
        specs.append({"buffer_model": m, "qfactor": cfg.qfactor, "trials": str(path),
                      **({"tool": tool} if with_tool else {})})
    return specs


def _job(tmp_path, specs, households):
    from latency_divide.analysis.depth_figure import build_buffer_depth

    out = {k: tmp_path / "out" / f"buffer_depth.{k}" for k in ("parquet", "pdf", "png")}
    side = tmp_path / "out" / "buffer_depth.provenance.json"
    (tmp_path / "out").mkdir()
    rec = build_buffer_depth(specs, households, out["parquet"], out["pdf"], out["png"], side,
                             seed=1)
    assert all(p.stat().st_size > 0 for p in out.values())
    assert json.loads(side.read_text()) == rec
    assert set(rec["tables"]) == {s["trials"] for s in specs} | {str(out["parquet"])}
    return rec, read_depth_table(out["parquet"])


def test_the_job_writes_table_figure_and_provenance(tmp_path):
    """build_buffer_depth from trials tables on disk, as rule buffer_depth runs it, both tools'
    steps (tquic-perf's without a tool: their trials'; tperf's with theirs) and the households
    per tool: one table, one figure, and a sidecar naming every trial used (uplinks of the
    households, repetition 1, three variants) and its definition."""
    hh = load_config(ROOT / "config/buffer-depth-mvfst-100ms.yaml").household_ids()
    households = {"tquic-perf": hh[:6], "tperf": hh[:5]}
    specs = (_step_specs(tmp_path, households["tquic-perf"], "tquic-perf", with_tool=False)
             + _step_specs(tmp_path, households["tperf"], "tperf"))
    rec, t = _job(tmp_path, specs, households)
    assert len(rec["trials"]) == 5 * 3 * (6 + 5) and len(rec["definitions"]) == 30
    assert list(dict.fromkeys(t["tool"])) == ["tquic-perf", "tperf"]
    for tool, n in (("tquic-perf", 6), ("tperf", 5)):
        mine = t[t["tool"] == tool]
        assert set(mine["buffer_model"]) == set(REQUIRED_MODELS)
        assert (mine["n_households"] == n).all()
    # each tool's definitions: its own configs'
    assert set(t.loc[t["tool"] == "tperf", "definition_id"]).isdisjoint(
        t.loc[t["tool"] == "tquic-perf", "definition_id"])


def _sweep_companions():
    """The main run's companions."""
    return load_companions(load_config(ROOT / "config/config.yaml").companions, base=ROOT)


def test_the_sweep_is_built_from_the_listed_companions_when_present():
    comps = _sweep_companions()
    by = {c.configfile: c for c in comps}
    quic, tperf = ([f for f, _ in depth.SWEEP_CONFIGS[t]] for t in ("tquic-perf", "tperf"))
    assert list(depth.SWEEP_CONFIGS) == ["tquic-perf", "tperf"]
    assert set(quic + tperf) <= set(by)  # every config of a sweep is a companion of the run
    required = {t: [by[f] for f, req in configs if req]
                for t, configs in depth.SWEEP_CONFIGS.items()}
    sweep, missing = depth.sweep_companions(comps, required["tquic-perf"])
    assert [c.configfile for c in sweep] == quic[:5]
    assert missing == {"tperf": tperf[:5]}  # none of tperf's sweep on disk: left out, named
    sweep, missing = depth.sweep_companions(comps, list(by.values()))
    assert [c.configfile for c in sweep] == quic + tperf and missing == {}  # measured too
    sweep, missing = depth.sweep_companions(comps, [*required["tquic-perf"],
                                                    *required["tperf"][:3]])
    assert [c.configfile for c in sweep] == quic[:5]
    assert missing == {"tperf": ["config/buffer-depth-mvfst-500ms.yaml",
                                 "config/buffer-depth-mvfst-1000ms.yaml"]}
    sweep, missing = depth.sweep_companions(comps, required["tquic-perf"][:3])
    assert sweep == [] and missing == {"tquic-perf": ["config/buffer-depth-500ms.yaml",
                                                      "config/buffer-depth-1000ms.yaml"],
                                       "tperf": tperf[:5]}
    for t in ("tquic-perf", "tperf"):
        assert [c.cfg.buffer_model for c in required[t]] == list(REQUIRED_MODELS)
        assert {c.cfg.tool.name for c in required[t]} == {t}
    hh = depth.sweep_households(required["tquic-perf"] + required["tperf"])
    assert list(hh) == ["tquic-perf", "tperf"]
    assert len(hh["tquic-perf"]) == 40 and hh["tquic-perf"] == hh["tperf"] == sorted(
        load_config(ROOT / "config/buffer-depth-mvfst-500ms.yaml").household_ids())


def test_a_sweeps_configs_must_run_its_tool_and_agree_on_households():
    comps = _sweep_companions()
    by = {c.configfile: c for c in comps}
    popm = "config/population-mvfst.yaml"
    swapped = [replace(c, cfg=by["config/population.yaml"].cfg) if c.configfile == popm else c
               for c in comps]
    with pytest.raises(DepthInputError, match="tperf's sweep: config/population-mvfst.yaml "
                       r"run\(s\) another tool"):
        depth.sweep_companions(swapped, swapped)
    raw = yaml.safe_load((ROOT / "config/buffer-depth-mvfst-500ms.yaml").read_text())
    raw["households"]["buckets"][0]["ids"] = raw["households"]["buckets"][0]["ids"][1:]
    fewer = [replace(c, cfg=load_config(raw)) if c.name == "buffer-depth-mvfst-500ms" else c
             for c in comps if c.name.startswith("buffer-depth-mvfst")]
    with pytest.raises(DepthInputError, match="tperf's sweep: its configs list other "
                       "households: buffer-depth-mvfst-500ms against buffer-depth-mvfst-100ms"):
        depth.sweep_households(fewer)
    with pytest.raises(DepthInputError, match="tperf's sweep: no fixed-depth config"):
        depth.sweep_households([by[popm]])
