"""Trial format 4 (trial.rawio.pack): every file but meta.json in one deterministic archive,
read by every reader exactly as the side-by-side files of formats 1-3 are."""

import gzip
import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from latency_divide.analysis.integrity import check_trial
from latency_divide.analysis.metrics import summarize_trial
from latency_divide.analysis.reader import TrialInvalid, load_trial
from latency_divide.trial import rawio
from latency_divide.trial.layout import SETUP_KEYS

from conftest import ROOT

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

TRIALS = ROOT / "tests" / "data" / "trials"
SOURCE = TRIALS / "def-062df6263f" / "13570" / "uplink" / "cubic" / "rep1"


def _as_format4(src: Path, dst: Path) -> Path:
    """The published format-2 trial ``src`` rewritten as format 4 at the same layout path."""
    shutil.copytree(src.parents[3], dst / src.parents[3].name)
    d = dst / src.relative_to(src.parents[4])
    for gz in d.glob("*.gz"):
        gz.with_suffix("").write_bytes(gzip.decompress(gz.read_bytes()))
        gz.unlink()
    meta = json.loads((d / "meta.json").read_text())
    meta.pop("compressed_logs", None)
    (d / "setup.json").write_text(json.dumps({k: meta.pop(k) for k in SETUP_KEYS if k in meta}))
    meta["archive"] = {"name": "logs.tar.xz", "members": rawio.pack(d)}
    meta["format_version"] = 4
    (d / "meta.json").write_text(json.dumps(meta, separators=(",", ":")))
    return d


def test_pack_leaves_meta_and_one_archive_and_is_deterministic(tmp_path):
    dirs = []
    for i, stamp in enumerate((1_000_000, 2_000_000)):
        d = tmp_path / f"t{i}"
        (d / "qlog").mkdir(parents=True)
        (d / "meta.json").write_text("{}")
        (d / "receiver.log").write_text("hello\n")
        (d / "queue.jsonl").write_text('{"t_unix": 1}\n')
        (d / "qlog" / "a.qlog").write_text("{}")
        for p in d.rglob("*"):
            os.utime(p, (stamp, stamp))  # different times must give the same bytes
        assert rawio.pack(d) == ["qlog/a.qlog", "queue.jsonl", "receiver.log"]
        assert sorted(p.name for p in d.iterdir()) == ["logs.tar.xz", "meta.json"]
        dirs.append(d)
    a, b = ((d / "logs.tar.xz").read_bytes() for d in dirs)
    assert a == b
    with tarfile.open(dirs[0] / "logs.tar.xz", "r:xz") as tar:  # `tar xJf` reads it
        m = tar.getmember("receiver.log")
        assert (m.mtime, m.uid, m.mode) == (0, 0, 0o644)
    assert rawio.read_text(dirs[0], "receiver.log") == "hello\n"
    assert rawio.exists(dirs[0], "qlog/a.qlog") and not rawio.exists(dirs[0], "ping.log")
    with pytest.raises(FileNotFoundError, match="ping.log"):
        rawio.read_text(dirs[0], "ping.log")


def test_a_format4_trial_gives_the_same_row_as_its_format2_original(tmp_path):
    d = _as_format4(SOURCE, tmp_path)
    assert sorted(p.name for p in d.iterdir()) == ["logs.tar.xz", "meta.json"]
    old, new = summarize_trial(SOURCE), summarize_trial(d)
    assert old.pop("trial_path") != new.pop("trial_path")
    assert set(old) == set(new)
    for k, v in old.items():  # every number: the same files read, only stored differently
        assert new[k] == v or (v != v and new[k] != new[k]), k
    assert check_trial(d, repo=None) == []
    # full_meta gives back the meta.json of formats 1-3, whatever the format
    want = json.loads((SOURCE / "meta.json").read_text())
    got = rawio.full_meta(d)
    assert {k: v for k, v in got.items() if k not in ("archive", "format_version")} == \
        {k: v for k, v in want.items() if k not in ("compressed_logs", "format_version")}
    assert rawio.full_meta(SOURCE) == want


def test_a_damaged_archive_is_named(tmp_path):
    d = _as_format4(SOURCE, tmp_path)
    a = d / "logs.tar.xz"
    a.write_bytes(a.read_bytes()[: a.stat().st_size // 2])
    with pytest.raises(TrialInvalid, match="logs.tar.xz"):
        load_trial(d)
    found = [(f.file, f.what) for f in check_trial(d, repo=None)]
    assert any(file == "logs.tar.xz" and "not a readable tar.xz archive" in what
               for file, what in found), found


def test_a_member_missing_from_the_archive_is_named(tmp_path):
    d = _as_format4(SOURCE, tmp_path)
    with tarfile.open(d / "logs.tar.xz", "r:xz") as tar:
        keep = [(m, tar.extractfile(m).read()) for m in tar if m.name != "ping.log"]
    with tarfile.open(d / "logs.tar.xz", "w:xz") as tar:
        for m, data in keep:
            tar.addfile(m, __import__("io").BytesIO(data))
    with pytest.raises(TrialInvalid, match=r"missing file ping.log \(in logs.tar.xz\)"):
        load_trial(d)
    found = [(f.file, f.what) for f in check_trial(d, repo=None)]
    assert any(file == "ping.log" and "missing" in what for file, what in found), found
