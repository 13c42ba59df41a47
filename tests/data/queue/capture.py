"""Re-capture the real queue fixture in this directory (needs root; creates and removes its
own namespaces ld-<tag>-{cli,gw,srv}).

cli --- gw --- srv; on gw's egress toward srv: htb rate 4000kbit + bfifo limit 15000 bytes (the
paper's recipe). iperf3 (TCP, cli -> srv) overfills it, and ``tc -s -j qdisc show dev IF`` is
sampled every 0.1 s into queue.jsonl in the raw-layout format
({"t_unix", "dev", "qdisc"}). Halfway through, the root qdisc is deleted and re-created, so
the running counters restart from zero (a real counter reset).

    sudo .venv/bin/python tests/data/queue/capture.py
"""

from __future__ import annotations

import json
import secrets
import sys
import time
from pathlib import Path

from latency_divide.testbed.runners import LocalRunner

HERE = Path(__file__).resolve().parent


def shape(gw: LocalRunner, dev: str) -> None:
    gw.run(["tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "3"])
    gw.run(["tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:3", "htb", "rate",
            "4000kbit"])
    gw.run(["tc", "qdisc", "add", "dev", dev, "parent", "1:3", "bfifo", "limit", "15000"])


def main() -> int:
    tag = secrets.token_hex(3)
    roles = ("cli", "gw", "srv")
    ns = {r: f"ld-{tag}-{r}" for r in roles}
    host = LocalRunner()
    made: list[str] = []
    procs = []
    try:
        for n in ns.values():
            host.run(["ip", "netns", "add", n])
            made.append(n)
        r = {k: LocalRunner(v) for k, v in ns.items()}
        for k in roles:
            r[k].run(["ip", "link", "set", "lo", "up"])
        for a, ia, ib, net in (("cli", f"ld{tag}c", f"ld{tag}gc", "10.78.1"),
                               ("srv", f"ld{tag}s", f"ld{tag}gs", "10.78.2")):
            host.run(["ip", "link", "add", ia, "netns", ns[a], "type", "veth", "peer", "name", ib,
                      "netns", ns["gw"]])
            r[a].run(["ip", "addr", "add", f"{net}.2/24", "dev", ia])
            r["gw"].run(["ip", "addr", "add", f"{net}.1/24", "dev", ib])
            r[a].run(["ip", "link", "set", ia, "up"])
            r["gw"].run(["ip", "link", "set", ib, "up"])
            other = "10.78.2.0/24" if a == "cli" else "10.78.1.0/24"
            r[a].run(["ip", "route", "add", other, "via", f"{net}.1"])
        r["gw"].run(["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])
        dev = f"ld{tag}gs"
        shape(r["gw"], dev)
        procs.append(r["srv"].start(["iperf3", "-s", "-1", "-B", "10.78.2.2"]))
        time.sleep(0.5)
        procs.append(r["cli"].start(["iperf3", "-c", "10.78.2.2", "-t", "6"]))
        out = HERE / "queue.jsonl"
        tmp = out.with_suffix(".tmp")
        t_end = time.time() + 5.0
        reset_at = time.time() + 2.5
        with open(tmp, "w") as f:
            while time.time() < t_end:
                if reset_at and time.time() >= reset_at:
                    r["gw"].run(["tc", "qdisc", "del", "dev", dev, "root"])
                    shape(r["gw"], dev)
                    reset_at = 0
                t = time.time()
                res = r["gw"].run(["tc", "-s", "-j", "qdisc", "show", "dev", dev])
                f.write(json.dumps({"t_unix": t, "dev": dev, "qdisc": json.loads(res.stdout)})
                        + "\n")
                time.sleep(max(0.0, 0.1 - (time.time() - t)))
        tmp.rename(out)
        print(out.read_text()[:3000])
        return 0
    finally:
        for p in procs:
            p.stop()
        for n in reversed(made):
            host.run(["ip", "netns", "del", n], check=False)


if __name__ == "__main__":
    sys.exit(main())
