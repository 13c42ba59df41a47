"""latency-divide compare: summary tables side by side; copa-rtt: mvfst's qlog read."""
from __future__ import annotations

import gzip
import subprocess

import pandas as pd
import pytest

from conftest import ROOT, VENV_BIN
from latency_divide.parsers.qlog import QlogError, copa_estimate, read_qlog, rtt_samples

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

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


def test_real_tperf_qlog_one_sample_per_ack_and_the_ack_delay_in_copas_estimate(tmp_path):
    path = QLOGS / "tperf-11406-copa-0.8-3s.qlog.gz"
    doc = read_qlog(path)
    events = doc["traces"][0]["events"]
    acks = [e for e in events if e["name"] == "quic:packet_received"
            and any(f.get("frame_type") == "ack" for f in e["data"].get("frames", []))]
    samples = rtt_samples(doc)
    assert len(acks) == len(samples) == 95  # the repeats at packets sent are folded
    assert samples[-1].latest_rtt_ms == 77.861 and samples[-1].ack_delay_ms == 10.384
    est = copa_estimate(samples, skip_ms=1000)
    assert est["samples"] == 63 and est["min_rtt_ms"] == 67.567
    assert est["estimate_ms_median"] == pytest.approx(19.531)
    assert est["ack_delay_ms_median"] == pytest.approx(15.536)
    assert est["ack_delay_share"] == pytest.approx(0.836, abs=1e-3)
    p = subprocess.run([CLI, "copa-rtt", "--skip-s", "1", str(path)], capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stderr
    row = dict(zip(*[line.split("\t") for line in p.stdout.splitlines()]))
    assert row["samples"] == "63" and row["ack_delay_share"] == "0.836"
    # and a truncated copy is refused, not half-read
    cut = tmp_path / "cut.qlog"
    cut.write_bytes(gzip.decompress(path.read_bytes())[:100_000])
    with pytest.raises(QlogError, match="not a readable qlog"):
        read_qlog(cut)
