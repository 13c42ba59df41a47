#!/usr/bin/env python3
"""Benchmark: what each definition's loose published trials weigh and cost to read as a pack
with its parsed cache (docs/data.md "Packs"), measured with the code `latency-divide publish`
runs (analysis.packing.pack_definition) on copies of the trials in a scratch directory.

For every definition under RAW with loose trials of two files (or those given) this prints:

- trials, and the bytes of their files (apparent, and in whole 4 KiB blocks as a remote on a
  file system stores them);
- the pack's bytes (archive and index), its parsed cache's bytes, and the time to write both
  (pack_definition: build, read back, check every member, remove the loose copies, parse);
- the time per trial of the tables' parse three ways: the loose trials, the pack's files (no
  cache), and the parsed cache; the three tables are checked identical.

    .venv/bin/python bench/bench_packs.py results/raw [--defs def-2098d16836 ...]

RAW itself is only read.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from latency_divide.analysis import packing, parsedcache, tables  # noqa: E402
from latency_divide.trial import packs  # noqa: E402
from latency_divide.trial.layout import trial_dirs_under  # noqa: E402

BLOCK = 4096
PARTS = ("trials", "ping", "queue", "throughput")


def _collect(dirs: list[Path]) -> tuple[tables.Tables, float]:
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tabs = tables.collect(dirs)
    return tabs, time.perf_counter() - t0


def _same(a: tables.Tables, b: tables.Tables, what: str) -> None:
    for part in PARTS:
        try:
            pd.testing.assert_frame_equal(getattr(a, part), getattr(b, part))
        except AssertionError as e:
            sys.exit(f"{what}: the {part} table differs from the loose trials' ({e})")


def bench_definition(raw: Path, def_id: str, scratch: Path) -> dict | None:
    trials = [d for d in trial_dirs_under(raw) if d.parents[3].name == def_id
              and packs.two_files(d)]
    if not trials:
        return None
    def_dir = scratch / def_id
    copies = []
    for d in trials:
        dst = def_dir / d.relative_to(raw / def_id)
        shutil.copytree(d, dst)
        copies.append(dst)
    files = [f for d in trials for f in d.iterdir() if f.is_file()]
    r = {"n": len(trials), "today": sum(f.stat().st_size for f in files),
         "blocks": sum(-(-f.stat().st_size // BLOCK) * BLOCK for f in files)}
    loose, r["parse"] = _collect(copies)
    t0 = time.perf_counter()
    archive = packing.pack_definition(def_dir)
    r["write"] = time.perf_counter() - t0
    r["pack"] = archive.stat().st_size + packs.index_path(archive).stat().st_size
    cache = [f for f in parsedcache.files(archive) if f.exists()]
    r["cache"] = sum(f.stat().st_size for f in cache)
    cached, r["load"] = _collect(copies)
    _same(loose, cached, f"{def_id} from its parsed cache")
    for f in cache:
        f.unlink()
    from_pack, r["unpack"] = _collect(copies)
    _same(loose, from_pack, f"{def_id} from its pack")
    shutil.rmtree(def_dir)
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("raw", type=Path, help="raw tree (results/raw after dvc pull)")
    ap.add_argument("--defs", nargs="*", help="definition ids (default: all)")
    a = ap.parse_args()
    defs = a.defs or sorted(p.name for p in a.raw.glob("def-*") if p.is_dir())
    print(f"{'definition':15} {'trials':>6} {'files KB/t':>10} {'blocks KB/t':>11} "
          f"{'pack KB/t':>9} {'cache KB/t':>10} {'write s':>7} {'parse ms/t':>10} "
          f"{'pack ms/t':>9} {'cache ms/t':>10}")
    tot: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="ld-bench-packs-") as tmp:
        for def_id in defs:
            r = bench_definition(a.raw, def_id, Path(tmp))
            if r is None:
                continue
            n = r["n"]
            print(f"{def_id:15} {n:6d} {r['today'] / n / 1e3:10.1f} {r['blocks'] / n / 1e3:11.1f} "
                  f"{r['pack'] / n / 1e3:9.2f} {r['cache'] / n / 1e3:10.2f} {r['write']:7.1f} "
                  f"{r['parse'] / n * 1e3:10.2f} {r['unpack'] / n * 1e3:9.2f} "
                  f"{r['load'] / n * 1e3:10.3f}", flush=True)
            for k, v in r.items():
                tot[k] = tot.get(k, 0) + v
    n = tot.get("n", 0)
    if not n:
        sys.exit(f"no loose trials of two files under {a.raw}")
    print(f"\nall: {n} trials; files {tot['today'] / 1e6:.1f} MB ({tot['blocks'] / 1e6:.1f} MB in "
          f"blocks); packs {tot['pack'] / 1e6:.1f} MB + parsed caches {tot['cache'] / 1e6:.1f} MB "
          f"({(tot['pack'] + tot['cache']) / n / 1e3:.2f} KB a trial), written in "
          f"{tot['write']:.0f} s")
    print(f"tables: loose {tot['parse'] / n * 1e3:.2f} ms a trial, from packs "
          f"{tot['unpack'] / n * 1e3:.2f}, from parsed caches {tot['load'] / n * 1e3:.3f} "
          f"({tot['parse'] / max(tot['load'], 1e-9):.0f}x faster than loose); identical tables")


if __name__ == "__main__":
    main()
