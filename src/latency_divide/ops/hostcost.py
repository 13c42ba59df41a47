"""What a trial asks of this host: the admission's model (ops.admission) times this host's cost
factors, each of its kind, and what a kept trial teaches them (issue 57, "An admission that
learns the host"; docs/host.md, "What the trials teach").

The factors, by precedence: one set by hand (``LATENCY_DIVIDE_HOST_FACTOR``, both kinds); the
factors learned from this boot's trials (testbed.hostlearn: ``mean`` scales a trial's whole CPU,
``rt`` its tool ends and delay line); the host check's wake-up factor
(testbed.hostrecord.host_factor). The model itself stays in ops.admission, in the fitted host's
terms, where the analysis reads it for published trials (its source is part of the parsed
caches' key, analysis.parsedcache.CODE_MODULES); this module is only for trials measured now.
"""

from __future__ import annotations

from latency_divide.ops import admission
from latency_divide.testbed import hostlearn
from latency_divide.testbed.hostrecord import factor_by_hand, host_factor


def factor_source(kind: str = "mean", records=None) -> tuple[float, str]:
    """(this host's cost factor for ``kind`` of cost, where it came from); ``records``: the
    directory of the host records and the trial log (None: results/host)."""
    if factor_by_hand() is None:
        got = hostlearn.learned(kind, records)
        if got is not None:
            return got[0], (f"learned from this boot's last {got[1]} trials: "
                            f"{hostlearn.log_path(records)}")
    return host_factor(records)


def factor_here(factor: float | None = None, kind: str = "mean") -> float:
    """``factor``, or this host's cost factor for ``kind`` (:func:`factor_source`) when None."""
    return factor_source(kind)[0] if factor is None else float(factor)


def spec_rt_cores(spec, testbed: str = "local", factor: float | None = None) -> float:
    """A trial's expected real-time cores on this host (what the load gate admits): the model's
    (ops.admission.spec_rt_cores at factor 1) times the real-time factor (``factor``; None:
    this host's)."""
    return factor_here(factor, "rt") * admission.spec_rt_cores(spec, testbed, factor=1.0)


def trial_host_load(plan, direction: str, window_bytes: int | None, tool: str = "tquic-perf",
                    testbed: str = "local", cpu_count: int | None = None,
                    busy_s: float = 65.0, factor: float | None = None,
                    app: float | None = None, rt_factor: float | None = None) -> int:
    """The ``host_load`` a trial asks Snakemake for, from its link plan (links.plan): as
    ops.admission.trial_host_load, its expected cores or its real-time cores with their
    headroom, whichever is more, each times this host's factor of its kind (``factor`` for
    both, ``rt_factor`` for the real-time part; None: this host's)."""
    rate = plan.shaper(direction).rate_kbit
    cores = admission.trial_cores(rate, plan.rtt_ms, window_bytes, tool, testbed, busy_s,
                                  app=app)
    rt = admission.rt_cores(rate, plan.rtt_ms, window_bytes, tool, testbed, app=app)
    return ask(cores, rt, factor_here(factor, "mean"),
               factor_here(factor if rt_factor is None else rt_factor, "rt"), cpu_count)


def ask(cores: float, rt: float, factor: float, rt_factor: float,
        cpu_count: int | None = None) -> int:
    """The ``host_load`` of a trial whose model (at factor 1) gives ``cores`` for the whole
    trial and ``rt`` real-time cores: the larger of the two scaled by their factors, the
    real-time cores with their headroom (ops.admission.RT_HEADROOM)."""
    return admission.host_load(max(factor * cores, rt_factor * admission.RT_HEADROOM * rt),
                               cpu_count)


def learn_from(spec, meta: dict, testbed: str = "local") -> dict | None:
    """Add a kept trial to this boot's trial log (testbed.hostlearn): its cores measured
    (meta.json ``cpu_s``) and the model's at factor 1, whole and real-time. Nothing for a trial
    its application limits (the model charges it its top rung, not what it carried) or whose
    tools ran on other hosts. Returns the line written, or None."""
    if testbed != "local" or admission.app_mbit(spec.tool.args) is not None:
        return None
    cpu = meta.get("cpu_s") or {}
    plan = spec.link_plan("netem")
    rate, gen = plan.shaper(spec.direction).rate_kbit, admission.spec_generation(spec)
    busy_s = spec.idle_s + spec.duration_s
    try:
        used = {"mean": sum(float(v) for v in cpu.values())
                / (busy_s + admission.TRIAL_OVERHEAD_S),
                "rt": sum(float(cpu[k]) for k in ("sender", "receiver", "delayline"))
                / spec.duration_s}
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    model = {"mean": admission.trial_cores(rate, plan.rtt_ms, spec.tool.window_bytes,
                                           spec.tool.name, testbed, busy_s, gen),
             "rt": admission.rt_cores(rate, plan.rtt_ms, spec.tool.window_bytes,
                                      spec.tool.name, testbed, gen)}
    return hostlearn.record(spec.trial_id, model, used)
