"""Does a live broadcast (tquic-perf -app live) cost more CPU per second, or write more raw log
per second, than a bulk transfer on the same link? (issue 58's targets: no more CPU per second
than a bulk trial; raw logs at most 1.5 x a bulk trial's per second of transfer.)

Topology: the project's four-namespace line (src/latency_divide/testbed/local.py), created here
and removed in `finally`: server --- gateway (htb RATE + bfifo of 2 x BDP, both directions) ---
delay (the userspace delay line, or netem where the kernel has it; RTT_MS) --- client. The
server sends (downlink), the client reads for DURATION s. Per rep, interleaved:

- bulk: Cubic, -window 65536 (the paper's trials);
- live-backlog, live-rate: Cubic, -app live with each ABR, the receiver's -window 4194304
  (what a live trial passes; README.md "Live mode").

Per run: CPU seconds of the sender and the receiver (user + system of each reaped child, as in
bench_tool_throughput.py), their sum per second of transfer, goodput (the receiver's bytes, SI
kbit/s), and the tool's raw bytes per second of transfer (sender.json, receiver.json,
sender.log, receiver.log): as written, and xz-compressed together with the settings of a
trial's archive (format 4's logs.tar.xz, trial.rawio.XZ_FILTERS), which is what a published
trial keeps. Medians per mode, and live / bulk ratios. Where the CPU goes, per second of
transfer, from the reports' `batching` objects: the sender's event-loop wake-ups (polls), send
syscalls and packets sent, and the receiver's; for live runs the frame latency (p50, p95:
capture to the last byte's receipt) and the frames dropped at the sender.

`--base-tool PATH` runs every mode with a second tquic-perf binary too (labelled `@base`,
interleaved with the others in each rep), so that a change is measured against the binary
before it in one run, on the same host state; each binary's ratios are against its own bulk.

Needs root, `cargo build --release -p tquic-perf -p delayline`.
Run: sudo .venv/bin/python bench/bench_live_cost.py [--rate-kbit 5000] [--duration-s 20] [--reps 3]
     [--base-tool /tmp/tquic-perf-before] [--modes bulk,live-backlog,live-rate]
"""

from __future__ import annotations

import argparse
import json
import lzma
import platform
import resource
import statistics
import subprocess
import tempfile
from pathlib import Path

from latency_divide.links.plan import link_plan
from latency_divide.testbed.local import Topology, resolve_delay_mechanism
from latency_divide.testbed.netns import SERVER_ADDR
from latency_divide.testbed.runners import wait_for
from latency_divide.trial.rawio import XZ_FILTERS

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "target" / "release" / "tquic-perf"
DELAYLINE = ROOT / "target" / "release" / "delayline"
PORT = 6668

MODES = {
    "bulk": ([], 65536),
    "live-backlog": (["-app", "live", "-abr", "backlog"], 4194304),
    "live-rate": (["-app", "live", "-abr", "rate"], 4194304),
}


