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

Under a policed model (``policed-<N>ms``, links.policer) each direction's shaper is replaced by
a token-bucket policer at its rate: the gateway's egress gets a root bfifo only (no htb), and
the policer runs either in the kernel (``kernel``: a police action on that egress) or in our
delay line (``delayline``: ``--police-ab``/``--police-ba`` on its argv). The plan records each
direction's ``policer`` (rate, burst, implementation); plans under every other model are
unchanged.

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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from latency_divide import limits
from latency_divide.errors import ConfigError
from latency_divide.links import buffers
from latency_divide.links import policer as policing
from latency_divide.links.shellscript import fmt_ms, render_shell
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


_fmt_ms = fmt_ms  # milliseconds as tc and the delay line read them (links.shellscript)


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
    #: a policed model's policer (links.policer): no htb, a root bfifo of ``queue_bytes``
    policer: policing.Policer | None = None

    def __post_init__(self):
        if self.direction not in DIRECTIONS:
            raise ConfigError(f"direction {self.direction!r} must be one of {', '.join(DIRECTIONS)}")
        if isinstance(self.rate_kbit, bool) or not isinstance(self.rate_kbit, int) or self.rate_kbit <= 0:
            raise ConfigError(f"{self.direction} rate {self.rate_kbit!r} kbit/s must be an integer > 0")
        if not self.queue_kbit > 0 or self.queue_bytes < 1:
            raise ConfigError(
                f"{self.direction} queue {self.queue_kbit!r} kbit ({self.queue_bytes} bytes) must be > 0"
            )
        p = self.policer
        if p is not None and (p.direction, p.rate_kbit) != (self.direction, self.rate_kbit):
            raise ConfigError(f"{self.direction} policer is for {p.direction} at {p.rate_kbit} "
                              f"kbit/s, not {self.rate_kbit}")

    @property
    def r2q(self) -> int:
        return htb_r2q(self.rate_kbit)[0]

    @property
    def class_quantum_bytes(self) -> int | None:
        return htb_r2q(self.rate_kbit)[1]

    def commands(self, dev: str) -> list[list[str]]:
        dev = _dev(dev)
        if self.policer is not None:  # no shaper: a root FIFO, behind the kernel's policer
            fifo = [["tc", "qdisc", "replace", "dev", dev, "root", "handle", BFIFO_HANDLE,
                     "bfifo", "limit", f"{self.queue_bytes}b"]]
            if self.policer.implementation == "kernel":
                return fifo + self.policer.kernel_commands(dev)
            return fifo
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
        """Remove the root qdisc, and a kernel policer's clsact (before re-applying a plan;
        each fails harmlessly if absent)."""
        dev = _dev(dev)
        clsact = ([["tc", "qdisc", "del", "dev", dev, "clsact"]]
                  if self.policer is not None and self.policer.implementation == "kernel" else [])
        return [["tc", "qdisc", "del", "dev", dev, "root"], *clsact]


@dataclass(frozen=True)
class DelayPlan:
    one_way_ms: float  # rtt_ms / 2
    mechanism: str  # "netem" | "delayline"
    limit_packets: int = 50000
    #: the delay line's policers (links.policer.Policer.delayline_arg, ``RATE_BPS:BURST_BYTES``)
    #: a->b (gateway to client: downlink) and b->a (uplink); None: not policed there
    police_ab: str | None = None
    police_ba: str | None = None

    def __post_init__(self):
        if self.mechanism not in DELAY_MECHANISMS:
            raise ConfigError(
                f"delay mechanism {self.mechanism!r} must be one of {', '.join(DELAY_MECHANISMS)}"
            )
        if not self.one_way_ms > 0 or not math.isfinite(self.one_way_ms):
            raise ConfigError(f"one-way delay {self.one_way_ms!r} ms must be > 0")
        if isinstance(self.limit_packets, bool) or not isinstance(self.limit_packets, int) or self.limit_packets < 1:
            raise ConfigError(f"delay limit {self.limit_packets!r} packets must be an integer >= 1")
        if (self.police_ab or self.police_ba) and self.mechanism != "delayline":
            raise ConfigError(f"the delay line's policer needs the delayline delay mechanism, "
                              f"not {self.mechanism!r}")

    def commands(self, dev: str) -> list[list[str]]:
        """netem: the tc command for that interface; delayline: [] (it is a process)."""
        dev = _dev(dev)
        if self.mechanism != "netem":
            return []
        return [["tc", "qdisc", "replace", "dev", dev, "root", "netem",
                 "delay", f"{_fmt_ms(self.one_way_ms)}ms", "limit", str(self.limit_packets)]]

    def delayline_argv(self, dev_a: str, dev_b: str, binary: str = "delayline") -> list[str]:
        police = [*(["--police-ab", self.police_ab] if self.police_ab else []),
                  *(["--police-ba", self.police_ba] if self.police_ba else [])]
        return [binary, "--iface-a", _dev(dev_a), "--iface-b", _dev(dev_b),
                "--delay-ms", _fmt_ms(self.one_way_ms), "--limit", str(self.limit_packets),
                *police]


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
                **({"policer": s.policer.to_dict()} if s.policer is not None else {}),
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
        """A script to apply the plan by hand on a four-node testbed like the paper's
        (links.shellscript)."""
        return render_shell(self)


