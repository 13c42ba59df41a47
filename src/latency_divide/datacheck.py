"""Integrity of DVC-tracked raw data: check the files on disk against what DVC recorded.

DVC records a tracked directory (``results/raw``, an out of stage ``trials`` in dvc.yaml) in
dvc.lock as one hash ``<md5>.dir``: the md5 of a JSON manifest that lists every file of the
directory with its own md5 (``[{"md5": ..., "relpath": ...}, ...]``). The manifest itself is
stored in the DVC cache and in every remote under ``files/md5/<2 hex>/<30 hex>.dir``; the
published remote ``dvc-remote/`` is committed to git, so a fresh clone always has it.

``verify`` reads dvc.lock (and ``*.dvc`` files), loads the manifest (local cache first, then
the local remotes of .dvc/config), checks the manifest's own md5 against the lock, and then
every file: missing, corrupted (md5 differs) or not tracked (on disk, not in the manifest).
``trial_files`` resolves trial directories to their DVC-tracked files for
``latency-divide trace``.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import yaml

from .errors import LatencyDivideError
from .provenance import hash_file

LOCK_FILE = "dvc.lock"
DEFAULT_PATH = "results/raw"
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
_NO_DVC_FILES_BELOW = {"results/raw", "results/tables", "results/figures", "results/households",
                       "results/links", "results/provision"}


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


@dataclass
class Finding:
    kind: str  # missing | corrupted | untracked
    path: str  # relative to the repository root (POSIX)
    detail: str

    def __str__(self) -> str:
        return f"{self.kind.upper():<9} {self.path}: {self.detail}"


@dataclass
class VerifyReport:
    path: str
    outs: list[tuple[TrackedOut, Path]] = field(default_factory=list)  # (out, manifest file)
    checked: int = 0
    findings: list[Finding] = field(default_factory=list)

    def of_kind(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]

    @property
    def ok(self) -> bool:
        """No tracked file is missing or corrupted (untracked files are reported, not failed)."""
        return not (self.of_kind("missing") or self.of_kind("corrupted"))


def _relative(repo: Path, path: Path | str) -> PurePosixPath:
    p = Path(path)
    p = p if p.is_absolute() else Path.cwd() / p
    try:
        return PurePosixPath(p.resolve().relative_to(repo.resolve()).as_posix())
    except ValueError:
        raise DataCheckError(f"{path} is outside the DVC repository {repo}") from None


def _under(child: PurePosixPath, parent: PurePosixPath) -> bool:
    return parent == PurePosixPath(".") or child == parent or parent in child.parents


def _ignore_spec(repo: Path):
    import pathspec

    f = repo / ".dvcignore"
    lines = f.read_text().splitlines() if f.is_file() else []
    return pathspec.GitIgnoreSpec.from_lines(lines)


def verify(path: Path | str = DEFAULT_PATH, repo: Path | str | None = None) -> VerifyReport:
    """Check the files under ``path`` (a tracked directory, a part of one such as a trial
    directory, or a directory holding tracked outputs) against dvc.lock's manifests."""
    repo = find_repo(path if Path(path).exists() else ".") if repo is None else Path(repo)
    target = _relative(repo, path)
    outs = [o for o in tracked_outs(repo)
            if _under(target, PurePosixPath(o.path)) or _under(PurePosixPath(o.path), target)]
    if not outs:
        raise DataCheckError(f"{target}: not tracked by DVC (no out in {repo / LOCK_FILE} or a "
                             ".dvc file covers it): `dvc commit` or `dvc add` it first")
    rep = VerifyReport(path=target.as_posix())
    spec = _ignore_spec(repo)
    for out in outs:
        base = PurePosixPath(out.path)
        if not out.is_dir:
            files = {"": out.md5}
            manifest_at = repo / LOCK_FILE
        else:
            files, manifest_at = load_manifest(repo, out)
        rep.outs.append((out, manifest_at))
        expected: set[str] = set()
        for rel, md5 in sorted(files.items()):
            full = base / rel if rel else base
            if not _under(full, target):
                continue
            expected.add(full.as_posix())
            rep.checked += 1
            disk = repo / full
            if not disk.is_file():
                rep.findings.append(Finding("missing", full.as_posix(),
                                            f"not on disk (expected md5 {md5}, {out.source})"))
                continue
            got = md5_file(disk)
            if got != md5:
                rep.findings.append(Finding("corrupted", full.as_posix(),
                                            f"md5 {got} differs from {md5} ({out.source})"))
        # files on disk that the manifest does not list (new trials not committed yet)
        root = repo / (target if _under(target, base) else base)
        if root.is_dir():
            for f in sorted(root.rglob("*")):
                rel = PurePosixPath(f.relative_to(repo).as_posix())
                if not f.is_file() or rel.as_posix() in expected:
                    continue
                if spec.match_file(rel.as_posix()):
                    continue
                rep.findings.append(Finding("untracked", rel.as_posix(),
                                            f"not in {out.source} (`dvc commit` records it)"))
    return rep


