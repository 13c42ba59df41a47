"""How fast is tquic-perf, and what does it cost? Cubic bulk transfers across a 100 Mbit/s
htb bottleneck.

Topology: the project's four-namespace line (src/latency_divide/testbed/local.py, netns.py), created here
and removed in `finally`: server --- gateway (htb RATE + bfifo of 2 x BDP, both directions)
--- delay (the userspace delay line, or netem where the kernel has it; RTT_MS) --- client.
The server sends (downlink), the client reads for DURATION s.

For each receive window (-window; tperf's 2021 default 65536 caps a single stream near
window / RTT) it runs REPS transfers and prints per run and as medians:

- goodput_mbps: the client's bytes * 8 / duration (SI Mbit/s); goal >= 90 at 100 Mbit/s.
- CPU seconds of the sender (server) and receiver (client): user + system time of each
  process, from the kernel's accounting of the reaped child (RUSAGE_CHILDREN deltas around
  each wait: `ip netns exec` execs the tool in place, so the child is the tool itself).
- cpu_per_10mbit: CPU seconds per second of transfer per 10 Mbit/s of goodput
  (= cpu_s / duration_s / (goodput_mbps / 10)), i.e. the share of one core per 10 Mbit/s.

The machine is shared (2 cores, other jobs), so timings are noisy: read the medians.

Needs root, `cargo build --release -p tquic-perf -p delayline`.
Run: sudo .venv/bin/python bench/bench_tool_throughput.py [--windows 65536,4194304] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import tempfile
from pathlib import Path

from latency_divide.testbed.local import Topology, resolve_delay_mechanism
from latency_divide.testbed.netns import SERVER_ADDR
from latency_divide.links.plan import LinkPlan, link_plan
from latency_divide.testbed.runners import wait_for

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "target" / "release" / "tquic-perf"
DELAYLINE = ROOT / "target" / "release" / "delayline"
PORT = 6666


def shaped_plan(rate_kbit: int, rtt_ms: float, qfactor: float) -> LinkPlan:
    """Both directions at rate_kbit with a qfactor x BDP bfifo (EXPERIMENT.md's formulas)."""
    return link_plan(rate_kbit, rate_kbit, rtt_ms, qfactor, resolve_delay_mechanism("auto"))


def children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def one_transfer(topo, window: int, duration_s: float, workdir: Path) -> dict:
    srv, cli = topo.runner("srv"), topo.runner("cli")
    server = srv.start([str(TOOL), "-mode", "server", "-host", SERVER_ADDR,
                        "-port", str(PORT), "-congestion", "cubic", "-window", str(window),
                        "-once", "-json", str(workdir / "sender.json")],
                       stderr=workdir / "sender.log")
    client = None
    try:
        wait_for(lambda: srv.run(["ss", "-H", "-u", "-l", "-n", "sport", "=", f":{PORT}"],
                                 check=False).stdout.strip(), timeout=5, what="server socket")
        client = cli.start([str(TOOL), "-mode", "client", "-host", SERVER_ADDR,
                            "-port", str(PORT), "-duration", f"{duration_s:g}",
                            "-window", str(window), "-interval_ms", "0",
                            "-json", str(workdir / "receiver.json")],
                           stderr=workdir / "receiver.log")
        c0 = children_cpu_s()
        rc_client = client.wait(timeout=duration_s + 30)
        c1 = children_cpu_s()
        rc_server = server.wait(timeout=15)
        c2 = children_cpu_s()
    finally:
        if client is not None:
            client.stop()
        server.stop()
    if rc_client != 0 or rc_server != 0:
        raise RuntimeError(f"client exit {rc_client}, server exit {rc_server}: "
                           + (workdir / "receiver.log").read_text()[-500:])
    rj = json.loads((workdir / "receiver.json").read_text())
    sj = json.loads((workdir / "sender.json").read_text())
    goodput_mbps = rj["goodput_kbps"] / 1000
    dur = rj["duration_s"]
    recv_cpu, send_cpu = c1 - c0, c2 - c1
    per10 = lambda cpu: cpu / dur / (goodput_mbps / 10)  # noqa: E731
    return {"window": window, "goodput_mbps": goodput_mbps, "duration_s": dur,
            "sender_cpu_s": send_cpu, "receiver_cpu_s": recv_cpu,
            "sender_cpu_per_10mbit": per10(send_cpu), "receiver_cpu_per_10mbit": per10(recv_cpu),
            "packets_sent": sj["sender"]["packets_sent"], "packets_lost": sj["sender"]["packets_lost"],
            "srtt_ms": sj["sender"]["srtt_ms"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate-kbit", type=int, default=100_000)
    ap.add_argument("--rtt-ms", type=float, default=20.0)
    ap.add_argument("--qfactor", type=float, default=2.0)
    ap.add_argument("--duration-s", type=float, default=10.0)
    ap.add_argument("--windows", default="65536,4194304",
                    help="comma-separated -window values in bytes")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    windows = [int(w) for w in args.windows.split(",")]
    for p in (TOOL, DELAYLINE):
        if not p.is_file():
            raise SystemExit(f"{p} missing: cargo build --release -p tquic-perf -p delayline")

    plan = shaped_plan(args.rate_kbit, args.rtt_ms, args.qfactor)
    print(f"link: {args.rate_kbit} kbit/s htb, bfifo {plan.downlink.queue_bytes} B "
          f"({args.qfactor:g} x BDP), RTT {args.rtt_ms:g} ms via {plan.delay.mechanism}; "
          f"cubic, {args.duration_s:g} s per transfer, {args.reps} reps")
    results: dict[int, list[dict]] = {w: [] for w in windows}
    with tempfile.TemporaryDirectory(prefix="ld-bench-tool-") as tmp, \
            Topology(plan, delayline_bin=str(DELAYLINE)) as topo:
        for rep in range(args.reps):
            for w in windows:
                d = Path(tmp) / f"w{w}-r{rep}"
                d.mkdir()
                r = one_transfer(topo, w, args.duration_s, d)
                results[w].append(r)
                print(f"  window={w:>8} rep={rep} goodput={r['goodput_mbps']:6.2f} Mbit/s "
                      f"sender_cpu={r['sender_cpu_s']:.2f} s receiver_cpu={r['receiver_cpu_s']:.2f} s "
                      f"lost={r['packets_lost']}/{r['packets_sent']} srtt={r['srtt_ms']} ms",
                      flush=True)
    print("\nmedians:")
    print(f"{'window_bytes':>12} {'goodput_mbps':>12} {'sender_cpu_s':>12} {'receiver_cpu_s':>14} "
          f"{'sender_cpu/10Mbit':>17} {'receiver_cpu/10Mbit':>19}")
    for w, rs in results.items():
        med = lambda k: statistics.median(r[k] for r in rs)  # noqa: E731
        print(f"{w:>12} {med('goodput_mbps'):>12.2f} {med('sender_cpu_s'):>12.2f} "
              f"{med('receiver_cpu_s'):>14.2f} {med('sender_cpu_per_10mbit'):>17.4f} "
              f"{med('receiver_cpu_per_10mbit'):>19.4f}")
    print("(cpu/10Mbit: CPU seconds per second of transfer per 10 Mbit/s of goodput)")


if __name__ == "__main__":
    main()
