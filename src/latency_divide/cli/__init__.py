"""The ``latency-divide`` command line.

Subcommands are registered in ``COMMANDS``: a name -> (help, add_arguments, run) entry; to
add one, write the two functions (in the module of its stage: cli.data, cli.testbed, cli.ops,
cli.analysis) and one line in ``COMMANDS``. ``run(args)`` returns the exit status; domain
errors (LatencyDivideError) become one ``error: ...`` line and exit status 1.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, NamedTuple

from latency_divide.cli.analysis import (
    _compare,
    _compare_args,
    _copa_rtt,
    _copa_rtt_args,
    _live_mechanism,
    _live_mechanism_args,
    _percentiles,
    _percentiles_args,
    _rejudge,
    _rejudge_args,
    _summarize,
    _summarize_args,
    _trace,
    _trace_args,
)
from latency_divide.cli.data import (
    _household,
    _household_args,
    _linkplan,
    _linkplan_args,
    _sample,
    _sample_args,
)
from latency_divide.cli.ops import (
    _host_check,
    _host_check_args,
    _migrate,
    _migrate_args,
    _publish,
    _publish_args,
    _repack,
    _repack_args,
    _verify,
    _verify_args,
)
from latency_divide.cli.testbed import (
    _clean,
    _clean_args,
    _host_probe,
    _host_probe_args,
    _provision,
    _provision_args,
    _stalls,
    _stalls_args,
    _trial,
    _trial_args,
)
from latency_divide.errors import LatencyDivideError


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
    "percentiles": Command("a population run's percentile table beside Facebook's production "
                           "numbers (Markdown)", _percentiles_args, _percentiles),
    "live-mechanism": Command("the live rate ABR's rungs against the link and the queue before "
                              "its down-switches, per broadcast, with its figure",
                              _live_mechanism_args, _live_mechanism),
    "trace": Command("show a figure's provenance and verify its hashes", _trace_args, _trace),
    "rejudge": Command("list the trials whose health verdict changes under today's bounds "
                       "(in the link's own units)", _rejudge_args, _rejudge),
    "verify": Command("check raw data against dvc.lock (missing or corrupted files)",
                      _verify_args, _verify),
    "migrate": Command("move format-1 trials into the definition layout", _migrate_args,
                       _migrate),
    "repack": Command("repack trials of formats 1-3 into format 4's two files, losslessly "
                      "(--check: rebuild their original files; --indexes: compress the plain "
                      "pack indexes)", _repack_args, _repack),
    "publish": Command("record results/raw in dvc.lock and push it to the published remote",
                       _publish_args, _publish),
    "trial": Command("run one trial (local namespaces, or an SSH testbed with --inventory)",
                     _trial_args, _trial),
    "provision": Command("prepare SSH testbed nodes (packages, our tools)", _provision_args,
                         _provision),
    "stalls": Command("run a command with the stall injector taking the CPUs in bursts (a noisy "
                      "host on demand; tools/hostprobe)", _stalls_args, _stalls),
    "host-probe": Command("what this host's wake-ups cost and how late they come (hostprobe)",
                          _host_probe_args, _host_probe),
    "clean": Command("remove our namespaces and processes left by a killed run", _clean_args,
                     _clean),
    "host-check": Command("measure this host (once per boot) and say what it holds of a run: "
                          "cost factor, trials at once, wall time, links it cannot hold (exit 3)",
                          _host_check_args, _host_check),
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

