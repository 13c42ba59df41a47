#!/usr/bin/env python3
"""Benchmark: what published data would weigh and cost to read as per-definition packs with a
parsed cache, against today's two files per trial (issue 24, section 6; the design is built on the
branch `packs`, docs/data.md "Packs" there).

Today a published trial is two files (meta.json, logs.tar.xz). `dvc pull` costs about 2 ms
per file and the tables about 11 ms per trial (bench/bench_reanalysis.py), so both grow with the
trial count. The candidate: each definition's published trials in one solid archive (a pack:
every trial's files, decompressed, in one deterministic tar, compressed once with xz), and
beside it the parsed rows and time series of its trials (the parsed cache: zstd Parquet), read
instead of the logs while the parsing code is unchanged. For every definition under RAW (or
those given) this prints:

- trials, and the bytes of today's files (apparent, and in whole 4 KiB blocks as a remote
  on a file system stores them);
- the pack's bytes, the time to build it and to read every trial's files back from it,
  checked byte for byte against the trial's own files;
- the parsed cache's bytes, the time to parse the trials as the tables job does and to read
  the cache back, checked equal to the parse.

    .venv/bin/python bench/bench_packs.py results/raw [--defs def-2098d16836 ...] [--preset 6]
"""

from __future__ import annotations

import argparse
import io
import lzma
import os
import sys
import tarfile
import time
import warnings
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from latency_divide.analysis import tables  # noqa: E402
from latency_divide.trial import rawio  # noqa: E402
from latency_divide.trial.layout import ARCHIVE, META, trial_dirs_under  # noqa: E402

BLOCK = 4096


def trial_files(d: Path) -> dict[str, bytes]:
    """Every file of a trial as readers see it: meta.json, the archive's members, other files
    (``.gz`` logs decompressed under their plain names)."""
    out = {META: (d / META).read_bytes()}
    out.update(rawio.members(d))
    for f in sorted(d.iterdir()):
        if f.is_file() and f.name not in (META, ARCHIVE):
            out[f.name.removesuffix(".gz")] = rawio.read_bytes(d, f.name.removesuffix(".gz"))
    return out


def build_pack(trials: list[Path], root: Path, preset: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for d in trials:
            for name, data in sorted(trial_files(d).items()):
                info = tarfile.TarInfo(f"{d.relative_to(root).as_posix()}/{name}")
                info.size, info.mtime, info.mode = len(data), 0, 0o644
                tar.addfile(info, io.BytesIO(data))
    filters = [{"id": lzma.FILTER_LZMA2, "preset": preset, "lc": 0, "lp": 0, "pb": 0}]
    return lzma.compress(buf.getvalue(), format=lzma.FORMAT_XZ, filters=filters)


def read_pack(data: bytes) -> dict[str, bytes]:
    raw = lzma.decompress(data, format=lzma.FORMAT_XZ)
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}


def parsed_cache(tabs: tables.Tables) -> dict[str, bytes]:
    out = {}
    for name in ("trials", "ping", "queue", "throughput"):
        sink = pa.BufferOutputStream()
        pq.write_table(pa.Table.from_pandas(getattr(tabs, name), preserve_index=False), sink,
                       compression="zstd", compression_level=19)
        out[name] = sink.getvalue().to_pybytes()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("raw", type=Path, help="raw tree (results/raw after dvc pull)")
    ap.add_argument("--defs", nargs="*", help="definition ids (default: all)")
    ap.add_argument("--preset", type=int, default=6, help="xz preset of the pack (0-9)")
    a = ap.parse_args()
    defs = a.defs or sorted(p.name for p in a.raw.glob("def-*") if p.is_dir())
    print(f"{'definition':15} {'trials':>6} {'today KB/t':>10} {'blocks KB/t':>11} "
          f"{'pack KB/t':>9} {'pack s':>6} {'read ms/t':>9} {'parsed KB/t':>11} "
          f"{'parse ms/t':>10} {'load ms/t':>9}")
    tot = {"n": 0, "today": 0, "blocks": 0, "pack": 0, "parsed": 0, "parse": 0.0, "load": 0.0,
           "read": 0.0}
    for def_id in defs:
        trials = [d for d in trial_dirs_under(a.raw) if d.parts[len(a.raw.parts)] == def_id]
        if not trials:
            continue
        files = [f for d in trials for f in d.iterdir() if f.is_file()]
        today = sum(f.stat().st_size for f in files)
        blocks = sum(-(-f.stat().st_size // BLOCK) * BLOCK for f in files)
        t0 = time.perf_counter()
        pack = build_pack(trials, a.raw, a.preset)
        t_pack = time.perf_counter() - t0
        t0 = time.perf_counter()
        back = read_pack(pack)
        t_read = time.perf_counter() - t0
        want = {f"{d.relative_to(a.raw).as_posix()}/{k}": v for d in trials
                for k, v in trial_files(d).items()}
        if back != want:
            sys.exit(f"{def_id}: the pack does not give back the trials' files")
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tabs = tables.collect(trials)
        t_parse = time.perf_counter() - t0
        cache = parsed_cache(tabs)
        t0 = time.perf_counter()
        loaded = {k: pq.read_table(io.BytesIO(v)).to_pandas() for k, v in cache.items()}
        t_load = time.perf_counter() - t0
        for k, v in loaded.items():
            pd.testing.assert_frame_equal(v, getattr(tabs, k).reset_index(drop=True),
                                          check_dtype=False)
        n = len(trials)
        parsed = sum(len(v) for v in cache.values())
        print(f"{def_id:15} {n:6d} {today / n / 1e3:10.1f} {blocks / n / 1e3:11.1f} "
              f"{len(pack) / n / 1e3:9.2f} {t_pack:6.1f} {t_read / n * 1e3:9.2f} "
              f"{parsed / n / 1e3:11.2f} {t_parse / n * 1e3:10.2f} {t_load / n * 1e3:9.3f}",
              flush=True)
        for k, v in (("n", n), ("today", today), ("blocks", blocks), ("pack", len(pack)),
                     ("parsed", parsed), ("parse", t_parse), ("load", t_load),
                     ("read", t_read)):
            tot[k] += v
    n = tot["n"]
    if not n:
        sys.exit(f"no trials under {a.raw}")
    print(f"\nall: {n} trials; today {tot['today'] / 1e6:.1f} MB ({tot['blocks'] / 1e6:.1f} MB "
          f"in blocks, {tot['today'] / n / 1e3:.1f} KB a trial); packs {tot['pack'] / 1e6:.1f} MB "
          f"({tot['pack'] / n / 1e3:.2f} KB a trial) + parsed cache {tot['parsed'] / 1e6:.1f} MB "
          f"({tot['parsed'] / n / 1e3:.2f} KB a trial) = "
          f"{(tot['pack'] + tot['parsed']) / 1e6:.1f} MB")
    print(f"reading: parse {tot['parse'] / n * 1e3:.2f} ms a trial, parsed cache "
          f"{tot['load'] / n * 1e3:.3f} ms a trial ({tot['parse'] / max(tot['load'], 1e-9):.0f}x); "
          f"a pack's files {tot['read'] / n * 1e3:.2f} ms a trial")
    print(f"files in the remote: today {2 * n} or more, packs + caches {len(defs) * 5}"
          f" ({os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
