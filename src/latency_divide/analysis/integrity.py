"""Before any table is built: is every trial directory we are about to read intact, complete
and the trial it claims to be?

:func:`check_trials` looks at each trial directory, without parsing its measurements:

- against what DVC pinned: every file that dvc.lock's manifest lists under the directory is
  on disk with that md5 (a pulled measurement edited, truncated or deleted afterwards); this
  holds for trials DVC put here (their meta.json is in the local cache): a trial measured
  here at a published trial's path (a fresh clone's own sweep) is not the published one;
- against the raw format: meta.json is a JSON object of a readable format version; the logs a
  trial needs are there (plain or ``.gz``); every ``.gz`` decompresses to its end (gzip's CRC
  catches flipped bytes) and every ``.json`` parses;
- against its identity: the path's definition id, household, direction, variant and
  repetition are what meta.json says; the directory's definition.json hashes to its name and
  agrees with every setting meta.json recorded (trial.definition); the link plan
  meta.json recorded is the one the household and the definition's qfactor and buffer model
  give, and ``capacity_kbps`` is its rate.

Every finding names the trial directory and the file. analysis.tables.build_tables raises
:class:`DataIntegrityError` listing them all, with the ways to repair, so that the analysis
stops before it writes anything. A trial that is intact but invalid by its own data (the tool
failed, no transfer window) is not a finding here: the tables list it in exclusions.parquet.

analysis.rawtree.check_raw_tree checks a whole raw tree before `latency-divide publish` records it:
every trial as above, anything that is not a complete trial of the layout (trial.layout), and
every published trial that is gone.
"""

from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterable

from latency_divide import READABLE_FORMATS
from latency_divide.errors import LatencyDivideError
from latency_divide.ops.dvcstore import (
    DataCheckError,
    load_manifest,
    md5_file,
    object_dirs,
    object_path,
    tracked_outs,
)
from latency_divide.trial import definition, rawio
from latency_divide.trial.layout import (
    ARCHIVE,
    DEFINITION,
    META,
    REQUIRED_LOGS,
    parse_trial_path,
    trial_id,
)
from latency_divide.vocab import DIRECTIONS

REPAIR = ("Restore the published files with `dvc checkout --force` (or `dvc pull --force`); "
          "a trial you measured yourself and did not commit to DVC cannot be restored: move its "
          "directory away and run the workflow again to re-measure it.")


class DataIntegrityError(LatencyDivideError):
    """Trial data that must not be analysed; the message lists every finding."""

    def __init__(self, findings: list["Finding"]):
        self.findings = findings
        lines = [f"  {f}" for f in findings[:50]]
        if len(findings) > 50:
            lines.append(f"  ... and {len(findings) - 50} more")
        n = len({f.trial for f in findings})
        super().__init__(f"{len(findings)} problem(s) in {n} trial director"
                         f"{'y' if n == 1 else 'ies'}; no table was written:\n"
                         + "\n".join(lines) + "\n" + REPAIR)


@dataclass(frozen=True)
class Finding:
    trial: str  # the trial directory
    file: str  # the file at fault ("" for the directory itself)
    what: str

    def __str__(self) -> str:
        where = f"{self.trial}/{self.file}" if self.file else self.trial
        return f"{where}: {self.what}"


def _pins(repo: Path | None) -> list[tuple[PurePosixPath, dict[str, str], str, dict]]:
    """(out path, relpath -> md5, source) of every DVC-tracked directory of the repository."""
    if repo is None or not (repo / "dvc.lock").is_file():
        return []
    out = []
    for t in tracked_outs(repo):
        if t.is_dir:
            manifest, _ = load_manifest(repo, t)  # DataCheckError: cannot check: stop too
            by_dir: dict[str, list[tuple[str, str]]] = {}
            for relpath, md5 in manifest.items():
                parent, _, name = relpath.rpartition("/")
                by_dir.setdefault(parent, []).append((name, md5))
            out.append((PurePosixPath(t.path), manifest, t.source, by_dir))
    return out


def _rel(path: Path, repo: Path | None) -> PurePosixPath | None:
    if repo is None:
        return None
    try:
        return PurePosixPath(path.resolve().relative_to(repo.resolve()).as_posix())
    except ValueError:
        return None


def _check_pins(d: Path, rel: PurePosixPath | None, pins, found: list[Finding],
                cache: Path | None = None) -> set[str]:
    """Check the files DVC pinned under ``d``; return the names that match their pin.

    Pins hold for data DVC put here: when the pinned meta.json is not in the local cache
    (``cache``), the published trial was never pulled into this checkout, so a directory at
    its path is a measurement made here of the same definition (a fresh clone's
    `snakemake --cores 1 all`), checked on its own like any other trial."""
    intact: set[str] = set()
    if rel is None:
        return intact
    for out, _, source, by_dir in pins:
        try:
            sub = rel.relative_to(out).as_posix()
        except ValueError:
            continue
        entries = by_dir.get(sub, ())
        meta_md5 = dict(entries).get(META)
        if cache is not None and meta_md5 and not object_path(cache, meta_md5).is_file():
            continue
        for name, md5 in entries:
            f = d / name
            if not f.is_file():
                found.append(Finding(str(d), name, f"missing: DVC pinned it ({source}, md5 {md5})"))
            elif md5_file(f) != md5:
                found.append(Finding(str(d), name, f"modified: its md5 is not the one DVC pinned "
                                                   f"({source}, md5 {md5})"))
            else:
                intact.add(name)
    return intact


