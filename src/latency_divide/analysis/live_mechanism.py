"""The mechanism behind the live rows (issue 58, item 5; docs/live-mechanism.md): per broadcast
of the ``rate`` ABR, which rungs it chose against the link's rate and whether its down-switches
follow a build-up of the bottleneck queue, so that a percentile row can be traced to the
condition that produced it (the queue a congestion control builds, a policer's drops).

Read from one or more results trees (their ``results/raw``) with the package's readers:
meta.json and the logs through trial.rawio, the sender's and receiver's reports with
parsers.live, the gateway's queue samples with parsers.queue, the policer's counters with
analysis.metrics.policer_columns. One broadcast per (condition, household, direction,
variant): the lowest repetition. Definitions (units in the column names):

- clocks: the bitrate timeline and the pings are in s since the broadcast's start (the
  sender's first write, sender.json ``start_unix``); a queue sample's ``t_s`` is its
  ``t_unix - start_unix``. Only samples with 0 <= t_s <= ``broadcast_s`` count.
- ``queue_ms``: a queue sample's backlog as delay at the link's rate, backlog bytes x 8 /
  ``capacity_kbps`` (ms). ``queue_median_ms``, ``queue_p95_ms``: over the broadcast's samples.
- ``rung_below_kbps``: the highest rung of the ladder below ``capacity_kbps`` (the lowest rung
  when none is). ``share_at_rung_below``, ``share_above``, ``share_below``: the fraction of
  ``broadcast_s`` spent at it, at higher rungs (each at or above the link's rate) and at lower
  ones, from the report's ``time_at_rung_s``; the rung table has every rung's seconds.
- ``bitrate_over_rate``: the report's time-weighted ``bitrate_mean_kbps`` / ``capacity_kbps``;
  ``goodput_over_rate`` the same for Facebook's goodput.
- a switch: a change of rung in the timeline, ``down`` to a lower rung, ``up`` to a higher
  (the tool keeps the first 2000 entries: past them, ``timeline_truncated``, the switches are
  not seen; ``bitrate_switches`` is the report's count of all).
  For each, "the second before" is [t - 1 s, t): ``queue_before_ms`` is the largest queue_ms
  sampled in it, ``prio_before_ms`` / ``inband_before_ms`` the largest RTT of the priority /
  in-band pings sent in it (parsers.live.ping_series), each beside the broadcast's median;
  ``fifo_drops_before`` the FIFO's drops counted by the samples in it.
- ``queue_led``: ``queue_before_ms`` >= ``queue_median_ms`` + :data:`QUEUE_RISE_RTT` x the
  base RTT (ms): the switch followed a queue build-up (half a base RTT: a quarter of a 2 x BDP
  FIFO). A broadcast without a queue (a policed link) has none. ``down_queue_led_share`` is
  the share of its down-switches that are queue-led; the base rate it is judged against,
  ``seconds_queue_high_share``, is the share of the broadcast's whole seconds [k-1, k) whose
  largest queue_ms passes the same bound, and ``up_queue_led_share`` the share of up-switches.
- ``sender_wait_ms`` of a second: its in-band ping's RTT minus its priority ping's (the two
  are sent together; ms): the time the in-band ping waited behind the video in the sender,
  which the network's queue does not explain (both pings cross it). Per switch
  ``sender_wait_before_ms`` = ``inband_before_ms`` - ``prio_before_ms``; ``sender_led`` when it
  is >= the broadcast's median ``sender_wait_ms`` + the same half base RTT; per broadcast
  ``sender_wait_median_ms``, ``down_sender_led_share``, ``deep_sender_led_share`` and the base
  rate ``seconds_sender_high_share`` (of the seconds with both pings), as for the queue.
- ``deep``: a down-switch to a rung below ``rung_below_kbps`` (not the flip between the rungs
  around the link's rate): ``down_deep`` counts them, ``deep_queue_led_share`` as above.
- ``down_fifo_drops_per_s``: the mean of ``fifo_drops_before`` over down-switches, against
  ``fifo_drops_per_s``, the FIFO's drops over the broadcast per s.
- ``down_queue_excess_median_ms`` (and ``_prio_``, ``_inband_``): the median over down-switches
  of the value in the second before minus the broadcast's median.
- ``frames_dropped``, ``frames_dropped_pct``, ``rtx_overhead``: parsers.live's (Facebook's
  RTX overhead: bytes lost / bytes acknowledged); ``fifo_drops``: the FIFO's drops during the
  broadcast; ``policer_drops``: the delay line's policer's (null unless policed).

:func:`collect` gives the per-broadcast, per-switch and per-rung frames;
analysis.live_mechanism_report summarises them per condition and variant and writes the
tables, analysis.live_mechanism_figure draws the figure.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from latency_divide.analysis.reader import TrialInvalid, _meta_get, _read
from latency_divide.errors import LatencyDivideError
from latency_divide.parsers.live import (LiveParseError, bitrate_timeline, parse_live_trial,
                                         ping_series, time_at_rung)
from latency_divide.parsers.queue import QueueParseError, parse_queue
from latency_divide.trial.layout import META, QUEUE_LOG, RECEIVER_JSON, SENDER_JSON

#: A queue build-up: the second before a switch held this many base RTTs more queue (ms at the
#: link's rate) than the broadcast's median.
QUEUE_RISE_RTT = 0.5
#: "The second before" a switch, s.
WINDOW_S = 1.0
SCHEMA_VERSION = 1
_F, _I, _B, _S = pa.float64(), pa.int64(), pa.bool_(), pa.string()
#: The keys of a broadcast (the first columns of each per-broadcast row).
KEY_FIELDS = [("condition", _S), ("buffer_model", _S), ("definition_id", _S), ("config_hash", _S),
              ("household_id", _I), ("price_bucket", _S), ("direction", _S), ("variant", _S),
              ("cc", _S), ("delta", _F), ("repetition", _I), ("trial_path", _S)]
BROADCASTS_SCHEMA = pa.schema(KEY_FIELDS + [
    ("capacity_kbps", _F), ("base_rtt_ms", _F), ("broadcast_s", _F), ("rung_below_kbps", _F),
    ("share_at_rung_below", _F), ("share_above", _F), ("share_below", _F),
    ("bitrate_mean_kbps", _F), ("bitrate_over_rate", _F), ("goodput_fb_kbps", _F),
    ("goodput_over_rate", _F), ("switches_down", _I), ("switches_up", _I),
    ("bitrate_switches", _I), ("timeline_truncated", _B), ("queue_median_ms", _F), ("queue_p95_ms", _F),
    ("app_rtt_median_ms", _F), ("app_rtt_inband_median_ms", _F), ("app_rtt_mean_ms", _F),
    ("down_queue_led_share", _F), ("up_queue_led_share", _F), ("down_deep", _I),
    ("deep_queue_led_share", _F), ("seconds_queue_high_share", _F),
    ("down_fifo_drops_per_s", _F), ("fifo_drops_per_s", _F), ("sender_wait_median_ms", _F),
    ("down_sender_led_share", _F), ("deep_sender_led_share", _F),
    ("seconds_sender_high_share", _F), ("down_queue_excess_median_ms", _F),
    ("down_prio_excess_median_ms", _F), ("down_inband_excess_median_ms", _F),
    ("frames_dropped", _I), ("frames_dropped_pct", _F), ("rtx_overhead", _F),
    ("fifo_drops", _I), ("policer_drops", _I)])
SWITCHES_SCHEMA = pa.schema([f for f in KEY_FIELDS if f[0] in (
    "condition", "household_id", "variant", "repetition", "trial_path")] + [
    ("t_s", _F), ("kind", _S), ("from_kbps", _F), ("to_kbps", _F),
    ("queue_before_ms", _F), ("queue_median_ms", _F), ("prio_before_ms", _F),
    ("prio_median_ms", _F), ("inband_before_ms", _F), ("inband_median_ms", _F),
    ("fifo_drops_before", _I), ("queue_led", _B), ("sender_wait_before_ms", _F),
    ("sender_led", _B), ("deep", _B)])
RUNGS_SCHEMA = pa.schema([("condition", _S), ("household_id", _I), ("variant", _S),
                          ("rung_kbps", _F), ("time_s", _F), ("share", _F)])
class MechanismError(LatencyDivideError):
    """No broadcast to analyse, or a results tree that cannot be read."""


@dataclass
class Broadcast:
    """One live trial's reports and queue, read and parsed (nothing derived yet)."""

    keys: dict
    capacity_kbps: float
    base_rtt_ms: float
    live: dict                        # parsers.live.parse_live_trial's row
    timeline: list                    # (t_s, kbps): the start and each change
    truncated: bool
    rungs: list                       # (kbps, s) for every rung of the ladder
    queue: pd.DataFrame               # t_s, queue_ms, drops
    pings: dict                       # "priority" / "inband": (n, 2) array of t_s, rtt_ms
    policer_drops: int | None


