"""A run's trials from the workflow's config: every (definition id, household, direction,
variant, repetition) in sweep order, the TrialSpec of one, and a trial's nominal wall time."""

from __future__ import annotations

import random

from latency_divide.links import buffers
from latency_divide.trial import definition
from latency_divide.trial.spec import TrialSpec


def trial_ids(cfg) -> list[tuple[str, int, str, str, int]]:
    """Every (definition id, household, direction, variant, repetition) of a run, in sweep
    order, or shuffled with the households' seed where the config says ``trial.order:
    shuffled`` (the order Snakemake is handed the trials' targets)."""
    ids = {v.name: definition.definition_id(definition.of_config(cfg, v)) for v in cfg.variants}
    out = [(ids[v.name], h, d, v.name, r)
           for h in cfg.household_ids() for d in cfg.directions for v in cfg.variants
           for r in cfg.repetitions_of(h)]
    if cfg.trial.order == "shuffled":
        random.Random(cfg.seed).shuffle(out)
    return out


def spec_from_config(cfg, household, direction: str, variant: str, repetition: int,
                     config_hash: str | None = None) -> TrialSpec:
    t = cfg.trial
    v = cfg.variant(variant)
    return TrialSpec(household=household, direction=direction, variant=v,
                     repetition=repetition, duration_s=t.duration_s, idle_s=t.idle_s,
                     ping_interval_s=t.ping_interval_s, queue_interval_s=t.queue_interval_s,
                     qfactor=cfg.qfactor, tool=cfg.tool_for(v), delay=cfg.testbed.delay,
                     config_hash=config_hash, tool_rt_priority=cfg.testbed.tool_rt_priority,
                     buffer_model=cfg.buffer_model)


def nominal_trial_s(cfg) -> float:
    """A trial's expected wall time before any has been measured: idle + transfer + ~3 s
    of setup, connection, tail and teardown."""
    return cfg.trial.idle_s + cfg.trial.duration_s + 3.0


def alone_args(cfg, household: int, direction: str, variant: str, repetition: int,
               out) -> list[str]:
    """The arguments of `latency-divide trial` (after the program) that measure one trial of
    ``cfg`` alone, with the same definition as its workflow's trial: the runs a trial is
    judged against (docs/emulation.md "Emulation health")."""
    v = cfg.variant(variant)
    tool = cfg.tool_for(v)
    t = cfg.trial
    args = ["trial", str(household), "--direction", direction, "--cc", v.cc,
            "--duration", f"{t.duration_s:g}", "--idle", f"{t.idle_s:g}",
            "--repetition", str(repetition), "--qfactor", f"{cfg.qfactor:g}",
            "--queue-interval", f"{t.queue_interval_s:g}",
            "--delay", cfg.testbed.delay, "--tool", tool.name, "--window",
            str(tool.window_bytes), "--ping-interval", f"{t.ping_interval_s:g}",
            "--retries", str(t.retries), "--out", str(out)]
    if v.delta is not None:
        args += ["--delta", f"{v.delta:g}"]
    if cfg.buffer_model != buffers.DEFAULT_MODEL:
        args += ["--buffer-model", cfg.buffer_model]
    if tool.path:
        args += ["--tool-path", str(tool.binary())]
    if tool.qlog:
        args += ["--qlog"]
    return args + [f"--tool-arg={a}" for a in tool.args]


def trial_variant_name(cc: str, delta: float | None) -> str:
    """The variant name (and directory) `latency-divide trial` gives a trial: its cc, or
    copa-<δ>."""
    return f"copa-{delta:g}" if cc == "copa" else cc


def alone_variant(cfg, variant: str) -> str:
    """The variant directory of ``cfg``'s ``variant`` measured alone (`latency-divide trial`)."""
    v = cfg.variant(variant)
    return trial_variant_name(v.cc, v.delta)
