"""The SSH testbed's host check of its nodes (issue 57; docs/host.md "SSH testbed nodes"): the
check a local run makes of its host (ops.hostcheck), made by each node that runs a real-time
part of a trial on itself, once per node boot, before the trial.

The nodes probed are :data:`PROBED_ROLES`: the delay node (the delay line's timer wake-ups) and
the tool ends (the sender's pacing, the receiver's ACKs); the gateway shapes in the kernel.
For each, :func:`check_nodes` reads the node's boot id (``cat /proc/sys/kernel/random/boot_id``)
and its record of that boot, ``<workdir>/host/<role>-<boot8>.json`` on the node itself
(:func:`record_path`). Kept on the node, not in this checkout's results/: the record belongs to
the machine it measured and lives as long as its boot does, so every run, checkout or host
that drives the slice in that boot takes it without measuring again, and a re-imaged node
takes none of another's; the numbers a trial is judged by go into its meta.json
(``testbed.host_records``). Without a record (or with ``LATENCY_DIVIDE_HOST_CHECK=force``) the
node runs the uploaded tools/hostprobe (``hostprobe --seconds 10 --json``, content-addressed
in ``<workdir>/bin`` by `latency-divide provision`) under the slice lock (testbed.ssh.lock: no
other run's trial on the slice is disturbed by the probe, nor measured by it), one node after
the other (nodes that share a machine, such as the test lab's, do not measure each other), and
the record (schema testbed.hostrecord.SCHEMA, cost factor against the fitted host as the local
check computes it) is uploaded to the node (temporary name, then rename).

The rule is the local check's (ops.hostfit): a node whose lateness p99 at the probe gap nearest
the link's packet time exceeds what the trial's health verdict allows the delay line
(TrialSpec.late_bound: trial.health.bound_for) cannot hold the link; the trial fails before it
starts, naming the node, the number and its limit, unless ``LATENCY_DIVIDE_HOST_CHECK=go-on``
(then every trial's verdict is still judged). ``skip``: no check.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

from latency_divide.errors import CommandError, EnvironmentError_
from latency_divide.fsio import json_text, sha256_file
from latency_divide.paths import built_tool
from latency_divide.testbed import hostrecord as hr
from latency_divide.testbed.ssh.connection import SshSetupError, _node_name
from latency_divide.testbed.ssh.lock import NodeLock
from latency_divide.testbed.ssh.node import ensure_private_workdir, remote_tool_path
from latency_divide.testbed.ssh.runner import FabricRunner

#: The roles whose nodes run real-time parts of a trial (srv, cli: the tool ends; dly: the
#: delay line).
PROBED_ROLES = ("srv", "dly", "cli")
#: The probe's length on a node (s); the local check's default is 20 (ops.hostcheck).
NODE_PROBE_S = 10.0
BOOT_ID = "/proc/sys/kernel/random/boot_id"
HALT_POLL = "/sys/module/haltpoll/parameters/guest_halt_poll_ns"
REMEDY = ("use a quieter node for that role (no other load on it; a VM whose steal is near 0; "
          f"then measure again: {hr.CHECK_ENV}=force), or run anyway with {hr.CHECK_ENV}=go-on "
          "(every trial's health verdict is still judged)")


def record_path(workdir: str, role: str, boot: str) -> str:
    """A node's record of one boot (one file per role: nodes that share a file system, such as
    the test lab's namespaces, keep apart)."""
    return f"{workdir}/host/{role}-{boot[:8]}.json"


def read_boot(r: FabricRunner) -> str:
    boot = r.run(["cat", "--", BOOT_ID], sudo=False).stdout.strip()
    if not boot or any(c not in "0123456789abcdef-" for c in boot):
        raise SshSetupError(f"{_node_name(r.node)}, step 'host check': {BOOT_ID} reads "
                            f"{boot[:60]!r}, not a boot id")
    return boot


def read_record(r: FabricRunner, role: str, path: str, boot: str) -> dict | None:
    """The node's record at ``path`` if it is one of ``role`` and this boot, else None."""
    res = r.run(["cat", "--", path], check=False, sudo=False)
    if res.returncode != 0:
        return None
    try:
        rec = json.loads(res.stdout)
        if not (isinstance(rec, dict) and rec.get("schema") == hr.SCHEMA
                and rec.get("boot_id") == boot and rec.get("role") == role):
            return None
        hr.check_probe(rec.get("probe"))
        float(rec["cost_factor"])
    except (ValueError, KeyError, TypeError):
        return None
    return rec


def probe_node(r: FabricRunner, role: str, binary: str, boot: str, seconds: float) -> dict:
    """Run the probe on the node; its record (not yet written)."""
    argv = [binary, "--seconds", f"{seconds:g}", "--json"]
    t0 = time.monotonic()
    res = r.run(argv, check=False, timeout=seconds + 60)
    if res.returncode != 0:
        raise CommandError(argv, res.returncode, res.stdout, res.stderr, r.where)
    try:
        probe = hr.check_probe(json.loads(res.stdout))
    except ValueError as e:
        raise EnvironmentError_(f"{_node_name(r.node)}, step 'host check': {e}") from None
    halt = r.run(["cat", "--", HALT_POLL], check=False, sudo=False).stdout.strip()
    halt_ns = int(halt) if halt.isdigit() else None
    return {"schema": hr.SCHEMA, "role": role, "node": _node_name(r.node),
            "hostname": r.run(["uname", "-n"], sudo=False).stdout.strip(), "boot_id": boot,
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "measured_unix": time.time(), "probe_s": round(time.monotonic() - t0, 2),
            "kernel": probe.get("kernel"), "cpu_model": probe.get("cpu_model"),
            "steal_pct": probe.get("steal_pct"), "features": {"halt_poll_ns": halt_ns},
            "probe_argv": argv, "probe": probe, **hr.factor_fields(probe, halt_ns)}