def _check_files(d: Path, found: list[Finding], pinned_intact: set[str] = frozenset()) -> None:
    """Required logs present; every .gz and JSON file readable (files whose bytes are the ones
    DVC pinned were readable when published: `publish` checks them)."""
    try:
        packed = rawio.members(d)
    except rawio.UNREADABLE as e:
        packed = {}
        if ARCHIVE not in pinned_intact:
            found.append(Finding(str(d), ARCHIVE, f"not a readable tar.xz archive "
                                                  f"({e or 'cut short'})"))
    for name in REQUIRED_LOGS:
        if rawio.find(d, name) is None and name not in packed:
            where = f"from {ARCHIVE}" if (d / ARCHIVE).exists() else f"(nor {name}.gz)"
            found.append(Finding(str(d), name, f"missing {where}: every trial has it"))
    _json_members(d, packed, f"{ARCHIVE}:", found)
    for f in sorted(d.iterdir()):
        if f.name in pinned_intact:
            continue
        if f.name.endswith(".gz"):
            try:
                with gzip.open(f, "rb") as g:
                    while g.read(1 << 20):
                        pass
            except (OSError, EOFError, zlib.error) as e:
                found.append(Finding(str(d), f.name, f"not a readable gzip file ({e or 'cut short'})"))
        elif f.suffix == ".json" and f.name != META:
            try:
                json.loads(f.read_text())
            except (OSError, UnicodeDecodeError, ValueError) as e:
                found.append(Finding(str(d), f.name, f"not valid JSON ({e})"))


def _json_members(d: Path, files: dict[str, bytes], prefix: str, found: list[Finding]) -> None:
    """A finding for every ``.json`` member of ``files`` that is not valid JSON."""
    for name, data in files.items():
        if name.endswith(".json"):
            try:
                json.loads(data)
            except ValueError as e:
                found.append(Finding(str(d), f"{prefix}{name}", f"not valid JSON ({e})"))


def _check_identity(d: Path, meta: dict, found: list[Finding]) -> None:
    from latency_divide.data.households import Household
    from latency_divide.links import buffers
    from latency_divide.links.plan import make_linkplan

    def bad(what: str, file: str = META) -> None:
        found.append(Finding(str(d), file, what))

    where = parse_trial_path(d)
    if where is None:
        bad("not at results/raw/<definition id>/<household>/<direction>/<variant>/rep<r>", "")
        return
    def_id, direction = where.definition_id, where.direction
    try:
        said = trial_id(meta["household"]["unit_id"], meta["direction"], meta["variant"]["name"],
                        meta["repetition"])
    except (KeyError, TypeError) as e:
        bad(f"lacks the trial's identity ({type(e).__name__}: {e})")
        return
    at = trial_id(where.household, direction, where.variant, where.repetition)
    if said != at:
        bad(f"says it is trial {said}, its path says {at}")
    try:
        defn = definition.read(d.parents[3])
    except ValueError as e:
        found.append(Finding(str(d.parents[3]), DEFINITION, str(e).split(": ", 1)[-1]))
        return
    for m in definition.mismatches(defn, meta):
        bad(f"was not measured under {def_id}: {m}")
    if meta.get("format_version", 1) >= 2:
        if meta.get("definition_id") != def_id or meta.get("definition") != defn:
            bad(f"records definition {meta.get('definition_id')!r}, its directory is {def_id}")
    try:
        model = defn.get("buffer_model", buffers.DEFAULT_MODEL)
        plan = make_linkplan(Household.from_dict(meta["household"]), qfactor=defn["qfactor"],
                             mechanism=meta["delay_mechanism"], buffer_model=model).to_dict()
        rec = meta["linkplan"]
        given = f"qfactor {defn['qfactor']:g}" + (
            f" and buffer model {model}" if model != buffers.DEFAULT_MODEL else "")
        for part, key in [*((d, k) for d in DIRECTIONS for k in ("rate_kbit", "queue_bytes")),
                          ("delay", "one_way_ms")]:
            if rec[part][key] != plan[part][key]:
                bad(f"linkplan.{part}.{key} is {rec[part][key]!r}; the household and {given} "
                    f"give {plan[part][key]!r}")
        if meta["capacity_kbps"] != plan[direction]["rate_kbit"]:
            bad(f"capacity_kbps is {meta['capacity_kbps']!r}; the {direction} rate is "
                f"{plan[direction]['rate_kbit']!r} kbit/s")
    except (KeyError, TypeError, ValueError) as e:
        bad(f"lacks or garbles the household or link plan ({type(e).__name__}: {e})")


