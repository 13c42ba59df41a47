"""Lossless repacking of older trials into the two-file form of format 4 (`latency-divide
repack`), and the proof that it lost nothing (`latency-divide repack --check`).

A trial of formats 1-3 is up to ten files: meta.json (indented, 11-14 KB), plain logs and
gzip-compressed ones. In a DVC remote every file takes whole 4 KiB blocks and costs `dvc pull`
a copy and a link of its own, so 1,648 such trials were 14,800 files. Repacked, a trial keeps
its format version and every byte of its content, stored as format 4 stores it:

* ``logs.tar.xz`` (rawio.pack): every file but meta.json, the ``.gz`` logs decompressed
  under their plain names, and ``setup.json`` with the set-up records (layout.SETUP_KEYS);
* ``meta.json``: the rest, compact, with ``archive`` (as format 4) and ``repacked``: for each
  original file its md5 and size, for a ``.gz`` log the md5 of its content, and how the
  original meta.json was written (``meta_json``).

:func:`original_files` rebuilds every original file from a repacked trial: meta.json is
``json.dumps(full meta, sort_keys=True) + "\\n"``, indented or compact as formats 1-3 wrote it, a
``.gz`` log is gzip at level 9 with no name and time 0 (rawio.compress_logs). Repacking checks
that every rebuilt file has its original md5 before it changes anything, and changes the
directory in place: the archive first, then meta.json (the commit point, an atomic rename),
then the old files are removed (each only if its md5 is the recorded one), both files synced
to disk before the first removal; a repack cut short anywhere is finished by running it again.
:func:`check_repacked` checks a repacked trial the same way later: every content md5 must
match; a ``.gz`` whose bytes differ while its content matches is reported as such (another zlib
may deflate the same content differently): the measurement is intact.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import lzma
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from latency_divide.errors import LatencyDivideError
from latency_divide.fsio import json_text, write_json_atomic
from latency_divide.trial import rawio
from latency_divide.trial.layout import ARCHIVE, META, SETUP_JSON, SETUP_KEYS, tmp_dir_prefix

#: meta.json key of a repacked trial: what it was, file by file
REPACKED = "repacked"


class RepackError(LatencyDivideError):
    """A trial cannot be repacked, or a repacked trial does not give back its original files."""


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


#: How formats 1-3 wrote meta.json (fsio.write_json_atomic): indented (formats 1 and 2) or
#: compact (format 3), keys sorted, one newline at the end
META_STYLES = {"indent2": 2, "compact": None}


def _meta_bytes(meta: dict, style: str = "indent2") -> bytes:
    return json_text(meta, indent=META_STYLES[style]).encode()


def needs_repack(d: Path | str) -> bool:
    """A trial directory of formats 1-3 not repacked yet (or whose repack was cut short)."""
    d = Path(d)
    state = _state(d)
    return state in ("old", "cut") or (state == "repacked" and bool(_leftovers(d)))


def _originals(d: Path) -> dict[str, bytes]:
    files = {}
    for p in sorted(d.rglob("*")):
        if p.is_dir():
            raise RepackError(f"{d}: holds a subdirectory {p.name}; repack knows flat trials only")
        files[p.relative_to(d).as_posix()] = p.read_bytes()
    return files


def original_files(d: Path | str) -> dict[str, bytes]:
    """Every original file of a repacked trial, rebuilt from meta.json and the archive."""
    d = Path(d)
    meta = rawio.full_meta(d)
    record = meta.pop(REPACKED, None)
    if not isinstance(record, dict):
        raise RepackError(f"{d}: not a repacked trial (no {REPACKED!r} in {META})")
    meta.pop("archive", None)
    members = rawio.members(d)
    out = {}
    for name in record["files"]:
        if name == META:
            out[name] = _meta_bytes(meta, record.get("meta_json", "indent2"))
        elif name.endswith(".gz"):
            out[name] = rawio.gzip_bytes(members[name[:-3]])
        else:
            out[name] = members[name]
    return out


@dataclass
class RepackCheck:
    trial: Path
    problems: list[str] = field(default_factory=list)  # content lost or changed
    gzip_differs: list[str] = field(default_factory=list)  # same content, other deflate bytes


def check_repacked(d: Path | str) -> RepackCheck:
    """Rebuild a repacked trial's original files and compare them with what it recorded."""
    d = Path(d)
    res = RepackCheck(d)
    try:
        rebuilt = original_files(d)
        record = json.loads(rawio.read_text(d, META))[REPACKED]["files"]
        members = rawio.members(d)
    except (KeyError, ValueError, TypeError, AttributeError, RepackError,
            *rawio.UNREADABLE) as e:
        res.problems.append(f"cannot rebuild its files ({type(e).__name__}: {e})")
        return res
    for name, want in record.items():
        if name.endswith(".gz"):
            if _md5(members.get(name[:-3], b"")) != want["content_md5"]:
                res.problems.append(f"{name}: content md5 differs from the recorded "
                                    f"{want['content_md5']}")
            elif _md5(rebuilt[name]) != want["md5"]:
                res.gzip_differs.append(name)
        elif _md5(rebuilt[name]) != want["md5"]:
            res.problems.append(f"{name}: md5 {_md5(rebuilt[name])} differs from the recorded "
                                f"{want['md5']}")
    return res


