"""Link plans: numbers worked out by hand from the CSV, commands, validation, and the real tc
behaviour (htb + bfifo built in a namespace of our own and read back)."""

import json
import re
import secrets
import shutil
import subprocess

import pytest

from latency_divide.errors import ConfigError
from latency_divide.data.households import get_household
from latency_divide.links.plan import DelayPlan, ShaperPlan, check_ifname, htb_r2q, make_linkplan
from latency_divide.testbed.runners import LocalRunner


def test_11406_by_hand():
    # CSV: medianUp 143835.5 B/s -> 1150 kbit/s; medianDown 437324.5 -> 3498; latency 67222 us.
    p = make_linkplan(get_household(11406))
    assert (p.household_id, p.qfactor, p.rtt_ms) == (11406, 2.0, 67.222)
    # uplink q = 2 * 67.222 * 1150 / 1000 = 154.6106 kbit; * 125 = 19326.325 -> 19326 bytes
    assert p.uplink.rate_kbit == 1150
    assert p.uplink.queue_kbit == pytest.approx(154.6106)
    assert p.uplink.queue_bytes == 19326
    # downlink q = 2 * 67.222 * 3498 / 1000 = 470.285112 kbit; * 125 = 58785.639 -> 58785
    assert p.downlink.rate_kbit == 3498
    assert p.downlink.queue_kbit == pytest.approx(470.285112)
    assert p.downlink.queue_bytes == 58785
    # delay 67.222 / 2 = 33.611 ms each way; r2q 10 (quanta 14375 and 43725 B are fine)
    assert p.delay.one_way_ms == pytest.approx(33.611)
    assert (p.uplink.r2q, p.downlink.r2q) == (10, 10)


def test_11750_fast_downlink_by_hand():
    # CSV: medianUp 273673 -> 2189 kbit/s (2189.384); medianDown 2558742.5 -> 20469 (20469.94);
    # latency 28161.5 us -> 28.1615 ms.
    p = make_linkplan(get_household(11750))
    # uplink q = 2 * 28.1615 * 2189 / 1000 = 123.291047 kbit -> 15411.38 B -> 15411
    assert p.uplink.queue_bytes == 15411
    assert p.uplink.queue_kbit == pytest.approx(123.291047)
    # downlink q = 2 * 28.1615 * 20469 / 1000 = 1152.875487 kbit -> 144109.44 B -> 144109
    assert p.downlink.queue_bytes == 144109
    # 20469 kbit/s = 2558625 B/s; /10 = 255862 > 200000 -> r2q = ceil(2558625 / 200000) = 13
    assert p.downlink.r2q == 13
    # 28.1615 / 2 = 14.08075 ms: half microseconds survive formatting
    assert p.delay.commands("ld0")[0][-3] == "14.08075ms"


def test_5819_slow_uplink_by_hand():
    # CSV: medianUp 9063 -> 72 kbit/s (72.504); medianDown 159649.5 -> 1277; latency 17882 us.
    p = make_linkplan(get_household(5819), qfactor=4)
    # uplink q = 4 * 17.882 * 72 / 1000 = 5.150016 kbit -> 643.752 B -> 643
    assert p.uplink.queue_bytes == 643
    # 72 kbit/s = 9000 B/s; /10 = 900 < 1514 -> r2q = 9000 // 1514 = 5 (quantum 1800 B)
    assert p.uplink.r2q == 5 and p.uplink.class_quantum_bytes is None
    # downlink q = 4 * 17.882 * 1277 / 1000 = 91.341256 kbit -> 11417.657 B -> 11417
    assert p.downlink.queue_bytes == 11417


def test_676068_fastest_household_by_hand():
    # CSV: medianDown 44307059 -> 354456 kbit/s; medianUp 2949791.5 -> 23598; latency 13711 us.
    p = make_linkplan(get_household(676068))
    assert (p.downlink.rate_kbit, p.uplink.rate_kbit) == (354456, 23598)
    # 354456 * 125 = 44307000 B/s -> r2q = ceil(221.535) = 222; 23598 * 125 / 200000 -> 15
    assert (p.downlink.r2q, p.uplink.r2q) == (222, 15)
    # downlink q = 2 * 13.711 * 354456 / 1000 = 9719.892432 kbit -> 1214986.554 B
    assert p.downlink.queue_bytes == 1214986


