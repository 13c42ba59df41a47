"""The run configuration: config/config.yaml checked against config/schema.yaml, then the
semantic checks a schema cannot express. ``load_config`` is the one source of truth; the
Snakefile calls it so that errors read the same everywhere. ``config_hash`` is the hash of a
configuration that every trial records (meta.json ``config_hash``)."""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import jsonschema
import yaml

from latency_divide import limits
from latency_divide.data.buckets import Bucket, resolve_buckets, validate_buckets
from latency_divide.links import buffers
from latency_divide.links.population import PopulationSample, population_draw
from latency_divide.errors import ConfigError, yaml_path
from latency_divide.paths import CHECKOUT, CONFIG_SCHEMA
from latency_divide.vocab import DIRECTIONS, POPULATION_FIGURES, RUN_FIGURES

SCHEMA_PATH = CONFIG_SCHEMA
#: A trial's receiver window when none is configured: tperf's 2021 default for bulk; for live,
#: one that never binds (65536 caps its bitrate: tools/tquic-perf/README.md, "Live mode")
BULK_WINDOW_BYTES, LIVE_WINDOW_BYTES = 65536, 4194304


def app_args(app: Mapping[str, Any] | None, key: str = "tool.app") -> tuple[str, ...]:
    """tquic-perf's flags of a config's app (``tool.app`` or a variant's): none for bulk,
    ``-app=live -abr=<abr> -seed=<seed>`` for live (first of the tool's args: the definition's)."""
    if not app or app["kind"] == "bulk":
        if app and ({"abr", "seed"} & set(app)):
            raise ConfigError(f"config: {key}: abr and seed apply to kind live only, not bulk")
        return ()
    limits.check("seed", app.get("seed", 1), f"config: {key}.seed")
    return ("-app=live", f"-abr={app.get('abr', 'backlog')}", f"-seed={app.get('seed', 1)}")


@dataclass(frozen=True)
class Variant:
    name: str
    cc: str  # cubic | copa | bbr | bbr3
    delta: float | None = None  # Copa's latency factor (copa only), in (0, 1]
    window_bytes: int | None = None  # receiver window of this variant (None: tool.window_bytes)
    qlog: bool | None = None  # tperf's qlog for this variant (None: tool.qlog)
    app: tuple[str, ...] | None = None  # this variant's app flags (None: tool.app; app_args)


@dataclass(frozen=True)
class TrialSettings:
    duration_s: float
    #: the repetition numbers every household runs (``repetitions: N`` is 1..N)
    repetitions: tuple[int, ...]
    idle_s: float
    ping_interval_s: float
    queue_interval_s: float
    retries: int
    order: str = "sweep"  # sweep | shuffled (seeded by households.seed)


@dataclass(frozen=True)
class ToolSettings:
    name: str  # tquic-perf | tperf
    path: str | None
    window_bytes: int
    #: extra flags passed to both ends of the tool (part of the trial definition)
    args: tuple[str, ...] = ()
    #: tperf only: its server writes a qlog into the trial, which keeps the sender's report
    #: made of it (transport RTT samples, packets sent and lost; parsers.qlog) and not the
    #: qlog itself. Part of the definition (the qlog costs the sender CPU).
    qlog: bool = False

    def binary(self, root: Path = CHECKOUT) -> Path:
        """The tool's binary: the configured path (a bare name such as ``tperf`` is looked up
        on PATH; a relative path is relative to the repository), or our build for tquic-perf."""
        if self.path is not None:
            p = Path(self.path)
            if "/" not in self.path:
                return Path(shutil.which(self.path) or p)
            return p if p.is_absolute() else root / p
        return root / "target" / "release" / "tquic-perf"


@dataclass(frozen=True)
class TestbedSettings:
    kind: str  # local | ssh
    delay: str  # auto | netem | delayline
    inventory: str | None
    #: SCHED_FIFO priority of the tool ends (0: normal scheduler); trial.spec.TOOL_RT_PRIORITY
    tool_rt_priority: int = 5


