"""The host record: what the host check (ops.hostcheck) measured on this host in this boot, and the
one number the rest of the package takes from it, the host's **cost factor**.

A record is ``results/host/<hostname>-<boot_id[:8]>.json`` (paths.HOST_RECORDS), schema
:data:`SCHEMA`; it holds the hostprobe document (tools/hostprobe, schema :data:`PROBE_SCHEMA`)
and the host's facts. The admission's constants (ops.admission) are CPU time on the host they
were fitted on; a timer wake-up is what the tool ends and the delay line spend their CPU on, and
it cost three times as much on another VM of the same kind (issue 57). So:

    cost factor = this host's CPU per timer wake-up / the fitted host's, clamped to [0.5, 4]

both taken as the median over the probe's rows at the gaps trials wake at most
(:data:`COST_GAPS_US`: 100 µs, a fast link's frames and the delay line's cap; 1 ms, a slow
link's), each row one (gap, CPU). The fitted host's numbers (:data:`REFERENCE_WAKE_CPU_US`) are
bench/bench_wake_floor.py's on 2026-11-29 (bench/baselines/wake-floor-2026-11-29.txt, AMD EPYC,
kernel 6.18.44-fc-v669): 11.2 µs at 0.1 ms and 20.1 at 1 ms with guest halt polling held as
trials hold it (median 15.65), 21.4 and 27.1 without (24.25). The host check holds halt polling
as trials do while it probes, and its record says which reference it was compared with.

``LATENCY_DIVIDE_HOST_FACTOR`` (a number, 0.5 to 4) sets the factor by hand and wins over any
record (1 turns the scaling off). Read here, in the testbed stage, because a trial's meta.json
names the record (trial.run) and the admission scales by it (ops.admission).
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import statistics
from pathlib import Path

from latency_divide.errors import ConfigError
from latency_divide.paths import HOST_RECORDS

#: This record's format.
SCHEMA = "latency-divide-host/1"
#: The hostprobe document it embeds (tools/hostprobe, `latency-divide host-probe --json`).
PROBE_SCHEMA = "hostprobe/1"
#: The gaps (µs) whose rows make a host's cost per wake-up.
COST_GAPS_US = (100.0, 1000.0)
#: The fitted host's CPU per timer wake-up (µs), median of the rows at COST_GAPS_US, by whether
#: guest halt polling was held (bench/baselines/wake-floor-2026-11-29.txt).
REFERENCE_WAKE_CPU_US = {"halt_poll_on": statistics.median((11.2, 20.1)),
                         "halt_poll_off": statistics.median((21.4, 27.1))}
REFERENCE_SOURCE = "bench/baselines/wake-floor-2026-11-29.txt"
FACTOR_MIN, FACTOR_MAX = 0.5, 4.0
FACTOR_ENV = "LATENCY_DIVIDE_HOST_FACTOR"
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
#: ``force`` (measure again), ``skip`` (no check), ``go-on`` (report a refusal, run anyway):
#: read by the local check (ops.hostcheck) and the SSH testbed's node check (testbed.ssh.nodecheck)
CHECK_ENV = "LATENCY_DIVIDE_HOST_CHECK"
CHECK_CHOICES = ("", "force", "skip", "go-on")
#: A row's p99 counts where it rests on this many wake-ups (fewer: it is the row's maximum).
MIN_WAKEUPS_P99 = 200


def check_mode(env: dict | None = None) -> str:
    raw = (os.environ if env is None else env).get(CHECK_ENV, "").strip().lower()
    if raw not in CHECK_CHOICES:
        raise ConfigError(f"{CHECK_ENV}={raw!r}: use force (measure the host again), skip (no "
                          "host check) or go-on (run even where the host check refuses)")
    return raw


def boot_id() -> str:
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return "unknown-boot"


def hostname() -> str:
    """This host's name as a file name: letters, digits, '.', '-', '_' (others become '_')."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname()) or "host"


def record_path(records: Path | None = None, host: str | None = None,
                boot: str | None = None) -> Path:
    """Where this host's record of this boot is (or goes)."""
    return (Path(records or HOST_RECORDS)
            / f"{host or hostname()}-{(boot or boot_id())[:8]}.json")


def check_probe(doc) -> dict:
    """A hostprobe document as the rest of the package reads it, or a ValueError naming what is
    missing or wrong."""
    if not isinstance(doc, dict) or doc.get("schema") != PROBE_SCHEMA:
        got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise ValueError(f"host probe output: schema {got!r}, expected {PROBE_SCHEMA!r}")
    rows = doc.get("timer")
    if not isinstance(rows, list) or not rows:
        raise ValueError("host probe output: no 'timer' rows")
    for i, row in enumerate(rows):
        for key in ("gap_us", "cpu", "cpu_us_per_wakeup", "late_us"):
            if key not in row:
                raise ValueError(f"host probe output: timer row {i} has no {key!r}")
        late = row["late_us"]
        if not all(isinstance(late.get(q), (int, float)) for q in ("p50", "p99", "p999", "max")):
            raise ValueError(f"host probe output: timer row {i}'s late_us lacks p50/p99/p999/max")
    if not isinstance(doc.get("steal_pct", 0.0), (int, float)):
        raise ValueError(f"host probe output: steal_pct {doc.get('steal_pct')!r} is no number")
    return doc


