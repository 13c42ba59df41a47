"""A shell script that applies a link plan by hand (links.plan.LinkPlan.render_shell).

For a four-node testbed like the paper's: the gateway part shapes (or, on a policed link,
polices) each direction on its egress, the delay part runs netem or our delay line.
Interfaces are found with ``ip route get <peer>`` unless given as environment variables
(GW_TO_SERVER, GW_TO_CLIENT, DELAY_TO_GW, DELAY_TO_CLIENT).
"""

from __future__ import annotations

import shlex

from latency_divide.links import buffers

_PLACEHOLDER = "{dev}"


def fmt_ms(ms: float) -> str:
    """Milliseconds for tc/delayline: up to 6 decimals (1 ns; RTTs have half microseconds,
    so rtt/2 needs 4), no trailing zeros. Both tc (iproute2 >= 5.x) and delayline read
    fractional milliseconds to the nanosecond."""
    text = f"{ms:.6f}".rstrip("0").rstrip(".")
    return text or "0"


def render_shell(plan) -> str:
    """The script's text for a links.plan.LinkPlan (``sh``; ``set -eu``; one part per
    node)."""
    q = shlex.quote
    up, down, d = plan.uplink, plan.downlink, plan.delay
    lines = [
        "#!/bin/sh",
        f"# Link plan for household {plan.household_id} (latency-divide)",
        f"# rtt {plan.rtt_ms:g} ms, qfactor {plan.qfactor:g}"
        + (f", buffer model {plan.buffer_model}"
           if plan.buffer_model != buffers.DEFAULT_MODEL else "")
        + (" (qfactor not used)" if buffers.fixed_ms(plan.buffer_model)
           or plan.uplink.policer else ""),
        "# Topology: server (10.10.1.1) --- gateway --- delay --- client (10.10.2.2)",
        "# Run the part for each node on that node, as root.",
        "set -eu",
        'SERVER="${SERVER:-10.10.1.1}"',
        'CLIENT="${CLIENT:-10.10.2.2}"',
        "",
        'ifto() { ip route get "$1" | sed -n \'s/.* dev \\([^ ]*\\).*/\\1/p\' | head -n 1; }',
        "",
        'if [ "${1:-}" = gateway ]; then',
    ]
    for s, var, peer in ((up, "GW_TO_SERVER", "$SERVER"), (down, "GW_TO_CLIENT", "$CLIENT")):
        p = s.policer
        if p is not None:
            floor = ", raised to the floor" if p.floored else ""
            queue = (f"policed ({p.implementation}): a token bucket of {p.burst_bytes} bytes"
                     f" ({p.burst_ms} ms at the rate{floor}) drops what exceeds the rate; no"
                     f" shaper, a FIFO of {s.queue_bytes} bytes at line speed")
        elif s.buffer is None or s.buffer.queue_ms is None:
            queue = (f"queue q = {plan.qfactor:g} * {plan.rtt_ms:g} ms * {s.rate_kbit} kbit/s"
                     f" / 1000 = {s.queue_kbit:.4f} kbit = {s.queue_bytes} bytes")
        else:
            floor = " (raised to the floor)" if s.buffer.floored else ""
            queue = (f"queue {s.buffer.queue_ms:g} ms * {s.rate_kbit} kbit/s / 8 ="
                     f" {s.queue_bytes} bytes{floor}")
        lines += [
            f"  # {s.direction}: {s.rate_kbit} kbit/s; {queue}",
            *([f"  # buffer model {s.buffer.model}: {s.buffer.source}"]
              if s.buffer and p is None else []),
            *([f"  # (limit in bytes: tc would read 'kbit' sizes as 128 bytes); r2q {s.r2q}"
               " keeps htb's quantum in [1514, 200000] bytes"] if p is None else []),
            f'  {var}="${{{var}:-$(ifto "{peer}")}}"',
            f'  tc qdisc del dev "${var}" root 2>/dev/null || true',
            *([f'  tc qdisc del dev "${var}" clsact 2>/dev/null || true']
              if p is not None and p.implementation == "kernel" else []),
        ]
        for argv in s.commands(_PLACEHOLDER):
            lines.append("  " + " ".join(f'"${var}"' if a == _PLACEHOLDER else q(a) for a in argv))
    lines += ['elif [ "${1:-}" = delay ]; then',
              f"  # propagation delay: rtt / 2 = {plan.rtt_ms:g} / 2 = {fmt_ms(d.one_way_ms)} ms each way"]
    lines += [
        '  DELAY_TO_GW="${DELAY_TO_GW:-$(ifto "$SERVER")}"',
        '  DELAY_TO_CLIENT="${DELAY_TO_CLIENT:-$(ifto "$CLIENT")}"',
    ]
    if d.mechanism == "netem":
        for var in ("DELAY_TO_GW", "DELAY_TO_CLIENT"):
            lines.append(f'  tc qdisc del dev "${var}" root 2>/dev/null || true')
            for argv in d.commands(_PLACEHOLDER):
                lines.append("  " + " ".join(f'"${var}"' if a == _PLACEHOLDER else q(a) for a in argv))
    else:
        lines.append("  # userspace delay line; needs checksum offloads off on both interfaces")
        lines.append('  for i in "$DELAY_TO_GW" "$DELAY_TO_CLIENT"; do'
                     ' ethtool -K "$i" tx off rx off tso off gso off gro off; done')
        argv = d.delayline_argv("ldA", "ldB")
        words = [q(a) for a in argv]
        words[argv.index("ldA")] = '"$DELAY_TO_GW"'
        words[argv.index("ldB")] = '"$DELAY_TO_CLIENT"'
        words[0] = '"${DELAYLINE:-delayline}"'
        lines.append("  exec " + " ".join(words))
    lines += [
        "else",
        '  echo "usage: $0 gateway|delay" >&2',
        "  exit 2",
        "fi",
        "",
    ]
    return "\n".join(lines)


