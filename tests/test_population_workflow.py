"""The population view through the workflow (issue 24, section 4): a small population run,
measured for real and analysed by `snakemake all` exactly as a user runs config/population.yaml,
gives the percentile table and its two figures, with the self-weighting sample's households
weighing the same."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

from latency_divide.analysis.population import read_percentiles
from latency_divide.analysis.tables import read_table

from conftest import ROOT, VENV_BIN
from netns_util import copy_workflow

pytestmark = pytest.mark.netns

N, REPEATED = 6, 2


def _workflow(dst: Path) -> Path:
    copy_workflow(dst)
    cfg = yaml.safe_load((ROOT / "config" / "population.yaml").read_text())
    cfg["households"]["population_sample"].update(
        n=N, repeat={"share": REPEATED / N, "repetitions": 2})
    cfg["directions"] = ["downlink"]
    cfg["variants"] = [v for v in cfg["variants"] if v["name"] in ("cubic", "copa-0.04")]
    cfg["trial"].update(duration_s=4, idle_s=1)
    (dst / "config" / "pop.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return dst


@pytest.mark.slow  # a workflow run of real trials, then the percentile table and figures
def test_a_population_run_gives_the_percentile_table_and_figures(tmp_path):
    wf = _workflow(tmp_path / "wf")
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}
    res = subprocess.run([str(VENV_BIN / "snakemake"), "all", "--cores", "2",
                          "--configfile", "config/pop.yaml"], cwd=wf, env=env,
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    trials = read_table(wf / "results" / "tables" / "trials.parquet", "trials")
    excluded = read_table(wf / "results" / "tables" / "exclusions.parquet", "exclusions")
    # every trial measured: in the table, or left out for a failed health verdict (on a busy
    # host a fast downlink can fail at every attempt, the last alone, and the run names it: CI
    # of 2026-12-01, 614990's 58.8 Mbit/s downlink, lateness p99 5.6 ms alone)
    assert len(trials) + len(excluded) == (N + REPEATED) * 2
    assert len(excluded) <= 1, excluded
    assert excluded["reason"].astype(str).str.startswith("emulation health failed").all()
    pct = read_percentiles(wf / "results" / "tables" / "percentiles.parquet")
    assert set(pct["variant"]) == {"cubic", "copa-0.04"}
    assert set(pct["bucket"]) == {"all", *trials["price_bucket"].astype(str)}
    whole = pct[pct["bucket"] == "all"]
    assert (whole["n_households"] >= N - len(excluded)).all()
    assert (whole["n_resamples"] >= 1000).all()
    base = whole[whole["variant"] == "cubic"]
    assert (base["change_group"] == 0).all() and (base["change_paired"] == 0).all()

    # equal weights: the table's p50 of Copa's goodput is numpy's inverted-CDF median of the
    # households' means (repetitions averaged first), not a weighted one
    copa = trials[trials["variant"] == "copa-0.04"]
    means = copa.groupby("household_id")["goodput_kbps"].mean().to_numpy()
    got = whole[(whole["variant"] == "copa-0.04") & (whole["metric"] == "goodput_kbps")]
    for p in (10, 50, 90):
        want = np.quantile(means, p / 100, method="inverted_cdf")
        assert got.loc[got["percentile"] == p, "value"].item() == pytest.approx(want)
    # every trial's transport RTT comes from the sender's own samples
    assert trials["transport_rtt_samples"].gt(0).all()

    figs = wf / "results" / "figures"
    for name in ("percentiles", "percentiles_buckets"):
        for ext in ("pdf", "png"):
            assert (figs / f"{name}.{ext}").stat().st_size > 5000
        side = json.loads((figs / f"{name}.provenance.json").read_text())
        assert len(side["trials"]) == len(trials)
        assert str(wf / "results" / "tables" / "percentiles.parquet") in side["tables"] or any(
            t.endswith("percentiles.parquet") for t in side["tables"])
