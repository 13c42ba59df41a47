"""Link plans: the paper's link configuration for one household, as data.

A plan holds the derived numbers and builds the commands (argv lists); it never runs them.
Formulas (EXPERIMENT.md, rate in kbit/s, rtt in ms, q in kbit):

- gateway, per direction, on that direction's egress interface:
  htb root + one class at ``rate_kbit`` + a bfifo of ``q = qfactor * rtt_ms * rate_kbit / 1000``
  kilobits, i.e. ``q * 125`` bytes = qfactor x bandwidth-delay product.
- delay node: ``rtt_ms / 2`` each way (netem, or our userspace ``delayline``).

The FIFO's size comes from a buffer model (links.buffers): ``qfactor``, the formula above and
the default, a measured one (``mba-2014``: the panel's loaded minus idle RTT of the
household's technology and direction, at the household's rate), or a fixed delay
(``queue-<N>ms``: N ms at the household's rate, whatever its RTT, qfactor and technology).
A plan under the default model is exactly what it always was (its ``to_dict`` has no model
keys); one under another model records ``buffer_model`` and, per direction, ``buffer`` (its
delay and source).

Two facts about ``tc`` (iproute2 6.1, checked on kernel 6.18 by building the qdiscs in a
namespace and reading back ``tc -j qdisc show``; tests/test_linkplan.py repeats the check):

1. **bfifo sizes in "kbit" are binary.** tc's size parser reads ``kbit`` as 1024 bits =
   128 bytes (rates, in contrast, are SI: ``rate 1150kbit`` is 1 150 000 bit/s).
   ``limit 154.6106kbit`` becomes 19790 bytes, not the 19326 bytes the formula means
   (the paper's scripts therefore had queues 2.4 % larger than q*125). We give the limit in
   bytes (``limit 19326b``), computed as floor(q * 125), so the queue is exactly what the
   formula says up to the truncation to whole bytes.
2. **htb quantum warnings.** Each htb class gets ``quantum = rate_bytes_per_s / r2q``; the
   kernel warns "quantum ... is big" above 200000 bytes and "is small" below 1000 bytes and
   clamps it. With the default r2q = 10 that happens above 16000 kbit/s and below 80 kbit/s
   (the data set has rates from 72 kbit/s to 354 Mbit/s). We pick r2q per rate so that the
   quantum lands in [MTU (1514 B), 200000 B]: r2q = 10 if that already holds, else
   ceil(rate_bytes / 200000) for fast links, else floor(rate_bytes / 1514) (at least 1) for
   slow ones; below 1514 B/s (about 12 kbit/s) even r2q = 1 is too small, so the class gets an
   explicit ``quantum 1514``. With one class per qdisc the quantum does not change the rate
   (it only splits bandwidth between sibling classes); the choice just keeps tc silent.

``commands()`` use ``tc qdisc replace`` on the root, which works over any default root
qdisc of a fresh interface. The kernel cannot *change* an existing htb root in place, so to
re-apply a plan on the same interface run ``reset_commands(dev)`` first (errors ignored).
"""

from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from latency_divide import limits
from latency_divide.errors import ConfigError
from latency_divide.links import buffers
from latency_divide.vocab import DELAY_MECHANISMS, DIRECTIONS

if TYPE_CHECKING:  # pragma: no cover
    from latency_divide.data.households import Household


#: htb class and bfifo handles (the queue monitor finds the bottleneck FIFO by them).
HTB_CLASS = "1:3"


BFIFO_HANDLE = "10:"


#: Bytes per kilobit as the formula means it (SI): 1000 bits / 8.
BYTES_PER_KBIT = 125


MTU_BYTES = 1514  # Ethernet frame incl. header, what htb dequeues per packet


HTB_QUANTUM_MAX = 200_000  # the kernel warns and clamps above this


HTB_QUANTUM_MIN = 1000  # ... and below this


HTB_DEFAULT_R2Q = 10


_PLACEHOLDER = "{dev}"


_IFNAME_BAD = re.compile(r"[/:\s\x00-\x1f\x7f]")


