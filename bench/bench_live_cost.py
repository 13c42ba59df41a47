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
trial keeps. Medians per mode, and live / bulk ratios.

Needs root, `cargo build --release -p tquic-perf -p delayline`.
Run: sudo .venv/bin/python bench/bench_live_cost.py [--rate-kbit 5000] [--duration-s 20] [--reps 3]
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


def one_run(topo, mode: str, duration_s: float, workdir: Path) -> dict:
    extra, window = MODES[mode]
    srv, cli = topo.runner("srv"), topo.runner("cli")
    server = srv.start([str(TOOL), "-mode", "server", "-host", SERVER_ADDR, "-port", str(PORT),
                        "-congestion", "cubic", "-once", *extra,
                        "-json", str(workdir / "sender.json")], stderr=workdir / "sender.log")
    client = None
    try:
        wait_for(lambda: srv.run(["ss", "-H", "-u", "-l", "-n", "sport", "=", f":{PORT}"],
                                 check=False).stdout.strip(), timeout=5, what="server socket")
        client = cli.start([str(TOOL), "-mode", "client", "-host", SERVER_ADDR, "-port",
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
    dur = rj["duration_s"]
    data = b"".join((workdir / f).read_bytes() for f in ("sender.json", "receiver.json",
                                                         "sender.log", "receiver.log"))
    xz = lzma.compress(data, format=lzma.FORMAT_XZ, filters=XZ_FILTERS)
    out = {"duration_s": dur, "goodput_kbps": rj["goodput_kbps"],
           "sender_cpu_s": c2 - c1, "receiver_cpu_s": c1 - c0,
           "cpu_per_s": (c2 - c0) / dur, "raw_bytes_per_s": len(data) / dur,
           "xz_bytes_per_s": len(xz) / dur}
    if mode != "bulk":
        live = json.loads((workdir / "sender.json").read_text())["live"]
        out["bitrate_mean_kbps"] = live["bitrate_mean_kbps"]
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
    args = ap.parse_args()
    for p in (TOOL, DELAYLINE):
        if not p.is_file():
            raise SystemExit(f"{p} missing: cargo build --release -p tquic-perf -p delayline")
    plan = link_plan(args.rate_kbit, args.rate_kbit, args.rtt_ms, args.qfactor,
                     resolve_delay_mechanism("auto"))
    print(host_line())
    print(f"link: {args.rate_kbit} kbit/s htb, bfifo {plan.downlink.queue_bytes} B "
          f"({args.qfactor:g} x BDP), RTT {args.rtt_ms:g} ms via {plan.delay.mechanism}; "
          f"cubic, {args.duration_s:g} s per run, {args.reps} reps, modes interleaved")
    results: dict[str, list[dict]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory(prefix="ld-bench-live-") as tmp, \
            Topology(plan, delayline_bin=str(DELAYLINE)) as topo:
        for rep in range(args.reps):
            for mode in MODES:
                d = Path(tmp) / f"{mode}-r{rep}"
                d.mkdir()
                r = one_run(topo, mode, args.duration_s, d)
                results[mode].append(r)
                print(f"  {mode:<12} rep={rep} goodput={r['goodput_kbps']:7.0f} kbit/s "
                      f"sender_cpu={r['sender_cpu_s']:.3f} s receiver_cpu={r['receiver_cpu_s']:.3f} s "
                      f"cpu_per_s={r['cpu_per_s']:.4f} raw_bytes_per_s={r['raw_bytes_per_s']:.0f} "
                      f"xz_bytes_per_s={r['xz_bytes_per_s']:.0f}"
                      + (f" bitrate_mean={r['bitrate_mean_kbps']:.0f} kbit/s"
                         if "bitrate_mean_kbps" in r else ""), flush=True)
    print("\nmedians:")
    print(f"{'mode':<12} {'goodput_kbps':>12} {'sender_cpu_s':>12} {'receiver_cpu_s':>14} "
          f"{'cpu_s_per_s':>11} {'raw_B_per_s':>11} {'xz_B_per_s':>10} {'cpu vs bulk':>11} "
          f"{'raw vs bulk':>11} {'xz vs bulk':>10}")
    med = {m: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
           for m, rs in results.items()}
    for m, x in med.items():
        print(f"{m:<12} {x['goodput_kbps']:>12.0f} {x['sender_cpu_s']:>12.3f} "
              f"{x['receiver_cpu_s']:>14.3f} {x['cpu_per_s']:>11.4f} {x['raw_bytes_per_s']:>11.0f} "
              f"{x['xz_bytes_per_s']:>10.0f} {x['cpu_per_s'] / med['bulk']['cpu_per_s']:>11.2f} "
              f"{x['raw_bytes_per_s'] / med['bulk']['raw_bytes_per_s']:>11.2f} "
              f"{x['xz_bytes_per_s'] / med['bulk']['xz_bytes_per_s']:>10.2f}")
    print("(cpu_s_per_s: sender + receiver CPU seconds per second of transfer; raw_B_per_s / "
          "xz_B_per_s: the tool's two JSONs and two logs per second of transfer, as written / "
          "xz-compressed as in a trial's archive)")


if __name__ == "__main__":
    main()