@pytest.mark.parametrize("rate", [1, 8, 12, 13, 80, 121, 122, 16000, 16001, 1_000_000, 10_000_000])
def test_quantum_always_between_mtu_and_200000(rate):
    r2q, quantum = htb_r2q(rate)
    q = quantum if quantum is not None else rate * 125 / r2q
    if rate * 125 >= 1514:
        assert 1514 <= q <= 200_000
    else:
        assert q == 1514


def test_commands_for_11406_uplink():
    p = make_linkplan(get_household(11406))
    assert p.shaper("uplink").commands("ldgw-srv") == [
        ["tc", "qdisc", "replace", "dev", "ldgw-srv", "root", "handle", "1:", "htb", "default", "3",
         "r2q", "10"],
        ["tc", "class", "add", "dev", "ldgw-srv", "parent", "1:", "classid", "1:3", "htb",
         "rate", "1150kbit"],
        ["tc", "qdisc", "add", "dev", "ldgw-srv", "parent", "1:3", "handle", "10:", "bfifo",
         "limit", "19326b"],
    ]
    assert p.delay.commands("lddly0") == [
        ["tc", "qdisc", "replace", "dev", "lddly0", "root", "netem", "delay", "33.611ms",
         "limit", "50000"]
    ]
    assert make_linkplan(get_household(11406), mechanism="delayline").delay.commands("x") == []
    assert p.delay.delayline_argv("lda", "ldb", "/opt/delayline") == [
        "/opt/delayline", "--iface-a", "lda", "--iface-b", "ldb", "--delay-ms", "33.611",
        "--limit", "50000"]


def test_to_dict_is_json_with_dev_placeholders():
    d = json.loads(json.dumps(make_linkplan(get_household(11406)).to_dict()))
    assert d["uplink"]["queue_bytes"] == 19326
    assert d["downlink"]["commands"][0][4] == "{dev}"
    assert d["delay"]["commands"][0][4] == "{dev}"
    assert d["delay"]["mechanism"] == "netem" and d["delay"]["delayline_argv"] is None
    d2 = make_linkplan(get_household(11406), mechanism="delayline").to_dict()
    assert d2["delay"]["delayline_argv"][1:5] == ["--iface-a", "{dev_a}", "--iface-b", "{dev_b}"]


def test_shaper_direction_lookup():
    p = make_linkplan(get_household(11406))
    assert p.shaper("downlink") is p.downlink
    with pytest.raises(ConfigError, match="'sideways'"):
        p.shaper("sideways")


@pytest.mark.parametrize("q", [0, -1, float("nan"), float("inf"), "2", True])
def test_bad_qfactor(q):
    with pytest.raises(ConfigError, match="qfactor"):
        make_linkplan(get_household(11406), qfactor=q)


def test_bad_rates_and_rtt():
    h = get_household(11406)
    from dataclasses import replace

    with pytest.raises(ConfigError, match="uplink rate 0"):
        make_linkplan(replace(h, upload_kbps=0))
    with pytest.raises(ConfigError, match="RTT 0.0 ms"):
        make_linkplan(replace(h, rtt_ms=0.0))
    with pytest.raises(ConfigError, match="delay mechanism 'tbf'"):
        make_linkplan(h, mechanism="tbf")
    with pytest.raises(ConfigError):
        ShaperPlan("uplink", -5, 1.0, 1)
    with pytest.raises(ConfigError):
        DelayPlan(-1.0, "netem")


@pytest.mark.parametrize("dev", ["", "x" * 16, "eth/0", "eth 0", "eth:0", "a\tb", "a\x01", ".", ".."])
def test_bad_interface_names(dev):
    p = make_linkplan(get_household(11406))
    with pytest.raises(ConfigError) as e:
        p.uplink.commands(dev)
    assert repr(dev) in str(e.value)
    with pytest.raises(ConfigError):
        p.delay.delayline_argv(dev, "ok")


def test_good_interface_names():
    for dev in ["x", "x" * 15, "ld-ab12cd-gw0", "veth.12", "eth0.100"]:
        assert check_ifname(dev) == dev


