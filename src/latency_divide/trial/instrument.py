"""Which instrument measured a trial: the delay line's design and settings, and the traffic
tool's batching, as the trial's own logs recorded them (meta.json ``instrument``).

A published trial is judged by the instrument that measured it, never by today's: its
"beyond the host" verdict and its admission cost come from the cost model of its
*generation* (ops.admission.COSTS), read from what the trial recorded.

Generations:

- ``v1``: delay line 0.1 (two threads per direction, a wake-up and a hand-over per frame) and
  tquic-perf with one ``send_to``/``recv_from`` per packet. Every trial published before
  2026-11-27 (they have no ``instrument`` record: :func:`generation_of` says ``v1``).
- ``v2``: delay line 0.2 (one thread, batched receive, release windows; or netem, which has no
  user-space delay line) and tquic-perf with UDP GSO / ``sendmmsg`` and ``recvmmsg`` (issue 40).
  mvfst's tperf is not ours and is the same in both; its trials are ``v2`` when the delay line
  is.
- ``v3``: ``v2`` with threaded NAPI (and GRO) on the two veths the delay line sends into (the
  gateway's ``ld-gc``, the client's ``ld-c0``): the receiving namespace's stack runs in a
  kernel thread instead of inside the delay line's ``sendmmsg``. The local testbed uses it for
  links that carry more than ``RX_NAPI_FROM_MBIT``, for the variants it was checked on
  (testbed.rxnapi.rx_napi_for); everything else stays ``v2`` (docs/emulation.md, "Instrument v3:
  the fast links").
"""

from __future__ import annotations

import json
import re
from typing import Any

from latency_divide.testbed.rxnapi import (  # noqa: F401 (the policy, named here too)
    RX_NAPI_CHOICES,
    RX_NAPI_FROM_MBIT,
    rx_napi_for,
    v3_measures,
)

#: The generation of trials that recorded no instrument (measured before 2026-11-27).
LEGACY = "v1"
#: The generation of new trials on links up to RX_NAPI_FROM_MBIT (and with netem).
CURRENT = "v2"
#: The generation of new trials on faster links through the delay line (rx_napi_for).
FAST = "v3"
GENERATIONS = (LEGACY, CURRENT, FAST)

def planned_generation(carried_mbit: float, mechanism: str = "delayline",
                       cc: str | None = None, delta: float | None = None) -> str:
    """The generation a new trial carrying up to ``carried_mbit`` is measured with (what the
    admission prices it by)."""
    threaded = rx_napi_for(mechanism, carried_mbit, "auto", cc, delta) == "threaded"
    return FAST if threaded else CURRENT

_READY = re.compile(r"^delayline ready (.*)$", re.M)
_USAGE = re.compile(r"^delayline usage (.*)$", re.M)
_STATS = re.compile(r"^delayline stats a->b frames=(\d+) .*? b->a frames=(\d+) ", re.M)


def _fields(line: str) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in line.split() if "=" in kv)


def _num(v: str | None) -> float | int | None:
    if v is None or v == "na":
        return None
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return None


def delayline_facts(log_text: str) -> dict[str, Any] | None:
    """The delay line's design, settings and wake-ups from its log (ready, stats and usage
    lines), or None without a ready line (netem, or no log). A delay line that does not name
    its engine is 0.1's two-thread design. On a link it polices, ``police``: per direction
    (``ab`` gateway to client, the downlink; ``ba`` the uplink) the frames its policer dropped
    and their bytes (None for a direction it does not police)."""
    ready = _READY.findall(log_text)
    if not ready:
        return None
    r = _fields(ready[-1])
    usage = _USAGE.findall(log_text)
    u = _fields(usage[-1]) if usage else {}
    facts: dict[str, Any] = {
        "version": u.get("version", "0.1.0"),
        "engine": r.get("engine", "threads"),
        "window_us": _num(r.get("window_us")),
        "early_us": _num(r.get("early_us")),
        "frames_per_wake": _num(r.get("frames_per_wake")),
        "window_mean_us": _num(u.get("window_mean_us")),
        "spin_us": _num(r.get("spin_us")),
        "rt_priority": _num(r.get("rt_priority")),
        "rx_timestamps": r.get("rx_timestamps"),
    }
    if "police_ab_drops" in u:  # a policed link (docs/policing.md): the policer's drops
        facts["police"] = {d: {"drops": _num(u.get(f"police_{d}_drops")),
                               "drop_bytes": _num(u.get(f"police_{d}_drop_bytes"))}
                           for d in ("ab", "ba")}
    stats = _STATS.findall(log_text)
    if stats and u:
        frames = sum(int(x) for x in stats[-1])
        wakeups = _num(u.get("wakeups"))
        cpu = _num(u.get("cpu_s"))
        facts["frames"] = frames
        facts["wakeups"] = wakeups
        facts["wakeups_per_frame"] = (round(wakeups / frames, 4)
                                      if isinstance(wakeups, int) and frames else None)
        facts["cpu_us_per_frame"] = (round(cpu * 1e6 / frames, 2)
                                     if isinstance(cpu, (int, float)) and frames else None)
    return facts


