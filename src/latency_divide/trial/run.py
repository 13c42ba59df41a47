"""One trial: (household, direction, variant, repetition), run once against the testbed
interface (testbed.base) whichever testbed it is.

Lifecycle (flent's habit): the testbed's ``check`` finds every program and fails before
anything starts; the trial opens a slice (set up, links shaped by the household's link plan),
starts the sender, the queue sampler and the ping, waits the idle baseline, runs the receiver
for the configured duration, stops everything by PID and collects; the trial directory is
built in a temporary directory beside its final place and renamed only when complete
(trial.layout). Transient failures are retried; a trial never leaves a partial directory.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from latency_divide import FORMAT_VERSION, __version__
from latency_divide.errors import EnvironmentError_, TrialError, UnhealthyTrial
from latency_divide.fsio import write_json_atomic
from latency_divide.parsers.qlog import QlogError, summarize_server_qlog
from latency_divide.parsers.tool import cc_fallback, parse_tool_log
from latency_divide.paths import git_revision, repo_root
from latency_divide.testbed.factory import make_testbed
from latency_divide.testbed.runners import LocalRunner, Runner, pid_alive
from latency_divide.testbed.schedwatch import SchedWatch
from latency_divide.trial import definition
from latency_divide.trial.health import health
from latency_divide.testbed.placement import placed
from latency_divide.trial.instrument import compact, instrument
from latency_divide.trial.layout import (
    ARCHIVE,
    DELAYLINE_LOG,
    META,
    PING_ERR,
    PING_LOG,
    QLOG_DIR,
    QLOG_SUMMARY,
    QSAMPLER_LOG,
    QUEUE_LOG,
    RECEIVER_JSON,
    RECEIVER_LOG,
    SENDER_JSON,
    SENDER_LOG,
    SETUP_JSON,
    SETUP_KEYS,
    TMP_DIR,
    TMP_PREFIX,
    tmp_dir_prefix,
)
from latency_divide.trial.meta import (
    cpu_busy_pct,
    cpu_times,
    executor_info,
    host_info,
    job_cpu_s,
    live_topologies,
    process_started_unix,
    steal_times,
    utc_now,
)
from latency_divide.trial.rawio import pack
from latency_divide.trial.spec import (
    MONITOR_RT_PRIORITY,
    PORT,
    TrialSpec,
    ping_argv,
    realtime_argv,
    receiver_argv,
    sender_argv,
)
from latency_divide.vocab import endpoints


def _wait_udp_listen(runner: Runner, port: int, proc, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise TrialError(f"the sender exited at start (code {proc.poll()})")
        res = runner.run(["ss", "-H", "-u", "-l", "-n", "sport", "=", f":{port}"], check=False)
        if res.stdout.strip():
            return
        time.sleep(0.02)
    raise TrialError(f"the sender did not listen on UDP port {port} within {timeout} s")


def tool_rt_priority(topo, roles, asked: int, here: bool = False) -> dict:
    """The SCHED_FIFO priority the tool ends can have on their nodes: ``asked``, or 0 with the
    reason where the kernel or the container refuses it (e.g. no CAP_SYS_NICE, or RT group
    scheduling with no RT budget for our cgroup). ``here``: the nodes are namespaces of this
    host, so one check on the host answers for all."""
    if not asked:
        return {"priority": 0}
    runners = ([("host", LocalRunner())] if here else
               [(role, topo.runner(role)) for role in dict.fromkeys(roles)])
    for role, runner in runners:
        res = runner.run(realtime_argv(["true"], asked), check=False)
        if res.returncode != 0:
            return {"priority": 0, "refused": f"{role}: {(res.stderr or res.stdout).strip()}"}
    return {"priority": asked}


def admission_broken(meta: dict) -> list[str]:
    """The names of the bounds a trial's verdict broke (trial.health.BOUNDS)."""
    return [r.split(" ", 1)[0] for r in meta["health"]["reasons"]]


