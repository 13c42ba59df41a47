"""The allowed range of every number and the allowed form of every name a user gives, in one
place: config keys (latency_divide.config, after the schema's type checks) and command-line
flags (latency_divide.cli) are checked here, and an error names the key, the value and what is
allowed. The ranges are what a real experiment on a home-broadband link needs, with room to
spare, so that a typo (1e6 BDPs of queue, a NaN, a 300-character name) is stopped before it
shapes a link or names a directory.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from latency_divide.errors import ConfigError


class Range(NamedTuple):
    lo: float
    hi: float
    unit: str = ""
    integer: bool = False
    lo_open: bool = False  # lo itself not allowed

    def describe(self) -> str:
        lo = f"more than {self.lo:g}" if self.lo_open else f"{self.lo:g}"
        unit = f" {self.unit}" if self.unit else ""
        kind = "an integer" if self.integer else "a number"
        return f"{kind} from {lo} to {self.hi:g}{unit}"


RANGES: dict[str, Range] = {
    "qfactor": Range(0.05, 100, "bandwidth-delay products"),
    "delta": Range(0, 1, lo_open=True),
    "duration_s": Range(1, 3600, "s"),
    "idle_s": Range(0, 600, "s"),
    "ping_interval_s": Range(0.002, 10, "s"),
    "queue_interval_s": Range(0.01, 10, "s"),
    "window_bytes": Range(1024, 1 << 30, "bytes", integer=True),
    "repetitions": Range(1, 1000, integer=True),
    "repetition": Range(1, 1000, integer=True),
    "retries": Range(0, 10, integer=True),
    "seed": Range(0, 2**32 - 1, integer=True),
    "price_usd": Range(0, 100_000, "US $ a month"),
    "sample": Range(1, 100_000, "households", integer=True),
    "limit_mb": Range(0.001, 100_000, "MB"),
    "skip_s": Range(0, 3600, "s"),
}


#: a name that becomes a directory name (variant, bucket): letters, digits and . _ + -, not
#: starting with a dot or dash, at most 40 characters; \A...\Z, not ^...$ ($ accepts "name\n")
NAME = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.+-]{0,39}\Z")


def check(key: str, value, where: str | None = None):
    """``value`` if it is a finite number in RANGES[key], else ConfigError naming ``where``
    (default: the key), the value and the range. Integers must be integers (not True)."""
    r = RANGES[key]
    name = where or key
    bad = isinstance(value, bool) or not isinstance(value, (int, float))
    if not bad and r.integer and not isinstance(value, int):
        bad = True
    if not bad and not math.isfinite(value):
        bad = True
    if not bad:
        low_ok = value > r.lo if r.lo_open else value >= r.lo
        bad = not (low_ok and value <= r.hi)
    if bad:
        raise ConfigError(f"{name} = {value!r}: allowed is {r.describe()}")
    return value


def check_name(kind: str, value, where: str | None = None) -> str:
    """A variant or bucket name that is safe as a directory name (NAME)."""
    if not isinstance(value, str) or not NAME.match(value):
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:50] + "... (" + (
            f"{len(value)} characters)" if isinstance(value, str) else "...)")
        raise ConfigError(f"{where or kind} = {shown}: a {kind} name is 1 to 40 of letters, "
                          "digits and . _ + -, starting with a letter or digit")
    return value
