"""Policed links (links.policer, buffer models ``policed-<N>ms``): the plan as data, the
refusals, and, in real namespaces with the real delay line, a policer that drops instead of
queueing where the default (shaped) plan queues.

The live tests build the project's four-namespace topology (testbed.local.Topology) from a
link plan of 2 Mbit/s up, 20 Mbit/s down and 40 ms RTT, offer a UDP flow of about twice the
uplink's rate from the client to the server with a ping beside it, and sample the gateway's
uplink FIFO with ``tc -s -j`` while it runs.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import sys
import time

import pytest
from conftest import ROOT
from netns_util import require_programs

from latency_divide.cli import main as cli_main
from latency_divide.data.households import get_household
from latency_divide.errors import ConfigError, EnvironmentError_
from latency_divide.links import policer as policing
from latency_divide.links.buffers import check_model
from latency_divide.links.plan import DelayPlan, link_plan, make_linkplan, policer_for
from latency_divide.testbed.delay import choose_policer
from latency_divide.trial.definition import definition_id, make_definition

DELAYLINE = ROOT / "target" / "release" / "delayline"
UP_KBIT, DOWN_KBIT, RTT_MS = 2000, 20000, 40.0
POLICED = "policed-5ms"
#: What the default plans and a default definition were before policed models existed
#: (computed from the code at the commit before them, 26d91fd1): they must not move.
DEFAULT_PLANS_SHA256 = "cb741039831def26559e09822d5caf79a427be5164452e157acc334467fd4fc5"
DEFAULT_SCRIPTS_SHA256 = "6cf0ef737f9b3242b9a0142783514a468059157437fc2de74742e3e2f0b52c70"
DEFAULT_DEFINITION_ID = "def-e2341b0b85"


def _definition(**kw) -> dict:
    return make_definition(testbed="local", delay="auto", qfactor=2.0, duration_s=20, idle_s=3,
                           ping_interval_s=0.2, queue_interval_s=0.1, tool_name="tquic-perf",
                           window_bytes=65536, cc="cubic", delta=None, **kw)


# --- the plan as data ---------------------------------------------------------------------------

def test_default_plans_scripts_and_definitions_are_what_they_were():
    plans = [make_linkplan(get_household(h), 2.0, mech, model).to_dict()
             for h in (11406, 11750, 734, 799254) for mech in ("netem", "delayline")
             for model in ("qfactor", "mba-2014", "queue-100ms")]
    plans.append(link_plan(UP_KBIT, DOWN_KBIT, RTT_MS, mechanism="delayline").to_dict())
    text = json.dumps(plans, sort_keys=True, separators=(",", ":"))
    assert hashlib.sha256(text.encode()).hexdigest() == DEFAULT_PLANS_SHA256
    scripts = "".join(make_linkplan(get_household(h), 2.0, m).render_shell()
                      for h in (11406, 734) for m in ("netem", "delayline"))
    assert hashlib.sha256(scripts.encode()).hexdigest() == DEFAULT_SCRIPTS_SHA256
    assert definition_id(_definition()) == DEFAULT_DEFINITION_ID
    policed = _definition(buffer_model=POLICED)
    assert policed["buffer_model"] == POLICED and definition_id(policed) != DEFAULT_DEFINITION_ID


def test_a_policed_plan_records_its_policers_and_polices_in_the_delay_line():
    plan = link_plan(UP_KBIT, DOWN_KBIT, RTT_MS, mechanism="delayline", buffer_model=POLICED)
    d = plan.to_dict()
    assert d["buffer_model"] == POLICED
    # 5 ms of 2 Mbit/s is 1250 bytes: raised to the floor of 10 frames; of 20 Mbit/s 12500
    up, down = d["uplink"]["policer"], d["downlink"]["policer"]
    assert up == {"rate_kbit": 2000, "burst_ms": 5, "burst_bytes": 15140, "floored": True,
                  "implementation": "delayline"}
    assert down["burst_bytes"] == 15140 and down["rate_kbit"] == 20000
    # no shaper: a root bfifo holding the bucket plus 4 frames, nothing else on the gateway
    for s in (plan.uplink, plan.downlink):
        assert s.commands("ld-gs") == [["tc", "qdisc", "replace", "dev", "ld-gs", "root",
                                        "handle", "10:", "bfifo", "limit", "21196b"]]
        assert s.queue_bytes == 15140 + 4 * 1514
    # the delay line's a->b is the downlink (gateway to client), b->a the uplink
    argv = plan.delay.delayline_argv("ld-dg", "ld-dc")
    assert argv[argv.index("--police-ab") + 1] == "20000000:15140"
    assert argv[argv.index("--police-ba") + 1] == "2000000:15140"
    assert d["delay"]["delayline_argv"][-4:] == ["--police-ab", "20000000:15140",
                                                 "--police-ba", "2000000:15140"]
    # a fast link's burst is N ms of its rate
    fast = link_plan(300_000, 300_000, 10.0, mechanism="delayline", buffer_model="policed-20ms")
    assert fast.uplink.policer.burst_bytes == 750_000 and not fast.uplink.policer.floored


def test_the_kernel_police_action_as_argv():
    plan = link_plan(UP_KBIT, DOWN_KBIT, RTT_MS, mechanism="netem", buffer_model=POLICED)
    assert plan.uplink.policer.implementation == "kernel"
    assert plan.delay.delayline_argv("a", "b")[-2:] == ["--limit", "50000"]  # not policed there
    assert plan.uplink.commands("ld-gs") == [
        ["tc", "qdisc", "replace", "dev", "ld-gs", "root", "handle", "10:", "bfifo", "limit",
         "21196b"],
        ["tc", "qdisc", "add", "dev", "ld-gs", "clsact"],
        ["tc", "filter", "add", "dev", "ld-gs", "egress", "protocol", "all", "prio", "1", "u32",
         "match", "u32", "0", "0", "action", "police", "rate", "2000kbit", "burst", "15140b",
         "drop"],
    ]
    assert plan.uplink.reset_commands("ld-gs") == [
        ["tc", "qdisc", "del", "dev", "ld-gs", "root"],
        ["tc", "qdisc", "del", "dev", "ld-gs", "clsact"]]
    # the testbed's choice wins over the mechanism's default
    dl = link_plan(UP_KBIT, DOWN_KBIT, RTT_MS, mechanism="delayline", buffer_model=POLICED,
                   policer_impl="kernel")
    assert dl.downlink.policer.implementation == "kernel" and "--police-ab" not in \
        dl.delay.delayline_argv("a", "b")
    script = make_linkplan(get_household(11406), buffer_model=POLICED).render_shell()
    assert "action police rate 1150kbit burst 15140b drop" in script
    assert 'tc qdisc del dev "$GW_TO_SERVER" clsact 2>/dev/null || true' in script


# --- refusals ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["policed-0ms", "policed-05ms", "policed-5001ms", "policed-5",
                                  "policed", "policed-5.5ms"])
def test_a_bad_policed_name_is_refused_naming_the_form(name):
    with pytest.raises(ConfigError) as e:
        check_model(name)
    assert repr(name) in str(e.value) and policing.FORM in str(e.value)


def test_bad_rates_bursts_and_placements_are_refused():
    with pytest.raises(ConfigError, match=r"uplink rate 0 kbit/s must be an integer > 0"):
        link_plan(0, DOWN_KBIT, RTT_MS, mechanism="delayline", buffer_model=POLICED)
    ok = dict(direction="uplink", rate_kbit=2000, burst_ms=5, burst_bytes=15140,
              floored=True, implementation="delayline")
    for bad, says in [({"rate_kbit": -1}, "policer rate -1 kbit/s"),
                      ({"rate_kbit": 2.5}, "policer rate 2.5 kbit/s"),
                      ({"burst_bytes": 1514}, "burst 1514 bytes: at least 15140"),
                      ({"burst_ms": 0}, "burst 0 ms: allowed 1 to 5000"),
                      ({"implementation": "tbf"}, "'tbf': allowed kernel, delayline")]:
        with pytest.raises(ConfigError, match=says):
            policing.Policer(**{**ok, **bad})
    with pytest.raises(ConfigError, match="needs the delayline delay mechanism, not 'netem'"):
        policer_for("netem", "delayline")
    with pytest.raises(ConfigError, match="needs the delayline delay mechanism"):
        DelayPlan(one_way_ms=20.0, mechanism="netem", police_ba="2000000:15140")
    with pytest.raises(EnvironmentError_, match="no police action while the delay is 'netem'"):
        choose_policer(lambda: False, "netem")
    assert choose_policer(lambda: False, "delayline") == "delayline"
    assert choose_policer(lambda: True, "delayline") == "kernel"


def test_the_command_line_refuses_a_bad_policed_model(capsys):
    with pytest.raises(SystemExit) as e:
        cli_main(["trial", "11406", "--direction", "uplink", "--cc", "cubic",
                  "--buffer-model", "policed-0ms", "--out", "/nonexistent"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "'policed-0ms': not a buffer model" in err and policing.FORM in err


# --- in real namespaces ---------------------------------------------------------------------------

#: A paced UDP sender and a counting receiver, run with this Python in a namespace.
#: ``send ADDR PORT SECONDS KBIT SIZE``: SIZE-byte payloads at KBIT of Ethernet frames, each at
#: its slot (late ones at once); ``recv PORT SECONDS``: prints "listening", then one JSON line.
FLOW = r"""
import json, socket, sys, time
mode = sys.argv[1]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
if mode == "recv":
    port, secs = int(sys.argv[2]), float(sys.argv[3])
    s.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), 8 << 20)
    s.bind(("0.0.0.0", port)); s.settimeout(1.0)
    print("listening", flush=True)
    n, first, last, end = 0, None, None, time.monotonic() + secs
    while time.monotonic() < end:
        try:
            s.recv(65536)
        except socket.timeout:
            continue
        last = time.monotonic(); first = first or last; n += 1
    print(json.dumps({"datagrams": n, "first": first, "last": last}), flush=True)
