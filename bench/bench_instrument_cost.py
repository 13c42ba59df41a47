#!/usr/bin/env python3
"""Where the CPU of a trial goes, per component and per frame: the instrument's cost table
(issue 40, step 1), the baseline every change to the delay line and the tool ends is measured
against.

Each run is one real trial (`latency-divide trial`'s own code path: namespaces, htb+bfifo, the
delay line, tquic-perf, ping, the queue sampler, the health watcher; the testbed tears it all
down in its `finally`), on a household-free link: SYMMETRIC, both directions at RATE Mbit/s,
RTT --rtt-ms, a 2 x BDP bfifo (EXPERIMENT.md's formulas via links.plan.link_plan); the
transfer is a DOWNLINK Cubic bulk transfer with the receiver window unbound (--window,
16 MiB). The job is a child of this bench (a shim that gives `latency-divide trial` the
synthetic household); the bench finds the trial's processes in the job's process tree:

  sender, receiver   the two tquic-perf ends (`-mode server` / `-mode client`)
  delayline          the delay line (and each of its threads, by thread name)
  ping, qsampler     the concurrent ping and the queue sampler (tools/qsampler, or
                     python -m ...qsampler with --qsampler python)
  watcher            the health watcher: the trial job's threads other than its main thread
                     (testbed.schedwatch.SchedWatch is a thread of the job)
  job                the trial job's main thread (Python: set-up, waiting, teardown)

Over a steady window of the transfer (from --skip s after the receiver starts to 2 s before
its end) it reads, before and after, every thread's /proc/PID/task/TID/{schedstat,stat,status}
and the delay node's interface counters (/proc/<delayline>/net/dev: frames the delay line
forwarded = tx packets of both delay ports), and prints per component:

  cores       CPU seconds (schedstat, ns) per second of the window
  c/Mbit      cores per Mbit/s of the trial's goodput (the receiver's summary)
  us/frame    CPU µs per frame forwarded by the delay line (both directions together)
  cs/frame    context switches per frame: voluntary + involuntary (status)
  sc/frame    system calls per frame, counted by `perf stat -e raw_syscalls:sys_enter
              --per-thread` over the same window (a tracepoint counter, about 0.1 µs per
              syscall on this host; --no-syscalls leaves it out; "-" when perf is missing)
  sys%        system share of the CPU (stat utime/stime ticks)

and a `host` row: every CPU's busy time over the same window (/proc/stat: the CPUs minus their
exact idle, iowait and steal time), the kernel's threads (ksoftirqd, NAPI threads) included,
which no process of the trial owns. --rx-napi gro|threaded switches GRO (and threaded NAPI)
on at the veths the delay line sends into, as the trial starts (an experiment: trials run
with it off; docs/emulation.md, "Where the rest goes");

and for the delay line its whole-run frames and CPU (its `delayline stats`/`usage` lines in
delayline.log: µs per frame over its life) and release lateness p50/p99 per direction. Rates
in --whole-rates (default 1 and 5) run as full 60 s trials, whose total CPU (the job and every
process it reaped, os.wait4) is the issue's "CPU of a 60 s trial on a link of 5 Mbit/s or
less" (target <= 2 s median); their steady windows give the per-frame rows too.

--json OUT writes every run and the medians (atomically); --baseline FILE prints the new
medians beside a baseline's and the ratio new/base. --delayline and --tquic-perf measure
other builds (default target/release/...): the job sees them through LATENCY_DIVIDE_ROOT
(paths.repo_root), pointed at a temporary root whose target/release links to them.

Needs root, perf (optional). About 10 minutes with the defaults:

    .venv/bin/python bench/bench_instrument_cost.py --json /tmp/cost.json
    .venv/bin/python bench/bench_instrument_cost.py --delayline /tmp/new/delayline \\
        --baseline bench/baselines/instrument-cost-before.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from _common import calibration_line, host_calibration  # noqa: E402
from latency_divide.errors import ConfigError  # noqa: E402
from latency_divide.fsio import write_json_atomic  # noqa: E402
from latency_divide.paths import git_revision  # noqa: E402
from latency_divide.testbed.haltpoll import ENV as HALT_POLL_ENV  # noqa: E402
from latency_divide.testbed.haltpoll import halt_polling, wanted_ns  # noqa: E402
from latency_divide.testbed.netns import DELAY_PORTS  # noqa: E402
from latency_divide.testbed.schedwatch import psi_avg10, read_psi_some_us  # noqa: E402

FORMAT = "bench-instrument-cost/1"
COMPONENTS = ("sender", "receiver", "delayline", "ping", "qsampler", "watcher", "job")
#: The real-time work of a trial (ops.admission.rt_cores): what carries the packets.
RT_COMPONENTS = ("sender", "receiver", "delayline")
CLK_TCK = os.sysconf("SC_CLK_TCK")
#: Issue 40's targets (for the summary's last column).
TARGETS = {"dl_wakeups_per_frame": {56: 0.5}, "dl_us_per_frame": {56: 12.0, 300: 5.0},
           "rt_cores_per_mbit": {56: 0.006, 300: 0.004}, "trial_cpu_s": {1: 2.0, 5: 2.0}}

# The trial job: `latency-divide trial` with a household-free link (argv: RATE_KBIT RTT_MS
# UNIT_ID, then the CLI's own arguments after "trial"). Same code path as the CLI's.
JOB_SHIM = r"""
import dataclasses, sys
from latency_divide.data import households
rate, rtt, unit = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
base = households.get_household(27337)
synthetic = dataclasses.replace(base, unit_id=unit, upload_kbps=rate, download_kbps=rate,
                                rtt_ms=rtt, isp="synthetic (bench_instrument_cost)",
                                price_bucket=None)