def tool_batching(json_text: str) -> dict[str, Any] | None:
    """The ``batching`` object of tquic-perf's JSON summary (send/receive modes, fallbacks,
    syscall counters; tools/tquic-perf/README.md), or None (tperf, tquic-perf before it
    batched, or no summary)."""
    try:
        doc = json.loads(json_text)
    except (json.JSONDecodeError, TypeError):
        return None
    b = doc.get("batching") if isinstance(doc, dict) else None
    return b if isinstance(b, dict) else None


def instrument(mechanism: str, delayline_log: str, sender_json: str, receiver_json: str,
               tool_name: str, tool_version: str | None, rx_napi: str = "off") -> dict[str, Any]:
    """meta.json ``instrument`` of a trial just measured, from its delay line's log, the tool
    ends' JSON summaries (tquic-perf; "" for tperf) and the receiving veths' NAPI as the
    testbed read it back (``threaded`` or ``off``)."""
    dl = delayline_facts(delayline_log) if mechanism == "delayline" else None
    rec: dict[str, Any] = {
        "delay": {"mechanism": mechanism, **({"delayline": dl} if dl else {}),
                  **({"rx_napi": rx_napi} if dl else {})},
        "tool": {"name": tool_name, "version": tool_version,
                 "sender_batching": tool_batching(sender_json),
                 "receiver_batching": tool_batching(receiver_json)},
    }
    batched_line = mechanism == "netem" or (dl is not None and dl["engine"] == "batched")
    threaded = dl is not None and rx_napi == "threaded"
    rec["generation"] = (FAST if batched_line and threaded
                         else CURRENT if batched_line else LEGACY)
    return rec


def compact(rec: dict[str, Any]) -> dict[str, Any]:
    """What meta.json keeps of an :func:`instrument` record (it must stay in one 4 KiB block):
    the generation, the delay line's version, engine and window, the tool's name and version
    and its ends' effective send/receive modes. The whole record goes to setup.json
    (``instrument_detail``)."""
    dl = rec["delay"].get("delayline")
    out: dict[str, Any] = {"generation": rec["generation"],
                           "delay": {"mechanism": rec["delay"]["mechanism"]}}
    if dl:
        out["delay"]["delayline"] = {k: dl.get(k) for k in (
            "version", "engine", "window_us", "frames_per_wake", "wakeups_per_frame")}
        if "rx_napi" in rec["delay"]:
            out["delay"]["rx_napi"] = rec["delay"]["rx_napi"]
    tool = rec["tool"]

    def modes(b):
        if not isinstance(b, dict):
            return None
        return {d: (b.get(d) or {}).get("mode") for d in ("send", "recv")}

    out["tool"] = {"name": tool["name"], "version": tool["version"],
                   "sender": modes(tool.get("sender_batching")),
                   "receiver": modes(tool.get("receiver_batching"))}
    return out


def generation_of(meta: dict) -> str:
    """The generation of the instrument that measured a trial (meta.json), ``v1`` for trials
    that recorded none; a generation this code does not know is an error (a trial measured by
    a newer latency-divide), never a guess."""
    inst = meta.get("instrument")
    gen = inst.get("generation") if isinstance(inst, dict) else None
    if gen is None:
        return LEGACY
    if gen not in GENERATIONS:
        raise ValueError(f"instrument generation {gen!r} is not one of {', '.join(GENERATIONS)} "
                         "(a trial measured by a newer latency-divide?)")
    return gen
