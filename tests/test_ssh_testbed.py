"""The SSH testbed against a real SSH lab (tests/sshlab.py): four namespaces, each with its
own OpenSSH server, wired as the paper's line topology. Provisioning and a 5 s trial run over
SSH end to end; the result must match a local-testbed trial of the same household. Failures
(unreachable node, wrong key, unknown host key, missing interface) must name the host and the
step.

Needs root, /usr/sbin/sshd and the built tools (scripts/setup.sh).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT
import yaml

from latency_divide.config import ToolSettings, Variant
from latency_divide.data.households import get_household
from latency_divide.errors import ConfigError
from latency_divide.testbed.inventory import load_inventory
from latency_divide.testbed.ssh import state as ssh_state
from latency_divide.testbed.ssh.clean import clean_remote
from latency_divide.testbed.ssh.connection import SliceBusyError
from latency_divide.testbed.ssh.lock import NodeLock
from latency_divide.testbed.ssh.state import (
    SSH_STATE_DIR,
    _process_identity,
    _write_state,
)
from latency_divide.testbed.ssh.testbed import SshTestbed
from latency_divide.trial.rawio import full_meta


HOUSEHOLD = 11406  # 3498 kbit/s down, 1150 up, 67.2 ms RTT


@pytest.fixture
def lab(ssh_lab):
    """The SSH lab of this session (tests/conftest.py), shared with test_ssh_hostcheck.py."""
    return ssh_lab


@pytest.fixture
def provisioned(ssh_provisioned):
    """The lab provisioned by the command line tool: its inventory's path (conftest.py)."""
    return ssh_provisioned


def _spec(direction="downlink"):
    from latency_divide.trial.spec import TrialSpec

    return TrialSpec(household=get_household(HOUSEHOLD), direction=direction,
                     variant=Variant("cubic", "cubic"), duration_s=5, idle_s=2,
                     tool=ToolSettings(name="tquic-perf", path=None, window_bytes=65536))


def _testbed(inventory) -> SshTestbed:
    """The SSH testbed of a trial test. The first trial's check probes each node that runs a
    real-time part (testbed.ssh.nodecheck: once per boot, one node after the other; the later
    trials reuse the records) for 2 s, not a run's 10 s: the 30 s of probing was most of this
    module's first trial. The check's own claims are tests/test_ssh_hostcheck.py's, with the same
    2 s probe."""
    tb = SshTestbed(inventory)
    tb.probe_s = 2.0
    return tb


def _metrics(d: Path) -> dict:
    """The analysis' own parse of the trial (latency-divide summarize)."""
    from latency_divide.analysis.metrics import summarize_trial

    row = summarize_trial(d)
    return {"goodput_kbit": float(row["goodput_kbps"]),
            "base_rtt_ms": float(row["base_rtt_measured_ms"]), "row": row,
            "meta": full_meta(d),  # with the set-up records of the archive (format 4)
            "files": sorted(p.name for p in d.iterdir())}


