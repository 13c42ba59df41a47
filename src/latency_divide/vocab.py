"""The experiment's words, defined once (EXPERIMENT.md): node roles, directions, congestion
controls, tools, delay mechanisms and testbed kinds.

Roles (the paper's four nodes): the traffic tool's *server* sends. Downlink: the sender runs
on the server node and the receiver (the tool's client) on the client node; uplink: the
reverse. Namespaces, inventories and meta.json use the short role names.
"""

from __future__ import annotations

#: The four nodes, short names in path order (server, gateway, delay, client).
ROLES = ("srv", "gw", "dly", "cli")
#: Long role name (inventories, messages) -> short name.
ROLE_OF = {"server": "srv", "gateway": "gw", "delay": "dly", "client": "cli"}
#: Short role name -> long name.
ROLE_NAMES = {short: long for long, short in ROLE_OF.items()}

DIRECTIONS = ("uplink", "downlink")
CCS = ("cubic", "copa", "bbr", "bbr3")
TOOLS = ("tquic-perf", "tperf")
#: How the link's delay is made: netem (kernel) or our userspace delay line.
DELAY_MECHANISMS = ("netem", "delayline")
#: ``auto`` picks netem where the kernel has it, else the delay line.
DELAY_CHOICES = ("auto", *DELAY_MECHANISMS)
TESTBED_KINDS = ("local", "ssh")
#: The figures of a run (analysis.figures) and those a population run adds (the percentile
#: view, analysis.population_figures); a config draws those it can (config.drawable_figures).
RUN_FIGURES = ("delay_tput", "self_delay", "timeseries", "divide")
POPULATION_FIGURES = ("percentiles", "percentiles_buckets")


def endpoints(direction: str) -> dict[str, str]:
    """Which role sends and which receives in a direction."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction {direction!r} is not one of {', '.join(DIRECTIONS)}")
    if direction == "downlink":
        return {"sender": "srv", "receiver": "cli"}
    return {"sender": "cli", "receiver": "srv"}
