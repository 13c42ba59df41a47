"""What DVC recorded, read without DVC: the tracked outputs, their manifests, the object stores.

DVC records a tracked directory (``results/raw``, an out of stage ``trials`` in dvc.yaml) in
dvc.lock as one hash ``<md5>.dir``: the md5 of a JSON manifest that lists every file of the
directory with its own md5 (``[{"md5": ..., "relpath": ...}, ...]``). The manifest itself is
stored in the DVC cache and in every remote under ``files/md5/<2 hex>/<30 hex>.dir``; the
published remote ``dvc-remote/`` is committed to git, so a fresh clone always has it.

:func:`tracked_outs` reads dvc.lock (and ``*.dvc`` files); :func:`object_dirs` lists where
objects may be (the local cache first, then the local remotes of .dvc/config);
:func:`load_manifest` loads a directory's manifest and checks its own md5 against the lock.
Their users: ops.verify, ops.publish and analysis.integrity.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import yaml

from latency_divide.errors import LatencyDivideError
from latency_divide.fsio import hash_file
from latency_divide.paths import FIGURES, RAW, RESULTS, TABLES

LOCK_FILE = "dvc.lock"


#: The tracked raw data (the out of stage ``trials``).
DEFAULT_PATH = RAW.as_posix()


DIR_SUFFIX = ".dir"


_MD5 = re.compile(r"^[0-9a-f]{32}$")


class DataCheckError(LatencyDivideError):
    """dvc.lock, a manifest or the repository cannot be used (not a per-file finding)."""


def md5_file(path: Path | str) -> str:
    """md5 of a file's content, as DVC records it."""
    return hash_file(path, "md5")


@dataclass(frozen=True)
class TrackedOut:
    """One DVC-tracked output: ``path`` relative to the repository root (POSIX)."""

    path: str
    md5: str  # "<32 hex>" for a file, "<32 hex>.dir" for a directory
    source: str  # "dvc.lock stage trials" or "foo.dvc"
    nfiles: int | None = None
    size: int | None = None

    @property
    def is_dir(self) -> bool:
        return self.md5.endswith(DIR_SUFFIX)


def find_repo(start: Path | str = ".") -> Path:
    """The DVC repository containing ``start`` (the nearest parent with a .dvc directory)."""
    p = Path(start).resolve()
    for cand in [p, *p.parents]:
        if (cand / ".dvc").is_dir():
            return cand
    raise DataCheckError(f"{start}: not inside a DVC repository (no .dvc directory above it)")


def _out_entries(doc, where: str) -> list[dict]:
    if doc is None:
        return []
    if not isinstance(doc, list):
        raise DataCheckError(f"{where}: 'outs' is not a list")
    return doc


def _tracked(entry, base: PurePosixPath, source: str, where: str) -> TrackedOut:
    if not isinstance(entry, dict) or "path" not in entry:
        raise DataCheckError(f"{where}: an out without 'path': {entry!r}")
    md5 = entry.get("md5")
    if not isinstance(md5, str) or not _MD5.match(md5.removesuffix(DIR_SUFFIX)):
        raise DataCheckError(f"{where}: out {entry['path']}: md5 {md5!r} is not an md5 hash "
                             "(32 hex digits, '.dir' for a directory)")
    path = (base / entry["path"]).as_posix()
    return TrackedOut(path=path, md5=md5, source=source, nfiles=entry.get("nfiles"),
                      size=entry.get("size"))


def _uncached_outs(repo: Path) -> set[str]:
    """Paths of dvc.yaml's outs with ``cache: false`` (dvc.lock does not say which they are)."""
    f = repo / "dvc.yaml"
    try:
        doc = yaml.safe_load(f.read_text()) if f.is_file() else None
    except yaml.YAMLError as e:
        raise DataCheckError(f"{f}: not valid YAML ({e})") from None
    paths = set()
    for stage in ((doc or {}).get("stages") or {}).values():
        for out in (stage or {}).get("outs") or []:
            if isinstance(out, dict):
                for path, opts in out.items():
                    if isinstance(opts, dict) and opts.get("cache") is False:
                        paths.add(path)
    return paths


#: Directories never searched for ``*.dvc`` files: DVC's and git's own, the committed remote,
#: environments and build trees, and DVC outputs (a .dvc file is never inside one).
_NO_DVC_FILES = {".dvc", ".git", "dvc-remote", ".venv", "target", ".snakemake", "node_modules",
                 "__pycache__"}


_NO_DVC_FILES_BELOW = {p.as_posix() for p in (RAW, TABLES, FIGURES, RESULTS / "households",
                                                RESULTS / "links", RESULTS / "provision")}


def _dvc_files(repo: Path) -> list[Path]:
    import os

    found = []
    for top, dirs, files in os.walk(repo):
        rel = Path(top).relative_to(repo).as_posix()
        dirs[:] = sorted(d for d in dirs if d not in _NO_DVC_FILES
                         and f"{rel}/{d}".removeprefix("./") not in _NO_DVC_FILES_BELOW)
        found.extend(Path(top) / f for f in files if f.endswith(".dvc"))
    return sorted(found)


