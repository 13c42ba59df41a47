"""Superseding a published trial (trial.packs, analysis.packing, `publish --supersede`): a trial
measured again goes into a later pack whose index names the packed measurement it replaces;
every reader then gets the new one, and the old one stays in its pack, traceable."""

import json
import lzma
import shutil

import pandas as pd
import pytest

from latency_divide.analysis import packing, parsedcache, tables
from latency_divide.analysis.provenance import (
    build_sidecar,
    format_trace,
    verify,
    write_sidecar,
)
from latency_divide.analysis.rawtree import check_raw_tree
from latency_divide.cli import main as cli_main
from latency_divide.trial import packs, rawio

from test_packs import SOURCES, _loose
from test_rawio import _as_format4

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

REASON = "measured again with instrument v2 (issue 40): v1 could not emulate this link"
V2 = {"generation": "v2", "delay": {"mechanism": "delayline",
                                    "delayline": {"version": "0.2.0", "engine": "batched",
                                                  "window_us": 250}},
      "tool": {"name": "tquic-perf", "version": "test", "sender": None, "receiver": None}}


def _published(tmp_path, name="raw"):
    """Three trials packed with their parsed cache (pack-0001), as `publish` leaves them."""
    loose = _loose(tmp_path, name)
    def_dir = loose[0].parents[3]
    assert packing.pack_definition(def_dir).name == "pack-0001.tar.xz"
    assert not any(d.exists() for d in loose)
    return def_dir, loose


def _measured_again(tmp_path, trial):
    """A new measurement of ``trial``'s key, loose (format 4): the same logs, a meta.json that
    records instrument v2."""
    src = next(s for s in SOURCES if packs.trial_key(s) == packs.trial_key(trial))
    base = tmp_path / f"again-{trial.parent.parent.parent.name}"
    d = _as_format4(src, base)
    meta = json.loads((d / "meta.json").read_text())
    meta["instrument"] = V2
    (d / "meta.json").write_text(json.dumps(meta, separators=(",", ":")))
    trial.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(d, trial)
    return trial


def _row(dirs, trial):
    t = tables.collect(dirs).trials
    (row,) = t[t["trial_path"] == trial.as_posix()].to_dict("records")
    return row


def test_a_trial_measured_again_replaces_the_published_one_for_every_reader(tmp_path):
    def_dir, trials = _published(tmp_path)
    old_arc = def_dir / "packs" / "pack-0001.tar.xz"
    old_bytes = {p.name: p.read_bytes() for p in old_arc.parent.iterdir()}
    old_meta = rawio.read_text(trials[0], "meta.json").encode()
    assert _row(trials, trials[0])["instrument"] == "v1"

    again = _measured_again(tmp_path, trials[0])
    with pytest.raises(packs.PackError, match=r"already in .*pack-0001.*--supersede REASON"):
        packing.pack_definition(def_dir)
    assert packs.archives(def_dir) == [old_arc]  # nothing written
    new_arc = packing.pack_definition(def_dir, supersede=REASON)
    assert new_arc.name == "pack-0002.tar.xz" and not again.exists()
    # the old pack is as published, byte for byte; the new one holds the new trial only
    assert {p.name: p.read_bytes() for p in old_arc.parent.iterdir()
            if p.name.startswith("pack-0001")} == old_bytes
    idx = packs.read_index(new_arc)
    key = packs.trial_key(trials[0])
    assert list(idx["trials"]) == [key]
    assert idx["supersedes"] == {key: {"archive": "pack-0001.tar.xz",
                                       "meta_sha256": packs.sha256(old_meta), "reason": REASON}}
    assert packs.check(new_arc) == []

    # every reader: the new measurement
    got = packs.trials_in(def_dir)
    assert got[key].archive == new_arc
    assert {got[packs.trial_key(d)].archive for d in trials[1:]} == {old_arc}
    assert packs.every_trial(def_dir.parent) == sorted(trials)
    assert rawio.full_meta(trials[0])["instrument"]["generation"] == "v2"
    metas = [str((d / "meta.json").relative_to(tmp_path)) for d in trials]
    todo, files = packs.split(metas[:1], base=tmp_path)
    assert todo == [] and {f.rsplit("/", 1)[1] for f in files} == \
        {p.name for p in parsedcache.files(new_arc)} | {new_arc.name, "pack-0002.json.xz"}
    todo, files = packs.split(metas, base=tmp_path)
    assert todo == [] and {f.rsplit("/", 1)[1].split(".")[0] for f in files} == \
        {"pack-0001", "pack-0002"}
    # the tables, from the new pack's parsed cache and from its logs
    cache, why = parsedcache.load(new_arc)
    assert why == "" and set(cache.entries) == {key}
    assert _row(trials, trials[0])["instrument"] == "v2"
    for f in parsedcache.files(new_arc):
        f.unlink()
    assert _row(trials, trials[0])["instrument"] == "v2"
    assert check_raw_tree(def_dir.parent, tmp_path, keep_published=False) == []

    # the old measurement stays traceable
    (s,) = packs.superseded_in(def_dir)
    assert (s.key, s.old.archive, s.by, s.reason) == (key, old_arc, new_arc, REASON)
    assert packs.files_of(s.old)["meta.json"] == old_meta
    assert got[key].superseded == (s,)
    # a cache of the old pack written again (other code) leaves the superseded key out
    assert packing.build_cache(old_arc) == 2


