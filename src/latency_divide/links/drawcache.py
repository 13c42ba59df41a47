"""Population draws kept between processes (issue 40, step 4: the rest of a trial).

Every trial job of a population run loads its config, and loading it draws the sample
(links.population.population_draw): a link plan for each of the data set's 6,795 households
and numpy's generators, about 0.2 s of CPU, in each of the run's 2,304 jobs. The draw is a pure
function of the data file, the code, the sample's settings, the buckets, the seed and the
qfactor, so the first process to draw writes its result here and the others read it.

The key is a sha256 of all of those: the data file's bytes, the bytes of every module of the
``latency_divide`` package (any edit of the code draws anew; nothing has to list which modules
the draw depends on), and the settings. The file holds the key again and the draw as household
IDs; the rows are the data set's own (data.source.unique_rows). A file that cannot be read, is
not this format or holds another key is ignored and written again; one that cannot be written
leaves the draw uncached (the cache saves CPU, it never decides a result).

Where: ``LATENCY_DIVIDE_CACHE_DIR`` (default ``~/.cache/latency-divide``), ``draw-<key>.json``;
the newest :data:`KEEP` files are kept. Deleting them is always safe.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

#: The cache file's format; bump on any change of its fields or meaning.
FORMAT = 1
#: How many draws are kept (the newest by modification time).
KEEP = 16
CACHE_ENV = "LATENCY_DIVIDE_CACHE_DIR"


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "latency-divide")


@functools.lru_cache(maxsize=1)
def _code_digest() -> str:
    """sha256 over the path and bytes of every module of the package, in path order."""
    pkg = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for p in sorted(pkg.rglob("*.py")):
        h.update(p.relative_to(pkg).as_posix().encode() + b"\0")
        h.update(p.read_bytes() + b"\0")
    return h.hexdigest()


@functools.lru_cache(maxsize=4)
def _file_digest(path: Path, _stamp: tuple) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def draw_key(data: Path, settings: dict) -> str:
    """The key of a draw: data file, code and settings (JSON-able, e.g. the sample's to_dict,
    the bucket spans, seed and qfactor)."""
    st = data.stat()
    parts = {"format": FORMAT, "code": _code_digest(),
             "data": _file_digest(data, (st.st_ino, st.st_mtime_ns, st.st_size)),
             "settings": settings}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def load(key: str) -> dict | None:
    """The cached draw of ``key`` (drawn, by_bucket, repeated, eligible, excluded as IDs), or
    None if there is none usable."""
    try:
        rec = json.loads((cache_dir() / f"draw-{key}.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or rec.get("format") != FORMAT or rec.get("key") != key:
        return None
    return rec


def store(key: str, drawn, by_bucket, repeated, eligible_ids, excluded) -> None:
    """Keep a draw (IDs; ``excluded``: (ID, reason) pairs); any OSError leaves it uncached."""
    from latency_divide.fsio import write_json_atomic

    rec = {"format": FORMAT, "key": key, "drawn": list(drawn),
           "by_bucket": {k: list(v) for k, v in by_bucket.items()},
           "repeated": list(repeated), "eligible": list(eligible_ids),
           "excluded": [[i, r] for i, r in excluded]}
    d = cache_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        write_json_atomic(d / f"draw-{key}.json", rec, indent=None)
        old = sorted(d.glob("draw-*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for p in old[KEEP:]:
            p.unlink(missing_ok=True)
    except OSError:
        pass
