"""The four-namespace topology: names, commands, real setup/teardown, idle RTT fidelity,
and the clean command's precision (only our leftovers, only dead owners, idempotent)."""

import json
import subprocess
import sys

import pytest

from latency_divide.testbed import netns
from latency_divide.vocab import ROLES
from latency_divide.testbed.local import Topology, resolve_delay_mechanism
from latency_divide.testbed.netns import (
    LINKS,
    SERVER_ADDR,
    link_commands,
    netem_available,
    new_tag,
    ns_name,
    parse_ns_name,
    setup_commands,
    write_owner_record,
)
from latency_divide import PREFIX
from latency_divide.testbed.clean import clean
from latency_divide.errors import LatencyDivideError
from latency_divide.data.households import get_household
from latency_divide.links.plan import make_linkplan
from latency_divide.parsers.ping import parse_ping

from conftest import ROOT
from netns_util import our_namespaces, require_programs

DELAYLINE = ROOT / "target" / "release" / "delayline"


def test_names_carry_prefix_and_fit_linux_limits():
    tag = new_tag()
    for role in ROLES:
        name = ns_name(tag, role)
        assert name.startswith(PREFIX) and parse_ns_name(name) == (tag, role)
    for pair in LINKS:
        for _, ifname in pair:
            assert ifname.startswith("ld") and len(ifname) <= 15
    assert parse_ns_name("ld-zz-srv") is None          # tag not hex
    assert parse_ns_name("other-abc123-srv") is None   # not ours
    assert parse_ns_name("ld-abc123-web") is None      # not one of our roles


def test_setup_commands_are_argv_lists_with_paper_addresses():
    cmds = setup_commands("abc123", "netem")
    assert all(isinstance(argv, list) and all(isinstance(a, str) for a in argv)
               for _, argv in cmds)
    flat = [" ".join(a) for _, a in cmds]
    assert "ip addr add 10.10.1.1/24 dev ld-s0" in flat
    assert "ip addr add 10.10.2.2/24 dev ld-c0" in flat
    assert any(a.startswith("ip link add ld-br0 type bridge") for a in flat)
    assert not any("bridge" in a for a in (" ".join(x) for _, x in
                                           setup_commands("abc123", "delayline")))
    with pytest.raises(ValueError, match="delay mechanism 'tc'"):
        setup_commands("abc123", "tc")


def test_link_commands_put_each_direction_on_its_egress():
    plan = make_linkplan(get_household(11406), 2.0, mechanism="netem")
    cmds = link_commands(plan)
    gw = [" ".join(a) for node, a in cmds if node == "gw"]
    assert any("dev ld-gs" in c and "rate 1150kbit" in c for c in gw)   # uplink toward server
    assert any("dev ld-gc" in c and "rate 3498kbit" in c for c in gw)   # downlink toward client
    assert sum(1 for node, a in cmds if node == "dly") == 2             # netem on both ports


def _ping(runner, target, count=20, interval=0.05):
    res = runner.run(["ping", "-D", "-n", "-c", str(count), "-i", str(interval), target],
                     timeout=count * interval + 15)
    return parse_ping(res.stdout)


@pytest.mark.netns
@pytest.mark.parametrize("household", [11406, 10232, 9747, 8268])
def test_idle_rtt_matches_household_within_1ms(household):
    """Fidelity: the idle RTT across the topology is the household's RTT (+ <1 ms)."""
    require_programs("ping", "ethtool", "tc")
    mechanism = resolve_delay_mechanism("auto")
    h = get_household(household)
    plan = make_linkplan(h, 2.0, mechanism=mechanism)
    topo = Topology(plan, delayline_bin=str(DELAYLINE))
    with topo:
        assert topo.setup_s < 2.0, f"setup took {topo.setup_s:.2f} s"
        _ping(topo.runner("cli"), SERVER_ADDR, count=3)   # ARP warm-up
        rtts = _ping(topo.runner("cli"), SERVER_ADDR)["rtt_ms"].dropna()
        assert len(rtts) >= 18
        err = rtts.median() - h.rtt_ms
        assert -0.2 <= err <= 1.0, f"median idle RTT {rtts.median():.3f} ms vs {h.rtt_ms} ms"
    assert topo.teardown_s < 2.0, f"teardown took {topo.teardown_s:.2f} s"
    assert our_namespaces(topo.tag) == []


@pytest.mark.netns
def test_teardown_removes_everything_even_after_a_failure():
    plan = make_linkplan(get_household(11406), 2.0, mechanism="delayline")
    topo = Topology(plan, delayline_bin="/nonexistent/delayline")
    with pytest.raises(LatencyDivideError, match="delay line exited at start"):
        with topo:
            pass
    assert our_namespaces(topo.tag) == []
    assert not topo.owner_file.exists()


