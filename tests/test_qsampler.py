"""The queue sampler reads qdisc statistics over rtnetlink: the netlink parsing on crafted
replies (multi-part, alignment, other devices, stale sequence numbers, errors), the same
values as ``tc -s -j qdisc show`` on a real htb+bfifo tree in a namespace of ours, the sampler
process under traffic read back by parse_queue, and a missing device."""

import errno
import json
import secrets
import signal
import struct
import subprocess
import sys
import time

import pytest

from latency_divide.paths import built_tool
from latency_divide.testbed import qsampler
from latency_divide.parsers.queue import parse_queue

from conftest import ROOT
from netns_util import require_programs


PY = sys.executable


def native_sampler():
    """tools/qsampler, as scripts/setup.sh builds it."""
    path = built_tool("qsampler")
    if not path.exists():
        pytest.fail(f"{path} is missing: run scripts/setup.sh (cargo build --release -p qsampler)")
    return path
DEV, PEER = "ldqa", "ldqb"
ADDR, DEST = "10.231.7.1", "10.231.7.2"
# DEST's frames carry a MAC nobody has: they leave DEV through its qdiscs, reach PEER (in the
# same namespace) and are dropped there as "other host". No traffic leaves the namespace.
SINK_MAC = "02:00:00:00:00:99"
FIFO_LIMIT = 15000
#: what the parser reads, and the rest tc prints for our tree
KEYS = ("kind", "handle", "root", "parent", "refcnt", "options", "bytes", "packets", "drops",
        "overlimits", "requeues", "backlog", "qlen")

# ---------------------------------------------------------------- crafted netlink replies


def _pad(b: bytes) -> bytes:
    return b + b"\0" * (-len(b) % 4)


def _attr(atype: int, payload: bytes) -> bytes:
    return _pad(struct.pack("=HH", 4 + len(payload), atype) + payload)


def _nlmsg(mtype: int, flags: int, seq: int, body: bytes) -> bytes:
    return _pad(struct.pack("=IHHII", 16 + len(body), mtype, flags, seq, 4242) + body)


def _qdisc(seq, ifindex, handle, parent, kind, stats, limit=None):
    nbytes, packets, qlen, backlog, drops, requeues, overlimits = stats
    body = struct.pack("=BBHiIII", 0, 0, 0, ifindex, handle, parent, 2)
    body += _attr(qsampler.TCA_KIND, kind.encode() + b"\0")  # "bfifo\0": 6 bytes, padded
    if limit is not None:
        body += _attr(qsampler.TCA_OPTIONS, struct.pack("=I", limit))
    st = (_attr(qsampler.TCA_STATS_BASIC, struct.pack("=QI", nbytes, packets) + b"\0" * 4)
          + _attr(qsampler.TCA_STATS_QUEUE,
                  struct.pack("=IIIII", qlen, backlog, drops, requeues, overlimits)))
    body += _attr(qsampler.TCA_STATS2 | 0x8000, st)  # NLA_F_NESTED set, as the kernel may
    return _nlmsg(qsampler.RTM_NEWQDISC, qsampler.NLM_F_MULTI, seq, body)


class FakeNetlink:
    """Answers one dump request with the chunks make(seq) returns, one per recv."""

    def __init__(self, make):
        self.make = make
        self.chunks = []
        self.requests = []
        self.closed = False

    def send(self, data):
        self.requests.append(bytes(data))
        seq = struct.unpack_from("=IHHII", data)[3]
        self.chunks = list(self.make(seq))
        return len(data)

    def recv_into(self, buf, nbytes, flags=0):
        chunk = self.chunks.pop(0)
        buf[:len(chunk)] = chunk
        return len(chunk)

    def close(self):
        self.closed = True


