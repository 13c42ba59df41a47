"""Subcommands of the testbed and trial stages: ``trial`` (one trial, local or over SSH),
``clean`` (our leftovers: namespaces, records, temporary trial directories, SSH trials),
``provision`` (SSH nodes), ``stalls`` (a command beside the stall injector) and
``host-probe`` (the host probe). Registered in cli.COMMANDS."""

from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path

from latency_divide import limits
from latency_divide.links import buffers
from latency_divide.errors import ConfigError
from latency_divide.paths import RAW
from latency_divide.vocab import CCS, DELAY_CHOICES, DIRECTIONS, ROLE_OF, TOOLS


def _trial_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("household", help="household ID")
    p.add_argument("--direction", required=True, choices=DIRECTIONS)
    p.add_argument("--cc", required=True, choices=CCS,
                   help="the sender's congestion control")
    p.add_argument("--delta", type=float, help="Copa's latency factor δ in (0, 1] (copa only; "
                   "default 0.5)")
    p.add_argument("--duration", type=float, default=60.0, help="transfer length in s (default 60)")
    p.add_argument("--idle", type=float, default=5.0, help="idle ping before the transfer, s")
    p.add_argument("--repetition", type=int, default=1, help="repetition number (default 1)")
    p.add_argument("--qfactor", type=float, default=2.0, help="queue size in BDPs (default 2)")
    p.add_argument("--buffer-model", type=buffers.cli_model, default=buffers.DEFAULT_MODEL,
                   metavar="MODEL",
                   help=f"the FIFO's model (links.buffers; {buffers.ALLOWED}): qfactor x BDP "
                   "(default), the FCC panel's measured buffers (mba-2014) or N ms of queue at "
                   "the link's rate (docs/population.md)")
    p.add_argument("--delay", choices=DELAY_CHOICES, default="auto",
                   help="propagation delay mechanism (default auto: netem if the kernel has it)")
    p.add_argument("--tool", choices=TOOLS, default="tquic-perf")
    p.add_argument("--tool-path", help="traffic tool binary (required for tperf)")
    p.add_argument("--window", type=int, help="receiver window, bytes (default 65536; "
                   "4194304 with --app live, where 65536 caps the bitrate)")
    p.add_argument("--app", choices=("bulk", "live"), default="bulk", help="what the tool sends: "
                   "a bulk transfer (default) or a live video broadcast whose bitrate an ABR "
                   "chooses (tquic-perf; docs/live.md)")
    p.add_argument("--abr", choices=("backlog", "rate"), help="--app live: the ABR, backlog "
                   "(OBS Studio's dynamic bitrate) or rate (Chromium Cast's); default backlog")
    p.add_argument("--seed", type=int, help="--app live: seed of the frame-size jitter "
                   "(default 1)")
    p.add_argument("--qlog", action="store_true",
                   help="tperf on the local testbed: keep the sender's transport RTT samples "
                        "and losses from its qlog (qlog_summary.json; the qlog is removed)")
    p.add_argument("--tool-arg", action="append", default=[], metavar="FLAG",
                   help="an extra flag for both ends of the tool, e.g. --tool-arg=-gso=false "
                        "(repeatable; part of the trial's definition)")
    p.add_argument("--ping-interval", type=float, default=0.2, help="ping interval, s")
    p.add_argument("--queue-interval", type=float, default=0.1,
                   help="queue sampling interval, s (default 0.1, the paper's)")
    p.add_argument("--retries", type=int, default=0, help="retries on transient failures")
    p.add_argument("--out", required=True, help="root of the raw layout; the trial goes to "
                   "OUT/<definition id>/<household>/<direction>/<variant>/rep<r>/")
    p.add_argument("--tool-rt-priority", type=int, default=5, help="SCHED_FIFO priority of "
                   "the tool's two ends, 0-9 (0: the normal scheduler; default 5, below the "
                   "delay line's 10)")
    p.add_argument("--inventory", help="run on an SSH testbed described by this inventory "
                   "(docs/remote-testbed.md) instead of local namespaces")
    p.add_argument("--slice", help="the inventory's slice to use (default: the first)")


