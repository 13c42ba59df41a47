"""Packing published trials (trial.packs) and writing each pack's parsed cache
(analysis.parsedcache): what `latency-divide publish` does first (docs/data.md "Packs")."""

from __future__ import annotations

from pathlib import Path

from latency_divide.analysis import parsedcache
from latency_divide.analysis.tables import _parse


def build_cache(archive: Path) -> int:
    """Parse every trial that readers get from ``archive`` (from the pack, as the tables job
    would) and write its cache; return the number of trials. A trial a later pack supersedes,
    or whose new measurement waits loose to supersede it, is read from elsewhere: it is left
    out (the tables never look it up in this pack's cache)."""
    from latency_divide.trial import rawio
    from latency_divide.trial.packs import read_index

    def_dir = archive.parents[1]
    keys = [k for k in sorted(read_index(archive)["trials"])
            if getattr(rawio.packed(def_dir / k), "archive", None) == archive]
    parsedcache.write(archive, {k: _parse(def_dir / k) for k in keys})
    return len(keys)


def _loose(def_dir: Path) -> list[Path]:
    """A definition's loose trials of two files (older forms stay loose until `repack`)."""
    from latency_divide.trial import packs
    from latency_divide.trial.layout import META

    return [d for d in sorted(p.parent for p in Path(def_dir).glob(f"*/*/*/rep*/{META}"))
            if packs.two_files(d)]


def superseding(raw_root: Path) -> list[tuple[Path, Path]]:
    """Every loose trial of two files under ``raw_root`` whose key a pack of its definition
    already holds (a trial measured again), with that pack's archive: `publish` packs them
    only with ``--supersede REASON``."""
    from latency_divide.trial import packs

    out = []
    for def_dir in sorted(Path(raw_root).glob("def-*")):
        packed = packs.trials_in(def_dir)
        out += [(d, packed[packs.trial_key(d)].archive) for d in _loose(def_dir)
                if packs.trial_key(d) in packed]
    return out


def check_supersede(raw_root: Path, reason: str | None, pack: bool = True
                    ) -> list[tuple[Path, Path]]:
    """The loose trials that would supersede packed ones (:func:`superseding`), if publishing
    may pack them: only with a ``reason`` (`publish --supersede REASON`) and when packing
    (``pack``). Otherwise a PackError naming them and the option; so too a reason given when
    no loose trial supersedes anything (an option that would do nothing is a mistake)."""
    from latency_divide.trial.packs import PackError

    found = superseding(raw_root)
    listed = "".join(f"\n  {d} (published in {arc})" for d, arc in found)
    if found and not pack:
        raise PackError(f"{len(found)} loose trial(s) are already packed: a new measurement "
                        f"replaces a published one only in a new pack that supersedes it "
                        f"(`latency-divide publish --supersede REASON`, without --no-pack):"
                        f"{listed}")
    if found and reason is None:
        raise PackError(f"{len(found)} loose trial(s) are already packed; to publish these "
                        f"measurements in place of the published ones (which stay in their "
                        f"packs, traceable), run `latency-divide publish --supersede REASON`; "
                        f"otherwise remove them:{listed}")
    if reason is not None and not reason.strip():
        raise PackError("--supersede needs a reason (it is recorded in the new pack's index)")
    if reason is not None and not found:
        raise PackError(f"--supersede: no loose trial under {raw_root} is already packed; "
                        f"nothing to supersede")
    return found


def pack_definition(def_dir: Path, supersede: str | None = None) -> Path | None:
    """Pack a definition's loose trials of two files (trial.packbuild.build; older forms stay
    loose until `latency-divide repack`), check the pack member by member,
    remove the loose trials, then write the pack's parsed cache (:func:`build_cache`, from
    the pack); the new archive, or None when there was nothing to pack. A loose trial whose
    key is already packed is refused unless ``supersede`` gives the reason: then the new pack
    supersedes the packed trial (trial.packs)."""
    import shutil

    from latency_divide.trial import packbuild, packs

    loose = _loose(def_dir)
    if not loose:
        return None
    archive = packbuild.build(def_dir, loose, supersede=supersede)
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