else:
    addr, port, secs, kbit, size = (sys.argv[2], int(sys.argv[3]), float(sys.argv[4]),
                                    float(sys.argv[5]), int(sys.argv[6]))
    gap = (size + 42) * 8 / (kbit * 1000)  # UDP 8 + IP 20 + Ethernet 14 bytes of headers
    t0 = time.monotonic(); i = 0
    while time.monotonic() < t0 + secs:
        wait = t0 + i * gap - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        s.sendto(b"x" * size, (addr, port)); i += 1
    print(i, flush=True)
"""
PAYLOAD = 1200
FRAME = PAYLOAD + 42
FLOW_S = 6.0


def _backlog(topo) -> int:
    out = topo.runner("gw").run(["tc", "-s", "-j", "qdisc", "show", "dev",
                                 topo.gateway_egress("uplink")]).stdout
    return max(q.get("backlog", 0) for q in json.loads(out) if q["kind"] == "bfifo")


def _rtts(text: str) -> list[float]:
    return [float(w[5:]) for w in text.split() if w.startswith("time=")]


def _offer_twice_the_uplink(topo, tmp_path) -> dict:
    """Idle RTT, then a UDP flow at twice the uplink's rate from client to server for FLOW_S
    with a ping beside it and the gateway's uplink FIFO sampled: what each measured."""
    cli, srv = topo.runner("cli"), topo.runner("srv")
    idle = cli.run(["ping", "-n", "-c", "10", "-i", "0.1", "-W", "2", topo.addr("srv")],
                   timeout=20).stdout
    recv_out = tmp_path / "recv.out"
    recv = srv.start([sys.executable, "-c", FLOW, "recv", "9999", str(FLOW_S + 3)],
                     stdout=recv_out)
    deadline = time.monotonic() + 10
    while "listening" not in recv_out.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    ping_out = tmp_path / "ping.out"
    ping = cli.start(["ping", "-n", "-i", "0.1", topo.addr("srv")], stdout=ping_out)
    send = cli.start([sys.executable, "-c", FLOW, "send", topo.addr("srv"), "9999",
                      str(FLOW_S), str(2 * UP_KBIT), str(PAYLOAD)])
    backlogs = []
    t0 = time.monotonic()
    while send.poll() is None and time.monotonic() < t0 + FLOW_S + 10:
        if time.monotonic() > t0 + 1.0:  # past the bucket's first burst and the FIFO's fill
            backlogs.append(_backlog(topo))
        time.sleep(0.1)
    assert send.wait(timeout=10) == 0
    ping.stop()
    recv.wait(timeout=FLOW_S + 10)
    got = json.loads(recv_out.read_text().splitlines()[-1])
    rate_kbit = got["datagrams"] * FRAME * 8 / (got["last"] - got["first"]) / 1000
    loaded = _rtts(ping_out.read_text())[10:]  # from 1 s into the flow
    return {"base_ms": min(_rtts(idle)), "loaded_ms": loaded, "backlogs": backlogs,
            "rate_kbit": rate_kbit}