@dataclass(frozen=True)
class Config:
    seed: int
    buckets: tuple[Bucket, ...]
    qfactor: float
    directions: tuple[str, ...]
    variants: tuple[Variant, ...]
    trial: TrialSettings
    tool: ToolSettings
    testbed: TestbedSettings
    households_by_bucket: Mapping[str, tuple[int, ...]]  # resolved: listed IDs or drawn sample
    raw: Mapping[str, Any]  # the validated mapping as given
    #: config files of data sets analysed beside this run (analysis.companions)
    companions: tuple[str, ...] = ()
    #: buckets whose repetitions differ from trial.repetitions
    repetitions_by_bucket: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    #: households.population_sample, if the households are a population draw (then ``buckets``
    #: hold the drawn households as ``ids``, as if the config had listed them)
    population: PopulationSample | None = None
    #: households whose repetitions differ from their bucket's and trial.repetitions (the
    #: population sample's ``repeat`` share)
    repetitions_by_household: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    #: the bottleneck FIFO's model (links.buffers): qfactor x BDP, or a measured one
    buffer_model: str = buffers.DEFAULT_MODEL
    #: the figures `snakemake all` draws of this run: figures.draw, else every drawable one
    figures: tuple[str, ...] = RUN_FIGURES
    #: tool.app's flags (app_args; () for bulk): every variant's unless it has its own app
    app: tuple[str, ...] = ()

    def repetitions_of(self, household_id: int) -> tuple[int, ...]:
        """The repetition numbers of a household's trials (its own, else its bucket's, else
        the trial's)."""
        if household_id in self.repetitions_by_household:
            return self.repetitions_by_household[household_id]
        for name, ids in self.households_by_bucket.items():
            if household_id in ids and name in self.repetitions_by_bucket:
                return self.repetitions_by_bucket[name]
        return self.trial.repetitions

    def household_ids(self) -> list[int]:
        """Every household of the run, bucket by bucket in config order."""
        return [h for ids in self.households_by_bucket.values() for h in ids]

    def bucket_of_household(self, household_id: int) -> str:
        for name, ids in self.households_by_bucket.items():
            if household_id in ids:
                return name
        raise ConfigError(f"household {household_id} is not part of this run")

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise ConfigError(f"unknown variant {name!r}; configured: "
                          f"{', '.join(v.name for v in self.variants)}")

    def tool_for(self, variant: Variant) -> ToolSettings:
        """The tool settings of ``variant``'s trials: its own window and qlog setting if it has
        them, its app's flags (app_args: the variant's, else tool.app's) before tool.args, and
        without a configured window the app's default (BULK_/LIVE_WINDOW_BYTES)."""
        app = self.app if variant.app is None else variant.app
        window = variant.window_bytes or (self.tool.window_bytes if "window_bytes" in
                                          self.raw["tool"] else app and LIVE_WINDOW_BYTES
                                          or BULK_WINDOW_BYTES)
        own = {k: v for k, v in (("window_bytes", window), ("qlog", variant.qlog),
                                 ("args", app + self.tool.args))
               if v is not None and v != getattr(self.tool, k)}
        return dataclasses.replace(self.tool, **own) if own else self.tool

    def variant_names(self) -> list[str]:
        return [v.name for v in self.variants]


@functools.lru_cache(maxsize=1)
def load_schema() -> dict:
    with open(SCHEMA_PATH) as f:
        return yaml.safe_load(f)


def _schema_error(err: jsonschema.ValidationError) -> ConfigError:
    # Report the most specific error of a oneOf/anyOf.
    best = jsonschema.exceptions.best_match([err])
    where = yaml_path(best.absolute_path)
    v = best.validator
    if v == "additionalProperties":
        allowed = sorted(best.schema.get("properties", {}))
        extra = sorted(set(best.instance) - set(allowed))
        keys = ", ".join(f"{where}.{k}" if best.absolute_path else k for k in extra)
        return ConfigError(f"config: unknown key {keys} (allowed here: {', '.join(allowed)})")
    if v == "required":
        return ConfigError(f"config: {where}: {best.message}")
    if v == "oneOf" and isinstance(best.instance, dict):
        return ConfigError(f"config: {where}: give exactly one of 'ids' or 'sample' (got "
                           f"{sorted(best.instance)})")
    return ConfigError(f"config: {where} = {best.instance!r}: {best.message}")


def _check_limits(raw: Mapping[str, Any]) -> None:
    """Every number in its range and every name safe as a directory name
    (limits: the one place these are defined). The schema checked the types."""
    hh = raw["households"]
    limits.check("seed", hh["seed"], "config: households.seed")
    for i, b in enumerate(hh["buckets"]):
        key = f"config: households.buckets[{i}]"
        limits.check_name("bucket", b["name"], f"{key}.name")
        limits.check("price_usd", b["min"], f"{key}.min")
        if b["max"] is not None:
            limits.check("price_usd", b["max"], f"{key}.max")
        if "sample" in b:
            limits.check("sample", b["sample"], f"{key}.sample")
        if "repetitions" in b:
            _repetition_numbers(b["repetitions"], f"{key}.repetitions")
    if "population_sample" in hh and PopulationSample.from_dict(
            hh["population_sample"], "config: households.population_sample").repeat is not None:
        _repetition_numbers(hh["population_sample"]["repeat"]["repetitions"],
                            "config: households.population_sample.repeat.repetitions")
    limits.check("qfactor", raw["qfactor"], "config: qfactor")
    buffers.check_model(raw.get("buffer_model", buffers.DEFAULT_MODEL), "config: buffer_model")
    for i, v in enumerate(raw["variants"]):
        key = f"config: variants[{i}]"
        limits.check_name("variant", v["name"], f"{key}.name")
        if "delta" in v:
            limits.check("delta", v["delta"], f"{key}.delta")
        if "window_bytes" in v:
            limits.check("window_bytes", v["window_bytes"], f"{key}.window_bytes")
    _repetition_numbers(raw["trial"]["repetitions"], "config: trial.repetitions")
    for k in ("duration_s", "idle_s", "ping_interval_s", "queue_interval_s", "retries"):
        limits.check(k, raw["trial"][k], f"config: trial.{k}")
    if "window_bytes" in raw["tool"]:
        limits.check("window_bytes", raw["tool"]["window_bytes"], "config: tool.window_bytes")


