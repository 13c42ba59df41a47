"""Why does mvfst's Copa lose its throughput at δ 0.5 and 0.8 where tquic's keeps it? (issue
"Fast links", section 2.) Each mvfst tperf binary given runs Cubic and Copa (δ 0.2, 0.5, 0.8)
on the loopback of a network namespace of ours (no link shaping, no delay line: only the
stack and the tool), with the server's qlog on. Printed per run: goodput, and from the qlog
(latency_divide.parsers.qlog) what Copa took for queueing delay, d = latest RTT - min RTT
(mvfst's default estimate), the peer's ack delay in it, and the rate Copa aims at, 1 / (δ d)
packets/s, with and without the ack delay.

tperf is mvfst's; build it from mvfst's own sources (docs/tools.md, "mvfst's tperf"); nothing here
builds it. Give binaries as NAME=PATH (a diagnostic build of your own, say one whose client
acks every packet, can be compared with the stock one). Flags: today's defaults, or --flags
2021 for the 2021 emulation (config/mvfst.yaml's tool.args).

Needs root (a network namespace). Run:
  sudo .venv/bin/python bench/bench_mvfst_copa.py --tperf stock=/path/to/tperf [--duration-s 4]
"""
from __future__ import annotations

import argparse
import glob
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import yaml

from latency_divide.testbed.netns import new_tag, ns_name, write_owner_record
from latency_divide.parsers.qlog import copa_estimate, read_qlog, rtt_samples
from latency_divide.parsers.tool import parse_tool_log
from latency_divide.testbed.runners import LocalRunner

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = (("cubic", None), ("copa", 0.2), ("copa", 0.5), ("copa", 0.8))
PORT = 6666
MSS = 1252  # mvfst's default UDP send packet length (kDefaultUDPSendPacketLen)


def flags_2021() -> list[str]:
    cfg = yaml.safe_load((ROOT / "config" / "mvfst.yaml").read_text())
    return ["-window", str(cfg["tool"]["window_bytes"]), *cfg["tool"]["args"]]


def run_one(ns: str, tperf: str, cc: str, delta: float | None, duration_s: float,
            extra: list[str], d: Path) -> dict:
    r = LocalRunner(ns)
    qdir = d / "qlog"
    qdir.mkdir(parents=True)
    srv_argv = [tperf, "-mode", "server", "-host", "::1", "-port", str(PORT),
                "-congestion", cc, "-server_qlogger_path", str(qdir), *extra]
    if delta is not None:
        srv_argv += ["-latency_factor", repr(delta)]
    cli_argv = [tperf, "-mode", "client", "-host", "::1", "-port", str(PORT),
                "-duration", f"{duration_s:g}", *extra]
    server = r.start(srv_argv, stdout=d / "server.log", stderr=d / "server.log")
    try:
        time.sleep(0.5)
        res = r.run(cli_argv, timeout=duration_s + 30, check=False)
        (d / "client.log").write_text(res.stdout + res.stderr)
        time.sleep(0.5)  # the server writes its qlog when the connection closes
    finally:
        server.stop(timeout=3)
    log = parse_tool_log(res.stdout + res.stderr)
    out = {"mbit": (log.goodput_kbps or 0) / 1000}
    qlogs = sorted(glob.glob(str(qdir / "*.qlog")))
    if cc == "copa" and qlogs:
        est = copa_estimate(rtt_samples(read_qlog(qlogs[-1])), skip_ms=1000)
        out.update(est)
        for key, d_ms in (("target_mbit", est["estimate_ms_median"]),
                          ("target_wo_ackdelay_mbit", est["estimate_without_ack_delay_ms_median"])):
            out[key] = (MSS * 8 / (delta * d_ms / 1000) / 1e6) if d_ms > 0 else float("inf")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tperf", action="append", required=True, metavar="NAME=PATH")
    ap.add_argument("--duration-s", type=float, default=4.0)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--flags", choices=["today", "2021"], default="today")
    args = ap.parse_args()
    binaries = dict(x.split("=", 1) for x in args.tperf)
    extra = flags_2021() if args.flags == "2021" else []
    tag = new_tag()
    ns = ns_name(tag, "srv")
    record = write_owner_record(tag, [ns])
    host = LocalRunner()
    rows = []
    try:
        host.run(["ip", "netns", "add", ns])
        LocalRunner(ns).run(["ip", "link", "set", "lo", "up"])
        with tempfile.TemporaryDirectory(prefix="ld-bench-mvfst-") as tmp:
            for name, path in binaries.items():
                for cc, delta in VARIANTS:
                    runs = []
                    for rep in range(args.reps):
                        d = Path(tmp) / f"{name}-{cc}-{delta}-{rep}"
                        runs.append(run_one(ns, path, cc, delta, args.duration_s, extra, d))
                    med = {k: statistics.median(x[k] for x in runs) for k in runs[0]}
                    rows.append((name, cc if delta is None else f"copa {delta}", med))
    finally:
        host.run(["ip", "netns", "del", ns], check=False)
        record.unlink(missing_ok=True)
    sha = {n: subprocess.run(["sha256sum", p], capture_output=True, text=True).stdout[:16]
           for n, p in binaries.items()}
    print(f"# loopback, {args.duration_s:g} s, flags {args.flags} {' '.join(extra)}, "
          f"median of {args.reps}; binaries: {sha}")
    cols = ["mbit", "estimate_ms_median", "ack_delay_ms_median",
            "estimate_without_ack_delay_ms_median", "ack_delay_share", "min_rtt_ms",
            "target_mbit", "target_wo_ackdelay_mbit"]
    print("binary\tvariant\t" + "\t".join(cols))
    for name, v, med in rows:
        print(f"{name}\t{v}\t" + "\t".join(f"{med[c]:.3f}" if c in med else "-" for c in cols))


if __name__ == "__main__":
    main()