def condition_of(meta: dict) -> tuple[str, str]:
    """(condition, buffer_model): e.g. ("2 x BDP FIFO", "qfactor"), ("policed-5ms", ...)."""
    d = meta.get("definition") or {}
    model = str(d.get("buffer_model") or "qfactor")
    if model == "qfactor":
        return f"{float(d.get('qfactor', meta.get('qfactor', 2))):g} x BDP FIFO", model
    return model, model


def read_broadcast(path: Path | str) -> Broadcast:
    """Read one live trial (loose or packed); TrialInvalid naming the file that is missing or
    malformed."""
    from latency_divide.analysis.metrics import policer_columns

    path = Path(path)
    try:
        meta = json.loads(_read(path, META))
    except json.JSONDecodeError as e:
        raise TrialInvalid(path, f"{META} is not valid JSON ({e.msg})") from None
    condition, model = condition_of(meta)
    delta = _meta_get(path, meta, "variant").get("delta")
    keys = {"condition": condition, "buffer_model": model,
            "definition_id": str(meta.get("definition_id") or ""),
            "config_hash": str(meta.get("config_hash") or ""),
            "household_id": int(_meta_get(path, meta, "household", "unit_id")),
            "price_bucket": str(meta["household"].get("price_bucket")),
            "direction": str(_meta_get(path, meta, "direction")),
            "variant": str(_meta_get(path, meta, "variant", "name")),
            "cc": str(_meta_get(path, meta, "variant", "cc")),
            "delta": math.nan if delta is None else float(delta),
            "repetition": int(_meta_get(path, meta, "repetition")), "trial_path": str(path)}
    sender = _read(path, SENDER_JSON)
    try:
        live = parse_live_trial(sender, _read(path, RECEIVER_JSON))
        doc = json.loads(sender)
        pings = {k: np.array(ping_series(sender, k), dtype="float64").reshape(-1, 2)
                 for k in ("priority", "inband")}
        timeline, rungs = bitrate_timeline(sender), time_at_rung(sender)
    except LiveParseError as e:
        raise TrialInvalid(path, f"{SENDER_JSON} or {RECEIVER_JSON}: {e}") from None
    start = doc.get("start_unix")
    if not isinstance(start, (int, float)) or start <= 0:
        raise TrialInvalid(path, f"{SENDER_JSON}: start_unix={start!r} is not a time")
    try:
        q = parse_queue(_read(path, QUEUE_LOG))
    except QueueParseError as e:
        raise TrialInvalid(path, f"{QUEUE_LOG}: {e}") from None
    cap, rtt, dur = (meta.get("capacity_kbps"), meta["household"].get("rtt_ms"),
                     live.get("broadcast_s"))
    for name, v in (("capacity_kbps", cap), ("household.rtt_ms", rtt),
                    ("the sender's broadcast_s", dur)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise TrialInvalid(path, f"{name}={v!r}: a positive number is needed (the link's "
                                     "rate, its base RTT and the broadcast's length)")
    cap = float(cap)
    t = q["t_unix"].to_numpy() - float(start)
    keep = (t >= 0) & (t <= live["broadcast_s"])
    queue = pd.DataFrame({"t_s": t[keep],
                          "queue_ms": q["backlog_bytes"].to_numpy()[keep] * 8.0 / cap,
                          "drops": q["drops"].to_numpy()[keep]})
    pol = policer_columns(path, meta, keys["direction"])["policer_drops"]
    return Broadcast(keys, cap, float(rtt), live,
                     timeline, bool(doc["live"].get("bitrate_timeline_truncated")), rungs,
                     queue, pings, None if pol is None else int(pol))


def rung_below(ladder: Sequence[float], capacity_kbps: float) -> float:
    """The highest rung below the link's rate (the lowest rung when none is)."""
    below = [k for k in sorted(ladder) if k < capacity_kbps]
    return below[-1] if below else min(ladder)


def _window_max(t: np.ndarray, v: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The largest v sampled in [end - WINDOW_S, end) for each end (NaN where none is)."""
    lo = np.searchsorted(t, ends - WINDOW_S, "left")
    hi = np.searchsorted(t, ends, "left")
    return np.array([v[a:b].max() if b > a else math.nan for a, b in zip(lo, hi)])


def _median(a: np.ndarray) -> float:
    a = a[~np.isnan(a)]
    return float(np.median(a)) if a.size else math.nan


def sender_wait(b: Broadcast) -> pd.DataFrame:
    """Per second with both pings: t_s (the in-band ping's) and ``sender_wait_ms`` (module
    doc), pairing each in-band ping with the priority ping sent within 0.1 s of it."""
    cols = ["t_s", "rtt_ms"]
    i = pd.DataFrame(b.pings["inband"], columns=cols).sort_values("t_s")
    p = pd.DataFrame(b.pings["priority"], columns=cols).sort_values("t_s")
    m = pd.merge_asof(i, p, on="t_s", direction="nearest", tolerance=0.1,
                      suffixes=("_inband", "_prio")).dropna()
    return pd.DataFrame({"t_s": m["t_s"], "sender_wait_ms": m["rtt_ms_inband"]
                         - m["rtt_ms_prio"]}).reset_index(drop=True)


def switches(b: Broadcast) -> pd.DataFrame:
    """Every rung change of a broadcast with what preceded it (module doc)."""
    tl = np.array(b.timeline, dtype="float64").reshape(-1, 2)
    ts, frm, to = tl[1:, 0], tl[:-1, 1], tl[1:, 1]
    qt, qv = b.queue["t_s"].to_numpy(), b.queue["queue_ms"].to_numpy()
    qmed = _median(qv)
    out = {"t_s": ts, "kind": np.where(to < frm, "down", "up"), "from_kbps": frm,
           "to_kbps": to, "queue_before_ms": _window_max(qt, qv, ts), "queue_median_ms": qmed}
    for name, kind in (("prio", "priority"), ("inband", "inband")):
        p = b.pings[kind]
        order = np.argsort(p[:, 0], kind="stable")
        out[f"{name}_before_ms"] = _window_max(p[order, 0], p[order, 1], ts)
        out[f"{name}_median_ms"] = _median(p[:, 1])
    lo, hi = np.searchsorted(qt, ts - WINDOW_S, "left"), np.searchsorted(qt, ts, "left")
    out["fifo_drops_before"] = np.array([int(b.queue["drops"].to_numpy()[a:c].sum())
                                         for a, c in zip(lo, hi)], dtype="int64")
    df = pd.DataFrame(out)
    rise = QUEUE_RISE_RTT * b.base_rtt_ms
    df["queue_led"] = df["queue_before_ms"] >= qmed + rise
    df["sender_wait_before_ms"] = df["inband_before_ms"] - df["prio_before_ms"]
    df["sender_led"] = df["sender_wait_before_ms"] >= _median(
        sender_wait(b)["sender_wait_ms"].to_numpy()) + rise
    below = rung_below([k for k, _ in b.rungs], b.capacity_kbps)
    df["deep"] = (df["kind"] == "down") & (df["to_kbps"] < below)
    for k in ("condition", "household_id", "variant", "repetition", "trial_path"):
        df[k] = b.keys[k]
    return df


def broadcast_row(b: Broadcast, sw: pd.DataFrame) -> dict:
    """The per-broadcast row (module doc) from a broadcast and its :func:`switches`."""
    dur = float(b.live["broadcast_s"])
    ladder = [k for k, _ in b.rungs]
    below = rung_below(ladder, b.capacity_kbps)
    at = {k: s for k, s in b.rungs}
    qv = b.queue["queue_ms"].to_numpy()
    qmed = _median(qv)
    qt = b.queue["t_s"].to_numpy()
    secs = np.arange(1, int(dur) + 1, dtype="float64")
    rise = QUEUE_RISE_RTT * b.base_rtt_ms
    high = _window_max(qt, qv, secs) >= qmed + rise
    sw_ms = sender_wait(b)["sender_wait_ms"].to_numpy()
    down, up, deep = sw[sw["kind"] == "down"], sw[sw["kind"] == "up"], sw[sw["deep"]]
    lv = b.live
    return {**b.keys, "capacity_kbps": b.capacity_kbps, "base_rtt_ms": b.base_rtt_ms,
            "broadcast_s": dur, "rung_below_kbps": below,
            "share_at_rung_below": at.get(below, 0.0) / dur,
            "share_above": sum(s for k, s in at.items() if k > below) / dur,
            "share_below": sum(s for k, s in at.items() if k < below) / dur,
            "bitrate_mean_kbps": lv["bitrate_mean_kbps"],
            "bitrate_over_rate": lv["bitrate_mean_kbps"] / b.capacity_kbps,
            "goodput_fb_kbps": lv["goodput_fb_kbps"],
            "goodput_over_rate": (math.nan if lv["goodput_fb_kbps"] is None
                                  else lv["goodput_fb_kbps"]) / b.capacity_kbps,
            "switches_down": len(down), "switches_up": len(up),
            "bitrate_switches": lv["bitrate_switches"],
            "timeline_truncated": b.truncated, "queue_median_ms": qmed,
            "queue_p95_ms": float(np.percentile(qv, 95)) if qv.size else math.nan,
            "app_rtt_median_ms": _median(b.pings["priority"][:, 1]),
            "app_rtt_inband_median_ms": _median(b.pings["inband"][:, 1]),
            "app_rtt_mean_ms": lv["app_rtt_mean_ms"],
            **{f"{k}_queue_led_share": float(g["queue_led"].mean()) if len(g) else math.nan
               for k, g in (("down", down), ("up", up), ("deep", deep))},
            **{f"{k}_sender_led_share": float(g["sender_led"].mean()) if len(g) else math.nan
               for k, g in (("down", down), ("deep", deep))},
            "sender_wait_median_ms": _median(sw_ms), "seconds_sender_high_share":
            float((sw_ms >= _median(sw_ms) + rise).mean()) if sw_ms.size else math.nan,
            "down_deep": len(deep),
            "seconds_queue_high_share": float(high.mean()) if secs.size else math.nan,
            "down_fifo_drops_per_s": float(down["fifo_drops_before"].mean()) if len(down)
            else math.nan, "fifo_drops_per_s": float(b.queue["drops"].sum()) / dur,
            **{f"down_{k}_excess_median_ms": _median((down[f"{k}_before_ms"]
                                                      - down[f"{k}_median_ms"]).to_numpy())
               for k in ("queue", "prio", "inband")},
            "frames_dropped": lv["frames_dropped"], "frames_dropped_pct": lv["frames_dropped_pct"],
            "rtx_overhead": lv["rtx_overhead"], "fifo_drops": int(b.queue["drops"].sum()),
            "policer_drops": b.policer_drops}


def live_trials(raw_dirs: Iterable[Path | str],
                households: Sequence[int] | None = None) -> list[Path]:
    """The live trials of the trees, loose or packed: those of the definitions whose tool
    arguments have ``-app=live`` (their definition.json, read once per definition), whose
    household is in ``households`` (None: every one). A tree that is not a directory, or a
    definition directory without a readable definition.json, is an error."""
    from latency_divide.trial import definition
    from latency_divide.trial.packs import trials_in

    out = []
    for raw in map(Path, raw_dirs):
        if not raw.is_dir():
            raise MechanismError(f"{raw}: no such directory (a results tree's results/raw)")
        for def_dir in sorted(raw.glob("def-*")):
            try:
                args = definition.read(def_dir)["tool"].get("args", [])
            except ValueError as e:
                raise MechanismError(str(e)) from None
            if "-app=live" not in args:
                continue
            found = {def_dir / k for k in trials_in(def_dir)}
            found |= {p.parent for p in def_dir.glob(f"*/*/*/rep*/{META}")}
            out += sorted(d for d in found if households is None
                          or int(d.parent.parent.parent.name) in households)
    return out


def collect(trial_dirs: Iterable[Path | str]):
    """(broadcasts, switches, rungs, parsed Broadcasts) over the trials: one per condition,
    household, direction and variant, its lowest repetition."""
    read = [read_broadcast(d) for d in trial_dirs]
    if not read:
        raise MechanismError("no live broadcast among the given trials")
    first: dict = {}
    for b in sorted(read, key=lambda b: (b.keys["repetition"], b.keys["trial_path"])):
        k = tuple(b.keys[c] for c in ("condition", "household_id", "direction", "variant"))
        first.setdefault(k, b)
    used = [first[k] for k in sorted(first, key=str)]
    sws = [switches(b) for b in used]
    rows = pd.DataFrame([broadcast_row(b, s) for b, s in zip(used, sws)])
    rungs = pd.DataFrame([{"condition": b.keys["condition"],
                           "household_id": b.keys["household_id"],
                           "variant": b.keys["variant"], "rung_kbps": k, "time_s": s,
                           "share": s / b.live["broadcast_s"]} for b in used for k, s in b.rungs])
    return rows, pd.concat(sws, ignore_index=True), rungs, used