@pytest.mark.netns
@pytest.mark.slow  # real trials over SSH and locally
def test_trial_over_ssh_matches_local(lab, provisioned, tmp_path):
    from latency_divide.testbed.local import LocalTestbed
    from latency_divide.trial.run import run_trial

    spec = _spec()
    d_ssh = run_trial(spec, tmp_path / "ssh", testbed=_testbed(provisioned))
    d_loc = run_trial(spec, tmp_path / "local", testbed=LocalTestbed())
    ssh, loc = _metrics(d_ssh), _metrics(d_loc)

    # the same raw layout, the same meta.json keys
    assert ssh["files"] == loc["files"]
    assert ssh["files"] == ["logs.tar.xz", "meta.json"]  # format 4 (trial.rawio)
    assert ssh["meta"]["archive"]["members"] == loc["meta"]["archive"]["members"]
    assert {"receiver.json", "sender.log", "delayline.log", "receiver.log", "ping.log",
            "queue.jsonl"} <= set(ssh["meta"]["archive"]["members"])
    assert set(ssh["meta"]) == set(loc["meta"])
    assert ssh["meta"]["testbed"]["kind"] == "ssh"
    # the trial checked its nodes first (testbed.ssh.nodecheck) and kept what it judged by
    assert set(ssh["meta"]["testbed"]["host_records"]["nodes"]) == {"srv", "dly", "cli"}
    assert ssh["meta"]["testbed"]["devices"] == {"gateway": {"uplink": "ld-gs",
                                                             "downlink": "ld-gc"},
                                                 "delay": ["ld-dg", "ld-dc"]}
    assert ssh["meta"]["tool"]["sha256"] == loc["meta"]["tool"]["sha256"]
    # the queue was sampled on the gateway's downlink egress, with the bottleneck FIFO in it
    from latency_divide.trial.rawio import read_text

    q = [json.loads(line) for line in read_text(d_ssh, "queue.jsonl").splitlines()]
    assert len(q) > 30 and {s["dev"] for s in q} == {"ld-gc"}
    assert any(e["kind"] == "bfifo" for e in q[0]["qdisc"])
    # metrics within noise of the local run (a loaded 2-core host)
    rate = 3498
    assert 0.8 * rate < ssh["goodput_kbit"] < 1.02 * rate, ssh["goodput_kbit"]
    assert abs(ssh["goodput_kbit"] - loc["goodput_kbit"]) < 0.1 * rate, (ssh, loc)
    assert 67.0 < ssh["base_rtt_ms"] < 72.0, ssh["base_rtt_ms"]
    assert abs(ssh["base_rtt_ms"] - loc["base_rtt_ms"]) < 2.0, (ssh["base_rtt_ms"],
                                                                  loc["base_rtt_ms"])
    # the nodes were restored: no root qdisc of ours, no run directory, no state file left
    from latency_divide.testbed.runners import LocalRunner

    for role, dev in (("gw", "ld-gs"), ("gw", "ld-gc"), ("dly", "ld-dg"), ("dly", "ld-dc")):
        out = LocalRunner(lab.ns(role)).run(["tc", "-j", "qdisc", "show", "dev", dev]).stdout
        assert all(e["kind"] not in ("htb", "bfifo", "netem") for e in json.loads(out)), out
    tag = ssh["meta"]["testbed"]["tag"]
    assert not (lab.dir / "work" / "run" / tag).exists()
    assert not (SSH_STATE_DIR / f"{tag}.json").exists()
    # no process of the trial is left in the namespaces besides sshd
    for role in ("srv", "gw", "dly", "cli"):
        pids = LocalRunner().run(["ip", "netns", "pids", lab.ns(role)]).stdout.split()
        names = {Path(f"/proc/{p}/comm").read_text().strip() for p in pids
                 if Path(f"/proc/{p}/comm").exists()}
        assert names <= {"sshd"}, (role, names)


def _comms(ns: str) -> dict[int, str]:
    from latency_divide.testbed.runners import LocalRunner

    out = {}
    for p in LocalRunner().run(["ip", "netns", "pids", ns]).stdout.split():
        try:
            out[int(p)] = Path(f"/proc/{p}/comm").read_text().strip()
        except OSError:
            pass
    return out



def _trial_with_fault(provisioned, tmp_path, client_ns: str, fault):
    """Run a trial (one retry allowed) while ``fault()`` strikes 1 s after tquic-perf has
    started in the client node's namespace; return (trial directory, retry messages, whether it struck)."""
    import threading

    from latency_divide.trial.retry import run_trial_with_retries

    struck: list[bool] = []

    def watch():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any(c.startswith("tquic-perf") for c in _comms(client_ns).values()):
                time.sleep(1.0)
                fault()
                struck.append(True)
                return
            time.sleep(0.05)

    t = threading.Thread(target=watch)
    t.start()
    messages: list[str] = []
    tb = _testbed(provisioned)
    try:
        d = run_trial_with_retries(_spec(), tmp_path, retries=1, log=messages.append,
                                   testbed=tb)
    finally:
        t.join()
        tb.close()
    return d, messages, bool(struck)