def children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def one_run(topo, mode: str, duration_s: float, workdir: Path, tool: Path = TOOL) -> dict:
    extra, window = MODES[mode]
    srv, cli = topo.runner("srv"), topo.runner("cli")
    server = srv.start([str(tool), "-mode", "server", "-host", SERVER_ADDR, "-port", str(PORT),
                        "-congestion", "cubic", "-once", *extra,
                        "-json", str(workdir / "sender.json")], stderr=workdir / "sender.log")
    client = None
    try:
        wait_for(lambda: srv.run(["ss", "-H", "-u", "-l", "-n", "sport", "=", f":{PORT}"],
                                 check=False).stdout.strip(), timeout=5, what="server socket")
        client = cli.start([str(tool), "-mode", "client", "-host", SERVER_ADDR, "-port",
                            str(PORT), "-duration", f"{duration_s:g}", "-window", str(window),
                            *extra, "-json", str(workdir / "receiver.json")],
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
        raise RuntimeError(f"{mode}: client exit {rc_client}, server exit {rc_server}: "
                           + (workdir / "receiver.log").read_text()[-500:])
    rj = json.loads((workdir / "receiver.json").read_text())
    sj = json.loads((workdir / "sender.json").read_text())
    dur = rj["duration_s"]
    data = b"".join((workdir / f).read_bytes() for f in ("sender.json", "receiver.json",
                                                         "sender.log", "receiver.log"))
    xz = lzma.compress(data, format=lzma.FORMAT_XZ, filters=XZ_FILTERS)
    out = {"duration_s": dur, "goodput_kbps": rj["goodput_kbps"],
           "sender_cpu_s": c2 - c1, "receiver_cpu_s": c1 - c0,
           "cpu_per_s": (c2 - c0) / dur, "raw_bytes_per_s": len(data) / dur,
           "xz_bytes_per_s": len(xz) / dur}
    # Where the CPU goes, per second of transfer (the reports' batching objects).
    for end, j in (("snd", sj), ("rcv", rj)):
        b = j["batching"]
        out[f"{end}_polls_per_s"] = b["recv"]["polls"] / dur
        out[f"{end}_tx_calls_per_s"] = b["send"]["syscalls"] / dur
        out[f"{end}_tx_pkts_per_s"] = b["send"]["packets"] / dur
        out[f"{end}_rx_pkts_per_s"] = b["recv"]["packets"] / dur
    if mode != "bulk":
        live = sj["live"]
        out["bitrate_mean_kbps"] = live["bitrate_mean_kbps"]
        out["frames_dropped"] = live["frames_dropped"]
        lat = rj["live"]["frame_latency_ms"]
        out["latency_p50_ms"] = lat["p50_ms"]
        out["latency_p95_ms"] = lat["p95_ms"]
        # How late after its capture each frame was made (reports since -frame_slack_ms).
        late = live.get("frame_lateness_ms") or {}
        out["made_late_p50_ms"] = late.get("p50_ms")
        out["made_late_p95_ms"] = late.get("p95_ms")
    return out


def host_line() -> str:
    model = next((ln.split(":", 1)[1].strip() for ln in subprocess.run(
        ["lscpu"], capture_output=True, text=True).stdout.splitlines()
        if ln.startswith("Model name")), "?")
    return f"host: {model}, kernel {platform.release()}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate-kbit", type=int, default=5000)
    ap.add_argument("--rtt-ms", type=float, default=40.0)
    ap.add_argument("--qfactor", type=float, default=2.0)
    ap.add_argument("--duration-s", type=float, default=20.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tool", type=Path, default=TOOL, help="the tquic-perf binary measured")
    ap.add_argument("--base-tool", type=Path, default=None,
                    help="a second tquic-perf binary (e.g. the one before a change), run "
                         "interleaved with --tool in every rep, its modes labelled @base")
    ap.add_argument("--modes", default=",".join(MODES),
                    help=f"comma-separated, from {', '.join(MODES)} (bulk is always run)")
    args = ap.parse_args()
    modes = ["bulk"] + [m for m in args.modes.split(",") if m and m != "bulk"]
    for m in modes:
        if m not in MODES:
            raise SystemExit(f"unknown mode {m!r}; modes: {', '.join(MODES)}")
    tools = {"": args.tool}
    if args.base_tool is not None:
        tools["@base"] = args.base_tool
    for p in (*tools.values(), DELAYLINE):
        if not p.is_file():
            raise SystemExit(f"{p} missing: cargo build --release -p tquic-perf -p delayline")
    plan = link_plan(args.rate_kbit, args.rate_kbit, args.rtt_ms, args.qfactor,
                     resolve_delay_mechanism("auto"))
    print(host_line())
    print(f"link: {args.rate_kbit} kbit/s htb, bfifo {plan.downlink.queue_bytes} B "
          f"({args.qfactor:g} x BDP), RTT {args.rtt_ms:g} ms via {plan.delay.mechanism}; "
          f"cubic, {args.duration_s:g} s per run, {args.reps} reps, modes interleaved")
    for tag, tool in tools.items():
        print(f"tool{tag or ''}: {tool}")
    runs = [(m + tag, m, tool) for tag, tool in tools.items() for m in modes]
    results: dict[str, list[dict]] = {label: [] for label, _, _ in runs}
    with tempfile.TemporaryDirectory(prefix="ld-bench-live-") as tmp, \
            Topology(plan, delayline_bin=str(DELAYLINE)) as topo:
        for rep in range(args.reps):
            for label, mode, tool in runs:
                d = Path(tmp) / f"{label}-r{rep}"
                d.mkdir()
                r = one_run(topo, mode, args.duration_s, d, tool)
                results[label].append(r)
                print(f"  {label:<17} rep={rep} goodput={r['goodput_kbps']:7.0f} kbit/s "
                      f"sender_cpu={r['sender_cpu_s']:.3f} s receiver_cpu={r['receiver_cpu_s']:.3f} s "
                      f"cpu_per_s={r['cpu_per_s']:.4f} raw_bytes_per_s={r['raw_bytes_per_s']:.0f} "
                      f"xz_bytes_per_s={r['xz_bytes_per_s']:.0f}"
                      + (f" bitrate_mean={r['bitrate_mean_kbps']:.0f} kbit/s"
                         f" latency_p50={r['latency_p50_ms']} ms p95={r['latency_p95_ms']} ms"
                         f" dropped={r['frames_dropped']}"
                         if "bitrate_mean_kbps" in r else "")
                      + f" snd_polls/s={r['snd_polls_per_s']:.0f}"
                        f" snd_tx_calls/s={r['snd_tx_calls_per_s']:.0f}"
                        f" snd_tx_pkts/s={r['snd_tx_pkts_per_s']:.0f}"
                        f" rcv_polls/s={r['rcv_polls_per_s']:.0f}"
                        f" rcv_tx_pkts/s={r['rcv_tx_pkts_per_s']:.0f}", flush=True)
    med = {m: {k: statistics.median(r[k] for r in rs if r.get(k) is not None)
               for k in rs[0] if any(r.get(k) is not None for r in rs)}
           for m, rs in results.items()}

    def bulk_of(label: str) -> dict:
        """The medians of bulk with the same binary as `label`."""
        return med["bulk" + (label[label.index("@"):] if "@" in label else "")]

    print("\nmedians:")
    print(f"{'mode':<17} {'goodput_kbps':>12} {'sender_cpu_s':>12} {'receiver_cpu_s':>14} "
          f"{'cpu_s_per_s':>11} {'raw_B_per_s':>11} {'xz_B_per_s':>10} {'cpu vs bulk':>11} "
          f"{'raw vs bulk':>11} {'xz vs bulk':>10}")
    for m, x in med.items():
        b = bulk_of(m)
        print(f"{m:<17} {x['goodput_kbps']:>12.0f} {x['sender_cpu_s']:>12.3f} "
              f"{x['receiver_cpu_s']:>14.3f} {x['cpu_per_s']:>11.4f} {x['raw_bytes_per_s']:>11.0f} "
              f"{x['xz_bytes_per_s']:>10.0f} {x['cpu_per_s'] / b['cpu_per_s']:>11.2f} "
              f"{x['raw_bytes_per_s'] / b['raw_bytes_per_s']:>11.2f} "
              f"{x['xz_bytes_per_s'] / b['xz_bytes_per_s']:>10.2f}")
    print("(cpu_s_per_s: sender + receiver CPU seconds per second of transfer; raw_B_per_s / "
          "xz_B_per_s: the tool's two JSONs and two logs per second of transfer, as written / "
          "xz-compressed as in a trial's archive)")
    print("\nmedians, where the CPU goes (per second of transfer) and the frames:")
    print(f"{'mode':<17} {'snd_cpu vs bulk':>15} {'snd_polls':>9} {'snd_tx_calls':>12} "
          f"{'snd_tx_pkts':>11} {'snd_rx_pkts':>11} {'rcv_polls':>9} {'rcv_tx_pkts':>11} "
          f"{'lat_p50_ms':>10} {'lat_p95_ms':>10} {'dropped':>7} {'made_late_p50_ms':>16} "
          f"{'made_late_p95_ms':>16}")
    for m, x in med.items():
        b = bulk_of(m)
        lat = (f"{x['latency_p50_ms']:>10.1f} {x['latency_p95_ms']:>10.1f} "
               f"{x['frames_dropped']:>7.0f}" if "latency_p50_ms" in x else f"{'':>10} {'':>10} {'':>7}")
        lat += "".join(f" {x[k]:>16.2f}" if k in x else f" {'':>16}"
                       for k in ("made_late_p50_ms", "made_late_p95_ms"))
        print(f"{m:<17} {x['sender_cpu_s'] / b['sender_cpu_s']:>15.2f} {x['snd_polls_per_s']:>9.0f} "
              f"{x['snd_tx_calls_per_s']:>12.0f} {x['snd_tx_pkts_per_s']:>11.0f} "
              f"{x['snd_rx_pkts_per_s']:>11.0f} {x['rcv_polls_per_s']:>9.0f} "
              f"{x['rcv_tx_pkts_per_s']:>11.0f} {lat}")
    print("(polls: event-loop wake-ups; tx_calls: send syscalls; tx_pkts / rx_pkts: QUIC packets "
          "sent / received; lat: frame latency, capture to the last byte's receipt; made_late: "
          "how long after its capture a frame was made, part of its latency)")


if __name__ == "__main__":
    main()
