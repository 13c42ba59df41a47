"""Writing a pack (trial.packs): a definition's loose trials into its next pack, verified
before it is renamed into place. Kept apart from trial.packs, which every reader of published
data loads: this is only run by `latency-divide publish` (analysis.packing)."""

from __future__ import annotations

import hashlib
import lzma
import os
from pathlib import Path

from latency_divide.trial import packs
from latency_divide.trial.layout import ARCHIVE, META
from latency_divide.trial.packs import (
    INDEX_FORMAT,
    PACK_RE,
    PACKS_DIR,
    XZ_FILTERS,
    PackError,
    archives,
    index_bytes,
    index_path,
    sha256,
    tar_bytes,
    trial_key,
    trials_in,
    untar_xz,
)


def trial_files(trial_dir: Path | str) -> dict[str, bytes]:
    """A loose trial's files as a pack holds them: meta.json and the members of logs.tar.xz.
    Only the two-file form (format 4, or repacked) can be packed."""
    d = Path(trial_dir)
    other = sorted(f.name for f in d.iterdir() if f.name not in (META, ARCHIVE))
    if other or not (d / ARCHIVE).is_file() or not (d / META).is_file():
        raise PackError(f"{d}: not a trial of two files ({META}, {ARCHIVE})"
                        + (f"; it also has {', '.join(other)}" if other else "")
                        + " (`latency-divide repack` makes older trials so)")
    files = untar_xz((d / ARCHIVE).read_bytes())
    if META in files:
        raise PackError(f"{d}: its {ARCHIVE} has a member named {META}")
    files[META] = (d / META).read_bytes()
    return files


def build(def_dir: Path | str, trial_dirs: list[Path], supersede: str | None = None) -> Path:
    """Pack ``trial_dirs`` (loose trials of ``def_dir``) into the definition's next pack;
    return the archive. The loose trials are left in place (the caller removes them).

    A trial whose key is already packed is refused, unless ``supersede`` gives the reason it
    was measured again: then the new pack supersedes the packed one (module docstring)."""
    def_dir = Path(def_dir)
    if not trial_dirs:
        raise PackError(f"{def_dir}: no trial to pack")
    if supersede is not None and not supersede.strip():
        raise PackError("superseding a packed trial needs a reason")
    packed = trials_in(def_dir)
    trials: dict[str, dict[str, bytes]] = {}
    sources: dict[str, dict[str, str]] = {}
    supersedes: dict[str, dict[str, str]] = {}
    for d in trial_dirs:
        d = Path(d)
        if d.parents[3] != def_dir:
            raise PackError(f"{d}: not a trial of {def_dir}")
        key = trial_key(d)
        trials[key] = trial_files(d)
        if key in packed:
            old = packed[key]
            if supersede is None:
                raise PackError(f"{d}: already in {old.archive} (to replace it with this "
                                f"measurement, supersede it: `latency-divide publish "
                                f"--supersede REASON`)")
            if sha256(trials[key][META]) == old.members[META][1]:
                raise PackError(f"{d}: the same {META} as in {old.archive}: nothing to "
                                f"supersede")
            supersedes[key] = {"archive": old.archive.name, "meta_sha256": old.members[META][1],
                               "reason": supersede.strip()}
        sources[key] = {name: hashlib.md5((d / name).read_bytes()).hexdigest()
                        for name in (META, ARCHIVE)}
    arcs = archives(def_dir)
    n = int(PACK_RE.match(arcs[-1].name)["n"]) + 1 if arcs else 1
    out = def_dir / PACKS_DIR / f"pack-{n:04d}.tar.xz"
    if out.exists() or index_path(out).exists():
        raise PackError(f"{out}: exists without its index, or with it: a pack cut short? "
                        f"remove it (it was never complete) and pack again")
    flat = {f"{k}/{name}": b for k, v in trials.items() for name, b in v.items()}
    data = lzma.compress(tar_bytes(flat), format=lzma.FORMAT_XZ, filters=XZ_FILTERS)
    index = {"format": INDEX_FORMAT, "definition_id": def_dir.name,
             "archive": {"name": out.name, "size": len(data), "sha256": sha256(data)},
             "trials": {k: {name: [len(b), sha256(b)] for name, b in sorted(v.items())}
                        for k, v in sorted(trials.items())},
             # the md5 of each trial's files before it was packed (DVC pins md5s): a
             # published trial packed later is found here with the files dvc.lock pinned
             "sources": sources}
    if supersedes:  # only then: an index of new trials only is what it always was
        index["supersedes"] = dict(sorted(supersedes.items()))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp, tmp_idx = out.with_name(f".{out.name}.tmp"), out.with_name(f".{out.name}.json.tmp")
    try:
        tmp.write_bytes(data)
        if packs._read_archive(str(tmp), (0,)) != trials:
            raise PackError(f"{out}: the archive does not give back the trials' files")
        tmp_idx.write_bytes(index_bytes(index))
        for f in (tmp, tmp_idx):
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, out)
        os.replace(tmp_idx, index_path(out))
    finally:
        packs._read_archive.cache_clear()
        for f in (tmp, tmp_idx):
            f.unlink(missing_ok=True)
    return out