@pytest.mark.netns
@pytest.mark.slow  # real trials over SSH, one of them cut
def test_connection_dropped_mid_trial_is_retried(lab, provisioned, tmp_path):
    """Kill the client node's SSH sessions while the receiver runs. Either the runner re-opens
    the session (recorded in meta.json) or, if a command was in flight, the attempt fails with
    an error naming the node, teardown reconnects and cleans up and the retry completes. Only
    the complete trial directory is left, and no process on the nodes."""
    ns, listener = lab.ns("cli"), lab.sshd["cli"].pid
    killed: list[int] = []

    def drop():
        for pid, comm in _comms(ns).items():
            if comm.startswith("sshd") and pid != listener:
                os.kill(pid, 9)
                killed.append(pid)

    d, messages, _ = _trial_with_fault(provisioned, tmp_path, ns, drop)
    assert killed, "no SSH session was dropped"
    meta = full_meta(d)
    if meta["attempt"] == 1:
        # the drop fell between two commands: the runner re-opened the session and the
        # detached processes on the node never noticed
        assert meta["testbed"]["reconnects"].get("cli", 0) >= 1, meta["testbed"]
        assert not messages, messages
    else:
        # a command was in flight: that attempt failed naming the node, the retry completed
        assert meta["attempt"] == 2
        assert len(messages) == 1 and "attempt 1 failed" in messages[0], messages
        assert "client node" in messages[0] and lab.mgmt_addr["cli"] in messages[0], messages
    assert sorted(p.name for p in d.parent.iterdir()) == ["rep1"]  # no temp dir left
    for role in ("srv", "gw", "dly", "cli"):
        assert set(_comms(lab.ns(role)).values()) <= {"sshd"}, role


@pytest.mark.netns
def test_jump_host(lab):
    """A node reached through a jump host (FABRIC's bastion): here the server's own sshd
    forwards to itself, so the session's peer address shows the hop."""
    from latency_divide.testbed.ssh.testbed import SshTestbed

    srv = lab.mgmt_addr["srv"]
    inv = load_inventory(lab.inventory(server={"jump": {"host": srv}}))
    tb = SshTestbed(inv)
    try:
        conn = tb.runner("srv").run(["sh", "-c", 'echo "$SSH_CONNECTION"'], sudo=False).stdout
        assert conn.split()[0] == srv, conn  # direct sessions come from the root namespace
        direct = tb.runner("gw").run(["sh", "-c", 'echo "$SSH_CONNECTION"'], sudo=False).stdout
        assert direct.split()[0] != lab.mgmt_addr["gw"], direct
    finally:
        tb.close()


@pytest.mark.netns
def test_unreachable_host(lab, tmp_path):
    from latency_divide.testbed.ssh.connection import SshError
    from latency_divide.testbed.ssh.testbed import SshTestbed

    # port 2 of the server's management address: nothing listens there
    inv = load_inventory(lab.inventory(server={"port": 2}))
    with pytest.raises(SshError) as e:
        SshTestbed(inv).check(_spec())
    msg = str(e.value)
    assert lab.mgmt_addr["srv"] in msg and "server node" in msg and "step 'connect'" in msg


@pytest.mark.netns
def test_wrong_key(lab):
    from latency_divide.testbed.ssh.connection import SshSetupError
    from latency_divide.testbed.ssh.testbed import SshTestbed

    inv = load_inventory(lab.inventory(gateway={"key": str(lab.wrong_key)}))
    with pytest.raises(SshSetupError) as e:
        SshTestbed(inv).check(_spec())
    msg = str(e.value)
    assert "gateway node" in msg and lab.mgmt_addr["gw"] in msg
    assert "authentication failed" in msg and str(lab.wrong_key) in msg


