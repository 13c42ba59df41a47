"""A trial's definition: every setting that shapes a measurement, and its short hash.

Two trials may be compared, or put in one table, only if they were measured under the same
definition. The definition of a trial is

    {"version": 1,
     "testbed": "local" | "ssh",          # testbed.kind
     "delay": "auto" | "netem" | "delayline",   # testbed.delay, as configured
     "qfactor": 2.0,
     ["buffer_model": "mba-2014",]        # only when not the default "qfactor"
     "trial": {"duration_s", "idle_s", "ping_interval_s", "queue_interval_s"},
     "tool": {"name", "window_bytes", "args"[, "qlog": true][, "pacing": true]},
                                          # a live trial's args start with -app=live
                                          # -abr=<abr> -seed=<n> (config.app_args)
     "variant": {"cc", "delta"}}

and its id is ``def-`` + the first 10 hex digits of the sha256 of its canonical JSON (sorted
keys, no white space). The id is the first component of a trial's raw path
(``results/raw/<definition id>/<household>/<direction>/<variant>/rep<r>/``), so a changed
definition (another qfactor, duration, window, tool flags, delta ...) names other trial
directories: Snakemake measures those anew and never touches, or reuses, the earlier ones.
Settings that do not shape a measurement (repetitions, retries, the household list, figure
options, the tool's path) are not part of it. Neither is the household's link (rate, queue,
delay): it follows from the household ID in the path, the vendored data set, ``qfactor`` and
the buffer model (links.buffers), and the analysis checks the recorded plan against them. The
buffer model is part of a definition only when it is not the default ``qfactor`` (x BDP), so
every definition measured before models existed keeps its id; a trial records its model in its
link plan (meta.json ``linkplan.buffer_model``, absent for the default).

``delay: auto`` means "netem where the kernel has it, else our delay line" and is kept as
configured (resolving it would make the path depend on the machine that computes it, so a
netem machine could not find trials measured on one without); each trial records the mechanism
it used (meta.json ``delay_mechanism``) and the trials table has it as a column.

Each definition directory holds ``definition.json`` (``{"id": ..., "definition": ...}``,
written by the first trial). :func:`check_trial` compares what a trial's meta.json recorded
with the definition of the directory it is in.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Mapping

from latency_divide.fsio import write_json_atomic
from latency_divide.links import buffers
from latency_divide.trial.layout import DEFINITION, ID_PREFIX
from latency_divide.vocab import DELAY_MECHANISMS

DEFINITION_VERSION = 1


#: congestion controls a tool runs only with pacing on: mvfst, asked for BBR unpaced, logs
#: "Unpaced BBR isn't supported" and runs Cubic instead (QuicTransportBaseLite::
#: validateCongestionAndPacing); tperf's pacing is off by default (-pacing)
PACED_CC = {"tperf": frozenset({"bbr"})}


def paced(tool_name: str, cc: str) -> bool:
    """Whether the tool's sender runs ``cc`` with pacing on (trial.spec adds the flag)."""
    return cc in PACED_CC.get(tool_name, frozenset())


def make_definition(*, testbed: str, delay: str, qfactor: float, duration_s: float,
                    idle_s: float, ping_interval_s: float, queue_interval_s: float,
                    tool_name: str, window_bytes: int, tool_args=(), cc: str,
                    delta: float | None, qlog: bool = False,
                    pacing: bool = False,
                    buffer_model: str = buffers.DEFAULT_MODEL) -> dict[str, Any]:
    """The definition (a JSON-able dict with canonical number types). ``tool.qlog`` and
    ``tool.pacing`` are there only when true, and ``buffer_model`` only when not the default,
    so the ids of definitions without them are unchanged (tperf's BBR trials before pacing,
    def-f1f96f89f2, ran Cubic: docs/population.md)."""
    buffers.check_model(buffer_model)
    tool = {"name": str(tool_name), "window_bytes": int(window_bytes),
            "args": [str(a) for a in tool_args], **({"qlog": True} if qlog else {}),
            **({"pacing": True} if pacing else {})}
    return {
        "version": DEFINITION_VERSION,
        "testbed": str(testbed),
        "delay": str(delay),
        "qfactor": float(qfactor),
        **({"buffer_model": buffer_model} if buffer_model != buffers.DEFAULT_MODEL else {}),
        "trial": {"duration_s": float(duration_s), "idle_s": float(idle_s),
                  "ping_interval_s": float(ping_interval_s),
                  "queue_interval_s": float(queue_interval_s)},
        "tool": tool,
        "variant": {"cc": str(cc), "delta": None if delta is None else float(delta)},
    }


def of_config(cfg, variant) -> dict[str, Any]:
    """The definition of ``variant``'s trials under a loaded config (latency_divide.config)."""
    t = cfg.trial
    return make_definition(
        testbed=cfg.testbed.kind, delay=cfg.testbed.delay, qfactor=cfg.qfactor,
        duration_s=t.duration_s, idle_s=t.idle_s, ping_interval_s=t.ping_interval_s,
        queue_interval_s=t.queue_interval_s, tool_name=cfg.tool.name,
        window_bytes=cfg.tool_for(variant).window_bytes, tool_args=cfg.tool_for(variant).args,
        cc=variant.cc,
        delta=variant.delta, qlog=cfg.tool_for(variant).qlog,
        pacing=paced(cfg.tool.name, variant.cc), buffer_model=cfg.buffer_model)


