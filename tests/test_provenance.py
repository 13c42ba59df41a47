"""Provenance sidecars and `latency-divide trace` on real trial fixtures (copied to tmp)."""

import json
import shutil
from pathlib import Path

import pytest
from conftest import TEST_DATA

from latency_divide.analysis.provenance import build_sidecar, sidecar_path, verify, write_sidecar
from latency_divide.analysis.tables import build_tables
from latency_divide.config import config_hash
from latency_divide.fsio import sha256_file
from latency_divide.cli import main as cli_main

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

TRIALS = TEST_DATA / "trials"
DIRS = sorted(p.parent for p in TRIALS.glob("def-*/*/*/*/rep*/meta.json"))


@pytest.fixture
def setup(tmp_path, monkeypatch):
    """A working tree in tmp: raw trials, trials table, a 'figure' and its sidecar; relative
    paths as the workflow records them."""
    monkeypatch.chdir(tmp_path)
    shutil.copytree(TRIALS, Path("results/raw"), ignore=shutil.ignore_patterns("*.py"))
    dirs = sorted(p.parent for p in Path("results/raw").glob("def-*/*/*/*/rep*/meta.json"))
    assert len(dirs) == len(DIRS)
    t = build_tables(dirs, Path("results/tables"))
    fig = Path("results/figures/x.pdf")
    fig.parent.mkdir(parents=True)
    fig.write_bytes(b"%PDF-1.4 stand-in bytes for hashing\n")
    rec = build_sidecar(fig, [fig], t.trials, tables=["results/tables/trials.parquet"],
                                   git_rev="abc")
    write_sidecar(rec, sidecar_path(fig))
    return fig, rec, t


def test_sidecar_content(setup):
    fig, rec, t = setup
    side = json.loads(Path("results/figures/x.provenance.json").read_text())
    assert side == rec
    assert side["households"] == {"0-30": [13570, 799254], "30-40": [9254]}
    assert len(side["trials"]) == 5
    first = side["trials"][0]
    d = Path(first["path"])
    assert set(first["files"]) == {f.name for f in d.iterdir()}
    assert first["files"]["meta.json"] == sha256_file(d / "meta.json")
    assert side["git_revision"] == "abc"
    # each trial names its own definition (and the definitions are listed), not the config of
    # the run that drew the figure
    assert "config_hash" not in side
    assert set(side["definitions"]) == {"def-062df6263f", "def-278b1e4ad6"}
    assert side["definitions"]["def-278b1e4ad6"]["variant"] == {"cc": "copa", "delta": 0.5}
    assert side["definitions"]["def-062df6263f"]["trial"]["duration_s"] == 5.0
    meta = json.loads((d / "meta.json").read_text())
    assert first["definition_id"] == meta["definition_id"] == d.parts[2]
    assert side["outputs"][str(fig)] == sha256_file(fig)


def test_config_hash_is_canonical():
    assert config_hash({"a": 1, "b": [1, 2]}) == config_hash({"b": [1, 2], "a": 1})
    assert config_hash({"a": 1}) != config_hash({"a": 2})


def test_verify_ok_and_trace_output(setup, capsys):
    fig, rec, _ = setup
    res = verify(fig)
    assert res.ok and res.checked == 2 + sum(len(t["files"]) for t in rec["trials"])
    assert cli_main(["trace", str(fig)]) == 0
    out = capsys.readouterr().out
    assert "0-30: 13570, 799254" in out and "30-40: 9254" in out
    assert "def-278b1e4ad6: copa delta=0.5; tquic-perf window=65536; duration=5s idle=1.5s" in out
    assert "verified:     OK" in out
    assert cli_main(["trace", str(fig), "--files"]) == 0
    assert rec["trials"][0]["files"]["queue.jsonl.gz"] in capsys.readouterr().out


def test_trace_names_a_changed_missing_and_extra_file(setup, capsys):
    fig, rec, _ = setup
    d = Path(rec["trials"][2]["path"])
    with open(d / "ping.log.gz", "ab") as f:
        f.write(b"appended")
    (Path(rec["trials"][3]["path"]) / "queue.jsonl.gz").unlink()
    (Path(rec["trials"][4]["path"]) / "late.txt").write_text("x")
    assert cli_main(["trace", str(fig)]) == 2
    out = capsys.readouterr().out
    assert f"MISMATCH {d / 'ping.log.gz'}: sha256" in out
    assert f"MISMATCH {Path(rec['trials'][3]['path']) / 'queue.jsonl.gz'}: missing" in out
    assert "late.txt: not in the recorded trial" in out
    assert "3 MISMATCH(ES)" in out


def test_trace_changed_figure(setup, capsys):
    fig, _, _ = setup
    fig.write_bytes(b"%PDF-1.4 other\n")
    assert cli_main(["trace", str(fig)]) == 2
    assert f"MISMATCH {fig}: sha256" in capsys.readouterr().out


def test_trace_without_sidecar(tmp_path, capsys):
    assert cli_main(["trace", str(tmp_path / "nofig.pdf")]) == 1
    assert "no provenance sidecar" in capsys.readouterr().err