@pytest.mark.netns
def test_unknown_host_key_rejected(lab, tmp_path):
    from latency_divide.testbed.ssh.connection import SshSetupError
    from latency_divide.testbed.ssh.testbed import SshTestbed

    kh = tmp_path / "known_hosts"
    lines = lab.known_hosts.read_text().splitlines()
    kh.write_text("\n".join(ln for ln in lines if not ln.startswith(lab.mgmt_addr["cli"] + " "))
                  + "\n")
    inv = load_inventory(lab.inventory(known_hosts=str(kh)))
    with pytest.raises(SshSetupError) as e:
        SshTestbed(inv).check(_spec())
    assert "client node" in str(e.value) and "known_hosts" in str(e.value)
    # the explicit opt-out connects (with a warning)
    inv = load_inventory(lab.inventory(known_hosts=str(kh), insecure_host_keys=True))
    from latency_divide.testbed.ssh.connection import connect

    with pytest.warns(UserWarning, match="insecure_host_keys"):
        import latency_divide.testbed.ssh.connection as ssh_mod

        ssh_mod._warned_insecure = False
        c = connect(inv.slices[0].node("client"), inv)
    c.close()


@pytest.mark.netns
def test_interface_not_found(lab, provisioned):
    from latency_divide.testbed.ssh.connection import SshSetupError
    from latency_divide.testbed.ssh.testbed import SshTestbed

    inv = load_inventory(lab.inventory(gateway={"interfaces": {"uplink": "ldnope0",
                                                               "downlink": "ld-gc"}}))
    with pytest.raises(SshSetupError) as e:
        SshTestbed(inv).check(_spec())
    msg = str(e.value)
    assert "gateway node" in msg and "'discover interfaces'" in msg and "'ldnope0'" in msg
    inv = load_inventory(lab.inventory(delay={"interfaces": ["ld-dg", "ldnope1"]}))
    with pytest.raises(SshSetupError, match=r"delay node.*interface 'ldnope1' not found"):
        SshTestbed(inv).check(_spec())


@pytest.mark.netns
def test_runner_start_stop_and_clean(lab, provisioned, tmp_path, monkeypatch):
    """start() returns the command's own PID; stop() signals it and fetches the logs; a
    process left by a dead owner is stopped by clean_remote()."""

    tb = SshTestbed(provisioned)
    r = tb.runner("cli", rundir=str(lab.dir / "work" / "run" / "t1"))
    r.run(["mkdir", "-p", r.rundir])
    p = r.start(["sh", "-c", 'echo "out $0"; echo err >&2; exec sleep 60', "a b;c"],
                stdout=tmp_path / "o.log", stderr=tmp_path / "e.log")
    # the PID is the command's own: sh execs sleep in place (give the exec a moment)
    deadline = time.monotonic() + 5
    while Path(f"/proc/{p.pid}/comm").read_text().strip() != "sleep":
        assert time.monotonic() < deadline, Path(f"/proc/{p.pid}/comm").read_text()
        time.sleep(0.02)
    assert p.poll() is None
    assert p.stop(timeout=3) == 143  # SIGTERM
    assert (tmp_path / "o.log").read_text() == "out a b;c\n"
    assert (tmp_path / "e.log").read_text() == "err\n"
    assert not Path(f"/proc/{p.pid}").exists()

    # an interrupted trial: its owner is gone, its process still runs
    dead = subprocess.Popen(["true"])
    dead.wait()
    rundir = f"{tb.slice.workdir}/run/cafe01"
    r = tb.runner("cli", rundir=rundir)
    r.run(["mkdir", "-p", rundir + "/client"])
    p2 = r.start(["sleep", "60"], stdout=tmp_path / "s.log")
    p3 = r.start(["sleep", "61"], stdout=tmp_path / "s3.log")
    argv0, ticks = _process_identity(r, p2.pid)
    assert argv0 == "sleep" and ticks.isdigit()
    state = {"tag": "cafe01", "owner_pid": dead.pid, "slice": tb.slice.name,
             "inventory": str(provisioned), "inventory_raw": yaml.safe_load(provisioned.read_text()),
             "rundir": rundir,
             "processes": [{"role": "client", "pid": p2.pid, "argv0": "sleep", "start_ticks": ticks},
                           # the same program at a pid of the record, but started at another
                           # time: the recorded process is gone and its pid reused
                           {"role": "client", "pid": p3.pid, "argv0": "sleep",
                            "start_ticks": str(int(ticks) - 100)}],
             "qdisc_devs": {"gw": [], "dly": []}, "offloads": {}, "bridge": False}
    # a private state directory: a concurrent `latency-divide clean` must not race us
    monkeypatch.setattr(ssh_state, "SSH_STATE_DIR", tmp_path / "state")
    sf = ssh_state.SSH_STATE_DIR / "cafe01.json"
    _write_state(sf, state)
    # records that cannot be trusted are skipped with a warning naming them
    (ssh_state.SSH_STATE_DIR / "bad001.json").write_text("[1, 2]")
    outside = {**state, "tag": "bad002", "rundir": "/etc", "processes": []}
    _write_state(ssh_state.SSH_STATE_DIR / "bad002.json", outside)
    try:
        done, errors, warnings = clean_remote()
        assert any(f"pid {p2.pid}" in x and "killed" in x for x in done), done
        assert not Path(f"/proc/{p2.pid}/cmdline").exists() or \
            Path(f"/proc/{p2.pid}/stat").read_text().split()[2] == "Z"
        assert len(errors) == 1 and f"pid {p3.pid} not stopped" in errors[0], errors
        assert p3.poll() is None  # still running: not ours any more
        assert any("bad001.json: skipped, not a record" in w for w in warnings), warnings
        assert any("bad002.json: skipped, its run directory '/etc'" in w for w in warnings)
        assert (ssh_state.SSH_STATE_DIR / "bad002.json").exists()
        assert sf.exists()  # an error left: the record stays for a later clean
    finally:
        p3.stop(timeout=3)
        sf.unlink(missing_ok=True)
        tb.close()