def check_trial(d: Path | str, repo: Path | None = None, pins=(),
                cache: Path | None = None) -> list[Finding]:
    """Every finding about one trial directory (empty when it may be analysed)."""
    d = Path(d)
    found: list[Finding] = []
    if not d.is_dir():
        try:
            packed = rawio.packed(d)
        except (LatencyDivideError, *rawio.UNREADABLE) as e:
            return [Finding(str(d), "", f"its definition's packs cannot be read ({e})")]
        if packed is None:
            return [Finding(str(d), "", "missing: not a directory, nor in its definition's "
                                        "packs")]
        return _check_packed(d, packed)
    intact = _check_pins(d, _rel(d, repo), pins, found, cache)
    meta_file = d / META
    try:
        meta = json.loads(meta_file.read_text())
    except FileNotFoundError:
        found.append(Finding(str(d), META, "missing"))
        return found
    except (OSError, UnicodeDecodeError, ValueError) as e:
        found.append(Finding(str(d), META, f"not valid JSON ({e})"))
        return found
    if not isinstance(meta, dict):
        found.append(Finding(str(d), META, "not a JSON object"))
        return found
    if meta.get("format_version") not in READABLE_FORMATS:
        found.append(Finding(str(d), META, f"format_version {meta.get('format_version')!r}; "
                                           f"this code reads "
                                           f"{', '.join(map(str, READABLE_FORMATS))}"))
        return found
    _check_files(d, found, intact)
    if meta.get("archive"):  # format 4: the link plan is in the archive's setup.json
        try:
            meta = rawio.full_meta(d)
        except (ValueError, *rawio.UNREADABLE):
            pass  # the archive's fault is a finding already; the identity checks say the rest
    _check_identity(d, meta, found)
    return found


def _check_packed(d: Path, packed) -> list[Finding]:
    """A trial in a pack: the pack's bytes against its index, the trial's members against
    the index's record of them, then the checks of a loose trial (its readable files, its
    identity)."""
    from latency_divide.trial import packs

    where = str(packed.archive)
    found = [Finding(where, "", w.split(": ", 1)[-1]) for w in packs.check_archive(packed.archive)]
    if found:
        return found
    try:
        files = packs.files_of(packed)
    except rawio.UNREADABLE as e:
        return [Finding(where, "", f"not a readable pack ({e or 'cut short'})")]
    got = {n: [len(b), packs.sha256(b)] for n, b in files.items()}
    for name in sorted(set(got) | set(packed.members)):
        if got.get(name) != packed.members.get(name):
            found.append(Finding(str(d), name, f"is not what {where}'s index records"))
    try:
        meta = json.loads(files[META])
    except (KeyError, ValueError) as e:
        return found + [Finding(str(d), META, f"missing or not valid JSON ({e})")]
    if not isinstance(meta, dict) or meta.get("format_version") not in READABLE_FORMATS:
        return found + [Finding(str(d), META, "not a meta.json this code reads")]
    for name in REQUIRED_LOGS:
        if name not in files:
            found.append(Finding(str(d), name, f"missing from its pack {where}"))
    _json_members(d, files, "", found)
    _check_identity(d, rawio.full_meta(d), found)
    return found


class Checker:
    """:func:`check_trial` against one repository's dvc.lock, read once (its manifests list
    every published file): ``Checker(repo).check(d)``. The tables check each trial just before
    they parse it, so a format-4 archive is decompressed once for both (rawio's cache)."""

    def __init__(self, repo: Path | str | None = "."):
        self.repo = Path(repo) if repo is not None else None
        try:
            self.pins = _pins(self.repo)
        except DataCheckError as e:
            raise LatencyDivideError(f"cannot check the trials against dvc.lock: {e}") from None
        self.cache = object_dirs(self.repo)[0] if self.pins else None  # the local cache first
        self._pack_dirs: dict[Path, list[Finding]] = {}

    def check(self, d: Path | str) -> list[Finding]:
        d = Path(d)
        found = check_trial(d, self.repo, self.pins, self.cache)
        if not d.is_dir() and not found:
            packed = rawio.packed(d)
            found = self.check_pack(packed.archive) if packed is not None else []
        return found

    def check_pack(self, archive: Path) -> list[Finding]:
        """A pack (trial.packs) whose parsed cache is read instead of its trials: its bytes
        against its index, and the files of its directory against dvc.lock's pins (once)."""
        from latency_divide.trial import packs

        found = [Finding(str(archive), "", what.split(": ", 1)[-1])
                 for what in packs.check_archive(archive)]
        d = archive.parent
        if d not in self._pack_dirs:
            pinned: list[Finding] = []
            _check_pins(d, _rel(d, self.repo), self.pins, pinned)
            self._pack_dirs[d] = pinned
        return found + self._pack_dirs[d]


def check_trials(trial_dirs: Iterable[Path | str], repo: Path | str | None = ".") -> list[Finding]:
    """Findings for every trial directory (against dvc.lock when ``repo`` has one)."""
    checker = Checker(repo)
    # the trials of one pack share its findings (its archive, its directory's pins): once each
    return list(dict.fromkeys(f for d in trial_dirs for f in checker.check(d)))
