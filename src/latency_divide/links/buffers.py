"""Buffer models: how deep the gateway's bottleneck FIFO is, per household and direction, as data.

A model is named in the config (``buffer_model``, next to ``qfactor``); links.plan asks it for
each direction's FIFO and records the answer in the link plan.

``qfactor`` (the default): the paper's formula, unchanged (EXPERIMENT.md):
``q = qfactor * rtt_ms * rate_kbit / 1000`` kilobits, ``floor(q * 125)`` bytes, i.e. qfactor x
the bandwidth-delay product. Every published trial ran with it; a plan or a trial definition
under this model is exactly what it was before models existed.

``mba-2014``: the queueing delay the households' own panel measured. The FCC Measuring Broadband
America panel, from which the vendored household data set comes, measured the RTT of latency
probes while its speed test loaded a direction (latency under load) and at rest (idle latency).
resources/buffers/ holds their medians by technology for the 30 days from 2014-09-07, as the
bclear clearinghouse aggregated them (README there: source, commit, licence). A direction's
queue, in milliseconds of the link's rate, is

    queue_ms = loaded RTT (that technology, that direction) - idle RTT (that technology)

and its FIFO ``floor(queue_ms * rate_kbit / 8)`` bytes at the household's own rate, at least
:data:`MIN_QUEUE_BYTES`.

- **The statistic: the median over tests of each test's maximum RTT** (bclear's ``rtt_max``).
  A bulk transfer through a drop-tail FIFO fills it, so the largest RTT of a loaded test is the
  RTT with the buffer (nearly) full, and loaded max minus idle max is the time the full buffer
  takes to drain: the buffer's size in ms. A test's mean RTT measures the average occupancy
  instead (a loss-based sender's sawtooth and its ramp-up sit below the full buffer), which
  is smaller than the buffer. It is also the only per-technology statistic bclear publishes for
  2014 (its ``rtt_avg`` CDFs aggregate a later, unlabelled period). Caveats: the max also
  catches transient spikes (an overestimate); a test that did not fill the buffer
  underestimates it; and a difference of medians is not the median of differences.
- **Delay, not bytes, carries over to a household.** The panel measured milliseconds at the
  panel's rates; a household's FIFO is that delay at its own rate (a buffer sized in bytes for
  the top tier holds more delay on a slower plan, which this does not model).
- **Technologies.** The data set's CABLE, DSL and FIBER map to the panel's Cable, DSL and Fiber.
  The panel (bclear's top three technologies) has no number for SATELLITE: those households
  keep the configured qfactor x BDP (at their median base RTT of 776 ms that is 1.6 s of queue
  at qfactor 2, about twice the deepest measured uplink), and the plan says so. Any other
  technology is an error naming it.
- **The floor.** A bfifo smaller than one frame drops every full-size packet, so a measured
  FIFO is at least :data:`MIN_QUEUE_PACKETS` full Ethernet frames (a slow link's 100 ms can be
  under 1 kB: fiber's 104.6 ms at 72 kbit/s, the data set's slowest rate, is 941 bytes).
- **Year.** The panel's 2014 numbers serve every household, also those whose row is from 2015.

Checked against the data set (bench/bench_buffer_model.py): the panel's idle medians against
the households' own ``medianLatency`` by technology. The loaded side cannot be checked: the data
set has no latency under load.

``queue-<N>ms`` (N a whole number of milliseconds, 1 to 5000, written without leading zeros):
buffer depth as a factor (issue 41, step 3; docs/population.md "Buffer depth as a factor: the
sweep"). Each direction's FIFO holds N ms of queue at the household's own rate,
``floor(N * rate_kbit / 8)`` bytes, at least :data:`MIN_QUEUE_BYTES` (the floor above), for
every technology, SATELLITE included: no technology or data is looked up, and neither the RTT
nor ``qfactor`` enters. The name is canonical (``queue-0500ms`` is refused), because a trial
definition records it and its id hashes it: one depth has one name and so one definition.

``policed-<N>ms`` (N 1 to 5000): no FIFO model at all but a policer (links.policer): each
direction's queue is replaced by a token bucket at the household's rate holding N ms of it,
which drops what exceeds the rate instead of queueing it; :func:`buffer` gives the gateway's
FIFO of that mode (the bucket plus the floor of frames, at the veth's speed: it never holds
delay), :func:`queue_ms` 0.
"""

from __future__ import annotations

import csv
import functools
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from latency_divide.errors import ConfigError
from latency_divide.links import policer
from latency_divide.paths import CHECKOUT
from latency_divide.vocab import DIRECTIONS

#: The model of every published trial (qfactor x BDP).
DEFAULT_MODEL = "qfactor"

#: A measured FIFO holds at least this many full Ethernet frames (links.plan.MTU_BYTES each):
#: RFC 3390's initial window of up to 4 segments fits, and no full-size packet is always dropped.
MIN_QUEUE_PACKETS = 4
MIN_QUEUE_BYTES = MIN_QUEUE_PACKETS * 1514