def test_dump_parses_multipart_reply_for_our_device_only():
    def make(seq):
        yield (_nlmsg(qsampler.RTM_NEWQDISC, 2, seq - 1, b"\0" * 20)  # stale, earlier request
               + _qdisc(seq, 7, 0x10000, 0xFFFFFFFF, "htb", (100, 2, 0, 0, 0, 0, 5))
               + _qdisc(seq, 8, 0x20000, 0xFFFFFFFF, "pfifo", (1, 1, 1, 1, 1, 1, 1), limit=9))
        yield (_qdisc(seq, 7, 0x100000, 0x10003, "bfifo", (3000, 3, 4, 4168, 17, 1, 0),
                      limit=FIFO_LIMIT)
               + _nlmsg(qsampler.NLMSG_DONE, 2, seq, struct.pack("=i", 0)))

    fake = FakeNetlink(make)
    out = qsampler.QdiscReader(sock=fake).dump(7)
    hdr = struct.unpack_from("=IHHII", fake.requests[0])
    tcm = struct.unpack_from("=BBHiIII", fake.requests[0], 16)
    assert hdr[0] == len(fake.requests[0]) == 36 and hdr[1] == qsampler.RTM_GETQDISC
    assert hdr[2] == qsampler.NLM_F_REQUEST | qsampler.NLM_F_DUMP and tcm[3] == 7
    assert out == [
        {"kind": "htb", "handle": "1:", "root": True, "refcnt": 2, "options": {}, "bytes": 100,
         "packets": 2, "drops": 0, "overlimits": 5, "requeues": 0, "backlog": 0, "qlen": 0},
        {"kind": "bfifo", "handle": "10:", "parent": "1:3", "refcnt": 2,
         "options": {"limit": FIFO_LIMIT}, "bytes": 3000, "packets": 3, "drops": 17,
         "overlimits": 0, "requeues": 1, "backlog": 4168, "qlen": 4},
    ]
    assert not fake.closed


def test_netlink_error_raises_with_errno_and_reopens():
    def make(seq):
        yield _nlmsg(qsampler.NLMSG_ERROR, 0, seq, struct.pack("=i", -errno.EINVAL) + b"\0" * 16)

    fake = FakeNetlink(make)
    reader = qsampler.QdiscReader(sock=fake)
    with pytest.raises(qsampler.NetlinkError) as e:
        reader.dump(7)
    assert e.value.errno == errno.EINVAL and "Invalid argument" in str(e.value)
    assert fake.closed and reader._sock is None  # a fresh socket for the next sample


def test_classid_formatting_matches_tc():
    assert qsampler.tc_handle(0x10000) == "1:" and qsampler.tc_handle(0xFFFF0000) == "ffff:"
    assert qsampler.tc_classid(0xFFFFFFFF) == "root"
    assert qsampler.tc_classid(0x10003) == "1:3"
    assert qsampler.tc_classid(0xFFFFFFF1) == "ffff:fff1"
    assert qsampler.tc_classid(0xA0000) == "a:" and qsampler.tc_classid(0x5) == ":5"


