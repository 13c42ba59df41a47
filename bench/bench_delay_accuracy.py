"""How accurately does the userspace delay line (target/release/delayline) delay frames?

Topology (real network namespaces, created here and removed in `finally`):

    A (10.99.0.1) --veth-- D --veth-- B (10.99.0.2)

D bridges its two veth ends at layer 2: with a kernel bridge for the baseline, with
`delayline` for the measurements. For each one-way delay d it pings A -> B (ICMP echo every
INTERVAL s, COUNT requests, RTT from kernel receive timestamps; see PINGER) while the path is idle and while a UDP flow of RATE Mbit/s of 1514-byte
frames (iperf3 -u -l 1472 -w 4M) crosses it from A to B, and reports

    error = RTT - 2*d - baseline

where baseline is the median RTT of the same path through the kernel bridge (the veth
path without the delay line). The raw median RTT - 2*d (baseline not subtracted) is
printed too. CPU is the delay line's user+system time over the ping window, in percent of
one core (/proc/PID/stat). Goal: |median error| <= 0.2 ms, p99 error <= 1 ms under load.

Needs root, iperf3, ping, ethtool, and `cargo build --release -p delayline`.
Run: sudo .venv/bin/python bench/bench_delay_accuracy.py [--delays-ms 10,25,40]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import ADDR_B, delayline_preconditions, wire_line  # noqa: E402
from latency_divide.testbed.runners import LocalRunner, wait_for

ROOT = Path(__file__).resolve().parents[1]
BINARY = ROOT / "target" / "release" / "delayline"
CLK_TCK = os.sysconf("SC_CLK_TCK")


class Line:
    """Namespaces ld-<tag>-{a,d,b} with veth A<->D, D<->B, offloads off. (Same layout as
    tests/test_delayline.py.)"""

    def __init__(self) -> None:
        self.tag = secrets.token_hex(3)
        self.ns = {r: f"ld-{self.tag}-{r}" for r in ("a", "d", "b")}
        self.if_a, self.if_da = f"ld{self.tag}a", f"ld{self.tag}da"
        self.if_db, self.if_b = f"ld{self.tag}db", f"ld{self.tag}b"
        self.bridge = f"ld{self.tag}br"
        self.host = LocalRunner()
        self.created: list[str] = []

    def r(self, role: str) -> LocalRunner:
        return LocalRunner(netns=self.ns[role])

    def up(self) -> None:
        wire_line(self.ns, self.if_a, self.if_da, self.if_db, self.if_b, self.created)


    def kernel_bridge(self, on: bool) -> None:
        d = self.r("d")
        if on:
            d.run(["ip", "link", "add", self.bridge, "type", "bridge"])
            for dev in (self.if_da, self.if_db):
                d.run(["ip", "link", "set", dev, "master", self.bridge])
            d.run(["ip", "link", "set", self.bridge, "up"])
        else:
            d.run(["ip", "link", "del", self.bridge])

    def down(self) -> None:
        for name in reversed(self.created):
            self.host.run(["ip", "netns", "del", name], check=False)
        self.created = []


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime (fields 14, 15)


# ICMP echo from A with microsecond resolution. iputils ping prints RTTs of 10 ms and more
# with only 0.1 ms resolution, too coarse for a 0.2 ms goal, so this sends the same echo
# requests (56-byte payload) every INTERVAL s and takes each reply's kernel receive
# timestamp (SO_TIMESTAMPNS, CLOCK_REALTIME) minus the send time read just before
# sendto(). Prints "SEQ RTT_MS" per reply. argv: ADDR COUNT INTERVAL_S
PINGER = r"""
import os, select, socket, struct, sys, time
addr, count, interval = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
ident = os.getpid() & 0xFFFF
def csum(b):
    t = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    t = (t >> 16) + (t & 0xFFFF)
    return ~(t + (t >> 16)) & 0xFFFF
sent, got, i = {}, {}, 0
next_send = time.monotonic()
end = None
while True:
    now = time.monotonic()
    if i < count and now >= next_send:
        body = struct.pack("!HHH", 0, ident, i) + b"\x00" * 56
        pkt = struct.pack("!BBHHH", 8, 0, csum(b"\x08\x00" + body), ident, i) + b"\x00" * 56
        sent[i] = time.time_ns()
        s.sendto(pkt, (addr, 0))
        i += 1
        next_send += interval
        if i == count:
            end = now + 3.0
        continue
    if i >= count and (len(got) == count or now >= end):
        break
    r, _, _ = select.select([s], [], [], max(0.0, (next_send if i < count else end) - now))
    if not r:
        continue
    data, anc, _, _ = s.recvmsg(2048, 256)
    ihl = (data[0] & 0x0F) * 4
    typ, _, _, rid, seq = struct.unpack("!BBHHH", data[ihl:ihl + 8])
    if typ != 0 or rid != ident or seq not in sent or seq in got:
        continue
    t_rx = next((struct.unpack("qq", d[:16]) for lvl, typ2, d in anc
                 if lvl == socket.SOL_SOCKET and typ2 == SO_TIMESTAMPNS), None)
    t_rx_ns = t_rx[0] * 1_000_000_000 + t_rx[1] if t_rx else time.time_ns()
    got[seq] = (t_rx_ns - sent[seq]) / 1e6
    print(seq, f"{got[seq]:.6f}", flush=True)
