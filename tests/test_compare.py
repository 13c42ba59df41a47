"""latency-divide compare: summary tables side by side; copa-rtt: mvfst's qlog read."""
from __future__ import annotations

import gzip
import json
import subprocess

import pandas as pd
import pytest

from conftest import ROOT, VENV_BIN
from latency_divide.parsers.qlog import QlogError, copa_estimate, read_qlog, rtt_samples

CLI = str(VENV_BIN / "latency-divide")
QLOGS = ROOT / "tests" / "data" / "qlog"


def _summary(path, rows):
    base = {"households": 9, "trials": 9, "definition_id": "def-0000000000"}
    pd.DataFrame([{**base, **r} for r in rows]).to_parquet(path)


def test_compare_puts_runs_side_by_side(tmp_path):
    _summary(tmp_path / "a.parquet", [
        {"direction": "downlink", "price_bucket": "50+", "variant": "cubic",
         "norm_tput_mean": 0.341, "self_delay_mean_ms_mean": 2.24},
        {"direction": "uplink", "price_bucket": "50+", "variant": "cubic",
         "norm_tput_mean": 0.93, "self_delay_mean_ms_mean": 36.5}])
    _summary(tmp_path / "b.parquet", [
        {"direction": "downlink", "price_bucket": "50+", "variant": "cubic",
         "norm_tput_mean": 0.77, "self_delay_mean_ms_mean": 39.46}])
    p = subprocess.run([CLI, "compare", f"tquic={tmp_path / 'a.parquet'}",
                        f"mvfst={tmp_path / 'b.parquet'}"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "| direction | bucket | tquic cubic | mvfst cubic |"
    assert "| downlink | $50+ | 2.2 / 0.34 | 39.5 / 0.77 |" in lines
    assert "| uplink | $50+ | 36.5 / 0.93 |  |" in lines


def test_compare_errors_name_the_argument(tmp_path):
    p = subprocess.run([CLI, "compare", "nothing"], capture_output=True, text=True)
    assert p.returncode == 1 and "'nothing': give NAME=PATH" in p.stderr
    (tmp_path / "x.parquet").write_bytes(b"no")
    p = subprocess.run([CLI, "compare", f"x={tmp_path / 'x.parquet'}"], capture_output=True,
                       text=True)
    assert p.returncode == 1 and "not a summary table" in p.stderr


def test_qlog_errors(tmp_path):
    (tmp_path / "a.qlog").write_text("{")
    with pytest.raises(QlogError, match="not a readable qlog"):
        read_qlog(tmp_path / "a.qlog")
    with pytest.raises(QlogError, match="no 'traces'"):
        rtt_samples({"x": 1})
    with pytest.raises(QlogError, match="no metric_update"):
        copa_estimate([])
    doc = {"traces": [{"events": [{"time": 1, "name": "recovery:metric_update",
                                   "data": {"latest_rtt": "x", "min_rtt": 1, "smoothed_rtt": 1}}]}]}
    with pytest.raises(QlogError, match="lacks a number"):
        rtt_samples(doc)
