"""Reading and writing files of a raw trial directory.

Three forms, read alike: readers ask for a file by its plain name (``receiver.log``) and get its
text from wherever the trial's format keeps it.

* Format 4: every file but ``meta.json`` is packed into ``logs.tar.xz`` (layout.ARCHIVE), a
  deterministic archive (sorted members, time 0, owner 0, mode 0644, XZ_FILTERS), so the same
  logs always give the same bytes and DVC hashes stay stable. A trial is two files: in a DVC
  remote each file takes whole 4 KiB blocks, and ten small files took 40 KB a trial. `tar xJf`
  unpacks it.
* Formats 2 and 3: the large logs stored gzip-compressed as ``NAME.gz`` (`zcat` reads them).
* Format 1: plain files.
"""

from __future__ import annotations

import functools
import gzip
import io
import json
import lzma
import os
import tarfile
from pathlib import Path

from latency_divide.trial.layout import ARCHIVE, COMPRESSED_LOGS, META, SETUP_JSON

#: What reading a damaged trial file raises: OSError (a gzip file that is not one), EOFError
#: (a gzip log cut short), LZMAError and ReadError (a damaged archive), UnicodeDecodeError.
UNREADABLE = (OSError, EOFError, UnicodeDecodeError, lzma.LZMAError, tarfile.ReadError)

#: xz settings of the archive: the strongest preset (the logs are small, so its memory and time
#: do not matter) with no literal-context bits, which suits text; measured on 40 population
#: trials, 250 bytes smaller an archive than preset 9, and 15 % of archives in three 4 KiB blocks
#: instead of 35 %
XZ_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME,
               "lc": 0, "lp": 0, "pb": 0}]


def find(trial_dir: Path | str, name: str) -> Path | None:
    """The file ``name`` or ``name.gz`` beside meta.json in ``trial_dir``, or None (a member of
    the archive is not a file of its own: use :func:`exists`)."""
    d = Path(trial_dir)
    for cand in (d / name, d / f"{name}.gz"):
        if cand.is_file():
            return cand
    return None


def exists(trial_dir: Path | str, name: str) -> bool:
    """True if the trial has ``name`` in any form: plain, ``name.gz``, archive member, or (a
    packed trial) member of its pack: answered from the pack's index, without decompressing the
    archive (a scan of many trials across packs would otherwise read an archive per trial)."""
    if find(trial_dir, name) is not None:
        return True
    p = packed(trial_dir)
    if p is not None:
        return name in p.members
    return name in members(trial_dir)


def packed(trial_dir: Path | str):
    """The pack (trial.packs.Packed) that holds a trial with no directory of its own, or
    None."""
    from latency_divide.trial import packs

    d = Path(trial_dir)
    return None if (d / META).exists() else packs.find(d)


def members(trial_dir: Path | str) -> dict[str, bytes]:
    """The archive's members by name ({} without an archive); for a packed trial its members
    in the pack but meta.json. An archive or pack that cannot be read raises (OSError,
    EOFError, tarfile.ReadError or lzma.LZMAError)."""
    a = Path(trial_dir) / ARCHIVE
    try:
        st = a.stat()
    except FileNotFoundError:
        p = packed(trial_dir)
        if p is None:
            return {}
        from latency_divide.trial import packs

        return {k: v for k, v in packs.files_of(p).items() if k != META}
    return dict(_read_archive(str(a), (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)))


@functools.lru_cache(maxsize=4)
def _read_archive(path: str, _stamp: tuple) -> tuple[tuple[str, bytes], ...]:
    # keyed by inode, times and size too, so a replaced or rewritten archive (a rename, a copy
    # that keeps the mtime) is read again; a trial's readers ask
    # for several members in a row, and this decompresses the archive once for all of them
    from latency_divide.trial.packs import untar_xz

    return tuple(untar_xz(Path(path).read_bytes()).items())


def read_bytes(trial_dir: Path | str, name: str) -> bytes:
    """Bytes of ``name`` (plain, gzip or archive member, decompressed); FileNotFoundError naming
    the path if the trial has none. A gzip file or archive cut short is corruption: its error
    (EOFError, lzma.LZMAError, tarfile.ReadError) propagates."""
    p = find(trial_dir, name)
    if p is not None:
        if p.suffix != ".gz":
            return p.read_bytes()
        with gzip.open(p, "rb") as f:
            return f.read()
    inside = members(trial_dir)
    if name in inside:
        return inside[name]
    if name == META and (pk := packed(trial_dir)) is not None:
        from latency_divide.trial import packs

        return packs.files_of(pk)[META]
    raise FileNotFoundError(f"{Path(trial_dir) / name} (or .gz, or in {ARCHIVE}) is missing")


def read_text(trial_dir: Path | str, name: str) -> str:
    """Text of ``name`` in any form (:func:`read_bytes`), undecodable bytes replaced."""
    return read_bytes(trial_dir, name).decode(errors="replace")


def full_meta(trial_dir: Path | str) -> dict:
    """meta.json with, for format 4, the set-up records of the archive's setup.json merged
    back under their keys (layout.SETUP_KEYS): the same dict for every format."""
    meta = json.loads(read_bytes(trial_dir, META))
    if isinstance(meta, dict) and meta.get("archive") and exists(trial_dir, SETUP_JSON):
        meta.update(json.loads(read_bytes(trial_dir, SETUP_JSON)))
    return meta


def gzip_bytes(data: bytes) -> bytes:
    """``data`` gzip-compressed deterministically (level 9, no name, time 0): the same bytes
    always give the same file, so DVC hashes stay stable (formats 2-3's ``.gz`` logs)."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(data)
    return buf.getvalue()


def compress_logs(trial_dir: Path | str, names=COMPRESSED_LOGS) -> None:
    """Format 3: replace each plain log by ``name.gz`` (deterministic: no name or mtime in the
    header, so the same log always gives the same bytes and DVC hashes stay stable)."""
    d = Path(trial_dir)
    for name in names:
        src = d / name
        if not src.is_file():
            continue
        dst = d / f"{name}.gz"
        tmp = d / f".{name}.gz.tmp"
        tmp.write_bytes(gzip_bytes(src.read_bytes()))
        os.replace(tmp, dst)
        src.unlink()


def pack(trial_dir: Path | str) -> list[str]:
    """Format 4: move every file of ``trial_dir`` but meta.json (subdirectories' files too,
    by their relative path) into ``logs.tar.xz``; return the member names. The archive is
    written to a temporary name and renamed before any file is removed, so an interrupted pack
    leaves the files where they were."""
    d = Path(trial_dir)
    files = sorted(p for p in d.rglob("*") if p.is_file() and p.relative_to(d).as_posix()
                   not in (META, ARCHIVE) and not p.name.startswith(f".{ARCHIVE}"))
    names = [p.relative_to(d).as_posix() for p in files]
    from latency_divide.trial.packs import tar_bytes

    data = tar_bytes({name: p.read_bytes() for p, name in zip(files, names)})
    tmp = d / f".{ARCHIVE}.tmp"
    tmp.write_bytes(lzma.compress(data, format=lzma.FORMAT_XZ, filters=XZ_FILTERS))
    os.replace(tmp, d / ARCHIVE)
    for p in files:
        p.unlink()
    subdirs = {q for p in files for q in p.parents if q != d and d in q.parents}
    for sub in sorted(subdirs, key=lambda q: -len(q.parts)):
        try:
            sub.rmdir()
        except OSError:
            pass
    return names