def _trial(args) -> int:
    from latency_divide.config import (BULK_WINDOW_BYTES, LIVE_WINDOW_BYTES, ToolSettings,
                                       Variant, app_args)
    from latency_divide.data.households import get_household
    from latency_divide.ops.admission import retries_for, rt_ceiling
    from latency_divide.ops.hostcost import learn_from, spec_rt_cores
    from latency_divide.testbed.runners import interrupt_on_sigterm
    from latency_divide.trial.retry import run_trial_with_retries
    from latency_divide.trial.spec import TrialSpec
    from latency_divide.trial.sweep import trial_variant_name

    if args.cc == "copa":
        delta = 0.5 if args.delta is None else args.delta
        variant = Variant(name=trial_variant_name("copa", delta), cc="copa", delta=delta)
    elif args.delta is not None:
        raise ConfigError(f"--delta {args.delta} is only meaningful with --cc copa")
    else:
        variant = Variant(name=trial_variant_name(args.cc, None), cc=args.cc)
    if args.app == "bulk" and (args.abr is not None or args.seed is not None):
        raise ConfigError("--abr and --seed apply to --app live only")
    app = app_args({"kind": args.app, "abr": args.abr or "backlog",
                    **({"seed": args.seed} if args.seed is not None else {})}
                   if args.app == "live" else None, "--app live")
    window = args.window or (LIVE_WINDOW_BYTES if app else BULK_WINDOW_BYTES)
    try:
        spec = TrialSpec(
            household=get_household(args.household), direction=args.direction, variant=variant,
            repetition=args.repetition, duration_s=args.duration, idle_s=args.idle,
            ping_interval_s=args.ping_interval, queue_interval_s=args.queue_interval,
            qfactor=args.qfactor, buffer_model=args.buffer_model, delay=args.delay,
            tool_rt_priority=args.tool_rt_priority,
            tool=ToolSettings(name=args.tool, path=args.tool_path, window_bytes=window,
                              args=app + tuple(args.tool_arg), qlog=args.qlog))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    limits.check("retries", args.retries, "--retries")
    from latency_divide.testbed import loadgate
    from latency_divide.testbed.startgate import spacing_s

    spacing_s()  # a wrong LATENCY_DIVIDE_START_SPACING: an error before anything starts
    loadgate.mode()  # likewise a wrong LATENCY_DIVIDE_LOAD_GATE

    interrupt_on_sigterm()  # run `finally` blocks (teardown) on SIGTERM too
    from latency_divide.testbed.factory import open_testbed

    with open_testbed(inventory=args.inventory, slice_name=args.slice) as testbed:
        say = functools.partial(print, file=sys.stderr)
        retries = retries_for(spec, args.retries, testbed.kind, log=say)
        d = run_trial_with_retries(spec, args.out, retries=retries, log=say, testbed=testbed,
                                   expected_rt_cores=spec_rt_cores(spec, testbed.kind),
                                   rt_ceiling=rt_ceiling(testbed.kind), learn=learn_from)
    print(d)
    return 0


def _clean_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true",
                   help="also remove namespaces whose owning process is still running")
    p.add_argument("--results", default=str(RAW),
                   help="raw results directory whose abandoned temporary trial directories "
                   "are removed (default results/raw)")
    p.add_argument("--snakemake-dir", default=".snakemake",
                   help="Snakemake's directory whose stale 'incomplete' marks on complete "
                   "trials are removed (default .snakemake)")


def _clean(args) -> int:
    from latency_divide.testbed.clean import clean
    from latency_divide.trial.run import clean_tmp_dirs

    rep = clean(force=args.force)
    rep.tmp_removed = clean_tmp_dirs(Path(args.results), args.force)
    from latency_divide.ops.smkmarks import clear_trial_marks

    smk = Path(os.path.abspath(args.snakemake_dir))  # not resolved: the run's own directory
    marks = clear_trial_marks(smk, smk.parent)
    for ns in rep.removed:
        print(f"removed namespace {ns}")
    for ns in rep.in_use:
        print(f"kept {ns}: its owner is still running (use --force to remove)")
    for r in rep.records_removed:  # owner records, placement records, the start gate's file
        print(f"removed stale state file {r} (no live trial job holds it)")
    for r in rep.restored:
        print(f"restored {r}: no live trial job holds it")
    for d in rep.tmp_removed:
        print(f"removed abandoned temporary trial directory {d}")
    for m in marks:
        print(f"removed Snakemake's stale 'incomplete' mark of the complete trial {m}")
    if not (rep.removed or rep.in_use or rep.records_removed or rep.restored or rep.tmp_removed
            or marks):
        print("nothing to clean")
    for e in rep.errors:
        print(f"error: {e}", file=sys.stderr)
    for w in rep.warnings:
        print(f"warning: {w}", file=sys.stderr)
    from latency_divide.testbed.ssh.clean import clean_remote

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
    p.add_argument("--role", choices=list(ROLE_OF),
                   help="only this node of the slice (default: all four)")
    p.add_argument("--out", default="results/provision", help="sentinel files go to "
                   "OUT/<slice>/<role>.json (default results/provision)")


