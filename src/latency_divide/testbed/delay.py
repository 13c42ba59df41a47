"""The link's propagation delay: netem where the kernel has it, else our delay line.

One probe and one choice for both testbeds: :func:`probe_netem` asks a kernel through any
runner (a throwaway namespace here, the delay node over SSH) whether it has netem, and
:func:`choose_mechanism` turns the configured ``delay`` (auto, netem, delayline) into the
mechanism a trial uses, or an error naming where netem is missing. The same for a policed
link's policer (links.policer): :func:`probe_police` asks whether the kernel has the police
action, :func:`choose_policer` picks the kernel's or our delay line's.
"""

from __future__ import annotations

from typing import Callable

from latency_divide import PREFIX
from latency_divide.errors import EnvironmentError_
from latency_divide.testbed.runners import Runner
from latency_divide.vocab import DELAY_CHOICES

#: The veth pair of the probe (our prefix: never someone else's interface).
PROBE_IFS = (f"{PREFIX}np0", f"{PREFIX}np1")


def probe_netem(r: Runner) -> bool:
    """Add a netem qdisc to a throwaway veth pair of ours through ``r``, then remove it.
    Without veth support, the kernel's module list answers."""
    a, b = PROBE_IFS
    r.run(["ip", "link", "del", a], check=False)
    res = r.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b], check=False)
    if res.returncode != 0:
        return r.run(["modinfo", "sch_netem"], check=False).returncode == 0
    try:
        return r.run(["tc", "qdisc", "add", "dev", a, "root", "netem", "delay", "1ms"],
                     check=False).returncode == 0
    finally:
        r.run(["ip", "link", "del", a], check=False)


def probe_police(r: Runner) -> bool:
    """Add a clsact qdisc and a police filter to a throwaway veth pair of ours through ``r``,
    then remove it (``CONFIG_NET_ACT_POLICE``: a kernel without it refuses the filter). Without
    veth support, the kernel's module list answers."""
    a, b = PROBE_IFS
    r.run(["ip", "link", "del", a], check=False)
    res = r.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b], check=False)
    if res.returncode != 0:
        return r.run(["modinfo", "act_police"], check=False).returncode == 0
    try:
        return (r.run(["tc", "qdisc", "add", "dev", a, "clsact"], check=False).returncode == 0
                and r.run(["tc", "filter", "add", "dev", a, "egress", "protocol", "all", "prio",
                           "1", "u32", "match", "u32", "0", "0", "action", "police", "rate",
                           "1000kbit", "burst", "15140b", "drop"], check=False).returncode == 0)
    finally:
        r.run(["ip", "link", "del", a], check=False)


def choose_policer(has_police: Callable[[], bool], mechanism: str,
                   where: str = "this kernel") -> str:
    """Where a policed link's policers run: the kernel's police action where ``has_police()``,
    else our delay line's (``--police-ab``/``--police-ba``) where it carries the delay; a
    kernel with neither is an error naming ``where`` and what to do."""
    if has_police():
        return "kernel"
    if mechanism == "delayline":
        return "delayline"
    raise EnvironmentError_(
        f"a policed buffer model needs the kernel's police action (CONFIG_NET_ACT_POLICE) or "
        f"our delay line, and {where} has no police action while the delay is {mechanism!r}: "
        "use testbed.delay: delayline (its policer then polices)")


def choose_mechanism(choice: str, has_netem: Callable[[], bool], where: str = "this kernel"
                     ) -> str:
    """``auto`` -> netem when ``has_netem()``, else the userspace delay line; ``netem`` where
    there is none is an error naming ``where``."""
    if choice not in DELAY_CHOICES:
        raise ValueError(f"delay mechanism {choice!r}: use {', '.join(DELAY_CHOICES)}")
    if choice == "auto":
        return "netem" if has_netem() else "delayline"
    if choice == "netem" and not has_netem():
        raise EnvironmentError_(
            f"testbed.delay is 'netem' but {where} has no netem qdisc (sch_netem); use "
            "delay: auto or delay: delayline (our userspace delay line)")
    return choice
