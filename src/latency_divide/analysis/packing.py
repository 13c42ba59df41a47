"""Packing published trials (trial.packs) and writing each pack's parsed cache
(analysis.parsedcache): what `latency-divide publish` does first (docs/data.md "Packs")."""

from __future__ import annotations

from pathlib import Path

from latency_divide.analysis import parsedcache
from latency_divide.analysis.tables import _parse


def build_cache(archive: Path) -> int:
    """Parse every trial of ``archive`` (from the pack, as the tables job would) and write its
    cache; return the number of trials."""
    from latency_divide.trial.packs import read_index

    def_dir = archive.parents[1]
    keys = sorted(read_index(archive)["trials"])
    parsedcache.write(archive, {k: _parse(def_dir / k) for k in keys})
    return len(keys)


def pack_definition(def_dir: Path) -> Path | None:
    """Pack a definition's loose trials of two files (trial.packs.build; older forms stay
    loose until `latency-divide repack`), check the pack member by member,
    remove the loose trials, then write the pack's parsed cache (:func:`build_cache`, from
    the pack); the new archive, or None when there was nothing to pack."""
    import shutil

    from latency_divide.trial import packs
    from latency_divide.trial.layout import META

    loose = [d for d in sorted(p.parent for p in Path(def_dir).glob(f"*/*/*/rep*/{META}"))
             if packs.two_files(d)]
    if not loose:
        return None
    archive = packs.build(def_dir, loose)
    problems = packs.check(archive)
    if problems:
        raise packs.PackError("; ".join(problems))
    for d in loose:  # the pack is complete and checked: the loose copies go
        shutil.rmtree(d)
    for parent in sorted({q for d in loose for q in list(d.parents)[:3]},
                         key=lambda q: -len(q.parts)):
        try:
            parent.rmdir()
        except OSError:
            pass
    build_cache(archive)
    return archive