def test_inventory_errors(tmp_path):
    key = tmp_path / "id"
    key.write_text("not really a key, only needs to exist\n")
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    nodes = {r: {"host": f"10.0.0.{i}"} for i, r in
             enumerate(("server", "gateway", "delay", "client"), 1)}
    good = {"defaults": {"user": "root", "key": str(key)}, "known_hosts": str(kh),
            "slices": [{"name": "s1", "nodes": nodes}]}
    inv = load_inventory(good)
    assert inv.slices[0].server_addr == "10.10.1.1" and inv.slices[0].client_addr == "10.10.2.2"
    assert inv.slices[0].node("gw").host == "10.0.0.2"

    def bad(patch, match):
        raw = json.loads(json.dumps(good))
        patch(raw)
        with pytest.raises(ConfigError, match=match):
            load_inventory(raw)

    bad(lambda r: r["slices"][0]["nodes"]["server"].update(hots="x"),
        r"unknown key slices\[0\]\.nodes\.server\.hots")
    bad(lambda r: r["slices"][0].update(server_addr="10.10.1.300"),
        r"slices\[0\]\.server_addr = '10\.10\.1\.300'")
    bad(lambda r: r["defaults"].update(key=str(tmp_path / "nope")), r"key file .*nope not found")
    bad(lambda r: r["slices"][0]["nodes"]["gateway"].update(
        interfaces={"uplink": "eth1", "downlink": "eth1"}), "uplink and downlink are both")
    bad(lambda r: r["slices"][0]["nodes"]["delay"].update(interfaces=["eth 1", "eth2"]),
        r"slices\[0\]\.nodes\.delay\.interfaces\[0\] = 'eth 1'")
    bad(lambda r: r.update(known_hosts=str(tmp_path / "kh-missing")), "known_hosts .* not found")
    bad(lambda r: r["slices"].append(json.loads(json.dumps(r["slices"][0]))), "slice name repeated")
    bad(lambda r: r["slices"].append({"name": "s2", "nodes": r["slices"][0]["nodes"]}),
        "every node plays one role in one slice")
    # the opt-out needs no known_hosts
    raw = json.loads(json.dumps(good))
    raw.update(insecure_host_keys=True, known_hosts=str(tmp_path / "absent"))
    assert load_inventory(raw).known_hosts is None