@pytest.mark.netns
def test_clean_removes_only_dead_owners_leftovers_and_is_idempotent(tmp_path):
    # A topology whose owner dies without tearing down: a child process builds it, then
    # is SIGKILLed. Another, owned by this (live) process, must be kept.
    code = (
        "import os, sys, time\n"
        "from latency_divide.testbed.local import Topology\n"
        "from latency_divide.data.households import get_household\n"
        "from latency_divide.links.plan import make_linkplan\n"
        "t = Topology(make_linkplan(get_household(11406), 2.0, mechanism='delayline'))\n"
        "t._start_delayline = lambda ports: None\n"
        "t.up(); print(t.tag, flush=True); time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    dead_tag = child.stdout.readline().strip()
    child.kill()
    child.wait()
    assert len(our_namespaces(dead_tag)) == 4

    live = Topology(make_linkplan(get_household(11406), 2.0, mechanism="delayline"))
    live._start_delayline = lambda ports: None
    try:
        live.up()
        out = subprocess.run([str(ROOT / ".venv/bin/latency-divide"), "clean"],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert our_namespaces(dead_tag) == []
        assert len(our_namespaces(live.tag)) == 4, "clean removed a live owner's namespaces"
        assert f"removed namespace ld-{dead_tag}-srv" in out.stdout
        again = clean()
        assert not any(n.startswith(f"ld-{dead_tag}") for n in again.removed)
        assert again.errors == []
    finally:
        live.down()
    assert our_namespaces(live.tag) == []


@pytest.mark.netns
def test_clean_skips_a_malformed_owner_record_and_cleans_the_rest(tmp_path, monkeypatch):
    """A record it cannot trust (not JSON, pid 0 or -1: os.kill(-1, 0) would ask about every
    process) is named in a warning and its namespaces are left alone; the rest is cleaned."""
    monkeypatch.setattr(netns, "STATE_DIR", tmp_path)
    tags = {"bad": new_tag(), "neg": new_tag(), "dead": new_tag()}
    (tmp_path / f"{tags['bad']}.json").write_text("{not json")
    (tmp_path / f"{tags['neg']}.json").write_text('{"pid": -1}')
    # a dead owner: a process that has exited
    gone = subprocess.Popen(["true"])
    gone.wait()
    (tmp_path / f"{tags['dead']}.json").write_text(f'{{"pid": {gone.pid}}}')
    made = [ns_name(t, "srv") for t in tags.values()]
    try:
        for ns in made:
            subprocess.run(["ip", "netns", "add", ns], check=True)
        rep = clean()
        assert rep.errors == [], rep.errors
        assert any(f"{tags['bad']}.json: unreadable owner record" in w for w in rep.warnings)
        assert any(f"{tags['neg']}.json: malformed owner record (pid -1)" in w
                   for w in rep.warnings), rep.warnings
        assert ns_name(tags["dead"], "srv") in rep.removed
        assert our_namespaces(tags["bad"]) and our_namespaces(tags["neg"])
        assert (tmp_path / f"{tags['bad']}.json").exists()
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.mark.netns
def test_the_netem_probe_owns_its_namespace_like_every_other(tmp_path, monkeypatch):
    monkeypatch.setattr(netns, "STATE_DIR", tmp_path)
    monkeypatch.setattr(netns, "_NETEM_PROBE", None)
    seen = []
    real = write_owner_record

    def spy(tag, namespaces):
        assert not any(our_namespaces(tag))  # written before the namespace exists
        seen.append((tag, list(namespaces)))
        return real(tag, namespaces)

    monkeypatch.setattr(netns, "write_owner_record", spy)
    answer = netem_available()
    assert len(seen) == 1 and seen[0][1] == [ns_name(seen[0][0], "gw")]
    assert our_namespaces(seen[0][0]) == []
    assert [p.name for p in tmp_path.iterdir()] == ["probes"]  # only this boot's answer
    # the next trial job (a process of its own) reads the answer: no namespace of its own
    cache = netns.netem_cache()
    rec = json.loads(cache.read_text())
    assert rec["netem"] is answer and rec["key"]["boot_id"]
    monkeypatch.setattr(netns, "_NETEM_PROBE", None)
    assert netem_available() is answer and len(seen) == 1
    # another boot, kernel or module index asks the kernel again
    rec["key"]["boot_id"] = "another boot"
    cache.write_text(json.dumps(rec))
    monkeypatch.setattr(netns, "_NETEM_PROBE", None)
    assert netem_available() is answer and len(seen) == 2
    assert json.loads(cache.read_text())["key"]["boot_id"] != "another boot"


def test_each_nodes_ip_commands_run_in_one_process():
    for mechanism in ("netem", "delayline"):
        cmds = setup_commands("abc123", mechanism)
        groups = netns.grouped(cmds)
        # the same commands, in the same order
        assert [(n, a) for n, argvs in groups for a in argvs] == cmds
        # the host's namespaces and veths in one batch, one per node, ethtool and sysctl alone
        assert [n for n, argvs in groups if argvs[0][0] == "ip"] == [None, *ROLES]
        assert len(groups) == 1 + len(ROLES) + 2 * len(LINKS) + 1, groups