households.get_household = lambda hid: synthetic
from latency_divide.cli import main
sys.exit(main(["trial", str(unit), *sys.argv[4:]]))
"""


# ---------------------------------------------------------------- /proc readers (pure-ish)

def read_tasks(pid: int) -> dict[int, dict]:
    """Per thread of ``pid``: name, ns on a CPU, user/system ticks, context switches."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        base = f"/proc/{pid}/task/{tid}"
        try:
            with open(f"{base}/schedstat") as f:
                run_ns = int(f.read().split()[0])
            with open(f"{base}/stat") as f:
                st = f.read().rsplit(")", 1)[1].split()
            with open(f"{base}/status") as f:
                status = dict(ln.split(":", 1) for ln in f if ":" in ln)
            with open(f"{base}/comm") as f:
                comm = f.read().strip()
        except (OSError, ValueError, IndexError):
            continue
        out[int(tid)] = {"comm": comm, "run_ns": run_ns, "utime": int(st[11]),
                         "stime": int(st[12]),
                         "vcs": int(status["voluntary_ctxt_switches"]),
                         "ivcs": int(status["nonvoluntary_ctxt_switches"])}
    return out


def task_delta(a: dict[int, dict], b: dict[int, dict]) -> dict[int, dict]:
    """Counters of each thread alive at the end of the window, minus the start (a thread
    born inside the window counts from zero)."""
    zero = {"run_ns": 0, "utime": 0, "stime": 0, "vcs": 0, "ivcs": 0}
    return {tid: {"comm": v["comm"], **{k: v[k] - a.get(tid, zero)[k] for k in zero}}
            for tid, v in b.items()}


def read_net_dev(pid: int) -> dict[str, dict[str, int]]:
    """The interface counters of ``pid``'s network namespace (/proc/PID/net/dev)."""
    out = {}
    with open(f"/proc/{pid}/net/dev") as f:
        for line in f.readlines()[2:]:
            name, rest = line.split(":", 1)
            v = [int(x) for x in rest.split()]
            out[name.strip()] = {"rx_bytes": v[0], "rx_packets": v[1], "tx_bytes": v[8],
                                 "tx_packets": v[9]}
    return out


def children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(name))
    return kids


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def classify(argv: list[str]) -> str | None:
    """Which component of a trial a process is, from its command line."""
    if not argv:
        return None
    exe = Path(argv[0]).name
    if exe == "tquic-perf" and "-mode" in argv:
        return {"server": "sender", "client": "receiver"}.get(argv[argv.index("-mode") + 1])
    if exe == "delayline":
        return "delayline"
    if exe == "ping":
        return "ping"
    if exe == "qsampler" or "latency_divide.testbed.qsampler" in argv:
        return "qsampler"
    return None


