"""What the benchmarks that build namespaces and run our delay line share."""

import os
import sys
from pathlib import Path


def delayline_preconditions(bench: str, binary: Path) -> int | None:
    """None when the bench can run (root, the delay line built), else its exit status after
    saying why on stderr."""
    if os.geteuid() != 0:
        print(f"{bench}: needs root (network namespaces)", file=sys.stderr)
        return 2
    if not binary.exists():
        print(f"{bench}: {binary} missing; cargo build --release -p delayline", file=sys.stderr)
        return 2
    return None


#: The line benches' end addresses (each line has its own namespaces, so they may repeat).
ADDR_A, ADDR_B = "10.99.0.1", "10.99.0.2"


def wire_line(ns: dict[str, str], if_a: str, if_da: str, if_db: str, if_b: str,
              created: list[str]) -> None:
    """Namespaces ``ns`` {a, d, b} with veth A<->D (if_a, if_da) and D<->B (if_db, if_b),
    offloads off, A and B addressed in 10.99.0.0/24; each namespace is appended to
    ``created`` as soon as it exists (the caller deletes them)."""
    from latency_divide.testbed.base import OFFLOAD_ARGS
    from latency_divide.testbed.runners import LocalRunner

    host = LocalRunner()
    for name in ns.values():
        host.run(["ip", "netns", "add", name])
        created.append(name)
    host.run(["ip", "link", "add", if_a, "netns", ns["a"], "type", "veth",
              "peer", "name", if_da, "netns", ns["d"]])
    host.run(["ip", "link", "add", if_b, "netns", ns["b"], "type", "veth",
              "peer", "name", if_db, "netns", ns["d"]])
    for role, dev in (("a", if_a), ("d", if_da), ("d", if_db), ("b", if_b)):
        r = LocalRunner(netns=ns[role])
        r.run(["ethtool", "-K", dev, *OFFLOAD_ARGS])
        r.run(["ip", "link", "set", dev, "up"])
    for role in ("a", "b"):
        LocalRunner(netns=ns[role]).run(["ip", "link", "set", "lo", "up"])
    LocalRunner(netns=ns["a"]).run(["ip", "addr", "add", f"{ADDR_A}/24", "dev", if_a])
    LocalRunner(netns=ns["b"]).run(["ip", "addr", "add", f"{ADDR_B}/24", "dev", if_b])
