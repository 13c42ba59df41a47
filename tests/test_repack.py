"""`latency-divide repack`: older trials into format 4's two files, with every original file
rebuilt byte for byte (ops.repack)."""

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from latency_divide.analysis.integrity import check_trial
from latency_divide.analysis.metrics import summarize_trial
from latency_divide.ops import repack
from latency_divide.trial import rawio

from conftest import ROOT, VENV_BIN

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

TRIALS = ROOT / "tests" / "data" / "trials"
DEF = TRIALS / "def-062df6263f"
SOURCE = DEF / "13570" / "uplink" / "cubic" / "rep1"


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}


@pytest.fixture
def raw(tmp_path) -> Path:
    shutil.copytree(DEF, tmp_path / "raw" / DEF.name)
    return tmp_path / "raw"


def _trial(raw: Path) -> Path:
    return raw / SOURCE.relative_to(TRIALS)


def test_repack_keeps_every_byte_and_the_same_row(raw):
    d = _trial(raw)
    before = _files(d)
    row = summarize_trial(d)
    members = repack.repack_trial(d)
    assert sorted(p.name for p in d.iterdir()) == ["logs.tar.xz", "meta.json"]
    assert "setup.json" in members and "queue.jsonl" in members and "queue.jsonl.gz" not in members
    meta = json.loads((d / "meta.json").read_text())
    assert meta["format_version"] == 2 and "linkplan" not in meta  # in setup.json now
    assert {n: e["md5"] for n, e in meta["repacked"]["files"].items()} == \
        {n: hashlib.md5(b).hexdigest() for n, b in before.items()}
    assert repack.original_files(d) == before  # every file rebuilt, byte for byte
    rawio._read_archive.cache_clear()
    after = summarize_trial(d)
    assert after.keys() == row.keys()
    assert all(after[k] == row[k] or (after[k] != after[k] and row[k] != row[k]) for k in row)
    assert check_trial(d) == []
    assert repack.check_repacked(d).problems == []
    assert repack.repack_trial(d) == members  # again: nothing to do


def test_an_interrupted_repack_is_finished_by_running_it_again(raw):
    d = _trial(raw)
    keep = raw.parent / "orig"
    shutil.copytree(d, keep)
    repack.repack_trial(d)
    for p in keep.iterdir():  # as if cut after meta.json's rename: the old files still there
        if p.name != "meta.json":
            shutil.copy2(p, d / p.name)
    assert len(list(d.iterdir())) > 2
    todo, problems = repack.repack_tree(raw, log=lambda m: None)
    assert d in todo and problems == []
    assert sorted(p.name for p in d.iterdir()) == ["logs.tar.xz", "meta.json"]
    assert repack.original_files(d) == _files(keep)


def test_a_repack_cut_before_its_commit_point_is_redone(raw):
    d = _trial(raw)
    before = _files(d)
    (d / "logs.tar.xz").write_bytes(b"half an archive")  # written, meta.json not yet replaced
    assert repack.needs_repack(d)
    repack.repack_trial(d)
    assert sorted(p.name for p in d.iterdir()) == ["logs.tar.xz", "meta.json"]
    assert repack.original_files(d) == before


def test_a_leftover_that_is_not_the_original_is_kept_and_named(raw):
    d = _trial(raw)
    repack.repack_trial(d)
    (d / "sender.log").write_text("not the original\n")
    with pytest.raises(repack.RepackError, match="sender.log: not the original file"):
        repack.repack_trial(d)
    assert (d / "sender.log").exists()


def test_a_compact_meta_json_of_format_3_is_rebuilt_too(raw):
    d = _trial(raw)
    meta = json.loads((d / "meta.json").read_text())
    (d / "meta.json").write_text(json.dumps(meta, sort_keys=True, separators=(",", ":")) + "\n")
    before = _files(d)
    repack.repack_trial(d)
    assert json.loads((d / "meta.json").read_text())["repacked"]["meta_json"] == "compact"
    assert repack.original_files(d) == before


def test_a_meta_json_that_cannot_be_rebuilt_is_left_as_it_is(raw):
    d = _trial(raw)
    meta = json.loads((d / "meta.json").read_text())
    (d / "meta.json").write_text(json.dumps(meta, indent=4))  # not how formats 1-3 wrote it
    before = _files(d)
    with pytest.raises(repack.RepackError, match="neither indented nor compact"):
        repack.repack_trial(d)
    assert _files(d) == before
    assert not any(p.name.startswith(".ld-tmp-") for p in d.parent.iterdir())
    todo, problems = repack.repack_tree(raw, log=lambda m: None)  # the others go on
    assert len(todo) == 3 and len(problems) == 1 and str(d) in problems[0]
    assert _files(d) == before


def test_check_names_a_log_whose_content_changed(raw):
    d = _trial(raw)
    repack.repack_trial(d)
    files = rawio.members(d)
    work = raw.parent / "work"
    work.mkdir()
    for name, data in files.items():
        (work / name).write_bytes(data.replace(b"1", b"2", 1) if name == "ping.log" else data)
    rawio.pack(work)
    shutil.copy2(work / "logs.tar.xz", d / "logs.tar.xz")
    res = repack.check_repacked(d)
    assert [p.split(":")[0] for p in res.problems] == ["ping.log.gz"]


def test_cli_repacks_the_tree_and_checks_it(raw):
    cli = [str(VENV_BIN / "latency-divide"), "repack", "--raw", str(raw)]
    dry = subprocess.run([*cli, "--dry-run"], capture_output=True, text=True)
    assert dry.returncode == 0 and "3 trial(s) to repack" in dry.stdout
    assert list(raw.rglob("*.gz"))  # the dry run changed nothing
    done = subprocess.run(cli, capture_output=True, text=True)
    assert done.returncode == 0 and "3 trial(s) repacked; publish them" in done.stdout
    assert not list(raw.rglob("*.gz"))
    check = subprocess.run([*cli, "--check"], capture_output=True, text=True)
    assert check.returncode == 0 and "3 repacked trial(s) checked: every original file rebuilt" \
        in check.stdout
    d = _trial(raw)
    meta = json.loads((d / "meta.json").read_text())
    meta["repacked"]["files"]["receiver.log.gz"]["content_md5"] = "0" * 32
    (d / "meta.json").write_text(json.dumps(meta))
    bad = subprocess.run([*cli, "--check"], capture_output=True, text=True)
    assert bad.returncode == 2 and "receiver.log.gz: content md5 differs" in bad.stdout
