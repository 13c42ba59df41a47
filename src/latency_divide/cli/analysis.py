"""Subcommands on the results: ``summarize`` (one trial's row of the trials table),
``copa-rtt`` (what mvfst's Copa takes for queueing delay, from tperf's qlog), ``compare`` (runs'
summary tables side by side), ``percentiles`` (a population run's percentile table beside
Facebook's production numbers), ``live-mechanism`` (the rate ABR's rungs against the queue,
per broadcast: analysis.live_mechanism) and ``trace`` (a figure's provenance, verified).

Each is an ``add_arguments`` / ``run`` pair registered in cli.COMMANDS.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from latency_divide import limits
from latency_divide.errors import ConfigError


def _summarize_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("trial_dir", help="a trial directory "
                   "(results/raw/DEFINITION/HOUSEHOLD/DIRECTION/VARIANT/repR)")
    p.add_argument("--json", action="store_true", help="print the row as JSON")


def _summarize(args) -> int:
    from latency_divide.analysis.metrics import (
        format_row,
        row_jsonable,
        summarize_trial,
    )

    row = summarize_trial(args.trial_dir)
    print(json.dumps(row_jsonable(row), indent=2) if args.json else format_row(row))
    return 0


def _copa_rtt_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("qlog", nargs="+", help="mvfst qlog files (tperf -server_qlogger_path=DIR "
                   "writes DIR/<connection id>.qlog; .gz accepted)")
    p.add_argument("--skip-s", type=float, default=2.0,
                   help="leave out the first seconds of each connection (start-up; default 2)")


def _copa_rtt(args) -> int:
    from latency_divide.parsers.qlog import copa_estimate, read_qlog, rtt_samples

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
    from latency_divide.analysis.compare import load_summaries, markdown

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
    from latency_divide.analysis.provenance import format_trace, verify

    res = verify(args.figure, root=args.root)
    print(format_trace(res, files=args.files))
    from latency_divide.ops.verify import format_dvc_trace

    for line in format_dvc_trace(res.record, root=args.root, files=args.files):
        print(line)
    return 0 if res.ok else 2


def _percentiles_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("table", help="a population run's percentile table "
                   "(results/companions/<name>/tables/percentiles.parquet)")
    p.add_argument("--direction", default="uplink", choices=("uplink", "downlink"),
                   help="default uplink (Facebook's were uploads)")
    p.add_argument("--bucket", default="all", help="'all' (default) or a price bucket")
    p.add_argument("--tool", help="the table's tool (needed when it holds more than one)")


def _percentiles(args) -> int:
    from latency_divide.analysis.facebook import side_by_side, to_markdown
    from latency_divide.analysis.population import read_percentiles

    if not Path(args.table).is_file():
        raise ConfigError(f"{args.table}: no such file (a population run's percentiles.parquet: "
                          "snakemake all builds it after dvc pull)")
    table = read_percentiles(args.table)
    buckets = sorted(table["bucket"].unique())
    if args.bucket not in buckets:
        raise ConfigError(f"--bucket {args.bucket!r}: the table has {', '.join(buckets)}")
    try:
        df = side_by_side(table, args.direction, args.bucket, args.tool)
    except ValueError as e:
        raise ConfigError(f"--tool: {e}") from None
    print(to_markdown(df))
    return 0


def _rejudge_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("raw", nargs="?", type=Path, default=Path("results/raw"),
                   help="a raw-data tree (default results/raw: the published data after "
                   "`dvc pull`)")
    p.add_argument("--json", action="store_true", help="one JSON object per changed trial")


def _rejudge(args) -> int:
    """Every trial whose health verdict differs under today's bounds (trial.health) from the
    one it recorded when measured; the analysis judges by today's (issue 57)."""
    from latency_divide.trial import rawio
    from latency_divide.trial.health import rejudge
    from latency_divide.trial.packs import every_trial

    if not args.raw.is_dir():
        raise ConfigError(f"{args.raw}: no such directory (a raw-data tree: `dvc pull` fetches "
                          "the published one into results/raw)")
    n = judged = 0
    changed = []
    for d in every_trial(args.raw):
        n += 1
        meta = json.loads(rawio.read_text(d, "meta.json"))
        now = rejudge(meta)
        if now is None:
            continue
        judged += 1
        was = meta["health"].get("verdict")
        if now["verdict"] != was:
            changed.append({"trial": str(d.relative_to(args.raw)), "recorded": was,
                            "today": now["verdict"], "capacity_kbps": meta.get("capacity_kbps"),
                            "packet_time_us": now["packet_time_us"],
                            "reasons_recorded": meta["health"].get("reasons", []),
                            "reasons_today": now["reasons"]})
    for c in changed:
        if args.json:
            print(json.dumps(c))
        else:
            print(f"{c['trial']}: {c['recorded']} -> {c['today']} ({c['capacity_kbps']} kbit/s, "
                  f"a packet every {c['packet_time_us']:g} µs; recorded: "
                  f"{'; '.join(c['reasons_recorded']) or '-'}; today: "
                  f"{'; '.join(c['reasons_today']) or '-'})")
    if not args.json:
        print(f"{n} trials, {judged} with health numbers: {len(changed)} verdict(s) change "
              "under today's bounds")
    return 0


def _live_mechanism_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--raw", action="append", required=True, type=Path, metavar="DIR",
                   help="a results tree's raw data (results/raw); repeat for more (e.g. the "
                   "2 x BDP run, then the policed run)")
    p.add_argument("--out", required=True, type=Path, metavar="DIR",
                   help="where the tables (live_mechanism*.parquet, live_mechanism.md) and the "
                   "figure (live_mechanism.{pdf,png} and its provenance) go")
    p.add_argument("--households", type=int, nargs="+", metavar="ID",
                   help="only these households (default: those of the first --raw tree)")
    p.add_argument("--no-figure", action="store_true", help="write the tables only")


def _live_mechanism(args) -> int:
    from latency_divide.analysis.live_mechanism_report import build

    res = build(args.raw, args.out, args.households)
    names = ["live_mechanism", "live_mechanism_switches", "live_mechanism_rungs",
             "live_mechanism_summary"]
    if not args.no_figure:
        from latency_divide.analysis.live_mechanism_figure import NAME, build_mechanism_figure
        from latency_divide.analysis.provenance import sidecar_path

        pdf = args.out / f"{NAME}.pdf"
        build_mechanism_figure(res["used"], pdf, args.out / f"{NAME}.png", sidecar_path(pdf),
                               tables=[args.out / f"{n}.parquet" for n in names])
    print((args.out / "live_mechanism.md").read_text(), end="")
    print(f"{len(res['broadcasts'])} broadcasts; written under {args.out}")
    return 0
