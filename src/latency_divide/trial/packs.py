"""Packs: a definition's published trials in one solid archive (format 5's published form).

A trial of format 4 is two files (meta.json, logs.tar.xz). In a DVC remote, and to `dvc pull`,
each file costs about 2 ms however small, so published data grew in files with every trial
(bench/bench_reanalysis.py). A pack holds many trials of one definition:

    results/raw/<definition id>/packs/pack-0001.tar.xz   the trials' files
    results/raw/<definition id>/packs/pack-0001.json.xz  its index

The archive is a deterministic tar (members sorted, time 0, owner 0, mode 0644) of every
trial's files as readers see them: ``<household>/<direction>/<variant>/rep<r>/meta.json`` with
the bytes of the trial's meta.json, and beside it each member of the trial's logs.tar.xz, its
bytes unchanged; the tar is compressed once with xz (:data:`XZ_FILTERS`), so the logs of many
trials share one dictionary (bench/bench_packs.py: 6.4 KB a trial against 11.6). The index
names the archive's sha256 and size and, per trial, every member's size and sha256 (a trial in a
pack is checked, traced and read member by member, as a loose one is file by file) and the md5
of the two files it was packed from (``sources``). An index is compact JSON compressed with xz
(:func:`index_bytes`); one written until 2026-12-06 is plain JSON, ``pack-0001.json``, read the
same (`latency-divide repack --indexes` compresses it, losslessly).

A pack is written once and never changed: trial.packbuild.build writes the archive and the index under
temporary names, reads the archive back and compares every member with the trial's own files,
and only then renames them (index last: a pack without its index is not a pack). The next pack
of a definition takes the next number.

A trial key is in one pack, unless a later pack supersedes it: a trial measured again (the same
definition and key, e.g. by a newer instrument) goes into a later pack whose index says so, per
key, in ``supersedes``::

    "supersedes": {"<key>": {"archive": "pack-0001.tar.xz",
                             "meta_sha256": "<sha256 of the old trial's meta.json>",
                             "reason": "<why it was measured again>"}}

The record must name the pack that held the key until then and its meta.json's sha256 (as that
pack's index records it); otherwise the key's second appearance is an error, as it always was.
Readers (:func:`trials_in`, :func:`find`, :func:`every_trial`, :func:`split`) then get the newest
measurement; the older one stays in its pack, unchanged, and :func:`superseded_in` lists it
(``Packed.superseded`` per trial). An index without ``supersedes`` reads as before.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import lzma
import os
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

from latency_divide.errors import LatencyDivideError
from latency_divide.trial.layout import ARCHIVE, META

PACKS_DIR = "packs"
PACK_RE = re.compile(r"\Apack-(?P<n>\d{4})\.tar\.xz\Z")
INDEX_RE = re.compile(r"\A(?P<stem>pack-\d{4})\.json(?:\.xz)?\Z")
INDEX_FORMAT = 1
#: An index's file: compressed (written), or plain JSON (written until 2026-12-06, read). The
#: per-member sha256s are hex: compressed, the 116 published indexes took 4.7 MB, not 17.0
INDEX_SUFFIXES = (".json.xz", ".json")

#: xz settings of a pack: preset 9 with the dictionary at its 64 MiB, no literal-context bits
#: (text); one pack of 576 population trials (53 MB of logs) compresses in about a minute
XZ_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9, "lc": 0, "lp": 0, "pb": 0}]


class PackError(LatencyDivideError):
    """A pack that cannot be written, or that is not what its index says."""


@dataclass(frozen=True)
class Packed:
    """Where a trial of a pack is: the archive and the trial's key in it."""

    archive: Path
    key: str  # "<household>/<direction>/<variant>/rep<r>"
    members: dict  # member name -> [size, sha256] (the index's record)
    #: the older measurements of this key that later packs superseded, oldest first
    superseded: tuple["Superseded", ...] = ()


@dataclass(frozen=True)
class Superseded:
    """An older measurement of a key, still in its pack, that a later pack replaced for
    readers: ``old`` the trial in its pack (``files_of(old)`` reads it), ``by`` the archive
    that superseded it, ``reason`` as that archive's index records it."""

    old: Packed
    by: Path
    reason: str

    @property
    def key(self) -> str:
        return self.old.key