def trial_processes(job_pid: int) -> dict[str, int]:
    """The trial's components among the job's descendants, by name."""
    kids, found, todo = children_map(), {}, [job_pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            todo.append(c)
            name = classify(cmdline(c))
            if name:
                found[name] = c
    return found


def parse_perf_per_thread(text: str, seconds: float) -> dict[int, float]:
    """`perf stat -x, --per-thread` lines (``comm-tid,count,,event,...``) counted over
    ``seconds`` -> system calls per second of each thread. (The line's own time field is the
    thread's time on a CPU, not the wall time: a task-bound counter runs only with its task.)"""
    out = {}
    for line in text.splitlines():
        f = line.split(",")
        if len(f) < 4 or "raw_syscalls" not in f[3] or not f[1].strip().isdigit():
            continue
        out[int(f[0].rsplit("-", 1)[1])] = int(f[1]) / seconds
    return out


def parse_delayline_log(text: str) -> dict:
    """The delay line's exit lines (``delayline stats ...``, ``delayline usage ...``) as
    numbers: frames both ways, cpu_s, wall_s, late_*_us (None for ``na``)."""
    out: dict = {}
    stats = re.search(r"delayline stats a->b frames=(\d+).*?b->a frames=(\d+)", text)
    if stats:
        out["frames"] = int(stats[1]) + int(stats[2])
    usage = next((ln for ln in text.splitlines() if ln.startswith("delayline usage")), None)
    if usage:
        for k, v in re.findall(r"(\w+)=(\S+)", usage):
            try:
                out[k] = float(v)
            except ValueError:
                out[k] = None if v == "na" else v
    return out


# ---------------------------------------------------------------- one run

def _qsampler_arg(v: str) -> Path | None:
    return None if v == "python" else Path(v)


@contextmanager
def tool_root(delayline: Path, tquic_perf: Path, qsampler: Path | None):
    """A temporary LATENCY_DIVIDE_ROOT whose target/release has the binaries (without a
    qsampler, trials sample the queue with the Python module)."""
    d = Path(tempfile.mkdtemp(prefix="ld-bench-cost-root-"))
    try:
        rel = d / "target" / "release"
        rel.mkdir(parents=True)
        (rel / "delayline").symlink_to(delayline.resolve())
        (rel / "tquic-perf").symlink_to(tquic_perf.resolve())
        if qsampler is not None:
            (rel / "qsampler").symlink_to(qsampler.resolve())
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def window_figures(a: dict, b: dict, wall_s: float, syscalls: dict[int, float] | None,
                   goodput_mbit: float) -> dict:
    """Per component (and per delay-line thread) figures of one window from two snapshots."""
    frames_per_s = sum(b["net"][p]["tx_packets"] - a["net"][p]["tx_packets"]
                       for p in DELAY_PORTS) / wall_s
    wire_mbit = max(b["net"][p]["tx_bytes"] - a["net"][p]["tx_bytes"]
                    for p in DELAY_PORTS) * 8 / wall_s / 1e6
    frames = frames_per_s * wall_s
    if frames <= 0:
        raise RuntimeError("the delay line forwarded no frame in the window")

    def figures(tasks: dict[int, dict]) -> dict:
        run_s = sum(t["run_ns"] for t in tasks.values()) / 1e9
        ticks = sum(t["utime"] + t["stime"] for t in tasks.values())
        sc = None
        if syscalls is not None:
            sc = sum(syscalls.get(tid, 0.0) for tid in tasks) / frames_per_s
        return {"cores": run_s / wall_s,
                "cores_per_mbit": run_s / wall_s / goodput_mbit if goodput_mbit else None,
                "us_per_frame": run_s * 1e6 / frames if frames else None,
                "vcs_per_frame": sum(t["vcs"] for t in tasks.values()) / frames,
                "ivcs_per_frame": sum(t["ivcs"] for t in tasks.values()) / frames,
                "cs_per_frame": sum(t["vcs"] + t["ivcs"] for t in tasks.values()) / frames,
                "syscalls_per_frame": sc,
                "sys_pct": 100.0 * sum(t["stime"] for t in tasks.values()) / ticks
                if ticks else None}

    comps, threads = {}, {}
    for name in COMPONENTS:
        if name not in b["tasks"]:
            continue
        d = task_delta(a["tasks"][name], b["tasks"][name])
        comps[name] = figures(d)
        if name == "delayline":
            for comm in sorted({t["comm"] for t in d.values()}):
                threads[comm] = figures({tid: t for tid, t in d.items() if t["comm"] == comm})
    psi = (100.0 * (b["psi_us"] - a["psi_us"]) / 1e6 / wall_s
           if a["psi_us"] is not None and b["psi_us"] is not None else None)
    hz = os.sysconf("SC_CLK_TCK")
    host_cores = os.cpu_count() - (b["host_ticks"][0] - a["host_ticks"][0]) / hz / wall_s
    return {"window_s": wall_s, "frames_per_s": frames_per_s, "wire_mbit": wire_mbit,
            "window_cpu_pressure_pct": psi, "host_cores": host_cores,
            "host_softirq_cores": (b["host_ticks"][1] - a["host_ticks"][1]) / hz / wall_s,
            "host_us_per_frame": host_cores * 1e6 / frames_per_s,
            "components": comps, "delayline_threads": threads}


def snapshot(procs: dict[str, int], job_pid: int) -> dict:
    tasks = {name: read_tasks(pid) for name, pid in procs.items()}
    job = read_tasks(job_pid)
    tasks["job"] = {tid: t for tid, t in job.items() if tid == job_pid}
    tasks["watcher"] = {tid: t for tid, t in job.items() if tid != job_pid}
    return {"t": time.monotonic(), "tasks": tasks, "net": read_net_dev(procs["delayline"]),
            "psi_us": read_psi_some_us(), "host_ticks": read_host_ticks()}


def read_host_ticks() -> tuple[int, int]:
    """(not busy, softirq) clock ticks summed over the host's CPUs (/proc/stat's first line;
    not busy = idle + iowait + steal). The idle times are kept exactly by the kernel (NO_HZ),
    where its busy counters are sampled at ticks that a CPU asleep between short bursts does
    not take: the host's busy cores are the CPUs minus the not-busy ones, every process
    and the kernel's own threads (ksoftirqd, NAPI threads) included."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return v[3] + v[4] + v[7], v[6]


def run_one(rate_mbit: float, seconds: float, args, root: Path, out: Path, log) -> dict:
    """One trial; the window's figures, the delay line's own lines, the whole trial's CPU."""
    rate_kbit = int(round(rate_mbit * 1000))
    unit = 9_000_000 + rate_kbit  # not a household of the data set
    argv = [sys.executable, "-c", JOB_SHIM, str(rate_kbit), f"{args.rtt_ms:g}", str(unit),
            "--direction", "downlink", "--cc", "cubic", "--duration", f"{seconds:g}",
            "--idle", f"{args.idle:g}", "--window", str(args.window), "--retries", "0",
            "--delay", "delayline", "--out", str(out),
            *(f"--tool-arg={t}" for t in args.tool_arg)]
    env = {**os.environ, "LATENCY_DIVIDE_ROOT": str(root), **trial_env(args.rx_napi)}
    waited = wait_calm(args.calm_pct, args.calm_max_s)
    row = {"rate_mbit": rate_mbit, "seconds": seconds, "loadavg_start": list(os.getloadavg()),
           "psi_avg10_start": psi_avg10(), "calm_wait_s": round(waited, 1)}
    errf = out.with_suffix(".job.log")
    out.mkdir(parents=True)
    t_start = time.monotonic()
    job = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=open(errf, "w"),
                           cwd=ROOT)
    perf = None
    try:
        procs: dict[str, int] = {}
        deadline = time.monotonic() + args.idle + 60
        while "receiver" not in procs or "delayline" not in procs:
            if job.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the trial job ended or stalled before its receiver "
                                   f"started: {errf.read_text()[-600:]}")
            time.sleep(0.05)
            procs = trial_processes(job.pid)
        t_rcv = time.monotonic()
        row["rx_napi"] = set_rx_napi(procs["delayline"], args.rx_napi)
        missing = [c for c in ("sender", "ping", "qsampler") if c not in procs]
        if missing:
            raise RuntimeError(f"not found in the trial's process tree: {', '.join(missing)}")
        skip = min(args.skip, seconds / 4)
        win = seconds - skip - 2.0
        if win < 2.0:
            raise RuntimeError(f"--seconds {seconds:g}: too short for a window after "
                               f"--skip {skip:g} s")
        time.sleep(max(0.0, t_rcv + skip - time.monotonic()))
        a = snapshot(procs, job.pid)
        perf_out = out.with_suffix(".perf.csv")
        if args.syscalls:
            pids = [*procs.values(), job.pid]
            perf = subprocess.Popen(["perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter",
                                     "--per-thread", "-p", ",".join(map(str, pids)),
                                     "-o", str(perf_out), "--", "sleep", f"{win:g}"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(max(0.0, a["t"] + win - time.monotonic()))
        b = snapshot(procs, job.pid)
        syscalls = None
        if perf is not None:
            perf.wait(timeout=30)
            perf = None
            syscalls = (parse_perf_per_thread(perf_out.read_text(), win)
                        if perf_out.exists() else None)
        _, status, ru = os.wait4(job.pid, 0)
        job.returncode = os.waitstatus_to_exitcode(status)
        total_cpu = ru.ru_utime + ru.ru_stime
        wall = time.monotonic() - t_start
    finally:
        if perf is not None and perf.poll() is None:
            perf.send_signal(signal.SIGINT)
            perf.wait(timeout=10)
        if job.returncode is None and job.poll() is None:
            # the CLI turns SIGTERM into an exception: its testbed tears down in `finally`
            job.send_signal(signal.SIGTERM)
            try:
                job.wait(timeout=60)
            except subprocess.TimeoutExpired:
                job.kill()
                job.wait()
    if job.returncode != 0:
        raise RuntimeError(f"trial job exited {job.returncode}: {errf.read_text()[-800:]}")
    trial_dir = Path(job.stdout.read().decode().strip().splitlines()[-1])
    from latency_divide.analysis.metrics import summarize_trial
    from latency_divide.trial import rawio
    from latency_divide.trial.layout import DELAYLINE_LOG

    summary = summarize_trial(trial_dir)
    meta = rawio.full_meta(trial_dir)
    goodput = float(summary["goodput_kbps"]) / 1000
    dl = parse_delayline_log(rawio.read_text(trial_dir, DELAYLINE_LOG))
    row.update(window_figures(a, b, b["t"] - a["t"], syscalls, goodput))
    row.update({
        "goodput_mbit": goodput, "health": meta["health"]["verdict"],
        "health_failed": list(meta["health"].get("reasons") or []),
        "instrument": meta.get("instrument", {}).get("generation"),
        "trial_cpu_s": total_cpu, "trial_wall_s": wall, "meta_cpu_s": meta["cpu_s"],
        "delayline_log": dl,
        "dl_whole_us_per_frame": (dl["cpu_s"] * 1e6 / dl["frames"]
                                  if dl.get("frames") and dl.get("cpu_s") is not None else None),
        "loadavg_end": list(os.getloadavg())})
    c = row["components"]
    row["rt_cores_per_mbit"] = sum(c[k]["cores"] for k in RT_COMPONENTS) / goodput
    failed = f" ({'; '.join(row['health_failed'])})" if row["health_failed"] else ""
    log(f"  {rate_mbit:g} Mbit/s x {seconds:g} s: goodput {goodput:.2f} Mbit/s, "
        f"{row['frames_per_s']:.0f} frames/s, delay line "
        f"{c['delayline']['us_per_frame']:.1f} µs/frame, "
        f"{c['delayline']['cs_per_frame']:.2f} cs/frame; trial CPU {total_cpu:.2f} s; "
        f"health {row['health']}{failed}"
        f"; instrument {row['instrument']}; load {row['loadavg_start'][0]:.2f}", flush=True)
    return row


#: --rx-napi: how the veths the delay line sends into take its frames (testbed.netns.RX_PEERS):
#: "auto" as trials run (threaded above testbed.rxnapi.RX_NAPI_FROM_MBIT, else the kernel's
#: default, where the receiving stack runs inside the delay line's sendmmsg); "off" and
#: "threaded" force it (the trial's LATENCY_DIVIDE_RX_NAPI); "gro" turns GRO on there once the
#: trial runs, which gives the veth a NAPI poll of its own, still run in the sender's softirq.
RX_NAPI = ("auto", "off", "gro", "threaded")


def set_rx_napi(delayline_pid: int, mode: str) -> list[str]:
    """For ``gro``: GRO on the receiving veths of the trial whose delay line is
    ``delayline_pid`` (its namespaces by the delay node's name, `ip netns identify`); what was
    done, as command lines. The other modes are the trial's own (trial_env)."""
    if mode != "gro":
        return []
    from latency_divide.testbed.netns import ns_name, parse_ns_name, rx_napi_commands
    from latency_divide.testbed.runners import LocalRunner

    name = LocalRunner().run(["ip", "netns", "identify", str(delayline_pid)]).stdout.strip()
    parsed = parse_ns_name(name)
    if parsed is None:
        raise RuntimeError(f"--rx-napi {mode}: the delay line {delayline_pid} runs in "
                           f"namespace {name!r}, not one of a trial of ours")
    done = []
    for node, argv, stdin in rx_napi_commands(mode):
        r = LocalRunner(ns_name(parsed[0], node))
        r.run(argv, input=stdin)
        done.append(" ".join(r.wrap(argv)))
    return done


def trial_env(mode: str) -> dict[str, str]:
    """The trial job's LATENCY_DIVIDE_RX_NAPI for ``--rx-napi mode`` (gro: off, then GRO)."""
    from latency_divide.testbed.local import RX_NAPI_ENV

    return {RX_NAPI_ENV: "off" if mode == "gro" else mode}


def wait_calm(pct: float, max_s: float = 60.0) -> float:
    """Wait (at most ``max_s``) until the host's CPU pressure (PSI some avg10) is below ``pct``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < max_s:
        v = psi_avg10()
        if v is None or v < pct:
            break
        time.sleep(2.0)
    return time.monotonic() - t0


# ---------------------------------------------------------------- medians and tables

def _med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def medians(runs: list[dict]) -> dict:
    """Per rate: the median of every figure over its runs (flat keys)."""
    out: dict[str, dict] = {}
    for rate in sorted({r["rate_mbit"] for r in runs}):
        rs = [r for r in runs if r["rate_mbit"] == rate]
        m = {"n": len(rs), "seconds": rs[0]["seconds"]}
        m["loadavg_start"] = _med([r["loadavg_start"][0] for r in rs])
        for k in ("goodput_mbit", "frames_per_s", "wire_mbit", "window_s", "trial_cpu_s",
                  "window_cpu_pressure_pct",
                  "trial_wall_s", "rt_cores_per_mbit", "dl_whole_us_per_frame",
                  "host_cores", "host_softirq_cores", "host_us_per_frame"):
            m[k] = _med([r.get(k) for r in rs])
        for k in ("late_ab_p50_us", "late_ab_p99_us", "late_ba_p50_us", "late_ba_p99_us"):
            m[f"dl_{k}"] = _med([r["delayline_log"].get(k) for r in rs])
        m["health"] = ",".join(r["health"] for r in rs)
        for c in COMPONENTS:
            for f in ("cores", "cores_per_mbit", "us_per_frame", "vcs_per_frame",
                      "ivcs_per_frame", "cs_per_frame", "syscalls_per_frame", "sys_pct"):
                m[f"{c}/{f}"] = _med([r["components"].get(c, {}).get(f) for r in rs])
        for th in sorted({t for r in rs for t in r["delayline_threads"]}):
            for f in ("cores", "us_per_frame", "vcs_per_frame", "ivcs_per_frame",
                      "syscalls_per_frame", "sys_pct"):
                m[f"dl-thread:{th}/{f}"] = _med([r["delayline_threads"].get(th, {}).get(f)
                                                 for r in rs])
        for comp in sorted({k for r in rs for k in r["meta_cpu_s"]}):
            m[f"meta_cpu_s/{comp}"] = _med([r["meta_cpu_s"].get(comp) for r in rs])
        out[f"{rate:g}"] = m
    return out


def _f(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def print_tables(med: dict) -> None:
    for rate, m in med.items():
        print(f"\n== {rate} Mbit/s link (symmetric), downlink Cubic, {m['n']} runs of "
              f"{m['seconds']:g} s: goodput {_f(m['goodput_mbit'], '.2f')} Mbit/s, "
              f"{_f(m['frames_per_s'], ',.0f')} frames/s forwarded (both ways), window "
              f"{_f(m['window_s'], '.0f')} s; health {m['health']}; host: load "
              f"{_f(m['loadavg_start'], '.1f')} at start, CPU pressure "
              f"{_f(m['window_cpu_pressure_pct'], '.0f')} % in the window ==")
        print(f"{'component':16s} {'cores':>7s} {'c/Mbit':>8s} {'us/frame':>9s} "
              f"{'vcs/fr':>7s} {'ivcs/fr':>7s} {'sc/frame':>8s} {'sys%':>5s}")
        rows = [(c, c) for c in COMPONENTS]
        ths = sorted({k.split("/")[0].split(":", 1)[1] for k in m if k.startswith("dl-thread:")})
        at = rows.index(("delayline", "delayline")) + 1
        rows[at:at] = [(f"  {t}", f"dl-thread:{t}") for t in ths]
        for label, key in rows:
            if m.get(f"{key}/cores") is None:
                continue
            print(f"{label:16s} {_f(m[f'{key}/cores'], '7.4f')} "
                  f"{_f(m.get(f'{key}/cores_per_mbit'), '8.5f')} "
                  f"{_f(m[f'{key}/us_per_frame'], '9.2f')} {_f(m[f'{key}/vcs_per_frame'], '7.3f')} "
                  f"{_f(m[f'{key}/ivcs_per_frame'], '7.3f')} "
                  f"{_f(m[f'{key}/syscalls_per_frame'], '8.2f')} {_f(m[f'{key}/sys_pct'], '5.0f')}")
        tot = sum(m[f"{c}/cores"] or 0.0 for c in COMPONENTS)
        print(f"{'all':16s} {tot:7.4f} "
              f"{_f(tot / m['goodput_mbit'] if m['goodput_mbit'] else None, '8.5f')}"
              f"   real-time (sender+receiver+delayline): "
              f"{_f(m['rt_cores_per_mbit'], '.5f')} cores/Mbit")
        host = m.get("host_cores")
        host_mbit = host / m["goodput_mbit"] if host is not None and m["goodput_mbit"] else None
        print(f"{'host':16s} {_f(host, '7.4f')} {_f(host_mbit, '8.5f')} "
              f"{_f(m.get('host_us_per_frame'), '9.2f')}   every CPU busy (/proc/stat), the "
              f"kernel's threads included; softirq {_f(m.get('host_softirq_cores'), '.3f')} cores")
        print(f"delay line over its life: {_f(m['dl_whole_us_per_frame'], '.1f')} µs/frame; "
              f"release lateness a->b p50/p99 {_f(m['dl_late_ab_p50_us'], '.0f')}/"
              f"{_f(m['dl_late_ab_p99_us'], '.0f')} µs, b->a {_f(m['dl_late_ba_p50_us'], '.0f')}/"
              f"{_f(m['dl_late_ba_p99_us'], '.0f')} µs")
        meta = {k.split("/", 1)[1]: v for k, v in m.items() if k.startswith("meta_cpu_s/")}
        print(f"whole trial ({m['seconds']:g} s transfer): {_f(m['trial_cpu_s'], '.2f')} CPU s "
              f"(the job and all it reaped), wall {_f(m['trial_wall_s'], '.1f')} s; meta.json "
              "cpu_s: " + ", ".join(f"{k} {v:.2f}" for k, v in meta.items() if v is not None))

    print("\n== summary (medians) and issue 40's targets ==")
    print(f"{'Mbit/s':>6s} {'goodput':>8s} {'dl us/fr':>8s} {'dl cs/fr':>8s} {'dl vcs/fr':>9s} "
          f"{'dl sc/fr':>8s} {'rt c/Mbit':>9s} {'late p99':>8s} {'trial s':>8s}  targets")
    for rate, m in med.items():
        r = float(rate)
        tg = []
        for key, per in TARGETS.items():
            if r in per:
                tg.append(f"{key}<={per[r]:g}")
        p99s = [v for v in (m["dl_late_ab_p99_us"], m["dl_late_ba_p99_us"]) if v is not None]
        p99 = max(p99s) if p99s else None
        trial = m["trial_cpu_s"] if m["seconds"] >= 60 else None
        print(f"{rate:>6s} {_f(m['goodput_mbit'], '8.2f')} {_f(m['delayline/us_per_frame'], '8.2f')} "
              f"{_f(m['delayline/cs_per_frame'], '8.3f')} {_f(m['delayline/vcs_per_frame'], '9.3f')} "
              f"{_f(m['delayline/syscalls_per_frame'], '8.2f')} "
              f"{_f(m['rt_cores_per_mbit'], '9.5f')} {_f(p99, '8.0f')} {_f(trial, '8.2f')}  "
              + " ".join(tg))
    print("dl = delay line; per frame = per frame it forwarded (both directions); trial s = "
          "CPU of the whole trial (rates run as 60 s trials only); late p99 = the larger "
          "direction's median p99 release lateness, µs")


COMPARE = ("goodput_mbit", "delayline/us_per_frame", "delayline/cs_per_frame",
           "delayline/vcs_per_frame", "delayline/syscalls_per_frame", "dl_whole_us_per_frame",
           "dl_late_ab_p99_us", "dl_late_ba_p99_us", "rt_cores_per_mbit",
           *(f"{c}/cores_per_mbit" for c in COMPONENTS), "sender/syscalls_per_frame",
           "receiver/syscalls_per_frame", "host_us_per_frame", "trial_cpu_s")


def print_baseline(med: dict, base_path: Path) -> None:
    base = json.loads(base_path.read_text())
    bmed = base.get("medians", {})
    print(f"\n== against the baseline {base_path} ({base.get('created_at', '?')}, delay line "
          f"{base.get('binaries', {}).get('delayline', {}).get('sha256', '?')[:12]}"
          + (f"; {base['label']}" if base.get("label") else "") + ") ==")
    print(f"{'Mbit/s':>6s} {'figure':32s} {'new':>10s} {'baseline':>10s} {'new/base':>8s}")
    for rate, m in med.items():
        b = bmed.get(rate)
        if b is None:
            print(f"{rate:>6s} (not in the baseline)")
            continue
        for k in COMPARE:
            if k == "trial_cpu_s" and m["seconds"] < 60:
                continue
            new, old = m.get(k), b.get(k)
            ratio = new / old if new is not None and old else None
            print(f"{rate:>6s} {k:32s} {_f(new, '10.4g')} {_f(old, '10.4g')} {_f(ratio, '8.3f')}")


# ---------------------------------------------------------------- main

def sha256(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]))

    def rates(s: str) -> list[float]:
        try:
            out = [float(x) for x in s.split(",") if x]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{s!r}: comma-separated Mbit/s, e.g. 1,5,56,300")
        if any(not 0.1 <= x <= 1000 for x in out):
            raise argparse.ArgumentTypeError(f"{s!r}: each rate 0.1..1000 Mbit/s")
        return out

    p.add_argument("--rates", type=rates, default=[1.0, 5.0, 56.0, 300.0],
                   help="link rates, Mbit/s, both directions (default 1,5,56,300)")
    p.add_argument("--whole-rates", type=rates, default=[1.0, 5.0],
                   help="rates run as whole 60 s trials (their total CPU is the issue's "
                   "target; default 1,5)")
    p.add_argument("--seconds", type=float, default=20.0,
                   help="transfer length of the other rates, s (default 20)")
    p.add_argument("--whole-seconds", type=float, default=60.0,
                   help="transfer length of --whole-rates, s (default 60)")
    p.add_argument("--repeats", type=int, default=3, help="runs per rate (default 3)")
    p.add_argument("--rtt-ms", type=float, default=20.0, help="the link's RTT (default 20)")
    p.add_argument("--window", type=int, default=16 << 20,
                   help="receiver window, bytes (default 16 MiB: unbound)")
    p.add_argument("--idle", type=float, default=5.0, help="idle ping before the transfer, s")
    p.add_argument("--skip", type=float, default=4.0,
                   help="s of the transfer before the window (slow start; default 4)")
    p.add_argument("--no-syscalls", dest="syscalls", action="store_false",
                   help="do not count system calls with perf")
    p.add_argument("--calm-pct", type=float, default=20.0,
                   help="before each run wait (<= 60 s) until PSI cpu some avg10 < this")
    p.add_argument("--calm-max-s", type=float, default=60.0,
                   help="the longest wait for --calm-pct, s (default 60)")
    p.add_argument("--delayline", type=Path, default=ROOT / "target" / "release" / "delayline",
                   help="delay line binary (default target/release/delayline)")
    p.add_argument("--tquic-perf", type=Path, default=ROOT / "target" / "release" / "tquic-perf",
                   help="tquic-perf binary (default target/release/tquic-perf)")
    p.add_argument("--qsampler", type=_qsampler_arg, default=ROOT / "target" / "release" /
                   "qsampler", metavar="PATH|python",
                   help="queue sampler binary (default target/release/qsampler); python: the "
                   "Python module, as trials ran before tools/qsampler")
    p.add_argument("--rx-napi", choices=RX_NAPI, default="auto",
                   help="the receiving veths' NAPI: auto (as trials run: threaded above "
                   "250 Mbit/s for Cubic), off, gro, threaded (see RX_NAPI)")
    p.add_argument("--halt-poll", metavar="NS|off",
                   help="the host's guest halt polling while the bench runs (calibration and "
                   f"trials): as trials set it ({HALT_POLL_ENV}, testbed.haltpoll; default "
                   "200000 ns where the host has the haltpoll governor), or off")
    p.add_argument("--tool-arg", action="append", default=[], metavar="FLAG",
                   help="an extra flag for both tool ends (latency-divide trial --tool-arg), "
                   "e.g. --tool-arg=-gro=off; repeatable")
    p.add_argument("--json", type=Path, help="write every run and the medians here (atomic)")
    p.add_argument("--baseline", type=Path, help="a --json file to print the new figures beside")
    p.add_argument("--keep", type=Path, help="keep the trials under this directory")
    p.add_argument("--label", default="",
                   help="what was measured, stored in --json (e.g. where the binaries came from)")
    a = p.parse_args(argv)
    if not a.rates:
        p.error("--rates: at least one rate")
    if not 1 <= a.repeats <= 50:
        p.error(f"--repeats {a.repeats}: allowed 1..50")
    if not 8 <= a.seconds <= 600 or not 8 <= a.whole_seconds <= 600:
        p.error("--seconds/--whole-seconds: allowed 8..600")
    if a.baseline and not a.baseline.is_file():
        p.error(f"--baseline {a.baseline}: no such file")
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    if os.geteuid() != 0:
        print("bench_instrument_cost: needs root (network namespaces)", file=sys.stderr)
        return 2
    for name, path in (("--delayline", a.delayline), ("--tquic-perf", a.tquic_perf),
                       ("--qsampler", a.qsampler)):
        if path is not None and not path.is_file():
            print(f"bench_instrument_cost: {name} {path} missing (scripts/setup.sh)",
                  file=sys.stderr)
            return 2
    if a.halt_poll is not None:
        os.environ[HALT_POLL_ENV] = a.halt_poll  # the trial jobs inherit it
    try:
        poll_ns = wanted_ns()
    except ConfigError as e:
        print(f"bench_instrument_cost: --halt-poll: {e}", file=sys.stderr)
        return 2
    if a.syscalls and shutil.which("perf") is None:
        print("perf not found: system calls left out", file=sys.stderr)
        a.syscalls = False
    plan = [(r, a.whole_seconds if r in a.whole_rates else a.seconds)
            for _ in range(a.repeats) for r in a.rates]
    est = sum(s + a.idle + 8 for _, s in plan)
    print(f"{len(plan)} trials ({a.repeats} x rates {','.join(f'{r:g}' for r in a.rates)} "
          f"Mbit/s), about {est / 60:.0f} min; delay line {a.delayline}, tquic-perf "
          f"{a.tquic_perf}; queue sampler {a.qsampler or 'python'}; receiving veths' NAPI "
          f"{a.rx_napi}; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}", flush=True)
    runs: list[dict] = []
    keep = a.keep
    base = keep or Path(tempfile.mkdtemp(prefix="ld-bench-cost-"))
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    # held for the whole bench, so the calibration sees the host as the trials do
    with halt_polling(poll_ns) as poll:
        # what a wake-up costs here: the figures of another machine compare only through it
        cal = {**host_calibration(), **poll}
        print(calibration_line(cal), flush=True)
        try:
            with tool_root(a.delayline, a.tquic_perf, a.qsampler) as root:
                for i, (rate, secs) in enumerate(plan):
                    runs.append(run_one(rate, secs, a, root, base / f"run{i:02d}-{rate:g}",
                                        log=print))
        finally:
            if keep is None:
                shutil.rmtree(base, ignore_errors=True)
    med = medians(runs)
    print_tables(med)
    if a.baseline:
        print_baseline(med, a.baseline)
    if a.json:
        write_json_atomic(a.json, {
            "format": FORMAT, "created_at": started, "label": a.label,
            "command": " ".join([Path(sys.argv[0]).name, *(argv or sys.argv[1:])]),
            "git_revision": git_revision(ROOT),
            "host": cal,
            "binaries": {"delayline": {"path": str(a.delayline), "sha256": sha256(a.delayline)},
                         "tquic_perf": {"path": str(a.tquic_perf),
                                        "sha256": sha256(a.tquic_perf)},
                         "qsampler": None if a.qsampler is None else {
                             "path": str(a.qsampler), "sha256": sha256(a.qsampler)}},
            "settings": {"rtt_ms": a.rtt_ms, "window_bytes": a.window, "idle_s": a.idle,
                         "skip_s": a.skip, "link": "symmetric", "direction": "downlink",
                         "cc": "cubic", "rx_napi": a.rx_napi, "tool_args": a.tool_arg,
                         "halt_poll": a.halt_poll,
                         "syscalls": "perf raw_syscalls:sys_enter"
                         if a.syscalls else None},
            "runs": runs, "medians": med})
        print(f"\nwrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