def format_report(rep: VerifyReport) -> str:
    lines = []
    for out, at in rep.outs:
        n = f", {out.nfiles} files" if out.nfiles is not None else ""
        lines.append(f"tracked:    {out.path} ({out.source}, md5 {out.md5}{n}; manifest {at})")
    lines.extend(f"  {f}" for f in rep.findings)
    miss, bad, new = (len(rep.of_kind(k)) for k in ("missing", "corrupted", "untracked"))
    status = "OK" if rep.ok else "FAILED"
    lines.append(f"verified:   {status}: {rep.checked} tracked files under {rep.path}, "
                 f"{rep.checked - miss - bad} intact, {miss} missing, {bad} corrupted"
                 + (f"; {new} not tracked" if new else ""))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# trace: trial directories -> DVC-tracked files


@dataclass
class TrialFiles:
    """The DVC record of one trial directory: the out covering it and each file's md5."""

    path: str
    out: TrackedOut | None
    files: dict[str, str]  # file name (relative to the trial directory) -> md5 in the manifest


def trial_files(trial_paths: list[str], repo: Path | str) -> list[TrialFiles]:
    """For each trial directory (relative to ``repo``), the DVC-tracked output containing it
    and the md5 of each of its files as recorded in the output's manifest (empty if no
    output covers it or the manifest is not available)."""
    repo = Path(repo)
    outs = [o for o in tracked_outs(repo) if o.is_dir]
    manifests: dict[str, dict[str, str]] = {}
    res = []
    for tp in trial_paths:
        t = PurePosixPath(tp)
        out = next((o for o in outs if _under(t, PurePosixPath(o.path))), None)
        files: dict[str, str] = {}
        if out is not None:
            if out.md5 not in manifests:
                try:
                    manifests[out.md5] = load_manifest(repo, out)[0]
                except DataCheckError:
                    manifests[out.md5] = {}
            prefix = t.relative_to(PurePosixPath(out.path)).as_posix()
            for rel, md5 in manifests[out.md5].items():
                r = PurePosixPath(rel)
                if prefix == "." or PurePosixPath(prefix) in r.parents:
                    files[r.relative_to(prefix).as_posix() if prefix != "." else rel] = md5
        res.append(TrialFiles(path=tp, out=out, files=dict(sorted(files.items()))))
    return res


def format_dvc_trace(record: dict, root: Path | str = ".", files: bool = False) -> list[str]:
    """Lines for ``latency-divide trace``: the DVC out and md5 of each trial of a provenance
    record; [] when ``root`` is not a DVC repository or nothing is tracked."""
    try:
        repo = find_repo(root)
        paths = []
        for t in record.get("trials") or []:
            p = Path(t["path"])
            p = p if p.is_absolute() else Path(root) / p
            paths.append(_relative(repo, p).as_posix())
        recs = trial_files(paths, repo)
    except DataCheckError:
        return []
    if not any(r.out for r in recs):
        return []
    out_lines = []
    for o in {r.out.path: r.out for r in recs if r.out}.values():
        out_lines.append(f"dvc:          {o.path}  {o.source}  md5 {o.md5}")
    for r in recs:
        if r.out is None:
            out_lines.append(f"  {r.path}  NOT TRACKED by DVC")
            continue
        meta = r.files.get("meta.json")
        tail = f"meta.json md5 {meta}" if meta else "not in the DVC manifest"
        out_lines.append(f"  {r.path}  ({len(r.files)} DVC-tracked files; {tail})")
        if files:
            for name, md5 in r.files.items():
                out_lines.append(f"      {name:<16} md5 {md5}")
    return out_lines


# ---------------------------------------------------------------------------------------------
# publish: results/raw -> the published remote (dvc-remote/, committed to git)

#: Largest published remote we accept (bytes): the remote is committed to git as plain files.
PUBLISH_LIMIT_BYTES = 60_000_000
PUBLISH_STAGE = "trials"


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else 0