def _provision(args) -> int:
    from pathlib import Path

    from latency_divide.testbed.inventory import load_inventory
    from latency_divide.testbed.ssh.provision import provision_node, write_sentinel

    inv = load_inventory(args.inventory)
    slices = [inv.slice(args.slice)] if args.slice else list(inv.slices)
    for sl in slices:
        for role in [args.role] if args.role else list(ROLE_OF):
            facts = provision_node(inv, sl.name, role, log=lambda m: print(m, file=sys.stderr))
            out = Path(args.out) / sl.name / f"{role}.json"
            write_sentinel(out, facts)
            print(out)
    return 0


def _stalls_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--duty", type=float, help="the fraction of each CPU the bursts take, in "
                   "(0, 0.5] (default 0.015: issue 57's noisy host)")
    p.add_argument("--short", metavar="LO..HI", help="short bursts' lengths (default 300us..2ms)")
    p.add_argument("--long", metavar="LO..HI", help="long bursts' lengths (default 5ms..25ms)")
    p.add_argument("--long-fraction", type=float, metavar="F",
                   help="the probability that a burst is long (default 0.1)")
    p.add_argument("--seed", type=int, help="the bursts' seed (default: from the clock)")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]",
                   help="the command run while the injector steals the CPUs")


def _stalls(args) -> int:
    """COMMAND with stallinject beside it; the command's exit status (128 + N when a signal
    N ended it, 130 on Ctrl-C); the injector stops in ``finally``."""
    import signal
    import subprocess

    from latency_divide.testbed.runners import interrupt_on_sigterm
    from latency_divide.testbed.stalls import UNDER_ENV, injecting

    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        raise ConfigError("stalls: no command given (latency-divide stalls [OPTIONS] -- COMMAND "
                          "[ARGS...])")
    params = {"duty": args.duty, "short": args.short, "long": args.long,
              "long_fraction": args.long_fraction, "seed": args.seed}
    interrupt_on_sigterm()
    with injecting(**params) as inj:
        child = None
        try:
            try:
                child = subprocess.Popen(cmd, env={**os.environ,
                                                   UNDER_ENV: " ".join(inj.argv[1:])})
            except OSError as e:
                raise ConfigError(f"stalls: cannot run {cmd[0]!r}: {e}") from None
            # said once COMMAND runs: a Ctrl-C from then on reaches the wait below
            print(f"stalls: stallinject pid {inj.pid} ({' '.join(inj.argv[1:])}); command pid "
                  f"{child.pid}", file=sys.stderr, flush=True)
            rc = child.wait()
        except KeyboardInterrupt:
            if child is not None:
                child.send_signal(signal.SIGINT)
                try:
                    child.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
            rc = 130
    print(f"stalls: {' '.join(f'{k}={v}' for k, v in inj.done.items())}", file=sys.stderr)
    return 128 - rc if rc < 0 else rc


def _host_probe_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seconds", type=float, default=20.0,
                   help="the measurement's length, 1 to 600 s (default 20)")
    p.add_argument("--json", action="store_true", help="hostprobe's JSON document (schema "
                   "hostprobe/1, tools/hostprobe/README.md) instead of its table")


def _host_probe(args) -> int:
    from latency_divide.testbed.runners import LocalRunner
    from latency_divide.testbed.stalls import hostprobe_argv

    res = LocalRunner().run(hostprobe_argv(args.seconds, args.json), check=False,
                            timeout=args.seconds + 60)
    sys.stdout.write(res.stdout)
    sys.stderr.write(res.stderr)
    return res.returncode