def _repetition_numbers(value: int | list[int], key: str) -> tuple[int, ...]:
    """``N`` is repetitions 1..N; a list names them (each in limits' range, sorted)."""
    if isinstance(value, list):
        for i, r in enumerate(value):
            limits.check("repetition", r, f"{key}[{i}]")
        return tuple(sorted(value))
    limits.check("repetitions", value, key)
    return tuple(range(1, value + 1))


def _validate_schema(data: Any) -> None:
    schema = load_schema()
    cls = jsonschema.validators.validator_for(schema)
    errors = sorted(cls(schema).iter_errors(data),
                    key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        raise _schema_error(errors[0])


def load_config(source: str | Path | Mapping[str, Any], data: str | Path | None = None) -> Config:
    """Read (path) or take (mapping) a config, validate it, resolve the households.

    ``data`` overrides the household data set (tests). Raises ConfigError naming the key
    and value at fault.
    """
    if isinstance(source, Mapping):
        raw = copy.deepcopy(dict(source))
    else:
        path = Path(source)
        try:
            with open(path) as f:
                raw = yaml.safe_load(f)
        except FileNotFoundError as e:
            raise ConfigError(f"config file not found: {path}") from e
        except yaml.YAMLError as e:
            raise ConfigError(f"config file {path} is not valid YAML: {e}") from e
    if not isinstance(raw, dict):
        raise ConfigError(f"config must be a mapping of keys, not {type(raw).__name__}")
    _validate_schema(raw)
    _check_limits(raw)

    hh = raw["households"]
    buckets = tuple(Bucket(name=b["name"], min_usd=float(b["min"]),
                           max_usd=None if b["max"] is None else float(b["max"]),
                           ids=tuple(b["ids"]) if "ids" in b else None, sample=b.get("sample"))
                    for b in hh["buckets"])
    population = None
    repetitions_by_household: dict[int, tuple[int, ...]] = {}
    if "population_sample" in hh:
        population = PopulationSample.from_dict(hh["population_sample"],
                                                "config: households.population_sample")
        validate_buckets(buckets, population=True)
        draw = population_draw(population, buckets, hh["seed"], data, float(raw["qfactor"]))
        buckets = draw.resolved_buckets()
        by_bucket = {name: list(ids) for name, ids in draw.by_bucket.items()}
        if population.repeat is not None:
            reps = _repetition_numbers(hh["population_sample"]["repeat"]["repetitions"],
                                       "config: households.population_sample.repeat.repetitions")
            repetitions_by_household = {h: reps for h in draw.repeated}
    else:
        validate_buckets(buckets)
        by_bucket = resolve_buckets(buckets, hh["seed"], data)

    variants = []
    names: set[str] = set()
    for i, v in enumerate(raw["variants"]):
        key = f"variants[{i}]"
        if v["name"] in names:
            raise ConfigError(f"config: {key}.name = {v['name']!r}: variant name repeated")
        names.add(v["name"])
        if v["cc"] == "copa":
            if "delta" not in v:
                raise ConfigError(f"config: {key} ({v['name']!r}): copa needs 'delta' in (0, 1]")
        elif "delta" in v:
            raise ConfigError(f"config: {key}.delta = {v['delta']!r}: delta applies to cc copa "
                              f"only, not {v['cc']!r}")
        variants.append(Variant(v["name"], v["cc"], float(v["delta"]) if "delta" in v else None,
                                v.get("window_bytes"), v.get("qlog"),
                                app_args(v["app"], f"{key}.app") if "app" in v else None))
    app = app_args(raw["tool"].get("app"))
    tool = ToolSettings(**{"window_bytes": LIVE_WINDOW_BYTES if app else BULK_WINDOW_BYTES,
                           **{k: v for k, v in raw["tool"].items() if k != "app"},
                           "args": tuple(raw["tool"].get("args", ()))})
    if tool.name != "tquic-perf" and (app or any(v.app for v in variants)):
        raise ConfigError(f"config: a live app (tool.app or a variant's app) needs tool.name "
                          f"tquic-perf, not {tool.name!r} (live mode is tquic-perf's)")
    if tool.name == "tperf" and tool.path is None:
        raise ConfigError("config: tool.path = None: the path of mvfst's tperf binary is required for tool.name tperf")
    testbed = TestbedSettings(**raw["testbed"])
    # tperf's qlog (tool.qlog, or a variant's): the first key that asks for it is named
    qlog = [k for k, on in (("tool.qlog", tool.qlog),
                            *((f"variants[{i}].qlog", v.qlog) for i, v in enumerate(variants)))
            if on]
    if qlog and tool.name != "tperf":
        raise ConfigError(f"config: {qlog[0]} = true: only for tool.name tperf (mvfst's qlog), "
                          f"not {tool.name!r} (tquic-perf reports its RTT samples itself)")
    if qlog and testbed.kind != "local":
        raise ConfigError(f"config: {qlog[0]} = true: only on the local testbed, not "
                          f"{testbed.kind!r} (a fast link's qlog is hundreds of MB on the node)")
    if testbed.kind == "ssh" and testbed.inventory is None:
        raise ConfigError("config: testbed.inventory = None: an SSH inventory is required for testbed.kind ssh")

    buffer_model = raw.get("buffer_model", buffers.DEFAULT_MODEL)
    if buffer_model != buffers.DEFAULT_MODEL:
        _check_buffers(buffer_model, by_bucket, data)

    drawable = drawable_figures({v.cc for v in variants}, population is not None)
    wanted = (raw.get("figures") or {}).get("draw")
    for name in wanted or ():
        if name not in drawable:
            raise ConfigError(f"config: figures.draw: {name!r} is not a figure this run can "
                              f"draw; allowed: {', '.join(drawable)} (divide needs cubic and "
                              "copa variants; the percentile figures a population_sample)")
    ts_household = (raw.get("figures") or {}).get("timeseries_household")
    run_ids = {h for ids in by_bucket.values() for h in ids}
    if ts_household is not None and ts_household not in run_ids:
        raise ConfigError(f"config: figures.timeseries_household = {ts_household}: not one of "
                          f"this run's households ({len(run_ids)} configured)")

    t = raw["trial"]
    trial = TrialSettings(
        duration_s=float(t["duration_s"]), idle_s=float(t["idle_s"]),
        repetitions=_repetition_numbers(t["repetitions"], "config: trial.repetitions"),
        ping_interval_s=float(t["ping_interval_s"]), retries=t["retries"],
        queue_interval_s=float(t["queue_interval_s"]), order=t.get("order", "sweep"))
    cfg = Config(
        seed=hh["seed"], buckets=buckets, qfactor=float(raw["qfactor"]),
        directions=tuple(raw["directions"]), variants=tuple(variants), trial=trial, tool=tool,
        testbed=testbed, households_by_bucket={k: tuple(v) for k, v in by_bucket.items()},
        raw=raw, companions=tuple(raw.get("companions") or ()),
        repetitions_by_bucket={b["name"]: _repetition_numbers(
            b["repetitions"], f"config: households.buckets[{i}].repetitions")
            for i, b in enumerate(hh["buckets"]) if "repetitions" in b},
        population=population, repetitions_by_household=repetitions_by_household,
        buffer_model=buffer_model, app=app,
        figures=drawable if wanted is None else tuple(f for f in drawable if f in wanted))
    for v in variants:  # e.g. config.yaml's 65536, which Snakemake merges into a --configfile's
        if "-app=live" in (t := cfg.tool_for(v)).args and t.window_bytes < LIVE_WINDOW_BYTES:
            raise ConfigError(f"config: variant {v.name!r}: window_bytes {t.window_bytes}: a live"
                              f" app needs at least {LIVE_WINDOW_BYTES} (less caps its bitrate)")
    return cfg


def drawable_figures(ccs: set[str], population: bool) -> tuple[str, ...]:
    """The figures a run can draw: `divide` compares Copa with Cubic, so it needs both; a
    population run adds the percentile figures."""
    names = tuple(f for f in RUN_FIGURES if f != "divide" or {"cubic", "copa"} <= ccs)
    return names + (POPULATION_FIGURES if population else ())


def _check_buffers(model: str, by_bucket: Mapping[str, Any], data) -> None:
    """Every household of the run has a buffer under a measured model (its technology is one
    the model knows), so that a run fails here and not in its first trial."""
    from latency_divide.data.households import get_household

    for ids in by_bucket.values():
        for h in ids:
            hh = get_household(h, data=data)
            for direction in DIRECTIONS:
                try:
                    buffers.queue_ms(model, hh.technology, direction, hh.unit_id)
                except ConfigError as e:
                    raise ConfigError(f"config: buffer_model = {model!r}: {e}") from None


def config_hash(config: dict | None) -> str:
    """sha256 of the config as canonical JSON (sorted keys, no whitespace)."""
    text = json.dumps(config or {}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()
