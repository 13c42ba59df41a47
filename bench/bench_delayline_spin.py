"""What does the delay line's busy-wait spin (--spin-us) buy, and what does it cost?

For each spin window (default 0 and 50 us) and each host load it runs the delay line
(target/release/delayline, default --rt-priority) in a line of real network namespaces

    A (10.99.0.1) --veth-- D [delayline --delay-ms DELAY] --veth-- B (10.99.0.2)

with a UDP stream of RATE Mbit/s of 1514-byte frames (1472-byte datagrams, about 2900
frames/s at 35 Mbit/s) from A to B for DURATION s, and reports

- release lateness of the a->b direction (send time minus receive time + delay, from the
  delay line's own histogram in --stats-json: median, p99 and max, 10 us bins);
- CPU seconds per second of the delay line over the stream (user + system, /proc/PID/stat)
  and, for a cross-check, over its whole life (the `delayline usage` line: getrusage);
- how long frames waited in the kernel before the rx thread read them (rx_age p99,
  from the kernel receive timestamps).

Loads (--loads):
- alone: nothing else started by this script;
- lines: OTHERS more delay lines (each in its own namespaces, same --spin-us, so they
  contend as they would if the default changed), each carrying a flood ping of about
  OTHER_RATE Mbit/s each way (1500-byte echo requests and replies, a fixed number in
  flight: the rate is that number / RTT; the oth_pps column shows what it reached);
- burn: OTHERS CPU burners (`while True: pass`, normal scheduler).

Goal for making --spin-us 0 the default: under load, lateness median <= 0.1 ms and
p99 <= 1 ms with spin 0.

Namespaces are named ldb-<random>-..., created here and deleted in `finally`; every process
started here is stopped by its PID. Needs root, ip, ethtool, ping, and
`cargo build --release -p delayline`.
Run: sudo .venv/bin/python bench/bench_delayline_spin.py [--duration 20] [--reps 2]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ADDR_B, delayline_preconditions, wire_line  # noqa: E402
from latency_divide.testbed.runners import LocalProcess, LocalRunner, wait_for

ROOT = Path(__file__).resolve().parents[1]
BINARY = ROOT / "target" / "release" / "delayline"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PORT = 9999
PAYLOAD = 1472  # + 8 UDP + 20 IP + 14 Ethernet = 1514-byte frames
USAGE_RE = re.compile(r"^delayline usage cpu_s=([\d.]+) .*?wall_s=([\d.]+)", re.M)

# UDP stream and sink. `send ADDR PORT RATE_MBIT SIZE DURATION_S`: datagrams of SIZE bytes
# at RATE (counting Ethernet/IP/UDP headers), paced on 1 ms ticks against an absolute
# schedule; prints "SENT N SECONDS". `sink PORT IDLE_S`: prints "listening", counts
# datagrams until none came for IDLE_S after the first, prints "GOT N".
TRAFFIC = r"""
import socket, sys, time
mode = sys.argv[1]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
if mode == "sink":
    port, idle = int(sys.argv[2]), float(sys.argv[3])
    s.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), 16 << 20)
    s.bind(("0.0.0.0", port))
    print("listening", flush=True)
    n = 0
    s.settimeout(60.0)
    try:
        while True:
            s.recv(65536)
            n += 1
            s.settimeout(idle)
    except socket.timeout:
        pass
    print("GOT", n, flush=True)
else:
    addr, port, rate, size, dur = (sys.argv[2], int(sys.argv[3]), float(sys.argv[4]),
                                   int(sys.argv[5]), float(sys.argv[6]))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    pps = rate * 1e6 / ((size + 42) * 8)
    data = b"\0" * size
    t0 = time.monotonic()
    sent = 0
    while True:
        el = time.monotonic() - t0
        if el >= dur:
            break
        due = min(int(el * pps) + 1, int(dur * pps))
        while sent < due:
            try:
                s.sendto(data, (addr, port))
            except OSError:
                pass  # ENOBUFS: counted as not received by the sink
            sent += 1
        time.sleep(0.001)
    print("SENT", sent, round(time.monotonic() - t0, 3), flush=True)
