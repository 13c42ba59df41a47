"""Subcommands on the raw data: ``verify`` (the files against dvc.lock), ``publish`` (record
results/raw in dvc.lock and push it to the published remote), ``migrate`` (format-1 trials
into the definition layout) and ``repack`` (older trials into format 4's two files, lossless).

Each is an ``add_arguments`` / ``run`` pair registered in cli.COMMANDS.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from latency_divide import limits
from latency_divide.ops.publish import PUBLISH_LIMIT_BYTES
from latency_divide.paths import RAW


def _verify_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", nargs="?", default=RAW.as_posix(),
                   help="tracked data to check: results/raw (default), a household or trial "
                   "directory under it")
    p.add_argument("--repo", help="the DVC repository (default: the one containing PATH)")


def _verify(args) -> int:
    from latency_divide.ops.verify import format_report, verify

    rep = verify(args.path, repo=args.repo)
    print(format_report(rep))
    return 0 if rep.ok else 2


def _publish_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--remote", help="local DVC remote to push to (default: the default remote, "
                   "`published` = dvc-remote/)")
    p.add_argument("--limit-mb", type=float, default=PUBLISH_LIMIT_BYTES / 1_000_000,
                   help="largest allowed size of the remote after the push, MB (default "
                        f"{PUBLISH_LIMIT_BYTES / 1_000_000:g}: it is committed to git as plain "
                        "files)")
    p.add_argument("--no-commit", action="store_true",
                   help="push what dvc.lock records now (skip `dvc commit trials`)")
    p.add_argument("--replace-published", action="store_true",
                   help="allow published trials to be gone or changed (e.g. moved by `migrate`); "
                        "by default publishing only adds trials")
    p.add_argument("--no-pack", action="store_true",
                   help="publish loose trials as they are (by default each definition's loose "
                        "trials go into a new pack with its parsed cache first: docs/data.md "
                        "\"Packs\")")
    p.add_argument("--supersede", metavar="REASON",
                   help="pack loose trials whose key is already packed (measured again) into "
                        "the new pack, superseding the published ones for the analysis; they "
                        "stay in their packs, and REASON is recorded in the new pack's index "
                        "(docs/data.md \"Superseding a published trial\")")


def _publish(args) -> int:
    from latency_divide.analysis.integrity import DataIntegrityError
    from latency_divide.analysis.packing import check_supersede
    from latency_divide.analysis.rawtree import check_raw_tree
    from latency_divide.ops.publish import publish

    limits.check("limit_mb", args.limit_mb, "--limit-mb")
    check_supersede(RAW, args.supersede, pack=not args.no_pack)
    findings = check_raw_tree(RAW, ".", keep_published=not args.replace_published)
    if findings:
        raise DataIntegrityError(findings)
    if not args.no_pack:
        rewritten = _pack_all(RAW, args.supersede)
        findings = check_raw_tree(RAW, ".", keep_published=not args.replace_published,
                                  rewritten=rewritten)
        if findings:
            raise DataIntegrityError(findings)
    publish(".", remote=args.remote, limit_bytes=int(args.limit_mb * 1_000_000),
            commit=not args.no_commit, log=lambda m: print(m, file=sys.stderr))
    return 0


def _pack_all(raw: Path, supersede: str | None = None) -> list[Path]:
    """Each definition's loose trials into a new pack with its parsed cache (superseding, for
    the reason ``supersede``, the packed trials measured again); the cache of every older
    pack written again where it is for other code (analysis.parsedcache). Return the cache
    files written again."""
    from latency_divide.analysis import packing, parsedcache
    from latency_divide.trial import packs

    rewritten: list[Path] = []
    for d in sorted(Path(raw).glob("def-*")):
        for arc in packs.archives(d):
            cache, why = parsedcache.load(arc)
            if cache is None:
                n = packing.build_cache(arc)
                rewritten += parsedcache.files(arc)
                print(f"{arc}: {why}: parsed its {n} trials again", file=sys.stderr)
        arc = packing.pack_definition(d, supersede=supersede)
        if arc is not None:
            idx = packs.read_index(arc)
            n, m = len(idx["trials"]), len(idx.get("supersedes", {}))
            print(f"{d.name}: {n} loose trials packed into {arc.name} (with its parsed cache)"
                  + (f"; {m} of them supersede published trials ({supersede})" if m else ""),
                  file=sys.stderr)
        left = [m.parent for m in d.glob("*/*/*/rep*/meta.json")]
        if left:
            print(f"{d.name}: {len(left)} trials of an older form stay loose (`latency-divide "
                  f"repack` makes them two files, then they are packed)", file=sys.stderr)
    return rewritten


def _migrate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--raw", default=RAW.as_posix(), help="raw data root (default results/raw)")
    p.add_argument("--config", default="config/config.yaml",
                   help="the configuration the trials ran under (its hash must be the one they "
                        "recorded)")
    p.add_argument("-n", "--dry-run", action="store_true", help="print the moves, make none")


def _migrate(args) -> int:
    import yaml

    from latency_divide.ops.migrate import migrate

    with open(args.config) as f:
        config = yaml.safe_load(f)
    moves = migrate(args.raw, config, dry_run=args.dry_run)
    for src, dst in moves:
        print(f"{'would move' if args.dry_run else 'moved'} {src} -> {dst}")
    print(f"{len(moves)} trial(s)", file=sys.stderr)
    return 0


def _repack_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--raw", default=RAW.as_posix(), help="raw data root (default results/raw)")
    p.add_argument("-n", "--dry-run", action="store_true", help="count the trials, change none")
    p.add_argument("--check", action="store_true",
                   help="repack nothing: rebuild every repacked trial's original files and "
                        "compare them with the md5s it recorded")
    p.add_argument("--indexes", action="store_true",
                   help="repack no trial: write every plain-JSON pack index (written until "
                        "2026-12-06) compressed, as packs write it now, losslessly")


def _repack(args) -> int:
    from latency_divide.ops.repack import REPACKED, check_repacked, compress_indexes, repack_tree
    from latency_divide.trial import rawio
    from latency_divide.trial.packs import every_trial

    if args.indexes:
        done = compress_indexes(args.raw, dry_run=args.dry_run)
        print(f"{len(done)} pack index(es) {'to compress' if args.dry_run else 'compressed'}"
              + ("; publish them with `latency-divide publish --replace-published`"
                 if done and not args.dry_run else ""))
        return 0
    if not args.check:
        todo, problems = repack_tree(args.raw, dry_run=args.dry_run,
                                     log=lambda m: print(m, file=sys.stderr))
        if args.dry_run:
            print(f"{len(todo)} trial(s) to repack")
            return 0
        print(f"{len(todo) - len(problems)} trial(s) repacked"
              + (f", {len(problems)} left as they are (named above)" if problems else "")
              + ("; publish them with `latency-divide publish --replace-published` (until "
                 "then the analysis refuses them: their files are not the ones dvc.lock pins)"
                 if len(todo) > len(problems) else ""))
        return 2 if problems else 0
    bad = n = 0
    for d in every_trial(args.raw):  # loose and packed (a repacked trial published since)
        try:
            if REPACKED not in json.loads(rawio.read_text(d, "meta.json")):
                continue
        except ValueError as e:
            bad += 1
            print(f"{d}: meta.json is not JSON ({e})")
            continue
        n += 1
        res = check_repacked(d)
        for what in res.problems:
            bad += 1
            print(f"{d}: {what}")
        for name in res.gzip_differs:
            print(f"{d}: {name}: content intact; this zlib deflates it to other bytes")
    verdict = f"{bad} problem(s)" if bad else "every original file rebuilt"
    print(f"{n} repacked trial(s) checked: {verdict}")
    return 2 if bad else 0


def _host_check_args(p: argparse.ArgumentParser) -> None:
    from latency_divide.ops.hostcheck import PROBE_DEFAULT_S, PROBE_MAX_S
    from latency_divide.paths import DEFAULT_CONFIG

    p.add_argument("--config", default=str(DEFAULT_CONFIG),
                   help="the run to judge the host for (default config/config.yaml)")
    p.add_argument("--force", action="store_true",
                   help="measure again, even where this boot's record exists")
    p.add_argument("--seconds", type=float, default=PROBE_DEFAULT_S,
                   help=f"how long the probe runs (default {PROBE_DEFAULT_S:g}, at most "
                        f"{PROBE_MAX_S:g})")
    p.add_argument("--go-on", action="store_true",
                   help="exit 0 where the host cannot hold the config's links (with a warning)")
    p.add_argument("--json", action="store_true",
                   help="print the record and the assessment as JSON instead of the report")


def _host_check(args) -> int:
    """Exit 0 (the host holds every link, or --go-on), 3 (it refuses: docs/host.md)."""
    import dataclasses

    from latency_divide.config import load_config
    from latency_divide.ops.hostcheck import EXIT_REFUSED, check, check_seconds

    check_seconds(args.seconds)  # a bad value fails before the config is read
    cfg = load_config(args.config)
    a, lines, rec, path = check(cfg, force=args.force, seconds=args.seconds,
                                log=lambda m: print(m, file=sys.stderr, flush=True))
    if args.json:
        out = dataclasses.asdict(a)
        out.pop("trials")
        print(json.dumps({"record_path": str(path), "record": rec, "assessment": out,
                          "refused": a.refused}, indent=2))
    else:
        print("\n".join(lines))
    if a.refused:
        if args.go_on:
            print("[latency-divide] WARNING: --go-on: the run goes ahead on a host that cannot "
                  "hold the links above; every trial's health verdict is still judged",
                  file=sys.stderr)
            return 0
        return EXIT_REFUSED
    return 0