def write_record(r: FabricRunner, role: str, path: str, rec: dict) -> None:
    """Upload the record (temporary name, then rename) and remove the role's records of other
    boots."""
    d = path.rsplit("/", 1)[0]
    r.run(["mkdir", "-p", "--", d], sudo=False)
    fd, tmp = tempfile.mkstemp(prefix="ld-hostrec-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json_text(rec, indent=1, sort_keys=False))
        r.put(Path(tmp), path, mode=0o600)
    finally:
        os.unlink(tmp)
    r.run(["find", d, "-maxdepth", "1", "-name", f"{role}-*.json", "!", "-path", path,
           "-delete"], check=False, sudo=False)


def judge(rec: dict, bound: dict) -> dict:
    """The record against the trial's link: the lateness p99 at the probe gap nearest its
    packet time (hostrecord.lateness_p99_us) and the verdict's limit."""
    gap, p99 = hr.lateness_p99_us(rec, bound["packet_us"])
    return {"late_gap_us": gap, "late_p99_us": round(p99, 1), "limit_us": bound["limit_us"],
            "held": p99 <= bound["limit_us"]}


def check_nodes(runners: dict, sl, spec, probe_s: float = NODE_PROBE_S, log=None) -> dict:
    """Each probed node's record of its boot (measured now where it has none), judged against
    the trial's link: what meta.json records (``testbed.host_records``). Raises
    EnvironmentError_ (not retried) naming each node that cannot hold the link, unless go-on."""
    say = log or (lambda m: print(m, file=sys.stderr, flush=True))
    mode = hr.check_mode()
    if mode == "skip":
        return {"skipped": f"{hr.CHECK_ENV}=skip"}
    local = built_tool("hostprobe")
    if not local.is_file():
        say(f"[latency-divide] WARNING: no host check of the SSH nodes: {local} is not built "
            "(`make setup`, then `latency-divide provision`)")
        return {"skipped": f"{local} is not built"}
    sha = sha256_file(local)
    binary = remote_tool_path(sl.workdir, "hostprobe", sha)
    bound = spec.late_bound()
    boots = {role: read_boot(runners[role]) for role in PROBED_ROLES}
    paths = {role: record_path(sl.workdir, role, boots[role]) for role in PROBED_ROLES}
    recs = {role: None if mode == "force" else read_record(runners[role], role, paths[role],
                                                           boots[role])
            for role in PROBED_ROLES}
    todo = [role for role in PROBED_ROLES if recs[role] is None]
    failed: dict[str, str] = {}
    if todo:
        holder = (f"{socket.gethostname()} pid {os.getpid()} host check since "
                  f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
        locks: list[NodeLock] = []
        try:
            for role in todo:  # refuse a work directory others could write: root runs from it
                ensure_private_workdir(runners[role], sl.workdir, create=False)
                if runners[role].sha256(binary) != sha:
                    raise SshSetupError(f"{_node_name(runners[role].node)}, step 'host check': "
                                        f"{binary} missing: provision the node (latency-divide "
                                        "provision)")
            for role in ("gw", "dly"):  # the slice lock, as a trial takes it
                locks.append(NodeLock(runners[role], sl.workdir, sl.name, holder).acquire())
            for role in todo:
                r = runners[role]
                say(f"[latency-divide] host check: probing {_node_name(r.node)} for "
                    f"{probe_s:g} s (boot {boots[role][:8]}: once per boot)")
                try:
                    recs[role] = probe_node(r, role, binary, boots[role], probe_s)
                except (CommandError, EnvironmentError_) as e:
                    # a node that cannot be probed still runs (as a Slurm node does); its
                    # trials' verdicts say how it held, and the next trial probes it again
                    failed[role] = str(e)[:500]
                    say(f"[latency-divide] WARNING: host check of {_node_name(r.node)}: {e}")
                    continue
                write_record(r, role, paths[role], recs[role])
        finally:
            for lock in reversed(locks):
                lock.release()
    out: dict = {"mode": mode or "check", "rate_kbit": bound["rate_kbit"],
                 "packet_us": round(bound["packet_us"], 1), "nodes": {}}
    refusals = []
    for role in PROBED_ROLES:
        rec, node = recs[role], _node_name(runners[role].node)
        if rec is None:
            out["nodes"][role] = {"node": node, "path": None, "why": failed[role]}
            continue
        j = judge(rec, bound)
        out["nodes"][role] = {"node": node, "path": paths[role], "boot_id": rec["boot_id"],
                              "measured_at": rec["measured_at"], "measured_now": role in todo,
                              "cost_factor": rec["cost_factor"], **j}
        if not j["held"]:
            refusals.append(f"{node}: wake-up lateness p99 {j['late_p99_us']:.0f} µs (at the "
                            f"{j['late_gap_us']:g} µs gap; record {paths[role]}) > the "
                            f"{j['limit_us']:.0f} µs the verdict of a {bound['rate_kbit']} kbit/s "
                            f"link allows (packet time {bound['packet_us']:.0f} µs)")
    out["refused"] = refusals
    if refusals and mode != "go-on":
        raise EnvironmentError_("the host check of the SSH nodes refuses this trial before it "
                                "starts: " + "; ".join(refusals) + ". What to do: " + REMEDY)
    for line in refusals:
        say(f"[latency-divide] WARNING: {hr.CHECK_ENV}=go-on: running anyway; {line}")
    return out