def test_missing_device_exits_2_naming_it():
    dev = "ldq-no" + secrets.token_hex(4)
    res = subprocess.run([PY, "-m", "latency_divide.testbed.qsampler", "--dev", dev, "--interval",
                          "0.05"], capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert res.returncode == 2, res
    assert dev in res.stderr and "cannot read qdiscs" in res.stderr
    assert res.stdout == ""

def test_fifo_of_an_unknown_kind_is_refused_naming_it():
    res = subprocess.run([PY, "-m", "latency_divide.testbed.qsampler", "--dev", "lo", "--fifo",
                          "netem"], capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert res.returncode == 2, res
    assert "'netem'" in res.stderr and "bfifo" in res.stderr
    assert res.stdout == ""


# ---------------------------------------------------------------- real namespace


def _run(argv, timeout=30):
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def ns():
    """A namespace of ours with DEV (veth to PEER) under htb root 1: + class 1:3 at 100 kbit
    + bfifo 10: of FIFO_LIMIT bytes, like the gateway's (linkplan.py)."""
    require_programs("ip", "tc")
    name = "ldq-" + secrets.token_hex(4)
    _run(["ip", "netns", "add", name])
    try:
        n = ["ip", "-n", name]
        t = ["tc", "-n", name]
        for argv in (
            n + ["link", "set", "lo", "up"],
            n + ["link", "add", DEV, "type", "veth", "peer", "name", PEER],
            n + ["link", "set", DEV, "up"],
            n + ["link", "set", PEER, "up"],
            n + ["addr", "add", f"{ADDR}/24", "dev", DEV],
            n + ["neigh", "replace", DEST, "lladdr", SINK_MAC, "dev", DEV, "nud", "permanent"],
            t + ["qdisc", "replace", "dev", DEV, "root", "handle", "1:", "htb", "default", "3",
                 "r2q", "10"],
            t + ["class", "add", "dev", DEV, "parent", "1:", "classid", "1:3", "htb", "rate",
                 "100kbit", "quantum", "1514"],
            t + ["qdisc", "add", "dev", DEV, "parent", "1:3", "handle", "10:", "bfifo", "limit",
                 f"{FIFO_LIMIT}b"],
        ):
            _run(argv)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


BLAST = """
import socket, sys, time
dst, count, pps = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setblocking(False)
t0 = time.monotonic()
for i in range(count):
    delay = t0 + i / pps - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    try:
        s.sendto(bytes(1000), (dst, 9))
    except BlockingIOError:
        pass
"""


def _blast(ns, count, pps):
    """UDP datagrams of 1000 bytes from inside ns to DEST (through DEV's qdiscs)."""
    return subprocess.Popen(["ip", "netns", "exec", ns, PY, "-c", BLAST, DEST, str(count),
                             str(pps)])


COMPARE = """
import json, subprocess, sys
from latency_divide.testbed.qsampler import sample_once
dev = sys.argv[1]
a = sample_once(dev)
t = json.loads(subprocess.run(["tc", "-s", "-j", "qdisc", "show", "dev", dev],
                              capture_output=True, text=True, check=True).stdout)
b = sample_once(dev)
print(json.dumps({"a": a, "tc": t, "b": b}))
"""


def _view(qdiscs):
    return [{k: q.get(k) for k in KEYS} for q in qdiscs]


@pytest.mark.netns
def test_sample_once_equals_tc_on_a_real_htb_bfifo_tree(ns):
    blaster = _blast(ns, 60, 2000)  # far over 100 kbit: the bfifo fills and drops
    assert blaster.wait(timeout=30) == 0
    for _ in range(10):  # htb still dequeues ~12 pkt/s: retry until no change during a read
        got = json.loads(_run(["ip", "netns", "exec", ns, PY, "-c", COMPARE, DEV]).stdout)
        if got["a"] == got["b"]:
            break
    else:
        pytest.fail(f"qdisc counters never stable across one tc call: {got}")
    assert _view(got["a"]) == _view(got["tc"])
    fifo = [q for q in got["a"] if q["kind"] == "bfifo"]
    assert [q["handle"] for q in got["a"]] == ["1:", "10:"]
    assert got["a"][0]["root"] is True and fifo[0]["parent"] == "1:3"
    assert fifo[0]["options"] == {"limit": FIFO_LIMIT}
    assert fifo[0]["backlog"] > 0 and fifo[0]["qlen"] > 0 and fifo[0]["drops"] > 0
    assert fifo[0]["bytes"] > 0 and fifo[0]["packets"] > 0


@pytest.mark.netns
@pytest.mark.parametrize("way", ["all-qdiscs", "fifo-only", "native"])
def test_sampler_process_under_traffic(ns, tmp_path, way):
    out = tmp_path / "queue.jsonl"
    interval = 0.05
    fifo = way != "all-qdiscs"
    extra = ["--fifo", "bfifo"] if fifo else []  # what trials run since format 3
    sampler = [str(native_sampler())] if way == "native" else [
        PY, "-m", "latency_divide.testbed.qsampler"]
    proc = subprocess.Popen(["ip", "netns", "exec", ns, *sampler,
                             "--dev", DEV, "--interval", str(interval), "--out", str(out), *extra],
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        ready = proc.stderr.readline()
        t0 = time.monotonic()
        assert ready.startswith(f"qsampler ready dev={DEV}"), ready
        blaster = _blast(ns, 150, 200)  # 1.6 Mbit/s for 0.75 s into 100 kbit
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        duration = time.monotonic() - t0
        _, err = proc.communicate(timeout=10)
        assert blaster.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    stats = [ln for ln in err.splitlines() if ln.startswith("qsampler stats")]
    assert len(stats) == 1, err
    fields = dict(kv.split("=") for kv in stats[0].split()[2:])
    samples, skipped = int(fields["samples"]), int(fields["skipped"])
    lines = out.read_text().splitlines()
    assert len(lines) == samples
    assert all(json.loads(ln)["qdisc"] is not None for ln in lines), err
    expected = duration / interval
    assert 0.7 * expected <= samples + skipped <= expected + 2, (samples, skipped, duration)
    assert samples >= 0.5 * expected, (samples, skipped, duration)
    df = parse_queue(out.read_text())
    assert len(df) == samples
    assert df["backlog_bytes"].max() > 0 or df["drops"].sum() > 0
    assert df["backlog_bytes"].max() <= FIFO_LIMIT
    assert df["t_unix"].is_monotonic_increasing
    recs = [json.loads(ln) for ln in lines]
    if fifo:  # only the FIFO, only what the parser reads, time to the millisecond
        assert all([q["kind"] for q in r["qdisc"]] == ["bfifo"] for r in recs)
        assert all(set(q) == {"kind", "handle", "parent", "bytes", "backlog", "qlen", "drops"}
                   for r in recs for q in r["qdisc"])
        assert all(round(r["t_unix"], 3) == r["t_unix"] for r in recs)
    else:
        assert all({"htb", "bfifo"} <= {q["kind"] for q in r["qdisc"]} for r in recs)


# ---------------------------------------------------------------- the native sampler


SAME = """
import json, subprocess, sys
from latency_divide.testbed.qsampler import fifo_only, sample_once
native, dev = sys.argv[1], sys.argv[2]
before = fifo_only(sample_once(dev), "bfifo")
p = subprocess.Popen([native, "--dev", dev, "--interval", "0.05", "--fifo", "bfifo"],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
p.stderr.readline()
lines = [p.stdout.readline() for _ in range(4)]
p.terminate()
after = fifo_only(sample_once(dev), "bfifo")
print(json.dumps({"before": before, "after": after, "lines": lines}))
"""


@pytest.mark.netns
def test_native_sampler_writes_the_python_samplers_lines(ns):
    """Byte for byte: the same qdisc list as the Python sampler's ``--fifo``, json.dumps'd with
    its separators, and the time as Python's json.dumps(round(t, 3)) prints it."""
    blaster = _blast(ns, 60, 2000)  # fill the FIFO and drop: every counter non-zero
    assert blaster.wait(timeout=30) == 0
    for _ in range(20):  # htb drains the FIFO at 100 kbit: until nothing moves during a read
        got = json.loads(_run(["ip", "netns", "exec", ns, PY, "-c", SAME, str(native_sampler()),
                               DEV]).stdout)
        if got["before"] == got["after"]:
            break
        time.sleep(0.3)
    else:
        pytest.fail(f"qdisc counters never stable for 0.2 s: {got}")
    want = json.dumps(got["before"], separators=(",", ":"))
    fifo = got["before"][0]
    assert fifo["bytes"] > 0 and fifo["drops"] > 0 and fifo["parent"] == "1:3", fifo
    for line in got["lines"]:
        rec = json.loads(line)
        assert line == ('{"t_unix":' + json.dumps(round(rec["t_unix"], 3)) + f',"dev":"{DEV}",'
                        f'"qdisc":{want}}}' + "\n")
    assert parse_queue("".join(got["lines"]))["drops_total"].tolist() == [fifo["drops"]] * 4


@pytest.mark.parametrize("args, says", [
    (["--dev", "ldq-no-such", "--fifo", "bfifo"], ["ldq-no-such", "cannot read qdiscs"]),
    (["--dev", "lo", "--fifo", "netem"], ["'netem'", "bfifo"]),
    (["--dev", "lo", "--fifo", "bfifo", "--interval", "0"], ["--interval", "\"0\""]),
    (["--dev", "l o", "--fifo", "bfifo"], ["\"l o\"", "interface name"]),
], ids=["missing-device", "unknown-kind", "zero-interval", "bad-name"])
def test_native_sampler_refuses_bad_input_naming_it(tmp_path, args, says):
    out = tmp_path / "queue.jsonl"
    res = subprocess.run([str(native_sampler()), *args, "--out", str(out)], capture_output=True,
                         text=True, timeout=30)
    assert res.returncode == 2, res
    assert all(s in res.stderr for s in says), res.stderr
    assert res.stdout == "" and not out.exists()


def test_topology_runs_the_native_sampler_where_it_is_built(monkeypatch, tmp_path):
    from latency_divide.testbed.local import Topology

    args = ["--dev", "ld-gc", "--interval", "0.1", "--fifo", "bfifo"]
    assert Topology(plan=None).qsampler_argv("ld-gc", 0.1) == [str(native_sampler()), *args]
    monkeypatch.setenv("LATENCY_DIVIDE_ROOT", str(tmp_path))  # a tree of builds without it
    assert Topology(plan=None).qsampler_argv("ld-gc", 0.1) == [
        PY, "-m", "latency_divide.testbed.qsampler", *args]


@pytest.mark.parametrize("interval", ["1", "0.05"])
def test_native_sampler_says_ready_as_the_python_one_does(interval):
    lines = []
    for argv in ([str(native_sampler())], [PY, "-m", "latency_divide.testbed.qsampler"]):
        p = subprocess.Popen([*argv, "--dev", "lo", "--fifo", "bfifo", "--interval", interval],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        try:
            lines.append(p.stderr.readline())
        finally:
            p.terminate()
            p.communicate(timeout=10)
    assert lines[0] == lines[1] == f"qsampler ready dev=lo interval={float(interval)}\n", lines