@pytest.fixture
def topology(tmp_path):
    require_programs("ip", "tc", "ethtool", "ping")
    if not DELAYLINE.exists():
        pytest.fail(f"{DELAYLINE} missing: run scripts/setup.sh")
    from latency_divide.testbed.local import Topology

    def make(plan):
        return Topology(plan, delayline_bin=str(DELAYLINE), log_dir=tmp_path)

    return make


def _police_drops(log: str) -> dict[str, str]:
    usage = [ln for ln in log.splitlines() if ln.startswith("delayline usage ")][-1]
    return dict(kv.split("=", 1) for kv in usage.split() if kv.startswith("police_"))


@pytest.mark.netns
@pytest.mark.slow
def test_a_policed_uplink_drops_instead_of_queueing(topology, tmp_path):
    plan = link_plan(UP_KBIT, DOWN_KBIT, RTT_MS, mechanism="delayline", buffer_model=POLICED)
    with topology(plan) as topo:
        m = _offer_twice_the_uplink(topo, tmp_path)
        assert topo.stop_delayline() == 0
    log = (tmp_path / "delayline.log").read_text()
    assert "police_ab=20000000:15140 police_ba=2000000:15140" in log
    police = _police_drops(log)
    # it drops: about half the offered frames, in the uplink only
    assert int(police["police_ba_drops"]) > 0, log
    # the flow's frames, and now and then one of the ping's (CI of 2026-12-01: one of 1,203)
    drops, drop_bytes = int(police["police_ba_drops"]), int(police["police_ba_drop_bytes"])
    assert 0.99 * drops * FRAME <= drop_bytes <= drops * FRAME
    # ... delivers the policed rate (plus at most its burst over the flow) ...
    burst_kbit = 15140 * 8 / FLOW_S / 1000
    assert 0.85 * UP_KBIT <= m["rate_kbit"] <= 1.05 * UP_KBIT + burst_kbit, m["rate_kbit"]
    # ... and queues nothing: the gateway's FIFO stays empty, the ping sees the base RTT
    assert m["backlogs"] and max(m["backlogs"]) <= FRAME, m["backlogs"]
    added = statistics.median(m["loaded_ms"]) - m["base_ms"]
    assert len(m["loaded_ms"]) >= 20 and added < 5.0, (m["base_ms"], m["loaded_ms"])