def test_render_shell_is_valid_sh_with_the_numbers():
    text = make_linkplan(get_household(11406)).render_shell()
    subprocess.run(["sh", "-n"], input=text, text=True, check=True)
    for s in ["154.6106 kbit = 19326 bytes", "bfifo limit 19326b", "rate 3498kbit", "33.611ms",
              "ip route get", "r2q 10"]:
        assert s in text
    dl = make_linkplan(get_household(11406), mechanism="delayline").render_shell()
    subprocess.run(["sh", "-n"], input=dl, text=True, check=True)
    assert "--delay-ms 33.611" in dl and "ethtool -K" in dl


# --- the real tc ------------------------------------------------------------------------------



@pytest.fixture
def veth_ns():
    """A namespace of our own with a veth pair (ldlpa <-> ldlpb), removed afterwards."""
    if shutil.which("tc") is None or shutil.which("ip") is None:
        pytest.fail("tc/ip missing: run scripts/setup.sh")
    ns = f"ld-{secrets.token_hex(3)}-lp"
    host = LocalRunner()
    host.run(["ip", "netns", "add", ns])
    try:
        r = LocalRunner(ns)
        r.run(["ip", "link", "add", "ldlpa", "type", "veth", "peer", "name", "ldlpb"])
        r.run(["ip", "link", "set", "ldlpa", "up"])
        r.run(["ip", "link", "set", "ldlpb", "up"])
        yield r
    finally:
        host.run(["ip", "netns", "del", ns], check=False)


def _qdiscs(r: LocalRunner, dev: str) -> list[dict]:
    return json.loads(r.run(["tc", "-j", "qdisc", "show", "dev", dev]).stdout)


@pytest.mark.netns
@pytest.mark.parametrize("hid", [11406, 11750, 5819, 676068])
def test_plan_on_real_tc_is_exact_and_silent(veth_ns, hid):
    plan = make_linkplan(get_household(hid))
    for direction in ("uplink", "downlink"):
        s = plan.shaper(direction)
        for argv in s.commands("ldlpa"):
            res = veth_ns.run(argv)
            assert "quantum" not in res.stderr + res.stdout, (argv, res.stderr)
        q = {x["kind"]: x for x in _qdiscs(veth_ns, "ldlpa")}
        assert q["bfifo"]["options"]["limit"] == s.queue_bytes
        assert q["htb"]["options"]["r2q"] == s.r2q
        klass = veth_ns.run(["tc", "-d", "class", "show", "dev", "ldlpa"]).stdout
        quantum = int(re.search(r"quantum (\d+)", klass).group(1))
        assert 1514 <= quantum <= 200_000
        assert quantum == s.rate_kbit * 125 // s.r2q
        for argv in s.reset_commands("ldlpa"):
            veth_ns.run(argv)


@pytest.mark.netns
def test_tc_reads_kbit_sizes_as_128_bytes(veth_ns):
    """Why the plan gives the bfifo limit in bytes: the paper's `limit <q>kbit` is not q*125."""
    veth_ns.run(["tc", "qdisc", "replace", "dev", "ldlpa", "root", "bfifo", "limit", "154.6106kbit"])
    limit = _qdiscs(veth_ns, "ldlpa")[0]["options"]["limit"]
    assert limit == 19790  # 154.6106 * 128 = 19790.16, not 154.6106 * 125 = 19326
    veth_ns.run(["tc", "qdisc", "replace", "dev", "ldlpa", "root", "bfifo", "limit", "19326b"])
    assert _qdiscs(veth_ns, "ldlpa")[0]["options"]["limit"] == 19326


@pytest.mark.netns
def test_rendered_gateway_script_applies(veth_ns):
    """The script `latency-divide linkplan` prints, run for real (interfaces given as variables)."""
    script = make_linkplan(get_household(11406)).render_shell()
    env_argv = ["env", "GW_TO_SERVER=ldlpa", "GW_TO_CLIENT=ldlpb", "sh", "-s", "gateway"]
    res = veth_ns.run(env_argv, input=script)
    assert "quantum" not in res.stderr
    assert {x["kind"]: x["options"].get("limit") for x in _qdiscs(veth_ns, "ldlpa")}["bfifo"] == 19326
    assert {x["kind"]: x["options"].get("limit") for x in _qdiscs(veth_ns, "ldlpb")}["bfifo"] == 58785
    # re-applying works (the script deletes the old root first)
    veth_ns.run(env_argv, input=script)
