#!/usr/bin/env python3
"""What tquic-perf's batched UDP I/O saves: syscalls per packet and CPU per Mbit/s of the
sender and the receiver, with UDP GSO (+ GRO, recvmmsg) against the fallbacks, in one run.

Configurations (both ends get the same flags; tools/tquic-perf/README.md, "Batching"):

- ``gso``: the default (``-gso auto -gro auto``): GSO messages, several per sendmmsg; GRO and
  recvmmsg on receive;
- ``sendmmsg``: ``-gso off -gro off``: one packet per message, a batch per sendmmsg/recvmmsg;
- ``per-packet``: ``-gso off -gro off -mmsg=false``: one syscall per datagram, the tool's
  syscall pattern before batching;
- ``baseline`` (only with ``--baseline BIN``): another tquic-perf binary, e.g. one built from
  the commit before batching; it reports no syscall counts.

Paths:

- ``loopback`` (default): unbound, 127.0.0.1 of the host: the CPU-bound case; both ends run
  as fast as the CPU and tquic allow.
- ``veth`` (``--rate-mbit R``, needs root): server --- gateway --- client, three network
  namespaces of our own (prefix ``ld-tqb-``, removed in ``finally``) joined by veth pairs
  with every offload off, as the experiment's; the gateway forwards and shapes both ways
  with an htb of R Mbit/s and a 20 ms bfifo (no added delay). The sender's veth has no
  segmentation offload, so the kernel cuts each GSO message into MTU-sized frames before
  that veth, and the gateway's qdisc sees single frames, as the experiment's bottleneck does
  (the bench prints the sender veth's bytes per frame and frames per QUIC packet sent).
  Shaping on the sender's own interface would not be the same: a qdisc there holds a GSO
  message as one unit and releases its segments back to back.

Per run, from the tool's own JSON (``batching``) and the kernel's accounting of each reaped
process (``os.wait4``): goodput (client bytes, SI Mbit/s), CPU seconds of sender and receiver,
``cores/Mbit`` = CPU s / transfer s / goodput Mbit/s (the issue's unit; multiply by 1000 for
"cores per Gbit/s"), and syscalls per packet: the sender's send syscalls per packet sent,
the receiver's receive syscalls per packet received, and both ends' total (send + receive +
epoll waits) per packet. Runs are interleaved across configurations (the machine is shared:
read the medians).

Run (needs `cargo build --release -p tquic-perf`):
    .venv/bin/python bench/bench_tool_batching.py [--reps 5] [--duration 5]
    sudo .venv/bin/python bench/bench_tool_batching.py --rate-mbit 56
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "target" / "release" / "tquic-perf"
NS_SRV, NS_GW, NS_CLI = "ld-tqb-srv", "ld-tqb-gw", "ld-tqb-cli"
DEV_SRV, DEV_GW_S, DEV_GW_C, DEV_CLI = "ld-tqb-s0", "ld-tqb-gs", "ld-tqb-gc", "ld-tqb-c0"
ADDR_SRV, ADDR_GW_S, ADDR_GW_C, ADDR_CLI = "10.97.1.1", "10.97.1.2", "10.97.2.2", "10.97.2.1"

CONFIGS = {
    "gso": [],
    "sendmmsg": ["-gso", "off", "-gro", "off"],
    "per-packet": ["-gso", "off", "-gro", "off", "-mmsg=false"],
}


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_cpu_s(proc: subprocess.Popen, timeout_s: float) -> tuple[int, float]:
    """Exit status and user + system CPU seconds of a child, reaped with wait4."""
    deadline = time.monotonic() + timeout_s
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, ru.ru_utime + ru.ru_stime
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"{proc.args[0]} did not exit within {timeout_s:g} s")
        time.sleep(0.02)


def run(cmd: list[str]) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def netns_up(rate_mbit: float) -> None:
    """server --- gateway --- client, veth pairs with every offload off; the gateway forwards
    and shapes both directions with htb at rate_mbit (its egress sees frames, as the
    experiment's bottleneck does: the sender's GSO messages are cut at the sender's veth)."""
    for ns in (NS_SRV, NS_GW, NS_CLI):
        run(["ip", "netns", "add", ns])
    run(["ip", "link", "add", DEV_SRV, "netns", NS_SRV, "type", "veth",
         "peer", "name", DEV_GW_S, "netns", NS_GW])
    run(["ip", "link", "add", DEV_CLI, "netns", NS_CLI, "type", "veth",
         "peer", "name", DEV_GW_C, "netns", NS_GW])
    # a 20 ms-worth bfifo at the rate (no delay here: the queue only absorbs bursts)
    limit = max(int(rate_mbit * 1e6 / 8 * 0.020), 3000)
    for ns, dev, addr in ((NS_SRV, DEV_SRV, ADDR_SRV), (NS_GW, DEV_GW_S, ADDR_GW_S),
                          (NS_GW, DEV_GW_C, ADDR_GW_C), (NS_CLI, DEV_CLI, ADDR_CLI)):
        ex = ["ip", "netns", "exec", ns]
        run([*ex, "ethtool", "-K", dev, "tx", "off", "rx", "off", "tso", "off", "gso", "off",
             "gro", "off"])
        run([*ex, "ip", "link", "set", "lo", "up"])
        run([*ex, "ip", "addr", "add", f"{addr}/24", "dev", dev])
        run([*ex, "ip", "link", "set", dev, "up"])
        if ns == NS_GW:
            run([*ex, "tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb",
                 "default", "1"])
            run([*ex, "tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:1",
                 "htb", "rate", f"{rate_mbit}mbit"])
            run([*ex, "tc", "qdisc", "add", "dev", dev, "parent", "1:1", "bfifo", "limit",
                 str(limit)])
    run(["ip", "netns", "exec", NS_GW, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])
    run(["ip", "-n", NS_SRV, "route", "add", "default", "via", ADDR_GW_S])
    run(["ip", "-n", NS_CLI, "route", "add", "default", "via", ADDR_GW_C])


def netns_down() -> None:
    for ns in (NS_SRV, NS_GW, NS_CLI):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def veth_frames(ns: str, dev: str) -> tuple[int, int]:
    """tx packets and tx bytes of a veth (ip -s -j link)."""
    doc = json.loads(run(["ip", "-n", ns, "-s", "-j", "link", "show", dev]))
    tx = doc[0]["stats64"]["tx"]
    return tx["packets"], tx["bytes"]


def one_transfer(tool: Path, flags: list[str], duration_s: float, workdir: Path,
                 veth: bool) -> dict:
    port = str(free_udp_port())
    host = ADDR_SRV if veth else "127.0.0.1"
    pre_s = ["ip", "netns", "exec", NS_SRV] if veth else []
    pre_c = ["ip", "netns", "exec", NS_CLI] if veth else []
    sj, cj = workdir / "sender.json", workdir / "receiver.json"
    for p in (sj, cj):
        p.unlink(missing_ok=True)
    frames0 = veth_frames(NS_SRV, DEV_SRV) if veth else None
    with open(workdir / "sender.log", "w") as slog, open(workdir / "receiver.log", "w") as clog:
        server = subprocess.Popen([*pre_s, str(tool), "-mode", "server", "-host", host, "-port",
                                   port, "-once", "-json", str(sj), *flags], stderr=slog)
        try:
            deadline = time.monotonic() + 10
            while "server listening" not in (workdir / "sender.log").read_text():
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("server did not start: "
                                       + (workdir / "sender.log").read_text()[-500:])
                time.sleep(0.02)
            client = subprocess.Popen([*pre_c, str(tool), "-mode", "client", "-host", host,
                                       "-port", port, "-duration", f"{duration_s:g}",
                                       "-interval_ms", "0", "-json", str(cj), *flags],
                                      stderr=clog)
            rc_c, cpu_c = wait_cpu_s(client, duration_s + 30)
            rc_s, cpu_s = wait_cpu_s(server, 15)
        finally:
            if server.returncode is None:
                server.kill()
                server.wait()
    if rc_c or rc_s:
        raise RuntimeError(f"client exit {rc_c}, server exit {rc_s}; logs in {workdir}")
    s, c = json.loads(sj.read_text()), json.loads(cj.read_text())
    goodput = c["goodput_kbps"] / 1000.0
    out = {"goodput_mbps": goodput, "cpu_sender_s": cpu_s, "cpu_receiver_s": cpu_c,
           "cores_per_mbit_sender": cpu_s / c["duration_s"] / goodput,
           "cores_per_mbit_receiver": cpu_c / c["duration_s"] / goodput}
    if "batching" in s:
        sb, cb = s["batching"], c["batching"]
        sent, got = sb["send"]["packets"], cb["recv"]["packets"]
        out.update({
            "send_mode": sb["send"]["mode"], "recv_mode": cb["recv"]["mode"],
            "send_sc_per_pkt": sb["send"]["syscalls"] / sent,
            "recv_sc_per_pkt": cb["recv"]["syscalls"] / got,
            "sender_all_sc_per_pkt": (sb["send"]["syscalls"] + sb["recv"]["syscalls"]
                                      + sb["recv"]["polls"]) / sent,
            "receiver_all_sc_per_pkt": (cb["recv"]["syscalls"] + cb["recv"]["polls"]
                                        + cb["send"]["syscalls"]) / got,
            "fallback": sb["send"]["fallback_reason"] or cb["recv"]["fallback_reason"],
        })
    if veth:
        f1 = veth_frames(NS_SRV, DEV_SRV)
        nframes, nbytes = f1[0] - frames0[0], f1[1] - frames0[1]
        out["veth_bytes_per_frame"] = nbytes / max(nframes, 1)
        if "batching" in s:
            # every datagram the sender's socket sent left as its own frame (plus a few ARP)
            out["veth_frames_per_packet"] = nframes / s["batching"]["send"]["packets"]
    return out


def fmt(v, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--duration", type=float, default=5.0, help="transfer length, s")
    ap.add_argument("--rate-mbit", type=float,
                    help="over a veth pair shaped to this rate (needs root); default: "
                         "unbound loopback")
    ap.add_argument("--baseline", type=Path, help="another tquic-perf binary to compare")
    ap.add_argument("--window", type=int, default=65536)
    a = ap.parse_args()
    if not TOOL.exists():
        print(f"{TOOL} missing: cargo build --release -p tquic-perf", file=sys.stderr)
        return 2
    veth = a.rate_mbit is not None
    if veth and os.geteuid() != 0:
        print("--rate-mbit needs root (network namespaces)", file=sys.stderr)
        return 2
    configs = {k: (TOOL, ["-window", str(a.window), *v]) for k, v in CONFIGS.items()}
    if a.baseline:
        configs["baseline"] = (a.baseline, ["-window", str(a.window)])
    where = f"veth at {a.rate_mbit:g} Mbit/s" if veth else "loopback, unbound"
    print(f"{where}; {a.reps} x {a.duration:g} s per configuration, interleaved; "
          f"window {a.window}; {os.cpu_count()} CPUs")
    rows: dict[str, list[dict]] = {k: [] for k in configs}
    work = Path(tempfile.mkdtemp(prefix="ld-bench-batching-"))
    try:
        if veth:
            netns_down()
            netns_up(a.rate_mbit)
        for rep in range(a.reps):
            for name, (tool, flags) in configs.items():
                r = one_transfer(tool, flags, a.duration, work, veth)
                rows[name].append(r)
                print(f"  rep {rep + 1} {name:10s} {r['goodput_mbps']:9.1f} Mbit/s  CPU s "
                      f"sender {r['cpu_sender_s']:.2f} receiver {r['cpu_receiver_s']:.2f}  "
                      f"send sc/pkt {fmt(r.get('send_sc_per_pkt'), '.3f')}  "
                      f"recv sc/pkt {fmt(r.get('recv_sc_per_pkt'), '.3f')}"
                      + (f"  fallback: {r['fallback']}" if r.get("fallback") else ""),
                      flush=True)
    finally:
        if veth:
            netns_down()

    def med(rs: list[dict], k: str):
        v = [r[k] for r in rs if r.get(k) is not None]
        return statistics.median(v) if v else None

    cols = [("goodput_mbps", "Mbit/s", ".1f"),
            ("cores_per_mbit_sender", "snd cores/Mbit", ".5f"),
            ("cores_per_mbit_receiver", "rcv cores/Mbit", ".5f"),
            ("send_sc_per_pkt", "snd send sc/pkt", ".3f"),
            ("recv_sc_per_pkt", "rcv recv sc/pkt", ".3f"),
            ("sender_all_sc_per_pkt", "snd all sc/pkt", ".3f"),
            ("receiver_all_sc_per_pkt", "rcv all sc/pkt", ".3f")]
    if veth:
        cols += [("veth_bytes_per_frame", "B/frame", ".0f"),
                 ("veth_frames_per_packet", "frames/pkt", ".3f")]
    print(f"\nmedians of {a.reps} ({where}):")
    print(f"{'config':11s}" + "".join(f"{h:>17s}" for _, h, _ in cols))
    for name, rs in rows.items():
        print(f"{name:11s}" + "".join(f"{fmt(med(rs, k), f):>17s}" for k, _, f in cols))
    gso, pp = rows["gso"], rows["per-packet"]
    for k, label in (("cores_per_mbit_sender", "sender"),
                     ("cores_per_mbit_receiver", "receiver")):
        print(f"{label} CPU per Mbit/s, gso / per-packet: {med(gso, k) / med(pp, k):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
