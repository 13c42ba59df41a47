"""Packs (trial.packs): a definition's trials in one solid archive with an index, read by every
reader exactly as the loose trials they were made from."""

import json
import shutil

import pytest

from latency_divide.analysis.metrics import summarize_trial
from latency_divide.analysis.reader import TrialInvalid, load_trial
from latency_divide.trial import packbuild, packs, rawio

from conftest import ROOT
from test_rawio import _as_format4

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

DEF = ROOT / "tests" / "data" / "trials" / "def-062df6263f"
SOURCES = [DEF / "13570" / "uplink" / "cubic" / "rep1", DEF / "799254" / "uplink" / "cubic" / "rep1",
           DEF / "9254" / "downlink" / "cubic" / "rep1"]


def _loose(tmp_path, name="raw"):
    """The fixture trials as format-4 trials under tmp_path/<name>/def-062df6263f."""
    out = []
    for src in SOURCES:
        base = tmp_path / f"{name}-{len(out)}"
        d = _as_format4(src, base)
        dst = tmp_path / name / d.relative_to(base)
        if not (tmp_path / name / DEF.name).exists():
            shutil.copytree(base / DEF.name, tmp_path / name / DEF.name,
                            ignore=lambda _d, names: [n for n in names if n.isdigit()])
        shutil.copytree(d, dst)
        out.append(dst)
    return out


def test_a_pack_gives_back_every_file_and_the_same_rows(tmp_path):
    loose = _loose(tmp_path)
    keep = tmp_path / "keep"
    shutil.copytree(tmp_path / "raw", keep)
    def_dir = loose[0].parents[3]
    rows = {d: summarize_trial(d) for d in loose}
    files = {d: packbuild.trial_files(d) for d in loose}
    arc = packbuild.build(def_dir, loose)
    assert arc == def_dir / "packs" / "pack-0001.tar.xz"
    idx = packs.read_index(arc)
    assert set(idx["trials"]) == {packs.trial_key(d) for d in loose}
    assert packs.check(arc) == []
    for d in loose:
        shutil.rmtree(d)  # only the pack has them now
    for d in loose:
        p = rawio.packed(d)
        assert p is not None and p.archive == arc
        assert packs.files_of(p) == files[d]
        packs.files_of(p).clear()  # a caller's copy: the pack's cached files stay whole
        assert packs.files_of(p) == files[d]
        assert idx["trials"][p.key]["meta.json"][1] == packs.sha256(files[d]["meta.json"])
        got, want = summarize_trial(d), rows[d]
        assert set(got) == set(want)
        for k, v in want.items():  # every number: the same bytes, stored otherwise
            assert got[k] == v or (v != v and got[k] != got[k]), k
        assert rawio.full_meta(d) == rawio.full_meta(keep / d.relative_to(tmp_path / "raw"))
    # the same trials give the same bytes (no time, owner or order that varies)
    again = _loose(tmp_path, "raw2")
    arc2 = packbuild.build(again[0].parents[3], list(reversed(again)))
    assert arc2.read_bytes() == arc.read_bytes()
    assert packs.index_path(arc2).read_bytes() == packs.index_path(arc).read_bytes()


def test_which_files_a_packed_trial_has_is_read_from_the_index_not_the_archive(tmp_path,
                                                                               monkeypatch):
    # a scan of a definition's trials (bench_alone_sample's pool of 2,304) asked rawio.exists
    # per trial, which decompressed an archive each time once more packs than the archive cache
    # holds were in turn: minutes of CPU for a question the index answers
    loose = _loose(tmp_path)
    files = {d: set(packbuild.trial_files(d)) for d in loose}
    packbuild.build(loose[0].parents[3], loose)
    for d in loose:
        shutil.rmtree(d)

    def no_archive(*_a, **_k):
        raise AssertionError("archive read to answer rawio.exists")

    monkeypatch.setattr(packs, "read_archive", no_archive)
    for d in loose:
        for name in files[d]:
            assert rawio.exists(d, name), name
        assert "meta.json" in files[d] and "ping.log" in files[d]
        assert not rawio.exists(d, "no-such.log")
    missing = loose[0].parent / "rep9"  # a trial of no pack
    assert not rawio.exists(missing, "meta.json")


def test_the_next_pack_takes_the_next_number_and_no_trial_is_packed_twice(tmp_path):
    loose = _loose(tmp_path)
    def_dir = loose[0].parents[3]
    packbuild.build(def_dir, loose[:1])
    with pytest.raises(packs.PackError, match="already in .*pack-0001"):
        packbuild.build(def_dir, loose[:2])
    assert packbuild.build(def_dir, loose[1:]).name == "pack-0002.tar.xz"
    assert len(packs.trials_in(def_dir)) == 3