def wake_cpu_us(probe: dict, gaps_us=COST_GAPS_US) -> float:
    """The host's CPU per timer wake-up (µs): the median over the probe's rows at ``gaps_us``."""
    vals = [float(r["cpu_us_per_wakeup"]) for r in probe["timer"]
            if any(abs(float(r["gap_us"]) - g) < 1e-6 * g for g in gaps_us)]
    if not vals:
        raise ValueError(f"host probe output: no timer row at the gaps {list(gaps_us)} µs")
    return statistics.median(vals)


def reference_key(halt_poll_ns: int | None) -> str:
    """Which fitted number a probe compares with: halt polling held (as on the fitted host's
    trials) or not. A host without the governor (None) is compared as polling: bare metal does
    not pay the VM exits halt polling saves."""
    return "halt_poll_off" if halt_poll_ns == 0 else "halt_poll_on"


def cost_factor(wake_us: float, reference_us: float) -> tuple[float, float]:
    """(clamped factor, raw ratio) of a host's wake-up cost against the fitted host's."""
    raw = wake_us / reference_us
    return min(FACTOR_MAX, max(FACTOR_MIN, raw)), raw


def factor_fields(probe: dict, halt_poll_ns: int | None) -> dict:
    """A record's cost fields from a checked probe document: the CPU per wake-up, the fitted
    host's number it is compared with (by the halt polling held while it probed), the factor."""
    wake = wake_cpu_us(probe)
    key = reference_key(halt_poll_ns)
    ref = REFERENCE_WAKE_CPU_US[key]
    factor, raw = cost_factor(wake, ref)
    return {"wake_cpu_us": round(wake, 3),
            "reference": {"key": key, "wake_cpu_us": ref, "source": REFERENCE_SOURCE,
                          "gaps_us": list(COST_GAPS_US)},
            "cost_factor": round(factor, 4), "cost_factor_raw": round(raw, 4)}


def lateness_p99_us(record: dict, gap_us: float) -> tuple[float, float]:
    """(the probe gap nearest ``gap_us`` on a log scale among those with MIN_WAKEUPS_P99 on
    every CPU, else among all; the worst p99 lateness there over the CPUs, µs)."""
    rows = record["probe"]["timer"]
    gaps = sorted({float(r["gap_us"]) for r in rows})
    enough = [g for g in gaps if all(int(r.get("wakeups") or 0) >= MIN_WAKEUPS_P99
                                     for r in rows if float(r["gap_us"]) == g)]
    near = min(enough or gaps, key=lambda g: abs(math.log(g / gap_us)))
    return near, max(float(r["late_us"]["p99"]) for r in rows if float(r["gap_us"]) == near)


_CACHE: dict = {}


def current_record(records: Path | None = None) -> tuple[Path, dict] | None:
    """This host's newest valid record of this boot, or None (read again only when the
    directory changed: Snakemake asks for every trial's host_load)."""
    d = Path(records or HOST_RECORDS)
    host, boot = hostname(), boot_id()
    files = []
    for p in d.glob(f"{host}-{boot[:8]}*.json"):
        try:
            st = p.stat()
        except OSError:
            continue
        files.append((str(p), st.st_ino, st.st_mtime_ns, st.st_size))
    key = (str(d.resolve()), host, boot, tuple(sorted(files)))
    if key not in _CACHE:
        _CACHE.clear()
        _CACHE[key] = _newest(files, host, boot)
    return _CACHE[key]


def _newest(files, host: str, boot: str) -> tuple[Path, dict] | None:
    found = []
    for name, _ino, mtime, _size in files:
        p = Path(name)
        try:
            rec = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if (isinstance(rec, dict) and rec.get("schema") == SCHEMA and rec.get("boot_id") == boot
                and rec.get("hostname") == host):
            found.append((mtime, p, rec))
    if not found:
        return None
    _, p, rec = max(found, key=lambda t: t[0])
    return p, rec


def factor_by_hand(env: dict | None = None) -> float | None:
    raw = (os.environ if env is None else env).get(FACTOR_ENV)
    if raw in (None, ""):
        return None
    try:
        v = float(raw)
    except ValueError:
        v = -1.0
    if not FACTOR_MIN <= v <= FACTOR_MAX:
        raise ConfigError(f"{FACTOR_ENV}={raw!r}: must be a number from {FACTOR_MIN} to "
                          f"{FACTOR_MAX} (the host's cost per wake-up against the fitted host's;"
                          " 1 turns the host scaling off)")
    return v


def host_factor(records: Path | None = None) -> tuple[float, str]:
    """(the cost factor a trial's cost is scaled by here, where it came from): the environment's,
    this boot's record, or 1.0 without one (said so)."""
    by_hand = factor_by_hand()
    if by_hand is not None:
        return by_hand, f"set by hand ({FACTOR_ENV})"
    cur = current_record(records)
    if cur is None:
        return 1.0, ("no host record for this boot (`latency-divide host-check` makes one): "
                     "the fitted host's costs, factor 1.0")
    path, rec = cur
    return float(rec["cost_factor"]), str(path)


def meta_ref(records: Path | None = None) -> dict:
    """What a trial's meta.json records of the host record (key ``host.record``): its path, schema
    and cost factor, or why there is none."""
    factor, source = host_factor(records)
    cur = current_record(records)
    if cur is None:
        return {"path": None, "schema": None, "cost_factor": factor, "why": source}
    return {"path": str(cur[0]), "schema": cur[1].get("schema"), "cost_factor": factor,
            **({"why": source} if source != str(cur[0]) else {})}