"""

BURNER = "while True:\n    pass\n"


class Line:
    """Namespaces ldb-<run>-<i>{a,d,b}, veth A<->D and D<->B, offloads off, A and B in
    10.99.0.0/24 (each line has its own namespaces, so the addresses repeat)."""

    def __init__(self, run_tag: str, idx: int, created: list[str]) -> None:
        self.ns = {r: f"ldb-{run_tag}-{idx}{r}" for r in ("a", "d", "b")}
        base = f"lb{run_tag}{idx:02d}"  # 12 characters with the suffix
        self.if_a, self.if_da, self.if_db, self.if_b = (f"{base}a", f"{base}da", f"{base}db",
                                                         f"{base}b")
        self.host = LocalRunner()
        self._created = created  # shared list of namespaces to delete

    def r(self, role: str) -> LocalRunner:
        return LocalRunner(netns=self.ns[role])

    def up(self) -> "Line":
        wire_line(self.ns, self.if_a, self.if_da, self.if_db, self.if_b, self._created)
        return self



def cpu_s(pid: int) -> float:
    """User + system seconds of a live process (its own, not its children's)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def host_jiffies() -> tuple[int, int, int]:
    """(busy, steal, total) jiffies of all CPUs from /proc/stat. Steal is time the
    hypervisor ran something else on our virtual CPUs: stalls no scheduler setting helps."""
    v = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    idle, steal = v[3] + v[4], v[7]
    return sum(v) - idle - steal, steal, sum(v)


class Procs:
    """Every process this script starts, so `finally` can stop each by its PID."""

    def __init__(self) -> None:
        self.live: list[LocalProcess] = []

    def start(self, runner: LocalRunner, argv, **kw) -> LocalProcess:
        p = runner.start(argv, **kw)
        self.live.append(p)
        return p

    def stop(self, p: LocalProcess, timeout: float = 10.0) -> int:
        rc = p.stop(timeout=timeout)
        if p in self.live:
            self.live.remove(p)
        return rc

    def stop_all(self) -> None:
        for p in reversed(list(self.live)):
            try:
                self.stop(p)
            except Exception as e:  # noqa: BLE001 - best effort in cleanup
                print(f"bench: could not stop pid {p.pid}: {e}", file=sys.stderr)


def start_delayline(procs: Procs, line: Line, tmp: Path, name: str, spin_us: int,
                    delay_ms: float):
    stats = tmp / f"{name}.json"
    err = tmp / f"{name}.stderr"
    for p in (stats, err):
        p.unlink(missing_ok=True)
    dl = procs.start(line.r("d"), [str(BINARY), "--iface-a", line.if_da, "--iface-b",
                                   line.if_db, "--delay-ms", f"{delay_ms:g}", "--spin-us",
                                   str(spin_us), "--stats-json", str(stats)], stderr=err)
    return dl, stats, err


def wait_ready(dl: LocalProcess, err: Path) -> None:
    wait_for(lambda: "delayline ready" in err.read_text() or dl.poll() is not None,
             timeout=15, what="delayline ready")
    if dl.poll() is not None:
        raise RuntimeError(f"delayline exited: {err.read_text()}")


def run_one(procs: Procs, main: Line, others: list[Line], tmp: Path, spin_us: int,
            load: str, args) -> dict:
    """One row: start the load, the delay line under test and the stream; stop; collect."""
    extra: list[LocalProcess] = []  # load processes, stopped at the end of the row
    other_dls = []
    try:
        if load == "lines":
            for i, o in enumerate(others):
                other_dls.append(start_delayline(procs, o, tmp, f"other{i}", spin_us,
                                                 args.delay_ms))
            for dl, _, err in other_dls:
                wait_ready(dl, err)
            # Flood ping with PRELOAD echo requests in flight: one new request per reply,
            # so the rate is PRELOAD / RTT each way (RTT = 2 x delay). (A paced `ping -i`
            # stalled at about 100 to 120 requests/s here, whatever the interval.)
            pps = args.other_rate_mbit * 1e6 / ((PAYLOAD + 42) * 8)
            preload = max(1, round(pps * 2 * args.delay_ms / 1000))
            for o in others:
                extra.append(procs.start(o.r("a"), [
                    "ping", "-q", "-n", "-f", "-l", str(preload), "-s", str(PAYLOAD), "-w",
                    str(int(args.duration + 30)), ADDR_B]))
        elif load == "burn":
            for _ in range(args.others):
                extra.append(procs.start(LocalRunner(), [sys.executable, "-c", BURNER]))
        dl, stats_path, err_path = start_delayline(procs, main, tmp, "main", spin_us,
                                                   args.delay_ms)
        wait_ready(dl, err_path)
        main.r("a").run(["ping", "-c", "1", "-W", "5", ADDR_B], timeout=20)  # ARP
        time.sleep(1.0)  # let the load settle
        sink_out = tmp / "sink.out"
        sink = procs.start(main.r("b"), [sys.executable, "-c", TRAFFIC, "sink", str(PORT),
                                         "2"], stdout=sink_out)
        wait_for(lambda: "listening" in sink_out.read_text(), timeout=10, what="sink")
        others_pids = [o[0].pid for o in other_dls]
        t0, c0, h0 = time.monotonic(), cpu_s(dl.pid), host_jiffies()
        o0 = sum(cpu_s(p) for p in others_pids)
        sent = main.r("a").run([sys.executable, "-c", TRAFFIC, "send", ADDR_B, str(PORT),
                                f"{args.rate_mbit:g}", str(PAYLOAD), f"{args.duration:g}"],
                               timeout=args.duration + 60).stdout
        t1, c1, h1 = time.monotonic(), cpu_s(dl.pid), host_jiffies()
        o1 = sum(cpu_s(p) for p in others_pids)
        sink.wait(timeout=30)
        procs.stop(sink)
        for p in extra:
            procs.stop(p)
        extra = []
        if procs.stop(dl) != 0:
            raise RuntimeError(f"delayline exited non-zero: {err_path.read_text()}")
        other_stats = []
        for odl, ostats, oerr in other_dls:
            if procs.stop(odl) != 0:
                raise RuntimeError(f"other delayline exited non-zero: {oerr.read_text()}")
            other_stats.append(json.loads(ostats.read_text()))
        other_dls = []
    finally:
        for p in extra:
            procs.stop(p)
        for odl, _, _ in other_dls:
            procs.stop(odl)
    st = json.loads(stats_path.read_text())
    ab = st["a_to_b"]
    usage = USAGE_RE.search(err_path.read_text())
    got = re.search(r"GOT (\d+)", sink_out.read_text())
    m = re.search(r"SENT (\d+)", sent)
    row = {
        "load": load, "spin_us": spin_us, "frames": ab["frames"],
        "late_p50_us": ab["release_lateness"]["p50_us"],
        "late_p99_us": ab["release_lateness"]["p99_us"],
        "late_max_us": ab["release_lateness"]["max_us"],
        "late_mean_us": ab["release_lateness"]["mean_us"],
        "rx_age_p99_us": ab["rx_age"]["p99_us"],
        "rx_timestamps": st["rx_timestamps"],
        "cpu_s_per_s": (c1 - c0) / (t1 - t0),
        "cpu_life_s_per_s": float(usage.group(1)) / float(usage.group(2)) if usage else None,
        "host_busy_pct": 100.0 * (h1[0] - h0[0]) / max(1, h1[2] - h0[2]),
        "steal_pct": 100.0 * (h1[1] - h0[1]) / max(1, h1[2] - h0[2]),
        "drops": ab["drops"] + st["b_to_a"]["drops"],
        "sent": int(m.group(1)) if m else None,
        "got": int(got.group(1)) if got else None,
    }
    if other_stats:
        p99s = [s["a_to_b"]["release_lateness"]["p99_us"] or 0.0 for s in other_stats]
        p99s += [s["b_to_a"]["release_lateness"]["p99_us"] or 0.0 for s in other_stats]
        row["others_cpu_s_per_s"] = (o1 - o0) / (t1 - t0)
        row["others_late_p99_med_us"] = statistics.median(p99s)
        row["others_late_p99_max_us"] = max(p99s)
        row["others_frames"] = sum(s["a_to_b"]["frames"] + s["b_to_a"]["frames"]
                                   for s in other_stats)
        # Frames per second each way per other line, over each one's whole run.
        row["others_pps"] = statistics.median(
            (s["a_to_b"]["frames"] + s["b_to_a"]["frames"]) / 2 / s["wall_s"]
            for s in other_stats)
    return row


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--spins", default="0,50", help="--spin-us values, comma-separated")
    p.add_argument("--loads", default="alone,lines,burn",
                   help="comma-separated: alone, lines, burn (default all three)")
    p.add_argument("--others", type=int, default=15,
                   help="other delay lines or CPU burners under load (default 15)")
    p.add_argument("--rate-mbit", type=float, default=35.0,
                   help="UDP stream through the measured line (default 35)")
    p.add_argument("--other-rate-mbit", type=float, default=5.0,
                   help="ping stream each way through each other line (default 5)")
    p.add_argument("--delay-ms", type=float, default=10.0, help="one-way delay (default 10)")
    p.add_argument("--duration", type=float, default=20.0, help="stream seconds (default 20)")
    p.add_argument("--reps", type=int, default=1, help="repetitions of every row (default 1)")
    p.add_argument("--json", type=Path, help="also write the rows as JSON here")
    a = p.parse_args(argv)
    try:
        a.spins = [int(x) for x in a.spins.split(",")]
    except ValueError:
        p.error(f"--spins {a.spins!r}: comma-separated whole microseconds")
    a.loads = a.loads.split(",")
    if any(x not in ("alone", "lines", "burn") for x in a.loads):
        p.error(f"--loads {a.loads}: each must be alone, lines or burn")
    if not 0 <= a.others <= 40:
        p.error("--others: 0..40")
    if not 1 <= a.duration <= 600 or not 1 <= a.reps <= 20:
        p.error("--duration 1..600, --reps 1..20")
    if not 0.1 <= a.rate_mbit <= 500 or not 0.1 <= a.other_rate_mbit <= 100:
        p.error("--rate-mbit 0.1..500, --other-rate-mbit 0.1..100")
    return a


def fmt(x, spec=".1f") -> str:
    return "-" if x is None else format(x, spec)


def main(argv=None) -> int:
    args = parse_args(argv)
    refused = delayline_preconditions("bench_delayline_spin", BINARY)
    if refused is not None:
        return refused
    existing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    run_tag = secrets.token_hex(3)
    while f"ldb-{run_tag}-" in existing:
        run_tag = secrets.token_hex(3)
    created: list[str] = []
    procs = Procs()
    rows = []
    try:
        main_line = Line(run_tag, 0, created).up()
        others = ([Line(run_tag, i + 1, created).up() for i in range(args.others)]
                  if "lines" in args.loads else [])
        with tempfile.TemporaryDirectory(prefix="ldb-bench-") as tmpd:
            tmp = Path(tmpd)
            for rep in range(args.reps):
                for load in args.loads:
                    # Alternate the order of the spins per rep against drift on the host.
                    spins = args.spins if rep % 2 == 0 else list(reversed(args.spins))
                    for spin in spins:
                        row = run_one(procs, main_line, others, tmp, spin, load, args)
                        row["rep"] = rep
                        rows.append(row)
                        print(f"  rep {rep} {load:5} spin {spin:3}: late p50 "
                              f"{fmt(row['late_p50_us'])} p99 {fmt(row['late_p99_us'])} us, "
                              f"cpu {row['cpu_s_per_s']:.3f} s/s", file=sys.stderr, flush=True)
    finally:
        procs.stop_all()
        for name in reversed(created):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)

    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"delay {args.delay_ms:g} ms, UDP {args.rate_mbit:g} Mbit/s of 1514-byte frames "
          f"A -> B for {args.duration:g} s per row; load 'lines' = {args.others} other delay "
          f"lines with {args.other_rate_mbit:g} Mbit/s of ping each way, 'burn' = "
          f"{args.others} CPU burners; {os.cpu_count()} CPUs")
    hdr = (f"{'load':>5} {'spin':>4} {'rep':>3} {'frames':>6} {'late_p50':>8} {'late_p99':>8} "
           f"{'late_max':>8} {'cpu_s/s':>7} {'life':>6} {'host%':>5} {'steal%':>6} {'rxage99':>7} "
           f"{'drops':>5} {'lost':>5} {'oth_cpu':>7} {'oth_pps':>7} {'oth_p99med':>10} "
           f"{'oth_p99max':>10}")
    print(hdr)
    for r in rows:
        lost = r["sent"] - r["got"] if r["sent"] is not None and r["got"] is not None else None
        print(f"{r['load']:>5} {r['spin_us']:>4} {r['rep']:>3} {r['frames']:>6} "
              f"{fmt(r['late_p50_us']):>8} {fmt(r['late_p99_us']):>8} "
              f"{fmt(r['late_max_us']):>8} {r['cpu_s_per_s']:>7.3f} "
              f"{fmt(r['cpu_life_s_per_s'], '.3f'):>6} {r['host_busy_pct']:>5.0f} "
              f"{r['steal_pct']:>6.1f} "
              f"{fmt(r['rx_age_p99_us']):>7} {r['drops']:>5} {fmt(lost, 'd'):>5} "
              f"{fmt(r.get('others_cpu_s_per_s'), '.3f'):>7} "
              f"{fmt(r.get('others_pps'), '.0f'):>7} "
              f"{fmt(r.get('others_late_p99_med_us')):>10} "
              f"{fmt(r.get('others_late_p99_max_us')):>10}")
    print("(lateness in us: send time minus kernel receive time + delay, a->b; cpu_s/s: "
          "the measured delay line over the stream; life: over its whole run, getrusage; "
          "host%/steal%: all CPUs busy / stolen by the hypervisor; oth_*: the other delay "
          "lines)")
    print("medians over reps:")
    ok = True
    for load in args.loads:
        for spin in args.spins:
            rs = [r for r in rows if r["load"] == load and r["spin_us"] == spin]
            if not rs:
                continue
            p50 = statistics.median(r["late_p50_us"] or 0.0 for r in rs)
            p99 = statistics.median(r["late_p99_us"] or 0.0 for r in rs)
            cpu = statistics.median(r["cpu_s_per_s"] for r in rs)
            print(f"  {load:>5} spin {spin:>3}: late p50 {p50:.1f} us, p99 {p99:.1f} us, "
                  f"cpu {cpu:.3f} s/s")
            if spin == 0 and load != "alone" and (p50 > 100 or p99 > 1000):
                ok = False
    if 0 in args.spins:
        print(f"spin 0 under load: median <= 100 us and p99 <= 1000 us: "
              f"{'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
