"""The SSH testbed's host check of its nodes (testbed.ssh.nodecheck; docs/host.md "SSH testbed
nodes") against the real SSH lab of tests/sshlab.py: provisioning ships tools/hostprobe to the
nodes that run real-time parts; a trial's check runs it on each of them once per boot and keeps
the record on the node; a node whose record says it wakes too late for the trial's link makes
the check refuse, naming the node, the number and its limit, unless go-on.

Needs root, /usr/sbin/sshd and the built tools (scripts/setup.sh).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import ROOT

from latency_divide.errors import EnvironmentError_
from latency_divide.fsio import sha256_file
from latency_divide.testbed import hostrecord as hr
from latency_divide.testbed.inventory import load_inventory
from latency_divide.testbed.ssh.testbed import SshTestbed, SshTopology
from test_ssh_testbed import _spec, lab, provisioned  # noqa: F401  (the lab's fixtures)

pytestmark = pytest.mark.netns

PROBED = ("srv", "dly", "cli")
ROLE_FILE = {"srv": "server", "gw": "gateway", "dly": "delay", "cli": "client"}


def _boot() -> str:
    # the lab's nodes are namespaces of this host: its boot is theirs
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def _host_dir(lab) -> Path:
    return lab.dir / "work" / "host"


def test_provisioning_ships_hostprobe(lab, provisioned):  # noqa: F811
    """Every node that runs a real-time part gets the probe, content-addressed; the gateway
    does not."""
    sl = load_inventory(provisioned).slices[0].name
    sha = sha256_file(ROOT / "target" / "release" / "hostprobe")
    for role, name in ROLE_FILE.items():
        files = json.loads((lab.dir / "provision" / sl / f"{name}.json").read_text())["files"]
        if role not in PROBED:
            assert "hostprobe" not in files, (role, files)
            continue
        assert files["hostprobe"]["sha256"] == sha, (role, files)
        remote = Path(files["hostprobe"]["path"])
        assert remote.parent == lab.dir / "work" / "bin" and remote.name == f"hostprobe-{sha[:16]}"
        assert sha256_file(remote) == sha


@pytest.mark.slow
def test_first_check_probes_each_node_once_per_boot(lab, provisioned, monkeypatch):  # noqa: F811
    monkeypatch.setenv(hr.CHECK_ENV, "go-on")  # this busy host may be too late for the link
    shutil.rmtree(_host_dir(lab), ignore_errors=True)
    boot = _boot()
    tb = SshTestbed(provisioned)
    tb.probe_s = 2.0  # the real probe, shorter than a trial's 10 s
    try:
        found = tb.check(_spec())["host_records"]
    finally:
        tb.close()
    assert set(found["nodes"]) == set(PROBED)
    mtimes = {}
    for role in PROBED:
        node = found["nodes"][role]
        path = _host_dir(lab) / f"{role}-{boot[:8]}.json"
        assert node["path"] == str(path) and node["measured_now"], node
        assert lab.mgmt_addr[role] in node["node"]
        rec = json.loads(path.read_text())
        assert rec["schema"] == hr.SCHEMA and rec["boot_id"] == boot and rec["role"] == role
        assert rec["probe_argv"][1:] == ["--seconds", "2", "--json"]
        assert rec["probe_argv"][0].startswith(str(lab.dir / "work" / "bin" / "hostprobe-"))
        hr.check_probe(rec["probe"])
        want, _ = hr.cost_factor(hr.wake_cpu_us(rec["probe"]), rec["reference"]["wake_cpu_us"])
        assert node["cost_factor"] == rec["cost_factor"] == round(want, 4)
        gap, p99 = hr.lateness_p99_us(rec, found["packet_us"])
        assert (node["late_gap_us"], node["late_p99_us"]) == (gap, round(p99, 1))
        assert node["limit_us"] == _spec().late_bound()["limit_us"]
        assert node["held"] == (p99 <= node["limit_us"])
        mtimes[role] = path.stat().st_mtime_ns
    assert sorted(p.name for p in _host_dir(lab).iterdir()) == sorted(
        f"{r}-{boot[:8]}.json" for r in PROBED)  # the gateway is not probed
    # the same boot: a second check (another testbed object, as another trial job) reuses them
    tb = SshTestbed(provisioned)
    try:
        again = tb.check(_spec())["host_records"]
    finally:
        tb.close()
    for role in PROBED:
        assert not again["nodes"][role]["measured_now"]
        assert (_host_dir(lab) / f"{role}-{boot[:8]}.json").stat().st_mtime_ns == mtimes[role]
        assert again["nodes"][role]["cost_factor"] == found["nodes"][role]["cost_factor"]


def _crafted(role: str, late_p99_us: float) -> dict:
    """A record of this boot whose every timer row is ``late_p99_us`` late at p99."""
    rows = [{"gap_us": g, "cpu": c, "wakeups": 1000, "cpu_us_per_wakeup": 15.0,
             "late_us": {"p50": late_p99_us / 4, "p99": late_p99_us, "p999": late_p99_us * 2,
                         "max": late_p99_us * 3}}
            for g in (100.0, 1000.0, 5000.0, 20000.0) for c in (0, 1)]
    probe = {"schema": hr.PROBE_SCHEMA, "seconds": 10, "timer": rows, "steal_pct": 0.0}
    return {"schema": hr.SCHEMA, "role": role, "node": role, "boot_id": _boot(),
            "measured_at": "2026-12-01T00:00:00Z", "probe": probe,
            **hr.factor_fields(probe, None)}


def test_a_node_too_late_for_the_link_is_refused_unless_go_on(  # noqa: F811
        lab, provisioned, monkeypatch, tmp_path):
    boot = _boot()
    d = _host_dir(lab)
    d.mkdir(parents=True, exist_ok=True)
    for role, late in (("srv", 40.0), ("dly", 20000.0), ("cli", 40.0)):
        (d / f"{role}-{boot[:8]}.json").write_text(json.dumps(_crafted(role, late)))
    bound = _spec().late_bound()
    assert bound["limit_us"] < 20000.0  # 3498 kbit/s: 6862 µs (two packet times)
    try:
        monkeypatch.delenv(hr.CHECK_ENV, raising=False)
        tb = SshTestbed(provisioned)
        try:
            with pytest.raises(EnvironmentError_) as e:
                tb.check(_spec())
        finally:
            tb.close()
        msg = str(e.value)
        assert f"delay node root@{lab.mgmt_addr['dly']}:22" in msg, msg
        assert (f"wake-up lateness p99 20000 µs (at the 5000 µs gap" in msg
                and f"> the {bound['limit_us']:.0f} µs" in msg), msg
        assert lab.mgmt_addr["srv"] not in msg and lab.mgmt_addr["cli"] not in msg, msg
        assert "go-on" in msg

        monkeypatch.setenv(hr.CHECK_ENV, "go-on")
        tb = SshTestbed(provisioned)
        try:
            found = tb.check(_spec())
        finally:
            tb.close()
        recs = found["host_records"]
        assert [r["held"] for r in (recs["nodes"][x] for x in PROBED)] == [True, False, True]
        assert len(recs["refused"]) == 1 and "delay node" in recs["refused"][0]
        assert not any(recs["nodes"][x]["measured_now"] for x in PROBED)  # the crafted ones
        # what the trial's meta.json records of them (testbed.describe)
        described = SshTopology(tb, None, tmp_path, found).describe()
        assert described["host_records"] == recs
    finally:
        shutil.rmtree(d, ignore_errors=True)