def _state(d: Path) -> str:
    """"repacked" (meta.json committed), "cut" (an archive beside the old meta.json: a repack
    cut before its commit point), "old" (formats 1-3) or "format4"."""
    meta = json.loads((d / META).read_text())
    if REPACKED in meta:
        return "repacked"
    if meta.get("archive"):
        return "format4"
    return "cut" if (d / ARCHIVE).exists() else "old"


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def repack_trial(d: Path | str) -> list[str]:
    """Repack one trial directory in place (module docstring); return its archive members.
    Nothing changes unless every original file is rebuilt byte for byte."""
    d = Path(d)
    state = _state(d)
    if state == "repacked":
        return _finish(d)
    if state == "format4":
        raise RepackError(f"{d}: a format-4 trial already")
    if state == "cut":  # the originals are all there (removed only after the commit point)
        (d / ARCHIVE).unlink()
    originals = _originals(d)
    meta = json.loads(originals[META])
    style = next((st for st in META_STYLES if _meta_bytes(meta, st) == originals[META]), None)
    if style is None:
        raise RepackError(f"{d}/{META}: written neither indented nor compact with sorted keys: "
                          "it could not be rebuilt byte for byte, so it is left as it is")
    record = {}
    for name, data in originals.items():
        entry = {"md5": _md5(data), "size": len(data)}
        if name.endswith(".gz"):
            entry["content_md5"] = _md5(gzip.decompress(data))
        record[name] = entry
    # named like a trial's temporary directory, so `latency-divide clean` removes it if cut
    work = d.parent / f"{tmp_dir_prefix(_repetition(d), os.getpid())}repack"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        for name, data in originals.items():
            if name == META:
                continue
            plain = name[:-3] if name.endswith(".gz") else name
            (work / plain).write_bytes(gzip.decompress(data) if name.endswith(".gz") else data)
        write_json_atomic(work / SETUP_JSON, {k: meta.pop(k) for k in SETUP_KEYS if k in meta},
                          indent=None)
        meta["archive"] = {"name": ARCHIVE, "members": rawio.pack(work)}
        meta[REPACKED] = {"by": "latency-divide repack", "meta_json": style, "files": record}
        write_json_atomic(work / META, meta, indent=None)
        check = check_repacked(work)
        if check.problems or check.gzip_differs:
            raise RepackError(f"{d}: the repacked form does not give back the original files "
                              f"({'; '.join(check.problems + check.gzip_differs)}): left as it is")
        for f in (work / ARCHIVE, work / META):
            _fsync(f)  # on disk before any original file can be removed
        os.replace(work / ARCHIVE, d / ARCHIVE)
        os.replace(work / META, d / META)  # the commit point
        _fsync(d)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _finish(d)


def _repetition(d: Path) -> int:
    try:
        return int(d.name.removeprefix("rep"))
    except ValueError:
        return 0


def _leftovers(d: Path) -> list[str]:
    """Original files still beside a repacked trial's archive (a repack cut after its commit
    point)."""
    files = json.loads((d / META).read_text())[REPACKED]["files"]
    return [n for n in files if n != META and (d / n).exists()]


def _finish(d: Path) -> list[str]:
    """Remove the original files a repacked trial no longer needs: only a file whose md5 is the
    one recorded, and only once the archive gives every original file back."""
    meta = json.loads((d / META).read_text())
    check = check_repacked(d)
    if check.problems:
        raise RepackError(f"{d}: {'; '.join(check.problems)}")
    files = meta[REPACKED]["files"]
    for name in _leftovers(d):
        if _md5((d / name).read_bytes()) != files[name]["md5"]:
            raise RepackError(f"{d}/{name}: not the original file the trial recorded (md5 "
                              f"{files[name]['md5']}): left in place, remove it by hand")
        (d / name).unlink()
    return list(meta["archive"]["members"])


def repack_tree(raw_root: Path | str, *, dry_run: bool = False,
                log=print) -> tuple[list[Path], list[str]]:
    """Repack every trial of formats 1-3 under ``raw_root`` (and finish any cut repack);
    return the trials and the problems (a trial that cannot be repacked is left as it is,
    named, and the others go on)."""
    from latency_divide.trial.layout import trial_dirs_under

    todo = [d for d in trial_dirs_under(raw_root) if needs_repack(d)]
    problems = []
    for k, d in enumerate(todo, 1):
        if not dry_run:
            try:
                repack_trial(d)
            except RepackError as e:
                problems.append(str(e))
                log(f"left as it is: {e}")
        if k % 100 == 0 or k == len(todo):
            log(f"{'would repack' if dry_run else 'repacked'} {k} of {len(todo)}: {d}")
    return todo, problems


def compress_indexes(raw_root: Path | str, *, dry_run: bool = False) -> list[Path]:
    """Every plain-JSON pack index under ``raw_root`` (written until 2026-12-06) written again as
    packs write one now (trial.packs.index_bytes), losslessly: the compressed index, read back,
    must be the same JSON object before it takes its place (synced, renamed), and only then is
    the plain one removed; cut short anywhere, it is finished by running it again. The archives
    are untouched. Return the plain indexes (with ``dry_run``, those it would compress)."""
    from latency_divide.trial.packs import INDEX_SUFFIXES, PACKS_DIR, index_bytes

    plain = INDEX_SUFFIXES[1]
    todo = sorted(Path(raw_root).glob(f"def-*/{PACKS_DIR}/pack-[0-9][0-9][0-9][0-9]{plain}"))
    for old in [] if dry_run else todo:
        doc = json.loads(old.read_bytes())
        new = old.with_name(old.name.removesuffix(plain) + INDEX_SUFFIXES[0])
        tmp = new.with_name(f".{new.name}.tmp")
        try:
            tmp.write_bytes(index_bytes(doc))
            if json.loads(lzma.decompress(tmp.read_bytes())) != doc:
                raise RepackError(f"{old}: its compressed index does not read back the same")
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, new)
        finally:
            tmp.unlink(missing_ok=True)
        old.unlink()
    return todo