def tracked_outs(repo: Path | str) -> list[TrackedOut]:
    """Every cached output recorded in the repository's dvc.lock and ``*.dvc`` files."""
    repo = Path(repo)
    outs: list[TrackedOut] = []
    lock = repo / LOCK_FILE
    if lock.is_file():
        try:
            doc = yaml.safe_load(lock.read_text()) or {}
        except yaml.YAMLError as e:
            raise DataCheckError(f"{lock}: not valid YAML ({e})") from None
        stages = doc.get("stages") if isinstance(doc, dict) else None
        if not isinstance(stages, dict):
            raise DataCheckError(f"{lock}: no 'stages' mapping (dvc.lock schema 2.0 expected)")
        uncached = _uncached_outs(repo)
        for name, stage in stages.items():
            for e in _out_entries((stage or {}).get("outs"), f"{lock} stage {name}"):
                if isinstance(e, dict) and ("md5" not in e or e.get("path") in uncached):
                    continue  # never committed, or `cache: false` (no manifest kept anywhere)
                outs.append(_tracked(e, PurePosixPath("."), f"dvc.lock stage {name}",
                                     f"{lock} stage {name}"))
    for dvcfile in _dvc_files(repo):
        rel = dvcfile.relative_to(repo)
        try:
            doc = yaml.safe_load(dvcfile.read_text()) or {}
        except yaml.YAMLError as e:
            raise DataCheckError(f"{dvcfile}: not valid YAML ({e})") from None
        for e in _out_entries(doc.get("outs") if isinstance(doc, dict) else None, str(dvcfile)):
            outs.append(_tracked(e, PurePosixPath(rel.parent.as_posix()), rel.as_posix(),
                                 str(dvcfile)))
    return outs


def _read_config(path: Path) -> dict[str, dict[str, str]]:
    """DVC's config file (configobj syntax: indented ``key = value`` under ``[section]`` or
    ``['remote "name"']``) as section -> options."""
    conf: dict[str, dict[str, str]] = {}
    if not path.is_file():
        return conf
    section = None
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip().strip("'").strip()
            conf.setdefault(section, {})
        elif "=" in line and section is not None:
            key, value = line.split("=", 1)
            conf[section][key.strip()] = value.strip().strip("'\"")
    return conf


def object_dirs(repo: Path | str) -> list[Path]:
    """Where DVC objects may be found, in order: the local cache, then every remote of
    .dvc/config (and .dvc/config.local) that is a local directory."""
    repo = Path(repo)
    dvcdir = repo / ".dvc"
    conf: dict[str, dict[str, str]] = {}
    for f in (dvcdir / "config", dvcdir / "config.local"):
        for section, opts in _read_config(f).items():
            conf.setdefault(section, {}).update(opts)
    cache = dvcdir / "cache"
    if "dir" in conf.get("cache", {}):
        cache = (dvcdir / conf["cache"]["dir"]).resolve()
    remotes: list[tuple[str, Path]] = []
    for section, opts in conf.items():
        m = re.match(r'^remote\s+"(.+)"$', section)
        if m and "url" in opts and "://" not in opts["url"]:  # s3://, ssh://, http(s)://: not read
            remotes.append((m.group(1), (dvcdir / opts["url"]).resolve()))
    default = conf.get("core", {}).get("remote")
    remotes.sort(key=lambda r: r[0] != default)  # the default remote (what `dvc pull` uses) first
    return [cache, *(p for _, p in remotes)]


def object_path(base: Path, md5: str) -> Path:
    h = md5.removesuffix(DIR_SUFFIX)
    return base / "files" / "md5" / h[:2] / (h[2:] + (DIR_SUFFIX if md5.endswith(DIR_SUFFIX) else ""))


def load_manifest(repo: Path | str, out: TrackedOut) -> tuple[dict[str, str], Path]:
    """relpath -> md5 of every file of a tracked directory, and where the manifest was read.
    The manifest's own md5 must be the one recorded (else it is not used)."""
    if not out.is_dir:
        raise DataCheckError(f"{out.path} is a file out, it has no manifest")
    bases = object_dirs(repo)
    bad: list[str] = []
    for base in bases:
        p = object_path(base, out.md5)
        if not p.is_file():
            continue
        data = p.read_bytes()
        got = hashlib.md5(data).hexdigest()
        if got != out.md5.removesuffix(DIR_SUFFIX):
            bad.append(f"{p} (md5 {got})")
            continue
        try:
            entries = json.loads(data)
            return {e["relpath"]: e["md5"] for e in entries}, p
        except (ValueError, TypeError, KeyError):
            bad.append(f"{p} (not a DVC manifest)")
    where = ", ".join(str(b) for b in bases)
    extra = f"; corrupted copies: {'; '.join(bad)}" if bad else ""
    raise DataCheckError(
        f"manifest {out.md5} of {out.path} ({out.source}) not found in {where}{extra}: "
        "run `dvc fetch` (or `dvc pull`) first")