def make_linkplan(household: "Household", qfactor: float = 2.0, mechanism: str = "netem",
                  buffer_model: str = buffers.DEFAULT_MODEL,
                  policer_impl: str | None = None) -> LinkPlan:
    """The paper's link configuration for a household (its FIFOs from ``buffer_model``)."""
    return link_plan(household.upload_kbps, household.download_kbps, household.rtt_ms, qfactor,
                     mechanism, household_id=household.unit_id, buffer_model=buffer_model,
                     technology=household.technology, policer_impl=policer_impl)


def policer_for(mechanism: str, policer_impl: str | None = None) -> str:
    """Where a policed plan's policers run: ``policer_impl`` as the testbed chose it
    (testbed.delay.choose_policer), else our delay line where it runs anyway and the kernel's
    police action where the delay is netem (what a kernel with netem has). The delay line's
    policer needs the delay line: ConfigError otherwise."""
    impl = policing.check_implementation(
        policer_impl or ("delayline" if mechanism == "delayline" else "kernel"))
    if impl == "delayline" and mechanism != "delayline":
        raise ConfigError(f"the delay line's policer needs the delayline delay mechanism, not "
                          f"{mechanism!r}")
    return impl


def link_plan(upload_kbit: int, download_kbit: int, rtt_ms: float, qfactor: float = 2.0,
              mechanism: str = "netem", household_id: int = 0,
              buffer_model: str = buffers.DEFAULT_MODEL,
              technology: str | None = None, policer_impl: str | None = None) -> LinkPlan:
    """The paper's link configuration for any rates and RTT (``household_id`` 0 for a link
    that is not a household's, e.g. in benchmarks). A measured ``buffer_model`` needs the
    data set's ``technology``; a policed one (``policed-<N>ms``) polices each direction where
    :func:`policer_for` says. ConfigError names an unknown model or technology."""
    limits.check("qfactor", qfactor)
    buffers.check_model(buffer_model)
    rtt_ms = float(rtt_ms)
    if not rtt_ms > 0 or not math.isfinite(rtt_ms):
        raise ConfigError(f"household {household_id}: RTT {rtt_ms!r} ms must be > 0")
    policed = policing.burst_ms(buffer_model) is not None
    impl = policer_for(mechanism, policer_impl) if policed else None

    def shaper(direction: str, rate_kbit: int) -> ShaperPlan:
        if isinstance(rate_kbit, bool) or not isinstance(rate_kbit, int) or rate_kbit <= 0:
            raise ConfigError(
                f"household {household_id}: {direction} rate {rate_kbit!r} kbit/s must be an integer > 0"
            )
        b = buffers.buffer(buffer_model, direction, rate_kbit, rtt_ms, qfactor, technology,
                           household_id)
        p = policing.policer(buffer_model, direction, rate_kbit, impl) if policed else None
        return ShaperPlan(direction, rate_kbit, b.queue_kbit, b.queue_bytes,
                          b if buffer_model != buffers.DEFAULT_MODEL else None, p)

    up, down = shaper("uplink", upload_kbit), shaper("downlink", download_kbit)
    ours = impl == "delayline"  # the delay line's a->b is the downlink, b->a the uplink
    return LinkPlan(
        household_id=int(household_id),
        qfactor=float(qfactor),
        rtt_ms=rtt_ms,
        uplink=up,
        downlink=down,
        delay=DelayPlan(one_way_ms=rtt_ms / 2, mechanism=mechanism,
                        police_ab=down.policer.delayline_arg() if ours else None,
                        police_ba=up.policer.delayline_arg() if ours else None),
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