def trial_key(trial_dir: Path | str) -> str:
    """A trial's key in its definition's packs: the last four parts of its path."""
    return "/".join(Path(trial_dir).parts[-4:])


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def index_path(archive: Path) -> Path:
    """The index of ``archive``: its file present (compressed, else plain), else the name a new
    index takes."""
    stem = archive.name.removesuffix(".tar.xz")
    paths = [archive.with_name(stem + s) for s in INDEX_SUFFIXES]
    return next((p for p in paths if p.is_file()), paths[0])


def index_bytes(index: dict) -> bytes:
    """An index as written: compact JSON, keys sorted, xz-compressed."""
    text = json.dumps(index, sort_keys=True, separators=(",", ":")) + "\n"
    return lzma.compress(text.encode(), format=lzma.FORMAT_XZ, preset=9)


def two_files(trial_dir: Path | str) -> bool:
    """True for a loose trial of exactly meta.json and logs.tar.xz (format 4, or repacked)."""
    d = Path(trial_dir)
    return sorted(f.name for f in d.iterdir()) == sorted((ARCHIVE, META))


def archives(def_dir: Path | str) -> list[Path]:
    """The packs of a definition directory, by number: the archive of every index (its trials
    are packed, and complete, even when the archive itself is missing: the checks name it,
    and the workflow never measures them anew). An archive without its index is no pack
    (:func:`orphans`)."""
    p = Path(def_dir) / PACKS_DIR
    if not p.is_dir():
        return []
    return sorted({p / f"{m['stem']}.tar.xz" for m in map(INDEX_RE.match, os.listdir(p)) if m})


def orphans(def_dir: Path | str) -> list[Path]:
    """Archives of a definition directory without their index (a pack cut short between its
    two renames, or an index deleted): their trials cannot be known."""
    p = Path(def_dir) / PACKS_DIR
    if not p.is_dir():
        return []
    return sorted(p / n for n in os.listdir(p) if PACK_RE.match(n)
                  and not index_path(p / n).is_file())


def read_index(archive: Path) -> dict:
    path = index_path(archive)
    try:
        data = path.read_bytes()
        idx = json.loads(lzma.decompress(data) if path.name.endswith(".xz") else data)
    except (OSError, ValueError, lzma.LZMAError) as e:
        raise PackError(f"{path}: not a readable index ({e})") from e
    if not isinstance(idx, dict) or idx.get("format") != INDEX_FORMAT:
        raise PackError(f"{index_path(archive)}: index format {idx.get('format')!r} "
                        f"(this code reads {INDEX_FORMAT})" if isinstance(idx, dict) else
                        f"{index_path(archive)}: not a JSON object")
    return idx