def remote_dir(repo: Path | str, name: str | None = None) -> Path:
    """The directory of a local remote of .dvc/config (the default remote if ``name`` is None)."""
    dvcdir = Path(repo) / ".dvc"
    conf: dict[str, dict[str, str]] = {}
    for f in (dvcdir / "config", dvcdir / "config.local"):
        for section, opts in _read_config(f).items():
            conf.setdefault(section, {}).update(opts)
    name = name or conf.get("core", {}).get("remote")
    if not name:
        raise DataCheckError(f"{dvcdir / 'config'}: no default remote (core.remote) set")
    url = conf.get(f'remote "{name}"', {}).get("url")
    if url is None:
        raise DataCheckError(f"no remote {name!r} in {dvcdir / 'config'}")
    if "://" in url:
        raise DataCheckError(f"remote {name!r} is {url}, not a local directory: its size cannot "
                             "be checked here (publish to the local remote `published`)")
    return (dvcdir / url).resolve()


@dataclass
class PublishPlan:
    out: TrackedOut
    remote: Path
    remote_bytes_before: int
    new_objects: int
    new_bytes: int

    @property
    def remote_bytes_after(self) -> int:
        return self.remote_bytes_before + self.new_bytes


def plan_publish(repo: Path | str, remote: Path, path: str = DEFAULT_PATH) -> PublishPlan:
    """What pushing the tracked ``path`` adds to ``remote``: objects (files and the manifest)
    not there yet and their bytes, taken from the local cache."""
    repo = Path(repo)
    out = next((o for o in tracked_outs(repo) if o.path == path and o.is_dir), None)
    if out is None:
        raise DataCheckError(f"{path} is not a tracked directory in {repo / LOCK_FILE}")
    manifest, _ = load_manifest(repo, out)
    cache = object_dirs(repo)[0]
    new_objects, new_bytes = 0, 0
    for md5 in {out.md5, *manifest.values()}:
        if object_path(remote, md5).is_file():
            continue
        src = object_path(cache, md5)
        if not src.is_file():
            raise DataCheckError(f"object {md5} of {path} is in neither the cache nor {remote}: "
                                 "`dvc commit` first")
        new_objects += 1
        new_bytes += src.stat().st_size
    return PublishPlan(out, remote, dir_bytes(remote), new_objects, new_bytes)


def publish(repo: Path | str = ".", remote: str | None = None, path: str = DEFAULT_PATH,
            limit_bytes: int = PUBLISH_LIMIT_BYTES, commit: bool = True, runner=None,
            log=print) -> PublishPlan:
    """Record ``path`` in dvc.lock (``dvc commit`` of its stage), check that the remote stays
    within ``limit_bytes``, push, and check that the remote holds every object. Nothing is
    pushed if the limit would be exceeded."""
    from .runners import LocalRunner

    repo = find_repo(repo)
    runner = runner or LocalRunner()
    dvc = [_dvc_binary(), "--cd", str(repo)]
    rdir = remote_dir(repo, remote)
    if commit:
        stage = next((o.source.split()[-1] for o in tracked_outs(repo)
                      if o.path == path and o.source.startswith("dvc.lock")), PUBLISH_STAGE)
        log(f"dvc commit {stage}")
        runner.run([*dvc, "commit", "--force", stage], timeout=3600)
    plan = plan_publish(repo, rdir, path)
    log(f"{path}: {plan.out.nfiles} files, {plan.out.size} bytes (md5 {plan.out.md5}); remote "
        f"{rdir}: {plan.remote_bytes_before} bytes, +{plan.new_objects} objects "
        f"(+{plan.new_bytes} bytes) -> {plan.remote_bytes_after} bytes (limit {limit_bytes})")
    if plan.remote_bytes_after > limit_bytes:
        raise DataCheckError(
            f"publishing {path} would make {rdir} {plan.remote_bytes_after} bytes, over the "
            f"limit of {limit_bytes} bytes: nothing pushed")
    push = [*dvc, "push", "--remote", remote or _default_remote_name(repo)]
    log(" ".join(push[1:]))
    runner.run([*push, path], timeout=3600)
    after = plan_publish(repo, rdir, path)
    if after.new_objects:
        raise DataCheckError(f"after dvc push, {after.new_objects} objects of {path} are still "
                             f"missing in {rdir}")
    log(f"published: {rdir} holds {after.remote_bytes_before} bytes "
        f"(limit {limit_bytes}); commit dvc.lock and {rdir.name}/ to git")
    return after


def _dvc_binary() -> str:
    """DVC of this environment (next to the running Python, e.g. .venv/bin/dvc), else PATH's."""
    import shutil

    here = Path(sys.executable).with_name("dvc")
    found = str(here) if here.is_file() else shutil.which("dvc")
    if found is None:
        raise DataCheckError("dvc not found next to this Python nor on PATH: run scripts/setup.sh")
    return found


def _default_remote_name(repo: Path) -> str:
    return _read_config(repo / ".dvc" / "config").get("core", {}).get("remote", "published")