def run_trial(spec: TrialSpec, out_root: Path, *, attempt: int = 1, testbed=None,
              keep_unhealthy: bool = True, expected_rt_cores: float | None = None,
              admission: dict | None = None) -> Path:
    """Run one trial; return its (complete) directory under ``out_root``. A trial whose
    health verdict fails (trial.health) raises :class:`UnhealthyTrial` and leaves nothing,
    unless ``keep_unhealthy`` (the last attempt): then it is kept, with its verdict, and the
    analysis lists it among the exclusions. ``expected_rt_cores`` (ops.admission.spec_rt_cores)
    lets a slow trial run on one core (testbed.placement); None: it floats. ``admission``: what
    the load gate said when it admitted the trial (testbed.loadgate), recorded with the host's
    set-up records (``host.admission``; meta.json has ``alone`` for an attempt alone); its
    ``verdict`` is set to the trial's."""
    testbed = testbed or make_testbed("local")
    # what the testbed can do, asked before anything starts (not which kind it is)
    if spec.tool.qlog and not testbed.keeps_qlog:
        raise EnvironmentError_(f"qlog: the {testbed.kind!r} testbed does not keep the tool's "
                                "qlog (a fast link's qlog is hundreds of MB on the node); run "
                                "qlog trials on the local testbed")
    found = testbed.check(spec)
    final = Path(out_root) / spec.definition_id(testbed.kind) / spec.trial_id
    final.parent.mkdir(parents=True, exist_ok=True)
    definition.ensure_file(Path(out_root) / spec.definition_id(testbed.kind),
                           spec.definition(testbed.kind))
    # The owner's PID is in the name, so `clean` can tell an abandoned one from a live one.
    tmp = Path(tempfile.mkdtemp(prefix=tmp_dir_prefix(spec.repetition, os.getpid()),
                                dir=final.parent))
    try:
        with placed(expected_rt_cores or 0.0,  # a slow trial on one core
                    testbed.runs_here and expected_rt_cores is not None,
                    spec.tool.name) as where:
            meta = _run_in(spec, tmp, found, attempt, testbed)
        meta["placement"] = where
        if admission is not None:  # in setup.json with the host; meta.json keeps one flag
            meta["host"]["admission"] = dict(admission)
            if admission.get("exclusive"):
                meta["alone"] = True
            admission["verdict"] = meta["health"]["verdict"]
            admission["broken"] = admission_broken(meta)
        if meta["health"]["verdict"] == "fail" and not keep_unhealthy:
            e = UnhealthyTrial(f"trial {spec.trial_id}: the emulation did not hold: "
                               + "; ".join(meta["health"]["reasons"]))
            e.broken = tuple(admission_broken(meta))  # trial.retry: alone or beside others
            raise e
        # format 4: the set-up records and every log in one archive beside a compact meta.json
        write_json_atomic(tmp / SETUP_JSON, {k: meta.pop(k) for k in SETUP_KEYS}, indent=None)
        meta["archive"] = {"name": ARCHIVE, "members": pack(tmp)}
        write_json_atomic(tmp / META, meta, indent=None)
        if final.exists():
            if any(final.iterdir()):
                raise TrialError(f"{final} exists and is not empty: refusing to overwrite a trial")
            final.rmdir()
        os.rename(tmp, final)
        return final
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _run_in(spec: TrialSpec, d: Path, found: dict, attempt: int, testbed) -> dict:
    plan = spec.link_plan(found["mechanism"], found.get("policer"))  # its buffer model
    binary = found["binary"]
    ep = endpoints(spec.direction)
    concurrency = spec.concurrency_hint or live_topologies() + 1
    timing: dict = {"started_at": utc_now(), "started_unix": time.time(),
                    "process_started_unix": process_started_unix()}
    host_before = host_info()
    cpu_before = cpu_times()

    qlog_dir = None
    if spec.tool.qlog:
        qlog_dir = d / QLOG_DIR
        qlog_dir.mkdir()
    topo = testbed.open(spec, plan, d, found)
    with topo:
        sender_addr = topo.addr(ep["sender"])

        def tool_json(role: str, name: str) -> str | None:
            # tquic-perf writes its JSON summary where it runs (the slice collects it into d)
            return topo.tool_output(role, d / name) if spec.tool.name == "tquic-perf" else None

        s_argv = sender_argv(spec, binary, tool_json(ep["sender"], SENDER_JSON), sender_addr,
                             None if qlog_dir is None else str(qlog_dir))
        r_argv = receiver_argv(spec, binary, tool_json(ep["receiver"], RECEIVER_JSON),
                               sender_addr)
        p_argv = ping_argv(spec.ping_interval_s, topo.addr("srv"))
        q_dev = topo.gateway_egress(spec.direction)
        q_argv = topo.qsampler_argv(q_dev, spec.queue_interval_s)
        rt = tool_rt_priority(topo, (ep["sender"], ep["receiver"], "gw", "cli"),
                              spec.tool_rt_priority, here=testbed.runs_here)
        s_argv, r_argv = realtime_argv(s_argv, rt["priority"]), realtime_argv(r_argv,
                                                                             rt["priority"])
        # the monitors too, lowest of all: with the tool ends above every normal task, a
        # queue sampler left to the normal scheduler starved on hosts full of fast links
        mon = MONITOR_RT_PRIORITY if rt["priority"] else 0
        q_argv, p_argv = realtime_argv(q_argv, mon), realtime_argv(p_argv, mon)

        qdisc_before = topo.qdisc_dump()
        snd = topo.start(ep["sender"], s_argv, stdout=d / SENDER_LOG, stderr=d / SENDER_LOG)
        _wait_udp_listen(topo.runner(ep["sender"]), PORT, snd)
        qs = topo.start("gw", q_argv, stdout=d / QUEUE_LOG, stderr=d / QSAMPLER_LOG)
        ping = topo.start("cli", p_argv, stdout=d / PING_LOG, stderr=d / PING_ERR)
        time.sleep(spec.idle_s)
        timing["transfer_started_unix"] = time.time()
        steal_before = steal_times()
        rcv = topo.start(ep["receiver"], r_argv, stdout=d / RECEIVER_LOG,
                         stderr=d / RECEIVER_LOG)
        # how long the tool ends and the delay line wait for a CPU while they measure
        watch = SchedWatch()
        for name, pid in topo.local_pids({"sender": snd, "receiver": rcv}).items():
            watch.add(name, pid)
        watch.start()
        limit = spec.duration_s + 20.0
        try:
            rc = rcv.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            rcv.stop()
            raise TrialError(f"the receiver did not finish within {limit:.0f} s "
                             f"(duration {spec.duration_s} s + 20 s)") from None
        finally:
            watch.stop()
        timing["transfer_ended_unix"] = time.time()
        steal_pct = cpu_busy_pct(steal_before, steal_times())
        time.sleep(spec.tail_s)
        # The monitors must have run for the whole transfer: one that died early makes the
        # trial incomplete (retried), never a directory that looks complete.
        died = [name for name, proc in (("ping", ping), ("queue sampler", qs))
                if proc.poll() is not None]
        # tquic-perf's sender runs with -once: it may have exited, but only successfully
        if snd.poll() not in (None, 0):
            died.append(f"the sender (exit code {snd.poll()})")
        for proc in (ping, qs, snd):
            proc.stop(timeout=3)
        delayline_rc = topo.stop_delayline()
        cpu = {"sender": snd.cpu_s, "receiver": rcv.cpu_s, "delayline": topo.delayline_cpu_s,
               "qsampler": qs.cpu_s, "ping": ping.cpu_s}
        if died:
            raise TrialError(f"trial {spec.trial_id}: {', '.join(died)} exited before the end of "
                             "the transfer (see its log)")
        if delayline_rc not in (None, 0):
            raise TrialError(f"trial {spec.trial_id}: the delay line exited with code "
                             f"{delayline_rc} (see delayline.log)")
        qdisc_after = topo.qdisc_dump()
        described = topo.describe()
        concurrency_end = live_topologies()
    timing["ended_at"] = utc_now()
    cpu.update(job_cpu_s(cpu))
    timing["setup_s"] = round(topo.setup_s, 3)
    timing["teardown_s"] = round(topo.teardown_s, 3)

    if qlog_dir is not None:
        _reduce_qlog(qlog_dir, d / QLOG_SUMMARY)
    fallback = cc_fallback((d / SENDER_LOG).read_text(errors="replace"))
    if fallback:
        raise TrialError(f"trial {spec.trial_id}: {fallback}")
    text = (d / RECEIVER_LOG).read_text(errors="replace")
    if rc != 0 or not parse_tool_log(text).complete:
        tail = " | ".join(text.strip().splitlines()[-3:])
        raise TrialError(f"trial {spec.trial_id}: the receiver exited with code {rc} without a "
                         f"complete summary: {tail}")
    for name in (PING_LOG, QUEUE_LOG):
        f = d / name
        if not f.exists() or f.stat().st_size == 0:
            raise TrialError(f"trial {spec.trial_id}: {name} is empty")
    p = d / PING_ERR
    if p.exists() and p.stat().st_size == 0:
        p.unlink()
    sched = watch.summary()
    dl_text, snd_json, rcv_json = ((p.read_text(errors="replace") if p.exists() else "")
                                   for p in (d / DELAYLINE_LOG, d / SENDER_JSON, d / RECEIVER_JSON))
    trial_health = health(sched, dl_text, d / QUEUE_LOG, timing["transfer_started_unix"],
                          timing["transfer_ended_unix"], spec.queue_interval_s, cpu,
                          plan.shaper(spec.direction).rate_kbit, steal_pct, plan.rtt_ms)
    for derived in ("bounds", "packet_time_us"):  # from the capacity: meta.json in 4 KiB
        trial_health.pop(derived, None)
    measured_by = instrument(found["mechanism"], dl_text, snd_json, rcv_json, spec.tool.name,
                             found["tool_version"], topo.rx_napi)

    return {
        "format_version": FORMAT_VERSION,
        "latency_divide_version": __version__,
        "trial_id": spec.trial_id,
        "definition_id": spec.definition_id(testbed.kind),
        "definition": spec.definition(testbed.kind),
        "household": spec.household.to_dict(),
        "direction": spec.direction,
        "variant": dataclasses.asdict(spec.variant),
        "repetition": spec.repetition,
        "attempt": attempt,
        "capacity_kbps": plan.shaper(spec.direction).rate_kbit,
        "qfactor": spec.qfactor,
        "linkplan": plan.to_dict(),
        "delay_mechanism": found["mechanism"],
        "delayline_exit_code": delayline_rc,
        # what measured it (trial.instrument): what a published trial is judged by
        "instrument": compact(measured_by),
        "instrument_detail": measured_by,
        "tool": {"name": spec.tool.name, "path": binary,
                 "sha256": found["binary_sha256"], "version": found["tool_version"],
                 "window_bytes": spec.tool.window_bytes, "args": list(spec.tool.args),
                 **({"qlog": True} if spec.tool.qlog else {}),
                 **({"pacing": True} if definition.paced(spec.tool.name, spec.variant.cc)
                    else {}),
                 "sender_node": ep["sender"], "receiver_node": ep["receiver"],
                 "sender_argv": s_argv, "receiver_argv": r_argv, "receiver_exit_code": rc,
                 # SCHED_FIFO priority the ends ran at (0: normal), and why if not as asked
                 "rt_priority": rt["priority"], "rt_priority_asked": spec.tool_rt_priority,
                 **({"rt_refused": rt["refused"]} if rt.get("refused") else {})},
        "ping": {"argv": p_argv, "interval_s": spec.ping_interval_s, "node": "cli",
                 "target": topo.addr("srv")},
        "queue": {"node": "gw", "dev": q_dev, "interval_s": spec.queue_interval_s,
                  "argv": q_argv},
        "duration_s": spec.duration_s,
        "idle_s": spec.idle_s,
        "timing": timing,
        # CPU seconds (user + system) by component: the traffic tool's two ends, the delay
        # line, the queue sampler, ping (None where not measured: remote nodes), the
        # set-up/teardown commands, and the trial job's own Python process so far
        "cpu_s": cpu,
        # did the emulation hold during the transfer (trial.health; README "Emulation
        # health"): run-queue waits, delay-line lateness, CPU pressure, queue samples, verdict
        "health": trial_health,
        "sched": sched,
        "executor": executor_info(),
        "host": {**host_before, "loadavg_after": list(os.getloadavg()),
                 "cpu_busy_pct": cpu_busy_pct(cpu_before, cpu_times())},
        # trials running on this host (live topologies, this one included) at start and end
        "concurrency": max(concurrency, concurrency_end),
        "concurrency_at_start_end": [concurrency, concurrency_end],
        "qdisc_before": qdisc_before,
        "qdisc_after": qdisc_after,
        "offloads": found["offloads"],
        "testbed": described,
        "git_revision": git_revision(repo_root()),
        "config_hash": spec.config_hash,
    }