#: bytes = ms * kbit/s / 8; the epsilon keeps an exact whole number from truncating one byte
#: low through binary rounding (as the qfactor formula always did).
_EPS = 1e-9


@dataclass(frozen=True)
class MeasuredModel:
    """A buffer model from a panel's loaded and idle RTTs by technology (one period)."""

    name: str
    data: Path  # the vendored CSV (resources/buffers/)
    period_start: str  # the period's first day, as the CSV has it
    statistic: str  # the CSV's statistic column: what each number is
    #: the data set's technology -> the panel's technology
    technologies: Mapping[str, str]
    #: data-set technologies the panel has no number for: they keep qfactor x BDP
    qfactor_fallback: tuple[str, ...]

    def known_technologies(self) -> tuple[str, ...]:
        return (*self.technologies, *self.qfactor_fallback)


MBA_2014 = MeasuredModel(
    name="mba-2014",
    data=CHECKOUT / "resources" / "buffers" / "mba-latency-2014-09.csv",
    period_start="2014-09-07",
    statistic="median_of_rtt_max",
    technologies={"CABLE": "Cable", "DSL": "DSL", "FIBER": "Fiber"},
    qfactor_fallback=("SATELLITE",),
)

#: Every model by name: None is the qfactor formula. The fixed-delay family ``queue-<N>ms``
#: is not listed (one name per depth): :func:`fixed_ms` recognises it.
MODELS: dict[str, MeasuredModel | None] = {DEFAULT_MODEL: None, MBA_2014.name: MBA_2014}

#: The fixed-delay models' range of N (ms of queue at the link's rate), and their form.
FIXED_MIN_MS, FIXED_MAX_MS = 1, 5000
FIXED_FORM = f"queue-<N>ms with N in {FIXED_MIN_MS}..{FIXED_MAX_MS}"
_FIXED_NAME = re.compile(r"queue-([1-9][0-9]*)ms")

#: What a model name may be, as the errors say it.
ALLOWED = f"{', '.join(MODELS)}, {FIXED_FORM}, {policer.FORM}"


def fixed_ms(name) -> int | None:
    """N of a fixed-delay model's name ``queue-<N>ms`` (N in 1..5000, no leading zeros), else
    None."""
    m = _FIXED_NAME.fullmatch(name) if isinstance(name, str) else None
    if m is None or not FIXED_MIN_MS <= int(m.group(1)) <= FIXED_MAX_MS:
        return None
    return int(m.group(1))


def check_model(name, key: str = "buffer model") -> str:
    """``name`` if it is a model's name, else ConfigError naming it and the allowed ones."""
    if (not (isinstance(name, str) and name in MODELS) and fixed_ms(name) is None
            and policer.burst_ms(name) is None):
        raise ConfigError(f"{key} = {name!r}: not a buffer model; allowed: {ALLOWED}")
    return name


def cli_model(name: str) -> str:
    """An argparse ``type=`` for ``--buffer-model``: ``name`` if it is a model's name, else
    argparse.ArgumentTypeError naming it and the allowed ones (exit status 2)."""
    import argparse

    try:
        return check_model(name)
    except ConfigError:
        raise argparse.ArgumentTypeError(
            f"invalid choice: {name!r}: not a buffer model; allowed: {ALLOWED}") from None


@functools.lru_cache(maxsize=4)
def _rows(path: Path) -> tuple[dict, ...]:
    try:
        with open(path, newline="") as f:
            return tuple(csv.DictReader(f))
    except FileNotFoundError:
        raise ConfigError(f"buffer data {path} is missing (resources/buffers/README.md)") from None


def panel_rtt_ms(model: MeasuredModel, test: str, technology: str,
                 direction: str = "none") -> float:
    """One number of the model's CSV: the panel technology's RTT (ms) in ``test``
    (``idle`` or ``latency_under_load``) and direction (``none`` for idle)."""
    hits = [r for r in _rows(model.data)
            if (r["period_start"], r["statistic"], r["test"], r["direction"], r["technology"])
            == (model.period_start, model.statistic, test, direction, technology)]
    if len(hits) != 1:
        raise ConfigError(f"buffer data {model.data.name}: {len(hits)} rows for {technology} "
                          f"{test} {direction} ({model.statistic}, {model.period_start}); "
                          "expected exactly one")
    value = float(hits[0]["rtt_ms"])
    if not value > 0 or not math.isfinite(value):
        raise ConfigError(f"buffer data {model.data.name}: {technology} {test} {direction} "
                          f"rtt_ms = {value!r} must be a number > 0")
    return value


def _panel_technology(model: MeasuredModel, technology: str, household_id: int) -> str | None:
    """The panel's technology of a household's, None for a qfactor fallback."""
    if technology in model.technologies:
        return model.technologies[technology]
    if technology in model.qfactor_fallback:
        return None
    raise ConfigError(f"household {household_id}: technology {technology!r} has no buffer in "
                      f"model {model.name}; allowed: {', '.join(model.known_technologies())}")