def definition_id(definition: Mapping[str, Any]) -> str:
    text = json.dumps(definition, sort_keys=True, separators=(",", ":"))
    return ID_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:10]


def recorded(meta: Mapping[str, Any]) -> dict[str, Any]:
    """What a trial's meta.json says it ran with, in definition form (``delay`` is the
    mechanism used, netem or delayline; the buffer model is the link plan's, so give a format-4
    meta.json with its set-up records, rawio.full_meta). Raises KeyError/TypeError/ValueError
    when a value is missing or malformed."""
    tool = meta["tool"]
    variant = meta["variant"]
    testbed = meta.get("testbed")
    plan = meta.get("linkplan")
    model = plan.get("buffer_model", buffers.DEFAULT_MODEL) if isinstance(plan, dict) else \
        buffers.DEFAULT_MODEL
    return make_definition(
        testbed=testbed.get("kind", "local") if isinstance(testbed, dict) else "local",
        delay=meta["delay_mechanism"], qfactor=meta["qfactor"], duration_s=meta["duration_s"],
        idle_s=meta["idle_s"], ping_interval_s=meta["ping"]["interval_s"],
        queue_interval_s=meta["queue"]["interval_s"], tool_name=tool["name"],
        window_bytes=tool["window_bytes"], tool_args=tool.get("args", []), cc=variant["cc"],
        delta=variant.get("delta"), qlog=bool(tool.get("qlog", False)),
        pacing=bool(tool.get("pacing", False)), buffer_model=model)


def _flat(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, Mapping):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)
    return a == b


def mismatches(definition: Mapping[str, Any], meta: Mapping[str, Any]) -> list[str]:
    """How a trial's recorded settings differ from ``definition`` ("key: recorded X,
    definition Y"); empty when they agree. ``delay: auto`` accepts either mechanism."""
    try:
        rec = _flat(recorded(meta))
    except (KeyError, TypeError, ValueError) as e:
        return [f"meta.json lacks or garbles a trial setting ({type(e).__name__}: {e})"]
    out = []
    want_model = definition.get("buffer_model", buffers.DEFAULT_MODEL)
    if rec.get("buffer_model", buffers.DEFAULT_MODEL) != want_model:  # either may be absent
        out.append(f"buffer_model: recorded {rec.get('buffer_model', buffers.DEFAULT_MODEL)!r}, "
                   f"definition {want_model!r}")
    for key, want in _flat(definition).items():
        if key == "buffer_model":
            continue
        got = rec.get(key)
        if key == "delay" and want == "auto" and got in DELAY_MECHANISMS:
            continue
        if key == "version":
            continue
        if not _same(got, want):
            out.append(f"{key}: recorded {got!r}, definition {want!r}")
    return out


def read(def_dir: Path | str) -> dict[str, Any]:
    """The definition of a definition directory (its definition.json), checked against the
    directory's name. Raises ValueError naming the file when it is missing or does not fit."""
    d = Path(def_dir)
    f = d / DEFINITION
    try:
        doc = json.loads(f.read_text())
        definition = doc["definition"]
    except FileNotFoundError:
        raise ValueError(f"{f}: missing (every definition directory has one)") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{f}: unreadable ({e})") from None
    got = definition_id(definition)
    if got != d.name or doc.get("id") != d.name:
        raise ValueError(f"{f}: its definition hashes to {got}, not to the directory's name "
                         f"{d.name}")
    return definition


def ensure_file(def_dir: Path | str, definition: Mapping[str, Any]) -> Path:
    """Write ``def_dir/definition.json`` if it is missing (atomically; concurrent trials write
    identical bytes); check it when present."""
    d = Path(def_dir)
    want = definition_id(definition)
    if d.name != want:
        raise ValueError(f"{d} is not the directory of definition {want}")
    f = d / DEFINITION
    if f.exists():
        read(d)
        return f
    d.mkdir(parents=True, exist_ok=True)
    write_json_atomic(f, {"id": want, "definition": dict(definition)})
    return f


def describe(definition: Mapping[str, Any]) -> str:
    """One line for humans: the settings that tell definitions apart."""
    t, tool, v = definition["trial"], definition["tool"], definition["variant"]
    cc = v["cc"] + (f" delta={v['delta']:g}" if v.get("delta") is not None else "")
    args = (" " + " ".join(tool["args"])) if tool.get("args") else ""
    args += " qlog" if tool.get("qlog") else ""
    args += " paced" if tool.get("pacing") else ""
    return (f"{cc}; {tool['name']} window={tool['window_bytes']}{args}; "
            f"duration={t['duration_s']:g}s idle={t['idle_s']:g}s ping={t['ping_interval_s']:g}s "
            f"queue={t['queue_interval_s']:g}s; qfactor={definition['qfactor']:g}; "
            + (f"buffer {definition['buffer_model']}; " if "buffer_model" in definition else "") +
            f"{definition['testbed']} testbed, delay {definition['delay']}")