def _reduce_qlog(qlog_dir: Path, out: Path) -> None:
    """Keep the sender's report made of its qlogs (parsers.qlog.summarize_server_qlog) and
    remove the qlogs: hundreds of MB for a fast link, against a few KB for the rest of the trial.
    A qlog that cannot be read fails the trial (retried), never a trial without its numbers."""
    qlogs = list(qlog_dir.glob("*.qlog"))
    if not qlogs:
        raise TrialError(f"{qlog_dir}: the sender wrote no qlog")
    try:
        write_json_atomic(out, summarize_server_qlog(qlogs))
    except QlogError as e:
        raise TrialError(f"the sender's qlog: {e}") from None
    shutil.rmtree(qlog_dir)


def clean_tmp_dirs(results: Path, force: bool = False) -> list[str]:
    """Temporary trial directories (layout.TMP_DIR) under ``results`` whose owner process is
    gone (``force``: all of them); returns those removed."""
    removed = []
    if not results.is_dir():
        return removed
    for d in results.rglob(f"{TMP_PREFIX}*"):
        m = TMP_DIR.match(d.name)
        if not m or not d.is_dir():
            continue
        if pid_alive(int(m["pid"])) and not force:
            continue
        shutil.rmtree(d, ignore_errors=True)
        removed.append(str(d))
    return removed