def check_ifname(dev: str) -> str:
    """Linux interface-name rules: 1-15 bytes, no '/', ':', whitespace or control characters,
    and not "." or ".." (the kernel's dev_valid_name)."""
    if not isinstance(dev, str) or not 1 <= len(dev.encode()) <= 15 or _IFNAME_BAD.search(dev) or dev in (".", ".."):
        raise ConfigError(
            f"interface name {dev!r} is invalid: 1 to 15 bytes without '/', ':', whitespace"
            " or control characters"
        )
    return dev


def _dev(dev: str) -> str:
    # The "{dev}" placeholder is allowed so plans can be rendered as templates.
    return dev if dev == _PLACEHOLDER else check_ifname(dev)


def _fmt_ms(ms: float) -> str:
    """Milliseconds for tc/delayline: up to 6 decimals (1 ns; RTTs have half microseconds,
    so rtt/2 needs 4), no trailing zeros. Both tc (iproute2 >= 5.x) and delayline read
    fractional milliseconds to the nanosecond."""
    text = f"{ms:.6f}".rstrip("0").rstrip(".")
    return text or "0"


def htb_r2q(rate_kbit: int) -> tuple[int, int | None]:
    """(r2q for the root qdisc, explicit class quantum or None); see the module docstring."""
    rate_bytes = rate_kbit * BYTES_PER_KBIT
    if MTU_BYTES <= rate_bytes / HTB_DEFAULT_R2Q <= HTB_QUANTUM_MAX:
        return HTB_DEFAULT_R2Q, None
    if rate_bytes / HTB_DEFAULT_R2Q > HTB_QUANTUM_MAX:
        return math.ceil(rate_bytes / HTB_QUANTUM_MAX), None
    r2q = max(1, rate_bytes // MTU_BYTES)
    return r2q, (MTU_BYTES if rate_bytes < MTU_BYTES else None)


@dataclass(frozen=True)
class ShaperPlan:
    """The gateway's shaping of one direction, on that direction's egress interface."""

    direction: str  # "uplink" (egress toward server) | "downlink" (egress toward client)
    rate_kbit: int
    queue_kbit: float  # q = qfactor * rtt_ms * rate_kbit / 1000 (or the buffer model's)
    queue_bytes: int  # floor(q * 125)
    #: the buffer model's FIFO (links.buffers), None under the default qfactor x BDP
    buffer: buffers.Buffer | None = None

    def __post_init__(self):
        if self.direction not in DIRECTIONS:
            raise ConfigError(f"direction {self.direction!r} must be one of {', '.join(DIRECTIONS)}")
        if isinstance(self.rate_kbit, bool) or not isinstance(self.rate_kbit, int) or self.rate_kbit <= 0:
            raise ConfigError(f"{self.direction} rate {self.rate_kbit!r} kbit/s must be an integer > 0")
        if not self.queue_kbit > 0 or self.queue_bytes < 1:
            raise ConfigError(
                f"{self.direction} queue {self.queue_kbit!r} kbit ({self.queue_bytes} bytes) must be > 0"
            )

    @property
    def r2q(self) -> int:
        return htb_r2q(self.rate_kbit)[0]

    @property
    def class_quantum_bytes(self) -> int | None:
        return htb_r2q(self.rate_kbit)[1]

    def commands(self, dev: str) -> list[list[str]]:
        dev = _dev(dev)
        klass = ["tc", "class", "add", "dev", dev, "parent", "1:", "classid", HTB_CLASS, "htb",
                 "rate", f"{self.rate_kbit}kbit"]
        if self.class_quantum_bytes is not None:
            klass += ["quantum", str(self.class_quantum_bytes)]
        return [
            ["tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "3",
             "r2q", str(self.r2q)],
            klass,
            ["tc", "qdisc", "add", "dev", dev, "parent", HTB_CLASS, "handle", BFIFO_HANDLE, "bfifo",
             "limit", f"{self.queue_bytes}b"],
        ]

    def reset_commands(self, dev: str) -> list[list[str]]:
        """Remove the root qdisc (before re-applying a plan; fails harmlessly if none)."""
        return [["tc", "qdisc", "del", "dev", _dev(dev), "root"]]


@dataclass(frozen=True)
class DelayPlan:
    one_way_ms: float  # rtt_ms / 2
    mechanism: str  # "netem" | "delayline"
    limit_packets: int = 50000

    def __post_init__(self):
        if self.mechanism not in DELAY_MECHANISMS:
            raise ConfigError(
                f"delay mechanism {self.mechanism!r} must be one of {', '.join(DELAY_MECHANISMS)}"
            )
        if not self.one_way_ms > 0 or not math.isfinite(self.one_way_ms):
            raise ConfigError(f"one-way delay {self.one_way_ms!r} ms must be > 0")
        if isinstance(self.limit_packets, bool) or not isinstance(self.limit_packets, int) or self.limit_packets < 1:
            raise ConfigError(f"delay limit {self.limit_packets!r} packets must be an integer >= 1")

    def commands(self, dev: str) -> list[list[str]]:
        """netem: the tc command for that interface; delayline: [] (it is a process)."""
        dev = _dev(dev)
        if self.mechanism != "netem":
            return []
        return [["tc", "qdisc", "replace", "dev", dev, "root", "netem",
                 "delay", f"{_fmt_ms(self.one_way_ms)}ms", "limit", str(self.limit_packets)]]

    def delayline_argv(self, dev_a: str, dev_b: str, binary: str = "delayline") -> list[str]:
        return [binary, "--iface-a", _dev(dev_a), "--iface-b", _dev(dev_b),
                "--delay-ms", _fmt_ms(self.one_way_ms), "--limit", str(self.limit_packets)]


@dataclass(frozen=True)
class LinkPlan:
    household_id: int
    qfactor: float
    rtt_ms: float
    uplink: ShaperPlan
    downlink: ShaperPlan
    delay: DelayPlan
    buffer_model: str = buffers.DEFAULT_MODEL

    def shaper(self, direction: str) -> ShaperPlan:
        if direction == "uplink":
            return self.uplink
        if direction == "downlink":
            return self.downlink
        raise ConfigError(f"direction {direction!r} must be one of {', '.join(DIRECTIONS)}")

    def to_dict(self) -> dict:
        def shaper(s: ShaperPlan) -> dict:
            b = s.buffer
            return {
                "direction": s.direction,
                "rate_kbit": s.rate_kbit,
                "queue_kbit": s.queue_kbit,
                "queue_bytes": s.queue_bytes,
                **({"buffer": {"model": b.model, "queue_ms": b.queue_ms, "source": b.source,
                               "floored": b.floored}} if b is not None else {}),
                "r2q": s.r2q,
                "class_quantum_bytes": s.class_quantum_bytes,
                "commands": s.commands(_PLACEHOLDER),
            }

        # the default model adds no key: plans (and meta.json) stay as they were
        model = ({"buffer_model": self.buffer_model}
                 if self.buffer_model != buffers.DEFAULT_MODEL else {})
        return {
            "household_id": self.household_id,
            "qfactor": self.qfactor,
            **model,
            "rtt_ms": self.rtt_ms,
            "uplink": shaper(self.uplink),
            "downlink": shaper(self.downlink),
            "delay": {
                "one_way_ms": self.delay.one_way_ms,
                "mechanism": self.delay.mechanism,
                "limit_packets": self.delay.limit_packets,
                "commands": self.delay.commands(_PLACEHOLDER),
                "delayline_argv": self.delay.delayline_argv("{dev_a}", "{dev_b}")
                if self.delay.mechanism == "delayline" else None,
            },
        }

    def render_shell(self) -> str:
        """A script to apply the plan by hand on a four-node testbed like the paper's.

        Interfaces are found with ``ip route get <peer>`` unless given as environment
        variables (GW_TO_SERVER, GW_TO_CLIENT, DELAY_TO_GW, DELAY_TO_CLIENT).
        """
        q = shlex.quote
        up, down, d = self.uplink, self.downlink, self.delay
        lines = [
            "#!/bin/sh",
            f"# Link plan for household {self.household_id} (latency-divide)",
            f"# rtt {self.rtt_ms:g} ms, qfactor {self.qfactor:g}"
            + (f", buffer model {self.buffer_model}"
               if self.buffer_model != buffers.DEFAULT_MODEL else "")
            + (" (qfactor not used)" if buffers.fixed_ms(self.buffer_model) else ""),
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
            if s.buffer is None or s.buffer.queue_ms is None:
                queue = (f"queue q = {self.qfactor:g} * {self.rtt_ms:g} ms * {s.rate_kbit} kbit/s"
                         f" / 1000 = {s.queue_kbit:.4f} kbit = {s.queue_bytes} bytes")
            else:
                floor = " (raised to the floor)" if s.buffer.floored else ""
                queue = (f"queue {s.buffer.queue_ms:g} ms * {s.rate_kbit} kbit/s / 8 ="
                         f" {s.queue_bytes} bytes{floor}")
            lines += [
                f"  # {s.direction}: {s.rate_kbit} kbit/s; {queue}",
                *([f"  # buffer model {s.buffer.model}: {s.buffer.source}"] if s.buffer else []),
                f"  # (limit in bytes: tc would read 'kbit' sizes as 128 bytes); r2q {s.r2q}"
                " keeps htb's quantum in [1514, 200000] bytes",
                f'  {var}="${{{var}:-$(ifto "{peer}")}}"',
                f'  tc qdisc del dev "${var}" root 2>/dev/null || true',
            ]
            for argv in s.commands(_PLACEHOLDER):
                lines.append("  " + " ".join(f'"${var}"' if a == _PLACEHOLDER else q(a) for a in argv))
        lines += ['elif [ "${1:-}" = delay ]; then',
                  f"  # propagation delay: rtt / 2 = {self.rtt_ms:g} / 2 = {_fmt_ms(d.one_way_ms)} ms each way"]
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


def make_linkplan(household: "Household", qfactor: float = 2.0, mechanism: str = "netem",
                  buffer_model: str = buffers.DEFAULT_MODEL) -> LinkPlan:
    """The paper's link configuration for a household (its FIFOs from ``buffer_model``)."""
    return link_plan(household.upload_kbps, household.download_kbps, household.rtt_ms, qfactor,
                     mechanism, household_id=household.unit_id, buffer_model=buffer_model,
                     technology=household.technology)


def link_plan(upload_kbit: int, download_kbit: int, rtt_ms: float, qfactor: float = 2.0,
              mechanism: str = "netem", household_id: int = 0,
              buffer_model: str = buffers.DEFAULT_MODEL,
              technology: str | None = None) -> LinkPlan:
    """The paper's link configuration for any rates and RTT (``household_id`` 0 for a link
    that is not a household's, e.g. in benchmarks). A measured ``buffer_model`` needs the
    data set's ``technology``; ConfigError names an unknown model or technology."""
    limits.check("qfactor", qfactor)
    buffers.check_model(buffer_model)
    rtt_ms = float(rtt_ms)
    if not rtt_ms > 0 or not math.isfinite(rtt_ms):
        raise ConfigError(f"household {household_id}: RTT {rtt_ms!r} ms must be > 0")

    def shaper(direction: str, rate_kbit: int) -> ShaperPlan:
        if isinstance(rate_kbit, bool) or not isinstance(rate_kbit, int) or rate_kbit <= 0:
            raise ConfigError(
                f"household {household_id}: {direction} rate {rate_kbit!r} kbit/s must be an integer > 0"
            )
        b = buffers.buffer(buffer_model, direction, rate_kbit, rtt_ms, qfactor, technology,
                           household_id)
        return ShaperPlan(direction, rate_kbit, b.queue_kbit, b.queue_bytes,
                          b if buffer_model != buffers.DEFAULT_MODEL else None)

    return LinkPlan(
        household_id=int(household_id),
        qfactor=float(qfactor),
        rtt_ms=rtt_ms,
        uplink=shaper("uplink", upload_kbit),
        downlink=shaper("downlink", download_kbit),
        delay=DelayPlan(one_way_ms=rtt_ms / 2, mechanism=mechanism),
        buffer_model=buffer_model,
    )


def write_linkplan(record: str | Path, out: str | Path, qfactor: float, mechanism: str,
                   buffer_model: str = buffers.DEFAULT_MODEL) -> LinkPlan:
    """results/links/{id}.json from results/households/{id}.json."""
    from latency_divide.data.households import read_record
    from latency_divide.fsio import write_text_atomic

    plan = make_linkplan(read_record(record), qfactor=qfactor, mechanism=mechanism,
                         buffer_model=buffer_model)
    write_text_atomic(out, json.dumps(plan.to_dict(), indent=2) + "\n")
    return plan