def test_a_qlog_trial_asks_the_testbed_and_fails_before_anything_starts(tmp_path):
    """trial.run asks the testbed whether it keeps a qlog (not which kind it is), before the
    testbed's check: an SSH testbed whose nodes cannot be reached (loopback, port 2) is never
    connected to, and no trial directory is made."""
    from latency_divide.errors import EnvironmentError_
    from latency_divide.testbed.local import LocalTestbed
    from latency_divide.trial.run import run_trial
    from latency_divide.trial.spec import TrialSpec

    assert LocalTestbed.keeps_qlog and not SshTestbed.keeps_qlog
    key = tmp_path / "id"
    key.write_text("not really a key, only needs to exist\n")
    nodes = {r: {"host": f"127.0.0.{i}", "port": 2}
             for i, r in enumerate(("server", "gateway", "delay", "client"), 1)}
    inv = load_inventory({"defaults": {"user": "root", "key": str(key)},
                          "insecure_host_keys": True, "slices": [{"name": "s1", "nodes": nodes}]})
    spec = TrialSpec(household=get_household(HOUSEHOLD), direction="uplink",
                     variant=Variant("copa-0.5", "copa", 0.5), duration_s=5, idle_s=2,
                     tool=ToolSettings(name="tperf", path="/opt/tperf", window_bytes=65536,
                                       qlog=True))
    tb = SshTestbed(inv)
    try:
        with pytest.raises(EnvironmentError_, match="'ssh' testbed does not keep the tool's qlog"):
            run_trial(spec, tmp_path / "raw", testbed=tb)
    finally:
        tb.close()
    assert not tb._conns and not (tmp_path / "raw").exists()


def test_example_inventory_is_valid():
    raw = yaml.safe_load((ROOT / "config" / "testbeds" / "ssh.example.yaml").read_text())
    import jsonschema

    from latency_divide.testbed.inventory import load_schema

    schema = load_schema()
    jsonschema.validators.validator_for(schema)(schema).validate(raw)


def test_slice_lock_is_exclusive(tmp_path):
    from latency_divide.testbed.factory import acquire_slice

    with acquire_slice(["a", "b"], tmp_path, poll_s=0.01) as first:
        with acquire_slice(["a", "b"], tmp_path, poll_s=0.01) as second:
            assert {first, second} == {"a", "b"}
            with pytest.raises(TimeoutError):
                with acquire_slice(["a", "b"], tmp_path, poll_s=0.01, timeout_s=0.2):
                    pass
    with acquire_slice(["a", "b"], tmp_path, poll_s=0.01) as again:
        assert again == "a"


_HOLD_LOCK = """
import sys, time
from latency_divide.testbed.inventory import load_inventory
from latency_divide.testbed.ssh.lock import NodeLock
from latency_divide.testbed.ssh.testbed import SshTestbed
from latency_divide.trial.rawio import full_meta
tb = SshTestbed(load_inventory(sys.argv[1]))
lock = NodeLock(tb.runner("gw"), tb.slice.workdir, tb.slice.name, "holder-of-test").acquire()
print("held", flush=True)
time.sleep(120)
"""


