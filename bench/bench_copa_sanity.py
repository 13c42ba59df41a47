"""Does tquic's Copa behave like Copa? Delay and goodput of Cubic and Copa (δ = 0.2, 0.5, 0.8)
on a slow household-like link: 3 Mbit/s, 40 ms RTT, a bfifo of 2 x BDP (30000 B, 80 ms).

Expectation (EXPERIMENT.md): Cubic fills the buffer (RTT near 40 + 80 ms); Copa keeps a
standing queue of about 1/δ packets (δ = 0.5: 2 packets, ~6.6 ms at 3 Mbit/s) at nearly
full goodput.

Topology: the project's four-namespace line (src/latency_divide/testbed/local.py, netns.py), created here
and removed in `finally`; the delay is the userspace delay line (netem where available).
Per variant: tquic-perf server (the sender) on the server node, client on the client node
(downlink), `ping -D -O -n -i 0.1` client -> server from 2 s before the transfer to its
end, and the gateway's bfifo sampled every 100 ms (latency_divide.testbed.qsampler). Printed per
variant (medians over REPS runs of the per-run figures):

- goodput_kbps (client's summary, SI), norm = goodput / rate;
- mean and median ping RTT during the transfer, skipping the first SKIP_S seconds
  (slow start), and the idle RTT before it;
- mean bfifo backlog in packets over the same window (tc's qlen) and drops;
- expected standing queue 1/δ packets for Copa.

--pacing runs the senders paced (tquic's own default; tperf's default is unpaced).

Needs root, ping, `cargo build --release -p tquic-perf -p delayline`.
Run: sudo .venv/bin/python bench/bench_copa_sanity.py [--duration-s 20] [--reps 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from latency_divide.testbed.local import Topology, resolve_delay_mechanism
from latency_divide.testbed.netns import SERVER_ADDR
from latency_divide.links.plan import LinkPlan, link_plan
from latency_divide.parsers.ping import parse_ping
from latency_divide.parsers.queue import parse_queue
from latency_divide.testbed.runners import wait_for

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "target" / "release" / "tquic-perf"
DELAYLINE = ROOT / "target" / "release" / "delayline"
PORT = 6666
VARIANTS = (("cubic", None), ("copa", 0.2), ("copa", 0.5), ("copa", 0.8))


def shaped_plan(rate_kbit: int, rtt_ms: float, qfactor: float) -> LinkPlan:
    """Both directions at rate_kbit with a qfactor x BDP bfifo (EXPERIMENT.md's formulas)."""
    return link_plan(rate_kbit, rate_kbit, rtt_ms, qfactor, resolve_delay_mechanism("auto"))


def run_variant(topo, cc: str, delta: float | None, duration_s: float, skip_s: float,
                d: Path, pacing: bool = False) -> dict:
    srv, cli, gw = topo.runner("srv"), topo.runner("cli"), topo.runner("gw")
    cc_args = ["-congestion", cc] + (["-latency_factor", repr(delta)] if delta else [])
    procs = []
    try:
        server = srv.start([str(TOOL), "-mode", "server", "-host", SERVER_ADDR,
                            "-port", str(PORT), *cc_args, "-once", f"-pacing={str(pacing).lower()}",
                            "-json", str(d / "sender.json")], stderr=d / "sender.log")
        procs.append(server)
        wait_for(lambda: srv.run(["ss", "-H", "-u", "-l", "-n", "sport", "=", f":{PORT}"],
                                 check=False).stdout.strip(), timeout=5, what="server socket")
        procs.append(gw.start(topo.qsampler_argv(topo.gateway_egress("downlink"), 0.1),
                              stdout=d / "queue.jsonl", stderr=d / "qsampler.log"))
        ping = cli.start(["ping", "-D", "-O", "-n", "-i", "0.1", SERVER_ADDR],
                         stdout=d / "ping.log", stderr=d / "ping.err")
        procs.append(ping)
        time.sleep(2.0)
        res = cli.run([str(TOOL), "-mode", "client", "-host", SERVER_ADDR,
                       "-port", str(PORT), "-duration", f"{duration_s:g}", *cc_args,
                       "-json", str(d / "receiver.json")], check=False, timeout=duration_s + 30)
        (d / "receiver.log").write_text(res.stderr)
        if res.returncode != 0:
            raise RuntimeError(f"{cc} {delta}: client exit {res.returncode}: {res.stderr[-500:]}")
        server.wait(timeout=15)
    finally:
        for p in reversed(procs):
            p.stop()
    rj = json.loads((d / "receiver.json").read_text())
    sj = json.loads((d / "sender.json").read_text())
    start, end = rj["start_unix"], rj["start_unix"] + rj["duration_s"]
    pings = parse_ping((d / "ping.log").read_text())
    idle = pings[pings["t_unix"] < start]["rtt_ms"].dropna()
    busy = pings[(pings["t_unix"] >= start + skip_s) & (pings["t_unix"] <= end)]["rtt_ms"]
    q = parse_queue((d / "queue.jsonl").read_text())
    qb = q[(q["t_unix"] >= start + skip_s) & (q["t_unix"] <= end)]
    return {
        "goodput_kbps": rj["goodput_kbps"],
        "idle_rtt_ms": float(idle.min()) if len(idle) else float("nan"),
        "rtt_mean_ms": float(busy.mean()), "rtt_median_ms": float(busy.median()),
        "ping_lost": int(busy.isna().sum()),
        "queue_pkts_mean": float(qb["backlog_pkts"].mean()),
        "queue_bytes_mean": float(qb["backlog_bytes"].mean()),
        "drops": int(q[(q["t_unix"] >= start) & (q["t_unix"] <= end)]["drops"].sum()),
        "packets_lost": sj["sender"]["packets_lost"], "packets_sent": sj["sender"]["packets_sent"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate-kbit", type=int, default=3000)
    ap.add_argument("--rtt-ms", type=float, default=40.0)
    ap.add_argument("--qfactor", type=float, default=2.0)
    ap.add_argument("--duration-s", type=float, default=20.0)
    ap.add_argument("--skip-s", type=float, default=3.0,
                    help="seconds after the first byte left out of the delay/queue means")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--keep", type=Path, help="keep the raw logs of each run in this directory")
    ap.add_argument("--pacing", action="store_true", help="run the senders with -pacing")
    args = ap.parse_args()
    for p in (TOOL, DELAYLINE):
        if not p.is_file():
            raise SystemExit(f"{p} missing: cargo build --release -p tquic-perf -p delayline")
    plan = shaped_plan(args.rate_kbit, args.rtt_ms, args.qfactor)
    pkt_ms = 1242 * 8 / args.rate_kbit  # one 1200-byte QUIC packet on the wire (+42 B headers)
    print(f"link: {args.rate_kbit} kbit/s, RTT {args.rtt_ms:g} ms ({plan.delay.mechanism}), "
          f"bfifo {plan.downlink.queue_bytes} B = {args.qfactor:g} x BDP; one packet = "
          f"{pkt_ms:.2f} ms; {args.duration_s:g} s transfers, first {args.skip_s:g} s skipped; "
          f"pacing {'on' if args.pacing else 'off'}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="ld-bench-copa-") as tmp, \
            Topology(plan, delayline_bin=str(DELAYLINE)) as topo:
        for rep in range(args.reps):
            for cc, delta in VARIANTS:
                name = cc if delta is None else f"copa-{delta:g}"
                d = (args.keep or Path(tmp)) / f"{name}-r{rep}"
                d.mkdir(parents=True, exist_ok=True)
                r = run_variant(topo, cc, delta, args.duration_s, args.skip_s, d, args.pacing)
                r.update(variant=name, delta=delta, rep=rep)
                rows.append(r)
                print(f"  {name:9} rep={rep} goodput={r['goodput_kbps']:7.0f} kbit/s "
                      f"rtt mean={r['rtt_mean_ms']:6.1f} median={r['rtt_median_ms']:6.1f} ms "
                      f"(idle {r['idle_rtt_ms']:.1f}) queue={r['queue_pkts_mean']:5.1f} pkts "
                      f"drops={r['drops']} lost={r['packets_lost']}/{r['packets_sent']}",
                      flush=True)
    print(f"\n{'variant':9} {'goodput_kbps':>12} {'norm':>5} {'rtt_mean_ms':>11} "
          f"{'rtt_median_ms':>13} {'self_delay_ms':>13} {'queue_pkts':>10} {'1/δ_pkts':>8} "
          f"{'drops':>6}")
    for cc, delta in VARIANTS:
        name = cc if delta is None else f"copa-{delta:g}"
        rs = [r for r in rows if r["variant"] == name]
        med = lambda k: statistics.median(r[k] for r in rs)  # noqa: E731
        expect = f"{1 / delta:8.1f}" if delta else f"{'-':>8}"
        print(f"{name:9} {med('goodput_kbps'):12.0f} {med('goodput_kbps') / args.rate_kbit:5.2f} "
              f"{med('rtt_mean_ms'):11.1f} {med('rtt_median_ms'):13.1f} "
              f"{med('rtt_mean_ms') - med('idle_rtt_ms'):13.1f} {med('queue_pkts_mean'):10.1f} "
              f"{expect} {med('drops'):6.0f}")


if __name__ == "__main__":
    main()
