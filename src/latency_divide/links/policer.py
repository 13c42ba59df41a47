"""Policed links: a token-bucket policer at the household's rate instead of the shaper's queue.

A policer (Flach et al., "An Internet-Wide Analysis of Traffic Policing", SIGCOMM 2016, Table 1)
enforces a rate by dropping what exceeds it, where a shaper queues it: no buffer, so no RTT
inflation, and loss instead. Facebook traced Copa's worst RTX overhead to "network policed
flows" (issue 58). A link is policed under the buffer models ``policed-<N>ms`` (links.buffers
lists them beside the FIFO models, since a policer *replaces* the FIFO): each direction gets a
token bucket that fills at the household's rate of that direction and holds

    burst_bytes = max(floor(N * rate_kbit / 8), MIN_BURST_BYTES)

(N ms at the rate, at least :data:`MIN_BURST_PACKETS` full frames). The name is canonical (no
leading zeros), because the definition records it and its id hashes it.

**The burst.** Flach et al. estimate a policer's burst from server-side traces (their detector
reports "the size of the initial burst seen before the policer took effect",
github.com/USC-NSL/policing-detection) and validated it on lab policers with buckets of 8 kB,
100 kB, 1 MB and 2 MB (its data/validation traces); the distribution of the bursts they
measured in the wild was not in any text we could read (docs/policing.md, "The burst"), so the
default is a documented vendor rule instead: Juniper's guidance for policer burst sizes ("not
lower than 10 times the MTU", and at least 5 ms of traffic at the line rate; Junos, "Determining
Proper Burst Size for Traffic Policers"). ``policed-5ms`` is that rule at the household's rate;
other N make the burst a factor.

**Where it runs** (:data:`IMPLEMENTATIONS`; the testbed chooses, testbed.delay.choose_policer):

- ``kernel``: the kernel's police action (``CONFIG_NET_ACT_POLICE``, in common distributions'
  kernels) on the gateway's egress of that direction, a ``clsact`` egress filter
  (:meth:`Policer.kernel_commands`) in front of the gateway's root FIFO;
- ``delayline``: our delay line's token bucket (tools/delayline ``--police-ab``/
  ``--police-ba``, README "Policing"), for kernels without the police action, like the
  development machines'. It judges each frame at the kernel's receive timestamp, so its
  batching does not change a frame's fate, and it adds no wake-up.

Either way the gateway has no shaper in policed mode: its egress is a root bfifo (the handle the
queue sampler reads) at the veth's speed, holding at most the bucket plus
links.buffers.MIN_QUEUE_PACKETS frames (links.buffers.buffer), so a burst the
policer admits is never dropped there; the policer is the link's only rate limit, as on a
policed access line whose physical rate is above the policed one, and the gateway's FIFO
backlog (sampled as in every trial) shows that nothing queues.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from latency_divide.errors import ConfigError
from latency_divide.vocab import DIRECTIONS

#: The policer's floor: a bucket holds at least this many full Ethernet frames (Juniper: "not
#: lower than 10 times the MTU").
MIN_BURST_PACKETS = 10
FRAME_BYTES = 1514  # a full Ethernet frame (links.plan.MTU_BYTES)
MIN_BURST_BYTES = MIN_BURST_PACKETS * FRAME_BYTES

#: The burst's range, ms at the policed rate, and the models' name form.
BURST_MIN_MS, BURST_MAX_MS = 1, 5000
FORM = f"policed-<N>ms with N in {BURST_MIN_MS}..{BURST_MAX_MS} (the burst, ms at the rate)"
_NAME = re.compile(r"policed-([1-9][0-9]*)ms")

#: Where a policer runs: the kernel's police action on the gateway, or our delay line.
IMPLEMENTATIONS = ("kernel", "delayline")

#: The kernel police filter's priority on the gateway's egress (one filter per device).
FILTER_PRIO = "1"

#: bytes = ms * kbit/s / 8; the epsilon keeps an exact whole number from truncating one byte.
_EPS = 1e-9


def burst_ms(name) -> int | None:
    """N of a policed model's name ``policed-<N>ms`` (N in 1..5000, no leading zeros), else
    None."""
    m = _NAME.fullmatch(name) if isinstance(name, str) else None
    if m is None or not BURST_MIN_MS <= int(m.group(1)) <= BURST_MAX_MS:
        return None
    return int(m.group(1))


def burst_bytes(ms: float, rate_kbit: int) -> tuple[int, bool]:
    """(the bucket in bytes, raised to the floor?): ``ms`` of ``rate_kbit``, at least
    :data:`MIN_BURST_BYTES`."""
    b = math.floor(ms * rate_kbit / 8 + _EPS)
    return (MIN_BURST_BYTES, True) if b < MIN_BURST_BYTES else (b, False)


def check_implementation(impl) -> str:
    if impl not in IMPLEMENTATIONS:
        raise ConfigError(f"policer implementation {impl!r}: allowed {', '.join(IMPLEMENTATIONS)}")
    return impl


@dataclass(frozen=True)
class Policer:
    """One direction's policer: a token bucket at the direction's rate."""

    direction: str
    rate_kbit: int  # the household's rate of the direction (SI kbit/s, as htb's)
    burst_ms: int  # the model's N
    burst_bytes: int  # the bucket
    floored: bool  # raised to MIN_BURST_BYTES
    implementation: str  # kernel | delayline

    def __post_init__(self):
        if self.direction not in DIRECTIONS:
            raise ConfigError(f"policer direction {self.direction!r} must be one of "
                              f"{', '.join(DIRECTIONS)}")
        if (isinstance(self.rate_kbit, bool) or not isinstance(self.rate_kbit, int)
                or self.rate_kbit <= 0):
            raise ConfigError(f"{self.direction} policer rate {self.rate_kbit!r} kbit/s must be "
                              "an integer > 0")
        if (isinstance(self.burst_ms, bool) or not isinstance(self.burst_ms, int)
                or not BURST_MIN_MS <= self.burst_ms <= BURST_MAX_MS):
            raise ConfigError(f"{self.direction} policer burst {self.burst_ms!r} ms: allowed "
                              f"{BURST_MIN_MS} to {BURST_MAX_MS} ms")
        if (isinstance(self.burst_bytes, bool) or not isinstance(self.burst_bytes, int)
                or self.burst_bytes < MIN_BURST_BYTES):
            raise ConfigError(f"{self.direction} policer burst {self.burst_bytes!r} bytes: at "
                              f"least {MIN_BURST_BYTES} ({MIN_BURST_PACKETS} full frames)")
        check_implementation(self.implementation)

    @property
    def rate_bps(self) -> int:
        return self.rate_kbit * 1000

    def delayline_arg(self) -> str:
        """The delay line's ``--police-ab``/``--police-ba`` value: ``RATE_BPS:BURST_BYTES``."""
        return f"{self.rate_bps}:{self.burst_bytes}"

    def kernel_commands(self, dev: str) -> list[list[str]]:
        """The kernel's police action on ``dev``'s egress: a clsact qdisc and a u32 filter that
        matches every packet (matchall is not in every kernel; u32 is) and drops what finds the
        bucket empty. Its rate is SI kbit/s and its burst bytes, as tc reads them."""
        return [
            ["tc", "qdisc", "add", "dev", dev, "clsact"],
            ["tc", "filter", "add", "dev", dev, "egress", "protocol", "all", "prio", FILTER_PRIO,
             "u32", "match", "u32", "0", "0",
             "action", "police", "rate", f"{self.rate_kbit}kbit", "burst", f"{self.burst_bytes}b",
             "drop"],
        ]

    def to_dict(self) -> dict:
        return {"rate_kbit": self.rate_kbit, "burst_ms": self.burst_ms,
                "burst_bytes": self.burst_bytes, "floored": self.floored,
                "implementation": self.implementation}


def policer(model_name: str, direction: str, rate_kbit: int, implementation: str) -> Policer:
    """The policer of one direction under a policed model."""
    ms = burst_ms(model_name)
    if ms is None:
        raise ConfigError(f"buffer model {model_name!r} is not a policed one; allowed: {FORM}")
    b, floored = burst_bytes(ms, rate_kbit)
    return Policer(direction, rate_kbit, ms, b, floored, implementation)