@pytest.mark.netns
def test_a_slice_is_locked_on_its_nodes_against_any_other_run(lab, provisioned, tmp_path):
    """The lock lives on the node (flock there, held by our SSH channel): another checkout,
    or `latency-divide trial --inventory`, is refused with the holder named; the lock goes
    when its holder dies (SIGKILL: no clean-up runs)."""

    holder = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(provisioned)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        tb = SshTestbed(provisioned)
        try:
            with pytest.raises(SliceBusyError, match="locked by holder-of-test"):
                NodeLock(tb.runner("gw"), tb.slice.workdir, tb.slice.name, "b").acquire()
        finally:
            tb.close()
        t0 = time.monotonic()
        p = subprocess.run([str(ROOT / ".venv/bin/latency-divide"), "trial", str(HOUSEHOLD),
                            "--direction", "uplink", "--cc", "cubic", "--duration", "3",
                            "--inventory", str(provisioned), "--out", str(tmp_path / "t")],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 1 and "slice is in use" in p.stderr, p.stderr
        assert "holder-of-test" in p.stderr and time.monotonic() - t0 < 60
        assert not (tmp_path / "t").exists() or not any((tmp_path / "t").rglob("meta.json"))
    finally:
        holder.kill()
        holder.wait()
    tb = SshTestbed(provisioned)
    try:
        deadline = time.monotonic() + 10
        while True:  # sshd notices the dropped connection and ends the holder's session
            try:
                NodeLock(tb.runner("gw"), tb.slice.workdir, tb.slice.name, "c").acquire().release()
                break
            except SliceBusyError:
                assert time.monotonic() < deadline, "the lock outlived its killed holder"
                time.sleep(0.2)
    finally:
        tb.close()


@pytest.mark.netns
def test_a_work_directory_others_could_write_is_refused(lab, provisioned, tmp_path):

    workdir = Path(SshTestbed(provisioned).slice.workdir)
    assert oct(workdir.stat().st_mode & 0o777) == "0o700" and workdir.stat().st_uid == 0
    workdir.chmod(0o777)
    try:
        p = subprocess.run([str(ROOT / ".venv/bin/latency-divide"), "trial", str(HOUSEHOLD),
                            "--direction", "uplink", "--cc", "cubic", "--duration", "3",
                            "--inventory", str(provisioned), "--out", str(tmp_path / "t")],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 1, p.stderr
        assert f"work directory {workdir} is a directory owned by root with mode 777" in p.stderr
        assert oct(workdir.stat().st_mode & 0o777) == "0o777"  # refused, not changed
    finally:
        workdir.chmod(0o700)


@pytest.mark.netns
@pytest.mark.slow  # a real trial over SSH and its node's daemon restarted
def test_a_node_rebooted_mid_trial_ends_restored(lab, provisioned, tmp_path):
    """The gateway "reboots" while the transfer runs: its root qdiscs are gone and the queue
    sampler with them. The attempt ends in a named error or the trial completes; either way
    teardown counts a qdisc that is no longer there as restored (no error, no state record
    left for clean), and only a complete trial directory is left."""
    from latency_divide.testbed.runners import LocalRunner

    gw = lab.ns("gw")

    def reboot():
        for dev in ("ld-gs", "ld-gc"):
            LocalRunner(gw).run(["tc", "qdisc", "del", "dev", dev, "root"], check=False)
        for pid, comm in _comms(gw).items():
            if not comm.startswith("sshd"):
                os.kill(pid, 9)

    before = set(SSH_STATE_DIR.glob("*.json")) if SSH_STATE_DIR.is_dir() else set()
    d, messages, rebooted = _trial_with_fault(provisioned, tmp_path, lab.ns("cli"), reboot)
    assert rebooted
    assert not any("teardown" in m for m in messages), messages
    assert sorted(p.name for p in d.parent.iterdir()) == ["rep1"]
    after = set(SSH_STATE_DIR.glob("*.json")) if SSH_STATE_DIR.is_dir() else set()
    assert after <= before, "a state record was left: teardown failed"
    for dev in ("ld-gs", "ld-gc"):
        out = LocalRunner(gw).run(["tc", "-j", "qdisc", "show", "dev", dev]).stdout
        assert all(e["kind"] not in ("htb", "bfifo") for e in json.loads(out)), out
    for role in ("srv", "gw", "dly", "cli"):
        assert set(_comms(lab.ns(role)).values()) <= {"sshd"}, role


@pytest.mark.netns
def test_a_changed_host_key_is_refused_naming_the_fix(lab, tmp_path):
    from latency_divide.testbed.ssh.connection import SshSetupError
    from latency_divide.testbed.ssh.testbed import SshTestbed

    lines = lab.known_hosts.read_text().splitlines()
    srv_key = next(ln for ln in lines if ln.startswith(lab.mgmt_addr["srv"] + " ")).split(" ", 1)[1]
    kh = tmp_path / "known_hosts"
    # the client's address now presents a key other than the one recorded for it
    kh.write_text("\n".join(f"{lab.mgmt_addr['cli']} {srv_key}" if ln.startswith(
        lab.mgmt_addr["cli"] + " ") else ln for ln in lines) + "\n")
    inv = load_inventory(lab.inventory(known_hosts=str(kh)))
    with pytest.raises(SshSetupError) as e:
        SshTestbed(inv).check(_spec())
    msg = str(e.value)
    assert "client node" in msg and "host key does not match known_hosts" in msg, msg
    assert "ssh-keygen -R" in msg