def test_a_figure_traces_a_superseded_trial_to_both_packs(tmp_path):
    def_dir, trials = _published(tmp_path)
    _measured_again(tmp_path, trials[0])
    new_arc = packing.pack_definition(def_dir, supersede=REASON)
    rows = tables.collect(trials).trials
    fig = tmp_path / "f.pdf"
    fig.write_bytes(b"%PDF")
    rec = build_sidecar(fig, [fig], rows, git_rev="abc")
    (t,) = [t for t in rec["trials"] if t["path"] == trials[0].as_posix()]
    assert t["pack"] == new_arc.as_posix()
    assert t["supersedes"] == [{"pack": (def_dir / "packs" / "pack-0001.tar.xz").as_posix(),
                                "meta_sha256": packs.superseded_in(def_dir)[0].old.members[
                                    "meta.json"][1], "reason": REASON}]
    assert sum("supersedes" in t for t in rec["trials"]) == 1
    write_sidecar(rec, tmp_path / "f.provenance.json")
    res = verify(fig, root=tmp_path)
    assert res.ok
    text = format_trace(res)
    assert f"from {new_arc.as_posix()}; supersedes the measurement in " in text
    assert REASON in text


def test_a_repeated_key_without_a_matching_supersedes_record_is_an_error(tmp_path):
    def_dir, trials = _published(tmp_path)
    _measured_again(tmp_path, trials[0])
    new_arc = packing.pack_definition(def_dir, supersede=REASON)
    key = packs.trial_key(trials[0])
    good = packs.index_path(new_arc).read_bytes()

    def forged(edit, match):
        idx = json.loads(lzma.decompress(good))
        edit(idx)
        packs.index_path(new_arc).write_bytes(packs.index_bytes(idx))
        packs._trials_in.cache_clear()
        with pytest.raises(packs.PackError, match=match):
            packs.trials_in(def_dir)
        with pytest.raises(packs.PackError, match=match):
            packs.split([str((trials[0] / "meta.json").relative_to(tmp_path))], base=tmp_path)

    forged(lambda i: i["supersedes"][key].update(meta_sha256="0" * 64),
           rf"pack-0002\.tar\.xz: trial {key} is also in .*pack-0001\.tar\.xz \(its supersedes "
           r"record's meta_sha256 000000000000 is not that of pack-0001\.tar\.xz's meta\.json")
    forged(lambda i: i["supersedes"][key].update(archive="pack-0003.tar.xz"),
           r"also in .*pack-0001\.tar\.xz \(its supersedes record names 'pack-0003\.tar\.xz'")
    forged(lambda i: i.pop("supersedes"), r"also in .*pack-0001\.tar\.xz \(its index has no "
           r"supersedes record for it\)")
    forged(lambda i: i["supersedes"][key].update(reason=" "), "gives no reason")
    forged(lambda i: i["supersedes"].update({"1/uplink/cubic/rep1": i["supersedes"][key]}),
           r"pack-0002\.json\.xz: supersedes 1/uplink/cubic/rep1, which it does not hold")
    packs.index_path(new_arc).write_bytes(good)
    packs._trials_in.cache_clear()
    assert packs.trials_in(def_dir)[key].archive == new_arc


def test_publish_refuses_a_trial_measured_again_without_supersede(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    def_dir, trials = _published(tmp_path, "results/raw")
    again = _measured_again(tmp_path, trials[0])
    assert cli_main(["publish"]) == 1
    err = capsys.readouterr().err
    assert "1 loose trial(s) are already packed" in err and "--supersede REASON" in err
    assert f"{again.relative_to(tmp_path)} (published in " in err
    assert cli_main(["publish", "--no-pack", "--supersede", REASON]) == 1
    assert "without --no-pack" in capsys.readouterr().err
    assert cli_main(["publish", "--supersede", " "]) == 1
    assert "needs a reason" in capsys.readouterr().err
    assert again.is_dir() and packs.archives(def_dir) == [def_dir / "packs" / "pack-0001.tar.xz"]
    # nothing to supersede: the option is a mistake
    shutil.rmtree(again)
    assert cli_main(["publish", "--supersede", REASON]) == 1
    assert "nothing to supersede" in capsys.readouterr().err


def test_an_index_without_supersedes_reads_as_before(tmp_path):
    def_dir, trials = _published(tmp_path)
    arc = packs.archives(def_dir)[0]
    assert "supersedes" not in packs.read_index(arc)
    assert packs.superseded_in(def_dir) == []
    assert all(p.superseded == () for p in packs.trials_in(def_dir).values())
    rows = tables.collect(trials).trials
    assert isinstance(rows, pd.DataFrame) and len(rows) == 3
