"""The ``latency-divide`` command line.

Subcommands are registered in ``COMMANDS``: a name -> (help, add_arguments, run) entry; to
add one, write the two functions and one line in ``COMMANDS``. ``run(args)`` returns the exit
status; domain errors (LatencyDivideError) become one ``error: ...`` line and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable, NamedTuple

from . import limits
from .errors import ConfigError, LatencyDivideError


def _household_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", help="household ID (unit_id in the data set)")
    p.add_argument("--json", action="store_true", help="print the record as JSON")


def _household(args) -> int:
    from .households import get_household

    h = get_household(args.id)
    if args.json:
        print(json.dumps(h.to_dict(), indent=2))
    else:
        print(h.describe())
    return 0


def _sample_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bucket",
        required=True,
        help="price bucket: 0-30, 30-40, 40-50, 50+ or a range LO-HI (US $, [LO, HI)) / LO+",
    )
    p.add_argument("-n", type=int, required=True, help="number of households to draw")
    p.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    p.add_argument("--json", action="store_true", help="print the records as a JSON list")


def _sample(args) -> int:
    from .buckets import DEFAULT_BUCKETS, parse_bucket, sample_bucket
    from .households import get_households

    bucket = parse_bucket(args.bucket)
    ids = sample_bucket(bucket, args.n, args.seed)
    # price_bucket: the default bucket names, or the given range for a custom one
    records = get_households(ids, buckets=None if bucket in DEFAULT_BUCKETS else [bucket])
    if args.json:
        print(json.dumps([r.to_dict() for r in records], indent=2))
        return 0
    print(f"# {len(ids)} households of bucket {bucket.name} {bucket.interval()}, seed {args.seed}")
    print(f"{'unit_id':>8}  {'price':>7}  {'down kbit/s':>11}  {'up kbit/s':>9}  {'rtt ms':>8}  technology  isp")
    for r in records:
        print(
            f"{r.unit_id:>8}  {r.monthly_charge:>7.2f}  {r.download_kbps:>11}  {r.upload_kbps:>9}"
            f"  {r.rtt_ms:>8.3f}  {r.technology:<10}  {r.isp}"
        )
    return 0


def _linkplan_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", help="household ID")
    p.add_argument("--qfactor", type=float, default=2.0, help="queue size in BDPs (default 2)")
    p.add_argument("--delay", choices=["netem", "delayline"], default="netem",
                   help="propagation delay mechanism (default netem)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")


def _linkplan(args) -> int:
    from .households import get_household
    from .linkplan import make_linkplan

    plan = make_linkplan(get_household(args.id), qfactor=args.qfactor, mechanism=args.delay)
    if args.json:
        print(json.dumps(plan.to_dict(), indent=2))
    else:
        print(plan.render_shell(), end="")
    return 0


def _trial_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("household", help="household ID")
    p.add_argument("--direction", required=True, choices=["uplink", "downlink"])
    p.add_argument("--cc", required=True, choices=["cubic", "copa", "bbr", "bbr3"],
                   help="the sender's congestion control")
    p.add_argument("--delta", type=float, help="Copa's latency factor δ in (0, 1] (copa only; "
                   "default 0.5)")
    p.add_argument("--duration", type=float, default=60.0, help="transfer length in s (default 60)")
    p.add_argument("--idle", type=float, default=5.0, help="idle ping before the transfer, s")
    p.add_argument("--repetition", type=int, default=1, help="repetition number (default 1)")
    p.add_argument("--qfactor", type=float, default=2.0, help="queue size in BDPs (default 2)")
    p.add_argument("--delay", choices=["auto", "netem", "delayline"], default="auto",
                   help="propagation delay mechanism (default auto: netem if the kernel has it)")
    p.add_argument("--tool", choices=["tquic-perf", "tperf"], default="tquic-perf")
    p.add_argument("--tool-path", help="traffic tool binary (required for tperf)")
    p.add_argument("--window", type=int, default=65536, help="receiver window, bytes")
    p.add_argument("--tool-arg", action="append", default=[], metavar="FLAG",
                   help="an extra flag for both ends of the tool, e.g. --tool-arg=-gso=false "
                        "(repeatable; part of the trial's definition)")
    p.add_argument("--ping-interval", type=float, default=0.2, help="ping interval, s")
    p.add_argument("--retries", type=int, default=0, help="retries on transient failures")
    p.add_argument("--out", required=True, help="root of the raw layout; the trial goes to "
                   "OUT/<definition id>/<household>/<direction>/<variant>/rep<r>/")
    p.add_argument("--inventory", help="run on an SSH testbed described by this inventory "
                   "(docs/remote-testbed.md) instead of local namespaces")
    p.add_argument("--slice", help="the inventory's slice to use (default: the first)")


def _trial(args) -> int:
    from .config import ToolSettings, Variant
    from .errors import ConfigError
    from .households import get_household
    from .runners import interrupt_on_sigterm
    from .trial import TrialSpec, run_trial_with_retries

    if args.cc == "copa":
        delta = 0.5 if args.delta is None else args.delta
        variant = Variant(name=f"copa-{delta:g}", cc="copa", delta=delta)
    elif args.delta is not None:
        raise ConfigError(f"--delta {args.delta} is only meaningful with --cc copa")
    else:
        variant = Variant(name=args.cc, cc=args.cc)
    try:
        spec = TrialSpec(
            household=get_household(args.household), direction=args.direction, variant=variant,
            repetition=args.repetition, duration_s=args.duration, idle_s=args.idle,
            ping_interval_s=args.ping_interval, qfactor=args.qfactor, delay=args.delay,
            tool=ToolSettings(name=args.tool, path=args.tool_path, window_bytes=args.window,
                              args=tuple(args.tool_arg)))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    limits.check("retries", args.retries, "--retries")

    interrupt_on_sigterm()  # run `finally` blocks (teardown) on SIGTERM too
    from .trial import make_testbed

    testbed = make_testbed("ssh" if args.inventory else "local", args.inventory, args.slice)
    try:
        d = run_trial_with_retries(spec, args.out, retries=args.retries,
                                   log=lambda m: print(m, file=sys.stderr), testbed=testbed)
    finally:
        if hasattr(testbed, "close"):
            testbed.close()
    print(d)
    return 0


def _clean_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true",
                   help="also remove namespaces whose owning process is still running")
    p.add_argument("--results", default="results/raw",
                   help="raw results directory whose abandoned temporary trial directories "
                   "are removed (default results/raw)")


def _clean(args) -> int:
    from .clean import clean

    rep = clean(force=args.force, results=Path(args.results))
    for ns in rep.removed:
        print(f"removed namespace {ns}")
    for ns in rep.in_use:
        print(f"kept {ns}: its owner is still running (use --force to remove)")
    for r in rep.records_removed:
        print(f"removed stale owner record {r}")
    for d in rep.tmp_removed:
        print(f"removed abandoned temporary trial directory {d}")
    if not (rep.removed or rep.in_use or rep.records_removed or rep.tmp_removed):
        print("nothing to clean")
    for e in rep.errors:
        print(f"error: {e}", file=sys.stderr)
    for w in rep.warnings:
        print(f"warning: {w}", file=sys.stderr)
    from .ssh import clean_remote

    done, remote_errors, remote_warnings = clean_remote(force=args.force)
    for line in done:
        print(line)
    for e in remote_errors:
        print(f"error: {e}", file=sys.stderr)
    for w in remote_warnings:
        print(f"warning: {w}", file=sys.stderr)
    return 1 if rep.errors or remote_errors else 0


def _provision_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--inventory", required=True, help="the SSH testbed inventory (YAML)")
    p.add_argument("--slice", help="only this slice (default: all)")
    p.add_argument("--role", choices=["server", "gateway", "delay", "client"],
                   help="only this node of the slice (default: all four)")
    p.add_argument("--out", default="results/provision", help="sentinel files go to "
                   "OUT/<slice>/<role>.json (default results/provision)")


def _provision(args) -> int:
    from pathlib import Path

    from .inventory import ROLES, load_inventory
    from .ssh import provision_node, write_sentinel

    inv = load_inventory(args.inventory)
    slices = [inv.slice(args.slice)] if args.slice else list(inv.slices)
    for sl in slices:
        for role in [args.role] if args.role else list(ROLES):
            facts = provision_node(inv, sl.name, role, log=lambda m: print(m, file=sys.stderr))
            out = Path(args.out) / sl.name / f"{role}.json"
            write_sentinel(out, facts)
            print(out)
    return 0


def _summarize_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("trial_dir", help="a trial directory (results/raw/HOUSEHOLD/DIRECTION/VARIANT/repR)")
    p.add_argument("--json", action="store_true", help="print the row as JSON")


def _summarize(args) -> int:
    from .tables import format_row, row_jsonable, summarize_trial

    row = summarize_trial(args.trial_dir)
    print(json.dumps(row_jsonable(row), indent=2) if args.json else format_row(row))
    return 0


def _copa_rtt_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("qlog", nargs="+", help="mvfst qlog files (tperf -server_qlogger_path=DIR "
                   "writes DIR/<connection id>.qlog; .gz accepted)")
    p.add_argument("--skip-s", type=float, default=2.0,
                   help="leave out the first seconds of each connection (start-up; default 2)")


def _copa_rtt(args) -> int:
    from .parsers.qlog import copa_estimate, read_qlog, rtt_samples

    limits.check("skip_s", args.skip_s, "--skip-s")
    keys = ["samples", "min_rtt_ms", "estimate_ms_median", "ack_delay_ms_median",
            "estimate_without_ack_delay_ms_median", "ack_delay_share", "acks_with_delay"]
    print("\t".join(["qlog"] + keys))
    for q in args.qlog:
        r = copa_estimate(rtt_samples(read_qlog(q)), skip_ms=args.skip_s * 1000)
        print("\t".join([q] + [f"{r[k]:.3f}" if isinstance(r[k], float) else str(r[k])
                                for k in keys]))
    return 0


def _compare_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("summaries", nargs="+", metavar="NAME=SUMMARY",
                   help="a run's name and its summary table (results/tables/summary.parquet, "
                   "results/companions/<name>/tables/summary.parquet)")
    p.add_argument("--variant", action="append", help="only these variants, in this order")


def _compare(args) -> int:
    from .compare import load_summaries, markdown

    named = []
    for item in args.summaries:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ConfigError(f"{item!r}: give NAME=PATH, e.g. tquic=results/tables/summary.parquet")
        named.append((name, path))
    print(markdown(load_summaries(named), args.variant))
    return 0


def _trace_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("figure", help="a figure (results/figures/NAME.pdf) or its .provenance.json")
    p.add_argument("--root", default=".", help="directory the recorded relative paths are "
                   "relative to (default: the current directory)")
    p.add_argument("--files", action="store_true", help="list every trial file with its sha256")


def _trace(args) -> int:
    from .provenance import format_trace, verify

    res = verify(args.figure, root=args.root)
    print(format_trace(res, files=args.files))
    from .datacheck import (
        format_dvc_trace,  # the DVC-tracked file of each trial (dvc.lock)
    )

    for line in format_dvc_trace(res.record, root=args.root, files=args.files):
        print(line)
    return 0 if res.ok else 2


def _verify_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", nargs="?", default="results/raw",
                   help="tracked data to check: results/raw (default), a household or trial "
                   "directory under it")
    p.add_argument("--repo", help="the DVC repository (default: the one containing PATH)")


def _verify(args) -> int:
    from .datacheck import format_report, verify

    rep = verify(args.path, repo=args.repo)
    print(format_report(rep))
    return 0 if rep.ok else 2


def _publish_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--remote", help="local DVC remote to push to (default: the default remote, "
                   "`published` = dvc-remote/)")
    p.add_argument("--limit-mb", type=float, default=60.0,
                   help="largest allowed size of the remote after the push, MB (default 60)")
    p.add_argument("--no-commit", action="store_true",
                   help="push what dvc.lock records now (skip `dvc commit trials`)")
    p.add_argument("--replace-published", action="store_true",
                   help="allow published trials to be gone or changed (e.g. moved by `migrate`); "
                        "by default publishing only adds trials")


def _publish(args) -> int:
    from .datacheck import DataCheckError, publish
    from .integrity import DataIntegrityError, check_raw_tree

    limits.check("limit_mb", args.limit_mb, "--limit-mb")
    findings = check_raw_tree("results/raw", ".", keep_published=not args.replace_published)
    if findings:
        raise DataIntegrityError(findings)
    publish(".", remote=args.remote, limit_bytes=int(args.limit_mb * 1_000_000),
            commit=not args.no_commit, log=lambda m: print(m, file=sys.stderr))
    return 0


def _migrate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--raw", default="results/raw", help="raw data root (default results/raw)")
    p.add_argument("--config", default="config/config.yaml",
                   help="the configuration the trials ran under (its hash must be the one they "
                        "recorded)")
    p.add_argument("-n", "--dry-run", action="store_true", help="print the moves, make none")


def _migrate(args) -> int:
    import yaml

    from .migrate import migrate

    with open(args.config) as f:
        config = yaml.safe_load(f)
    moves = migrate(args.raw, config, dry_run=args.dry_run)
    for src, dst in moves:
        print(f"{'would move' if args.dry_run else 'moved'} {src} -> {dst}")
    print(f"{len(moves)} trial(s)", file=sys.stderr)
    return 0


class Command(NamedTuple):
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


COMMANDS: dict[str, Command] = {
    "household": Command("show one household's link profile", _household_args, _household),
    "sample": Command("draw households of a price bucket (weighted, seeded)", _sample_args, _sample),
    "linkplan": Command("print the tc/delay commands for a household", _linkplan_args, _linkplan),
    "summarize": Command("print one trial's row of the trials table", _summarize_args, _summarize),
    "compare": Command("summary tables of several runs side by side (Markdown: delay ms / "
                       "normalized throughput)", _compare_args, _compare),
    "copa-rtt": Command("what mvfst's Copa takes for queueing delay, from tperf's qlog "
                        "(latest - min RTT, and the peer's ack delay in it)", _copa_rtt_args,
                        _copa_rtt),
    "trace": Command("show a figure's provenance and verify its hashes", _trace_args, _trace),
    "verify": Command("check raw data against dvc.lock (missing or corrupted files)",
                      _verify_args, _verify),
    "migrate": Command("move format-1 trials into the definition layout", _migrate_args,
                       _migrate),
    "publish": Command("record results/raw in dvc.lock and push it to the published remote",
                       _publish_args, _publish),
    "trial": Command("run one trial (local namespaces, or an SSH testbed with --inventory)",
                     _trial_args, _trial),
    "provision": Command("prepare SSH testbed nodes (packages, our tools)", _provision_args,
                         _provision),
    "clean": Command("remove our namespaces and processes left by a killed run", _clean_args,
                     _clean),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="latency-divide",
        description="Reproducible 'Tackling the latency divide with Copa' experiment.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, cmd in COMMANDS.items():
        p = sub.add_parser(name, help=cmd.help, description=cmd.help)
        cmd.add_arguments(p)
        p.set_defaults(_run=cmd.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args._run(args)
    except LatencyDivideError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # e.g. `latency-divide linkplan 1 | head`
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