@pytest.mark.netns
@pytest.mark.slow
def test_the_same_flow_through_the_shaped_plan_queues(topology, tmp_path):
    plan = link_plan(UP_KBIT, DOWN_KBIT, RTT_MS, mechanism="delayline")
    assert plan.uplink.policer is None and plan.uplink.queue_bytes == 20000  # 2 x BDP
    with topology(plan) as topo:
        m = _offer_twice_the_uplink(topo, tmp_path)
    assert 0.9 * UP_KBIT <= m["rate_kbit"] <= 1.05 * UP_KBIT, m["rate_kbit"]
    # the FIFO fills (20000 bytes, 80 ms at 2 Mbit/s) and the ping waits in it
    assert statistics.median(m["backlogs"]) > 10000, m["backlogs"]
    added = statistics.median(m["loaded_ms"]) - m["base_ms"]
    assert added > 40.0, (m["base_ms"], m["loaded_ms"])


@pytest.mark.netns
def test_the_kernel_police_action_drops_instead_of_queueing(topology, tmp_path):
    from latency_divide.testbed.netns import police_available

    if not police_available():
        pytest.skip("this kernel has no police action (CONFIG_NET_ACT_POLICE); its argv is "
                    "checked by test_the_kernel_police_action_as_argv")
    plan = link_plan(UP_KBIT, DOWN_KBIT, RTT_MS, mechanism="delayline", buffer_model=POLICED,
                     policer_impl="kernel")
    with topology(plan) as topo:
        m = _offer_twice_the_uplink(topo, tmp_path)
    burst_kbit = 15140 * 8 / FLOW_S / 1000
    assert 0.85 * UP_KBIT <= m["rate_kbit"] <= 1.05 * UP_KBIT + burst_kbit, m["rate_kbit"]
    assert m["backlogs"] and max(m["backlogs"]) <= FRAME, m["backlogs"]
    added = statistics.median(m["loaded_ms"]) - m["base_ms"]
    assert added < 5.0, (m["base_ms"], m["loaded_ms"])


@pytest.mark.netns
def test_the_delay_line_refuses_a_bucket_below_one_frame(tmp_path):
    import secrets

    from latency_divide.testbed.runners import LocalRunner

    require_programs("ip", "ethtool")
    tag = secrets.token_hex(3)
    ns, host = f"ld-{tag}-dly", LocalRunner()
    a, b = f"ld{tag}pa", f"ld{tag}pb"
    host.run(["ip", "netns", "add", ns])
    try:
        r = LocalRunner(ns)
        r.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b])
        for dev in (a, b):
            r.run(["ethtool", "-K", dev, "tx", "off", "rx", "off", "tso", "off", "gso", "off",
                   "gro", "off"])
            r.run(["ip", "link", "set", dev, "up"])
        res = r.run([str(DELAYLINE), "--iface-a", a, "--iface-b", b, "--delay-ms", "1",
                     "--police-ba", "1000000:1000"], check=False, timeout=10)
        assert res.returncode == 1
        assert (f"--police-ba 1000000:1000: a burst of 1000 bytes cannot pass a full-size frame "
                f"of {a} (1518 bytes, MTU 1500); give a burst of at least 1518 bytes"
                in res.stderr), res.stderr
    finally:
        host.run(["ip", "netns", "del", ns], check=False)
