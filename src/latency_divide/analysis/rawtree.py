"""The whole raw tree before it is published (`latency-divide publish`): every trial, loose or
packed, as the analysis checks it (analysis.integrity), anything that is not part of a trial
or a pack, and every published trial: still there, or packed from the files dvc.lock pins."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from latency_divide.analysis.integrity import Finding, _pins, _rel, check_trials
from latency_divide.paths import RAW
from latency_divide.trial.layout import DEFINITION, META, TMP_PREFIX, is_id, trial_dirs_under


def check_raw_tree(raw_root: Path | str = RAW, repo: Path | str = ".",
                   keep_published: bool = True, rewritten=frozenset()) -> list[Finding]:
    """Findings for a whole raw tree, before it is published: every trial as in
    :func:`check_trials` (against dvc.lock only when ``keep_published``), anything that is not
    a complete trial of the layout (a directory without meta.json, a file out of place), and,
    when ``keep_published``, every pinned trial directory that is gone. ``rewritten``: the
    parsed-cache files this publish wrote again for this code (analysis.packing), which differ
    from their pins by design."""
    from latency_divide.trial import packs

    root = Path(raw_root)
    repo = Path(repo)
    loose = trial_dirs_under(root)
    packed = {d / key: p for d in sorted(root.glob("def-*")) for key, p in
              packs.trials_in(d).items()}
    found = check_trials(packs.every_trial(root), repo if keep_published else None)
    if rewritten:
        again = {Path(f).resolve() for f in rewritten}
        found = [f for f in found if not (f.what.startswith("modified: ")
                                          and (Path(f.trial) / f.file).resolve() in again)]
    known = {t.resolve() for t in loose}
    for p in sorted(root.rglob("*")):
        if p.name.startswith(TMP_PREFIX) or any(a.name.startswith(TMP_PREFIX) for a in p.parents):
            continue
        rel = p.relative_to(root)
        depth = len(rel.parts)
        if depth >= 2 and rel.parts[1] == packs.PACKS_DIR:
            if depth > 2 or not p.is_dir():
                ok = depth == 3 and _pack_file(p)
            else:
                ok = True
            if not ok:
                found.append(Finding(str(p.parent), p.name, "not a file of a pack (an archive "
                                     "with its index, or its parsed cache)"))
            continue
        inside = any(a.resolve() in known for a in p.parents)
        if inside or p.resolve() in known:
            continue
        if p.is_file() and not (depth == 2 and p.name == DEFINITION):
            found.append(Finding(str(p.parent), p.name, "not part of a trial directory of the "
                                 "layout <definition id>/<household>/<direction>/<variant>/rep<r>"))
        elif p.is_dir() and depth == 5:
            found.append(Finding(str(p), META, "missing: an incomplete trial directory"))
        elif p.is_dir() and depth == 1 and not is_id(p.name):
            found.append(Finding(str(p), "", "not a definition directory (def-<10 hex>): raw "
                                 "data of the format-1 layout? `latency-divide migrate` moves it"))
    if keep_published:
        for out, manifest, source, _ in _pins(repo):
            try:
                base = PurePosixPath(_rel(root, repo)).relative_to(out)
            except (TypeError, ValueError):
                continue
            gone = sorted({str(PurePosixPath(r).parent) for r in manifest
                           if not (repo / out / r).exists()
                           and PurePosixPath(r).is_relative_to(base)})
            for g in gone:
                t = repo / out / g
                p = packed.get(root / PurePosixPath(g).relative_to(base))
                if p is not None:  # packed since it was published: from the pinned files?
                    src = read_sources(p)
                    pinned = {PurePosixPath(r).name: m for r, m in manifest.items()
                              if str(PurePosixPath(r).parent) == g}
                    if src != pinned:
                        found.append(Finding(str(out / g), "", f"published ({source}), now in "
                                             f"{p.archive} but not from the files dvc.lock "
                                             f"pins"))
                    continue
                if not t.is_dir():
                    found.append(Finding(str(out / g), "", f"published ({source}) but gone from "
                                                          "the disk"))
    return found


def _pack_file(p: Path) -> bool:
    """A file of a packs directory that belongs there: an archive with its index, an index
    with its archive, or a parsed cache file of an archive."""
    from latency_divide.trial.packs import index_path

    m = re.match(r"\A(pack-\d{4})\.(tar\.xz|json|json\.xz|parsed\.json|"
                 r"(trials|ping|queue|throughput)\.parquet)\Z", p.name)
    return bool(p.is_file() and m and (p.parent / f"{m[1]}.tar.xz").is_file()
                and index_path(p.parent / f"{m[1]}.tar.xz").is_file())


def read_sources(packed) -> dict[str, str]:
    """The md5 of the files a packed trial was packed from (its pack's index)."""
    from latency_divide.trial.packs import read_index

    return read_index(packed.archive).get("sources", {}).get(packed.key, {})