def queue_ms(model_name: str, technology: str, direction: str,
             household_id: int = 0) -> float | None:
    """A model's queueing delay (ms) for a technology and direction: a measured model's loaded
    minus idle RTT, rounded to the microsecond the data has; a fixed model's N (any
    technology); None where the model keeps qfactor x BDP (the qfactor model, and a technology
    the panel has no number for)."""
    check_model(model_name)
    if direction not in DIRECTIONS:
        raise ConfigError(f"direction {direction!r} must be one of {', '.join(DIRECTIONS)}")
    fixed = fixed_ms(model_name)
    if fixed is not None:
        return float(fixed)
    if policer.burst_ms(model_name) is not None:
        return 0.0  # a policer holds no queue
    model = MODELS[model_name]
    if model is None:
        return None
    panel = _panel_technology(model, technology, household_id)
    if panel is None:
        return None
    loaded = panel_rtt_ms(model, "latency_under_load", panel, direction)
    idle = panel_rtt_ms(model, "idle", panel)
    if not loaded > idle:
        raise ConfigError(f"buffer data {model.data.name}: {panel} {direction} loaded RTT "
                          f"{loaded} ms is not above the idle {idle} ms")
    return round(loaded - idle, 3)


@dataclass(frozen=True)
class Buffer:
    """One direction's FIFO and where its size comes from."""

    model: str
    queue_kbit: float  # the size before truncation to bytes (bytes = floor(q * 125))
    queue_bytes: int
    #: the model's queueing delay (ms at the link's rate), None for qfactor x BDP
    queue_ms: float | None
    source: str  # one line: the formula, the panel's numbers or the fixed delay
    floored: bool = False  # raised to MIN_QUEUE_BYTES


def qfactor_buffer(qfactor: float, rtt_ms: float, rate_kbit: int, model: str = DEFAULT_MODEL,
                   why: str = "") -> Buffer:
    """qfactor x BDP: exactly the paper's formula (EXPERIMENT.md)."""
    queue_kbit = qfactor * rtt_ms * rate_kbit / 1000
    queue_bytes = math.floor(qfactor * rtt_ms * rate_kbit / 8 + _EPS)
    return Buffer(model, queue_kbit, queue_bytes, None, f"{qfactor:g} x BDP{why}")


def buffer(model_name: str, direction: str, rate_kbit: int, rtt_ms: float, qfactor: float,
           technology: str | None = None, household_id: int = 0) -> Buffer:
    """The FIFO of one direction of a link under a model (``technology``: the data set's,
    needed by a measured model, not by a fixed one). Raises ConfigError for an unknown model
    or technology."""
    check_model(model_name)
    fixed = fixed_ms(model_name)
    if fixed is not None:
        if direction not in DIRECTIONS:
            raise ConfigError(f"direction {direction!r} must be one of {', '.join(DIRECTIONS)}")
        return _delay_buffer(model_name, float(fixed), rate_kbit,
                             f"fixed {fixed} ms of queue at the link's rate")
    burst_ms = policer.burst_ms(model_name)
    if burst_ms is not None:
        burst, floored = policer.burst_bytes(burst_ms, rate_kbit)
        q = burst + MIN_QUEUE_BYTES  # so nothing the policer admits is dropped here
        return Buffer(model_name, q / 125, q, 0.0,
                      f"policed: a {burst}-byte token bucket ({burst_ms} ms at the rate"
                      f"{', raised to the floor' if floored else ''}) drops what exceeds the "
                      "rate; no shaper, the FIFO passes what it admits at line speed", floored)
    model = MODELS[model_name]
    if model is None:
        return qfactor_buffer(qfactor, rtt_ms, rate_kbit)
    if not isinstance(technology, str):
        raise ConfigError(f"household {household_id}: buffer model {model.name} needs the "
                          f"household's technology, got {technology!r}")
    ms = queue_ms(model.name, technology, direction, household_id)
    if ms is None:
        return qfactor_buffer(qfactor, rtt_ms, rate_kbit, model.name,
                              f" (the panel has no {technology} number)")
    panel = model.technologies[technology]
    source = (f"{panel} {direction} {model.statistic} {model.period_start}: loaded "
              f"{panel_rtt_ms(model, 'latency_under_load', panel, direction):g} - idle "
              f"{panel_rtt_ms(model, 'idle', panel):g} ms")
    return _delay_buffer(model.name, ms, rate_kbit, source)


def _delay_buffer(model_name: str, ms: float, rate_kbit: int, source: str) -> Buffer:
    """``ms`` of queue at ``rate_kbit``: ``floor(ms * rate_kbit / 8)`` bytes, at least
    :data:`MIN_QUEUE_BYTES` (then ``floored``, and the source says so)."""
    queue_bytes = math.floor(ms * rate_kbit / 8 + _EPS)
    if queue_bytes < MIN_QUEUE_BYTES:
        return Buffer(model_name, MIN_QUEUE_BYTES / 125, MIN_QUEUE_BYTES, ms,
                      f"{source}; floor of {MIN_QUEUE_PACKETS} frames", floored=True)
    return Buffer(model_name, ms * rate_kbit / 1000, queue_bytes, ms, source)
