"""Population draws kept between processes (links.drawcache): a cached draw is the draw, a trial
job's config load with a warm cache neither draws nor imports numpy, and any change of data,
settings or a bad cache file draws anew. Quick: no trial, no namespace."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml
from conftest import DATA_CSV, ROOT

from latency_divide.config import load_config
from latency_divide.links import drawcache, population
from latency_divide.links.population import population_draw

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv(drawcache.CACHE_ENV, str(d))
    return d


def _pop_cfg():
    raw = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    raw.update(yaml.safe_load((ROOT / "config" / "population.yaml").read_text()))
    return raw


def _draw(data=None, seed=None):
    cfg = load_config(_pop_cfg())
    return population_draw(cfg.population, cfg.buckets, cfg.seed if seed is None else seed,
                           data, cfg.qfactor)


def _fields(d):
    return (d.spec, d.seed, d.buckets, d.drawn, d.by_bucket, d.repeated, d.eligible, d.excluded)


def test_cached_draw_is_the_draw(cache):
    population._eligibility.cache_clear()
    fresh = _draw()
    files = list(cache.glob("draw-*.json"))
    assert len(files) == 1
    rec = json.loads(files[0].read_text())
    assert rec["format"] == drawcache.FORMAT and rec["drawn"] == list(fresh.drawn)
    cached = _draw()
    assert _fields(cached) == _fields(fresh)
    assert len(fresh.drawn) == 240 and len(fresh.eligible) + len(fresh.excluded) > 6000


def test_a_warm_cache_spares_a_fresh_process_the_draw(cache):
    """What a trial job of a population run does: load its config. With the cache warm, it
    neither draws (no link plan per household) nor imports numpy."""
    code = ("import json, sys, yaml\n"
            "from latency_divide.config import load_config\n"
            "from latency_divide.links import population\n"
            f"raw = yaml.safe_load(open({str(ROOT / 'config' / 'config.yaml')!r}))\n"
            f"raw.update(yaml.safe_load(open({str(ROOT / 'config' / 'population.yaml')!r})))\n"
            "cfg = load_config(raw)\n"
            "print(json.dumps({'numpy': 'numpy' in sys.modules,\n"
            "                  'drew': population._eligibility.cache_info().misses,\n"
            "                  'ids': [list(b.ids) for b in cfg.buckets]}))\n")

    def run():
        out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                             text=True, env={**os.environ, drawcache.CACHE_ENV: str(cache)})
        return json.loads(out.stdout)

    cold, warm = run(), run()
    assert cold["numpy"] and cold["drew"] == 1
    assert not warm["numpy"] and warm["drew"] == 0
    assert warm["ids"] == cold["ids"]


def test_another_seed_or_data_file_draws_anew(cache, tmp_path):
    a = _draw()
    b = _draw(seed=a.seed + 1)
    assert a.drawn != b.drawn
    assert len(list(cache.glob("draw-*.json"))) == 2
    # the same rows in another file: the same draw, under another key (the key hashes the bytes)
    copy = tmp_path / "data.csv"
    shutil.copyfile(DATA_CSV, copy)
    assert _draw(data=copy).drawn == a.drawn
    assert len(list(cache.glob("draw-*.json"))) == 2  # same bytes, same key
    # a household's price removed: another key, and the household is excluded, not drawn
    with copy.open(newline="") as f:
        rows = list(csv.reader(f))
    uid, price = rows[0].index("unit_id"), rows[0].index("monthly.charge")
    first = a.drawn[0]
    for r in rows[1:]:
        if r[uid] == str(first):
            r[price] = "nan"
    changed = tmp_path / "changed.csv"  # another path: data.source caches a file's rows by path
    with changed.open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    c = _draw(data=changed)
    assert first not in c.drawn
    assert first in {int(r["unit_id"]) for r, _ in c.excluded}
    assert len(list(cache.glob("draw-*.json"))) == 3


def test_a_bad_or_foreign_cache_file_is_drawn_again(cache):
    a = _draw()
    (f,) = cache.glob("draw-*.json")
    for bad in ("not json", json.dumps({"format": drawcache.FORMAT, "key": "other"}),
                json.dumps({"format": 0, "key": f.stem.removeprefix("draw-")})):
        f.write_text(bad)
        assert _fields(_draw()) == _fields(a)
        assert json.loads(f.read_text())["drawn"] == list(a.drawn)  # written again


def test_an_unwritable_cache_leaves_the_draw_uncached(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(drawcache.CACHE_ENV, str(blocker / "cache"))  # under a file: no dir
    assert len(_draw().drawn) == 240


def test_old_draws_are_pruned(cache, monkeypatch):
    monkeypatch.setattr(drawcache, "KEEP", 2)
    for seed in (1, 2, 3):
        _draw(seed=seed)
    assert len(list(cache.glob("draw-*.json"))) == 2
