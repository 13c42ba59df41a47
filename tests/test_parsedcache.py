"""The parsed cache of a pack (analysis.parsedcache): the same tables as parsing its logs, used
only for the code that wrote it, and its code key covers every module parsing loads."""

import json
import shutil
import subprocess
import sys

import pandas as pd
import pytest
import pyarrow.parquet as pq

from latency_divide.analysis import packing, parsedcache, tables
from latency_divide.trial import packbuild, packs

from conftest import ROOT
from test_packs import _loose

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

TABLES = ("trials", "ping", "queue", "throughput", "exclusions")


def _packed(tmp_path):
    loose = _loose(tmp_path)
    # one trial the analysis leaves out: its health verdict failed (a delay line late by a
    # second at p99: beyond the bound of any link; the analysis judges the numbers)
    meta = json.loads((loose[1] / "meta.json").read_text())
    meta["health"] = {**meta.get("health", {}), "delayline_late_p99_us": 1e6,
                      "verdict": "fail", "reasons": ["made up"]}
    (loose[1] / "meta.json").write_text(json.dumps(meta, separators=(",", ":")))
    arc = packbuild.build(loose[0].parents[3], loose)
    for d in loose:
        shutil.rmtree(d)
    return arc, loose


def _tables(dirs, out):
    tables.build_tables(dirs, out)
    return {f.stem: pq.read_table(f).to_pandas() for f in out.rglob("*.parquet")}


def test_the_cache_gives_the_tables_parsing_gives(tmp_path, caplog):
    arc, dirs = _packed(tmp_path)
    parsed = _tables(dirs, tmp_path / "parsed")
    assert len(parsed["trials"]) == 2 and len(parsed["exclusions"]) == 1
    assert packing.build_cache(arc) == 3
    assert all(f.is_file() for f in parsedcache.files(arc))
    cache, why = parsedcache.load(arc)
    assert cache is not None and why == ""
    with caplog.at_level("INFO"):
        cached = _tables(dirs, tmp_path / "cached")
    assert "parsing its" not in caplog.text
    assert set(cached) == set(parsed)
    assert set(TABLES) <= set(cached)
    for t in cached:
        pd.testing.assert_frame_equal(cached[t], parsed[t], check_exact=True)


def test_a_cache_of_other_code_or_another_archive_is_not_read(tmp_path, caplog, monkeypatch):
    arc, dirs = _packed(tmp_path)
    packing.build_cache(arc)
    monkeypatch.setattr(parsedcache, "code_key", lambda: "other code")
    assert parsedcache.load(arc) == (None, "parsed cache of other code")
    with caplog.at_level("INFO"):
        tables.collect(dirs)
    assert "parsed cache of other code: parsing its 3 trials" in caplog.text
    monkeypatch.undo()
    head = json.loads(parsedcache.files(arc)[0].read_text())
    head["archive"] = "0" * 64
    parsedcache.files(arc)[0].write_text(json.dumps(head))
    assert parsedcache.load(arc) == (None, "parsed cache of another archive")


def test_the_code_key_covers_every_module_parsing_loads():
    trials = sorted(str(p.parent) for p in (ROOT / "tests" / "data" / "trials").glob(
        "def-*/*/*/*/rep*/meta.json"))
    code = ("import sys, warnings, json\n"
            "from latency_divide.analysis import tables\n"
            "warnings.simplefilter('ignore')\n"
            f"tables.collect({trials!r})\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == "
            "'latency_divide')))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(p.stdout))
    assert loaded <= set(parsedcache.CODE_MODULES), sorted(loaded - set(parsedcache.CODE_MODULES))
