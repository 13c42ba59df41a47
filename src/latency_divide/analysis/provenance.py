"""Figure provenance: a sidecar ``<figure>.provenance.json`` next to every figure, and
``latency-divide trace FIGURE`` to print it and verify it against the files on disk.

Sidecar (format_version 2)::

    {"format_version": 2, "figure": "results/figures/delay_tput.pdf",
     "outputs": {"results/figures/delay_tput.pdf": "<sha256>", ...},
     "created_at": "...Z", "git_revision": "<sha>[-dirty]" | null,
     "tables": {"results/tables/trials.parquet": "<sha256>", ...},
     "definitions": {"def-...": {<the trial-shaping settings, trial.definition>}},
     "households": {"<price_bucket>": [<household_id>, ...], ...},
     "trials": [{"path": "...", "definition_id": "def-...", "config_hash": "<sha256>",
                 "household_id": ..., "price_bucket": ..., "direction": ..., "variant": ...,
                 "repetition": ..., "files": {"meta.json": "<sha256>", ...},
                 "pack": "<archive>"  (a packed trial: its files are the pack's members),
                 "supersedes": [{"pack": "<older archive>", "meta_sha256": "<sha256>",
                                 "reason": "..."}]  (a trial measured again: the older
                                 measurements of its key that it replaced, trial.packs)}]}

Each trial names the definition it was measured under and the hash of the configuration its
job ran with (from its meta.json), not the configuration of the run that drew the figure.

Paths are stored as given (relative to the working directory of the workflow, i.e. the
repository root); ``trace`` resolves relative paths against ``--root`` (default: the current
directory).
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from latency_divide.errors import LatencyDivideError
from latency_divide.fsio import hash_dir, sha256_file, write_json_atomic
from latency_divide.paths import git_revision
from latency_divide.trial.definition import describe

if TYPE_CHECKING:  # pandas costs 1.7 s to import: `latency-divide trace` does without it
    import pandas as pd


SIDECAR_FORMAT_VERSION = 2


SIDECAR_SUFFIX = ".provenance.json"


def sidecar_path(figure: Path | str) -> Path:
    f = Path(figure)
    return f.with_name(f.stem + SIDECAR_SUFFIX)


def build_sidecar(figure: Path | str, outputs: Iterable[Path | str], trials: pd.DataFrame,
                  tables: Iterable[Path | str] = (), git_rev: str | None = None,
                  records: dict | None = None) -> dict:
    """The provenance record of a figure drawn from the trials in ``trials`` (rows of the
    trials table: definition_id, config_hash, household_id, price_bucket, direction, variant,
    repetition, trial_path). ``git_rev``: None asks git. ``records``: a dict kept by the caller
    over sidecars of the same trials and packs (analysis.figinputs), each trial's record
    built once (by its row) and shared."""
    from latency_divide.trial import definition

    hh: dict[str, list[int]] = {}
    for bucket, g in trials.groupby("price_bucket", sort=True, observed=True):
        hh[str(bucket)] = sorted({int(x) for x in g["household_id"]})
    definitions = {}
    for def_id, path in trials.groupby("definition_id")["trial_path"].first().items():
        definitions[str(def_id)] = definition.read(Path(path).parents[3])
    recs = []
    cols = ["trial_path", "definition_id", "config_hash", "household_id", "price_bucket",
            "direction", "variant", "repetition"]
    packed_in: dict[str, dict] = {}  # definition directory -> its packed trials, read once
    for r in trials[cols].sort_values("trial_path").itertuples(index=False):
        if records is not None and r in records:
            recs.append(records[r])
            continue
        rec = {"path": r.trial_path, "definition_id": r.definition_id,
               "config_hash": r.config_hash or None,
               "household_id": int(r.household_id),
               "price_bucket": str(r.price_bucket), "direction": r.direction,
               "variant": r.variant, "repetition": int(r.repetition)}
        packed = None if os.path.isdir(r.trial_path) else _packed(r.trial_path, packed_in)
        if packed is not None:  # its files are members of a pack (trial.packs)
            rec["pack"] = packed.archive.as_posix()
            rec["files"] = {name: h for name, (_size, h) in sorted(packed.members.items())}
            if packed.superseded:  # measured again: the older measurements stay traceable
                rec["supersedes"] = [{"pack": s.old.archive.as_posix(),
                                      "meta_sha256": s.old.members["meta.json"][1],
                                      "reason": s.reason} for s in packed.superseded]
        else:
            rec["files"] = _trial_hashes(r.trial_path)
        recs.append(rec)
        if records is not None:
            records[r] = rec
    return {
        "format_version": SIDECAR_FORMAT_VERSION,
        "figure": str(figure),
        "outputs": {str(p): sha256_file(p) for p in outputs},
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "git_revision": git_rev if git_rev is not None else git_revision(),
        "tables": {str(p): sha256_file(p) for p in tables},
        "definitions": definitions,
        "households": hh,
        "trials": recs,
    }


def _packed(path: str, packed_in: dict):
    """The pack of the trial at ``path`` (as trial.packs.find), its definition's packs looked up
    once per call of build_sidecar (``packed_in``), not once per trial."""
    from latency_divide.trial import packs

    parts = Path(path).parts
    if len(parts) < 5:
        return None
    def_dir = os.path.join(*parts[:-4])
    if def_dir not in packed_in:
        packed_in[def_dir] = packs.trials_in(def_dir)
    return packed_in[def_dir].get(packs.trial_key(path))


def _trial_hashes(path: str) -> dict[str, str]:
    """hash_dir of a trial directory, computed once per process while its files are unchanged
    (a figures job writes several sidecars over the same trials)."""
    return dict(_cached_hashes(str(path), _stamp(str(path))))


def _stamp(path: str) -> tuple:
    """(relative name, size, mtime) of every regular file under ``path``, sorted: one stat a
    file (os.scandir), several times cheaper than Path.rglob with two stats a file."""
    out = []
    todo = [("", path)]
    while todo:
        rel, d = todo.pop()
        with os.scandir(d) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    todo.append((f"{rel}{e.name}/", e.path))
                elif e.is_file():
                    st = e.stat()
                    out.append((rel + e.name, st.st_size, st.st_mtime_ns))
    return tuple(sorted(out))


@functools.lru_cache(maxsize=None)
def _cached_hashes(path: str, _stamp: tuple) -> tuple[tuple[str, str], ...]:
    return tuple(hash_dir(path).items())


def write_sidecar(record: dict, path: Path | str) -> None:
    write_json_atomic(path, record, sort_keys=False)


@dataclass
class TraceResult:
    record: dict
    sidecar: Path
    mismatches: list[str] = field(default_factory=list)  # "path: expected X, found Y|missing"
    checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.mismatches


def load_sidecar(figure: Path | str) -> tuple[dict, Path]:
    """The sidecar of ``figure`` (the figure itself or its .provenance.json)."""
    f = Path(figure)
    side = f if f.name.endswith(SIDECAR_SUFFIX) else sidecar_path(f)
    if not side.is_file():
        raise LatencyDivideError(f"no provenance sidecar for {figure}: {side} does not exist")
    try:
        rec = json.loads(side.read_text())
    except json.JSONDecodeError as e:
        raise LatencyDivideError(f"{side}: not valid JSON ({e.msg}, line {e.lineno})") from None
    if not isinstance(rec, dict) or rec.get("format_version") not in (1, SIDECAR_FORMAT_VERSION):
        raise LatencyDivideError(f"{side}: not a provenance sidecar of format_version "
                                 f"{SIDECAR_FORMAT_VERSION}")
    return rec, side


def verify(figure: Path | str, root: Path | str = ".") -> TraceResult:
    """Check every hash in the sidecar against the files on disk."""
    rec, side = load_sidecar(figure)
    root = Path(root)
    res = TraceResult(rec, side)

    def check(rel: str, expected: str) -> None:
        p = Path(rel)
        p = p if p.is_absolute() else root / p
        res.checked += 1
        if not p.is_file():
            res.mismatches.append(f"{rel}: missing (expected sha256 {expected[:12]})")
            return
        got = sha256_file(p)
        if got != expected:
            res.mismatches.append(f"{rel}: sha256 {got[:12]} differs from recorded {expected[:12]}")

    for p, h in (rec.get("outputs") or {}).items():
        check(p, h)
    for p, h in (rec.get("tables") or {}).items():
        check(p, h)
    for t in rec.get("trials") or []:
        if "pack" in t:
            _verify_packed(t, root, res)
            continue
        base = Path(t["path"])
        for name, h in t["files"].items():
            check((base / name).as_posix(), h)
        d = base if base.is_absolute() else root / base
        if d.is_dir():
            extra = sorted(set(hash_names(d)) - set(t["files"]))
            for name in extra:
                res.mismatches.append(f"{(base / name).as_posix()}: not in the recorded trial")
    return res


def _verify_packed(t: dict, root: Path, res: TraceResult) -> None:
    """A packed trial of a sidecar: every recorded member's sha256 against the pack's bytes."""
    from latency_divide.trial import packs, rawio

    arc = Path(t["pack"])
    arc = arc if arc.is_absolute() else root / arc
    key = packs.trial_key(t["path"])
    try:
        files = packs.read_archive(arc).get(key)
    except FileNotFoundError:
        files = None
    except rawio.UNREADABLE as e:
        res.checked += len(t["files"])
        res.mismatches.append(f"{t['pack']}: not a readable pack ({e})")
        return
    for name, h in t["files"].items():
        res.checked += 1
        where = f"{t['pack']}:{key}/{name}"
        if files is None or name not in files:
            res.mismatches.append(f"{where}: missing (expected sha256 {h[:12]})")
        elif (got := packs.sha256(files[name])) != h:
            res.mismatches.append(f"{where}: sha256 {got[:12]} differs from recorded {h[:12]}")
    for name in sorted(set(files or {}) - set(t["files"])):
        res.mismatches.append(f"{t['pack']}:{key}/{name}: not in the recorded trial")


def hash_names(path: Path) -> list[str]:
    return [f.relative_to(path).as_posix() for f in path.rglob("*") if f.is_file()]


def format_trace(res: TraceResult, files: bool = False) -> str:
    """A readable report of a sidecar and its verification (``files``: every file's hash)."""
    rec = res.record
    out = [
        f"figure:       {rec.get('figure')}",
        f"sidecar:      {res.sidecar}",
        f"created:      {rec.get('created_at')}",
        f"git revision: {rec.get('git_revision') or 'unknown'} (of the analysis)",
    ]
    for p, h in (rec.get("outputs") or {}).items():
        out.append(f"output:       {p}  sha256 {h[:16]}")
    for p, h in (rec.get("tables") or {}).items():
        out.append(f"table:        {p}  sha256 {h[:16]}")
    hh = rec.get("households") or {}
    out.append(f"households:   {sum(len(v) for v in hh.values())} in {len(hh)} price bucket(s)")
    for bucket, ids in hh.items():
        out.append(f"  {bucket:>8}: {', '.join(str(i) for i in ids)}")
    defs = rec.get("definitions") or {}
    out.append(f"definitions:  {len(defs)} (the settings each trial was measured under)")
    for def_id, d in defs.items():
        out.append(f"  {def_id}: {describe(d)}")
    trials = rec.get("trials") or []
    out.append(f"trials:       {len(trials)}")
    for t in trials:
        cfg = (t.get("config_hash") or "unknown")[:12]
        out.append(f"  {t['path']}  (household {t['household_id']}, {t['direction']}, "
                   f"{t['variant']}, rep {t['repetition']}; {t.get('definition_id')}, "
                   f"config {cfg}; {len(t['files'])} files)")
        for old in t.get("supersedes") or []:
            out.append(f"      from {t.get('pack')}; supersedes the measurement in "
                       f"{old['pack']} (meta.json sha256 {old['meta_sha256'][:12]}): "
                       f"{old['reason']}")
        if files:
            for name, h in t["files"].items():
                out.append(f"      {name:<16} {h}")
    if res.ok:
        out.append(f"verified:     OK, {res.checked} file hashes match the files on disk")
    else:
        out.append(f"verified:     {len(res.mismatches)} MISMATCH(ES) among {res.checked} files:")
        out.extend(f"  MISMATCH {m}" for m in res.mismatches)
    return "\n".join(out)
