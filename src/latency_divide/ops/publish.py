"""Publishing the raw data (`latency-divide publish`): record it in dvc.lock, push it to the
local remote committed to git, and keep that remote within its size limit.

:func:`plan_publish` counts what a push would add to the remote (objects not there yet, from
the local cache); :func:`publish` commits the stage, refuses, pushing nothing, when the remote
would exceed :data:`PUBLISH_LIMIT_BYTES`, pushes and checks that the remote holds every object,
then removes the remote's superseded manifests (:func:`stale_manifests`). The command first
checks the whole raw tree (analysis.rawtree.check_raw_tree).

Superseded manifests: every publish adds a ``.dir`` manifest listing every published file (116
bytes per file: 1.9 MB for 1,648 trials), and DVC never removes the previous one. Only the
manifests dvc.lock names are needed to pull this revision; an earlier revision's manifest is in
that revision's own committed ``dvc-remote/`` (git history), so removing it from the working
tree loses nothing. The same holds for data objects that no manifest of dvc.lock references any
more (:func:`unreferenced_objects`: the files of trials replaced by `latency-divide repack`)
and that git's HEAD holds: they are removed after the push, and an earlier revision pulls them
from its own committed remote. Objects a current manifest lists, and objects never committed to
git, are never removed.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from latency_divide.ops.dvcstore import (
    DEFAULT_PATH,
    DIR_SUFFIX,
    LOCK_FILE,
    DataCheckError,
    TrackedOut,
    _read_config,
    find_repo,
    load_manifest,
    object_dirs,
    object_path,
    tracked_outs,
)

#: Largest published remote we accept (bytes): the remote is committed to git as plain files
#: (issue 58's budget; 150 MB until the live runs, 2026-12-06).
PUBLISH_LIMIT_BYTES = 250_000_000


PUBLISH_STAGE = "trials"


#: Allocation unit the remote's files are counted in: one small file takes a whole block on
#: disk (ext4: 4 KiB), and the remote is tens of thousands of small files, so its size on disk
#: (what `du` reports, and what the 150 MB budget means) is far above the sum of their bytes.
BLOCK_BYTES = 4096


def disk_bytes(size: int) -> int:
    """What a file of ``size`` bytes takes on disk: whole blocks of BLOCK_BYTES."""
    return -(-size // BLOCK_BYTES) * BLOCK_BYTES


def dir_bytes(path: Path) -> int:
    """The remote's size on disk (every file in whole blocks, like `du`), not the sum of bytes."""
    if not path.is_dir():
        return 0
    return sum(disk_bytes(f.stat().st_size) for f in path.rglob("*") if f.is_file())


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


def stale_manifests(repo: Path | str, remote: Path) -> list[Path]:
    """The ``.dir`` manifests in ``remote`` that no tracked directory of dvc.lock (or a .dvc
    file) names: superseded by a later publish (module docstring)."""
    keep = {object_path(remote, o.md5) for o in tracked_outs(repo) if o.is_dir}
    found = sorted((remote / "files" / "md5").glob(f"*/*{DIR_SUFFIX}"))
    return [m for m in found if m not in keep]


def _committed(repo: Path, remote: Path) -> set[Path]:
    """The remote's files committed to git at HEAD (none when ``repo`` is not a git work tree
    or the remote is outside it)."""
    import subprocess

    try:
        rel = remote.resolve().relative_to(Path(repo).resolve()).as_posix()
        p = subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "-z", "--name-only", "HEAD",
                            "--", rel], capture_output=True, timeout=600)
    except (ValueError, OSError, subprocess.TimeoutExpired):
        return set()
    if p.returncode != 0:
        return set()
    return {(Path(repo) / n.decode()).resolve() for n in p.stdout.split(b"\0") if n}


def unreferenced_objects(repo: Path | str, remote: Path) -> list[Path]:
    """The data objects in ``remote`` that no tracked output of dvc.lock (or a .dvc file)
    references (not a manifest, not listed in one, not a tracked file) and that git's HEAD
    holds: an object never committed is kept, since no revision could pull it otherwise.
    Empty unless every tracked directory's manifest can be read (nothing is removed on a
    partial view) and something is tracked."""
    outs = tracked_outs(repo)
    if not outs:
        return []
    keep: set[str] = set()
    for o in outs:
        keep.add(o.md5)
        if o.is_dir:
            manifest, _ = load_manifest(repo, o)  # DataCheckError: stop, remove nothing
            keep.update(manifest.values())
    found = [p for p in (remote / "files" / "md5").glob("*/*")
             if p.is_file() and not p.name.endswith(DIR_SUFFIX)
             and p.parent.name + p.name not in keep]
    if not found:
        return []
    committed = _committed(Path(repo), remote)
    return sorted(p for p in found if p.resolve() in committed)


@dataclass
class PublishPlan:
    out: TrackedOut
    remote: Path
    remote_bytes_before: int
    new_objects: int
    new_bytes: int
    stale_bytes: int = 0  # superseded manifests, unreferenced objects: removed after the push

    @property
    def remote_bytes_after(self) -> int:
        return self.remote_bytes_before + self.new_bytes - self.stale_bytes


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
        new_bytes += disk_bytes(src.stat().st_size)
    stale = sum(disk_bytes(m.stat().st_size) for m in
                [*stale_manifests(repo, remote), *unreferenced_objects(repo, remote)])
    return PublishPlan(out, remote, dir_bytes(remote), new_objects, new_bytes, stale)


def publish(repo: Path | str = ".", remote: str | None = None, path: str = DEFAULT_PATH,
            limit_bytes: int = PUBLISH_LIMIT_BYTES, commit: bool = True, runner=None,
            log=print) -> PublishPlan:
    """Record ``path`` in dvc.lock (``dvc commit`` of its stage), check that the remote stays
    within ``limit_bytes``, push, and check that the remote holds every object. Nothing is
    pushed if the limit would be exceeded."""
    from latency_divide.testbed.runners import LocalRunner

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
    for m in stale_manifests(repo, rdir):
        log(f"removing superseded manifest {m.relative_to(rdir)} ({m.stat().st_size} bytes; "
            "in git history with the revision that published it)")
        m.unlink()
    gone = unreferenced_objects(repo, rdir)
    if gone:
        freed = sum(disk_bytes(g.stat().st_size) for g in gone)
        log(f"removing {len(gone)} objects no manifest of dvc.lock references ({freed} bytes on "
            "disk; in git history with the revisions that published them)")
        for g in gone:
            g.unlink()
    after = plan_publish(repo, rdir, path)
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