def _stamp(paths) -> tuple:
    out = []
    for p in paths:
        st = os.stat(p)
        out.append((str(p), st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(out)


def trials_in(def_dir: Path | str) -> dict[str, Packed]:
    """Every packed trial of a definition directory by key."""
    arcs = archives(def_dir)
    return _trials_in(tuple(arcs), _stamp(index_path(a) for a in arcs))


@functools.lru_cache(maxsize=64)
def _trials_in(arcs: tuple, _stamp: tuple) -> dict[str, Packed]:
    out: dict[str, Packed] = {}
    for a in arcs:
        idx = read_index(a)
        sup = idx.get("supersedes", {})
        if not isinstance(sup, dict):
            raise PackError(f"{index_path(a)}: supersedes is not an object")
        extra = sorted(set(sup) - set(idx["trials"]))
        if extra:
            raise PackError(f"{index_path(a)}: supersedes {', '.join(extra)}, which it does "
                            f"not hold")
        for key, members in idx["trials"].items():
            before = out.get(key)
            if before is None and key in sup:
                raise PackError(f"{index_path(a)}: supersedes {key}, but no earlier pack "
                                f"holds that trial")
            if before is None:
                out[key] = Packed(a, key, members)
                continue
            why = _not_superseding(sup.get(key), before)
            if why:
                raise PackError(f"{a}: trial {key} is also in {before.archive} ({why})")
            gone = Superseded(Packed(before.archive, key, before.members), a,
                              sup[key]["reason"])
            out[key] = Packed(a, key, members, (*before.superseded, gone))
    return out


def _not_superseding(rec, before: Packed) -> str:
    """Why ``rec`` (a supersedes record of a later index) does not replace ``before``; "" when
    it does: it names ``before``'s archive and meta.json sha256 and gives a reason."""
    if rec is None:
        return "its index has no supersedes record for it"
    if not isinstance(rec, dict):
        return "its supersedes record is not an object"
    if rec.get("archive") != before.archive.name:
        return (f"its supersedes record names {rec.get('archive')!r}, not "
                f"{before.archive.name}, the pack that holds it")
    want = (before.members.get(META) or [None, None])[1]
    if rec.get("meta_sha256") != want:
        return (f"its supersedes record's meta_sha256 {str(rec.get('meta_sha256'))[:12]} is "
                f"not that of {before.archive.name}'s {META} ({str(want)[:12]})")
    if not isinstance(rec.get("reason"), str) or not rec["reason"].strip():
        return "its supersedes record gives no reason"
    return ""


def superseded_in(def_dir: Path | str) -> list[Superseded]:
    """Every older measurement of a definition's packs that a later pack superseded, by key
    (oldest first within a key): what a reader needs to trace a replaced trial."""
    return [s for _k, p in sorted(trials_in(def_dir).items()) for s in p.superseded]


def find(trial_dir: Path | str) -> Packed | None:
    """The pack that holds ``trial_dir`` (results/raw/<def>/<hh>/<dir>/<variant>/rep<r>)."""
    d = Path(trial_dir)
    if len(d.parts) < 5:
        return None
    return trials_in(d.parents[3]).get(trial_key(d))


def every_trial(raw_root: Path | str) -> list[Path]:
    """Every trial under a raw root, loose (its directory has meta.json) or packed (its
    definition's packs list it; no directory of its own), sorted by path: what a reader of
    published data enumerates (read each with trial.rawio)."""
    from latency_divide.trial.layout import trial_dirs_under

    root = Path(raw_root)
    packed = {d / key for d in root.glob("def-*") for key in trials_in(d)}
    return sorted(packed.union(trial_dirs_under(root)))


def read_archive(archive: Path) -> dict[str, dict[str, bytes]]:
    """Every trial's files of a pack, by key then member name (decompressed once, cached)."""
    st = archive.stat()
    return _read_archive(str(archive), (st.st_ino, st.st_mtime_ns, st.st_size))


def untar_xz(data: bytes) -> dict[str, bytes]:
    """The regular files of an xz-compressed tar by member name: one lzma call for the whole
    archive, then tar reads memory (several times cheaper than tarfile's streaming "r:xz")."""
    out = {}
    with tarfile.open(fileobj=io.BytesIO(lzma.decompress(data, format=lzma.FORMAT_XZ)),
                      mode="r:") as tar:
        for m in tar:
            if m.isfile():
                f = tar.extractfile(m)
                out[m.name] = f.read() if f else b""
    return out


@functools.lru_cache(maxsize=2)
def _read_archive(path: str, _stamp: tuple) -> dict[str, dict[str, bytes]]:
    out: dict[str, dict[str, bytes]] = {}
    for name, data in untar_xz(Path(path).read_bytes()).items():
        parts = name.split("/")
        out.setdefault("/".join(parts[:4]), {})["/".join(parts[4:])] = data
    return out


def files_of(p: Packed) -> dict[str, bytes]:
    """A packed trial's files by member name (a new dict: the archive's stays cached)."""
    return dict(read_archive(p.archive).get(p.key, {}))


def tar_bytes(files: dict[str, bytes]) -> bytes:
    """A deterministic tar of ``files`` (name -> bytes): members sorted, time 0, owner 0,
    mode 0644, no user or group name (the same files always give the same bytes)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(files[name]), 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(files[name]))
    return buf.getvalue()


def check_archive(archive: Path) -> list[str]:
    """:func:`check` of the archive's bytes only, once per archive and version of it."""
    try:
        st = archive.stat()
    except FileNotFoundError:
        return [f"{archive}: missing (its index {index_path(archive).name} lists its trials)"]
    return list(_check_archive(str(archive), (st.st_ino, st.st_mtime_ns, st.st_size)))


@functools.lru_cache(maxsize=256)
def _check_archive(path: str, _stamp: tuple) -> tuple[str, ...]:
    return tuple(check(Path(path), members=False))


def check(archive: Path, members: bool = True) -> list[str]:
    """What is wrong with a pack against its index (empty when intact): its bytes, and with
    ``members`` every trial's members (the index was checked against them when written)."""
    idx = read_index(archive)
    try:
        data = archive.read_bytes()
    except OSError as e:
        return [f"{archive}: unreadable ({e})"]
    rec = idx.get("archive", {})
    if len(data) != rec.get("size") or sha256(data) != rec.get("sha256"):
        return [f"{archive}: its sha256 or size is not the one its index records"]
    if not members:
        return []
    try:
        got = read_archive(archive)
    except (lzma.LZMAError, tarfile.ReadError, EOFError, OSError) as e:
        return [f"{archive}: not a readable pack ({e})"]
    found = []
    for key in sorted(set(idx["trials"]) | set(got)):
        want, have = idx["trials"].get(key), got.get(key)
        if want is None or have is None:
            found.append(f"{archive}: trial {key} is {'not in the index' if want is None else 'missing'}")
            continue
        have_rec = {n: [len(b), sha256(b)] for n, b in have.items()}
        for name in sorted(set(want) | set(have_rec)):
            if want.get(name) != have_rec.get(name):
                found.append(f"{archive}: {key}/{name} is not what the index records")
    return found


def split(metas, base: Path = Path(".")) -> tuple[list[str], list[str]]:
    """The trials of ``metas`` (meta.json paths) as the workflow sees them: (the meta.json of
    every trial not in a pack, loose or still to be measured, in order; the files of the packs
    that hold the others, each once: archive, index and parsed cache where present).

    A trial both loose and in a pack is taken as loose (publishing packs loose trials and then
    removes them; in between, the pack is not yet read; a trial measured again stays loose
    until `publish --supersede` packs it). A key that a later pack supersedes is read from
    that pack: the older pack's files are inputs only for its other trials. Snakemake calls
    this for every companion while it parses the workflow (10,000 trials and more): paths are
    handled as strings, and each definition's packs and each pack's files are looked up once."""
    loose: list[str] = []
    pack_files: dict[str, None] = {}
    metas = [str(m) for m in metas]
    # <def>/<household>/<direction>/<variant>/rep<r>/meta.json: the definition directory and
    # the trial's key in its packs (trial_key)
    split_at = [m.rsplit("/", 5) for m in metas]
    def_dirs = sorted({s[0] for s in split_at if len(s) == 6})
    bad = [a for d in def_dirs for a in orphans(base / d)]
    if bad:
        raise PackError(f"{', '.join(map(str, bad))}: an archive without its index (pack-NNNN"
                        f".json.xz): published, `dvc checkout --force` or `dvc pull --force` brings "
                        f"the index back; a pack cut short while written, remove the archive and "
                        f"publish again")
    packed_in: dict[str, dict[str, Packed]] = {}
    archive_seen: set[Path] = set()
    b = str(base)
    for m, parts in zip(metas, split_at):
        if len(parts) != 6 or os.path.exists(os.path.join(b, m)):
            loose.append(m)
            continue
        if parts[0] not in packed_in:
            packed_in[parts[0]] = trials_in(base / parts[0])
        p = packed_in[parts[0]].get("/".join(parts[1:5]))
        if p is None:
            loose.append(m)
            continue
        if p.archive in archive_seen:
            continue
        archive_seen.add(p.archive)
        for f in (p.archive, index_path(p.archive), *_cache_files(p.archive)):
            if f.exists():
                pack_files.setdefault(str(f.relative_to(base) if base != Path(".") else f))
    return loose, list(pack_files)


def _cache_files(archive: Path) -> list[Path]:
    stem = archive.name.removesuffix(".tar.xz")
    return [archive.with_name(f"{stem}.{part}") for part in
            ("parsed.json", "trials.parquet", "ping.parquet", "queue.parquet",
             "throughput.parquet")]