"""


def ping_rtts_ms(line: Line, count: int, interval_s: float, rt_priority: int = 0) -> list[float]:
    a = line.r("a")
    a.run(["ping", "-c", "2", "-W", "5", ADDR_B], timeout=20)  # ARP, warm caches
    chrt = ["chrt", "-f", str(rt_priority)] if rt_priority else []
    out = a.run([*chrt, sys.executable, "-c", PINGER, ADDR_B, str(count), f"{interval_s:g}"],
                timeout=count * interval_s + 60).stdout
    rtts = [float(ln.split()[1]) for ln in out.splitlines() if ln.strip()]
    if len(rtts) < count * 0.95:
        raise RuntimeError(f"only {len(rtts)} of {count} echo requests answered")
    return rtts


def quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))]


def measure(line: Line, tmp: Path, delay_ms: float, loaded: bool, args) -> dict:
    """One row: start the delay line, optionally the UDP load, ping, stop, collect."""
    stats_path = tmp / f"stats-{delay_ms:g}-{int(loaded)}.json"
    err_path = tmp / f"delayline-{delay_ms:g}-{int(loaded)}.stderr"
    dl = line.r("d").start([str(args.delayline), *(["--window-us", str(args.window_us)]
                                                     if args.window_us is not None else []),
                            "--iface-a", line.if_da, "--iface-b", line.if_db,
                            "--delay-ms", f"{delay_ms:g}", "--spin-us", str(args.spin_us),
                            "--rt-priority", str(args.rt_priority),
                            "--stats-json", str(stats_path)], stderr=err_path)
    server = client = None
    try:
        wait_for(lambda: "delayline ready" in err_path.read_text() or dl.poll() is not None,
                 timeout=10, what="delayline ready")
        if dl.poll() is not None:
            raise RuntimeError(err_path.read_text())
        line.r("a").run(["ping", "-c", "1", "-W", "5", ADDR_B], timeout=20)
        iperf_json = None
        if loaded:
            load_s = int(args.count * args.interval_s + 2 * delay_ms / 1000 + 4)
            server = line.r("b").start(["iperf3", "-s", "-1", "-B", ADDR_B],
                                       stdout=tmp / "iperf3-server.out")
            time.sleep(0.5)
            iperf_json = tmp / f"iperf3-{delay_ms:g}.json"
            bidir = ["--bidir"] if args.bidir else []
            client = line.r("a").start(["iperf3", "-c", ADDR_B, "-u", "-b", f"{args.rate_mbit}M",
                                        "-l", "1472", "-w", "4M", "-t", str(load_s), *bidir,
                                        "-J"], stdout=iperf_json)
            time.sleep(1.0)
        t0, c0 = time.monotonic(), cpu_ticks(dl.pid)
        rtts = ping_rtts_ms(line, args.count, args.interval_s, args.pinger_rt_priority)
        t1, c1 = time.monotonic(), cpu_ticks(dl.pid)
        if client is not None:
            client.wait(timeout=120)
            server.wait(timeout=30)
    finally:
        for p in (client, server):
            if p is not None:
                p.stop()
        rc = dl.stop(timeout=10)
    if rc != 0:
        raise RuntimeError(f"delayline exited {rc}: {err_path.read_text()}")
    stats = json.loads(stats_path.read_text())
    row = {
        "delay_ms": delay_ms,
        "load": (f"udp {args.rate_mbit}M" + (" x2" if args.bidir else "")) if loaded else "idle",
        "n": len(rtts), "rtt_median_ms": statistics.median(rtts),
        "cpu_pct": 100.0 * (c1 - c0) / CLK_TCK / (t1 - t0),
        "drops": stats["a_to_b"]["drops"] + stats["b_to_a"]["drops"],
        "drops_rx_socket": stats["a_to_b"]["drops_rx_socket"] + stats["b_to_a"]["drops_rx_socket"],
        "late_p99_us": stats["a_to_b"]["release_lateness"]["p99_us"],
        "late_max_us": max(stats[k]["release_lateness"]["max_us"] or 0 for k in ("a_to_b", "b_to_a")),
        "rtts": rtts,
    }
    if iperf_json is not None:
        end = json.loads(iperf_json.read_text())["end"]
        sums = [end["sum"]] + ([end["sum_bidir_reverse"]] if args.bidir else [])
        row["load_mbit"] = sum(x["bits_per_second"] for x in sums) / 1e6
        row["load_lost"] = sum(x.get("lost_packets", 0) for x in sums)
    return row


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])

    def delays(s: str) -> list[float]:
        try:
            out = [float(x) for x in s.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(f"--delays-ms {s!r}: comma-separated ms, e.g. 10,25,40")
        if any(not 0 <= x <= 1000 for x in out):
            raise argparse.ArgumentTypeError(f"--delays-ms {s!r}: each must be 0..1000 ms")
        return out

    p.add_argument("--delays-ms", type=delays, default=[10.0, 25.0, 40.0])
    p.add_argument("--count", type=int, default=400, help="pings per row (default 400)")
    p.add_argument("--interval-s", type=float, default=0.01, help="ping interval (default 0.01)")
    p.add_argument("--rate-mbit", type=int, default=35, help="UDP load rate (default 35)")
    p.add_argument("--pinger-rt-priority", type=int, default=0,
                   help="run the pinger under chrt -f N (default 0: normal scheduler)")
    p.add_argument("--bidir", action="store_true",
                   help="load both directions (iperf3 --bidir): RATE each way")
    p.add_argument("--spin-us", type=int, default=50, help="delayline --spin-us (default 50)")
    p.add_argument("--delayline", type=Path, default=BINARY,
                   help="the delay line binary (default: the setup's build); e.g. an older "
                        "build to compare against")
    p.add_argument("--window-us", type=int, default=None,
                   help="delayline --window-us (0.2 and later; default: the binary's own)")
    p.add_argument("--rt-priority", type=int, default=10,
                   help="delayline --rt-priority (default 10; 0 = normal scheduler)")
    a = p.parse_args(argv)
    if not 10 <= a.count <= 100000:
        p.error(f"--count {a.count}: allowed 10..100000")
    if not 0.002 <= a.interval_s <= 1:
        p.error(f"--interval-s {a.interval_s}: allowed 0.002..1")
    if not 0 <= a.pinger_rt_priority <= 99:
        p.error(f"--pinger-rt-priority {a.pinger_rt_priority}: allowed 0..99")
    if not 1 <= a.rate_mbit <= 1000:
        p.error(f"--rate-mbit {a.rate_mbit}: allowed 1..1000")
    return a


def main(argv=None) -> int:
    args = parse_args(argv)
    refused = delayline_preconditions("bench_delay_accuracy", args.delayline)
    if refused is not None:
        return refused
    line = Line()
    rows = []
    try:
        line.up()
        with tempfile.TemporaryDirectory(prefix="ld-bench-") as tmpd:
            tmp = Path(tmpd)
            line.kernel_bridge(True)
            base = ping_rtts_ms(line, args.count, args.interval_s, args.pinger_rt_priority)
            line.kernel_bridge(False)
            baseline_ms = statistics.median(base)
            zero = measure(line, tmp, 0.0, False, args)
            for d in args.delays_ms:
                for loaded in (False, True):
                    rows.append(measure(line, tmp, d, loaded, args))
    finally:
        line.down()

    print(f"baseline (kernel bridge in D, no delay line): RTT median {baseline_ms:.3f} ms, "
          f"p99 {quantile(base, 0.99):.3f} ms, n={len(base)}")
    print(f"delay line at 0 ms: RTT median {zero['rtt_median_ms']:.3f} ms, "
          f"p99 {quantile(zero['rtts'], 0.99):.3f} ms (userspace bridging overhead "
          f"{zero['rtt_median_ms'] - baseline_ms:+.3f} ms)")
    print(f"error = RTT - 2*delay - baseline ({baseline_ms:.3f} ms subtracted); "
          f"echo every {args.interval_s:g} s x {args.count}; "
          f"--spin-us {args.spin_us} --rt-priority {args.rt_priority}; "
          f"{args.delayline} window {args.window_us if args.window_us is not None else 'default'}; "
          f"pinger rt priority {args.pinger_rt_priority or 'none'}")
    hdr = (f"{'delay_ms':>8} {'load':>13} {'n':>5} {'rtt_med_ms':>10} {'raw_err_med':>11} "
           f"{'err_med_ms':>10} {'err_p99_ms':>10} {'err_max_ms':>10} {'cpu_%':>6} "
           f"{'drops':>5} {'late_p99_us':>11} {'load_mbit':>9} {'load_lost':>9} {'late_max_us':>11}")
    print(hdr)
    ok = True
    for r in rows:
        err = [x - 2 * r["delay_ms"] - baseline_ms for x in r["rtts"]]
        med, p99 = statistics.median(err), quantile(err, 0.99)
        if abs(med) > 0.2 or (r["load"] != "idle" and p99 > 1.0):
            ok = False
        load_mbit = f"{r['load_mbit']:.1f}" if "load_mbit" in r else "-"
        load_lost = str(r["load_lost"]) if "load_lost" in r else "-"
        print(f"{r['delay_ms']:>8g} {r['load']:>13} {r['n']:>5} {r['rtt_median_ms']:>10.3f} "
              f"{r['rtt_median_ms'] - 2 * r['delay_ms']:>11.3f} {med:>10.3f} {p99:>10.3f} "
              f"{max(err):>10.3f} {r['cpu_pct']:>6.1f} {r['drops']:>5} "
              f"{r['late_p99_us'] if r['late_p99_us'] is not None else '-':>11} {load_mbit:>9} "
              f"{load_lost:>9} {r['late_max_us']:>11.1f}")
    print(f"goal |median| <= 0.2 ms and loaded p99 <= 1 ms: {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