def test_only_two_file_trials_are_packed(tmp_path):
    src = SOURCES[0]
    d = tmp_path / src.relative_to(DEF.parent)
    shutil.copytree(src, d)
    with pytest.raises(packs.PackError, match=r"not a trial of two files .*ping\.log\.gz.*repack"):
        packbuild.build(d.parents[3], [d])
    assert not (d.parents[3] / "packs").exists()


def test_a_damaged_pack_is_named(tmp_path):
    loose = _loose(tmp_path)
    arc = packbuild.build(loose[0].parents[3], loose)
    for d in loose:
        shutil.rmtree(d)
    data = bytearray(arc.read_bytes())
    data[len(data) // 2] ^= 0xFF
    arc.write_bytes(bytes(data))
    assert any("sha256" in f for f in packs.check(arc))
    with pytest.raises(TrialInvalid, match="cannot read"):
        load_trial(loose[0])
    # an index that says otherwise than the archive
    good = _loose(tmp_path, "raw2")
    arc = packbuild.build(good[0].parents[3], good)
    idx = packs.read_index(arc)
    key = packs.trial_key(good[0])
    idx["trials"][key]["ping.log"][1] = "0" * 64
    packs.index_path(arc).write_bytes(packs.index_bytes(idx))
    assert packs.check(arc) == [f"{arc}: {key}/ping.log is not what the index records"]


def test_a_trial_in_no_pack_is_not_a_trial(tmp_path):
    loose = _loose(tmp_path)
    packbuild.build(loose[0].parents[3], loose[:2])
    shutil.rmtree(loose[2])
    assert rawio.packed(loose[2]) is None
    with pytest.raises(TrialInvalid, match="nor a trial of its definition's packs"):
        load_trial(loose[2])


def test_a_figure_of_packed_trials_traces_to_the_pack_members(tmp_path):
    import pandas as pd

    from latency_divide.analysis.provenance import build_sidecar, verify, write_sidecar

    loose = _loose(tmp_path)
    rows = pd.DataFrame([summarize_trial(d) for d in loose])
    arc = packbuild.build(loose[0].parents[3], loose)
    for d in loose:
        shutil.rmtree(d)
    fig = tmp_path / "f.pdf"
    fig.write_bytes(b"%PDF")
    rec = build_sidecar(fig, [fig], rows)
    assert {t["pack"] for t in rec["trials"]} == {arc.as_posix()}
    assert all("ping.log" in t["files"] and "meta.json" in t["files"] for t in rec["trials"])
    side = tmp_path / "f.provenance.json"
    write_sidecar(rec, side)
    res = verify(fig, root=tmp_path)
    assert res.ok and res.checked == 1 + sum(len(t["files"]) for t in rec["trials"])
    # another pack in its place: every changed member is named
    other = _loose(tmp_path, "raw2")
    meta = json.loads((other[0] / "meta.json").read_text())
    meta["note"] = "changed"
    (other[0] / "meta.json").write_text(json.dumps(meta))
    arc.unlink()
    packs.index_path(arc).unlink()
    shutil.copy(packbuild.build(other[0].parents[3], other), arc)
    res = verify(fig, root=tmp_path)
    assert [m.split(": ")[0] for m in res.mismatches] == \
        [f"{arc.as_posix()}:{packs.trial_key(other[0])}/meta.json"]


def test_a_raw_tree_with_packs_is_checked_as_one_of_loose_trials(tmp_path):
    from latency_divide.analysis.rawtree import check_raw_tree

    loose = _loose(tmp_path)
    root = tmp_path / "raw"
    assert check_raw_tree(root, tmp_path, keep_published=False) == []
    packbuild.build(loose[0].parents[3], loose[:2])
    for d in loose[:2]:
        shutil.rmtree(d)
    assert check_raw_tree(root, tmp_path, keep_published=False) == []
    assert packs.every_trial(root) == sorted(loose)  # two packed, one loose
    stray = loose[0].parents[3] / "packs" / "notes.txt"
    stray.write_text("x")
    found = check_raw_tree(root, tmp_path, keep_published=False)
    assert [(f.file, f.what.split(" (")[0]) for f in found] == [("notes.txt", "not a file of a pack")]
    stray.unlink()
    # a member changed inside the pack while its index stayed: named
    idx = packs.read_index(packs.archives(loose[0].parents[3])[0])
    key = sorted(idx["trials"])[0]
    idx["trials"][key]["queue.jsonl"][1] = "0" * 64
    packs.index_path(packs.archives(loose[0].parents[3])[0]).write_bytes(packs.index_bytes(idx))
    packs._trials_in.cache_clear()
    found = check_raw_tree(root, tmp_path, keep_published=False)
    assert [f.file for f in found] == ["queue.jsonl"]


def test_a_pack_missing_a_file_is_named_and_its_trials_are_never_to_be_measured(tmp_path):
    """An index without its archive (a half pull): its trials stay packed, complete for the
    workflow (never scheduled for measurement), and the check names the archive. An archive
    without its index: the workflow stops, naming it and both repairs."""
    from latency_divide.analysis.integrity import check_trials

    loose = _loose(tmp_path)
    def_dir = loose[0].parents[3]
    arc = packbuild.build(def_dir, loose)
    for d in loose:
        shutil.rmtree(d)
    metas = [str((d / "meta.json").relative_to(tmp_path)) for d in loose]
    saved = arc.read_bytes()
    arc.unlink()
    assert packs.archives(def_dir) == [arc]
    todo, files = packs.split(metas, base=tmp_path)
    assert todo == [] and files == [str(packs.index_path(arc).relative_to(tmp_path))]
    found = check_trials(loose, None)
    assert {f.what for f in found} == {f"missing (its index {packs.index_path(arc).name} lists "
                                       "its trials)"}
    assert {f.trial for f in found} == {str(arc)}
    arc.write_bytes(saved)
    packs.index_path(arc).unlink()
    packs._trials_in.cache_clear()
    with pytest.raises(packs.PackError, match=r"pack-0001\.tar\.xz: an archive without its "
                       r"index .*dvc checkout --force.*remove the archive"):
        packs.split(metas, base=tmp_path)


def test_an_index_is_written_compressed_and_a_plain_one_reads_the_same_until_compressed(
        tmp_path, capsys):
    """An index is compact JSON compressed with xz (a quarter of the indented size on the
    published packs); one written plain until 2026-12-06 reads the same, and `latency-divide
    repack --indexes` compresses it losslessly, the archive untouched."""
    import lzma

    from latency_divide.analysis.rawtree import check_raw_tree
    from latency_divide.cli import main as cli_main
    from latency_divide.ops.repack import compress_indexes

    loose = _loose(tmp_path)
    def_dir, raw = loose[0].parents[3], tmp_path / "raw"
    arc = packbuild.build(def_dir, loose)
    files = {d: packbuild.trial_files(d) for d in loose}
    for d in loose:
        shutil.rmtree(d)
    xz = packs.index_path(arc)
    written = xz.read_bytes()
    text = lzma.decompress(written).decode()
    idx = json.loads(text)
    assert xz.name == "pack-0001.json.xz" and "\n" not in text[:-1] and ": " not in text
    assert len(written) < len(json.dumps(idx, indent=2)) / 2
    # as written until 2026-12-06: indented JSON, pack-0001.json
    plain = def_dir / "packs" / "pack-0001.json"
    plain.write_text(json.dumps(idx, indent=2, sort_keys=True) + "\n")
    xz.unlink()
    packs._trials_in.cache_clear()
    assert packs.index_path(arc) == plain and packs.read_index(arc) == idx
    assert packs.archives(def_dir) == [arc]
    assert {d: packs.files_of(rawio.packed(d)) for d in loose} == files
    assert packs.check(arc) == [] and check_raw_tree(raw, tmp_path, keep_published=False) == []
    metas = [str((d / "meta.json").relative_to(tmp_path)) for d in loose]
    assert str(plain.relative_to(tmp_path)) in packs.split(metas, base=tmp_path)[1]
    saved = arc.read_bytes()
    assert cli_main(["repack", "--indexes", "--dry-run", "--raw", str(raw)]) == 0
    assert plain.exists() and not xz.exists()
    assert cli_main(["repack", "--indexes", "--raw", str(raw)]) == 0
    assert "1 pack index(es) compressed; publish them" in capsys.readouterr().out
    assert not plain.exists() and xz.read_bytes() == written and arc.read_bytes() == saved
    packs._trials_in.cache_clear()
    assert {d: packs.files_of(rawio.packed(d)) for d in loose} == files
    assert compress_indexes(raw) == []
    # cut short between the rename and the removal: both there, read once, finished again
    plain.write_text(json.dumps(idx) + "\n")
    assert packs.archives(def_dir) == [arc] and packs.index_path(arc) == xz
    assert compress_indexes(raw) == [plain] and not plain.exists() and xz.read_bytes() == written
    assert check_raw_tree(raw, tmp_path, keep_published=False) == []
