"""Integrity of DVC-tracked raw data: check the files on disk against what DVC recorded
(`latency-divide verify`).

:func:`verify` loads the manifests of the outputs covering a path (ops.dvcstore) and checks
every file: missing, corrupted (md5 differs) or not tracked (on disk, not in the manifest).
:func:`trial_files` resolves trial directories to their DVC-tracked files for
`latency-divide trace` (:func:`format_dvc_trace`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from latency_divide.ops.dvcstore import (
    DEFAULT_PATH,
    LOCK_FILE,
    DataCheckError,
    TrackedOut,
    find_repo,
    load_manifest,
    md5_file,
    tracked_outs,
)
from latency_divide.trial.layout import META


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
    manifests: dict[str, tuple[list[str], dict[str, str]]] = {}  # md5 -> (sorted paths, md5s)
    res = []
    for tp in trial_paths:
        t = PurePosixPath(tp)
        out = next((o for o in outs if _under(t, PurePosixPath(o.path))), None)
        files: dict[str, str] = {}
        if out is not None:
            if out.md5 not in manifests:
                try:
                    entries = load_manifest(repo, out)[0]
                except DataCheckError:
                    entries = {}
                manifests[out.md5] = (sorted(entries), entries)
            names, md5s = manifests[out.md5]
            prefix = t.relative_to(PurePosixPath(out.path)).as_posix()
            if prefix == ".":
                files = dict(md5s)
            else:
                # the entries below the trial: one contiguous run of the sorted paths
                lo = bisect.bisect_left(names, prefix + "/")
                hi = bisect.bisect_left(names, prefix + "0")  # "0" sorts right after "/"
                files = {n[len(prefix) + 1:]: md5s[n] for n in names[lo:hi]}
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
        meta = r.files.get(META)
        tail = f"{META} md5 {meta}" if meta else "not in the DVC manifest"
        out_lines.append(f"  {r.path}  ({len(r.files)} DVC-tracked files; {tail})")
        if files:
            for name, md5 in r.files.items():
                out_lines.append(f"      {name:<16} md5 {md5}")
    return out_lines
