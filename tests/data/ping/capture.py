"""Re-capture the real ping fixtures in this directory (needs root; creates and removes its
own namespaces ld-<tag>-{cli,gw,srv,srv2}).

Topology: cli 10.77.1.1 --- 10.77.1.2 gw [bridge 10.77.2.1] --- srv 10.77.2.2, srv2 10.77.2.3

- ping_loss.log: ``ping -D -O -n -i 0.2`` from cli to srv while srv ignores echo requests for
  ~1.2 s (sysctl icmp_echo_ignore_all) -> "no answer yet for icmp_seq=N" lines; ended by SIGINT
  so the statistics block is included.
- ping_dup.log: ``ping -D -O -n -b -i 0.2 -c 4 10.77.2.255`` from gw: srv and srv2 both answer,
  the second answer of each sequence is "(DUP!)".
- ping_ttl_exceeded.log: ``ping -D -O -n -t 1 -c 3`` from cli to srv: gw answers
  "Time to live exceeded".

    sudo .venv/bin/python tests/data/ping/capture.py
"""

from __future__ import annotations

import secrets
import sys
import time
from pathlib import Path

from latency_divide.testbed.runners import LocalRunner

HERE = Path(__file__).resolve().parent


def main() -> int:
    tag = secrets.token_hex(3)
    roles = ("cli", "gw", "srv", "srv2")
    ns = {r: f"ld-{tag}-{r}" for r in roles}
    host = LocalRunner()
    made: list[str] = []
    try:
        for n in ns.values():
            host.run(["ip", "netns", "add", n])
            made.append(n)
        r = {k: LocalRunner(v) for k, v in ns.items()}
        for k in roles:
            r[k].run(["ip", "link", "set", "lo", "up"])

        def veth(a: str, ia: str, b: str, ib: str) -> None:
            host.run(["ip", "link", "add", ia, "netns", ns[a], "type", "veth", "peer", "name", ib,
                      "netns", ns[b]])
            r[a].run(["ip", "link", "set", ia, "up"])
            r[b].run(["ip", "link", "set", ib, "up"])

        veth("cli", f"ld{tag}c", "gw", f"ld{tag}gc")
        veth("srv", f"ld{tag}s", "gw", f"ld{tag}gs")
        veth("srv2", f"ld{tag}t", "gw", f"ld{tag}gt")
        br = f"ld{tag}br"
        r["gw"].run(["ip", "link", "add", br, "type", "bridge"])
        for port in (f"ld{tag}gs", f"ld{tag}gt"):
            r["gw"].run(["ip", "link", "set", port, "master", br])
        r["gw"].run(["ip", "link", "set", br, "up"])
        r["cli"].run(["ip", "addr", "add", "10.77.1.1/24", "dev", f"ld{tag}c"])
        r["gw"].run(["ip", "addr", "add", "10.77.1.2/24", "dev", f"ld{tag}gc"])
        r["gw"].run(["ip", "addr", "add", "10.77.2.1/24", "brd", "10.77.2.255", "dev", br])
        r["srv"].run(["ip", "addr", "add", "10.77.2.2/24", "brd", "10.77.2.255", "dev", f"ld{tag}s"])
        r["srv2"].run(["ip", "addr", "add", "10.77.2.3/24", "brd", "10.77.2.255", "dev", f"ld{tag}t"])
        r["gw"].run(["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])
        r["cli"].run(["ip", "route", "add", "10.77.2.0/24", "via", "10.77.1.2"])
        for k in ("srv", "srv2"):
            r[k].run(["ip", "route", "add", "10.77.1.0/24", "via", "10.77.2.1"])
            r[k].run(["sysctl", "-q", "-w", "net.ipv4.icmp_echo_ignore_broadcasts=0"])

        out = HERE / "ping_loss.log"
        tmp = out.with_suffix(".tmp")
        p = r["cli"].start(["ping", "-D", "-O", "-n", "-i", "0.2", "10.77.2.2"], stdout=tmp,
                           stderr=tmp)
        time.sleep(2.0)
        r["srv"].run(["sysctl", "-q", "-w", "net.ipv4.icmp_echo_ignore_all=1"])
        time.sleep(1.2)
        r["srv"].run(["sysctl", "-q", "-w", "net.ipv4.icmp_echo_ignore_all=0"])
        time.sleep(2.0)
        p.stop(sig=2)  # SIGINT: ping prints its statistics
        tmp.rename(out)

        res = r["gw"].run(["ping", "-D", "-O", "-n", "-b", "-i", "0.2", "-c", "4", "10.77.2.255"],
                          check=False, timeout=15)
        (HERE / "ping_dup.log").write_text(res.stdout + res.stderr)
        res = r["cli"].run(["ping", "-D", "-O", "-n", "-i", "0.2", "-c", "3", "-t", "1",
                            "10.77.2.2"], check=False, timeout=15)
        (HERE / "ping_ttl_exceeded.log").write_text(res.stdout + res.stderr)
        for name in ("ping_loss.log", "ping_dup.log", "ping_ttl_exceeded.log"):
            print(f"== {name}\n{(HERE / name).read_text()}")
        return 0
    finally:
        for n in reversed(made):
            host.run(["ip", "netns", "del", n], check=False)


if __name__ == "__main__":
    sys.exit(main())
